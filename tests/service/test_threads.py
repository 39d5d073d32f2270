"""torch's threads per replica: the CPUs it is given (affinity, cgroup quota) shared among the
replicas of a host, or what the operator configured; the app applies it when it starts, and
keeps what it loaded out of the garbage collector's full passes."""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path

import pytest
import torch

from service.app import create_app
from service.settings import Settings
from service.threads import cgroup_quota, cpu_budget, torch_threads
from tests.service.conftest import running

AFFINITY = len(os.sched_getaffinity(0))


def cgroup(tmp_path: Path, v2: str | None = None, v1: tuple[int, int] | None = None) -> Path:
    """A fake cgroup root with a v2 `cpu.max` or v1 quota files."""
    if v2 is not None:
        (tmp_path / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        (tmp_path / "cpu").mkdir()
        (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(f"{v1[0]}\n")
        (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(f"{v1[1]}\n")
    return tmp_path


@pytest.mark.unit
@pytest.mark.parametrize(
    ("v2", "v1", "quota"),
    [
        ("max 100000", None, None),
        ("200000 100000", None, 2.0),
        ("150000 100000", None, 1.5),
        (None, (-1, 100000), None),
        (None, (50000, 100000), 0.5),
        (None, None, None),
        ("garbage", None, None),
    ],
)
def test_cgroup_quota_is_read_from_v2_or_v1_files(tmp_path, v2, v1, quota) -> None:
    assert cgroup_quota(cgroup(tmp_path, v2, v1)) == quota


@pytest.mark.unit
def test_threads_are_the_replicas_share_of_the_budget(tmp_path: Path) -> None:
    (tmp_path / "none").mkdir()
    unlimited = cgroup(tmp_path / "none", "max 100000")
    assert cpu_budget(unlimited) == AFFINITY
    one_cpu = tmp_path / "one"
    one_cpu.mkdir()
    assert cpu_budget(cgroup(one_cpu, "150000 100000")) == 1  # a fraction rounds down
    half = tmp_path / "half"
    half.mkdir()
    assert cpu_budget(cgroup(half, "50000 100000")) == 1  # never below one
    assert torch_threads(0, 1, unlimited) == AFFINITY
    assert torch_threads(0, AFFINITY * 4, unlimited) == 1
    assert torch_threads(0, 2, unlimited) == max(1, AFFINITY // 2)
    assert torch_threads(3, 2, unlimited) == 3  # configured wins


@pytest.mark.integration
@pytest.mark.anyio
async def test_the_app_sets_torchs_threads_when_it_starts(
    bundle: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = torch.get_num_threads()
    settings = Settings(model_path=bundle, stores_dir=tmp_path, torch_threads=1)
    try:
        with caplog.at_level(logging.INFO, logger="ragmt.service"):
            async with running(create_app(settings)):
                assert torch.get_num_threads() == 1
        assert "1 torch threads (as configured)" in caplog.text
        settings = Settings(model_path=bundle, stores_dir=tmp_path, replicas_per_host=AFFINITY)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="ragmt.service"):
            async with running(create_app(settings)):
                assert torch.get_num_threads() == torch_threads(0, AFFINITY)
        assert f"{AFFINITY} replicas per host" in caplog.text
    finally:
        torch.set_num_threads(before)


@pytest.mark.integration
@pytest.mark.anyio
async def test_what_the_app_loaded_is_kept_out_of_full_collections(
    bundle: Path, tmp_path: Path
) -> None:
    """Once started, the app has frozen what it loaded (the model among it), so a full pass of
    the collector no longer visits it; stopped, it gives it back."""
    assert gc.get_freeze_count() == 0
    app = create_app(Settings(model_path=bundle, stores_dir=tmp_path))
    async with running(app) as client:
        assert gc.get_freeze_count() > 10_000
        tracked = {id(o) for o in gc.get_objects()}
        model = app.state.service.engine.registry.models[0].translator
        assert id(model) not in tracked
        assert (await client.post("/v1/translate", json={"texts": ["hello"]})).status_code == 200
    assert gc.get_freeze_count() == 0
    assert any(o is model for o in gc.get_objects())
