// The panels under a translation: add or correct a pair of the memory, the domain's
// glossary, and a whole file translated in the background.

import { $, ApiError, POLL_MS, api, confirmAction, element, say, sleep, state } from "./core.js";

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
  } catch (e) {
    say(status, e.message);
  }
}

export async function deletePair(domain, n) {
  if (!(await confirmAction(`Delete the pair "${n.source}" from ${domain}'s memory?`))) return;
  const status = $("memory-status");
  $("memory-panel").open = true;
  try {
    await api(memoryPath(domain, n.key), { method: "DELETE", editor: true });
    say(status, `Deleted pair ${n.key} from ${domain}'s memory.`, true);
  } catch (e) {
    say(status, e.message);
  }
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
    say(status, g.terms.length ? `${g.terms.length} terms (version ${g.version ?? "–"}).` : "No terms yet.");
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
