"""Text in, text out: tokenise, batch by length, decode, detokenise.

The one call that the CLI, evaluation and the service share, so that every path translates
the same way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pad_sequence

from models import defaults
from models.bundle import LoadedBundle, load_bundle
from models.data import pad_batch
from models.decoding import beam_search, greedy
from models.devices import decode_autocast_dtype
from models.layers import EncoderState
from models.segment import Segmented
from models.semiparametric import Neighbours
from models.tokenizer import Tokenizer

TOKENIZER_FILE = "spm.model"
# The committed English->German bundles: the semi-parametric model (issue 4) is served, and
# encodes dense stores, when no model is configured; the baseline Transformer (issue 2) it was
# warm-started from is what every result is compared to.
DEFAULT_BUNDLE = Path(__file__).resolve().parent / "semiparametric_bundle"
BASELINE_BUNDLE = Path(__file__).resolve().parent / "baseline_bundle"


NeighbourTexts = Sequence[tuple[str, str]]  # retrieved (source, target) pairs of one text


@dataclass(frozen=True)
class Translation:
    """One output; `gate` is the mean share of context taken from the source (1.0: memory
    unused), None when the model has no memory or the text had no neighbours."""

    text: str
    gate: float | None


@dataclass(frozen=True)
class DecodeOptions:
    beam_size: int = defaults.BEAM_SIZE
    length_penalty: float = defaults.LENGTH_PENALTY  # GNMT exponent
    max_len_a: float = 1.5
    max_len_b: int = 10
    batch_size: int = defaults.BATCH_SIZE


def join_translations(seg: Segmented, out: Sequence[Translation]) -> list[Translation]:
    """Translations of `seg.segments` -> one per text: texts joined, gates averaged."""
    texts = seg.join([t.text for t in out])
    gates = seg.mean([t.gate for t in out])
    return [Translation(t, g) for t, g in zip(texts, gates, strict=True)]


class Translator:
    """A model plus its tokenizer and languages, translating lists of sentences."""

    def __init__(
        self, model: nn.Module, tokenizer: Tokenizer, source_lang: str, target_lang: str
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.source_lang = source_lang
        self.target_lang = target_lang

    @classmethod
    def from_bundle(cls, path: Path | str, device: str = "cpu") -> Translator:
        bundle: LoadedBundle = load_bundle(Path(path), device=device)
        return cls.from_loaded(bundle)

    @classmethod
    def from_loaded(cls, bundle: LoadedBundle) -> Translator:
        langs = bundle.manifest["languages"]
        tok = Tokenizer(Path(bundle.path) / TOKENIZER_FILE)
        return cls(bundle.model, tok, langs["source"], langs["target"])

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
        return bool(getattr(self.model, "uses_memory", False))

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
        for chunk, src in self._length_batches(ids, options.batch_size, skip_empty=True):
            nb = self._neighbours([neighbours[i] for i in chunk]) if memory else None
            made = [sources[i] for i in chunk] if sources is not None else []
            source = _source_state(made, src, self.model.config.pad_id) if made else None
            with torch.inference_mode(), self._autocast(src.device):
                row_gates: list[float | None] | None = [] if gates and nb is not None else None
                if options.beam_size <= 1 and row_gates is None:
                    hyps = greedy(
                        self.model,
                        src,
                        options.max_len_a,
                        options.max_len_b,
                        neighbours=nb,
                        source=source,
                    )
                else:  # with gates, beam 1 stands in for greedy (its exact output)
                    hyps = beam_search(
                        self.model,
                        src,
                        beam_size=max(1, options.beam_size),
                        length_penalty=options.length_penalty,
                        max_len_a=options.max_len_a,
                        max_len_b=options.max_len_b,
                        neighbours=nb,
                        gates=row_gates,
                        source=source,
                    )
            for j, (i, hyp) in enumerate(zip(chunk, hyps, strict=True)):
                gate = None if row_gates is None else row_gates[j]
                out[i] = Translation(self.tokenizer.decode(hyp), gate)
            if progress is not None:
                progress(len(chunk))
        return out

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

    def _neighbours(self, batch: Sequence[NeighbourTexts]) -> Neighbours:
        """Tokenise retrieved pairs, capped to the model's neighbour count and width."""
        c = self.model.config
        width = c.max_neighbour_len
        pairs = [
            [
                (
                    self.tokenizer.encode(s, self.source_lang)[:width],
                    self.tokenizer.encode(t, self.target_lang)[:width],
                )
                for s, t in sentence[: c.max_neighbours]
            ]
            for sentence in batch
        ]
        # A pair whose either side tokenises to nothing cannot be read; drop it.
        pairs = [[(s, t) for s, t in sentence if s and t] for sentence in pairs]
        return Neighbours.from_lists(pairs, pad_id=c.pad_id)


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
