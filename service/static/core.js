// What the page's modules share: its state, the calls to the API (errors carry the message
// of the service's JSON error body) and a few DOM helpers.

export const $ = (id) => document.getElementById(id);
export const POLL_MS = 400;

export const state = {
  apiKey: "",
  adminKey: "",
  info: null,
  domains: [],
  last: null, // {request, lines, response} of the last translation
  filled: { source: "", target: "" }, // what the memory form was last filled with
  correcting: null, // {domain, key} while the memory form corrects a pair
  sizes: new Map(), // version -> pairs, for the versions whose build this page followed
};

// --- calling the API ----------------------------------------------------------------------

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** A JSON call; errors carry the message of the service's JSON error body. `admin`: a
 * management route (the admin key alone); `editor`: a memory or glossary write (the admin
 * key, else an API key with edit scope); otherwise a client route (any key given). */
export async function api(path, { method = "GET", json, form, admin = false, editor = false, raw = false } = {}) {
  const headers = { Accept: "application/json" };
  const key = editor ? state.adminKey || state.apiKey : state.apiKey || state.adminKey;
  if (admin) {
    if (!state.adminKey) {
      throw new ApiError(0, "no_admin_key", "Enter the admin key under Keys first.");
    }
    headers["X-Admin-Key"] = state.adminKey;
  } else if (editor && !key) {
    throw new ApiError(0, "no_key", "Enter the admin key (or an API key that may edit) under Keys first.");
  } else if (key) {
    headers.Authorization = "Bearer " + key;
  }
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form !== undefined) {
    body = form;
  }
  let resp;
  try {
    resp = await fetch(path, { method, headers, body, cache: "no-store", credentials: "omit" });
  } catch (e) {
    throw new ApiError(0, "network", "The service cannot be reached (" + e.message + ").");
  }
  if (raw && resp.ok) return resp;
  const text = await resp.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!resp.ok) {
    let message = `${resp.status} ${resp.statusText}`;
    let code = `http_${resp.status}`;
    if (data && typeof data.error === "string") {
      message = data.error; // LibreTranslate's shape
      code = data.code || code;
    } else if (data && data.error) {
      message = data.error.message || message;
      code = data.error.code || code;
    }
    throw new ApiError(resp.status, code, message);
  }
  return data;
}

export function show(el, message) {
  el.textContent = message || "";
  el.hidden = !message;
}

export function say(el, message, ok = false) {
  el.textContent = message || "";
  el.classList.toggle("ok", ok);
}

export function element(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    el.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return el;
}

export function confirmAction(text) {
  const dialog = $("confirm");
  $("confirm-text").textContent = text;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

export function formatTime(value) {
  const date = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
