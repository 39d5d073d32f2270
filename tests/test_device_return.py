"""experiments/device_return.py: a GPU call cut off at its limit still returns what was done."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from tests.experiment_scripts import EXPERIMENTS, load

pytestmark = pytest.mark.unit


def test_a_sigterm_runs_the_finally_that_packs(tmp_path: Path) -> None:
    """`timeout` ends a device call with SIGTERM: the script's `finally` (its last pack) runs,
    and the call still ends, with 128 + 15."""
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        sys.path.insert(0, {str(EXPERIMENTS)!r})
        import device_return
        device_return.exit_on_term()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        finally:
            open({str(tmp_path / "packed")!r}, "w").write("yes")
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert res.returncode == 143, res.stderr.decode()[-2000:]
    assert (tmp_path / "packed").read_text() == "yes"


def test_pack_replaces_the_archive_whole(tmp_path: Path) -> None:
    device_return = load("device_return")
    small, out = tmp_path / "small", tmp_path / "out"
    small.mkdir()
    out.mkdir()
    (small / "results.jsonl").write_text("one\n")
    device_return.pack(small, out, "back")
    (small / "results.jsonl").write_text("one\ntwo\n")
    (small / "log.txt").write_text("done\n")
    device_return.pack(small, out, "back")
    assert sorted(p.name for p in out.iterdir()) == ["small.tar.gz"]  # no part-written file
    with tarfile.open(out / "small.tar.gz") as tar:
        assert tar.extractfile("back/results.jsonl").read() == b"one\ntwo\n"
        assert "back/log.txt" in tar.getnames()
