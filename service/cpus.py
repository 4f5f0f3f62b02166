"""The CPU cores this process may use (its CPU affinity, capped by a cgroup quota: a container's
``--cpus``, a systemd ``CPUQuota``) and the torch thread count that follows; torch's default ignores the
quota. No torch import here: the worker launcher uses it too. Readers take the filesystem root (``/``)
so that tests can feed them files of their own.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path

_CGROUP = Path("sys/fs/cgroup")
_V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def cpu_affinity() -> int:
    """How many cores this process may be scheduled on (its affinity mask; all cores where the platform
    has no affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cgroup_cpu_limit(root: Path = Path("/")) -> float | None:
    """The least CPU quota, in cores, of this process's cgroup (``/proc/self/cgroup``; without it, the
    mounts' top directories) and those above it: v2 ``cpu.max`` (``200000 100000``: 2 cores; ``max``:
    none), v1 ``cpu.cfs_quota_us / cpu.cfs_period_us`` (-1: none). None without any; bad files count as none.
    """
    limits = [limit for directory in _cgroup_dirs(root) if (limit := _quota(directory)) is not None]
    return min(limits, default=None)


def available_cores(root: Path = Path("/"), affinity: Callable[[], int] = cpu_affinity) -> float:
    """The cores this process may use: the least of its CPU affinity and its cgroup quota (at root)."""
    cores = float(affinity())
    limit = cgroup_cpu_limit(root)
    return cores if limit is None else min(cores, limit)


def torch_threads_for(cores: float) -> int:
    """The torch thread count for ``cores`` cores: the whole cores, at least one."""
    return max(1, math.floor(cores))


def choose_torch_threads(
    torch_threads: int | None, worker_cores: float | None, cores: Callable[[], float] = available_cores
) -> tuple[int, str]:
    """The thread count of a process that runs jobs, and where it came from: ``LETHE_TORCH_THREADS``
    (``torch_threads``) if set, else the share of cores the worker launcher gave this process
    (``LETHE_WORKER_CORES``), else the cores this process may use (:func:`available_cores`)."""
    if torch_threads is not None:
        return torch_threads, "LETHE_TORCH_THREADS"
    if worker_cores is not None:
        return torch_threads_for(worker_cores), f"LETHE_WORKER_CORES={worker_cores:g}"
    found = cores()
    return torch_threads_for(found), f"{found:g} available cores (CPU affinity and cgroup quota)"


def _cgroup_dirs(root: Path) -> Iterator[Path]:
    """This process's cgroup directories and those above them up to each mount, the mounts' top first."""
    mount = root / _CGROUP
    mounts = [mount, *(mount / name for name in _V1_CPU_MOUNTS)]
    yield from mounts
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # cgroup v2: one hierarchy for every controller
            bases = [mount]
        elif "cpu" in controllers.split(","):
            bases = [mount / name for name in _V1_CPU_MOUNTS]
        else:
            continue
        parts = [part for part in path.split("/") if part]
        for base in bases:
            for depth in range(1, len(parts) + 1):
                yield base.joinpath(*parts[:depth])


def _quota(directory: Path) -> float | None:
    """The quota in cores set in ``directory`` (cgroup v2 or v1 files), or None."""
    try:
        if (directory / "cpu.max").is_file():
            quota, _, period = (directory / "cpu.max").read_text().strip().partition(" ")
            return None if quota == "max" else _cores(int(quota), int(period or 100_000))
        if (directory / "cpu.cfs_quota_us").is_file():
            quota_us = int((directory / "cpu.cfs_quota_us").read_text())
            period_us = int((directory / "cpu.cfs_period_us").read_text())
            return None if quota_us < 0 else _cores(quota_us, period_us)
    except (OSError, ValueError):
        return None
    return None


def _cores(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None
