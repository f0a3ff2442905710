// The list pages: each reads what it shows (`load`), draws it (`view`, again on every live change) and offers
// its forms (built once, so what is typed survives a refresh).

import { forwardsOf, get, list, owned, post, put, session } from "./api.js";
import { addresses, h, name, short, table } from "./dom.js";
import { button, deleteButton, form, formatPorts, input, parsePorts, select } from "./forms.js";

const byId = (items) => Object.fromEntries(items.map((i) => [i.id, i]));
const q = encodeURIComponent;

/** The page's reads at once: {key: promise} -> {key: value}. */
async function all(reads) {
  const keys = Object.keys(reads);
  const values = await Promise.all(Object.values(reads));
  return Object.fromEntries(keys.map((k, i) => [k, values[i]]));
}

function networks(app) {
  const netSelect = select([], (n) => n.id, name);
  const forms = [
    form(app, "New network", [
      ["name", "Name", input({ required: true })],
      ["external", "External", h("input", { type: "checkbox" })],
    ], (v) => post("/v2.0/networks", { network: owned({ name: v.name, "router:external": v.external }) })),
    form(app, "New subnet", [
      ["network_id", "Network", netSelect],
      ["name", "Name", input()],
      ["cidr", "CIDR", input({ required: true, placeholder: "10.0.0.0/24" })],
    ], (v) => post("/v2.0/subnets", { subnet: owned({ network_id: v.network_id, name: v.name, cidr: v.cidr,
      ip_version: v.cidr.includes(":") ? 6 : 4 }) })),
  ];
  return {
    forms,
    load: () => all({ networks: list("networks", "networks"), subnets: list("subnets", "subnets") }),
    view: ({ networks: nets, subnets }) => {
      netSelect.fill(nets);
      return table([
        ["Name", (n) => n.name],
        ["ID", (n) => short(n.id)],
        ["Project", (n) => n.project_id],
        ["External", (n) => (n["router:external"] ? "yes" : "")],
        ["Subnets", (n) => subnets.filter((s) => s.network_id === n.id).map((s) => `${name(s)} ${s.cidr}`).join(", ")],
        ["Status", (n) => n.status],
        ["", (n) => deleteButton(app, `network ${n.name}`, `/v2.0/networks/${q(n.id)}`)],
      ], nets, "Networks");
    },
  };
}

function ports() {
  return {
    forms: [],
    load: async () => {
      const d = await all({ ports: list("ports", "ports"), networks: list("networks", "networks") });
      return { ...d, networks: byId(d.networks) };
    },
    view: ({ ports: items, networks: nets }) => table([
      ["Name", (p) => p.name],
      ["ID", (p) => short(p.id)],
      ["Network", (p) => name(nets[p.network_id])],
      ["Addresses", (p) => addresses(p.fixed_ips)],
      ["MAC", (p) => p.mac_address],
      ["Owner", (p) => p.device_owner],
      ["Host", (p) => p["binding:host_id"]],
      ["Status", (p) => p.status],
    ], items, "Ports"),
  };
}

function routers(app) {
  const extSelect = select([], (n) => n.id, name, "(no gateway)");
  const routerSelect = select([], (r) => r.id, name);
  const subnetSelect = select([], (s) => s.id, (s) => `${name(s)} ${s.cidr}`);
  const forms = [
    form(app, "New router", [["name", "Name", input({ required: true })], ["external", "Gateway", extSelect]],
      (v) => post("/v2.0/routers", { router: owned({ name: v.name,
        ...(v.external ? { external_gateway_info: { network_id: v.external } } : {}) }) })),
    form(app, "Attach subnet", [["router", "Router", routerSelect], ["subnet", "Subnet", subnetSelect]],
      (v) => put(`/v2.0/routers/${q(v.router)}/add_router_interface`, { subnet_id: v.subnet }), "Attach"),
  ];
  return {
    forms,
    load: () => all({
      routers: list("routers", "routers"),
      networks: list("networks", "networks"),
      subnets: list("subnets", "subnets"),
      ports: list("ports", "ports", { device_owner: "network:router_interface" }),
    }),
    view: (d) => {
      const nets = byId(d.networks);
      extSelect.fill(d.networks.filter((n) => n["router:external"]));
      routerSelect.fill(d.routers);
      subnetSelect.fill(d.subnets);
      return table([
        ["Name", (r) => r.name],
        ["ID", (r) => short(r.id)],
        ["Gateway", (r) => (r.external_gateway_info ? `${name(nets[r.external_gateway_info.network_id])} ${addresses(r.external_gateway_info.external_fixed_ips)}` : "")],
        ["Interfaces", (r) => d.ports.filter((p) => p.device_id === r.id).map((p) => `${name(nets[p.network_id])} ${addresses(p.fixed_ips)}`).join(", ")],
        ["Status", (r) => r.status],
        ["", (r) => deleteButton(app, `router ${r.name}`, `/v2.0/routers/${q(r.id)}`)],
      ], d.routers, "Routers");
    },
  };
}

function instances(app) {
  return {
    forms: [],
    load: async () => {
      const d = await all({ instances: list("instances", "instances"), networks: list("networks", "networks") });
      return { ...d, networks: byId(d.networks) };
    },
    view: ({ instances: items, networks: nets }) => table([
      ["Name", (i) => i.name],
      ["Kind", (i) => i.kind],
      ["Host", (i) => i.host],
      ["Addresses", (i) => i.nets.map((n) => `${name(nets[n.network_id])}: ${addresses(n.fixed_ips)}`).join("; ")],
      ["Status", (i) => i.status],
      ["Reason", (i) => i.status_reason],
      ["", (i) => deleteButton(app, `instance ${i.name}`, `/v2.0/instances/${q(i.id)}`)],
    ], items, "Instances"),
  };
}

function securityGroups(app) {
  const groupSelect = select([], (g) => g.id, name);
  const forms = [
    form(app, "New security group", [["name", "Name", input({ required: true })]],
      (v) => post("/v2.0/security-groups", { security_group: owned({ name: v.name }) })),
    form(app, "New rule", [
      ["group", "Group", groupSelect],
      ["direction", "Direction", select([{ v: "ingress" }, { v: "egress" }], (o) => o.v, (o) => o.v)],
      ["protocol", "Protocol", input({ placeholder: "tcp" })],
      ["ports", "Ports", input({ placeholder: "22 or 8000-8080" })],
      ["remote", "Remote CIDR", input({ placeholder: "0.0.0.0/0" })],
    ], (v) => {
      const [min, max] = v.ports ? v.ports.split("-") : [];
      return post("/v2.0/security-group-rules", { security_group_rule: owned({
        security_group_id: v.group, direction: v.direction, protocol: v.protocol || null,
        port_range_min: min ? Number(min) : null, port_range_max: max ? Number(max) : min ? Number(min) : null,
        remote_ip_prefix: v.remote || null,
        ethertype: v.remote && v.remote.includes(":") ? "IPv6" : "IPv4" }) });
    }),
  ];
  const rule = (r) => `${r.direction} ${r.ethertype} ${r.protocol || "any"}` +
    (r.port_range_min ? ` ${r.port_range_min}-${r.port_range_max}` : "") +
    (r.remote_ip_prefix ? ` from ${r.remote_ip_prefix}` : r.remote_group_id ? ` group ${short(r.remote_group_id)}` : "");
  return {
    forms,
    load: async () => ({ groups: await list("security-groups", "security_groups") }),
    view: ({ groups }) => {
      groupSelect.fill(groups);
      return table([
        ["Name", (g) => g.name],
        ["ID", (g) => short(g.id)],
        ["Project", (g) => g.project_id],
        ["Rules", (g) => h("ul", { class: "plain" }, (g.security_group_rules || []).map((r) =>
          h("li", {}, rule(r), " ", deleteButton(app, `rule ${rule(r)}`, `/v2.0/security-group-rules/${q(r.id)}`, "Delete", "×"))))],
        ["", (g) => deleteButton(app, `group ${g.name}`, `/v2.0/security-groups/${q(g.id)}`)],
      ], groups, "Security groups");
    },
  };
}

function forwards(app) {
  const netSelect = select([], (n) => n.id, name);
  const portsArea = () => h("textarea", { rows: 3, placeholder: "tcp 80 10.0.0.5 8080" });
  const forms = [
    form(app, "New forward", [
      ["network", "Network", netSelect],
      ["listen_address", "Listen address", input({ required: true, placeholder: "192.0.2.10" })],
      ["target", "Default target", input({ placeholder: "10.0.0.5" })],
      ["ports", "Ports (protocol listen target [port])", portsArea()],
    ], (v) => post(`/v2.0/networks/${q(v.network)}/forwards`, { listen_address: v.listen_address,
      config: v.target ? { target_address: v.target } : {}, ports: parsePorts(v.ports) })),
  ];
  const edit = (f) => {
    const area = portsArea();
    area.value = formatPorts(f.ports);
    area.setAttribute("aria-label", `Ports of ${f.listen_address}`);
    return h("div", { class: "inline" }, area, button(app, "Save ports", () => put(
      `/v2.0/networks/${q(f.network_id)}/forwards/${q(f.listen_address)}`,
      { description: f.description, config: f.config, ports: parsePorts(area.value) }), undefined, `Save ports of ${f.listen_address}`));
  };
  return {
    forms,
    load: async () => {
      const nets = await list("networks", "networks");
      const names = byId(nets);
      const found = await forwardsOf(nets);
      return { networks: nets, forwards: found.map((f) => ({ ...f, network: name(names[f.network_id]) })) };
    },
    view: (d) => {
      netSelect.fill(d.networks);
      return table([
        ["Listen address", (f) => f.listen_address],
        ["Network", (f) => f.network],
        ["Default target", (f) => (f.config || {}).target_address || ""],
        ["Ports", edit],
        ["", (f) => deleteButton(app, `forward ${f.listen_address}`, `/v2.0/networks/${q(f.network_id)}/forwards/${q(f.listen_address)}`)],
      ], d.forwards.map((f) => ({ ...f, id: `${f.network_id}/${f.listen_address}` })), "Forwards");
    },
  };
}

function floatingIps(app) {
  const extSelect = select([], (n) => n.id, name);
  const portSelect = select([], (p) => p.id, (p) => `${name(p)} ${addresses(p.fixed_ips)}`, "(none)");
  const forms = [
    form(app, "New floating IP", [["network", "External network", extSelect], ["port", "Associate to port", portSelect]],
      (v) => post("/v2.0/floatingips", { floatingip: owned({ floating_network_id: v.network, ...(v.port ? { port_id: v.port } : {}) }) }),
      "Allocate"),
  ];
  return {
    forms,
    load: () => all({
      fips: list("floatingips", "floatingips"),
      externals: list("networks", "networks", { "router:external": "true" }),
      // what an address may be associated to: instances' and plain ports, not routers' or DHCP's
      ports: list("ports", "ports").then((items) => items.filter((p) => !String(p.device_owner || "").startsWith("network:"))),
    }),
    view: ({ fips, externals, ports: candidates }) => {
      extSelect.fill(externals);
      portSelect.fill(candidates);
      return table([
        ["Address", (f) => f.floating_ip_address],
        ["Fixed address", (f) => f.fixed_ip_address],
        ["Port", (f) => short(f.port_id)],
        ["Project", (f) => f.project_id],
        ["Status", (f) => f.status],
        ["", (f) => deleteButton(app, f.floating_ip_address, `/v2.0/floatingips/${q(f.id)}`, "Release")],
      ], fips, "Floating IPs");
    },
  };
}

function pools() {
  return {
    forms: [],
    load: async () => ({ pools: (await get("/v2.0/port-pools")).port_pools }),
    view: ({ pools: items }) => table([
      ["Host", (p) => p.host], ["Project", (p) => p.project_id], ["Network", (p) => short(p.network_id)],
      ["Ready", (p) => p.ready], ["In use", (p) => p.in_use], ["Min/max", (p) => `${p.min}/${p.max}`],
      ["Last refill", (p) => p.last_refill],
    ], items, "Port pools"),
  };
}

function hosts() {
  // the agent's report (agent/agent.py): failing objects {object, reason, since, attempts}, the last drift check,
  // and whatever it says of its passes (keys naming a pass); the heartbeat is its last word in any case
  const text = (v) => (typeof v === "object" && v !== null ? JSON.stringify(v) : String(v));
  const failures = (r) => h("ul", { class: "plain" }, ((r || {}).failures || []).map((f) =>
    h("li", { text: `${text(f.object)}: ${text(f.reason)}` + (f.since ? ` (since ${f.since}, ${f.attempts} attempts)` : "") })));
  const passes = (r) => Object.entries(r || {}).filter(([k]) => /pass/i.test(k)).map(([k, v]) => `${k}: ${text(v)}`).join(", ");
  return {
    forms: [],
    load: async () => ({ hosts: (await get("/v2.0/hosts")).hosts }),
    view: ({ hosts: items }) => table([
      ["Name", (x) => x.name], ["State", (x) => (x.alive ? "up" : "DOWN")], ["Agent", (x) => x.agent_version],
      ["Heartbeat", (x) => x.heartbeat_at], ["Last pass", (x) => passes(x.report)],
      ["Failures", (x) => String((x.report || {}).failure_count || 0)], ["Failing objects", (x) => failures(x.report)],
      ["Last check", (x) => ((x.report || {}).check ? `${x.report.check.at}: ${x.report.check.count} differences` : "")],
    ], items, "Hosts"),
  };
}

function quotas() {
  return {
    forms: [],
    load: async () => {
      const project = session.project || (session.who && session.who.project) || "";
      return { project, quota: project ? (await get(`/v2.0/quotas/${q(project)}/details`)).quota : {} };
    },
    view: ({ project, quota }) => h("div", {},
      h("p", { text: project ? `Project ${project}` : "Choose a project to see its quotas." }),
      table([["Resource", (r) => r.id], ["Used", (r) => r.used], ["Reserved", (r) => r.reserved], ["Limit", (r) => r.limit]],
        Object.entries(quota).map(([k, v]) => ({ id: k, ...v })), "Quotas")),
  };
}

/** The list pages in the order of the menu; `admin`: offered to admins only (the API refuses the others). */
export const PAGES = [
  { id: "networks", title: "Networks", build: networks }, { id: "ports", title: "Ports", build: ports },
  { id: "routers", title: "Routers", build: routers }, { id: "instances", title: "Instances", build: instances },
  { id: "security-groups", title: "Security groups", build: securityGroups },
  { id: "forwards", title: "Forwards", build: forwards }, { id: "floatingips", title: "Floating IPs", build: floatingIps },
  { id: "port-pools", title: "Port pools", build: pools }, { id: "hosts", title: "Hosts", build: hosts, admin: true },
  { id: "quotas", title: "Quotas", build: quotas },
];
