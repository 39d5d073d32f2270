"""How many CPU threads torch may use in this replica: the CPUs it is given, shared fairly.

torch's default is every core the machine has, which is wrong twice in a deployment: a
container's CPU quota (cgroup) may be far below the host's cores, and several replicas on one
host each take all of them. Oversubscribed, the threads of one matrix product wait on each
other and latency grows by orders of magnitude. The budget is the smallest of the CPUs this
process may run on (affinity) and its cgroup quota, divided by the replicas on the host.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_quota(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs allowed by the cgroup's quota (v2 `cpu.max`, else v1 `cpu.cfs_quota_us`), or
    None when there is no quota or no cgroup file to read."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def cpu_budget(root: Path = CGROUP_ROOT) -> int:
    """Whole CPUs this process can use: affinity, capped by the cgroup quota (at least 1)."""
    if hasattr(os, "sched_getaffinity"):
        cpus = len(os.sched_getaffinity(0))
    else:  # pragma: no cover - macOS, Windows
        cpus = os.cpu_count() or 1
    quota = cgroup_quota(root)
    if quota is not None:
        cpus = min(cpus, math.floor(quota))
    return max(1, cpus)


def torch_threads(configured: int, replicas_per_host: int, root: Path = CGROUP_ROOT) -> int:
    """`configured` when set (> 0), else this replica's fair share of the CPU budget."""
    if configured > 0:
        return configured
    return max(1, cpu_budget(root) // max(1, replicas_per_host))
