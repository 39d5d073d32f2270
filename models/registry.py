"""Architecture name table: the names stored in model bundles and what each name means.

A bundle records its architecture by name, never by import path, so only the classes listed
here can ever be instantiated from a bundle. Each line also says how the architecture decodes
and which retrieval stores it reads, so the translation pipeline asks the registry, never checks
names. A new architecture is its model file (a frozen config and the module) and one line here;
a test may `register` a toy architecture of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from models.byte_fusion import ByteFusionConfig, ByteFusionTransformer
from models.ctc_mtl import CtcMtl, CtcMtlConfig
from models.reder import Reder, RederConfig
from models.semiparametric import SemiParametricConfig, SemiParametricModel
from models.sparse_transformer import SparseTransformer, SparseTransformerConfig
from models.transformer import Transformer, TransformerConfig

__all__ = [
    "ARCHITECTURES",
    "DECODING_KINDS",
    "STORE_KINDS",
    "Architecture",
    "architecture",
    "build_model",
    "register",
]

# How a model turns a source into a target (see models.strategies):
#   autoregressive: encode / init_cache / decode_step, searched by beam search or greedily;
#   ctc: one non-autoregressive pass, `ctc_log_probs`, collapsed by CTC's rule.
DECODING_KINDS = frozenset({"autoregressive", "ctc"})
# What a model reads from a domain's retrieval store besides the source:
#   sentence-pairs: retrieved (source, target) translation pairs per sentence.
STORE_KINDS = frozenset({"sentence-pairs"})


@dataclass(frozen=True)
class Architecture:
    """One architecture: its config and module classes, its decoding, the stores it reads."""

    config: type
    model: type
    decoding: str = "autoregressive"
    reads: tuple[str, ...] = ()  # store kinds; () reads no store

    def __post_init__(self) -> None:
        if self.decoding not in DECODING_KINDS:
            raise ValueError(f"decoding must be one of {sorted(DECODING_KINDS)}")
        unknown = set(self.reads) - STORE_KINDS
        if unknown:
            raise ValueError(f"unknown store kinds {sorted(unknown)}; known {sorted(STORE_KINDS)}")


ARCHITECTURES: dict[str, Architecture] = {
    "transformer": Architecture(TransformerConfig, Transformer),
    "semiparametric": Architecture(
        SemiParametricConfig, SemiParametricModel, reads=("sentence-pairs",)
    ),
    "byte-fusion": Architecture(ByteFusionConfig, ByteFusionTransformer),
    "reder": Architecture(RederConfig, Reder, decoding="ctc"),
    "reder-mtl": Architecture(CtcMtlConfig, CtcMtl, decoding="ctc"),
    "sparse-transformer": Architecture(SparseTransformerConfig, SparseTransformer),
}


def register(name: str, arch: Architecture) -> None:
    """Add an architecture (a test's toy one); a name is never silently redefined."""
    known = ARCHITECTURES.get(name)
    if known is not None and known != arch:
        raise ValueError(f"architecture {name!r} is registered already")
    ARCHITECTURES[name] = arch


def architecture(name: str) -> Architecture:
    """The registry line of `name`; ValueError naming the known ones."""
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise ValueError(
            f"unknown architecture {name!r}; known: {', '.join(sorted(ARCHITECTURES))}"
        ) from None


def build_model(arch: str, config: dict[str, Any]) -> nn.Module:
    """A freshly initialised model of architecture `arch` from its config dict."""
    spec = architecture(arch)
    return spec.model(spec.config.from_dict(config))
