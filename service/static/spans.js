// Matched spans: where a neighbour's `span` (a token range of one sentence of the query)
// lies in the text, and which characters to highlight in the text and in the neighbour.

import { element } from "./core.js";

// --- neighbours and their matched spans ---------------------------------------------------

// The token view of the sparse retrievers (index_builder/retrieval/text.py): runs of letters,
// digits and "_" joined across apostrophes; any other non-space character is a token.
const TOKEN = /[\p{L}\p{N}_]+(?:['\u2019][\p{L}\p{N}_]+)*|[^\p{L}\p{N}_\s]/gu;
const WORD = /[\p{L}\p{N}]/u;

export function tokens(text) {
  return Array.from(text.matchAll(TOKEN), (m) => ({
    start: m.index,
    end: m.index + m[0].length,
    norm: m[0].normalize("NFKC").toLowerCase(),
  }));
}

/** Where a sentence's token range `span` lies in a text of several sentences: the sentence
 * start whose range shares most words with the neighbour's source. */
export function queryRange(toks, span, neighbourWords) {
  if (!span || !toks.length) return null;
  const [a, b] = span;
  const starts = [0];
  toks.forEach((t, i) => {
    if (/^[.!?]$/.test(t.norm) && i + 1 < toks.length) starts.push(i + 1);
  });
  let best = null;
  let bestScore = -1;
  for (const o of starts) {
    if (o + a >= toks.length) continue;
    let score = 0;
    for (let i = o + a; i < Math.min(o + b, toks.length); i++) {
      if (neighbourWords.has(toks[i].norm)) score++;
    }
    if (score > bestScore) [best, bestScore] = [o, score];
  }
  if (best === null) return null;
  return [best + a, Math.min(best + b, toks.length)];
}

/** `text` as nodes, with the character ranges `ranges` (sorted) in <mark>. */
export function marked(text, ranges) {
  const frag = document.createDocumentFragment();
  let at = 0;
  for (const [s, e] of ranges) {
    if (s > at) frag.append(text.slice(at, s));
    frag.append(element("mark", {}, text.slice(s, e)));
    at = e;
  }
  if (at < text.length) frag.append(text.slice(at));
  return frag;
}

/** Character ranges of the tokens of `toks` that `keep` selects, neighbours joined when only
 * spaces lie between them. */
export function runs(text, toks, keep) {
  const out = [];
  toks.forEach((t, i) => {
    if (!keep(t, i)) return;
    const last = out[out.length - 1];
    if (last && !text.slice(last[1], t.start).trim()) last[1] = t.end;
    else out.push([t.start, t.end]);
  });
  return out;
}

/** Character ranges to mark in a neighbour's source: within its side of the match
 * (`matched`, where it occurs there), the words it shares with the query's matched range;
 * the whole side when it shares none (a dense match). */
export function sourceRanges(source, toks, matched, queryWords) {
  const at = matched ? source.toLowerCase().indexOf(matched.toLowerCase()) : -1;
  const inside = (t) => at < 0 || (t.start >= at && t.end <= at + matched.length);
  const shared = runs(source, toks, (t) => inside(t) && queryWords.has(t.norm));
  return shared.length || at < 0 ? shared : [[at, at + matched.length]];
}

export function words(toks) {
  return new Set(toks.filter((t) => WORD.test(t.norm)).map((t) => t.norm));
}
