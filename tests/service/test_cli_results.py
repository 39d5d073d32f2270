"""`ragmt eval --results` appends self-describing records; `ragmt report` builds tables."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from index_builder.retrieval.encoder import bundle_sha256
from index_builder.store import active_version
from models import native_step
from models.artifacts import sha256_file
from models.ort_decoder import int8_weights
from service.cli import app
from tests.service.conftest import make_store
from tests.toy import gloss, toy_pairs

pytestmark = pytest.mark.integration
runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "toy").mkdir(parents=True)
    sents = ["one two three four", "red house blue tree", "green tree four five"]
    (data / "toy/test.en").write_text("\n".join(sents) + "\n", encoding="utf-8")
    (data / "toy/test.de").write_text("\n".join(gloss(s) for s in sents) + "\n", encoding="utf-8")
    (data / "manifest.json").write_text(json.dumps({"languages": {"source": "en", "target": "de"}}))
    return data


def test_eval_appends_one_record_per_domain_saying_what_produced_it(
    bundle: Path, memory_bundle: Path, tmp_path: Path
) -> None:
    data, results = _data(tmp_path), tmp_path / "results.jsonl"
    args = ["eval", "--model", str(bundle), "--data", str(data), "--domains", "toy"]
    res = runner.invoke(app, [*args, "--beam", "2", "--results", str(results)])
    assert res.exit_code == 0, res.output
    memory = memory_bundle
    stores = tmp_path / "idf-stores"
    make_store(stores, "toy", toy_pairs(30, seed=8), method="idf-ngram", activate=True)
    args = ["eval", "--model", str(memory), "--data", str(data), "--domains", "toy"]
    args += ["--stores", str(stores), "--neighbours", "3", "--length-penalty", "1.5"]
    res = runner.invoke(app, [*args, "--system", "mem", "--results", str(results)])
    assert res.exit_code == 0, res.output

    base, mem = [json.loads(x) for x in results.read_text().splitlines()]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert base["system"] == bundle.name and mem["system"] == "mem"
    assert base["bundle"]["sha256"] == bundle_sha256(manifest)
    assert base["bundle"]["architecture"] == "transformer"
    assert mem["bundle"]["architecture"] == "semiparametric"
    assert (base["domain"], base["split"], base["bleu"], base["sentences"]) == (
        "toy",
        "test",
        100.0,
        3,
    )
    assert base["signatures"]["bleu"].startswith("nrefs:1|") and base["chrf"] == 100.0
    assert base["decoding"] == {
        "beam": 2,
        "length_penalty": 2.0,
        "split_sentences": True,
        "batch_size": 32,
        "neighbours_k": None,
        # auto, on the CPU: the native step where it can be built
        **(
            {
                "quantize": "native-int8",
                "native_isa": native_step.isa(),
                "native_version": native_step.version(),
            }
            if native_step.available()[0]
            else {"quantize": "ort-int8"}
        ),
        "int8_weights": int8_weights(),  # as suits this CPU
        "block_repeats": 16,
        "keep_literals": True,
    }
    assert base["store"] is None and base["gate_mean"] is None
    assert base["checks"] == {
        "loops": 0,
        "loops_pct": 0.0,
        "implausible_length": 0,
        "implausible_length_pct": 0.0,
    }
    assert base["data"]["manifest_sha256"] == sha256_file(data / "manifest.json")
    assert base["data"]["source_sha256"] == sha256_file(data / "toy" / "test.en")
    assert base["data"]["reference_sha256"] == sha256_file(data / "toy" / "test.de")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert base["git"]["commit"] == head.stdout.strip() and isinstance(base["git"]["dirty"], bool)
    assert base["date"] and base["timings"]["seconds"] is not None

    version = active_version(stores, "toy")
    assert mem["store"] == {
        "domain": "toy",
        "method": "idf-ngram",
        "version": version,
        "manifest_sha256": sha256_file(stores / "toy" / version / "manifest.json"),
        "encoder_sha256": None,
        "label": "idf-stores",
    }
    assert mem["decoding"]["neighbours_k"] == 3 and mem["decoding"]["length_penalty"] == 1.5
    assert 0.0 < mem["gate_mean"] < 1.0 and mem["timings"]["retrieval_seconds"] is not None


def test_eval_refuses_a_torn_results_file_before_decoding(bundle: Path, tmp_path: Path) -> None:
    data, results = _data(tmp_path), tmp_path / "results.jsonl"
    results.write_text('{"format": "ragmt-result/1", "bleu": 1')
    args = ["eval", "--model", str(bundle), "--data", str(data), "--domains", "toy"]
    res = runner.invoke(app, [*args, "--results", str(results), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "line 1 is torn" in res.output
    assert results.read_text() == '{"format": "ragmt-result/1", "bleu": 1'
    assert not (tmp_path / "o.json").exists()  # refused before any decoding


def test_report_check_fails_on_a_stale_table_and_passes_once_rewritten(
    bundle: Path, tmp_path: Path
) -> None:
    data, results = _data(tmp_path), tmp_path / "results.jsonl"
    args = ["eval", "--model", str(bundle), "--data", str(data), "--domains", "toy"]
    assert runner.invoke(app, [*args, "--results", str(results)]).exit_code == 0
    spec = {"columns": [{"label": "BLEU"}], "rows": {"field": "domain"}, "corner": "domain"}
    (tmp_path / "r.tables.json").write_text(
        json.dumps({"results": ["results.jsonl"], "tables": {"t": spec}})
    )
    report = tmp_path / "r.md"
    report.write_text("<!-- table: t -->\n| domain | BLEU |\n<!-- /table -->\n")
    assert runner.invoke(app, ["report", "--check", str(report)]).exit_code == 1
    res = runner.invoke(app, ["report", str(report)])
    assert res.exit_code == 0, res.output
    assert "| toy | 100.00 |" in report.read_text()
    assert runner.invoke(app, ["report", "--check", str(report)]).exit_code == 0
