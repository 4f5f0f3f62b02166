"""The core library from several threads of one process at once, as a worker runs jobs on threads.

torch keeps two things process-wide that a job touches: the forward-AD level (with bare
``torch.func.jvp`` the first test fails on every run on this machine: "Trying to create a dual Tensor
for forward AD but no level exists"; unlearning.forward_mode) and the default generator that modules'
initialisers draw from (without its lock nearly every initialisation of the third test differs from
its seed's; unlearning.models.flat). A model's template module is shared too: ``functional_call`` puts
the weights of the call into it, and the API's request threads share one model per architecture.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from service.models.service import _flat_predictions
from service.storage.hot import ServingWeights
from unlearning.forward_mode import jvp
from unlearning.models import ModelSpec, build_model
from unlearning.steps import AutogradStepMap, SGDConfig


def _in_threads(work: Callable[[int], None], threads: int = 2) -> None:
    """``work(i)`` on threads i = 0 .. threads-1, released together; the first error raised again here."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def run(i: int) -> None:
        start.wait()
        try:
            work(i)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the test's thread
            errors.append(exc)

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    if errors:
        raise errors[0]


def test_many_threads_in_forward_mode_at_once_get_their_own_products() -> None:
    w = torch.linspace(-1.0, 1.0, 50, dtype=torch.float64)

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * x.sum()

    tangent = torch.ones_like(w)
    expected = jvp(f, (w,), (tangent,))[1]

    def work(_: int) -> None:
        for _ in range(2000):
            assert torch.equal(jvp(f, (w,), (tangent,))[1], expected)

    _in_threads(work, threads=4)


def test_stage_two_products_of_an_mlp_from_two_threads_equal_the_serial_ones() -> None:
    gen = torch.Generator().manual_seed(0)
    model = build_model(ModelSpec("mlp", (6,), 3, {"hidden": [8]})).to("cpu", torch.float64)
    w = torch.randn(model.dim, generator=gen, dtype=torch.float64)
    x = torch.randn(20, 6, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (20,), generator=gen)
    step = AutogradStepMap(model, w, x, y, SGDConfig(l2=0.01, clip_norm=10.0, clip_mode="batch"))
    vectors = torch.randn(16, model.dim, generator=gen, dtype=torch.float64)
    expected = step.jvp(vectors)

    def work(_: int) -> None:
        for _ in range(150):
            assert torch.equal(step.jvp(vectors), expected)

    _in_threads(work)


def test_initial_weights_drawn_on_two_threads_are_their_seeds_weights() -> None:
    model = build_model(ModelSpec("mlp", (20,), 4, {"hidden": [64, 32]}))
    expected = [model.initial_weights(seed) for seed in (0, 1)]

    def work(seed: int) -> None:
        for _ in range(200):
            assert torch.equal(model.initial_weights(seed), expected[seed]), f"seed {seed} drew other weights"

    _in_threads(work)


def test_one_model_evaluated_on_two_threads_with_different_weights_gives_each_its_own_logits() -> None:
    model = build_model(ModelSpec("mlp", (20,), 4, {"hidden": [64, 32]}))
    weights = [model.initial_weights(seed) for seed in (1, 2)]
    x = torch.randn(16, 20, generator=torch.Generator().manual_seed(3))
    expected = [model.logits(w, x) for w in weights]

    def work(i: int) -> None:
        for _ in range(1000):
            assert torch.equal(model.logits(weights[i], x), expected[i]), f"weights {i}: another's logits"

    _in_threads(work)


def test_predictions_of_two_models_of_one_architecture_on_two_threads_are_each_models_own() -> None:
    """The API evaluates every model of an architecture with one shared template (a cache keyed by the
    spec) on its request threads: a prediction must never be computed with another model's weights,
    which may still carry a subject the asking model has forgotten."""
    spec = ModelSpec("mlp", (20,), 4, {"hidden": [64, 32]})
    template = build_model(spec)
    served = [
        ServingWeights(seq=1, version_id=i + 1, spec=spec.to_dict(), weights=template.initial_weights(seed))
        for i, seed in enumerate((1, 2))
    ]
    rows = torch.randn(8, 20, generator=torch.Generator().manual_seed(3)).tolist()
    expected = [_flat_predictions(s, spec, s.version_id, rows) for s in served]
    assert expected[0] != expected[1]

    def work(i: int) -> None:
        for _ in range(300):
            assert _flat_predictions(served[i], spec, i + 1, rows) == expected[i], f"model {i + 1}: another's"

    _in_threads(work)
