import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from models.bundle import load_bundle
from models.checkpoints import average_checkpoints, checkpoints
from models.data import collate, encode_corpus, token_batches
from models.evaluate import evaluate, score
from models.tokenizer import BOS_ID, EOS_ID, PAD_ID
from models.train import TrainConfig, TrainData, finalize, inverse_sqrt, label_smoothed_loss, train
from models.translator import DecodeOptions, Translator

pytestmark = pytest.mark.integration

TINY = {"d_model": 64, "n_heads": 4, "enc_layers": 2, "dec_layers": 2, "d_ff": 128, "dropout": 0.0}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.unit
def test_inverse_sqrt_schedule() -> None:
    assert inverse_sqrt(1, 100, 1e-3) == pytest.approx(1e-5)
    assert inverse_sqrt(50, 100, 1e-3) == pytest.approx(5e-4)
    assert inverse_sqrt(100, 100, 1e-3) == pytest.approx(1e-3)
    assert inverse_sqrt(400, 100, 1e-3) == pytest.approx(5e-4)  # sqrt(100/400) = 1/2


@pytest.mark.unit
def test_label_smoothed_loss_by_hand() -> None:
    # V=4, uniform logits: every smoothing level gives log(4); pad positions are ignored.
    logits = torch.zeros(1, 2, 4)
    target = torch.tensor([[3, PAD_ID]])
    assert label_smoothed_loss(logits, target, 0.1).item() == pytest.approx(math.log(4))
    # a confident, correct prediction: smoothing 0.1 spreads 0.1 over all 4 classes
    logits = torch.tensor([[[0.0, 0.0, 0.0, 10.0]]])
    logp = torch.log_softmax(logits[0, 0], -1)
    expected = -(0.9 + 0.1 / 4) * logp[3] - (0.1 / 4) * logp[:3].sum()
    got = label_smoothed_loss(logits, torch.tensor([[3]]), 0.1).item()
    assert got == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.unit
def test_token_batches_cover_corpus_within_budget(toy_data: Path, toy_tokenizer) -> None:
    corpus = encode_corpus(
        toy_tokenizer, toy_data / "train.en", toy_data / "train.de", "en", "de", max_len=64
    )
    batches = token_batches(corpus, max_tokens=256, seed=3)
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(len(corpus)))
    for b in batches:
        width = max(int(corpus.src_lens[b].max()), int(corpus.tgt_lens[b].max()) + 1)
        assert len(b) * width <= 256 or len(b) == 1
    again = token_batches(corpus, max_tokens=256, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(batches, again, strict=True))
    src, tin, tout = collate(corpus, batches[0])
    assert tin[0, 0] == BOS_ID
    n = int(corpus.tgt_lens[batches[0][0]])
    assert tout[0, n] == EOS_ID and torch.equal(tin[0, 1 : n + 1], tout[0, :n])
    assert (src[:, 0] != PAD_ID).all()


def _data(toy_data: Path) -> TrainData:
    d = toy_data
    return TrainData(d / "train.en", d / "train.de", d / "dev.en", d / "dev.de", "en", "de", "x")


def _cfg(steps: int) -> TrainConfig:
    return TrainConfig(
        model=TINY, max_tokens=768, lr=3e-3, warmup=60, max_steps=steps, eval_every=10**6,
        save_every=50, keep_checkpoints=4, average_last=3, dev_sentences=20, bf16=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def trained_run(toy_data: Path, toy_tokenizer, tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("run")
    train(run, _data(toy_data), _cfg(500), toy_tokenizer, log=lambda s: None)
    return run


def test_training_learns_the_toy_task(trained_run: Path, toy_data: Path, toy_tokenizer) -> None:
    bundle = trained_run / "bundle"
    finalize(trained_run, bundle, _data(toy_data), toy_tokenizer, average_last=3, log=print)
    translator = Translator.from_bundle(bundle)
    src = (toy_data / "test.en").read_text().splitlines()
    ref = (toy_data / "test.de").read_text().splitlines()
    for beam in (1, 4):
        hyps = translator.translate(src, DecodeOptions(beam_size=beam))
        exact = sum(h == r for h, r in zip(hyps, ref, strict=True))
        assert exact >= 0.9 * len(ref), (beam, exact, hyps[:3], ref[:3])
    manifest = load_bundle(bundle).manifest
    assert manifest["training"]["averaged_checkpoints"] == [
        "ckpt-0000400",
        "ckpt-0000450",
        "ckpt-0000500",
    ]
    assert manifest["training_data"] == "x"
    results = evaluate(translator, toy_data, ["."], DecodeOptions(beam_size=4), log=lambda s: None)
    assert results["."]["bleu"] > 90


def test_checkpoint_pruning_and_average(trained_run: Path) -> None:
    names = [p.name for p in checkpoints(trained_run)]
    assert names == ["ckpt-0000350", "ckpt-0000400", "ckpt-0000450", "ckpt-0000500"]
    from safetensors.torch import load_file

    ckpts = checkpoints(trained_run)[-2:]
    avg = average_checkpoints(ckpts)
    a, b = (load_file(str(p / "model.safetensors")) for p in ckpts)
    for k in avg:
        assert torch.allclose(avg[k], (a[k] + b[k]) / 2)


def test_resume_is_exact(toy_data: Path, toy_tokenizer, tmp_path: Path) -> None:
    """Training 120 steps at once equals 60 steps, a stop, and a resume to 120."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(straight, _data(toy_data), _cfg(120), toy_tokenizer, log=lambda s: None)
    train(resumed, _data(toy_data), _cfg(60), toy_tokenizer, log=lambda s: None)
    logs: list[str] = []
    state = train(resumed, _data(toy_data), _cfg(120), toy_tokenizer, log=logs.append)
    assert any("resumed from ckpt-0000060" in m for m in logs)
    assert state["step"] == 120
    from safetensors.torch import load_file

    w1 = load_file(str(checkpoints(straight)[-1] / "model.safetensors"))
    w2 = load_file(str(checkpoints(resumed)[-1] / "model.safetensors"))
    for k in w1:
        assert torch.equal(w1[k], w2[k]), k


def test_resume_refuses_a_different_config(
    trained_run: Path, toy_data: Path, toy_tokenizer
) -> None:
    cfg = json.loads((trained_run / "train_config.json").read_text())
    cfg["lr"] = 1.0
    with pytest.raises(ValueError, match="lr"):
        train(trained_run, _data(toy_data), TrainConfig(**cfg), toy_tokenizer, log=lambda s: None)


def test_resume_may_change_precision_and_budget(trained_run: Path, toy_data, toy_tokenizer):
    cfg = json.loads((trained_run / "train_config.json").read_text())
    cfg |= {"bf16": not cfg["bf16"], "threads": 1, "max_steps": cfg["max_steps"]}
    logs: list[str] = []
    state = train(trained_run, _data(toy_data), TrainConfig(**cfg), toy_tokenizer, log=logs.append)
    assert state["step"] == cfg["max_steps"]  # already there: resumed, nothing to do
    assert any("resumed from" in m for m in logs)


@pytest.mark.unit
def test_config_rejects_unknown_key() -> None:
    with pytest.raises(ValueError, match="learning_rate"):
        TrainConfig.from_dict({"learning_rate": 1})


@pytest.mark.unit
def test_score_matches_sacrebleu_by_hand() -> None:
    r = score(["the cat sat on the mat"], ["the cat sat on the mat"])
    assert r["bleu"] == 100.0 and r["chrf"] == 100.0
    assert r["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    r = score(["a b c d"], ["x y z w"])
    assert r["bleu"] == 0.0
    with pytest.raises(ValueError):
        score(["a"], [])


@pytest.fixture(scope="module")
def seed_runs(trained_run: Path, toy_data: Path, toy_tokenizer, tmp_path_factory) -> Path:
    """Two 20-step continuations of one bundle that differ only in seed (and threads)."""
    root = tmp_path_factory.mktemp("soup")
    finalize(trained_run, root / "start", _data(toy_data), toy_tokenizer, 1, log=print)
    base = {**_cfg(20).__dict__, "lr": 1e-3, "warmup": 5, "save_every": 10, "average_last": 2}
    for seed, threads in ((1, 0), (2, 1)):
        cfg = TrainConfig(**{**base, "seed": seed, "threads": threads})
        run = root / f"seed{seed}"
        train(run, _data(toy_data), cfg, toy_tokenizer, log=lambda s: None, init=root / "start")
    return root


def test_runs_of_one_recipe_average_into_one_bundle(
    seed_runs: Path, toy_data: Path, toy_tokenizer
) -> None:
    from safetensors.torch import load_file

    runs = [seed_runs / "seed1", seed_runs / "seed2"]
    out = seed_runs / "soup"
    finalize(runs, out, _data(toy_data), toy_tokenizer, 2, dtype="float32", log=print)
    bundle = load_bundle(out)
    ckpts = [p for r in runs for p in checkpoints(r)[-2:]]
    weights = [load_file(str(p / "model.safetensors")) for p in ckpts]
    state = bundle.model.state_dict()
    for k in weights[0]:
        assert torch.allclose(state[k], sum(w[k] for w in weights) / 4, atol=1e-6), k
    # the two runs really differ, so the average is not one of them
    assert not torch.equal(weights[1]["embed.weight"], weights[3]["embed.weight"])
    training = bundle.manifest["training"]
    assert training["averaged_checkpoints"] == [
        "seed1/ckpt-0000010", "seed1/ckpt-0000020", "seed2/ckpt-0000010", "seed2/ckpt-0000020"
    ]  # fmt: skip
    assert [(r["run"], r["seed"], r["steps"]) for r in training["runs"]] == [
        ("seed1", 1, 20), ("seed2", 2, 20)
    ]  # fmt: skip
    assert (
        training["init_weights_sha256"]
        == load_bundle(seed_runs / "start").manifest["files"]["model.safetensors"]
    )
    # the average of two continuations of a trained model still translates the toy task
    src = (toy_data / "test.en").read_text().splitlines()
    ref = (toy_data / "test.de").read_text().splitlines()
    hyps = Translator.from_bundle(out).translate(src, DecodeOptions(beam_size=1))
    assert sum(h == r for h, r in zip(hyps, ref, strict=True)) >= 0.9 * len(ref)


def test_averaging_refuses_runs_of_other_recipes(
    seed_runs: Path, trained_run: Path, toy_data: Path, toy_tokenizer, tmp_path: Path
) -> None:
    data, one = _data(toy_data), seed_runs / "seed1"
    avg = lambda runs, n=2: finalize(runs, tmp_path / "out", data, toy_tokenizer, n)  # noqa: E731
    with pytest.raises(ValueError, match="not started from a bundle"):
        avg([one, trained_run], 1)  # trained from scratch: nothing in common to average
    other = tmp_path / "lr"
    cfg = json.loads((one / "train_config.json").read_text()) | {"lr": 5e-4, "seed": 3}
    train(other, data, TrainConfig(**cfg), toy_tokenizer, log=lambda s: None,
          init=seed_runs / "start")  # fmt: skip
    with pytest.raises(ValueError, match=r"\['lr'\]"):
        avg([one, other])
    shorter = tmp_path / "short"
    cfg = json.loads((one / "train_config.json").read_text()) | {"max_steps": 10, "seed": 4}
    train(shorter, data, TrainConfig(**cfg), toy_tokenizer, log=lambda s: None,
          init=seed_runs / "start")  # fmt: skip
    with pytest.raises(ValueError, match="ends at step 10"):
        avg([one, shorter], 1)
    with pytest.raises(ValueError, match="has 1 of the last 2 checkpoints"):
        avg([one, shorter], 2)
    assert not (tmp_path / "out").exists()  # nothing written by a refused average


def test_a_byte_model_trains_for_whole_epochs_into_a_bundle_of_its_pairs(
    toy_data: Path, tmp_path: Path
) -> None:
    """`max_epochs` stops after whole passes; a byte model's bundle has no tokenizer file, and
    a many-to-one corpus's pairs are the bundle's (each served by `for_pair`); a bundle trained
    on literal masks (`ragmt data mask-literals`) says so."""
    from models.tokenizer import ByteTokenizer

    d = tmp_path / "data" / "toy"
    shutil.copytree(toy_data, d)
    masks = {"share": 0.5, "seed": 1, "lines": 3000, "with_literals": 0, "masked": 0}
    (d.parent / "manifest.json").write_text(json.dumps({"literal_masks": masks}))
    data = TrainData(
        d / "train.en", d / "train.de", d / "dev.en", d / "dev.de", "mul", "de", "x",
        pairs=(("en", "de"), ("nl", "de")),
    )  # fmt: skip
    cfg = TrainConfig(
        arch="byte-fusion",
        model={**TINY, "fusion": "wsf", "fusion_layers": 1},
        max_tokens=8192,
        max_epochs=1,
        warmup=10,
        save_every=5,
        eval_every=10_000,
        average_last=2,
    )
    run = tmp_path / "run"
    state = train(run, data, cfg, ByteTokenizer(), log=lambda s: None)
    assert state["epoch"] == 1 and state["batch_in_epoch"] == 0
    manifest = finalize(run, tmp_path / "bundle", data, ByteTokenizer(), 2, log=lambda s: None)
    assert manifest["tokenizer"] == {"kind": "bytes"} and "spm.model" not in manifest["files"]
    assert manifest["pairs"] == [["en", "de"], ["nl", "de"]]
    assert manifest["languages"] == {"source": "en", "target": "de"}
    assert manifest["trained_on"] == {
        "data_sha256": "x",
        "domains": {d.name: 3000},
        "literal_masks": masks,
    }
    translator = Translator.from_bundle(tmp_path / "bundle")
    assert translator.for_pair("nl", "de").source_lang == "nl"
    with pytest.raises(ValueError, match="translates en->de, nl->de, not fr->de"):
        translator.for_pair("fr", "de")
    # zero-shot transfer: an unseen source into a target the model writes
    french = translator.for_pair("fr", "de", unseen=True)
    assert (french.source_lang, french.target_lang, french.model) == ("fr", "de", translator.model)
    with pytest.raises(ValueError, match="does not write fr"):
        translator.for_pair("de", "fr", unseen=True)
