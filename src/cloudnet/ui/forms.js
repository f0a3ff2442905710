// Small building blocks of the pages: forms that call the API and show its refusal, buttons that do the same.

import { del } from "./api.js";
import { field, h, options } from "./dom.js";

/** A form: `fields` are [name, label, control]; `submit(values)` runs on submit; the app shows its errors. */
export function form(app, title, fields, submit, label = "Create") {
  const controls = {};
  const rows = fields.map(([name, text, control]) => {
    controls[name] = control;
    control.name = name;
    return field(text, control);
  });
  const el = h(
    "form",
    { class: "card", "aria-label": title },
    h("h3", { text: title }),
    h("div", { class: "fields" }, rows),
    h("button", { type: "submit", text: label }),
  );
  el.addEventListener("submit", async (event) => {
    event.preventDefault();
    const values = {};
    for (const [name, control] of Object.entries(controls)) {
      values[name] = control.type === "checkbox" ? control.checked : control.value.trim();
    }
    if (await app.run(() => submit(values))) {
      for (const control of Object.values(controls)) {
        if (control.tagName === "TEXTAREA" || control.type === "text") control.value = "";
        else if (control.type === "checkbox") control.checked = false;
      }
    }
  });
  return el;
}

export const input = (props) => h("input", { type: "text", autocomplete: "off", ...props });

/** A button that runs `fn` (asking first when `confirmText`), then redraws the page. */
export function button(app, text, fn, confirmText, label) {
  return h("button", {
    type: "button",
    class: "small",
    text,
    "aria-label": label || text,
    onclick: async () => {
      if (confirmText && !window.confirm(confirmText)) return;
      await app.run(fn);
    },
  });
}

/** A button that deletes `path` once confirmed: `what` names the object ("network web") in the question and the
 * button's accessible name; `label` is the verb ("Release"), `text` what the button shows (the verb unless given). */
export function deleteButton(app, what, path, label = "Delete", text = label) {
  return button(app, text, () => del(path), `${label} ${what}?`, `${label} ${what}`);
}

/** A select filled from a list; keeps its choice across refreshes of the list. */
export function select(items, valueOf, labelOf, blank) {
  const el = h("select");
  let shown = null;
  const fill = (list) => {
    const key = JSON.stringify(list.map((item) => [valueOf(item), labelOf(item)]));
    if (key === shown) return; // unchanged: left alone (an open menu stays open)
    shown = key;
    const chosen = el.value;
    el.replaceChildren(...options(list, valueOf, labelOf, blank));
    if ([...el.options].some((o) => o.value === chosen)) el.value = chosen;
  };
  fill(items);
  el.fill = fill;
  return el;
}

/** Forward port specs, one a line: `tcp 80 10.0.0.5 8080` (protocol, listen port(s), target address, target port(s)). */
export function parsePorts(text) {
  return text
    .split("\n")
    .map((line) => line.trim())
    .filter(Boolean)
    .map((line) => {
      const [protocol, listen_port, target_address, target_port] = line.split(/\s+/);
      const spec = { protocol, listen_port, target_address };
      if (target_port) spec.target_port = target_port;
      return spec;
    });
}

export function formatPorts(ports) {
  return (ports || [])
    .map((p) => [p.protocol, p.listen_port, p.target_address, p.target_port].filter(Boolean).join(" "))
    .join("\n");
}
