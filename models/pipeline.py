"""The one translation path: prepare, decode, finish.

The service (with its micro-batcher between decode's callers), `ragmt translate`, `ragmt eval`
and the benchmarks all translate through these three steps, so a default or a rule changed here
changes everywhere at once:

- prepare: blank texts kept blank, texts cut into sentences, neighbours retrieved for each
  sentence when the model reads them (or the caller wants them as provenance), and a second,
  masked copy of each sentence that holds literal text (URLs, paths, numbers, placeholders,
  emoji, markup; `models.literals`) or a term of the domain's glossary (`models.glossary`);
- decode: the model's own strategy (`Translator.translate_detailed`), batched; concurrent
  requests' sentences may share one call;
- finish: a sentence's own translation kept where it kept its literals and used its glossary
  terms, else its masked copy's with them restored (each term as its glossary target); where a
  tag pair came back empty (German moved the word it marked), the tags moved around that word,
  else a third copy's, with the pair masked whole, translation used; sentences joined back into
  texts, each with its mean memory gate, the neighbours it read and the step timings.

Retrieval is passed in as a function (`Retrieve`) so that this package imports no index code;
`index_builder.retrieval.serving.retrieve_with` makes one from a store's retriever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from torch import Tensor

from models.literals import Masked, Terms, keeps, mask, mask_pair, unmask
from models.markup import Document, fill, split_html
from models.segment import Segmented, is_blank, segment
from models.tag_pairs import Wrapped, repair, wrap
from models.translator import DecodeOptions, Translation, Translator

__all__ = [
    "Output",
    "Prepared",
    "Result",
    "Retrieve",
    "decode",
    "finish",
    "prepare",
    "translate",
]


class Hit(Protocol):
    """A retrieved translation pair (index_builder's `Neighbour` is one)."""

    source: str
    target: str


# (sentences, k) -> per sentence its hits, and the sentences' encodings when retrieval made
# them with the translating model (decoding then does not encode them again), else None.
Retrieve = Callable[[Sequence[str], int], tuple[list[list[Any]], list[Tensor] | None]]


@dataclass(frozen=True)
class Prepared:
    """A request's texts ready to decode: its sentences and what retrieval found for them."""

    texts: list[str]
    seg: Segmented
    hits: list[list[Any]] | None = None  # per sentence; None: nothing retrieved
    sources: list[Tensor] | None = None  # per sentence, its encoding made by retrieval
    reads_hits: bool = False  # whether decoding reads the hits (the model reads pairs)
    retrieval_ms: float = 0.0
    masked: list[Masked] | None = None  # per sentence its literals (terms) masked; None: as is
    docs: list[Document] | None = None  # format "html": each text's units and tags
    # per text of `inner_texts`, what retrieval found for it; None: its sentence's hits
    inner_hits: list[list[Any]] | None = None
    # the variants holding literals only (no glossary term) are decoded masked only, in
    # their sentence's place (`DecodeOptions.mask_first`)
    mask_first: bool = False

    @cached_property
    def variants(self) -> list[int]:
        """The sentences that hold literal text or glossary terms: each is decoded twice, as it
        is and with them masked (`finish` keeps the first where it kept them all), or masked
        only (`in_place`)."""
        if self.masked is None:
            return []
        return [
            i
            for i, m in enumerate(self.masked)
            if (m.literals or m.prefix or m.suffix) and not m.empty
        ]

    @cached_property
    def in_place(self) -> frozenset[int]:
        """The variants decoded masked only, in their sentence's place: with `mask_first`,
        those without a glossary term (a term's own translation may inflect it, which its
        restored mask cannot)."""
        if not self.mask_first:
            return frozenset()
        masked = self.masked or []
        return frozenset(i for i in self.variants if not masked[i].terms)

    @cached_property
    def _appended(self) -> dict[int, int]:
        """Each variant decoded twice: its masked text's place among `sentences`."""
        n = len(self.seg.segments)
        twice = [i for i in self.variants if i not in self.in_place]
        return {i: n + k for k, i in enumerate(twice)}

    def masked_at(self, j: int) -> int:
        """Where the masked translation of variant j (`variants[j]`) is among `sentences`."""
        i = self.variants[j]
        return i if i in self.in_place else self._appended[i]

    @property
    def extra_at(self) -> int:
        """Where `extra`'s translations start among `sentences`."""
        return len(self.seg.segments) + len(self._appended)

    @cached_property
    def wraps(self) -> dict[int, Wrapped]:
        """The variants whose masked text holds a tag pair around words, with each such pair
        masked whole (`literals.wrap`): its words may move in translation and leave the tags
        empty, which `finish` repairs with the wrapped text's and the pairs' own translations."""
        masked = self.masked or []
        found = {i: wrap(masked[i]) for i in self.variants}
        return {i: w for i, w in found.items() if w is not None}

    @cached_property
    def extra(self) -> list[tuple[int, Masked]]:
        """(sentence, text) decoded after the variants: per wrap its wrapped text, then what
        each of its pairs encloses (unless that is literals only)."""
        return [
            (i, m)
            for i, w in self.wraps.items()
            for m in (w.masked, *(x for x in w.inner if not x.empty))
        ]

    @property
    def inner_texts(self) -> list[str]:
        """What the wrapped pairs enclose, in `extra`'s order: retrieved for on their own, as
        their sentence's neighbours pull a lone word toward another of its words."""
        return [m.text for w in self.wraps.values() for m in w.inner if not m.empty]

    @property
    def sentences(self) -> list[str]:
        """What decoding translates: each sentence (the masked text of one `in_place`), each
        other variant's masked text, then `extra`."""
        masked = self.masked or []
        own = [masked[i].text if i in self.in_place else s for i, s in enumerate(self.seg.segments)]
        return own + [masked[i].text for i in self._appended] + [m.text for _, m in self.extra]

    @property
    def pairs(self) -> list[list[tuple[str, str]]] | None:
        """Per sentence of `sentences` the (source, target) pairs decoding reads, a variant's
        with its literals and glossary terms masked in them as in it; None when it reads none."""
        if self.hits is None or not self.reads_hits:
            return None
        masked = self.masked or []
        hits = self.hits

        def masked_pairs(i: int) -> list[tuple[str, str]]:
            return [mask_pair(h.source, h.target, masked[i]) for h in hits[i]]

        out = [
            masked_pairs(i) if i in self.in_place else [(h.source, h.target) for h in found]
            for i, found in enumerate(hits)
        ]
        out += [masked_pairs(i) for i in self._appended]
        inner = iter(self.inner_hits or [])
        for i, w in self.wraps.items():  # as `extra`: the wrapped text masked, enclosed ones own
            out.append([mask_pair(h.source, h.target, w.masked) for h in self.hits[i]])
            for m in w.inner:
                if m.empty:
                    continue
                found = next(inner) if self.inner_hits is not None else self.hits[i]
                out.append([(h.source, h.target) for h in found])
        return out

    @property
    def encodings(self) -> list[Tensor | None] | None:
        """Per sentence of `sentences` its encoding made by retrieval (None: encode it)."""
        if self.sources is None:
            return None
        # a masked text in its sentence's place is not what retrieval encoded
        own = [None if i in self.in_place else s for i, s in enumerate(self.sources)]
        return [*own, *([None] * (len(self._appended) + len(self.extra)))]


@dataclass(frozen=True)
class Output:
    """One text's translation, its mean memory gate (None: no memory read) and, when
    retrieved, the neighbours of its sentences in order (provenance)."""

    text: str
    gate: float | None = None
    neighbours: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Result:
    outputs: list[Output]
    retrieval_ms: float
    decode_ms: float
    total_ms: float
    sentences: int


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 3)


def prepare(
    translator: Translator,
    texts: Sequence[str],
    options: DecodeOptions = DecodeOptions(),
    retrieve: Retrieve | None = None,
    provenance: bool = False,
    glossary: Terms | None = None,
) -> Prepared:
    """Cut `texts` into sentences (when `options.split_sentences`) and retrieve
    `options.neighbours_k` neighbours per sentence with `retrieve` when the model reads them,
    or when `provenance` asks for them anyway; mask each sentence's literals (when
    `options.keep_literals`) and `glossary` terms. A blank text stays a blank translation.
    Blocking (retrieval may encode with the model): call it from a worker thread in a server.
    """
    texts = ["" if is_blank(t) else t for t in texts]
    docs = [split_html(t) for t in texts] if options.format == "html" else None
    units = [u for d in docs for u in d.units] if docs is not None else texts
    seg = segment(units, options.split_sentences, translator.source_lang)
    masked = None
    if options.keep_literals or glossary is not None:
        masked = [mask(s, glossary, options.keep_literals) for s in seg.segments]
    reads = translator.uses_memory
    first = options.mask_first and masked is not None
    if retrieve is None or not (reads or provenance) or not seg.segments:
        return Prepared(texts, seg, reads_hits=reads, masked=masked, docs=docs, mask_first=first)
    start = time.perf_counter()
    todo = [i for i, s in enumerate(seg.segments) if not is_blank(s)]  # a blank reads nothing
    inner = Prepared(texts, seg, masked=masked).inner_texts if reads else []
    hits: list[list[Any]] = [[] for _ in seg.segments]
    sources: list[Tensor] | None = None
    inner_hits: list[list[Any]] | None = None
    if todo:
        found, made = retrieve([seg.segments[i] for i in todo] + inner, options.neighbours_k)
        if len(found) != len(todo) + len(inner):
            raise ValueError(
                f"retrieval gave {len(found)} lists for {len(todo) + len(inner)} sentences"
            )
        found, inner_hits = found[: len(todo)], [list(h) for h in found[len(todo) :]]
        made = made[: len(todo)] if made is not None else None
        for i, h in zip(todo, found, strict=True):
            hits[i] = list(h)
        if made is not None and len(todo) == len(seg.segments):
            sources = made
        elif made is not None:  # blanks are not decoded: any placeholder does
            sources = [made[0][:0]] * len(seg.segments)
            for i, m in zip(todo, made, strict=True):
                sources[i] = m
    return Prepared(
        texts,
        seg,
        hits=hits,
        sources=sources if reads else None,
        reads_hits=reads,
        retrieval_ms=_ms(start),
        masked=masked,
        docs=docs,
        inner_hits=inner_hits,
        mask_first=first,
    )


def decode(
    translator: Translator,
    sentences: Sequence[str],
    options: DecodeOptions = DecodeOptions(),
    pairs: Sequence[Sequence[tuple[str, str]]] | None = None,
    sources: Sequence[Tensor | None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[Translation]:
    """Each sentence's translation by the model's own decoding strategy, with its mean memory
    gate when the model reads `pairs`. Sentences of several requests may be decoded in one
    call (the service's micro-batcher): the output is the same as one call each."""
    return translator.translate_detailed(
        sentences,
        options,
        neighbours=pairs,
        gates=pairs is not None,
        sources=sources,
        progress=progress,
    )


def finish(
    prepared: Prepared, decoded: Sequence[Translation], repair_markup: bool = True
) -> list[Output]:
    """Per text: its sentences' translations joined (a sentence with literal text or glossary
    terms: its own translation where that kept every literal and used every term, else (or
    always, `Prepared.in_place`) its masked one restored; a tag pair left empty repaired,
    `tag_pairs.repair`, unless not `repair_markup`, which measures the repair; an HTML text's
    units put back between its tags); their mean gate; their neighbours."""
    seg = prepared.seg
    n = len(seg.segments)
    if len(decoded) != prepared.extra_at + len(prepared.extra):
        raise ValueError(f"{len(decoded)} translations for {len(prepared.sentences)} sentences")
    outs, gates_of = [t.text for t in decoded[:n]], [t.gate for t in decoded[:n]]
    masked = prepared.masked or []
    for i, m in enumerate(masked):
        if m.empty:  # literals only: nothing to translate
            outs[i] = m.prefix + m.suffix
    variant_of = {i: j for j, i in enumerate(prepared.variants)}
    restored = {}  # a variant's masked translation restored, where its own is not kept
    for j, i in enumerate(prepared.variants):
        at = prepared.masked_at(j)
        # the masked translation, restored, where the own one lost a literal or a term
        if i in prepared.in_place or not keeps(seg.segments[i], outs[i], masked[i]):
            outs[i] = restored[i] = unmask(decoded[at].text, masked[i])
            gates_of[i] = decoded[at].gate
    later = iter(decoded[prepared.extra_at :])
    for i, w in prepared.wraps.items() if repair_markup else ():  # pairs empty or misplaced
        whole = next(later).text
        inner = [unmask("" if m.empty else next(later).text, m) for m in w.inner]
        if i not in restored:
            restored[i] = unmask(decoded[prepared.masked_at(variant_of[i])].text, masked[i])
        candidates = list(dict.fromkeys([outs[i], restored[i]]))  # the chosen one first
        outs[i] = repair(seg.segments[i], candidates, w, whole, inner)
    texts = seg.join(outs)
    gates = seg.mean(gates_of)
    hits = seg.gather(prepared.hits) if prepared.hits is not None else [[] for _ in texts]
    if prepared.docs is None:
        return [Output(t, g, h) for t, g, h in zip(texts, gates, hits, strict=True)]
    out, start = [], 0
    for doc in prepared.docs:  # units back into their documents
        end = start + len(doc.units)
        values = [g for g in gates[start:end] if g is not None]
        gate = sum(values) / len(values) if values else None
        found = [x for unit in hits[start:end] for x in unit]
        out.append(Output(fill(doc, texts[start:end]), gate, found))
        start = end
    return out


def translate(
    translator: Translator,
    texts: Sequence[str],
    options: DecodeOptions = DecodeOptions(),
    retrieve: Retrieve | None = None,
    provenance: bool = False,
    progress: Callable[[int], None] | None = None,
    glossary: Terms | None = None,
) -> Result:
    """prepare, decode and finish in one blocking call (the CLI, evaluation, benchmarks)."""
    start = time.perf_counter()
    prepared = prepare(translator, texts, options, retrieve, provenance, glossary)
    t0 = time.perf_counter()
    decoded = decode(
        translator, prepared.sentences, options, prepared.pairs, prepared.encodings, progress
    )
    decode_ms = _ms(t0)
    return Result(
        outputs=finish(prepared, decoded),
        retrieval_ms=prepared.retrieval_ms,
        decode_ms=decode_ms,
        total_ms=_ms(start),
        sentences=len(prepared.seg.segments),
    )
