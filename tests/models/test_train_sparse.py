"""English into several languages from one sparse model, end to end: `ragmt data mix` on a toy
verse-aligned "Bible", `ragmt train` through both phases, the bundle serving each pair with its
own sub-network, and `ragmt eval --target-lang`; the TrainConfig fields only such a model takes."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from models.bundle import load_bundle
from models.train import TrainConfig
from models.translator import DecodeOptions, Translator
from service.cli import app

pytestmark = pytest.mark.integration
runner = CliRunner()

TASKS = {
    "up": str.upper,
    "next": lambda w: "".join(chr((ord(c) - 97 + 1) % 26 + 97) for c in w),
}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _words(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 7)))
        for _ in range(n)
    ]


def _bible(folder: Path) -> Path:
    """A verse-aligned toy in the layout of `ragmt data prepare --bible`: English words, their
    "up" and "next" translations; one verse missing in "next"."""
    folder.mkdir(parents=True)
    sizes = {"train": 2000, "dev": 40, "test": 30}
    for split, n in sizes.items():
        en = _words(n, seed=len(split))
        ids = [f"44.{i // 100 + 1:03d}.{i % 100 + 1:03d}" for i in range(n)]
        (folder / f"{split}.ids").write_text("".join(x + "\n" for x in ids), "utf-8")
        lines = {"en": en, **{lang: [task(w) for w in en] for lang, task in TASKS.items()}}
        if split == "train":
            lines["next"][5] = ""  # a version without the verse
        for lang, text in lines.items():
            (folder / f"{split}.{lang}").write_text("".join(x + "\n" for x in text), "utf-8")
    (folder / "manifest.json").write_text(json.dumps({"languages": ["en", *TASKS]}))
    return folder


def _mixed(tmp_path: Path) -> Path:
    """The toy Bible mixed English -> up, next by `ragmt data mix`."""
    bible = _bible(tmp_path / "bible")
    out = tmp_path / "m"
    result = runner.invoke(app, ["data", "mix", "--bible", str(bible), "--to", "up,next",
                                 "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


def _train(tmp_path: Path, data: Path, name: str, model: dict, options: dict) -> tuple[Path, str]:
    """`ragmt train` of a byte-level sparse-transformer on `data` (decoder feed-forward
    sparsity, 2 of 4 blocks, unless `model` says otherwise): its bundle and output."""
    model = {"dropout": 0.0, "sparse": ["ffn"], "sides": ["decoder"], "ffn_blocks": 4,
             "ffn_active": 2, **model}  # fmt: skip
    options = {"bf16": False, "max_len": 30, "average_last": 1, "sparsity_weight": 0.1, **options}
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps({"arch": "sparse-transformer", "model": model, **options}))
    bundle = tmp_path / f"bundle-{name}"
    result = runner.invoke(app, [
        "train", "--data", str(data), "--domain", "bible", "--tokenizer", "bytes",
        "--run", str(tmp_path / f"run-{name}"), "--out", str(bundle), "--config", str(config),
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    return bundle, result.output


def test_score_options_belong_to_a_scored_model() -> None:
    with pytest.raises(ValueError, match="phase2_after: options of models with per-language"):
        TrainConfig(arch="transformer", phase2_after=10)
    with pytest.raises(ValueError, match="topk_weight must be a number >= 0"):
        TrainConfig(arch="sparse-transformer", topk_weight=-1)
    with pytest.raises(ValueError, match="score_lr_scale: options of models with per-language"):
        TrainConfig(arch="transformer", score_lr_scale=10)
    with pytest.raises(ValueError, match="score_lr_scale must be positive"):
        TrainConfig(arch="sparse-transformer", score_lr_scale=0)


def test_the_scores_learn_at_their_own_rate(tmp_path: Path) -> None:
    """score_lr_scale multiplies the scores' learning rate alone: in 40 phase-1 updates of the
    same run, scores at 30x the rate spread far wider than at 1x, while the other weights
    start from the same place and take the same schedule (about 10 s)."""
    data = _mixed(tmp_path)
    spread = {}
    for scale in (1, 30):
        bundle, _ = _train(
            tmp_path, data, f"scale-{scale}",
            {"d_model": 32, "n_heads": 2, "enc_layers": 1, "dec_layers": 1, "d_ff": 64},
            {"max_tokens": 600, "lr": 0.001, "warmup": 10, "max_steps": 40, "eval_every": 40,
             "save_every": 40, "keep_checkpoints": 1, "dev_sentences": 4, "phase2_after": 40,
             "score_lr_scale": scale},
        )  # fmt: skip
        mu = load_bundle(bundle).model.scores["decoder_ffn"][1:]  # the two target languages
        spread[scale] = float(mu.detach().abs().max())
    assert spread[30] > 10 * spread[1], spread


def test_train_one_to_many_and_serve_each_pair(tmp_path: Path) -> None:
    """About 45 s: a tiny FFN-sparse model learns both toy languages through `ragmt train`; the
    bundle serves en->up and en->next, each pair with its own feed-forward blocks."""
    data = _mixed(tmp_path)
    bundle, output = _train(
        tmp_path, data, "sparse",
        {"d_model": 64, "n_heads": 4, "enc_layers": 2, "dec_layers": 1, "d_ff": 256},
        {"max_tokens": 1200, "lr": 0.01, "warmup": 50, "max_steps": 800, "eval_every": 400,
         "save_every": 400, "keep_checkpoints": 2, "dev_sentences": 20, "phase2_after": 300,
         "disparity_weight": 0.02, "topk_weight": 0.1, "score_lr_scale": 30},
    )  # fmt: skip
    assert "phase 2" in output and "disparity" in output
    loaded = load_bundle(bundle)
    assert loaded.manifest["pairs"] == [["en", "up"], ["en", "next"]]
    model = loaded.model
    assert model.config.languages == ("en", "up", "next")  # filled in from the data
    history = loaded.manifest["training"]["dev_history"]
    assert set(history[-1]["by_pair"]) == {"en-up", "en-next"}
    translator = Translator.from_loaded(loaded, "none")
    held_out = ["quilt", "vex", "jumbo", "zebra", "fox"]
    for lang, task in TASKS.items():
        pair = translator.for_pair("en", lang)
        got = pair.translate(held_out, DecodeOptions(beam_size=2))
        assert sum(g == task(w) for g, w in zip(got, held_out, strict=True)) >= 4, (lang, got)
    with pytest.raises(ValueError, match="is told the pair"):  # no scores for an unseen one
        translator.for_pair("fr", "up", unseen=True)
    blocks = model.masks("decoder")["ffn"]
    assert not torch.equal(blocks[1], blocks[2])  # the two targets keep different blocks
    # int8 decoding (what auto gives this architecture on the CPU) leaves the float model alone
    float_before = translator.for_pair("en", "up").translate(held_out)
    quantized = Translator.from_loaded(loaded, "int8")
    int8 = quantized.for_pair("en", "up").translate(held_out)
    assert sum(a == b for a, b in zip(int8, float_before, strict=True)) >= 4
    assert translator.for_pair("en", "up").translate(held_out) == float_before
    int8_ffn = next(iter(quantized.model._extracted.values())).decoder_layers[0].ffn.fc1
    float_ffn = next(iter(model._extracted.values())).decoder_layers[0].ffn.fc1
    assert type(float_ffn) is torch.nn.Linear and type(int8_ffn) is not torch.nn.Linear
    results = tmp_path / "results.jsonl"
    result = runner.invoke(app, [
        "eval", "--model", str(bundle), "--data", str(tmp_path / "m"), "--domains", "bible",
        "--target-lang", "next", "--results", str(results), "--quantize", "none",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    record = json.loads(results.read_text().splitlines()[0])
    # one-word "sentences": BLEU has no 4-grams to count, chrF scores the letters
    assert record["languages"] == {"source": "en", "target": "next"} and record["chrf"] > 80
    # ragmt translate picks the pair too
    words = tmp_path / "words.txt"
    words.write_text("".join(w + "\n" for w in held_out))
    result = runner.invoke(app, [
        "translate", "--model", str(bundle), "-i", str(words), "--target-lang", "next",
        "--quantize", "none", "--beam", "2",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    got = result.stdout.splitlines()
    assert sum(g == TASKS["next"](w) for g, w in zip(got, held_out, strict=True)) >= 4, got
    result = runner.invoke(app, ["translate", "--model", str(bundle), "-i", str(words),
                                 "--target-lang", "fr"])  # fmt: skip
    assert result.exit_code == 2 and "not en->fr" in result.output
