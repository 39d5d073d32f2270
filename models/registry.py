"""Architecture name table: the names stored in model bundles and the classes they build.

A bundle records its architecture by name, never by import path, so only the classes listed
here can ever be instantiated from a bundle.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from models.semiparametric import SemiParametricConfig, SemiParametricModel
from models.transformer import Transformer, TransformerConfig

__all__ = ["ARCHITECTURES", "build_model"]

# name -> (config class with from_dict/to_dict, model class taking that config)
ARCHITECTURES: dict[str, tuple[type, type]] = {
    "transformer": (TransformerConfig, Transformer),
    "semiparametric": (SemiParametricConfig, SemiParametricModel),
}


def build_model(arch: str, config: dict[str, Any]) -> nn.Module:
    """A freshly initialised model of architecture `arch` from its config dict."""
    try:
        config_cls, model_cls = ARCHITECTURES[arch]
    except KeyError:
        raise ValueError(
            f"unknown architecture {arch!r}; known: {', '.join(sorted(ARCHITECTURES))}"
        ) from None
    return model_cls(config_cls.from_dict(config))
