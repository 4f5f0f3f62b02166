"""How each cost grows with the rows: ``python -m bench.scale [--quick] [--no-service]``.

**Methods against n.** Every table method (``hessian_free``, ``newton_removal``, ``langevin``,
``mini_unlearning``, as the service runs them: the table wrapper with its scaling and quality probe, the
default hyperparameters, ``audited`` at epsilon 1, delta 1e-3) on two problems: the shared Covertype split
(54 features, 7 classes; a seeded subsample of n rows) and a generated 784-feature, 10-class problem
(MNIST-sized: seeded Gaussian rows, labels from a random linear map plus noise). One owner per row. For each
n of ``--sizes`` (1,000, 4,000, 16,000, 64,000; ``--quick`` 1,000, 2,000, 4,000) a fresh process with one
torch thread (so that peak memory is the point's own) fits the model, forgets one owner three times
(``delete_ms``: the median) and then 1% of the owners in one request (``delete_1pct_s``), and reports the
per-sample vectors it keeps for the hot store (``hot_bytes``, ``hot_bytes_per_sample``) and its peak RSS.
Methods that need the remaining data for a deletion (:func:`unlearning.methods.protocol.needs_remaining_data`:
a pass over the data) get it, as the service gives it. A point whose fit would, from the previous point's
time and growth (quadratic from one point), take longer than ``--point-budget`` seconds is skipped and says so, as is one
past its time limit: where a method stops being practical on this machine is part of the answer.

``exponent.<method>.<problem>.{fit,deletion,hot_bytes}``: the least-squares slope of log(cost) against
log(n) over the measured points (null with fewer than two, or a cost of 0). ``exponent.<method>.fit`` etc.
(the acceptance's keys) are the Covertype problem's. Targets: a single deletion's exponent <= 0.2 where the
method needs no pass over the data, <= 1.1 where it does (``needs_pass`` says which).

**The service at scale** (skipped with ``--no-service``): production mode (``python -m service`` and a
Celery worker on the machine's Postgres and Redis), the full Covertype split (92,962 rows; ``--quick`` 5,000)
uploaded as a CSV and a ``hessian_free`` model registered on it (``service.ready_s``: POST to ready), 20
warm-up deletions, then ``--requests`` single-owner deletions offered at 100 requests/s (open loop, as
``bench.service``): ``service.p50_ms`` and ``service.p99_ms`` from POST to completed; ``service.redis_mb``:
the ``MEMORY USAGE`` of every Redis key of the deployment. Target: p99 <= 100 ms.

The last line of stdout is one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from typing import Any

import numpy as np

from bench import stack
from bench.tabular import table_csv
from unlearning.data import Dataset, load_covertype

METHODS = ("hessian_free", "newton_removal", "langevin", "mini_unlearning")
PROBLEMS = ("covertype", "generated784")
SIZES, QUICK_SIZES = (1000, 4000, 16000, 64000), (1000, 2000, 4000)
DELETION_TARGET = {False: 0.2, True: 1.1}  # by whether the method needs a pass over the remaining data
SERVICE_P99_TARGET_MS = 100.0
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def log(message: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the problems --------------------------------------------------------------------------------------


def generated_rows(
    rows: int, features: int = 784, classes: int = 10, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded Gaussian rows and labels argmax(x W + noise): a linear problem of MNIST's size."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    w = rng.normal(size=(features, classes)).astype(np.float32) / math.sqrt(features)
    y = np.argmax(x @ w + 0.5 * rng.normal(size=(rows, classes)), axis=1).astype(np.int64)
    return x, y


def problem_dataset(problem: str, rows: int) -> Dataset:
    """``rows`` rows of ``problem``, one owner each: a seeded subsample of the shared Covertype split
    (:func:`unlearning.data.load_covertype`), or :func:`generated_rows`."""
    if problem == "covertype":
        return load_covertype(n=rows, seed=0)
    x, y = generated_rows(rows)
    ids = tuple(f"s{i}" for i in range(rows))
    return Dataset(ids, ids, x, y, int(y.max()) + 1, problem)


# -- one point, in its own process ------------------------------------------------------------------------


def measure_point(method_name: str, problem: str, rows: int) -> dict[str, Any]:
    """Fit ``method_name`` on ``rows`` rows of ``problem``, forget one owner three times and then 1% of
    the owners; the costs (see the module docstring). Runs with one torch thread."""
    import torch

    from unlearning.methods.protocol import ForgetRequest, PrivacyTarget, needs_remaining_data
    from unlearning.methods.registry import get_method

    torch.set_num_threads(1)
    data = problem_dataset(problem, rows)
    ids = data.sample_ids  # each its own owner
    method, privacy = get_method(method_name), PrivacyTarget(1.0, 1e-3, "audited")
    needs_pass = needs_remaining_data(method, {}, privacy)
    started = time.perf_counter()
    state, _ = method.fit(data, {}, privacy, seed=0)
    fit_s = time.perf_counter() - started
    snapshot = state.statistics.export() if state.statistics is not None else None
    hot_bytes = 0 if snapshot is None else snapshot.vectors.numel() * snapshot.vectors.element_size()
    kept = np.ones(rows, dtype=bool)

    def forget(owners: list[int]) -> float:
        nonlocal state
        # The data the model still holds, the request's own rows included (what the service passes).
        remaining = data.take(np.flatnonzero(kept)) if needs_pass else None
        kept[owners] = False
        request = ForgetRequest(owner_ids=tuple(ids[i] for i in owners))
        began = time.perf_counter()
        state = method.forget(
            state, request, noise_seed=len(owners), privacy=privacy, remaining=remaining
        ).state
        return time.perf_counter() - began

    singles = [forget([i]) for i in range(3)]
    percent = forget(list(range(3, 3 + max(1, rows // 100))))
    return {
        "fit_s": round(fit_s, 3),
        "delete_ms": round(statistics.median(singles) * 1000, 3),
        "delete_1pct_s": round(percent, 4),
        "hot_bytes": hot_bytes,
        "hot_bytes_per_sample": round(hot_bytes / rows, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "needs_pass": needs_pass,
    }


def run_point(method: str, problem: str, rows: int, timeout: float) -> dict[str, Any]:
    """:func:`measure_point` in a fresh process (one thread); ``{"skipped": why}`` past ``timeout``."""
    argv = [sys.executable, "-m", "bench.scale", "--point", f"{method}:{problem}:{rows}"]
    env = {**os.environ, **ONE_THREAD, "LETHE_TORCH_THREADS": "1"}
    try:
        done = subprocess.run(
            argv, check=False, cwd=stack.ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"skipped": f"over the point's time limit of {timeout:.0f} s"}
    if done.returncode != 0:
        return {
            "skipped": f"failed: {done.stderr.strip().splitlines()[-1][:300] if done.stderr.strip() else done.returncode}"
        }
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def exponent(points: list[tuple[int, float]]) -> float | None:
    """The least-squares slope of log(cost) on log(n); None with fewer than two positive costs."""
    usable = [(n, c) for n, c in points if c > 0]
    if len(usable) < 2:
        return None
    slope, _ = np.polyfit(np.log([n for n, _ in usable]), np.log([c for _, c in usable]), 1)
    return round(float(slope), 3)


def predicted_fit(measured: list[tuple[int, float]], rows: int) -> float | None:
    """The fit time at ``rows`` from the last measured points: the growth of the last two (at least
    linear), or quadratic from a single point; None before any."""
    if not measured:
        return None
    n1, t1 = measured[-1]
    growth = 2.0
    if len(measured) >= 2:
        n0, t0 = measured[-2]
        growth = max(1.0, math.log(t1 / t0) / math.log(n1 / n0)) if t0 > 0 and t1 > 0 else 2.0
    return t1 * (rows / n1) ** growth


def measure_method(method: str, problem: str, sizes: tuple[int, ...], budget_s: float) -> dict[str, Any]:
    """Every size in order, skipping those whose fit :func:`predicted_fit` puts over ``budget_s``."""
    out: dict[str, Any] = {}
    measured: list[tuple[int, float]] = []
    for rows in sizes:
        expected = predicted_fit(measured, rows)
        if expected is not None and expected > budget_s:
            point = {"skipped": f"a fit of about {expected:.0f} s predicted, over {budget_s:.0f} s"}
        else:
            point = run_point(method, problem, rows, timeout=3 * budget_s)
        out[str(rows)] = point
        log(f"{method} {problem} n={rows}: {point}")
        if "fit_s" in point:  # a point past its time limit says nothing of the next (langevin's burn-in
            measured.append((rows, float(point["fit_s"])))  # shortens as n grows)
    return out


def exponents(points: dict[str, Any]) -> dict[str, float | None]:
    measured = [(int(n), p) for n, p in points.items() if "fit_s" in p]
    return {
        "fit": exponent([(n, p["fit_s"]) for n, p in measured]),
        "deletion": exponent([(n, p["delete_ms"]) for n, p in measured]),
        "deletion_1pct": exponent([(n, p["delete_1pct_s"]) for n, p in measured]),
        "hot_bytes": exponent([(n, p["hot_bytes"]) for n, p in measured]),
    }


# -- the service at scale ---------------------------------------------------------------------------------


def redis_mb(url: str, prefix: str) -> float:
    """The summed ``MEMORY USAGE`` of the keys under ``prefix`` in the Redis database of ``url``."""
    import redis

    client = redis.Redis.from_url(url)
    total = sum(client.memory_usage(key) or 0 for key in client.scan_iter(match=f"{prefix}*", count=1000))
    return round(total / 2**20, 1)


def measure_service(rows: int | None, requests: int, rate: float) -> dict[str, Any]:
    from bench.service import Bench, latencies, offered_load, percentile, wait_newest

    data = load_covertype(n=rows, seed=0)
    csv = table_csv(data.features, data.labels, "c", per_owner=1)
    with ExitStack() as exit_stack:
        deployment = stack.enter_fresh_deployment(exit_stack, "scale")
        if deployment is None:
            return {"skipped": "Postgres or Redis unreachable"}
        env, var = deployment.env, deployment.var
        base, _ = exit_stack.enter_context(stack.api_process(env, var / "api.log"))
        exit_stack.enter_context(
            stack.celery_worker(env, var / "worker.log", concurrency=2, name=f"scale-{deployment.token}")
        )
        bench = Bench(base)
        r = bench.http.post(
            "/v1/datasets?name=covertype", files={"file": ("covertype.csv.gz", csv, "application/gzip")}
        )
        if r.status_code != 201 and r.status_code != 200:
            return {"skipped": f"upload answered {r.status_code}: {r.text[:300]}"}
        started = time.monotonic()
        body = {"name": "covertype", "dataset_id": r.json()["id"], "method": "hessian_free",
                "budget_policy": {"max_deletion_fraction": 0.05}}  # fmt: skip
        r = bench.http.post("/v1/models", json=body)
        if r.status_code != 202:
            return {"skipped": f"registration answered {r.status_code}: {r.text[:300]}"}
        model_id = int(r.json()["id"])
        bench.ready(model_id, timeout=6 * 3600)
        ready_s = time.monotonic() - started
        log(f"service: {len(data.labels)} rows ready in {ready_s:.0f} s")
        owners = [f"c-owner-{i}" for i in range(requests + 20)]
        warm = offered_load(base, model_id, owners[:20], 50.0)
        wait_newest(bench, [rid for _, _, rid in warm])
        sent = offered_load(base, model_id, owners[20:], rate)
        wait_newest(bench, [rid for _, _, rid in sent])
        completed, _ = latencies(bench, sent)
        return {
            "rows": len(data.labels),
            "ready_s": round(ready_s, 1),
            "rate_rps": rate,
            "requests": requests,
            "p50_ms": round(percentile(completed, 0.5), 2),
            "p99_ms": round(percentile(completed, 0.99), 2),
            "redis_mb": redis_mb(env["LETHE_REDIS_URL"], env["LETHE_REDIS_PREFIX"]),
        }


# -- the run ---------------------------------------------------------------------------------------------


def verdict(methods: dict[str, Any], service: dict[str, Any] | None) -> dict[str, Any]:
    """Per method: its Covertype exponents (the acceptance's keys), whether it needs a pass over the data,
    and whether its single deletion's exponent meets the target for that kind."""
    exp: dict[str, Any] = {}
    met = True
    for method, by_problem in methods.items():
        points = by_problem["covertype"]["points"]
        needs_pass = next((p["needs_pass"] for p in points.values() if "needs_pass" in p), None)
        e = {**by_problem["covertype"]["exponent"], "needs_pass": needs_pass}
        if e["deletion"] is not None and needs_pass is not None:
            e["deletion_target"] = DELETION_TARGET[needs_pass]
            e["deletion_met"] = e["deletion"] <= e["deletion_target"]
            met = met and e["deletion_met"]
        exp[method] = e
    if service is not None and "p99_ms" in service:
        met = met and service["p99_ms"] <= SERVICE_P99_TARGET_MS
    return {"exponent": exp, "targets_met": met}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="n up to 4,000 and a 5,000-row service run")
    parser.add_argument(
        "--methods", default=",".join(METHODS), help="comma-separated (default: every table method)"
    )
    parser.add_argument("--sizes", default=None, help="comma-separated row counts")
    parser.add_argument("--point-budget", type=float, default=None, help="seconds a point's fit may take")
    parser.add_argument("--no-service", action="store_true", help="skip the service run")
    parser.add_argument("--requests", type=int, default=None, help="deletions at 100 requests/s (500)")
    parser.add_argument("--point", default=None, help=argparse.SUPPRESS)  # METHOD:PROBLEM:ROWS, in a child
    args = parser.parse_args(argv)
    if args.point:
        method, problem, rows = args.point.split(":")
        print(json.dumps(measure_point(method, problem, int(rows))))
        return 0
    sizes = (
        tuple(int(s) for s in args.sizes.split(",")) if args.sizes else QUICK_SIZES if args.quick else SIZES
    )
    budget = args.point_budget or (60.0 if args.quick else 900.0)
    began = time.monotonic()
    methods: dict[str, Any] = {}
    for method in filter(None, args.methods.split(",")):
        methods[method] = {}
        for problem in PROBLEMS:
            points = measure_method(method, problem, sizes, budget)
            methods[method][problem] = {"points": points, "exponent": exponents(points)}
    service = None
    if not args.no_service:
        service = measure_service(
            5000 if args.quick else None, args.requests or (200 if args.quick else 500), 100.0
        )
        log(f"service: {service}")
    result = {
        "methods": methods,
        **verdict(methods, service),
        "service": service,
        "sizes": sizes,
        "threads": 1,
        "quick": args.quick,
        "seconds": round(time.monotonic() - began, 1),
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
