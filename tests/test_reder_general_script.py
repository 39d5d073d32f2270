"""experiments/reder-general.sh end to end on a toy corpus with tiny budgets: the de->en teacher
and REDER trained at once, every evaluation each way (greedy, re-ranked), reversibility and the
speed benchmark, all as records. The real run takes hours; this proves its plumbing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from models import native_step
from tests.test_experiment_script import COMMON, DOMAINS, TINY, _prepared, _ragmt

pytestmark = [pytest.mark.system, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "experiments" / "reder-general.sh"
REDER_TINY = {"d_model": 32, "n_heads": 2, "d_ff": 64, "layers_per_end": 1, "max_rel": 4,
              "dropout": 0.0, "upsample": 2, "languages": ["en", "de"]}  # fmt: skip


def test_reder_general_script_runs_end_to_end_on_toy_data(tmp_path: Path) -> None:
    data = _prepared(tmp_path)
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": path}
    teacher_cfg, reder_cfg = tmp_path / "teacher.json", tmp_path / "reder.json"
    teacher_cfg.write_text(json.dumps({"model": TINY, **COMMON}))
    reder_cfg.write_text(json.dumps({"arch": "reder", "model": REDER_TINY, **COMMON,
                                     "fba_weight": 0.1, "cc_weight": 0.1}))  # fmt: skip
    # the en->de teacher over the vocabulary the script's runs train again from the same data
    en_de = tmp_path / "teacher-en-de"
    _ragmt("train", "--data", str(data), "--run", str(tmp_path / "en-de-run"), "--out",
           str(en_de), "--config", str(teacher_cfg), "--vocab-size", "300", "--max-steps", "20",
           env=env)  # fmt: skip
    work = tmp_path / "work"
    env |= {"DATA": str(data), "WORK": str(work), "STEPS": "20", "REDER_AUX_AFTER": "10",
            "CTC_BEAM": "3", "VOCAB": "300", "TEACHER_EN_DE": str(en_de), "TEACHER_LAST": "1",
            "REDER_LAST": "1",
            "TEACHER_CONFIG": str(teacher_cfg), "REDER_CONFIG": str(reder_cfg)}  # fmt: skip
    res = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    records = [json.loads(line) for line in (work / "results.jsonl").read_text().splitlines()]
    evals = [r for r in records if r["kind"] == "eval"]
    seen = {(r["system"], r["languages"]["source"], r["domain"]) for r in evals}
    systems = ["source copied (no model)", "teacher beam 4", "REDER greedy, ort-int8",
               "REDER greedy, float", "REDER beam 3 + teacher"]  # fmt: skip
    assert seen == {(s, lang, d) for s in systems for lang in ("en", "de") for d in DOMAINS}
    reranked = [r for r in evals if r["system"] == "REDER beam 3 + teacher"]
    teachers = {r["languages"]["source"]: r["decoding"]["teacher"]["path"] for r in reranked}
    assert teachers == {"en": str(en_de), "de": str(work / "teacher-de-en" / "bundle")}
    trips = [r for r in records if r["kind"] == "reder-reversibility"]
    assert sorted(r["start_lang"] for r in trips) == ["de", "en"]
    speed = [r for r in records if r["kind"] == "reder-speed"]
    timed = {"teacher beam 4, float", "teacher beam 4, ort-int8", "REDER greedy, float",
             "REDER greedy, ort-int8"}  # fmt: skip
    if native_step.available()[0]:  # the teacher as the service runs it where the step builds
        timed.add("teacher beam 4, native-int8 (served)")
    assert {r["system"] for r in speed} == timed
    # both trainings stopped at the step budget; a second run redoes nothing
    for name in ("teacher-de-en", "reder"):
        manifest = json.loads((work / name / "bundle" / "manifest.json").read_text())
        assert manifest["training"]["steps"] == 20
    again = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=env, capture_output=True,
                           text=True)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert len((work / "results.jsonl").read_text().splitlines()) == len(records)
