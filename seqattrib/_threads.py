"""How many CPUs this process may use, for frameworks that size their thread pools by the
machine's core count.

torch and TensorFlow start one compute thread per core they see. In a container or a job
scheduler's allocation the process may use fewer: its CPU affinity (``taskset``, Slurm's
``--cpus-per-task``) or a cgroup CPU quota (Docker's ``--cpus``, Kubernetes limits) caps it, and
more threads than that spin and wait for each other: a busy node ran EIG 30x slower.
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def _cgroup_quota(root: Path) -> float | None:
    """CPUs allowed by a cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us`` file, or None."""
    try:
        limit, interval = (root / "cpu.max").read_text().split()[:2]
        return None if limit == "max" else int(limit) / int(interval)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def affinity_cpus() -> int:
    """CPUs in this process's affinity mask (all of the machine's where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def available_cpus(cgroup_root: str | os.PathLike[str] = "/sys/fs/cgroup") -> int:
    """CPUs this process may use: its affinity mask, capped by a cgroup CPU quota (rounded up).

    Parameters
    ----------
    cgroup_root : path
        Where the cgroup file system is mounted.
    """
    count = affinity_cpus()
    quota = _cgroup_quota(Path(cgroup_root))
    if quota is not None:
        count = min(count, max(1, math.ceil(quota)))
    return max(1, count)
