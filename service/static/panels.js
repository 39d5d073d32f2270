// The panels under a translation: add or correct a pair of the memory, search the memory,
// the domain's glossary (terms one at a time or a whole file), and a whole file translated in
// the background.

import { $, ApiError, POLL_MS, api, confirmAction, element, formatTime, say, sleep, state } from "./core.js";
import { marked, runs, tokens, words } from "./spans.js";

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

// --- memory edits -------------------------------------------------------------------------

export function prefillMemory(lines, results) {
  const i = lines.findIndex((l) => l.trim());
  if (i < 0) return;
  const source = $("memory-source");
  const target = $("memory-target");
  // overwrite only what the page filled in itself, never the translator's own edits
  if (!source.value || source.value === state.filled.source) source.value = lines[i].trim();
  if (!target.value || target.value === state.filled.target) target.value = results[i].translation;
  state.filled = { source: source.value, target: target.value };
}

function memoryPath(domain, key = "") {
  return `/v1/domains/${encodeURIComponent(domain)}/memory${key ? "/" + encodeURIComponent(key) : ""}`;
}

/** The memory form in "correct" mode: its submit replaces the pair `n` by the edited one. */
export function startCorrection(domain, n) {
  state.correcting = { domain, key: n.key };
  $("memory-source").value = n.source;
  $("memory-target").value = n.target;
  $("memory-add").textContent = "Save the correction";
  $("memory-cancel").hidden = false;
  say($("memory-status"), `Correcting pair ${n.key} of ${domain}.`);
  $("memory-panel").open = true;
  $("memory-target").focus();
}

export function stopCorrection() {
  state.correcting = null;
  $("memory-add").replaceChildren("Add to ", element("span", { class: "domain-name", text: $("domain").value }));
  $("memory-cancel").hidden = true;
}

export async function addToMemory(event) {
  event.preventDefault();
  const status = $("memory-status");
  const body = { source: $("memory-source").value.trim(), target: $("memory-target").value.trim() };
  const fix = state.correcting;
  const domain = fix ? fix.domain : $("domain").value;
  say(status, fix ? "Saving…" : "Adding…");
  try {
    const out = await api(memoryPath(domain, fix ? fix.key : ""), {
      method: fix ? "PUT" : "POST",
      json: body,
      editor: true,
    });
    const key = out.edit ? out.edit.key : out.key;
    say(status, `${fix ? "Corrected in" : "Added to"} ${domain}'s memory (key ${key}).`, true);
    stopCorrection();
    loadSearch(); // the search's results (or newest edits) show the change
  } catch (e) {
    say(status, e.message);
  }
}

/** Delete the pair `n` (confirmed first); says so in `statusId`, the memory form's status
 * unless the search's. */
export async function deletePair(domain, n, statusId = "memory-status") {
  if (!(await confirmAction(`Delete the pair "${n.source}" from ${domain}'s memory?`))) return;
  const status = $(statusId);
  if (statusId === "memory-status") $("memory-panel").open = true;
  try {
    await api(memoryPath(domain, n.key), { method: "DELETE", editor: true });
    await loadSearch();
    say(status, `Deleted pair ${n.key} from ${domain}'s memory.`, true);
  } catch (e) {
    say(status, e.message);
  }
}

// --- a pair of the memory, as neighbours and search results show it ------------------------

/** Where a pair comes from: a row of the store version, or a live edit. */
export function originBadge(origin) {
  const o = origin === "edit" ? "edit" : "store";
  return element("span", { class: `badge ${o}`, text: o });
}

/** "added <when> by <whom>" for a pair a live edit added; null for a store row. */
export function addedText(n) {
  const at = n.edit && n.edit.at ? n.edit.at : n.added_at;
  if (!at) return null;
  const by = n.edit && n.edit.by ? " by " + n.edit.by : "";
  return element("span", { text: `added ${formatTime(at)}${by}` });
}

/** The Correct and Delete buttons of the pair `n` (which has its `key`) of `domain`. */
export function pairActions(domain, n, statusId) {
  return element(
    "div",
    { class: "row" },
    element("button", {
      type: "button",
      class: "secondary small",
      text: "Correct",
      "data-action": "correct",
      "aria-label": `Correct the pair ${n.source}`,
      onclick: () => startCorrection(domain, n),
    }),
    element("button", {
      type: "button",
      class: "danger small",
      text: "Delete",
      "data-action": "delete",
      "aria-label": `Delete the pair ${n.source} from the memory`,
      onclick: () => deletePair(domain, n, statusId),
    }),
  );
}

// --- searching the memory -----------------------------------------------------------------

let searchRun = 0; // the latest search asked for: an older answer arriving late is dropped
let searchTimer = 0;

/** Search again shortly after the query stops changing. */
export function scheduleSearch() {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(loadSearch, 300);
}


/** The selected domain's pairs that best match the query, or its newest edits without one. */
export async function loadSearch() {
  clearTimeout(searchTimer);
  if (!$("search-panel").open) return;
  const run = ++searchRun;
  const domain = $("domain").value;
  const q = $("search-query").value.trim();
  const list = $("search-results");
  const status = $("search-status");
  $("search-title").textContent = q ? `Best matches for “${q}”` : "Newest edits";
  say(status, "Searching…");
  const params = new URLSearchParams({ limit: "20" });
  if (q) params.set("q", q);
  let out;
  try {
    out = await api(`${memoryPath(domain)}?${params}`);
  } catch (e) {
    if (run !== searchRun) return;
    list.replaceChildren();
    delete list.dataset.query;
    say(status, e.message);
    return;
  }
  if (run !== searchRun) return;
  const editable = Boolean(out.store_version);
  if (q) {
    const qWords = words(tokens(q));
    list.replaceChildren(...out.pairs.map((n, i) => searchRow(domain, n, i + 1, qWords)));
    const where = out.store_version
      ? ` (version ${out.store_version}${out.edit_seq ? `, through edit ${out.edit_seq}` : ""})`
      : "";
    say(
      status,
      !editable
        ? `${domain} has no active store version: nothing to search.`
        : out.pairs.length
          ? `${plural(out.pairs.length, "pair")} of ${domain}'s memory match${out.pairs.length === 1 ? "es" : ""}${where}.`
          : `No pair of ${domain}'s memory matches${where}.`,
    );
  } else {
    // newest first: a pair is still there unless a newer edit deleted or replaced it
    const gone = new Set();
    const rows = out.edits.map((e) => {
      const there = e.op !== "delete" && !gone.has(e.key);
      gone.add(e.key);
      if (e.old_key) gone.add(e.old_key);
      return editRow(domain, e, there, editable);
    });
    list.replaceChildren(...rows);
    say(status, rows.length ? `The ${plural(rows.length, "newest edit")} of ${domain}.` : `No live edit of ${domain} yet.`);
  }
  list.dataset.domain = domain;
  list.dataset.query = q;
}

function pairTexts(n, qWords, deleted = false) {
  const source = qWords
    ? marked(n.source, runs(n.source, tokens(n.source), (t) => qWords.has(t.norm)))
    : n.source;
  const cls = deleted ? " deleted" : "";
  return [
    element(
      "p",
      { class: "source" + cls, lang: $("source").value || null },
      element("span", { class: "label", text: "Source" }),
      source,
    ),
    element(
      "p",
      { class: "target" + cls, lang: $("target").value || null },
      element("span", { class: "label", text: "Target" }),
      n.target,
    ),
  ];
}

function searchRow(domain, n, rank, qWords) {
  return element(
    "li",
    { class: "neighbour", "data-origin": n.origin || "store", "data-key": n.key },
    element(
      "div",
      { class: "meta" },
      element("span", { text: `#${rank}` }),
      element("span", { text: `score ${Number(n.score).toFixed(3)}` }),
      element("span", { text: `key ${n.key}` }),
      originBadge(n.origin),
      addedText(n),
    ),
    ...pairTexts(n, qWords),
    pairActions(domain, n, "search-status"),
  );
}

const OPS = { add: "added", correct: "corrected", delete: "deleted" };

function editRow(domain, e, there, editable) {
  const by = e.by ? ` by ${e.by}` : "";
  return element(
    "li",
    { class: "neighbour", "data-origin": "edit", "data-op": e.op, "data-key": e.key },
    element(
      "div",
      { class: "meta" },
      element("span", { text: `edit ${e.seq}` }),
      element("span", { class: `badge ${e.op === "delete" ? "deleted" : "edit"}`, text: OPS[e.op] || e.op }),
      element("span", { text: `key ${e.key}` }),
      e.old_key ? element("span", { text: `replaced ${e.old_key}` }) : null,
      element("span", { text: `${formatTime(e.at)}${by}` }),
      there || e.op === "delete" ? null : element("span", { text: "no longer in the memory" }),
    ),
    ...pairTexts(e, null, e.op === "delete"),
    there && editable ? pairActions(domain, e, "search-status") : null,
  );
}

// --- glossary -----------------------------------------------------------------------------

function glossaryPath(domain, tail = "") {
  return `/v1/domains/${encodeURIComponent(domain)}/glossary${tail}`;
}

export async function loadGlossary() {
  if (!$("glossary-panel").open) return;
  const domain = $("domain").value;
  const status = $("glossary-status");
  const rows = $("glossary-terms");
  try {
    const g = await api(glossaryPath(domain));
    rows.replaceChildren(...g.terms.map((t) => termRow(domain, t)));
    say(status, g.terms.length ? `${plural(g.terms.length, "term")} (version ${g.version ?? "–"}).` : "No terms yet.");
  } catch (e) {
    rows.replaceChildren();
    say(status, e.status === 404 ? "No glossary yet." : e.message);
  }
}

function termRow(domain, t) {
  const remove = element("button", {
    type: "button",
    class: "danger small",
    "aria-label": `Delete the term ${t.source}`,
    text: "Delete",
    onclick: async () => {
      if (!(await confirmAction(`Delete the term "${t.source}" from ${domain}'s glossary?`))) return;
      try {
        await api(glossaryPath(domain, "/terms"), { method: "DELETE", json: { source: t.source }, editor: true });
        await loadGlossary();
      } catch (e) {
        say($("glossary-status"), e.message);
      }
    },
  });
  return element(
    "tr",
    {},
    element("td", { lang: state.last ? state.last.request.source_lang : null, text: t.source }),
    element("td", { text: t.target }),
    element("td", { text: t.note || "" }),
    element("td", {}, remove),
  );
}

export async function addTerm(event) {
  event.preventDefault();
  const domain = $("domain").value;
  const body = { source: $("term-source").value.trim(), target: $("term-target").value.trim() };
  const note = $("term-note").value.trim();
  if (note) body.note = note;
  try {
    await api(glossaryPath(domain, "/terms"), { method: "PUT", json: body, editor: true });
    $("term-source").value = $("term-target").value = $("term-note").value = "";
    await loadGlossary();
    say($("glossary-status"), `Added "${body.source}" → "${body.target}".`, true);
    $("term-source").focus();
  } catch (e) {
    say($("glossary-status"), e.message);
  }
}

/** Import a CSV, TSV or TBX file into the glossary: merged, or replacing it whole. */
export async function importGlossary(event) {
  event.preventDefault();
  const file = $("glossary-file").files[0];
  const status = $("glossary-import-status");
  if (!file) return;
  const domain = $("domain").value;
  const replace = $("glossary-replace").checked;
  const question = `Replace every term of ${domain}'s glossary by the terms of ${file.name}?`;
  if (replace && !(await confirmAction(question))) return;
  const form = new FormData();
  form.append("file", file);
  if ($("glossary-format").value) form.append("format", $("glossary-format").value);
  form.append("replace", replace ? "true" : "false");
  const send = $("glossary-import-send");
  send.disabled = true;
  say(status, "Importing…");
  try {
    const out = await api(glossaryPath(domain), { method: "POST", form, admin: true });
    await loadGlossary();
    const skipped = out.skipped ? `, ${out.skipped} skipped` : "";
    const now = out.version
      ? `${domain}'s glossary has ${plural(out.count, "term")} (version ${out.version})`
      : `${domain}'s glossary is empty`;
    const how = replace ? "replaced the glossary" : "merged";
    say(status, `${file.name} ${how}: ${plural(out.changed, "term")} changed${skipped}; ${now}.`, true);
    $("glossary-file").value = "";
  } catch (e) {
    say(status, e.message);
  } finally {
    send.disabled = false;
  }
}

// --- files --------------------------------------------------------------------------------

export async function translateFile(event) {
  event.preventDefault();
  const file = $("file-input").files[0];
  const status = $("file-status");
  const progress = $("file-progress");
  const link = $("file-download");
  if (!file) return;
  link.hidden = true;
  const form = new FormData();
  form.append("file", file);
  form.append("source_lang", $("source").value || "en");
  form.append("target_lang", $("target").value || "de");
  form.append("domain", $("domain").value || "general");
  if ($("model").value) form.append("model", $("model").value);
  progress.hidden = false;
  progress.value = 0;
  $("file-send").disabled = true;
  try {
    let job = await api("/v1/files", { method: "POST", form });
    $("file-panel").dataset.state = job.state;
    for (;;) {
      progress.value = fraction(job);
      $("file-panel").dataset.state = job.state;
      say(status, `${job.state}: ${job.done} of ${job.texts} lines translated, ${job.untranslated} of ${job.units} units to fill`);
      if (job.state !== "queued" && job.state !== "running") break;
      await sleep(POLL_MS);
      job = await api(`/v1/files/${encodeURIComponent(job.id)}`);
    }
    if (job.state !== "done") throw new ApiError(0, job.state, `The file was not translated: ${job.error}`);
    const resp = await api(`/v1/files/${encodeURIComponent(job.id)}/result`, { raw: true });
    const blob = await resp.blob();
    if (link.href.startsWith("blob:")) URL.revokeObjectURL(link.href);
    link.href = URL.createObjectURL(blob);
    link.download = job.name;
    link.textContent = `Download ${job.name}`;
    link.hidden = false;
    const units = `${job.translated} unit${job.translated === 1 ? "" : "s"}`;
    say(status, `Done: ${units} filled (${job.format}).`, true);
    link.focus();
  } catch (e) {
    say(status, e.message);
  } finally {
    $("file-send").disabled = false;
  }
}

function fraction(job) {
  if (typeof job.progress === "number") return Math.max(0, Math.min(1, job.progress));
  if (job.total) return (job.done || 0) / job.total;
  return 0;
}
