// DOM building for the whole UI: every value the API returns goes in as text (textContent, attribute values),
// never as markup, so a name like `<img src=x onerror=...>` is shown as those characters.

const SVG_NS = "http://www.w3.org/2000/svg";

function fill(el, props, children) {
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "text") el.textContent = String(value);
    else if (key === "class") el.setAttribute("class", value);
    else if (key in el && !(el instanceof SVGElement) && typeof value !== "string") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** An HTML element: h("td", {class: "x"}, "text", otherNode). */
export function h(tag, props, ...children) {
  return fill(document.createElement(tag), props, children);
}

/** An SVG element, as h. */
export function s(tag, props, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), props, children);
}

/** A table: columns are [title, row => text or Node]; rows get a data-id when they have an id. */
export function table(columns, rows, label) {
  const head = h("tr", {}, columns.map(([title]) => h("th", { scope: "col", text: title })));
  const body = h("tbody"); // not in the document yet: rows go straight in
  for (const row of rows) {
    const tr = h("tr", { "data-id": row.id ?? row.name ?? undefined });
    for (const [, get] of columns) tr.append(h("td", {}, get(row) ?? ""));
    body.append(tr);
  }
  if (!rows.length) body.append(h("tr", {}, h("td", { colspan: columns.length, class: "empty", text: "(none)" })));
  return h("table", { "aria-label": label }, h("thead", {}, head), body);
}

/** A labelled form field; `input` is the control (h("input", ...), h("select", ...)). */
export function field(label, input) {
  return h("label", { class: "field" }, h("span", { text: label }), input);
}

/** <option>s of a select: `blank` (when given) first, with the value "". */
export function options(items, valueOf, labelOf, blank) {
  const list = blank === undefined ? [] : [h("option", { value: "", text: blank })];
  return list.concat(items.map((item) => h("option", { value: valueOf(item), text: labelOf(item) })));
}

export function addresses(fixedIps) {
  return (fixedIps || []).map((f) => f.ip_address).join(", ");
}

export function short(id) {
  return id ? String(id).slice(0, 8) : "";
}

/** What an object is called where it is shown: its name, else the start of its id. */
export function name(item) {
  return item ? item.name || short(item.id) : "";
}
