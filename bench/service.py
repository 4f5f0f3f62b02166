"""End-to-end benchmark of the service on the real Postgres, Redis and a Celery worker.

``python -m bench.service [--quick]`` starts the API (``python -m service``, production mode) and a
Celery worker as subprocesses on a fresh Postgres database and an empty Redis database, registers the
R1 model of the core issue (MNIST subset n = 1,000, multinomial logistic regression, 15 epochs, lr 0.05,
batch 32, L2 0.5, decay 0.995, clip 5; digest 002 section 8) and measures, over HTTP:

- ``p50_ms``/``p95_ms``/``p99_ms``: POST to completed, each request forgetting one owner, offered by an
  open-loop generator at ``rate_rps`` (requests are sent on schedule whatever the answers' latency);
  completed is the server's ``completed_at`` minus the client's send time (one machine, one clock);
- ``post_p50_ms``/``post_p99_ms``: POST to its 202 answer, for the same requests (the part of the latency
  the API owns; the rest is the update and its completion);
- ``completed_per_s``: a burst of deletions submitted at once (bulk submissions), divided by the time
  from the first send to the last completion (``burst_seconds``); the worker coalesces them into few
  versions;
- ``retrain_per_request_p50_ms``: the same kind of request answered by retraining, on a twin model
  whose budget policy admits no update (every request waits for a retrain), one request at a time;
- ``cpu_ms_per_request``: CPU milliseconds per request of the API, the worker, Postgres, Redis and the
  load generator, over the offered load and over the burst (from the first send until the newest request
  has completed; Linux /proc, empty elsewhere). It says where the two cores go;
- ``versions_offered_load`` and ``cpu_ms_per_version_offered_load``: how many versions (update rounds)
  the offered load made, and the CPU of each process group per version: a round's cost, which barely
  depends on how many requests it takes;
- ``first_request_ms``: POST to completed of the first deletion the fresh API and worker see. It opens a
  warm-up of ``warmup`` deletions at 50/s, excluded from every other figure: a new process pays one-time
  costs on its first requests (SQLAlchemy compiles each statement once per process, the caches load the
  model's state), and the figures above are of the service in steady state.

``--sweep 10,20,50,100`` then measures the offered load again at each of those rates (``--sweep-requests``
deletions each, 100 by default), after everything above, so that those figures are unchanged: ``sweep``
lists, per rate, the latency percentiles, the stages, the versions made and the CPU per request. It is
the service's latency against the load offered to it, from one model in one sitting: where the rounds
start running back to back and coalescing, and what a request costs below that (bench/README.md).

The last line of stdout is one JSON object with those keys and the settings that produced them.
``--quick`` trains R1 for 1 epoch instead of 15 and sends fewer requests; it finishes in under 60 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from bench import stack
from bench.loadgen import KeepAliveClient

R1_BUDGET = 950  # deletions R1's policy admits: warm-up, offered load, burst and --sweep all stay within it
WARMUP_RATE = 50.0
R1 = {
    "epochs": 15,
    "batch_size": 32,
    "lr": 0.05,
    "lr_decay": 0.995,
    "l2": 0.5,
    "clip_norm": 5.0,
    "clip_mode": "batch",
}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def owner_ids(n: int, seed: int) -> list[str]:
    """The owners of the bundled ``mnist`` dataset with ``n`` rows and ``seed`` (the same seeded draw)."""
    from unlearning.data import load_mnist_idx, subsample

    return list(dict.fromkeys(subsample(load_mnist_idx(), n, seed).owner_ids))


class Bench:
    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=60, limits=httpx.Limits(max_connections=64))
        self.history: dict[int, dict[str, float]] = {}  # request id -> state -> server time
        self.version_seq: dict[int, int] = {}  # request id -> sequence number of the version excluding it

    def register(
        self, dataset_id: int, hyperparameters: dict[str, Any], policy: dict[str, Any], name: str
    ) -> int:
        r = self.http.post(
            "/v1/models",
            json={
                "name": name,
                "dataset_id": dataset_id,
                "family": "logistic_regression",
                "hyperparameters": hyperparameters,
                "budget_policy": policy,
            },
        )
        r.raise_for_status()
        return int(r.json()["id"])

    def ready(self, model_id: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            status = self.http.get(f"/v1/models/{model_id}").json()["status"]
            if status["state"] == "ready":
                return
            if status["state"] == "failed" or time.monotonic() > deadline:
                raise RuntimeError(f"model {model_id} did not train: {status}")
            time.sleep(0.2)

    def delete(self, model_id: int, owner: str) -> tuple[float, int]:
        sent = time.time()
        r = self.http.post(
            f"/v1/models/{model_id}/deletions",
            json={"owner_ids": [owner]},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        r.raise_for_status()
        return sent, int(r.json()["id"])

    def bulk(self, model_id: int, owners: list[str]) -> list[int]:
        r = self.http.post(
            f"/v1/models/{model_id}/deletions/bulk",
            json={"items": [{"owner_ids": [o]} for o in owners]},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        r.raise_for_status()
        return [int(item["id"]) for item in r.json()["results"]]

    def completed_at(self, request_id: int, timeout: float, poll: float = 0.02) -> float:
        """The server's ``completed_at`` of the request (polled every ``poll`` seconds: the figure is the
        server's own timestamp, so the poll interval only decides how much load the client adds).
        The request's state history is kept in ``self.history``."""
        deadline = time.monotonic() + timeout
        while True:
            d = self.http.get(f"/v1/deletions/{request_id}").json()
            if d["state"] == "completed":
                self.history[request_id] = {
                    e["state"]: datetime.fromisoformat(e["at"]).timestamp() for e in d["history"]
                }
                if d.get("version"):
                    self.version_seq[request_id] = int(d["version"]["seq"])
                return datetime.fromisoformat(d["completed_at"]).timestamp()
            if d["state"] in ("failed", "canceled") or time.monotonic() > deadline:
                raise RuntimeError(
                    f"request {request_id} did not complete: {d['state']} {d.get('failure_reason')}"
                )
            time.sleep(poll)


def offered_load(
    base_url: str, model_id: int, owners: list[str], rate: float
) -> list[tuple[float, float, int]]:
    """Open loop: request i is sent at t0 + i/rate whatever the earlier answers' latency (asyncio, one
    thread, and the lean :class:`bench.loadgen.KeepAliveClient`: the generator itself must not eat the
    CPU the service needs). Returns, per request, the send time, the seconds to its 202 answer and the
    request id."""

    async def run() -> list[tuple[float, float, int]]:
        client = KeepAliveClient(base_url, connections=64)

        async def one(i: int, owner: str) -> tuple[float, float, int]:
            await asyncio.sleep(max(t0 + i / rate - loop.time(), 0))
            sent = time.time()
            answer = await client.post_json(
                f"/v1/models/{model_id}/deletions",
                {"owner_ids": [owner]},
                {"Idempotency-Key": str(uuid.uuid4())},
            )
            return sent, time.time() - sent, int(answer.json()["id"])

        loop = asyncio.get_running_loop()
        t0 = loop.time() + 0.2
        try:
            return await asyncio.gather(*(one(i, o) for i, o in enumerate(owners)))
        finally:
            await client.aclose()

    return asyncio.run(run())


def stage_medians(bench: Bench, sent: list[tuple[float, float, int]]) -> dict[str, float]:
    """Where the time goes: the median ms from sending each request to each state of its history
    (server timestamps: ``queued`` is the intake's commit, ``applying`` the update's claim,
    ``applied`` its version's commit, ``completed`` the completion's)."""
    out: dict[str, float] = {}
    for state in ("queued", "applying", "applied", "completed"):
        spans = [
            (bench.history[rid][state] - t) * 1000.0
            for t, _, rid in sent
            if state in bench.history.get(rid, {})
        ]
        if spans:
            out[state] = round(statistics.median(spans), 2)
    return out


def latencies(bench: Bench, sent: list[tuple[float, float, int]]) -> tuple[list[float], list[float]]:
    """POST-to-completed and POST-to-202 latencies in ms of the requests :func:`offered_load` sent."""
    completed = [(bench.completed_at(rid, 120) - t) * 1000.0 for t, _, rid in sent]
    return completed, [answered * 1000.0 for _, answered, _ in sent]


@dataclass
class Load:
    """What one open-loop load measured (:func:`measure_load`)."""

    completed: list[float]  # POST to completed, ms
    answered: list[float]  # POST to its 202, ms
    stages: dict[str, float]
    versions: int  # versions (update rounds) that answered the load
    cpu: dict[str, float]  # CPU ms per request of each process group

    def point(self, rate: float) -> dict[str, Any]:
        """One entry of the ``sweep`` list."""
        return {
            "rate_rps": rate,
            "requests": len(self.completed),
            "p50_ms": round(percentile(self.completed, 0.50), 2),
            "p95_ms": round(percentile(self.completed, 0.95), 2),
            "p99_ms": round(percentile(self.completed, 0.99), 2),
            "post_p50_ms": round(percentile(self.answered, 0.50), 2),
            "stage_p50_ms": self.stages,
            "versions": self.versions,
            "cpu_ms_per_request": self.cpu,
        }


def measure_load(
    bench: Bench, base_url: str, model_id: int, owners: list[str], rate: float, processes: dict[str, int]
) -> Load:
    """Forget ``owners`` one per request at ``rate`` requests/s (:func:`offered_load`), wait until the
    last has completed, and read back what it took."""
    cpu = stack.cpu_seconds(processes)
    sent = offered_load(base_url, model_id, owners, rate)
    wait_newest(bench, [rid for _, _, rid in sent])
    cpu_load = cpu_per_request(cpu, stack.cpu_seconds(processes), len(owners))
    completed, answered = latencies(bench, sent)
    versions = len({bench.version_seq[rid] for _, _, rid in sent if rid in bench.version_seq})
    return Load(completed, answered, stage_medians(bench, sent), versions, cpu_load)


def sweep_loads(
    bench: Bench,
    base_url: str,
    model_id: int,
    owners: list[str],
    rates: list[float],
    requests: int,
    processes: dict[str, int],
) -> list[dict[str, Any]]:
    """``--sweep``: :func:`measure_load` at each rate in turn, ``requests`` of ``owners`` each."""
    points = []
    for i, rate in enumerate(rates):
        chunk = owners[i * requests : (i + 1) * requests]
        point = measure_load(bench, base_url, model_id, chunk, rate, processes).point(rate)
        points.append(point)
        log(
            f"sweep {rate:g}/s: p50 {point['p50_ms']} ms, p99 {point['p99_ms']} ms, "
            f"{point['versions']} versions for {len(chunk)} requests"
        )
    return points


def parse_rates(text: str) -> list[float]:
    """``--sweep``'s value: comma-separated rates in requests/s, each above zero."""
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected rates in requests/s such as 10,20,50") from None
    if not rates or any(r <= 0 for r in rates):
        raise argparse.ArgumentTypeError(f"{text!r}: expected one or more rates above 0, such as 10,20,50")
    return rates


def wait_newest(bench: Bench, ids: list[int]) -> None:
    """Until the newest request has completed, polled slowly. The worker drains oldest first, so by then
    every other one has too; polling each request every 20 ms would put the client's reads on the two
    cores being measured."""
    bench.completed_at(max(ids), 120, poll=0.1)


def cpu_per_request(before: dict[str, float], after: dict[str, float], requests: int) -> dict[str, float]:
    """CPU milliseconds per request of each process group over a phase (empty off Linux)."""
    return {k: round((after[k] - before[k]) * 1000.0 / requests, 2) for k in sorted(after)}


def cpu_per_version(per_request: dict[str, float], requests: int, versions: int) -> dict[str, float]:
    """CPU milliseconds per version (update round and completion) of each process group over a phase:
    what a round costs, however many requests it took."""
    return {k: round(v * requests / max(versions, 1), 2) for k, v in per_request.items()}


def burst(bench: Bench, model_id: int, owners: list[str], chunk: int = 100) -> tuple[float, list[int]]:
    """Everything at once in bulk submissions of ``chunk``, until the last has completed; returns the
    start time and the request ids."""
    start = time.time()
    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = [
            i
            for part in pool.map(
                lambda c: bench.bulk(model_id, c),
                [owners[k : k + chunk] for k in range(0, len(owners), chunk)],
            )
            for i in part
        ]
    wait_newest(bench, ids)
    return start, ids


def burst_seconds(bench: Bench, start: float, ids: list[int]) -> float:
    """A :func:`burst`'s span: from its start to the last server ``completed_at`` of its deletions."""
    last = max(bench.completed_at(rid, 120, poll=0.1) for rid in ids)
    return max(last - start, 1e-6)


def retrain_latencies(bench: Bench, model_id: int, owners: list[str], timeout: float) -> list[float]:
    out = []
    for owner in owners:
        sent, rid = bench.delete(model_id, owner)
        out.append((bench.completed_at(rid, timeout) - sent) * 1000.0)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="R1 trained for 1 epoch, fewer requests (< 60 s)"
    )
    parser.add_argument("--rate", type=float, default=100.0, help="offered load in requests/s (default 100)")
    parser.add_argument("--requests", type=int, default=None, help="requests at the offered load")
    parser.add_argument("--burst", type=int, default=None, help="deletions in the burst")
    parser.add_argument("--retrains", type=int, default=None, help="requests answered by retraining")
    parser.add_argument(
        "--warmup", type=int, default=20, help="deletions before the measured load, excluded (default 20)"
    )
    parser.add_argument(
        "--sweep",
        type=parse_rates,
        default=[],
        metavar="RATES",
        help="then measure the offered load again at each of these rates, such as 10,20,50,100",
    )
    parser.add_argument(
        "--sweep-requests", type=int, default=100, help="requests at each rate of --sweep (default 100)"
    )
    args = parser.parse_args(argv)
    epochs = 1 if args.quick else R1["epochs"]
    n_requests = args.requests or (150 if args.quick else 500)
    n_burst = args.burst or (300 if args.quick else 400)
    n_retrains = args.retrains or (2 if args.quick else 3)
    started = time.monotonic()
    owners = owner_ids(1000, 0)
    if args.warmup < 1:
        parser.error("--warmup must be at least 1 (its first request gives first_request_ms)")
    n_sweep = len(args.sweep) * args.sweep_requests
    if args.sweep and args.sweep_requests < 1:
        parser.error("--sweep-requests must be at least 1")
    if args.warmup + n_requests + n_burst + n_sweep > R1_BUDGET:
        parser.error(
            f"--warmup + --requests + --burst (+ the rates of --sweep times --sweep-requests) must stay "
            f"within the {R1_BUDGET} deletions R1's policy allows"
        )

    with ExitStack() as exit_stack:
        deployment = stack.enter_fresh_deployment(exit_stack, "bench")
        if deployment is None:
            return 2
        env, var, token = deployment.env, deployment.var, deployment.token
        base, api = exit_stack.enter_context(stack.api_process(env, var / "api.log"))
        worker = exit_stack.enter_context(
            stack.celery_worker(env, var / "worker.log", concurrency=2, name=f"bench-{token}")
        )
        processes = {"api": api.pid, "worker": worker.pid}
        log(f"stack up in {time.monotonic() - started:.1f}s at {base}")
        bench = Bench(base)
        dataset = bench.http.post("/v1/datasets/bundled", json={"name": "mnist", "n": 1000, "seed": 0}).json()
        hyper = {**R1, "epochs": epochs}
        # R1 serves the updates; its policy leaves room for every deletion of the run (no retrain midway).
        r1 = bench.register(dataset["id"], hyper, {"max_deletion_fraction": R1_BUDGET / 1000}, "R1")
        bench.ready(r1, timeout=1800)
        log(f"R1 trained ({epochs} epochs) at {time.monotonic() - started:.1f}s")
        # The twin admits no update (its cap is floor(1e-6 * 1000) = 0 deletions): every request is retrained.
        twin = bench.register(dataset["id"], hyper, {"max_deletion_fraction": 1e-6}, "R1-retrain-only")
        bench.ready(twin, timeout=1800)

        # Warm-up, excluded from the figures: a fresh API and worker pay one-time costs on their first
        # requests (SQLAlchemy compiles each statement once per process; the caches load the model's state).
        warm = owners[n_requests + n_burst : n_requests + n_burst + args.warmup]
        warm_sent = offered_load(base, r1, warm, WARMUP_RATE)
        wait_newest(bench, [rid for _, _, rid in warm_sent])
        first_request_ms = latencies(bench, warm_sent[:1])[0][0]
        log(f"warm-up done at {time.monotonic() - started:.1f}s (first request {first_request_ms:.0f} ms)")

        load = measure_load(bench, base, r1, owners[:n_requests], args.rate, processes)
        log(f"offered load done at {time.monotonic() - started:.1f}s")
        cpu = stack.cpu_seconds(processes)
        burst_start, burst_ids = burst(bench, r1, owners[n_requests : n_requests + n_burst])
        cpu_burst = cpu_per_request(cpu, stack.cpu_seconds(processes), n_burst)
        burst_span = burst_seconds(bench, burst_start, burst_ids)
        log(f"burst done at {time.monotonic() - started:.1f}s")
        retrains = retrain_latencies(bench, twin, owners[-n_retrains:], timeout=1800)
        fresh = owners[n_requests + n_burst + args.warmup :]  # R1's owners not forgotten yet
        sweep = sweep_loads(bench, base, r1, fresh, args.sweep, args.sweep_requests, processes)
        versions = bench.http.get(f"/v1/models/{r1}/versions").json()["versions"]
        assert bench.http.get("/v1/audit/verify").json()["ok"], "audit chain broken"

    summary = load.point(args.rate)
    result = {
        **{k: summary[k] for k in ("p50_ms", "p95_ms", "p99_ms", "rate_rps", "post_p50_ms")},
        "post_p99_ms": round(percentile(load.answered, 0.99), 2),
        "stage_p50_ms": load.stages,
        "completed_per_s": round(n_burst / burst_span, 1),
        "burst_seconds": round(burst_span, 4),
        "retrain_per_request_p50_ms": round(statistics.median(retrains), 1),
        "cpu_ms_per_request": {"offered_load": load.cpu, "burst": cpu_burst},
        "versions_offered_load": load.versions,
        "cpu_ms_per_version_offered_load": cpu_per_version(load.cpu, n_requests, load.versions),
        "first_request_ms": round(first_request_ms, 2),
        "warmup": args.warmup,
        "requests": n_requests,
        "burst": n_burst,
        "retrains": n_retrains,
        "versions": len(versions),
        "epochs": epochs,
        "quick": args.quick,
        "sweep": sweep,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
