"""experiments/semiparametric-en-de.sh end to end on a toy corpus with tiny budgets.

The real experiment runs for hours; this proves its plumbing (stores of every method,
neighbours, warm-started training, every evaluation, the report) with the real commands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from index_builder.retrieval.encoder import bundle_sha256
from index_builder.store import open_store
from tests.toy import toy_pairs

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "experiments" / "semiparametric-en-de.sh"
DOMAINS = ("general", "bible", "medical", "software-docs")
TINY = {"d_model": 32, "n_heads": 2, "enc_layers": 1, "dec_layers": 1, "d_ff": 64, "dropout": 0.0}
COMMON = {"max_tokens": 512, "lr": 3e-3, "warmup": 20, "eval_every": 10**6, "save_every": 20,
          "average_last": 1, "dev_sentences": 10, "bf16": False, "threads": 1}  # fmt: skip


def _prepared(root: Path) -> Path:
    data = root / "en-de"
    for i, domain in enumerate(DOMAINS):
        d = data / domain
        d.mkdir(parents=True)
        for split, n in (("train", 300), ("dev", 12), ("test", 15)):
            pairs = toy_pairs(n, seed=100 * i + len(split))
            (d / f"{split}.en").write_text("".join(s + "\n" for s, _ in pairs))
            (d / f"{split}.de").write_text("".join(t + "\n" for _, t in pairs))
    manifest = {"kind": "corpus", "languages": {"source": "en", "target": "de"}}
    (data / "manifest.json").write_text(json.dumps(manifest))
    return data


def _ragmt(*args: str, env: dict[str, str]) -> None:
    res = subprocess.run(["ragmt", *args], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]


@pytest.mark.slow
def test_experiment_script_runs_end_to_end_on_toy_data(tmp_path: Path) -> None:
    data = _prepared(tmp_path)
    # the `ragmt` of the environment running the suite, activated or not
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": path}
    base_cfg = tmp_path / "base.json"
    base_cfg.write_text(json.dumps({"model": TINY, "max_steps": 60, **COMMON}))
    base = tmp_path / "base-bundle"
    _ragmt("train", "--data", str(data), "--run", str(tmp_path / "base-run"), "--out", str(base),
           "--config", str(base_cfg), "--vocab-size", "300", env=env)  # fmt: skip
    mem_cfg = tmp_path / "mem.json"
    memory = {"max_neighbours": 4, "max_neighbour_len": 16}
    mem_cfg.write_text(
        json.dumps({"arch": "semiparametric", "model": {**TINY, **memory}, "neighbours": 2,
                    "max_steps": 20, **COMMON})
    )  # fmt: skip
    work = tmp_path / "work"
    env |= {"DATA": str(data), "BASE": str(base), "WORK": str(work), "CONFIG": str(mem_cfg),
            "STEPS": "20", "K": "3", "DENSE_INDEX": "Flat", "DENSE_SEARCH": "",
            "FT_STEPS": "10", "ABLATION_STEPS": "10"}  # fmt: skip
    res = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    evals = {p.stem: json.loads(p.read_text()) for p in (work / "eval").glob("*.json")}
    adapt = DOMAINS[1:]
    assert set(evals) == {
        "baseline",
        "cstm-idf-ngram+idf-sentence",
        "cstm-idf-ngram+idf-ngram",
        "cstm-idf-ngram+dense-ngram",
        "cstm-idf-ngram+dense-own",
        "cstm-idf-ngram+idf-ngram-store-medical-on-bible",
        "cstm-idf-ngram+idf-ngram-store-software-docs-on-medical",
        "cstm-idf-ngram+idf-ngram-store-bible-on-software-docs",
        "cstm-idf-ngram+idf-ngram-store-medical-on-general",
        *(f"ft-{system}-{d}" for system in ("baseline", "cstm") for d in adapt),
        *(f"ablation-{mode}-idf-ngram+dense-ngram" for mode in ("cstm", "ctm", "tm")),
    }
    assert set(evals["baseline"]) == set(DOMAINS)
    own = evals["cstm-idf-ngram+idf-ngram"]
    for domain in DOMAINS:  # each domain read its own store, and the gate was measured
        assert own[domain]["store"].startswith(f"{domain}@")
        assert 0.0 < own[domain]["gate_mean"] < 1.0
    mine = bundle_sha256(json.loads((work / "cstm-idf-ngram" / "manifest.json").read_text()))
    for domain in DOMAINS:  # dense stores of the memory model's own encoder, each read
        assert open_store(work / "stores" / "dense-own" / domain).manifest["model_sha256"] == mine
        assert evals["cstm-idf-ngram+dense-own"][domain]["store"].startswith(f"{domain}@")
    wrong = evals["cstm-idf-ngram+idf-ngram-store-medical-on-general"]
    assert set(wrong) == {"general"} and wrong["general"]["store"].startswith("medical@")
    for d in adapt:  # fine-tuned on the domain, from the right bundle, scored on it
        assert (
            set(evals[f"ft-baseline-{d}"]) == {d}
            and "gate_mean" not in evals[f"ft-baseline-{d}"][d]
        )
        assert evals[f"ft-cstm-{d}"][d]["store"].startswith(f"{d}@")
        tuned = json.loads((work / f"ft-cstm-{d}" / "manifest.json").read_text())
        assert tuned["architecture"] == "semiparametric"
        assert tuned["training"]["config"]["lr"] == 0.0003
    modes = {
        m: json.loads((work / f"ablation-{m}-idf-ngram" / "manifest.json").read_text())
        for m in ("cstm", "ctm", "tm")
    }
    for m, manifest in modes.items():
        assert manifest["training"]["config"]["model"]["memory_mode"] == m
        assert manifest["training"]["steps"] == 10
    report = (work / "report.md").read_text()
    assert "| cstm-idf-ngram+dense-ngram | medical | medical@" in report
    assert "| ft-baseline-bible | bible | - |" in report
    assert "BLEU: `nrefs:1" in report
    overview = report.split("## Results")[0]
    assert "| evaluation | general | bible | medical | software-docs |" in overview
    assert "| ft-baseline-bible |  | " in overview  # one domain: the others left empty
    examples = report.split("## Examples")[1]
    assert examples.count("**test line") == 3 * len(DOMAINS)
    assert "neighbours read (retrieved source → target):\n  1. " in examples
    # Resumable: a second run finds everything made and redoes nothing.
    again = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "ragmt" not in again.stderr

    # The memory-model decoding benchmark runs on what the experiment made.
    bench = [sys.executable, "-m", "benchmarks.memory_decode", "--baseline", str(base),
             "--model", str(work / "cstm-idf-ngram"),
             "--stores", str(work / "stores" / "dense-ngram"),
             "--retrieval-model", str(base), "--domain", "medical", "--data", str(data),
             "--sentences", "8", "--latency-sentences", "3", "--device", "cpu"]  # fmt: skip
    res = subprocess.run(bench, env=env, cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert "| memory model with retrieval |" in res.stdout
    assert "ratio memory model with retrieval / baseline: batch-1 p50" in res.stdout
    assert "store encoded by the memory model: no" in res.stdout
    assert "sentences split (both)" in res.stdout  # as the service decodes
    assert "source encoded once" not in res.stdout

    # With a dense store of the memory model's own encoder (the service's default), the
    # benchmark also measures the path that encodes each source once.
    own = work / "stores" / "dense-own"  # made by the script
    bench_own = [*bench[:bench.index("--stores")], "--stores", str(own),
                 "--domain", "medical", "--data", str(data), "--sentences", "8",
                 "--latency-sentences", "3", "--device", "cpu"]  # fmt: skip
    res = subprocess.run(bench_own, env=env, cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert "store encoded by the memory model: yes" in res.stdout
    assert "| memory model with retrieval, source encoded once |" in res.stdout
    assert "ratio source encoded once / baseline: batch-1 p50" in res.stdout
