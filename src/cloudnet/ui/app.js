// The application: login (Keystone's password method, or a pasted token), the pages by URL hash (#/networks),
// an admin's project switch, and live updates redrawing the page shown.

import { ApiError, get, identify, login, session } from "./api.js";
import { h, options } from "./dom.js";
import { Live } from "./live.js";
import { TopologyMap, loadTopology } from "./map.js";
import { PAGES } from "./pages.js";

const $ = (id) => document.getElementById(id);
const PROJECT = "cloudnet.project";

class App {
  constructor() {
    this.page = null; // {id, load, view, data: Node} of the page shown
    this.map = new TopologyMap();
    this.live = new Live(() => this.changed(), (mode) => { $("live").textContent = mode === "live" ? "● live" : mode; });
    this.timer = null;
    this.generation = 0;
  }

  /** Run an API call for the user: its error shown as the API said it; true when it worked. The page is redrawn
   * as after any change (debounced): the live event of this same change, due at once, makes no second read. */
  async run(fn) {
    this.error(null);
    try {
      await fn();
      this.changed();
      return true;
    } catch (err) {
      this.error(err);
      return false;
    }
  }

  error(err) {
    const box = $("error");
    if (!err) {
      box.classList.add("hidden");
      box.textContent = "";
      return;
    }
    box.textContent = err instanceof ApiError ? `${err.type} (${err.status}): ${err.message}` : String(err.message || err);
    box.classList.remove("hidden");
    if (err instanceof ApiError && err.status === 401) this.logout();
  }

  changed() {
    clearTimeout(this.timer); // a burst of events is one redraw
    this.timer = setTimeout(() => this.redraw(), 150);
  }

  redraw() {
    this.refresh().catch((err) => this.error(err));
  }

  /** Never redraw under the user's hands: while a field of the data (a forward's ports) is being edited, the
   * redraw waits for the focus to leave it. */
  editing() {
    const active = document.activeElement;
    if (!active || !active.closest("#page .data") || !active.matches("input, textarea, select")) return false;
    active.addEventListener("focusout", () => this.changed(), { once: true });
    return true;
  }

  async refresh() {
    const page = this.page;
    if (!page) return;
    const generation = ++this.generation;
    const token = session.token;
    const data = await page.load();
    // a newer read is on its way, or the user changed (logged out, in again): this answer is not to be shown
    if (generation !== this.generation || page !== this.page || token !== session.token) return;
    if (this.editing()) return;
    page.show(data);
    $("page").dataset.rendered = page.id; // for tests and the bench: the page's data is drawn
    performance.mark(`cloudnet:rendered:${page.id}`);
  }

  nav() {
    const links = [{ id: "map", title: "Map" }, ...PAGES].filter((p) => this.admin || !p.admin);
    $("nav").replaceChildren(...links.map(({ id, title }) => h("a", { href: `#/${id}`, text: title, "data-page": id })));
  }

  async route() {
    if (!session.token) return this.showLogin();
    const id = (location.hash.replace(/^#\/?/, "") || "map").split("?")[0];
    for (const a of $("nav").querySelectorAll("a")) a.toggleAttribute("aria-current", a.dataset.page === id);
    const root = $("page");
    if (id === "map") {
      this.page = { id, load: loadTopology, show: (d) => this.map.update(d) };
      root.replaceChildren(h("h2", { text: "Topology" }), this.map.el);
    } else {
      const found = PAGES.find((p) => p.id === id) || PAGES[0];
      const built = found.build(this);
      const data = h("div", { class: "data", "aria-live": "polite" }, h("p", { class: "muted", text: "Loading…" }));
      this.page = { id: found.id, load: built.load, show: (d) => data.replaceChildren(built.view(d)) };
      root.replaceChildren(h("h2", { text: found.title }), h("div", { class: "forms" }, built.forms), data);
    }
    document.title = `cloudnet: ${id}`;
    this.error(null);
    try {
      await this.refresh();
    } catch (err) {
      this.error(err);
    }
  }

  showLogin() {
    $("login").classList.remove("hidden");
    $("page").replaceChildren();
    $("nav").replaceChildren();
    for (const id of ["logout", "project-switch"]) $(id).classList.add("hidden");
    $("who").textContent = "";
    $("user").focus();
  }

  async start() {
    $("login").classList.add("hidden");
    $("logout").classList.remove("hidden");
    const who = session.who || {};
    this.admin = Boolean(who.admin);
    $("who").textContent = `${who.user || ""}${who.project ? " @ " + who.project : ""}${this.admin ? " (admin)" : ""}`;
    if (this.admin) await this.projects();
    this.nav();
    this.live.start();
    await this.route();
  }

  async projects() {
    const select = $("project");
    let names = [];
    try {
      // the projects of the tokens file, and those that own something without a user of their own
      const [known, owners] = await Promise.all([get("/v3/projects"), get("/v2.0/networks?fields=project_id")]);
      names = [...new Set([...known.projects.map((p) => p.name), ...owners.networks.map((n) => n.project_id)])].sort();
    } catch (err) {
      this.error(err);
    }
    session.project = sessionStorage.getItem(PROJECT) || "";
    select.replaceChildren(...options(names, (n) => n, (n) => n, "(all projects)"));
    select.value = names.includes(session.project) ? session.project : "";
    session.project = select.value;
    $("project-switch").classList.remove("hidden");
  }

  logout() {
    this.live.stop();
    session.clear();
    sessionStorage.removeItem(PROJECT);
    session.project = "";
    this.page = null;
    clearTimeout(this.timer);
    this.generation++; // reads still on their way are dropped
    this.map = new TopologyMap(); // nothing of the last user's map (data, search, expanded groups) for the next
    delete $("page").dataset.rendered;
    this.showLogin();
  }

  bind() {
    window.addEventListener("hashchange", () => this.route());
    $("logout").addEventListener("click", () => this.logout());
    $("project").addEventListener("change", (e) => {
      session.project = e.target.value;
      sessionStorage.setItem(PROJECT, session.project);
      this.route();
    });
    $("login").addEventListener("submit", async (event) => {
      event.preventDefault();
      this.error(null);
      const user = $("user").value.trim(), password = $("password").value, pasted = $("token").value.trim();
      try {
        if (pasted) session.save(pasted, await identify(pasted));
        else {
          const { token, who } = await login(user, password);
          session.save(token, who);
        }
        $("password").value = "";
        $("token").value = "";
        await this.start();
      } catch (err) {
        this.error(err);
      }
    });
  }
}

const app = new App();
app.bind();
if (session.token) app.start().catch((err) => app.error(err));
else app.showLogin();
