// The API client: the token kept in sessionStorage (gone with the tab), sent as X-Auth-Token; errors carry the
// API's own message (NeutronError for /v2.0, Keystone's error body for /v3).

const TOKEN = "cloudnet.token";
const WHO = "cloudnet.who";

export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

export const session = {
  get token() {
    return sessionStorage.getItem(TOKEN);
  },
  get who() {
    try {
      return JSON.parse(sessionStorage.getItem(WHO) || "null");
    } catch {
      return null;
    }
  },
  save(token, who) {
    sessionStorage.setItem(TOKEN, token);
    sessionStorage.setItem(WHO, JSON.stringify(who));
  },
  clear() {
    sessionStorage.removeItem(TOKEN);
    sessionStorage.removeItem(WHO);
  },
  project: "", // an admin's chosen project ("" = all)
};

async function failure(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: the status says it
  }
  const neutron = body && body.NeutronError;
  if (neutron) return new ApiError(response.status, neutron.type, neutron.message || response.statusText);
  const keystone = body && body.error;
  if (keystone) return new ApiError(response.status, keystone.title, keystone.message || response.statusText);
  return new ApiError(response.status, "HTTPError", `${response.status} ${response.statusText}`);
}

export async function request(method, path, body, extraHeaders, signal) {
  const headers = { Accept: "application/json", ...(extraHeaders || {}) };
  if (session.token && !("X-Auth-Token" in headers)) headers["X-Auth-Token"] = session.token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
    cache: "no-store",
  });
  if (!response.ok) throw await failure(response);
  if (response.status === 204) return { response, body: null };
  return { response, body: await response.json() };
}

export async function get(path, signal) {
  return (await request("GET", path, undefined, undefined, signal)).body;
}
export const post = async (path, body) => (await request("POST", path, body)).body;
export const put = async (path, body) => (await request("PUT", path, body)).body;
export const del = async (path) => (await request("DELETE", path)).body;

/** A list of the Neutron face, filtered to the admin's chosen project. */
export async function list(collection, key, extra) {
  const params = new URLSearchParams(extra || {});
  if (session.project) params.set("project_id", session.project);
  const query = params.toString();
  return (await get(`/v2.0/${collection}${query ? "?" + query : ""}`))[key];
}

/** The forwards of these networks, each with its network_id: listed network by network (the API has no list of
 * them all). A network gone meanwhile (404) has none; any other refusal is the API's error, shown as it said it. */
export async function forwardsOf(networks) {
  const found = await Promise.all(networks.map((n) => get(`/v2.0/networks/${encodeURIComponent(n.id)}/forwards`).then(
    (b) => b.forwards.map((f) => ({ ...f, network_id: n.id })),
    (err) => {
      if (err instanceof ApiError && err.status === 404) return [];
      throw err;
    })));
  return found.flat();
}

/** What a create body carries for an admin acting in another project. */
export function owned(body) {
  return session.project ? { ...body, project_id: session.project } : body;
}

/** Log in with a user and password (Keystone's password method, as the CLI and keystoneauth do). */
export async function login(user, password) {
  const body = {
    auth: { identity: { methods: ["password"], password: { user: { name: user, domain: { id: "default" }, password } } } },
  };
  const { response, body: answer } = await request("POST", "/v3/auth/tokens", body, { "X-Auth-Token": "" });
  const token = response.headers.get("X-Subject-Token");
  return { token, who: describe(answer.token, user) };
}

function describe(token, fallbackUser) {
  const roles = (token.roles || []).map((r) => r.name);
  return {
    user: (token.user && token.user.name) || fallbackUser,
    project: token.project ? token.project.name : "",
    admin: roles.includes("admin"),
  };
}

/** Who a pasted token is: Keystone's validation for a token the face issued, else what it may do. */
export async function identify(token) {
  const headers = { "X-Auth-Token": token, "X-Subject-Token": token };
  try {
    const { body } = await request("GET", "/v3/auth/tokens", undefined, headers);
    return describe(body.token, "token");
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 404) throw err;
  }
  // A token of the tokens file: any project-scoped call tells whether it is valid; the hosts list whether admin.
  const probe = (path) => request("GET", path, undefined, { "X-Auth-Token": token });
  const projects = (await probe("/v3/projects")).body.projects;
  let admin = true;
  try {
    await probe("/v2.0/hosts");
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 403) throw err;
    admin = false;
  }
  return { user: "token", project: projects.length === 1 ? projects[0].name : "", admin };
}
