// The translate view: languages, models and domains from /info, the translation and its
// facts, and the neighbours with their matched spans.

import { $, api, element, show, state } from "./core.js";
import { addedText, originBadge, pairActions, prefillMemory } from "./panels.js";
import { marked, queryRange, runs, sourceRanges, tokens, words } from "./spans.js";

// --- languages, models and domains ---------------------------------------------------------

function fill(select, options, wanted) {
  const previous = wanted !== undefined ? wanted : select.value;
  select.replaceChildren(...options.map(([value, label]) => element("option", { value }, label)));
  if (options.some(([value]) => value === previous)) select.value = previous;
}

function pairs() {
  const out = [];
  for (const m of state.info ? state.info.models : []) {
    for (const [s, t] of m.pairs) out.push({ model: m.name, source: s, target: t, m });
  }
  return out;
}

export function fillLanguages() {
  const all = pairs();
  const sources = [...new Set(all.map((p) => p.source))].sort();
  fill($("source"), sources.map((s) => [s, s]), $("source").value || "en");
  const source = $("source").value;
  const targets = [...new Set(all.filter((p) => p.source === source).map((p) => p.target))].sort();
  fill($("target"), targets.map((t) => [t, t]), $("target").value || "de");
  const target = $("target").value;
  const models = all.filter((p) => p.source === source && p.target === target);
  const byDefault = models.find((p) => p.m.default_for.some(([s, t]) => s === source && t === target));
  const label = byDefault ? `Default (${byDefault.model})` : "Default";
  fill($("model"), [["", label], ...models.map((p) => [p.model, p.model])]);
}

function fillDomains(names) {
  const list = names.length ? names : ["general"];
  fill($("domain"), list.map((d) => [d, d]), $("domain").value || "general");
  $("domain-names").replaceChildren(...list.map((d) => element("option", { value: d })));
  for (const el of document.querySelectorAll(".domain-name")) el.textContent = $("domain").value;
}

export async function loadInfo() {
  try {
    state.info = await api("/info");
  } catch (e) {
    show($("service-state"), "The service did not answer /info: " + e.message);
    return;
  }
  const info = state.info;
  show(
    $("service-state"),
    info.ready ? "" : `The service is not ready${info.reason ? ": " + info.reason : ""}.`,
  );
  fillLanguages();
  fillDomains(info.domains);
  $("text").maxLength = info.limits.max_chars * info.limits.max_texts;
}

// --- translating --------------------------------------------------------------------------

function request() {
  const lines = $("text").value.replace(/\s+$/, "").split(/\r?\n/);
  const body = {
    texts: lines,
    source_lang: $("source").value || "en",
    target_lang: $("target").value || "de",
    domain: $("domain").value || "general",
    return_neighbours: $("show-neighbours").checked,
  };
  if ($("model").value) body.model = $("model").value;
  if (!$("glossary-toggle").hidden && !$("apply-glossary").checked) body.glossary = false;
  return { body, lines };
}

export async function translate() {
  if ($("translate-button").disabled) return; // one translation at a time
  const { body, lines } = request();
  const error = $("translate-error");
  if (!lines.some((l) => l.trim())) {
    show(error, "Type or paste a text to translate.");
    $("text").focus();
    return;
  }
  show(error, "");
  $("translate-busy").hidden = false;
  $("translate-button").disabled = true;
  try {
    const response = await api("/v1/translate", { method: "POST", json: body });
    state.last = { request: body, lines, response };
    render();
  } catch (e) {
    show(error, e.message);
  } finally {
    $("translate-busy").hidden = true;
    $("translate-button").disabled = false;
  }
}

function render() {
  const { lines, response } = state.last;
  const results = response.results;
  $("translation").textContent = results.map((r) => r.translation).join("\n");
  $("translation").lang = state.last.request.target_lang;
  const unique = (xs) => [...new Set(xs)];
  $("fact-model").textContent = unique(results.map((r) => r.model)).join(", ");
  const versions = unique(results.map((r) => r.store_version || "none (no memory)"));
  $("fact-version").textContent = versions.join(", ");
  const gates = results.map((r) => r.gate).filter((g) => typeof g === "number");
  $("fact-gate").textContent = gates.length
    ? (gates.reduce((a, b) => a + b, 0) / gates.length).toFixed(2)
    : "n/a (no memory read)";
  const glossary = unique(results.map((r) => r.glossary_version).filter(Boolean));
  $("fact-glossary-row").hidden = !glossary.length;
  $("fact-glossary").textContent = glossary.join(", ");
  $("fact-time").textContent = `${Math.round(response.timings.total_ms)} ms`;
  $("result-facts").hidden = false;
  renderNeighbours(lines, results);
  prefillMemory(lines, results);
}

function neighbourItem(line, n, rank) {
  const qToks = tokens(line);
  const sToks = tokens(n.source);
  const sourceWords = words(sToks);
  const range = queryRange(qToks, n.span, sourceWords);
  // sentence retrieval: no span; `matched` holds the shared terms
  const terms = n.matched && !range ? words(tokens(n.matched)) : null;
  const queryRanges = range
    ? [[qToks[range[0]].start, qToks[range[1] - 1].end]]
    : runs(line, qToks, (t) => sourceWords.has(t.norm) && (!terms || terms.has(t.norm)));
  const queryWords = words(range ? qToks.slice(range[0], range[1]) : qToks);
  const origin = n.origin === "edit" ? originBadge("edit") : null;
  const id = n.key ? `key ${n.key}` : `pair ${n.pair_id}`;
  const span = n.span ? element("span", { text: `tokens ${n.span[0]}–${n.span[1]}` }) : null;
  const actions = n.key ? pairActions(state.last.request.domain, n) : null;
  return element(
    "li",
    { class: "neighbour", "data-origin": n.origin || "store", "data-key": n.key || null },
    element(
      "div",
      { class: "meta" },
      element("span", { text: `#${rank}` }),
      element("span", { text: `score ${Number(n.score).toFixed(3)}` }),
      element("span", { text: id }),
      span,
      origin,
      addedText(n),
    ),
    element(
      "p",
      { class: "query" },
      element("span", { class: "label", text: "Your text" }),
      marked(line, queryRanges),
    ),
    element(
      "p",
      { class: "source", lang: state.last.request.source_lang },
      element("span", { class: "label", text: "Source" }),
      marked(n.source, sourceRanges(n.source, sToks, n.matched, queryWords)),
    ),
    element(
      "p",
      { class: "target", lang: state.last.request.target_lang },
      element("span", { class: "label", text: "Target" }),
      n.target,
    ),
    actions,
  );
}

export function renderNeighbours(lines, results) {
  const section = $("neighbours");
  const groups = $("neighbour-groups");
  if (!$("show-neighbours").checked || !results.some((r) => r.neighbours)) {
    section.hidden = true;
    return;
  }
  const several = results.length > 1;
  const nodes = [];
  results.forEach((r, i) => {
    if (several && !lines[i].trim()) return;
    if (several) nodes.push(element("h4", { class: "group-title", text: `Line ${i + 1}: ${lines[i]}` }));
    const found = r.neighbours || [];
    if (!found.length) {
      const why = r.store_version ? "No pair of the memory matched." : "This domain has no memory.";
      nodes.push(element("p", { class: "hint", text: why }));
      return;
    }
    nodes.push(
      element("ol", { class: "neighbours" }, ...found.map((n, k) => neighbourItem(lines[i], n, k + 1))),
    );
  });
  groups.replaceChildren(...nodes);
  section.hidden = false;
}
