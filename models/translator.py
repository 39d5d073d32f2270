"""Text in, text out: tokenise, batch by length, decode by the model's strategy, detokenise.

`models.pipeline` calls this for every caller (service, CLI, evaluation, benchmarks). What a
model is — its tokenizer kind, its decoding strategy, whether it reads retrieved pairs — comes
from its bundle's manifest (`models.bundle.model_card`), never from its architecture's name.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pad_sequence

from models import defaults
from models.bundle import SPM_FILE, LoadedBundle, ModelCard, load_bundle, model_card
from models.data import pad_batch
from models.decoding import RepeatBan, Repeats, beam_search, ctc_greedy, ctc_rerank, greedy
from models.devices import decode_autocast_dtype
from models.layers import EncoderState
from models.ort_ctc import OrtCtc
from models.ort_decoder import ORT_MODES, OrtDecoder, thread_budget
from models.output_checks import repeated
from models.quantize import ort_model, quantize_int8, resolve
from models.semiparametric import Neighbours
from models.tokenizer import ByteTokenizer, Tokenizer, load_tokenizer, tokenizer_id

TOKENIZER_FILE = SPM_FILE  # a SentencePiece bundle's tokenizer
# The committed bundles. English->German: the semi-parametric model (issue 4) is served, and
# encodes dense stores, when no model is configured; the baseline Transformer (issue 2) it was
# warm-started from is what every result is compared to. German->English: the same Transformer
# recipe the other way (issue 29's teacher), served for that pair.
DEFAULT_BUNDLE = Path(__file__).resolve().parent / "semiparametric_bundle"
BASELINE_BUNDLE = Path(__file__).resolve().parent / "baseline_bundle"
BASELINE_DE_EN_BUNDLE = Path(__file__).resolve().parent / "baseline_de_en_bundle"
COMMITTED_BUNDLES = (DEFAULT_BUNDLE, BASELINE_BUNDLE, BASELINE_DE_EN_BUNDLE)


# Retrieved texts whose pieces a translator keeps (`Translator._pieces`).
NEIGHBOUR_PIECES = 20_000
FORMATS = ("text", "html")  # what a text may be: plain text, or an HTML fragment or page
NeighbourTexts = Sequence[tuple[str, str]]  # retrieved (source, target) pairs of one text


@dataclass(frozen=True)
class Translation:
    """One output; `gate` is the mean share of context taken from the source (1.0: memory
    unused), None when the model has no memory or the text had no neighbours."""

    text: str
    gate: float | None


@dataclass(frozen=True)
class DecodeOptions:
    """Every option of the translation path, with the one set of defaults (models.defaults).

    beam_size 1 decodes greedily; a CTC model ignores the beam and the length penalty and
    decodes greedily unless `ctc_beam` asks for a prefix beam search (its n-best re-ranked by
    the translator's teacher for the pair, when it has one: `Translator.with_teacher`).
    """

    beam_size: int = defaults.BEAM_SIZE
    ctc_beam: int = 1
    length_penalty: float = defaults.LENGTH_PENALTY  # GNMT exponent
    max_len_a: float = 1.5
    max_len_b: int = 10
    batch_size: int = defaults.BATCH_SIZE
    split_sentences: bool = defaults.SPLIT_SENTENCES  # decode a text sentence by sentence
    neighbours_k: int = defaults.NEIGHBOURS_K  # retrieved pairs per sentence
    # no whole word and no span of 2..block_repeats sub-words said twice back to back (0:
    # allowed); sub-word models only, a byte model repeats byte pairs in ordinary words
    block_repeats: int = defaults.BLOCK_REPEATS
    # URLs, paths, numbers, placeholders, emoji and markup masked and restored exactly
    # (models.literals); a text-level option of the pipeline, not of the decoder
    keep_literals: bool = defaults.KEEP_LITERALS
    # with keep_literals: a sentence holding literals decoded once, masked, instead of twice
    # (as it is, kept where it kept them all, and masked); for a model trained on the masks
    # (`ragmt data mask-literals`), which then needs no unmasked attempt
    mask_first: bool = False
    # "text", or "html": the text of each block translated, tags kept (models.markup)
    format: str = "text"

    def __post_init__(self) -> None:
        if min(self.beam_size, self.ctc_beam, self.batch_size, self.neighbours_k) < 1:
            raise ValueError("beam_size, ctc_beam, batch_size and neighbours_k must be at least 1")
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.block_repeats < 0:
            raise ValueError("block_repeats must not be negative (0: repeats allowed)")
        if self.length_penalty < 0:
            raise ValueError("length_penalty must not be negative")


class Translator:
    """A model plus its tokenizer and languages, translating lists of sentences.

    `decoding` names the strategy (`STRATEGIES`); `uses_memory` whether the model reads
    retrieved pairs (default: what the module says of itself). A bundle's card sets both.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Tokenizer | ByteTokenizer,
        source_lang: str,
        target_lang: str,
        decoding: str = "autoregressive",
        uses_memory: bool | None = None,
        card: ModelCard | None = None,
    ) -> None:
        if decoding not in STRATEGIES:
            raise ValueError(f"decoding must be one of {sorted(STRATEGIES)}, got {decoding!r}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.source_lang = source_lang
        self.target_lang = target_lang
        self.decoding = decoding
        self._uses_memory = (
            bool(getattr(model, "uses_memory", False)) if uses_memory is None else uses_memory
        )
        self.card = card
        self._repeats: Repeats | None = None  # what counts as a loop, made when first needed
        # A store returns the same pairs to many requests: their pieces are kept by text and
        # language, so a request tokenises only the neighbours it has not met before (about
        # a millisecond a sentence at batch 1 otherwise, as long as retrieving them).
        self._pieces = functools.lru_cache(maxsize=NEIGHBOUR_PIECES)(self._encode_pieces)
        # autoregressive models that re-rank a CTC model's n-best, by (source, target)
        self.teachers: dict[tuple[str, str], nn.Module] = {}

    @classmethod
    def from_bundle(
        cls, path: Path | str, device: str = "cpu", quantize: str = "none"
    ) -> Translator:
        bundle: LoadedBundle = load_bundle(Path(path), device=device)
        return cls.from_loaded(bundle, quantize)

    @classmethod
    def from_loaded(cls, bundle: LoadedBundle, quantize: str = "none") -> Translator:
        """`quantize`: "ort-int8" / "ort" encode and decode in ONNX Runtime, int8 or float
        (`models.ort_decoder`, CPU only); "int8" decodes with PyTorch int8 decoder weights
        (`models.quantize`; "int8-rows": activations quantized row by row, so a batch changes
        no output); "auto" as `models.quantize.resolve` says. The bundle's own model stays
        float for what else uses it (a dense store's encoder)."""
        quantize = resolve(quantize, next(bundle.model.parameters()).device, bundle.model)
        card = model_card(bundle.manifest, bundle.path)
        file = bundle.file(card.tokenizer_file) if card.tokenizer_file else None
        source, target = card.pairs[0]
        if quantize in ("int8", "int8-rows"):
            model = quantize_int8(bundle.model, per_row=quantize == "int8-rows")
        elif quantize in ORT_MODES:
            model = ort_model(bundle.model, quantize)
        else:
            model = bundle.model
        return cls(
            model,
            load_tokenizer(card.tokenizer, file),
            source,
            target,
            decoding=card.decoding,
            uses_memory=card.uses_memory,
            card=card,
        )

    def with_teacher(self, teacher: Translator) -> Translator:
        """This CTC translator with `teacher` (an autoregressive translator of one of its pairs,
        over the same vocabulary) re-ranking its prefix beam search for that pair
        (`DecodeOptions.ctc_beam`); ValueError when they do not fit together."""
        pair = (teacher.source_lang, teacher.target_lang)
        if self.decoding != "ctc" or teacher.decoding != "autoregressive":
            raise ValueError("a teacher re-ranks a CTC model's n-best: it must be autoregressive")
        own = ((self.source_lang, self.target_lang),)
        if pair not in (self.card.pairs if self.card is not None else own):
            raise ValueError(f"the teacher translates {pair[0]}->{pair[1]}; the model does not")
        if tokenizer_id(teacher.tokenizer) != tokenizer_id(self.tokenizer):
            raise ValueError("the teacher's vocabulary is not the model's: its scores do not apply")
        other = copy.copy(self)
        other.teachers = {**self.teachers, pair: teacher.model}
        return other

    def for_pair(self, source: str, target: str, unseen: bool = False) -> Translator:
        """This translator for another of the model's pairs (a many-to-English model serves
        each source): the same model and tokenizer, the pair's languages. ValueError naming
        the pairs when the model does not translate it.

        `unseen`: also from a source language the model was never trained on, into one of its
        targets (zero-shot cross-lingual transfer: a Russian model reading Ukrainian). A model
        told the pair (`directional`) has no parts for such a language and is refused."""
        if (source, target) == (self.source_lang, self.target_lang):
            return self
        own = ((self.source_lang, self.target_lang),)
        pairs = self.card.pairs if self.card is not None else own
        if (source, target) not in pairs:
            served = ", ".join(f"{s}->{t}" for s, t in pairs)
            if not unseen:
                raise ValueError(f"the model translates {served}, not {source}->{target}")
            if getattr(self.model, "directional", False):
                raise ValueError(
                    f"the model translates {served} and is told the pair: it has no parts "
                    f"for an unseen pair such as {source}->{target}"
                )
            if target not in {t for _, t in pairs}:
                raise ValueError(f"the model translates {served}: it does not write {target}")
        other = copy.copy(self)
        other.source_lang, other.target_lang = source, target
        return other

    @staticmethod
    def _autocast(device: torch.device) -> contextlib.AbstractContextManager:
        """Half-precision decoding on CUDA (see models.devices); nothing on CPU."""
        dtype = decode_autocast_dtype(device)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=dtype)

    @property
    def uses_memory(self) -> bool:
        """Whether the model reads retrieved pairs (then `neighbours` shape its output)."""
        return self._uses_memory

    def translate(
        self,
        texts: Sequence[str],
        options: DecodeOptions = DecodeOptions(),
        neighbours: Sequence[NeighbourTexts] | None = None,
    ) -> list[str]:
        """Translate `texts` in length-sorted batches; output order matches input order."""
        return [t.text for t in self.translate_detailed(texts, options, neighbours)]

    def translate_detailed(
        self,
        texts: Sequence[str],
        options: DecodeOptions = DecodeOptions(),
        neighbours: Sequence[NeighbourTexts] | None = None,
        gates: bool = False,
        sources: Sequence[Tensor | None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[Translation]:
        """Like `translate`, plus (with `gates`) each output's mean memory gate.

        `progress(n)` is called after each batch with the number of texts it finished (a
        command line shows a progress bar with it).

        `neighbours[i]` are the retrieved (source, target) pairs of `texts[i]`; a model without
        a memory ignores them. Beam search sums the gate along each hypothesis as it decodes,
        so the gate costs no second pass; greedy decoding then runs as beam search of width 1,
        which gives greedy's output exactly. `sources[i]`, when given, is `texts[i]`'s
        encoding from `source_states` (dense retrieval made it); a batch whose texts all have
        one is not encoded again, any other batch is. A text with no sub-word (blank, or only
        what the tokenizer drops) translates to "" and is not decoded.
        """
        if neighbours is not None and len(neighbours) != len(texts):
            raise ValueError(f"{len(neighbours)} neighbour lists for {len(texts)} texts")
        if sources is not None and len(sources) != len(texts):
            raise ValueError(f"{len(sources)} source encodings for {len(texts)} texts")
        ids = self._source_ids(texts)
        memory = self.uses_memory and neighbours is not None
        out: list[Translation] = [Translation("", None)] * len(texts)
        strategy = STRATEGIES[self.decoding]

        def run(chunk: list[int], src: Tensor) -> None:
            nb = self._neighbours([neighbours[i] for i in chunk]) if memory else None
            made = [sources[i] for i in chunk] if sources is not None else []
            source = _source_state(made, src, self.model.config.pad_id) if made else None
            row_gates: list[float | None] | None = [] if gates and nb is not None else None
            repeats = self._repeat_ban(src, options.block_repeats, [texts[i] for i in chunk])
            languages = (self.source_lang, self.target_lang)
            batch = DecodeBatch(src, options, nb, source, row_gates, repeats, languages,
                                self.teachers.get(languages))  # fmt: skip
            with torch.inference_mode(), self._autocast(src.device):
                hyps = strategy(self.model, batch)
            for j, (i, hyp) in enumerate(zip(chunk, hyps, strict=True)):
                gate = None if row_gates is None else row_gates[j]
                out[i] = Translation(self.tokenizer.decode(hyp), gate)

        batches = list(self._length_batches(ids, options.batch_size, skip_empty=True))
        workers = self._workers(len(batches))
        if workers == 1:
            for chunk, src in batches:
                run(chunk, src)
                if progress is not None:
                    progress(len(chunk))
            return out
        # Batches decoded at once, each on its share of the threads: ONNX Runtime splits one
        # call's operators across threads poorly, and releases the GIL while it runs.
        share = max(1, torch.get_num_threads() // workers)

        def run_share(chunk: list[int], src: Tensor) -> int:
            with thread_budget(share):
                run(chunk, src)
            return len(chunk)

        with ThreadPoolExecutor(workers, thread_name_prefix="decode") as pool:
            for done in as_completed([pool.submit(run_share, c, s) for c, s in batches]):
                n = done.result()
                if progress is not None:
                    progress(n)
        return out

    def _workers(self, batches: int) -> int:
        """How many batches to decode at once: one per thread for an ONNX Runtime model on
        the CPU (its graphs and gates are safe to share), else one."""
        if not isinstance(self.model, OrtDecoder | OrtCtc) or batches < 2:
            return 1
        return max(1, min(torch.get_num_threads(), batches))

    def _repeat_ban(self, src: Tensor, max_n: int, texts: Sequence[str]) -> RepeatBan | None:
        """The batch's ban on back-to-back repeats (None: off, or a byte tokenizer); what
        each source `texts[i]` says again, by its words as loops are counted
        (`output_checks.repeated`), its translation may too."""
        if max_n == 0 or not isinstance(self.tokenizer, Tokenizer):
            return None
        if self._repeats is None or self._repeats.max_n != max_n:
            words = torch.zeros(self.tokenizer.vocab_size, dtype=torch.bool)
            words[self.tokenizer.word_ids()] = True
            gaps = torch.zeros(self.tokenizer.vocab_size, dtype=torch.bool)
            gaps[self.tokenizer.gap_ids()] = True
            stops = torch.zeros(self.tokenizer.vocab_size, dtype=torch.bool)
            stops[self.tokenizer.stop_ids()] = True
            wordy = torch.zeros(self.tokenizer.vocab_size, dtype=torch.bool)
            wordy[self.tokenizer.wordy_ids()] = True
            canon = torch.tensor(self.tokenizer.canonical_ids())
            self._repeats = Repeats(canon, words, max_n, gaps, stops, wordy)
        free = [repeated(t) for t in texts]
        return self._repeats.ban(src, self.model.config.pad_id, free)

    def _length_batches(
        self, ids: Sequence[list[int]], batch_size: int, skip_empty: bool = False
    ) -> Iterator[tuple[list[int], Tensor]]:
        """(positions in `ids`, padded batch `(B, S)` on the model's device), sorted by length
        so that a batch pads little; translating and encoding batch the same way.
        `skip_empty`: leave out texts with no sub-word (nothing to encode or decode)."""
        order = sorted(
            (i for i in range(len(ids)) if ids[i] or not skip_empty), key=lambda i: len(ids[i])
        )
        device = next(self.model.parameters()).device
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            yield chunk, pad_batch([ids[i] for i in chunk]).to(device)

    def _source_ids(self, texts: Sequence[str]) -> list[list[int]]:
        max_src = self.model.config.max_len
        return [self.tokenizer.encode(t, self.source_lang)[:max_src] for t in texts]

    def source_states(self, texts: Sequence[str], batch_size: int = 32) -> list[Tensor]:
        """Each text's final encoder states `(T_i, D)`, as `translate_detailed` encodes it.

        What a dense store built with this model's encoder turns into n-gram vectors, and what
        `translate_detailed(sources=...)` takes back: a request is encoded once, not once for
        retrieval and again for decoding. Computed in float32 without autocast, as the store's
        vectors were, and left on the model's device. A text with no sub-word gets `(0, D)`
        (`translate_detailed` does not decode it).
        """
        ids = self._source_ids(texts)
        device = next(self.model.parameters()).device
        out = [torch.empty(0, self.model.config.d_model, device=device)] * len(texts)
        for chunk, src in self._length_batches(ids, batch_size, skip_empty=True):
            with torch.inference_mode():
                memory = self.model.encode(src).memory.float()  # (B, S, D)
            for j, i in enumerate(chunk):
                out[i] = memory[j, : len(ids[i])]
        return out

    def _encode_pieces(self, text: str, lang: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text, lang))

    def _neighbours(self, batch: Sequence[NeighbourTexts]) -> Neighbours:
        """Tokenise retrieved pairs, capped to the model's neighbour count and width."""
        c = self.model.config
        width = c.max_neighbour_len
        pairs = [
            [
                (
                    self._pieces(s, self.source_lang)[:width],
                    self._pieces(t, self.target_lang)[:width],
                )
                for s, t in sentence[: c.max_neighbours]
            ]
            for sentence in batch
        ]
        # A pair whose either side tokenises to nothing cannot be read; drop it.
        pairs = [[(s, t) for s, t in sentence if s and t] for sentence in pairs]
        return Neighbours.from_lists(pairs, pad_id=c.pad_id)


@dataclass(frozen=True)
class DecodeBatch:
    """One length-sorted batch as a decoding strategy sees it."""

    src: Tensor  # (B, S) right-padded ids
    options: DecodeOptions
    neighbours: Neighbours | None  # retrieved pairs, for a model that reads them
    source: EncoderState | None  # the source's encoding when retrieval made it
    gates: list[float | None] | None  # filled with each row's mean gate when not None
    repeats: RepeatBan | None = None  # back-to-back repeats forbidden (autoregressive only)
    languages: tuple[str, str] | None = None  # (source, target) being translated
    teacher: nn.Module | None = None  # re-ranks a CTC prefix beam search's n-best


def _autoregressive(model: nn.Module, b: DecodeBatch) -> list[list[int]]:
    """Beam search, or greedy search at beam 1; with `gates` to fill, beam 1 stands in for
    greedy (its exact output) because beam search sums the gate as it decodes."""
    o = b.options
    # a model that translates several ways (the sparse multilingual one) is told the pair
    languages = b.languages if getattr(model, "directional", False) else None
    if o.beam_size <= 1 and b.gates is None:
        return greedy(
            model,
            b.src,
            o.max_len_a,
            o.max_len_b,
            neighbours=b.neighbours,
            source=b.source,
            repeats=b.repeats,
            languages=languages,
        )
    return beam_search(
        model,
        b.src,
        beam_size=o.beam_size,
        length_penalty=o.length_penalty,
        max_len_a=o.max_len_a,
        max_len_b=o.max_len_b,
        neighbours=b.neighbours,
        gates=b.gates,
        source=b.source,
        repeats=b.repeats,
        languages=languages,
    )


def _ctc(model: nn.Module, b: DecodeBatch) -> list[list[int]]:
    """One non-autoregressive pass, best path collapsed; no beam, no memory, no gate. A model
    that runs several ways (`directional`, REDER) is told the pair."""
    if b.gates is not None:
        b.gates.extend([None] * b.src.size(0))
    languages = b.languages if getattr(model, "directional", False) else None
    if b.options.ctc_beam > 1:
        return ctc_rerank(model, b.src, languages, b.options.ctc_beam, b.teacher)
    return ctc_greedy(model, b.src, languages)


# Decoding strategy by the name a bundle declares (models.registry.DECODING_KINDS).
Strategy = Callable[[nn.Module, DecodeBatch], list[list[int]]]
STRATEGIES: dict[str, Strategy] = {"autoregressive": _autoregressive, "ctc": _ctc}


def _source_state(made: Sequence[Tensor | None], src: Tensor, pad_id: int) -> EncoderState | None:
    """The batch's encoder state from per-text encodings `(T_i, D)`; None unless every text
    of the batch has one (then the batch is encoded as usual)."""
    if any(m is None for m in made):
        return None
    lengths = src.ne(pad_id).sum(dim=1).tolist()
    for m, n in zip(made, lengths, strict=True):
        if m.dim() != 2 or m.size(0) != n:
            raise ValueError(
                f"a source encoding of shape {tuple(m.shape)} for a text of {n} sub-words: "
                "not this model's encoding of it"
            )
    memory = pad_sequence([m.to(src.device) for m in made], batch_first=True)  # (B, S, D)
    return EncoderState(memory=memory, src_pad=src.eq(pad_id))
