// ragmt's page: translate with a domain's memory, see the neighbours, manage the domains.
// Plain ES modules, no framework and no build step. Keys live in the page's memory (and, when
// asked, in sessionStorage for the tab): they travel in request headers, never in a URL.

import { $, api, say, state } from "./core.js";
import { activate, loadDomains, upload } from "./manage.js";
import {
  addTerm,
  addToMemory,
  importGlossary,
  loadGlossary,
  loadSearch,
  prefillMemory,
  scheduleSearch,
  stopCorrection,
  translateFile,
} from "./panels.js";
import { fillLanguages, loadInfo, renderNeighbours, translate } from "./translate.js";

const KEYS_ITEM = "ragmt.keys";

// --- keys ---------------------------------------------------------------------------------

function keysBadge() {
  const parts = [];
  if (state.apiKey) parts.push("API");
  if (state.adminKey) parts.push("admin");
  $("keys-state").textContent = parts.length ? parts.join(" + ") : "none";
  $("manage-key-note").hidden = Boolean(state.adminKey);
}

function loadKeys() {
  let kept = null;
  try {
    kept = JSON.parse(sessionStorage.getItem(KEYS_ITEM) || "null");
  } catch {
    kept = null;
  }
  if (kept) {
    state.apiKey = kept.api || "";
    state.adminKey = kept.admin || "";
    $("api-key").value = state.apiKey;
    $("admin-key").value = state.adminKey;
    $("keep-keys").checked = true;
  }
  keysBadge();
}

function saveKeys(event) {
  event.preventDefault();
  state.apiKey = $("api-key").value.trim();
  state.adminKey = $("admin-key").value.trim();
  if ($("keep-keys").checked) {
    sessionStorage.setItem(KEYS_ITEM, JSON.stringify({ api: state.apiKey, admin: state.adminKey }));
  } else {
    sessionStorage.removeItem(KEYS_ITEM);
  }
  keysBadge();
  $("keys").open = false;
  refreshAll();
}

function forgetKeys() {
  state.apiKey = state.adminKey = "";
  $("api-key").value = $("admin-key").value = "";
  $("keep-keys").checked = false;
  sessionStorage.removeItem(KEYS_ITEM);
  keysBadge();
  refreshAll();
}

// --- what this service offers ------------------------------------------------------------

// The panels whose routes the service may not have (an older or slimmer deployment): shown
// only when its OpenAPI document lists them.
const PANELS = {
  "memory-panel": "/v1/domains/{domain}/memory",
  "search-panel": "/v1/domains/{domain}/memory",
  "glossary-panel": "/v1/domains/{domain}/glossary/terms",
  "glossary-toggle": "/v1/domains/{domain}/glossary/terms",
  "file-panel": "/v1/files",
};

async function loadFeatures() {
  let paths = {};
  try {
    paths = (await api("/openapi.json")).paths || {};
  } catch {
    return; // unknown: leave every panel shown; a call that fails says why
  }
  for (const [id, path] of Object.entries(PANELS)) $(id).hidden = !(path in paths);
}

// --- views and wiring ---------------------------------------------------------------------

function route() {
  const view = location.hash === "#manage" ? "manage" : "translate";
  $("view-translate").hidden = view !== "translate";
  $("view-manage").hidden = view !== "manage";
  for (const a of document.querySelectorAll(".views a[data-view]")) {
    if (a.dataset.view === view) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (view === "manage") loadDomains();
  return view;
}

function refreshAll() {
  loadInfo();
  if (location.hash === "#manage") loadDomains();
  loadGlossary();
  loadSearch();
}

function wire() {
  $("keys-form").addEventListener("submit", saveKeys);
  $("keys-forget").addEventListener("click", forgetKeys);
  $("translate-form").addEventListener("submit", (e) => {
    e.preventDefault();
    translate();
  });
  $("text").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      translate();
    }
  });
  $("show-neighbours").addEventListener("change", () => {
    if (!state.last) return;
    // the neighbours are asked for only when shown: translate again (the service caches)
    if ($("show-neighbours").checked && !state.last.response.results.some((r) => r.neighbours)) translate();
    else renderNeighbours(state.last.lines, state.last.response.results);
  });
  $("source").addEventListener("change", fillLanguages);
  $("target").addEventListener("change", fillLanguages);
  $("domain").addEventListener("change", () => {
    for (const el of document.querySelectorAll(".domain-name")) el.textContent = $("domain").value;
    loadGlossary();
    loadSearch();
  });
  $("memory-form").addEventListener("submit", addToMemory);
  $("memory-cancel").addEventListener("click", () => {
    stopCorrection();
    say($("memory-status"), "");
  });
  $("memory-fill").addEventListener("click", () => {
    state.filled = { source: "", target: "" };
    $("memory-source").value = $("memory-target").value = "";
    if (state.last) prefillMemory(state.last.lines, state.last.response.results);
  });
  $("glossary-panel").addEventListener("toggle", loadGlossary);
  $("glossary-form").addEventListener("submit", addTerm);
  $("glossary-import").addEventListener("submit", importGlossary);
  $("search-panel").addEventListener("toggle", loadSearch);
  $("search-form").addEventListener("submit", (e) => {
    e.preventDefault();
    loadSearch();
  });
  $("search-query").addEventListener("input", scheduleSearch);
  $("file-form").addEventListener("submit", translateFile);
  $("upload-form").addEventListener("submit", upload);
  $("upload-file").addEventListener("change", () => {
    const name = ($("upload-file").files[0] || {}).name || "";
    if (!$("upload-domain").value && $("domain").value !== "general") {
      $("upload-domain").value = $("domain").value;
    }
    if (/\.tmx$/i.test(name)) $("upload-format").value = "";
  });
  $("job-activate").addEventListener("click", (e) =>
    activate(e.currentTarget.dataset.domain, e.currentTarget.dataset.version),
  );
  $("domains-refresh").addEventListener("click", loadDomains);
  window.addEventListener("hashchange", () => {
    route();
    const heading = location.hash === "#manage" ? $("manage-title") : $("text");
    if (heading === $("manage-title")) heading.setAttribute("tabindex", "-1");
    heading.focus();
  });
}

loadKeys();
wire();
route();
loadInfo();
loadFeatures();
