"""REDER's training (models/train_reder.py): `ragmt train` on a toy task in both directions,
the CTC feasibility filter and its count, the stop-gradients of the two auxiliary losses,
distillation files, and the TrainConfig fields only a CTC duplex model takes."""

import json
import subprocess
import sys
from dataclasses import replace
from importlib.resources import files
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from models import ctc
from models.bundle import load_bundle, save_bundle
from models.reder import Reder, RederConfig
from models.tokenizer import Tokenizer
from models.train import TrainConfig, TrainData, served_pairs, train
from models.train_reder import check_distillation, cycle_loss, direction_losses, fba_loss
from models.transformer import Transformer, TransformerConfig
from models.translator import DecodeOptions, Translator
from service.cli import app
from tests.toy import toy_pairs

runner = CliRunner()
TINY = {"d_model": 32, "n_heads": 2, "d_ff": 64, "layers_per_end": 1, "max_rel": 4}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _write(folder: Path, split: str, pairs: list[tuple[str, str]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{split}.en").write_text("".join(e + "\n" for e, _ in pairs), encoding="utf-8")
    (folder / f"{split}.de").write_text("".join(d + "\n" for _, d in pairs), encoding="utf-8")


def _prepared(tmp_path: Path, train: list[tuple[str, str]]) -> Path:
    """A prepared-data folder (as `ragmt data prepare` writes) holding the toy pairs."""
    data = tmp_path / "en-de"
    _write(data / "general", "train", train)
    _write(data / "general", "dev", toy_pairs(20, seed=2))
    (data / "manifest.json").write_text(json.dumps({"languages": {"source": "en", "target": "de"}}))
    return data


def _word_tokenizer(data: Path, out: Path) -> Tokenizer:
    """A SentencePiece model of whole words on the toy's train split. The run's own joint
    unigram model (`train_tokenizer`) cannot keep all 20 toy words whole in the 300 pieces its
    byte fallback leaves room for ("three" becomes 6 pieces, "drei" stays 1), which makes
    some pairs impossible for CTC at two frames a token; a real corpus has no such limit."""
    import sentencepiece as spm

    folder = data / "general"
    text = [folder / f"train.{lang}" for lang in ("en", "de")]
    out.parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=",".join(str(t) for t in text), model_prefix=str(out.with_suffix("")),
        model_type="word", vocab_size=64, hard_vocab_limit=False, pad_id=0, bos_id=1,
        eos_id=2, unk_id=3, minloglevel=2,
    )  # fmt: skip
    return Tokenizer(out)


def _config(tmp_path: Path, **fields: object) -> Path:
    config = tmp_path / "reder.json"
    body = {
        "arch": "reder", "model": {**TINY, "dropout": 0.0}, "max_tokens": 160, "lr": 0.01,
        "warmup": 30, "max_steps": 220, "eval_every": 110, "save_every": 110,
        "keep_checkpoints": 3, "average_last": 1, "dev_sentences": 20, "bf16": False,
        "fba_weight": 0.1, "cc_weight": 0.1, "aux_after": 150, **fields,
    }  # fmt: skip
    config.write_text(json.dumps(body))
    return config


def _exact(hyps: list[str], refs: list[str]) -> float:
    return sum(h == r for h, r in zip(hyps, refs, strict=True)) / len(refs)


@pytest.mark.integration
def test_train_command_learns_both_directions_writes_a_duplex_bundle_and_resumes(
    tmp_path: Path,
) -> None:
    data, config = _prepared(tmp_path, toy_pairs(600, seed=1)), _config(tmp_path)
    run, out = tmp_path / "run", tmp_path / "bundle"
    _word_tokenizer(data, run / "spm.model")  # the run's tokenizer, as a resumed run finds it
    args = ["train", "--data", str(data), "--run", str(run), "--out", str(out)]
    args += ["--config", str(config)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    bundle = load_bundle(out)
    manifest = bundle.manifest
    assert manifest["architecture"] == "reder" and manifest["decoding"] == "ctc"
    assert manifest["pairs"] == [["en", "de"], ["de", "en"]]
    training = manifest["training"]
    assert training["steps"] == 220 and training["averaged_checkpoints"] == ["ckpt-0000220"]
    recipe = {k: training["config"][k] for k in ("directions", "fba_weight", "cc_weight")}
    assert recipe == {"directions": "both", "fba_weight": 0.1, "cc_weight": 0.1}
    assert training["config"]["aux_after"] == 150
    assert [h["step"] for h in training["dev_history"]] == [110, 220]
    assert set(training["dev_history"][-1]["dev_bleu_greedy"]) == {"en-de", "de-en"}
    assert training["infeasible"] == {"en-de": {"pairs": 0, "cycle": 0},
                                      "de-en": {"pairs": 0, "cycle": 0}}  # fmt: skip
    # stage 2 ran: the log shows both auxiliary losses with values
    assert "auxiliary losses (fba 0.1, cc 0.1) from update 151 on" in res.output
    assert bool(bundle.model.actnorm.initialized)  # its data-dependent init travels with it

    # one bundle, both directions, held-out sentences, greedy CTC as served
    to_german = Translator.from_bundle(out)
    held_out = toy_pairs(100, seed=3)
    en, de = [e for e, _ in held_out], [d for _, d in held_out]
    opts = DecodeOptions(beam_size=1, block_repeats=0)  # the toy doubles words: "zwei zwei"
    to_de = to_german.translate(en, opts)
    to_en = to_german.for_pair("de", "en").translate(de, opts)
    assert _exact(to_de, de) >= 0.9, list(zip(to_de, de, strict=True))[:5]
    assert _exact(to_en, en) >= 0.9, list(zip(to_en, en, strict=True))[:5]
    # ONNX Runtime, as the service decodes on the CPU: float exactly as PyTorch, int8 as well
    ort = Translator.from_bundle(out, quantize="ort")
    assert ort.translate(en, opts) == to_de
    assert ort.for_pair("de", "en").translate(de, opts) == to_en
    int8 = Translator.from_bundle(out, quantize="ort-int8")
    assert _exact(int8.translate(en, opts), de) >= 0.9
    assert _exact(int8.for_pair("de", "en").translate(de, opts), en) >= 0.9
    # `ragmt eval --source-lang de` scores the other direction against the English side
    for lang in ("en", "de"):
        report = tmp_path / f"eval-{lang}"
        res = runner.invoke(app, ["eval", "--model", str(out), "--data", str(data), "--domains",
                                  "general", "--split", "dev", "--source-lang", lang,
                                  "--block-repeats", "0", "--out", str(report)])  # fmt: skip
        assert res.exit_code == 0, res.output
        scored = json.loads(report.with_suffix(".json").read_text())["general"]
        assert scored["bleu"] > 80, (lang, scored["bleu"])
        hyp = "de" if lang == "en" else "en"
        assert (tmp_path / f"eval-{lang}-hyps" / f"general.dev.hyp.{hyp}").is_file()

    # --ctc-beam with a --teacher: an autoregressive bundle over the same vocabulary re-ranks
    # the n-best, and the record says so; a teacher of another pair is refused by name
    teacher = tmp_path / "teacher"
    torch.manual_seed(0)
    sizes = {"d_model": 16, "n_heads": 2, "d_ff": 32, "enc_layers": 1, "dec_layers": 1}
    tiny = Transformer(TransformerConfig(vocab_size=bundle.model.config.vocab_size, **sizes))
    save_bundle(teacher, tiny, "transformer", languages={"source": "de", "target": "en"},
                extra_files={"spm.model": out / "spm.model"})  # fmt: skip
    results = tmp_path / "reranked.jsonl"
    res = runner.invoke(app, ["eval", "--model", str(out), "--data", str(data), "--domains",
                              "general", "--split", "dev", "--source-lang", "de", "--ctc-beam",
                              "4", "--teacher", str(teacher), "--results", str(results),
                              "--block-repeats", "0"])  # fmt: skip
    assert res.exit_code == 0, res.output
    decoding = json.loads(results.read_text().splitlines()[0])["decoding"]
    assert decoding["ctc_beam"] == 4 and decoding["teacher"]["path"] == str(teacher)
    res = runner.invoke(app, ["translate", "--model", str(out), "--ctc-beam", "4",
                              "--teacher", str(teacher)], input="eins zwei\n")  # fmt: skip
    assert res.exit_code != 0 and "translates de->en, not en->de" in res.output

    # reversibility: each dev side there and back by the same checkpoint, one record each
    script = Path(__file__).resolve().parents[2] / "experiments" / "reder_reversibility.py"
    trips = tmp_path / "reversibility.jsonl"
    done = subprocess.run([sys.executable, str(script), "--model", str(out), "--data", str(data),
                           "--results", str(trips)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in trips.read_text().splitlines()]
    assert [r["start_lang"] for r in records] == ["de", "en"]
    assert all(r["bleu"] > 80 and r["forward_bleu"] > 80 for r in records), records

    res = runner.invoke(app, [*args, "--max-steps", "225"])
    assert res.exit_code == 0, res.output
    assert "resumed from ckpt-0000220" in res.output
    assert json.loads((out / "manifest.json").read_text())["training"]["steps"] == 225


@pytest.mark.integration
def test_pairs_ctc_cannot_emit_are_skipped_and_counted_per_direction(tmp_path: Path) -> None:
    """A target longer than twice its source has no alignment: the pair is left out and
    counted in its direction only (the other direction reads it the short way round)."""
    long = "one two three four five red blue"  # 7 words from 1: more than 2 frames a word
    train_pairs = [*toy_pairs(60, seed=1), ("house", long)]
    data = _prepared(tmp_path, train_pairs)
    tok = _word_tokenizer(data, tmp_path / "spm.model")
    assert len(tok.encode(long, "de")) > 2 * len(tok.encode("house", "en"))
    # one batch per direction holds the whole corpus: each pair is seen once
    cfg = TrainConfig(
        arch="reder", model=TINY, max_tokens=1000, max_steps=5, max_epochs=1,
        eval_every=10**6, save_every=10**6, bf16=False,
    )  # fmt: skip
    d = data / "general"
    tdata = TrainData(d / "train.en", d / "train.de", d / "dev.en", d / "dev.de", "en", "de")
    logs: list[str] = []
    state = train(tmp_path / "run", tdata, cfg, tok, log=logs.append)
    assert state["epoch"] == 1  # the whole corpus seen once
    assert state["infeasible"] == {"en-de": {"pairs": 1, "cycle": 0},
                                   "de-en": {"pairs": 0, "cycle": 0}}  # fmt: skip
    assert "infeasible pairs skipped so far en-de 1 (cycle 0), de-en 0 (cycle 0)" in logs[-1]
    # a simplex model of the other direction never sees the infeasible way round
    back = replace(cfg, directions="backward")
    state = train(tmp_path / "back", tdata, back, tok, log=lambda s: None)
    assert state["infeasible"] == {"de-en": {"pairs": 0, "cycle": 0}}
    assert served_pairs(tdata, {"directions": "backward"}) == (("de", "en"),)


@pytest.mark.integration
def test_resume_is_exact_with_dropout_and_the_auxiliary_losses(tmp_path: Path) -> None:
    """12 updates at once equal 6, a stop and a resume to 12: the dropout seeds continue from
    the checkpoint's RNG, ActNorm is not initialised again, stage 2 starts at the same update."""
    from safetensors.torch import load_file

    from models.checkpoints import checkpoints

    data = _prepared(tmp_path, toy_pairs(80, seed=1))
    tok = _word_tokenizer(data, tmp_path / "spm.model")
    d = data / "general"
    tdata = TrainData(d / "train.en", d / "train.de", d / "dev.en", d / "dev.de", "en", "de")

    def cfg(steps: int) -> TrainConfig:
        return TrainConfig(
            arch="reder", model={**TINY, "dropout": 0.1}, max_tokens=120, lr=0.01, warmup=5,
            max_steps=steps, eval_every=10**6, save_every=6, bf16=False, fba_weight=0.5,
            cc_weight=0.5, aux_after=4,
        )  # fmt: skip

    quiet = lambda s: None  # noqa: E731
    train(tmp_path / "straight", tdata, cfg(12), tok, log=quiet)
    train(tmp_path / "resumed", tdata, cfg(6), tok, log=quiet)
    logs: list[str] = []
    train(tmp_path / "resumed", tdata, cfg(12), tok, log=logs.append)
    assert any("resumed from ckpt-0000006" in m for m in logs)
    a, b = (load_file(str(checkpoints(tmp_path / r)[-1] / "model.safetensors"))
            for r in ("straight", "resumed"))  # fmt: skip
    assert a.keys() == b.keys() and "actnorm.initialized" in a
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _model(dropout: float = 0.0) -> Reder:
    torch.manual_seed(0)
    cfg = RederConfig(vocab_size=12, d_model=16, n_heads=2, d_ff=32, layers_per_end=2, max_rel=4,
                      dropout=dropout, max_len=8)  # fmt: skip
    return Reder(cfg)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]])
    tgt = torch.tensor([[9, 9, 10], [11, 0, 0]])  # a repeat: it costs a blank frame
    return src, tgt


@pytest.mark.unit
def test_fba_is_zero_on_agreeing_states_and_never_trains_the_backward_states() -> None:
    pad = torch.tensor([[False, False, True]])
    h = [torch.randn(1, 3, 4, requires_grad=True) for _ in range(3)]
    assert fba_loss(h, [x.detach().clone() for x in h], pad).item() == pytest.approx(0, abs=1e-6)
    # opposite states at real frames: distance 1 there, whatever the padded frame holds
    back = [(-x).detach().clone() for x in h]
    back[0][0, 2] = 5.0
    assert fba_loss(h, back, pad).item() == pytest.approx(1.0, abs=1e-6)
    # gradients reach the forward states only, not what the backward states came from
    source = torch.randn(1, 3, 4, requires_grad=True)
    back = [source * (i + 1) for i in range(3)]
    fba_loss(h, back, pad).backward()
    assert source.grad is None and all(x.grad is not None and x.grad.abs().sum() > 0 for x in h)

    # the model: the reverse pass over a* with the forward pass's dropout seed, started from
    # the forward pass's first state, gives back its states (dropout on: the seed replays)
    model = _model(dropout=0.3).train()
    src, tgt = _batch()
    ids, frame_pad = model.frames(src)
    h0 = model.embed_frames(ids, frame_pad, seed=11)
    forward = model.transform(h0, frame_pad, "en", "de", seed=11)
    again = model.invert(forward[-1], frame_pad, "en", "de", seed=11)
    assert fba_loss(forward, again, frame_pad).item() < 1e-6
    other = model.invert(forward[-1], frame_pad, "en", "de", seed=12)
    assert fba_loss(forward, other, frame_pad).item() > 1e-4


@pytest.mark.unit
def test_the_training_step_replays_the_forward_seed_in_the_fba_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _model(dropout=0.3).train()
    seeds: dict[str, list[int | None]] = {"forward": [], "reverse": []}
    forward_states, reverse_states = model.forward_states, model.reverse_states

    def spy_forward(*a, **k):  # noqa: ANN002, ANN003
        seeds["forward"].append(k.get("seed"))
        return forward_states(*a, **k)

    def spy_reverse(*a, **k):  # noqa: ANN002, ANN003
        seeds["reverse"].append(k.get("seed"))
        assert k.get("upsample") is False  # a* is frames already
        return reverse_states(*a, **k)

    monkeypatch.setattr(model, "forward_states", spy_forward)
    monkeypatch.setattr(model, "reverse_states", spy_reverse)
    cfg = TrainConfig(arch="reder", fba_weight=0.5, cc_weight=0.0)
    src, tgt = _batch()
    out = direction_losses(model, src, tgt, "en", "de", cfg, aux=True)
    assert out.fba is not None and out.fba > 0 and out.cc is None
    assert seeds["forward"][0] is not None and seeds["reverse"] == seeds["forward"][:1]
    stage1 = direction_losses(model, src, tgt, "en", "de", cfg, aux=False)
    assert stage1.fba is None and len(seeds["reverse"]) == 1


@pytest.mark.unit
def test_cycle_consistency_gets_no_gradient_through_the_argmax() -> None:
    model = _model().train()
    src, _ = _batch()
    log_probs, frames = model.ctc_log_probs(src, "en", "de")
    leaf = log_probs.detach().clone().requires_grad_(True)  # the forward output, as a leaf
    # make the best path a fixed ŷ: x's rows in "de", blanks between (the paper's Γ⁻¹ drops them)
    blank = model.config.blank_id
    path = torch.full_like(frames.new_zeros(2, 8), blank)
    path[0, ::2] = torch.tensor([9, 10, 11, 9])
    path[1, :3] = torch.tensor([9, 9, 10])  # merged: ŷ = [9, 10]
    with torch.no_grad():  # only its argmax is read
        leaf.copy_(torch.nn.functional.one_hot(path, leaf.size(-1)).float())
    loss, skipped = cycle_loss(model, leaf, frames, src, "en", "de", 0.1)
    assert loss is not None and skipped == 0
    assert torch.autograd.grad(loss, leaf, allow_unused=True) == (None,)
    # the reverse pass (de->en) is what it trains
    loss, _ = cycle_loss(model, leaf, frames, src, "en", "de", 0.1)
    loss.backward()
    assert model.ends["de"][0].attn.q_proj.weight.grad.abs().sum() > 0
    assert ctc.collapse(path[1].tolist(), blank) == [9, 10]
    # a ŷ too short for x (all blanks: nothing decoded) is left out and counted
    with torch.no_grad():
        leaf[1] = torch.nn.functional.one_hot(torch.full((8,), blank), leaf.size(-1)).float()
    _, skipped = cycle_loss(model, leaf, frames, src, "en", "de", 0.1)
    assert skipped == 1


@pytest.mark.integration
def test_distillation_files_must_match_their_sources_line_for_line(tmp_path: Path) -> None:
    data = _prepared(tmp_path, toy_pairs(30, seed=1))
    good, bad = tmp_path / "kd.good.de", tmp_path / "kd.short.de"
    good.write_text("".join(d + "\n" for _, d in toy_pairs(30, seed=5)))
    bad.write_text("eins\n" * 29)
    d = data / "general"
    tdata = TrainData(d / "train.en", d / "train.de", d / "dev.en", d / "dev.de", "en", "de",
                      kd_forward=good, kd_backward=bad)  # fmt: skip
    with pytest.raises(ValueError, match=r"kd\.short\.de has 29 lines.*train\.de has 30"):
        check_distillation(tdata)
    base = ["train", "--data", str(data), "--run", str(tmp_path / "run"), "--config",
            str(_config(tmp_path)), "--vocab-size", "200"]  # fmt: skip
    res = runner.invoke(app, [*base, "--kd-forward", str(good), "--kd-backward", str(bad)])
    assert res.exit_code == 2 and "kd.short.de" in res.output and "29 lines" in res.output
    assert not (tmp_path / "run").exists()  # refused before anything is trained
    res = runner.invoke(app, [*base, "--kd-forward", str(bad)])
    assert res.exit_code == 2 and "kd.short.de" in res.output and "train.en" in res.output


@pytest.mark.integration
def test_each_direction_trains_on_its_own_distillation_targets(tmp_path: Path) -> None:
    """x→y on (train_src, kd_forward), y→x on (train_tgt, kd_backward): a teacher that writes
    every German word as "eins" shows up in the en->de corpus only."""
    pairs = toy_pairs(40, seed=1)
    data = _prepared(tmp_path, pairs)
    kd = tmp_path / "kd.de"
    kd.write_text("".join(" ".join("eins" for _ in e.split()) + "\n" for e, _ in pairs))
    d = data / "general"
    tdata = TrainData(d / "train.en", d / "train.de", d / "dev.en", d / "dev.de", "en", "de",
                      kd_forward=kd)  # fmt: skip
    tok = _word_tokenizer(data, tmp_path / "spm.model")
    cfg = TrainConfig(arch="reder", model=TINY, max_steps=1, eval_every=10**6, bf16=False)
    logs: list[str] = []
    train(tmp_path / "run", tdata, cfg, tok, log=logs.append)
    assert any("en->de (train.en -> kd.de)" in m for m in logs)
    assert any("de->en (train.de -> train.en)" in m for m in logs)
    eins = set(tok.encode("eins", "de"))
    from models.data import encode_corpus

    fwd = encode_corpus(tok, d / "train.en", kd, "en", "de", cfg.max_len)
    assert set(fwd.tgt_ids.tolist()) == eins  # what the en->de batches read
    transformer = TrainConfig(model={"d_model": 16, "n_heads": 2, "enc_layers": 1,
                                     "dec_layers": 1, "d_ff": 32}, max_steps=1)  # fmt: skip
    with pytest.raises(ValueError, match="distillation files are read by the CTC duplex trainer"):
        train(tmp_path / "t", tdata, transformer, tok, log=lambda s: None)


@pytest.mark.unit
@pytest.mark.parametrize(
    "field",
    [{"directions": "both"}, {"fba_weight": 0.1}, {"cc_weight": 0.5}, {"aux_after": 100}],
)
def test_duplex_fields_are_refused_for_a_transformer(field: dict[str, object]) -> None:
    name = next(iter(field))
    with pytest.raises(ValueError, match=rf"{name}: options of CTC duplex models \(reder\)"):
        TrainConfig.from_dict({"arch": "transformer", **field})
    assert TrainConfig().directions is None  # defaults change nothing for the Transformer
    assert TrainConfig(arch="reder").directions == "both"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("field", "message"),
    [
        ({"directions": "sideways"}, "directions must be one of"),
        ({"fba_weight": -0.1}, "fba_weight must be a number >= 0"),
        ({"cc_weight": True}, "cc_weight must be a number >= 0"),
        ({"aux_after": 1.5}, "aux_after must be an update count"),
    ],
)
def test_duplex_fields_are_checked(field: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_dict({"arch": "reder", **field})


@pytest.mark.unit
def test_shipped_reder_config_is_the_seeds_recipe() -> None:
    """SEEDS §3.3: duplex, FBA and CC at the paper's 0.1, switched on after 60% of the
    updates; about 9 epochs of the Bible tier (267 batches of 4096 tokens per epoch)."""
    cfg = TrainConfig.from_dict(
        json.loads((files("models") / "configs" / "reder-small-en-de.json").read_text())
    )
    assert (cfg.directions, cfg.fba_weight, cfg.cc_weight) == ("both", 0.1, 0.1)
    assert cfg.aux_after == round(0.6 * cfg.max_steps)
    assert 8.5 <= cfg.max_steps / 267 <= 9.5 and cfg.max_tokens == 4096
    # the averaged checkpoints all come from stage 2
    assert cfg.max_steps - (cfg.average_last - 1) * cfg.save_every > cfg.aux_after
