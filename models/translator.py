"""Text in, text out: tokenise, batch by length, decode, detokenise.

The one call that the CLI, evaluation and the service share, so that every path translates
the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from models.bundle import LoadedBundle, load_bundle
from models.data import pad_batch
from models.decoding import beam_search, greedy
from models.tokenizer import Tokenizer

TOKENIZER_FILE = "spm.model"
# The committed English->German bundle, served when no model is configured.
DEFAULT_BUNDLE = Path(__file__).resolve().parent / "default_bundle"


@dataclass(frozen=True)
class DecodeOptions:
    beam_size: int = 4
    length_penalty: float = 1.0
    max_len_a: float = 1.5
    max_len_b: int = 10
    batch_size: int = 32


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

    def translate(self, texts: list[str], options: DecodeOptions = DecodeOptions()) -> list[str]:
        """Translate `texts` in length-sorted batches; output order matches input order."""
        max_src = self.model.config.max_len
        ids = [self.tokenizer.encode(t, self.source_lang)[:max_src] for t in texts]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out: list[str] = [""] * len(texts)
        device = next(self.model.parameters()).device
        for start in range(0, len(order), options.batch_size):
            chunk = order[start : start + options.batch_size]
            src = pad_batch([ids[i] for i in chunk]).to(device)
            with torch.inference_mode():
                if options.beam_size <= 1:
                    hyps = greedy(self.model, src, options.max_len_a, options.max_len_b)
                else:
                    hyps = beam_search(
                        self.model,
                        src,
                        beam_size=options.beam_size,
                        length_penalty=options.length_penalty,
                        max_len_a=options.max_len_a,
                        max_len_b=options.max_len_b,
                    )
            for i, hyp in zip(chunk, hyps, strict=True):
                out[i] = self.tokenizer.decode(hyp)
        return out
