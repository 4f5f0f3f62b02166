"""workers.launcher divides the host's cores among the workers it starts: the updates/io worker a quarter
(at least one), the retrain and train workers the rest; each worker learns its share and thread count from
its environment, and ``LETHE_TORCH_THREADS`` overrides the thread count."""

from __future__ import annotations

import pytest

from workers.launcher import divide_cores, plan


def shares(cores: float, gpus: list[str]) -> dict[str, tuple[int | None, int | None]]:
    processes = plan(gpus, queue_prefix="q", concurrency=4, cores=cores)
    return {p.name: (p.cores, p.threads) for p in processes}


@pytest.mark.parametrize(
    ("cores", "gpus", "expected"),
    [
        (2, [], {"cpu": (1, 1), "retrain": (1, 1), "train": (1, 1)}),
        (2, ["0", "1"], {"cpu": (1, 1), "retrain": (1, 1), "gpu0": (1, 1), "gpu1": (1, 1)}),
        (4, [], {"cpu": (1, 1), "retrain": (2, 2), "train": (1, 1)}),
        (4, ["0", "1"], {"cpu": (1, 1), "retrain": (1, 1), "gpu0": (1, 1), "gpu1": (1, 1)}),
        (16, [], {"cpu": (4, 4), "retrain": (6, 6), "train": (6, 6)}),
        (16, ["0", "1"], {"cpu": (4, 4), "retrain": (4, 4), "gpu0": (4, 4), "gpu1": (4, 4)}),
        (2.5, [], {"cpu": (1, 1), "retrain": (1, 1), "train": (1, 1)}),  # a quota of 2.5 cores: 2 whole
    ],
)
def test_the_cores_are_divided_among_the_workers(
    cores: float, gpus: list[str], expected: dict[str, tuple[int, int]]
) -> None:
    assert shares(cores, gpus) == expected


@pytest.mark.parametrize("cores", [1, 2, 3, 4, 5, 8, 16, 64])
@pytest.mark.parametrize("heavy", [2, 3, 9])
def test_the_heavy_workers_never_run_more_threads_than_cores_unless_they_outnumber_them(
    cores: int, heavy: int
) -> None:
    light, each = divide_cores(cores, heavy)
    assert light >= 1 and all(n >= 1 for n in each) and len(each) == heavy
    assert sum(each) == max(cores - light, heavy)
    assert max(each) - min(each) <= 1 and sum(each) >= light  # the heavy maths gets the most
    if heavy < cores:
        assert light + sum(each) == cores  # no core left idle, none oversubscribed
    else:
        assert light == 1 and each == [1] * heavy  # more workers than cores: one thread each


def test_each_worker_is_told_its_share_and_its_thread_count_in_its_environment() -> None:
    cpu, retrain, gpu0 = plan(["0"], queue_prefix="q", concurrency=1, cores=8)
    assert cpu.env == {
        "CUDA_VISIBLE_DEVICES": "",
        "LETHE_DEVICE": "cpu",
        "LETHE_WORKER_CORES": "2",
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
    }
    assert retrain.env["LETHE_WORKER_CORES"] == "3" and gpu0.env["OMP_NUM_THREADS"] == "3"


def test_lethe_torch_threads_overrides_every_worker_s_thread_count_not_its_share() -> None:
    processes = plan([], queue_prefix="q", concurrency=1, cores=16, torch_threads=2)
    assert [(p.cores, p.threads) for p in processes] == [(4, 2), (6, 2), (6, 2)]
    assert {p.env["OMP_NUM_THREADS"] for p in processes} == {"2"}


def test_thread_variables_the_operator_set_are_left_alone() -> None:
    (cpu, *_) = plan([], queue_prefix="q", concurrency=1, cores=4, environ={"OMP_NUM_THREADS": "3"})
    assert "OMP_NUM_THREADS" not in cpu.env and cpu.env["MKL_NUM_THREADS"] == "1"


def test_without_cores_the_plan_divides_nothing() -> None:
    assert all(
        p.cores is None and "LETHE_WORKER_CORES" not in p.env
        for p in plan(["0"], queue_prefix="q", concurrency=1)
    )
