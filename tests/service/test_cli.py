"""The `ragmt` command, driven as a user would, on the tiny real bundle."""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app
from tests.toy import gloss, toy_pairs

pytestmark = pytest.mark.integration

runner = CliRunner()
TEXTS = ["one two", "red tree two house", "blue"]


def test_translate_stdin_to_stdout(bundle: Path) -> None:
    res = runner.invoke(app, ["translate", "--model", str(bundle)], input="\n".join(TEXTS) + "\n")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == [gloss(t) for t in TEXTS]


def test_translate_keeps_blank_lines_blank(bundle: Path) -> None:
    """A blank line among the input gives a blank line at its place, not a failure."""
    lines = [TEXTS[0], "", "   ", TEXTS[1]]
    res = runner.invoke(app, ["translate", "--model", str(bundle)], input="\n".join(lines) + "\n")
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines() == [gloss(TEXTS[0]), "", "", gloss(TEXTS[1])]


def test_translate_files_greedy(bundle: Path, tmp_path: Path) -> None:
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    args = ["translate", "--model", str(bundle), "-i", str(src), "-o", str(out), "--beam", "1"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert out.read_text(encoding="utf-8").splitlines() == [gloss(t) for t in TEXTS]


def test_translate_refuses_tampered_bundle(bundle: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(bundle, bad)
    weights = bad / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    res = runner.invoke(app, ["translate", "--model", str(bad)], input="one\n")
    assert res.exit_code == 2
    assert "checksum" in res.output


def test_translate_reports_invalid_utf8(bundle: Path, tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_bytes(b"one\n\xff\xfe two\n")
    res = runner.invoke(app, ["translate", "--model", str(bundle), "-i", str(src)])
    assert res.exit_code == 2
    assert "invalid UTF-8" in res.output


def test_eval_writes_json_and_markdown(bundle: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "toy").mkdir(parents=True)
    sents = ["one two three four", "red house blue tree", "green tree four five"]
    (data / "toy/test.en").write_text("\n".join(sents) + "\n", encoding="utf-8")
    (data / "toy/test.de").write_text("\n".join(gloss(s) for s in sents) + "\n", encoding="utf-8")
    out = tmp_path / "report" / "toy"
    args = ["eval", "--model", str(bundle), "--data", str(data), "--domains", "toy"]
    res = runner.invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["toy"]["bleu"] == 100.0 and result["toy"]["sentences"] == 3
    assert "nrefs:1" in out.with_suffix(".md").read_text()
    # a name with a dot keeps it: two settings never write over each other's report
    for name in ("toy-lp2.0", "toy-lp2.5"):
        lp = name.rsplit("lp", 1)[1]
        res = runner.invoke(app, [*args, "--length-penalty", lp, "--out", str(out.parent / name)])
        assert res.exit_code == 0, res.output
    for name in ("toy-lp2.0", "toy-lp2.5"):
        assert json.loads((out.parent / f"{name}.json").read_text())["toy"]["bleu"] == 100.0
        assert (out.parent / f"{name}.md").is_file()
        assert (out.parent / f"{name}-hyps" / "toy.test.hyp.de").is_file()
    assert not (out.parent / "toy-lp2.json").exists()


def test_eval_zero_shot_scores_an_unseen_source_and_says_so(bundle: Path, tmp_path: Path) -> None:
    """Cross-lingual transfer: an en->de model scored on "nl" sources (here the same English
    words, so the toy model's glosses are right); refused without --zero-shot."""
    data = tmp_path / "data"
    (data / "toy").mkdir(parents=True)
    sents = ["one two three four", "red house blue tree"]
    (data / "toy/test.nl").write_text("\n".join(sents) + "\n", encoding="utf-8")
    (data / "toy/test.de").write_text("\n".join(gloss(s) for s in sents) + "\n", encoding="utf-8")
    results = tmp_path / "r.jsonl"
    args = ["eval", "--model", str(bundle), "--data", str(data), "--domains", "toy",
            "--source-lang", "nl", "--results", str(results)]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "reads no nl (--zero-shot" in res.output
    assert not results.exists()
    res = runner.invoke(app, [*args, "--zero-shot"])
    assert res.exit_code == 0, res.output
    record = json.loads(results.read_text())
    assert record["bleu"] == 100.0 and record["languages"] == {"source": "nl", "target": "de"}
    assert record["decoding"]["zero_shot"] == {"trained_pairs": [["en", "de"]]}
    res = runner.invoke(app, [*args[:-4], "--zero-shot"])
    assert res.exit_code == 2 and "--zero-shot needs --source-lang" in res.output


def _toy_training(tmp_path: Path) -> tuple[Path, Path]:
    """A prepared-data folder of toy pairs and a tiny model's training config."""
    data = tmp_path / "en-de"
    folder = data / "general"
    folder.mkdir(parents=True)
    for split, n, seed in (("train", 400, 1), ("dev", 10, 2)):
        pairs = toy_pairs(n, seed)
        (folder / f"{split}.en").write_text("".join(e + "\n" for e, _ in pairs))
        (folder / f"{split}.de").write_text("".join(d + "\n" for _, d in pairs))
    (data / "manifest.json").write_text(json.dumps({"languages": {"source": "en", "target": "de"}}))
    config = tmp_path / "cfg.json"
    model = {"d_model": 32, "n_heads": 2, "enc_layers": 1, "dec_layers": 1, "d_ff": 64}
    config.write_text(json.dumps({"model": model, "max_steps": 10, "save_every": 5, "bf16": False}))
    return data, config


def test_train_command_writes_a_bundle_and_resumes(tmp_path: Path) -> None:
    data, config = _toy_training(tmp_path)
    run, out = tmp_path / "run", tmp_path / "bundle"
    args = ["train", "--data", str(data), "--run", str(run), "--out", str(out)]
    args += ["--config", str(config), "--vocab-size", "300"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["training"]["steps"] == 10
    assert (out / "spm.model").is_file()
    res = runner.invoke(app, [*args, "--max-steps", "15"])
    assert res.exit_code == 0, res.output
    assert "resumed from ckpt-0000010" in res.output
    assert json.loads((out / "manifest.json").read_text())["training"]["steps"] == 15


def test_train_command_trains_the_other_direction(tmp_path: Path) -> None:
    data, config = _toy_training(tmp_path)
    run, out = tmp_path / "run", tmp_path / "bundle"
    args = ["train", "--data", str(data), "--run", str(run), "--out", str(out)]
    args += ["--config", str(config), "--vocab-size", "300"]
    res = runner.invoke(app, [*args, "--source-lang", "de"])
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["languages"] == {"source": "de", "target": "en"}
    assert manifest["pairs"] == [["de", "en"]]
    res = runner.invoke(app, [*args, "--source-lang", "fr"])
    assert res.exit_code == 2 and "holds en->de pairs" in " ".join(res.output.split())


def test_average_command_makes_one_bundle_of_seed_runs(tmp_path: Path) -> None:
    data, config = _toy_training(tmp_path)
    base = ["--data", str(data), "--vocab-size", "300"]
    res = runner.invoke(app, ["train", *base, "--config", str(config), "--run",
                              str(tmp_path / "run"), "--out", str(tmp_path / "start")])  # fmt: skip
    assert res.exit_code == 0, res.output
    for seed in (1, 2):
        cfg = tmp_path / f"seed{seed}.json"
        cfg.write_text(json.dumps({**json.loads(config.read_text()), "seed": seed}))
        args = ["train", *base, "--config", str(cfg), "--init", str(tmp_path / "start")]
        args += ["--run", str(tmp_path / f"seed{seed}"), "--out", str(tmp_path / f"b{seed}")]
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
    runs = ["--run", str(tmp_path / "seed1"), "--run", str(tmp_path / "seed2")]
    out = tmp_path / "soup"
    res = runner.invoke(app, ["average", *runs, "--out", str(out), "--data", str(data)])
    assert res.exit_code == 0, res.output
    training = json.loads((out / "manifest.json").read_text())["training"]
    assert [r["seed"] for r in training["runs"]] == [1, 2]
    # the config's average_last (5) of each run: all it has, steps 5 and 10
    assert len(training["averaged_checkpoints"]) == 2 * 2
    # refused with a reason, nothing written
    res = runner.invoke(app, ["average", *runs[:2], "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "at least two" in " ".join(res.output.split())
    # one run: its last --last checkpoints re-averaged; more than it keeps is refused
    res = runner.invoke(app, ["average", *runs[:2], "--out", str(tmp_path / "one"), "--data",
                              str(data), "--last", "1"])  # fmt: skip
    assert res.exit_code == 0, res.output
    one = json.loads((tmp_path / "one" / "manifest.json").read_text())["training"]
    assert one["averaged_checkpoints"] == ["ckpt-0000010"] and one["config"]["seed"] == 1
    res = runner.invoke(app, ["average", *runs[:2], "--out", str(tmp_path / "x"), "--data",
                              str(data), "--last", "9"])  # fmt: skip
    assert res.exit_code == 2 and "fewer than --last 9" in " ".join(res.output.split())
    res = runner.invoke(app, ["average", *runs[:2], "--run", str(tmp_path / "run"), "--out",
                              str(tmp_path / "x"), "--data", str(data), "--last", "1"])  # fmt: skip
    assert res.exit_code == 2 and "not started from a bundle" in " ".join(res.output.split())
    res = runner.invoke(app, ["average", *runs, "--out", str(tmp_path / "x"), "--data",
                              str(tmp_path / "nowhere")])  # fmt: skip
    assert res.exit_code == 2 and "no manifest.json" in " ".join(res.output.split())
    assert not (tmp_path / "x").exists()


def test_train_rejects_unknown_config_key(tmp_path: Path) -> None:
    data = tmp_path / "en-de"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"languages": {"source": "en", "target": "de"}}))
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps({"learning_rate": 1}))
    res = runner.invoke(app, ["train", "--data", str(data), "--config", str(config)])
    assert res.exit_code == 2
    assert "learning_rate" in res.output


def test_data_prepare_offline_names_missing_package(tmp_path: Path) -> None:
    args = ["data", "prepare", "--out", str(tmp_path / "d"), "--cache", str(tmp_path / "c")]
    res = runner.invoke(app, [*args, "--offline"])
    assert res.exit_code == 2
    assert "trans-de-en" in res.output and not (tmp_path / "d" / "en-de").exists()


def test_decoding_defaults_agree_across_cli_service_and_library() -> None:
    """`ragmt translate`, `ragmt eval`, the service and `DecodeOptions` decode alike unless
    told otherwise: one length penalty, sentences split."""
    import inspect

    from models.translator import DecodeOptions
    from service.cli import evaluate_cmd, translate
    from service.engine import Limits
    from service.settings import Settings

    lp = DecodeOptions().length_penalty
    assert Settings().length_penalty == Limits().options.length_penalty == lp
    assert Settings().split_sentences and Limits().options.split_sentences
    assert Settings().neighbours_k == Limits().options.neighbours_k == DecodeOptions().neighbours_k
    for command in (translate, evaluate_cmd):
        params = inspect.signature(command).parameters
        assert params["length_penalty"].default.default == lp
        assert params["split_sentences"].default.default is True


def test_data_mask_literals_writes_a_trainable_directory_or_says_what_is_wrong(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    (data / "general").mkdir(parents=True)
    (data / "manifest.json").write_text(json.dumps({"languages": {"source": "en", "target": "de"}}))
    for split, en, de in (("train", "Open %s now.", "Öffnen Sie %s jetzt."), ("dev", "a", "b")):
        (data / "general" / f"{split}.en").write_text(en + "\n", encoding="utf-8")
        (data / "general" / f"{split}.de").write_text(de + "\n", encoding="utf-8")
    out = tmp_path / "masked"
    args = ["data", "mask-literals", "--data", str(data), "--out", str(out)]
    res = runner.invoke(app, [*args, "--share", "2"])
    assert res.exit_code == 2 and "share must lie in [0, 1]" in res.output
    assert not out.exists()
    res = runner.invoke(app, [*args, "--share", "1"])
    assert res.exit_code == 0, res.output
    assert "1 lines, 1 with literals that can be masked, 1 masked" in res.output
    assert (out / "general/train.de").read_text(encoding="utf-8") == "Öffnen Sie {1} jetzt.\n"
    res = runner.invoke(app, ["data", "mask-literals", "--data", str(tmp_path), "--out", str(out)])
    assert res.exit_code == 2 and "no manifest.json" in res.output
