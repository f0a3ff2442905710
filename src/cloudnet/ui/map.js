// The topology map: an SVG drawn from layout.js, with zoom (wheel, buttons, + and -), pan (drag, arrow keys),
// search (dims what does not match, Enter centres on the first match) and groups that expand on activation.

import { forwardsOf, list } from "./api.js";
import { h, s } from "./dom.js";
import { instanceSearch, layout } from "./layout.js";

export async function loadTopology() {
  const [networks, subnets, routers, ports, instances, floatingips] = await Promise.all([
    list("networks", "networks"), list("subnets", "subnets"), list("routers", "routers"),
    list("ports", "ports", { device_owner: "network:router_interface" }), list("instances", "instances"),
    list("floatingips", "floatingips"),
  ]);
  // forwards are listed per network: those with a router only (a forward needs an uplink)
  const routed = new Set(ports.map((p) => p.network_id));
  const forwards = await forwardsOf(networks.filter((n) => routed.has(n.id)));
  return { networks, subnets, routers, ports, instances, floatingips, forwards };
}

export class TopologyMap {
  constructor() {
    this.expanded = new Set();
    this.view = null; // {x, y, w, h}: the viewBox, kept across redraws
    this.term = "";
    this.data = null;
    this.svg = s("svg", { class: "map", tabindex: 0, role: "img", "aria-label": "Topology map (arrows pan, + and - zoom, 0 fits)" });
    this.search = h("input", { type: "search", placeholder: "Search name, address, id", "aria-label": "Search the map" });
    const zoomButton = (text, label, fn) => h("button", { type: "button", class: "small", text, "aria-label": label, onclick: fn });
    this.count = h("span", { class: "muted" });
    this.el = h("section", { class: "map-page" },
      h("div", { class: "toolbar" }, this.search,
        zoomButton("+", "Zoom in", () => this.zoom(0.8)), zoomButton("−", "Zoom out", () => this.zoom(1.25)),
        zoomButton("Fit", "Fit the map", () => this.fit()),
        zoomButton("Expand all", "Expand every group of instances", () => this.expandAll()),
        zoomButton("Group", "Group large networks' instances again", () => { this.expanded.clear(); this.draw(); }),
        this.count),
      this.svg);
    this.search.addEventListener("input", () => { this.term = this.search.value.trim().toLowerCase(); this.draw(); });
    this.search.addEventListener("keydown", (e) => { if (e.key === "Enter") this.centreOnMatch(); });
    this.bindKeys();
  }

  expandAll() {
    for (const n of this.data ? this.data.networks : []) this.expanded.add(n.id);
    this.expanded.add("(no network)");
    this.draw();
  }

  update(data) {
    this.data = data;
    this.draw();
  }

  matches() {
    if (!this.term) return null;
    return (inst) => instanceSearch(inst).includes(this.term);
  }

  draw() {
    if (!this.data) return;
    const { nodes, edges, width, height } = layout(this.data, this.expanded, this.matches());
    this.nodes = nodes;
    const defs = s("defs", {}, s("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto" },
      s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" })));
    const blocks = s("g", { class: "blocks" });
    const lines = s("g", { class: "edges" });
    const boxes = s("g", { class: "nodes" });
    for (const e of edges) {
      const a = nodes.get(e.from), b = nodes.get(e.to);
      if (!a || !b) continue;
      const x1 = a.x + a.w, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2;
      const mid = (x1 + x2) / 2;
      lines.append(s("path", { class: `edge ${e.kind}`, d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`,
        "marker-end": e.kind === "forward" ? "url(#arrow)" : undefined }));
    }
    let shown = 0;
    for (const n of nodes.values()) {
      if (n.kind === "block") {
        blocks.append(s("rect", { class: "block", x: n.x, y: n.y, width: n.w, height: n.h, rx: 6 }));
        continue;
      }
      const hit = this.term && n.search !== undefined && n.search.includes(this.term); // (both lowercase)
      const dim = this.term && !hit && n.kind !== "group";
      const g = s("g", { class: `node ${n.kind}${hit ? " match" : ""}${dim ? " dim" : ""}`, transform: `translate(${n.x},${n.y})`,
        "data-id": n.id, "data-kind": n.kind.split(" ")[0] },
        s("title", { text: n.title }),
        s("rect", { width: n.w, height: n.h, rx: 4 }),
        s("text", { x: 6, y: 13, class: "label", text: clip(n.label, 24) }),
        s("text", { x: 6, y: 25, class: "sub", text: clip(n.sub || "", 30) }));
      if (n.kind === "group") {
        g.setAttribute("tabindex", "0");
        g.setAttribute("role", "button");
        g.setAttribute("aria-label", n.title);
        const open = () => { this.expanded.add(n.net); this.draw(); };
        g.addEventListener("click", open);
        g.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); } });
      }
      if (n.kind.startsWith("instance")) shown++;
      boxes.append(g);
    }
    this.svg.replaceChildren(defs, blocks, lines, boxes); // (built detached: one change of the document)
    this.count.textContent = `${this.data.instances.length} instances (${shown} drawn), ${this.data.networks.length} networks, ${this.data.routers.length} routers`;
    this.extent = { width, height };
    if (!this.view) this.fit();
    else this.apply();
  }

  apply() {
    const v = this.view;
    this.svg.setAttribute("viewBox", `${v.x} ${v.y} ${v.w} ${v.h}`);
  }

  fit() {
    const { width, height } = this.extent || { width: 1000, height: 600 };
    // readable first: never smaller than a 1400-unit-wide window, the top of the map in view
    const w = Math.max(width, 1400);
    this.view = { x: 0, y: 0, w, h: Math.max(Math.min(height, w * 0.6), 400) };
    this.apply();
  }

  zoom(factor, cx, cy) {
    const v = this.view;
    const x = cx ?? v.x + v.w / 2, y = cy ?? v.y + v.h / 2;
    const w = Math.min(Math.max(v.w * factor, 200), 20000), k = w / v.w;
    this.view = { x: x - (x - v.x) * k, y: y - (y - v.y) * k, w, h: v.h * k };
    this.apply();
  }

  pan(dx, dy) {
    this.view = { ...this.view, x: this.view.x + dx * this.view.w, y: this.view.y + dy * this.view.h };
    this.apply();
  }

  centreOnMatch() {
    const hit = [...(this.nodes || new Map()).values()].find((n) => n.search && n.search.includes(this.term));
    if (!hit) return;
    const k = Math.min(1, 1000 / this.view.w); // close enough to read its label
    const w = this.view.w * k, hh = this.view.h * k;
    this.view = { x: hit.x + hit.w / 2 - w / 2, y: hit.y - hh / 2, w, h: hh };
    this.apply();
    const el = this.svg.querySelector(`[data-id="${CSS.escape(hit.id)}"]`);
    if (el) { el.setAttribute("tabindex", "-1"); el.focus(); }
  }

  bindKeys() {
    const svg = this.svg;
    svg.addEventListener("keydown", (e) => {
      const keys = { ArrowLeft: [-0.1, 0], ArrowRight: [0.1, 0], ArrowUp: [0, -0.1], ArrowDown: [0, 0.1] };
      if (keys[e.key]) this.pan(...keys[e.key]);
      else if (e.key === "+" || e.key === "=") this.zoom(0.8);
      else if (e.key === "-") this.zoom(1.25);
      else if (e.key === "0") this.fit();
      else return;
      e.preventDefault();
    });
    const point = (e) => {
      const r = svg.getBoundingClientRect(), v = this.view;
      const scale = Math.max(v.w / r.width, v.h / r.height); // preserveAspectRatio meet
      return { x: v.x + (e.clientX - r.left - (r.width - v.w / scale) / 2) * scale, y: v.y + (e.clientY - r.top - (r.height - v.h / scale) / 2) * scale, scale };
    };
    svg.addEventListener("wheel", (e) => {
      e.preventDefault();
      const p = point(e);
      this.zoom(e.deltaY > 0 ? 1.15 : 1 / 1.15, p.x, p.y);
    }, { passive: false });
    let drag = null;
    svg.addEventListener("pointerdown", (e) => {
      if (e.target.closest(".group")) return;
      drag = { x: e.clientX, y: e.clientY, view: { ...this.view }, scale: point(e).scale };
      svg.setPointerCapture(e.pointerId);
    });
    svg.addEventListener("pointermove", (e) => {
      if (!drag) return;
      this.view = { ...drag.view, x: drag.view.x - (e.clientX - drag.x) * drag.scale, y: drag.view.y - (e.clientY - drag.y) * drag.scale };
      this.apply();
    });
    svg.addEventListener("pointerup", () => { drag = null; });
  }
}

function clip(text, n) {
  const t = String(text);
  return t.length > n ? t.slice(0, n - 1) + "…" : t;
}
