"""The core library from several threads of one process at once, as a worker runs jobs on threads.

torch keeps two things process-wide that a job touches: the forward-AD level (with bare
``torch.func.jvp`` the first test fails on every run on this machine: "Trying to create a dual Tensor
for forward AD but no level exists"; unlearning.forward_mode) and the default generator that modules'
initialisers draw from (without its lock nearly every initialisation of the last test differs from
its seed's; unlearning.models.flat).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from unlearning.forward_mode import jvp
from unlearning.models import ModelSpec, build_model
from unlearning.steps import AutogradStepMap, SGDConfig


def _in_threads(work: Callable[[], torch.Tensor], threads: int = 4) -> list[torch.Tensor | BaseException]:
    """Run ``work`` on ``threads`` threads released together; each one's result or error."""
    results: list[torch.Tensor | BaseException] = [RuntimeError("did not run")] * threads
    start = threading.Barrier(threads)

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = work()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            results[i] = exc

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return results


def test_many_threads_in_forward_mode_at_once_get_their_own_products() -> None:
    w = torch.linspace(-1.0, 1.0, 50, dtype=torch.float64)

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * x.sum()

    tangent = torch.ones_like(w)
    expected = jvp(f, (w,), (tangent,))[1]

    def work() -> torch.Tensor:
        out = torch.zeros_like(w)
        for _ in range(2000):
            out = jvp(f, (w,), (tangent,))[1]
            assert torch.equal(out, expected)
        return out

    for result in _in_threads(work):
        assert not isinstance(result, BaseException), result
        assert torch.equal(result, expected)


def test_stage_two_products_of_an_mlp_from_two_threads_equal_the_serial_ones() -> None:
    gen = torch.Generator().manual_seed(0)
    model = build_model(ModelSpec("mlp", (6,), 3, {"hidden": [8]})).to("cpu", torch.float64)
    w = torch.randn(model.dim, generator=gen, dtype=torch.float64)
    x = torch.randn(20, 6, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (20,), generator=gen)
    step = AutogradStepMap(model, w, x, y, SGDConfig(l2=0.01, clip_norm=10.0, clip_mode="batch"))
    vectors = torch.randn(16, model.dim, generator=gen, dtype=torch.float64)
    expected = step.jvp(vectors)

    def work() -> torch.Tensor:
        out = torch.zeros_like(expected)
        for _ in range(150):
            out = step.jvp(vectors)
        return out

    for result in _in_threads(work, threads=2):
        assert not isinstance(result, BaseException), result
        torch.testing.assert_close(result, expected, rtol=0, atol=0)


def test_initial_weights_drawn_on_two_threads_are_their_seeds_weights() -> None:
    model = build_model(ModelSpec("mlp", (20,), 4, {"hidden": [64, 32]}))
    expected = {seed: model.initial_weights(seed) for seed in (1, 2)}
    turn = iter([1, 2])
    lock = threading.Lock()

    def work() -> torch.Tensor:
        with lock:
            seed = next(turn)
        for _ in range(200):
            w = model.initial_weights(seed)
            assert torch.equal(w, expected[seed]), f"seed {seed} drew other weights"
        return w

    for result in _in_threads(work, threads=2):
        assert not isinstance(result, BaseException), result
