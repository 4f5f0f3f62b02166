"""service.cpus: the cores a process may use (CPU affinity capped by a cgroup v2 or v1 quota, read from
files under a fake root) and the torch thread count a process that runs jobs picks from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.cpus import available_cores, cgroup_cpu_limit, choose_torch_threads, torch_threads_for

CGROUP = Path("sys/fs/cgroup")


def write(root: Path, relative: str | Path, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def eight() -> int:
    return 8


def test_a_cgroup_v2_quota_is_quota_over_period_in_cores(tmp_path: Path) -> None:
    write(tmp_path, CGROUP / "cpu.max", "200000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 2.0
    assert available_cores(tmp_path, eight) == 2.0


def test_cgroup_v2_max_means_no_quota(tmp_path: Path) -> None:
    write(tmp_path, CGROUP / "cpu.max", "max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None
    assert available_cores(tmp_path, eight) == 8.0


def test_a_cgroup_v1_quota_is_cfs_quota_over_cfs_period(tmp_path: Path) -> None:
    write(tmp_path, CGROUP / "cpu,cpuacct" / "cpu.cfs_quota_us", "150000\n")
    write(tmp_path, CGROUP / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    assert available_cores(tmp_path, eight) == 1.5


def test_a_cgroup_v1_quota_of_minus_one_is_none(tmp_path: Path) -> None:
    write(tmp_path, CGROUP / "cpu" / "cpu.cfs_quota_us", "-1\n")
    write(tmp_path, CGROUP / "cpu" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_without_cgroup_files_the_affinity_decides(tmp_path: Path) -> None:
    assert cgroup_cpu_limit(tmp_path) is None
    assert available_cores(tmp_path, eight) == 8.0
    assert available_cores(tmp_path, lambda: 3) == 3.0


def test_a_quota_above_the_affinity_leaves_the_affinity(tmp_path: Path) -> None:
    write(tmp_path, CGROUP / "cpu.max", "1600000 100000\n")
    assert available_cores(tmp_path, eight) == 8.0


def test_the_least_quota_of_the_process_cgroup_and_those_above_it_wins(tmp_path: Path) -> None:
    write(tmp_path, "proc/self/cgroup", "0::/system.slice/lethe.service\n")
    write(tmp_path, CGROUP / "cpu.max", "max 100000\n")
    write(tmp_path, CGROUP / "system.slice" / "cpu.max", "300000 100000\n")
    write(tmp_path, CGROUP / "system.slice" / "lethe.service" / "cpu.max", "max 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 3.0
    write(tmp_path, CGROUP / "system.slice" / "lethe.service" / "cpu.max", "50000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 0.5
    assert available_cores(tmp_path, eight) == 0.5


def test_a_malformed_quota_file_counts_as_none(tmp_path: Path) -> None:
    write(tmp_path, CGROUP / "cpu.max", "lots\n")
    assert cgroup_cpu_limit(tmp_path) is None


@pytest.mark.parametrize(("cores", "threads"), [(0.5, 1), (1.0, 1), (1.5, 1), (2.0, 2), (7.9, 7), (16.0, 16)])
def test_the_thread_count_is_the_whole_cores_at_least_one(cores: float, threads: int) -> None:
    assert torch_threads_for(cores) == threads


def test_lethe_torch_threads_overrides_the_share_and_the_available_cores() -> None:
    assert choose_torch_threads(3, 1.0, lambda: 16.0) == (3, "LETHE_TORCH_THREADS")


def test_the_launcher_share_comes_before_the_available_cores() -> None:
    threads, source = choose_torch_threads(None, 2.0, lambda: 16.0)
    assert (threads, source) == (2, "LETHE_WORKER_CORES=2")


def test_without_a_setting_the_available_cores_decide() -> None:
    threads, source = choose_torch_threads(None, None, lambda: 1.5)
    assert threads == 1 and "1.5 available cores" in source
