"""The shipped training configs parse, and the memory model's warm-starts from the baseline's."""

import json
from importlib.resources import files

import pytest

from models.registry import build_model
from models.semiparametric import from_transformer
from models.train import TrainConfig

pytestmark = pytest.mark.unit


def _config(name: str) -> TrainConfig:
    return TrainConfig.from_dict(json.loads((files("models") / "configs" / name).read_text()))


def test_semiparametric_config_warm_starts_from_the_baseline_config() -> None:
    base, mem = _config("transformer-en-de.json"), _config("semiparametric-en-de.json")
    shape = {"vocab_size": 512, "max_len": base.max_len + 2}
    baseline = build_model(base.arch, {**shape, **base.model})
    model = build_model(mem.arch, {**shape, **mem.model})
    warm = from_transformer(baseline, model.config)  # raises on any shape difference
    assert warm.uses_memory and not baseline.uses_memory
    assert 0 < mem.neighbours <= model.config.max_neighbours
    assert base.max_len == mem.max_len
