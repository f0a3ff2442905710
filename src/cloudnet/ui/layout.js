// The topology map's layout, from the API's lists alone (no DOM built here): columns left to right are external networks
// (with the addresses forwards and floating IPs listen on), routers, networks, and each network's instances in a
// grid inside its block. A network with more instances than GROUP_LIMIT shows one group node until expanded.

import { name } from "./dom.js";

const GROUP_LIMIT = 40;
const COLS = 4;
const X = { ext: 20, router: 300, network: 540, inst: 800 };
const W = { ext: 220, router: 180, network: 200, inst: 170 };
const H = 30;
const ROW = 40;
const GAP = 24;

const collator = new Intl.Collator(undefined, { numeric: true }); // vm-2 before vm-10
const byLabel = (a, b) => collator.compare(name(a), name(b));
const addressesOf = (inst) => inst.nets.flatMap((n) => n.fixed_ips.map((f) => f.ip_address));
const lower = (...parts) => parts.join(" ").toLowerCase(); // what a search term is matched against

/** What a search of the map matches an instance by (lowercase): its name, id and addresses. */
export function instanceSearch(inst) {
  return lower(inst.name, inst.id, ...addressesOf(inst));
}

/** `items` by the value of `key`, a list each (built once a layout, not scanned for every node). */
function groupBy(items, key) {
  const out = new Map();
  for (const item of items) {
    const k = key(item);
    if (!out.has(k)) out.set(k, []);
    out.get(k).push(item);
  }
  return out;
}

/** Nodes {id, kind, x, y, w, h, label, sub, title, search (lowercase)} and edges {from, to, kind}. */
export function layout(data, expanded, matches) {
  const nodes = new Map();
  const edges = [];
  const add = (node) => (nodes.set(node.id, { h: H, ...node }), node);
  const owner = new Map(); // an address -> the node holding it (an instance, a router's gateway)
  const nets = data.networks.filter((n) => !n["router:external"]).sort(byLabel);
  const exts = data.networks.filter((n) => n["router:external"]).sort(byLabel);
  const cidrs = groupBy(data.subnets, (s) => s.network_id);
  const subnetsOf = (id) => (cidrs.get(id) || []).map((s) => s.cidr).join(" ");

  // instances by their first network
  const byNet = new Map(nets.map((n) => [n.id, []]));
  const homeless = [];
  for (const inst of [...data.instances].sort(byLabel)) {
    const first = inst.nets.find((n) => byNet.has(n.network_id));
    (first ? byNet.get(first.network_id) : homeless).push(inst);
  }
  if (homeless.length) {
    const id = "(no network)";
    nets.push({ id, name: id });
    byNet.set(id, homeless);
  }

  let y = 20;
  for (const net of nets) {
    const members = byNet.get(net.id);
    const open = members.length <= GROUP_LIMIT || expanded.has(net.id);
    const shown = open ? members : members.filter((i) => matches && matches(i));
    const rows = Math.max(1, Math.ceil((shown.length + (open ? 0 : 1)) / COLS));
    const height = rows * ROW + 20;
    const subnets = subnetsOf(net.id);
    add({ id: net.id, kind: "network", x: X.network, y: y + height / 2 - H / 2, w: W.network, label: name(net),
      sub: subnets, title: `network ${net.name} ${net.id}`, search: lower(net.name, net.id, subnets) });
    add({ id: `block:${net.id}`, kind: "block", x: X.inst - 12, y: y - 4, w: COLS * (W.inst + 12) + 12, h: height, label: "" });
    let slot = 0;
    const place = () => ({ x: X.inst + (slot % COLS) * (W.inst + 12), y: y + 8 + Math.floor(slot++ / COLS) * ROW });
    if (!open) {
      add({ id: `group:${net.id}`, kind: "group", ...place(), w: W.inst, label: `${members.length} instances`,
        sub: "Enter: expand", title: `${members.length} instances on ${name(net)}: activate to expand`, net: net.id });
      for (const inst of members) owner.set(inst.id, `group:${net.id}`);
    }
    for (const inst of shown) {
      const addrs = addressesOf(inst);
      add({ id: inst.id, kind: `instance ${inst.kind} ${String(inst.status).toLowerCase()}`, ...place(), w: W.inst,
        label: name(inst), sub: addrs.join(" "), title: `${inst.kind} ${inst.name} (${inst.status}) ${addrs.join(", ")}`,
        search: instanceSearch(inst) });
      owner.set(inst.id, inst.id);
    }
    for (const inst of members) {
      const at = owner.get(inst.id);
      for (const nic of inst.nets) {
        for (const f of nic.fixed_ips) owner.set(f.ip_address, at);
        if (nic.network_id !== net.id && nodes.has(nic.network_id) && at === inst.id) edges.push({ from: nic.network_id, to: at, kind: "nic" });
      }
    }
    y += height + GAP;
  }

  // routers at the height of their networks; external networks at their routers'
  const links = groupBy(data.ports, (p) => p.device_id);
  const attached = (r) => (links.get(r.id) || []).map((p) => p.network_id);
  const mean = (ids, fallback) => {
    const ys = ids.filter((id) => nodes.has(id)).map((id) => nodes.get(id).y);
    return ys.length ? ys.reduce((a, b) => a + b, 0) / ys.length : fallback;
  };
  let free = 20;
  const spread = (items, at) => {
    // in order of wanted height, never overlapping
    const placed = items.map((it) => [it, at(it)]).sort((a, b) => a[1] - b[1]);
    let next = 20;
    return placed.map(([it, want]) => {
      const yy = Math.max(want, next);
      next = yy + ROW;
      return [it, yy];
    });
  };
  for (const [r, ry] of spread(data.routers, (r) => mean(attached(r), (free += ROW)))) {
    const gw = r.external_gateway_info;
    const gwAddrs = gw ? (gw.external_fixed_ips || []).map((f) => f.ip_address) : [];
    add({ id: r.id, kind: "router", x: X.router, y: ry, w: W.router, label: name(r), sub: gwAddrs.join(" "),
      title: `router ${r.name} ${r.id}`, search: lower(r.name, r.id, ...gwAddrs) });
    for (const net of attached(r)) if (nodes.has(net)) edges.push({ from: r.id, to: net, kind: "link" });
    for (const a of gwAddrs) owner.set(a, r.id);
  }
  const uplinks = groupBy(data.routers.filter((r) => r.external_gateway_info), (r) => r.external_gateway_info.network_id);
  const gateways = (n) => (uplinks.get(n.id) || []).map((r) => r.id);
  let extBottom = 20;
  for (const [n, ny] of spread(exts, (n) => mean(gateways(n), 20))) {
    const subnets = subnetsOf(n.id);
    add({ id: n.id, kind: "external", x: X.ext, y: ny, w: W.ext, label: name(n), sub: subnets,
      title: `external network ${n.name}`, search: lower(n.name, n.id, subnets) });
    for (const r of gateways(n)) edges.push({ from: n.id, to: r, kind: "gateway" });
    extBottom = Math.max(extBottom, ny + ROW);
  }

  // what listens on an external address: forwards (to their targets) and floating IPs (to their fixed address)
  let ly = Math.max(extBottom + GAP, 20);
  const listen = (key, address, targets, title) => {
    const id = `listen:${key}`;
    add({ id, kind: "listen", x: X.ext + 20, y: ly, w: W.ext - 20, label: address, sub: targets.join(" "), title,
      search: lower(address, ...targets) });
    ly += ROW;
    for (const t of new Set(targets)) if (owner.has(t)) edges.push({ from: id, to: owner.get(t), kind: "forward" });
  };
  for (const f of data.forwards) {
    const targets = [(f.config || {}).target_address, ...(f.ports || []).map((p) => p.target_address)].filter(Boolean);
    listen(`${f.network_id}/${f.listen_address}`, f.listen_address, targets, `forward ${f.listen_address} → ${targets.join(", ")}`);
  }
  const forwarded = new Set(data.forwards.map((f) => f.listen_address));
  for (const fip of data.floatingips) {
    if (forwarded.has(fip.floating_ip_address)) continue; // one object, shown by both faces: drawn once
    listen(fip.id, fip.floating_ip_address, fip.fixed_ip_address ? [fip.fixed_ip_address] : [], `floating IP ${fip.floating_ip_address}`);
  }
  return { nodes, edges, width: X.inst + COLS * (W.inst + 12) + 20, height: Math.max(y, ly, free) + 20 };
}
