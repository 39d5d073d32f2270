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


def test_the_bible_m2o_configs_share_one_body_and_one_epoch_budget() -> None:
    """Byte models differ only in their fusion; the subword baseline has the same body; all
    train for the same number of epochs (the paper's protocol)."""
    byte = {f: _config(f"byte-{f}-m2o.json") for f in ("none", "ncf", "wsf")}
    subword = _config("subword-m2o.json")
    body = ("d_model", "n_heads", "enc_layers", "dec_layers", "d_ff", "dropout")
    for cfg in (*byte.values(), subword):
        assert {k: cfg.model[k] for k in body} == {k: subword.model[k] for k in body}
        assert cfg.max_epochs == subword.max_epochs > 0 and cfg.lr == subword.lr
    for fusion, cfg in byte.items():
        model = build_model(cfg.arch, {"max_len": cfg.max_len + 2, **cfg.model})
        assert model.config.fusion == fusion and model.config.vocab_size == 260
    assert byte["ncf"].model["fusion_layers"] == 4 and byte["wsf"].model["fusion_layers"] == 2


def test_the_bible_teachers_have_the_baseline_body_and_an_epoch_budget() -> None:
    """REDER's autoregressive teachers (both directions) are the baseline's Transformer, with
    a warm-up and budget sized to the Bible's 28k training verses."""
    base, teacher = _config("transformer-en-de.json"), _config("transformer-bible-teacher.json")
    assert teacher.arch == base.arch and teacher.model == base.model
    assert teacher.max_epochs > 0 and teacher.warmup < base.warmup


def test_the_ast_configs_compare_at_equal_active_and_equal_total_size() -> None:
    """SEEDS §2.3: the FFN-sparse model keeps 4 of 8 blocks of a 2048-wide feed-forward, as
    wide as the dense model's (1024); the wide dense model has its total width. One body, one
    recipe; each language's sub-network is as large as the dense model."""
    dense, sparse, wide = (_config(f"ast-{n}-bible8.json") for n in ("dense", "ffn", "dense-wide"))
    body = ("d_model", "n_heads", "enc_layers", "dec_layers", "dropout")
    recipe = ("max_tokens", "max_len", "lr", "warmup", "max_epochs", "label_smoothing", "seed")
    for cfg in (sparse, wide):
        assert {k: cfg.model[k] for k in body} == {k: dense.model[k] for k in body}
        assert all(getattr(cfg, k) == getattr(dense, k) for k in recipe)
    shape = {"vocab_size": 512, "max_len": dense.max_len + 2, "languages": ["en", "de", "zh"]}
    models = {n: build_model(c.arch, {**shape, **c.model}) for n, c in
              (("dense", dense), ("sparse", sparse), ("wide", wide))}  # fmt: skip
    m = models["sparse"]
    assert m.config.ffn_active * m.config.d_ff // m.config.ffn_blocks == dense.model["d_ff"]
    assert wide.model["d_ff"] == m.config.d_ff
    for target in ("de", "zh"):
        assert m.active_parameters("en", target) == models["dense"].active_parameters("en", target)
    assert (sparse.sparsity_weight, sparse.disparity_weight, sparse.topk_weight) == (0.1, 0.02, 0.1)


def test_the_gpu_reder_config_is_the_papers_width_and_comes_back_from_the_device() -> None:
    """REDER-base (experiments/reder_gpu.py): the released IWSLT model's shape (d 512, FFN 1024,
    4 heads, 6 layers per end), stage 2 after 60% of its step budget, and fp16 weights that
    fit the 64 MiB the device returns, with room for the rest."""
    cfg = _config("reder-base-en-de.json")
    model = build_model(cfg.arch, {"vocab_size": 8000, "max_len": cfg.max_len + 2, **cfg.model})
    c = model.config
    assert (c.d_model, c.d_ff, c.n_heads, c.layers_per_end) == (512, 1024, 4, 6)
    assert cfg.aux_after == round(0.6 * cfg.max_steps) and cfg.fba_weight == cfg.cc_weight == 0.1
    fp16_bytes = 2 * sum(p.numel() for p in model.parameters())
    assert fp16_bytes < 60 * 2**20, fp16_bytes
