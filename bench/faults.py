"""Accepted deletions under repeated faults: ``python -m bench.faults [--quick]``.

Production mode on a Postgres and a Redis of the run's own (:mod:`bench.fault_servers`: started on ports
it chooses and stopped at the end, so breaking them harms nothing else), the artifact directory on a
small tmpfs, the API (``python -m service``) and the workers (``python -m workers``: updates and
callbacks, retrains, trainings, each its own process, one torch/OMP/BLAS thread each). Two models, a
``hessian_free`` and a ``newton_removal`` on tables of their own, take a steady load of single and bulk
deletions with Idempotency-Keys and client retries (:mod:`bench.fault_load`), while the run:

1. warms up (one retrain of each model), then soaks for ``soak_s`` seconds with a retrain every
   ``retrain_every_s`` and nothing broken: the workers' RSS growth over the soak is
   ``worker_rss_growth_mb``;
2. injects, in turn, with ``gap_s`` seconds of load between them: SIGKILL of the updates worker during
   rounds; SIGKILL of the training worker during a first training; SIGKILL of the retrain worker during a
   retrain; SIGKILL of the API with requests in flight (claimed, not answered), started again on its
   port; ``pg_ctl restart -m immediate`` during a retrain; every Postgres backend terminated during a
   retrain; Redis FLUSHALL; Redis killed and started again empty; the artifact disk full for
   ``disk_full_s`` seconds (skipped, and said so, where tmpfs cannot be mounted);
3. stops the load, waits until every accepted request is final (or its ``expected_by`` + 60 s has passed),
   sends a sample of the keys again, and checks the database.

The last line of stdout is one JSON object: ``accepted``, ``completed``, ``failed`` (failed or canceled),
``lost`` (accepted and unknown or not final at the end, or never accepted despite retries),
``double_applied`` (:func:`bench.fault_checks.double_applied`), ``over_budget`` (ledger entries past
their cap), ``audit_ok`` (``GET /v1/audit/verify``), ``missed_deadline``, ``max_completion_s``,
``worker_rss_growth_mb``, ``samples_inconsistent``, ``faults`` (what each injection found), and
``targets_met`` with ``targets``. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import fault_checks, stack
from bench.fault_load import Load
from bench.fault_servers import Api, OwnPostgres, OwnRedis, Workers, artifact_disk, fill, rss_mb
from bench.hostile_inputs import owner_id, victim_csv

THREADS = {
    "LETHE_TORCH_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}
LANES = 3  # python -m workers on a CPU host: updates + io, retrain, train
MAX_RSS_GROWTH_MB = 50.0


@dataclass(frozen=True)
class Plan:
    """Sizes and durations of a run (``--quick`` or the full one)."""

    owners: int  # per model's table (two rows each)
    rate: float  # submissions per second
    warm_s: float
    soak_s: float
    retrain_every_s: float
    gap_s: float
    disk_full_s: float = 30.0
    training_epochs: int = 20  # the model whose first training is killed (on at most 1,500 owners)
    settings: tuple[tuple[str, str], ...] = ()  # LETHE_ settings over production's defaults


QUICK = Plan(owners=1500, rate=4.0, warm_s=10, soak_s=40, retrain_every_s=15, gap_s=6)
FULL = Plan(owners=5000, rate=6.0, warm_s=20, soak_s=300, retrain_every_s=40, gap_s=25)
# The integration test's run: small, and recovery's timeouts shortened so that it takes about two minutes.
SMOKE = Plan(
    owners=400,
    rate=3.0,
    warm_s=2,
    soak_s=6,
    retrain_every_s=3,
    gap_s=2,
    disk_full_s=6,
    training_epochs=10,
    settings=(("LETHE_STALE_JOB_SECONDS", "8"), ("LETHE_JOB_HEARTBEAT_TIMEOUT_SECONDS", "6")),
)
MODELS = {
    "hessian_free": {"epochs": 2, "batch_size": 256},
    "newton_removal": {},
}


def log(message: str) -> None:
    print(f"[faults {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Run:
    """The deployment under test and the faults it takes."""

    def __init__(self, api: Api, workers: Workers, pg: OwnPostgres, rd: OwnRedis, disk: Path | None) -> None:
        self.api, self.workers, self.pg, self.redis, self.disk = api, workers, pg, rd, disk
        self.http = httpx.Client(base_url=api.base, timeout=60)
        self.models: dict[str, int] = {}
        self.api_errors: list[str] = []
        self.rng = random.Random(20261128)  # the fault instants; recorded in the output

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One API call, retried while the API is away (the API kill)."""
        for _ in range(60):
            try:
                return self.http.request(method, path, **kwargs)
            except httpx.TransportError:
                time.sleep(1)
        raise RuntimeError(f"{method} {path}: the API did not answer for 60 s")

    def table_model(self, name: str, method: str, hyper: dict[str, Any], owners: int, seed: int) -> int:
        """Upload a table of ``owners`` owners and register ``method`` on it; the model id."""
        csv = victim_csv(owners, 2, seed=seed)
        r = self.call("POST", f"/v1/datasets?name={name}", files={"file": ("t.csv", csv, "text/csv")})
        r.raise_for_status()
        body = {"name": name, "dataset_id": r.json()["id"], "method": method, "hyperparameters": hyper}
        r = self.call("POST", "/v1/models", json=body)
        r.raise_for_status()
        return int(r.json()["id"])

    def state(self, model_id: int) -> str:
        """The model's state (an answer other than 200, such as a 503 while Postgres restarts, is asked
        again)."""
        for _ in range(60):
            r = self.call("GET", f"/v1/models/{model_id}")
            if r.status_code == 200:
                return str(r.json()["status"]["state"])
            self.api_errors.append(f"GET /v1/models/{model_id}: {r.status_code}")
            time.sleep(0.5)
        raise RuntimeError(f"GET /v1/models/{model_id} did not answer 200 for 30 s")

    def until_state(
        self, model_id: int, states: tuple[str, ...], timeout: float, poll: float = 0.05
    ) -> float:
        """Seconds until the model's state is one of ``states`` (RuntimeError after ``timeout``)."""
        start = time.monotonic()
        while (state := self.state(model_id)) not in states:
            if time.monotonic() - start > timeout:
                raise RuntimeError(f"model {model_id} still {state} after {timeout:.0f} s, not {states}")
            time.sleep(poll)
        return round(time.monotonic() - start, 2)

    def retrain(self, model_id: int) -> None:
        self.call(
            "POST", f"/v1/models/{model_id}/retrain", json={"reason": "bench.faults"}
        ).raise_for_status()

    # -- the faults ------------------------------------------------------------------------------

    def kill_lane(self, suffix: str) -> dict[str, Any]:
        """SIGKILL the worker serving the ``suffix`` lane; seconds until the launcher's new one is ready."""
        pid = self.workers.lane(suffix)
        if pid is None:
            raise RuntimeError(f"no worker serves a queue ending in {suffix}")
        ready = self.workers.ready_count()
        os.kill(pid, signal.SIGKILL)
        start = time.monotonic()
        while self.workers.ready_count() <= ready and time.monotonic() - start < 120:
            time.sleep(0.1)
        return {"killed_pid": pid, "worker_back_s": round(time.monotonic() - start, 1)}

    def worker_kill_updates(self) -> dict[str, Any]:
        time.sleep(self.rng.uniform(0, 2))
        return self.kill_lane(".updates")

    def worker_kill_training(self, epochs: int, owners: int) -> dict[str, Any]:
        model = self.table_model("fault-training", "hessian_free", {"epochs": epochs}, owners, seed=7)
        self.until_state(model, ("training",), 120)
        time.sleep(self.rng.uniform(0, 0.3))
        was = self.state(model)
        found = self.kill_lane(".train")
        return {**found, "state_at_kill": was, "model_ready_s": self.until_state(model, ("ready",), 600, 0.5)}

    def _during_retrain(self, model: str, fault: Callable[[], Any], lane: bool = False) -> dict[str, Any]:
        model_id = self.models[model]
        self.until_state(model_id, ("ready",), 300, 0.2)
        self.retrain(model_id)
        self.until_state(model_id, ("retraining",), 120, 0.02)
        was = self.state(model_id)
        detail = fault()
        return {
            "model": model,
            "state_at_fault": was,
            **(detail if isinstance(detail, dict) else {"detail": detail}),
            "model_ready_s": self.until_state(model_id, ("ready",), 300, 0.5),
        }

    def worker_kill_retrain(self) -> dict[str, Any]:
        return self._during_retrain("newton_removal", lambda: self.kill_lane(".retrain"))

    def api_kill(self, load: Load) -> dict[str, Any]:
        load.burst(12)
        time.sleep(self.rng.uniform(0.005, 0.03))
        self.api.kill()
        start = time.monotonic()
        self.api.start()
        return {"api_back_s": round(time.monotonic() - start, 1)}

    def postgres_restart(self) -> dict[str, Any]:
        return self._during_retrain("hessian_free", self.pg.restart_immediately)

    def backends_terminated(self) -> dict[str, Any]:
        return self._during_retrain("newton_removal", lambda: {"terminated": self.pg.terminate_backends()})

    def redis_flushall(self) -> dict[str, Any]:
        self.redis.flushall()
        return {}

    def redis_restart(self) -> dict[str, Any]:
        self.redis.restart(down_s=3.0)
        return {"down_s": 3.0}

    def disk_full(self, seconds: float) -> dict[str, Any]:
        if self.disk is None:
            return {"skipped": "the artifact disk is not a tmpfs here (mount -t tmpfs needs root)"}
        filler = fill(self.disk)
        time.sleep(seconds)
        filler.unlink()
        return {"full_s": seconds}


def worker_rss(workers: Workers) -> dict[int, float]:
    return {pid: mb for pid in workers.pids() if (mb := rss_mb(pid)) is not None}


def soak(run: Run, plan: Plan) -> dict[str, Any]:
    """``plan.soak_s`` seconds of load with a retrain every ``retrain_every_s``, nothing broken; the
    workers' RSS at its start and end and the growth of those alive throughout."""
    before = worker_rss(run.workers)
    end, turn = time.monotonic() + plan.soak_s, 0
    while time.monotonic() < end:
        time.sleep(min(plan.retrain_every_s, max(end - time.monotonic(), 0)))
        model = run.models[sorted(run.models)[turn % len(run.models)]]
        if time.monotonic() < end and run.state(model) == "ready":
            run.retrain(model)
        turn += 1
    after = worker_rss(run.workers)
    growth = sum(after[p] - before[p] for p in before if p in after)
    return {
        "worker_rss_mb_start": round(sum(before.values()), 1),
        "worker_rss_mb_end": round(sum(after.values()), 1),
        "worker_rss_growth_mb": round(growth, 1),
        "retrains": turn,
    }


def inject_all(run: Run, load: Load, plan: Plan) -> dict[str, Any]:
    faults: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("worker_kill_updates", run.worker_kill_updates),
        (
            "worker_kill_training",
            lambda: run.worker_kill_training(plan.training_epochs, min(plan.owners, 1500)),
        ),
        ("worker_kill_retrain", run.worker_kill_retrain),
        ("api_kill_in_flight", lambda: run.api_kill(load)),
        ("postgres_restart_in_retrain", run.postgres_restart),
        ("backends_terminated_in_retrain", run.backends_terminated),
        ("redis_flushall", run.redis_flushall),
        ("redis_restart", run.redis_restart),
        ("disk_full", lambda: run.disk_full(plan.disk_full_s)),
    ]
    found: dict[str, Any] = {}
    for name, inject in faults:
        log(f"fault: {name}")
        start = time.monotonic()
        try:
            found[name] = inject()
        except Exception as exc:  # noqa: BLE001 -- a fault that could not be injected is reported, not fatal
            found[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        found[name]["seconds"] = round(time.monotonic() - start, 1)
        log(f"  {found[name]}")
        time.sleep(plan.gap_s)
    return found


def drain(pg: OwnPostgres, load: Load, timeout: float) -> float:
    """Wait until every accepted request is final (at most until the latest expected_by + 60 s, and
    ``timeout``); the time waited until."""
    ids = [i for s in load.submissions for i in s.ids]
    deadline = time.time() + timeout
    while time.time() < deadline:
        with pg.connect() as conn:
            rows = fault_checks.request_rows(conn)
        open_rows = [rows[i] for i in ids if i in rows and rows[i].state not in fault_checks.FINAL]
        if not open_rows:
            break
        latest = max(r.expected_by.timestamp() for r in open_rows) + fault_checks.DEADLINE_MARGIN_S
        if time.time() > latest:
            break
        time.sleep(1)
    return time.time()


def answer_counts(load: Load) -> dict[str, int]:
    """How often each answer (status or transport error) came back, over every attempt."""
    counts: dict[str, int] = {}
    for sub in load.submissions:
        for answer in sub.answers:
            counts[answer] = counts.get(answer, 0) + 1
    return counts


def verdict(figures: dict[str, Any]) -> dict[str, bool]:
    return {
        "failed": figures["failed"] == 0,
        "lost": figures["lost"] == 0,
        "double_applied": figures["double_applied"] == 0,
        "over_budget": figures["over_budget"] == 0,
        "audit_ok": figures["audit_ok"] is True,
        "missed_deadline": figures["missed_deadline"] == 0,
        "worker_rss_growth_mb": figures["worker_rss_growth_mb"] <= MAX_RSS_GROWTH_MB,
        "samples_consistent": not figures["samples_inconsistent"],
        "faults_injected": not any("error" in f for f in figures["faults"].values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter soak and gaps (under 5 minutes)")
    parser.add_argument(
        "--smoke", action="store_true", help="the integration test's run: tiny, recovery timeouts shortened"
    )
    parser.add_argument("--logs", type=Path, default=None, help="copy the API's and workers' logs here")
    args = parser.parse_args(argv)
    plan = SMOKE if args.smoke else QUICK if args.quick else FULL
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still stops the servers it started
    started = time.monotonic()
    with ExitStack() as exit_stack:
        root = Path(exit_stack.enter_context(tempfile.TemporaryDirectory(prefix="lethe-faults-")))
        try:
            pg = OwnPostgres(root)
            exit_stack.callback(pg.stop)
            rd = OwnRedis(root)
            exit_stack.callback(rd.kill)
        except (stack.ServersUnavailable, OSError, RuntimeError) as exc:
            print(f"[bench] cannot run: {exc}", file=sys.stderr, flush=True)
            return 2
        disk = exit_stack.enter_context(artifact_disk(root / "artifacts", "512m"))
        token = stack.new_token()
        env = {
            **stack.service_env(pg.url, rd.url, root, token, log_level="warning"),
            **THREADS,
            "LETHE_GPUS": "none",
            "LETHE_WORKER_CONCURRENCY": "2",
            "LETHE_ARTIFACT_DIR": str(root / "artifacts"),
            **dict(plan.settings),
        }
        api = Api(env, root / "api.log")
        api.start()
        exit_stack.callback(api.stop)
        workers = Workers(env, root / "workers.log", LANES)
        exit_stack.callback(workers.stop)
        log(
            f"stack up in {time.monotonic() - started:.1f} s: Postgres :{pg.port}, Redis :{rd.port}, API {api.base}"
        )
        run = Run(api, workers, pg, rd, disk)
        for seed, (method, hyper) in enumerate(MODELS.items()):
            run.models[method] = run.table_model(f"faults-{method}", method, hyper, plan.owners, seed)
        for model_id in run.models.values():
            run.until_state(model_id, ("ready",), 600, 0.5)
        owners = {model_id: [owner_id(k) for k in range(plan.owners)] for model_id in run.models.values()}
        load = Load(api.base, owners, rate=plan.rate)
        load.start()
        exit_stack.callback(load.close)
        log(f"models ready and load started at {time.monotonic() - started:.1f} s: {run.models}")
        time.sleep(plan.warm_s)
        for model_id in run.models.values():  # warm-up: every job kind has run once
            run.retrain(model_id)
            run.until_state(model_id, ("ready",), 300, 0.5)
        soaked = soak(run, plan)
        log(f"soak: {soaked}")
        faults = inject_all(run, load, plan)
        load.stop()
        log(f"load stopped at {time.monotonic() - started:.1f} s: {len(load.submissions)} submissions")
        waited_until = drain(pg, load, timeout=300)
        replay = load.replay_mismatches()
        audit = run.call("GET", "/v1/audit/verify").json()
        with pg.connect() as conn:
            rows = fault_checks.request_rows(conn)
            figures = fault_checks.outcome(load.submissions, rows, waited_until)
            doubled = fault_checks.double_applied(conn, rows, replay)
            figures |= {
                "double_applied": doubled.pop("count"),
                "double_detail": doubled,
                "over_budget": fault_checks.over_budget(conn),
                "samples_inconsistent": fault_checks.samples_consistent(conn, rows),
                "failure_reasons": fault_checks.failure_reasons(conn),
            }
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
            for name in ("api.log", "workers.log"):
                (args.logs / name).write_bytes((root / name).read_bytes())
    figures |= {
        "audit_ok": bool(audit.get("ok")),
        "worker_rss_growth_mb": soaked["worker_rss_growth_mb"],
        "soak": soaked,
        "faults": faults,
        "submissions": len(load.submissions),
        "client_retries": sum(s.attempts - 1 for s in load.submissions),
        "client_answers": answer_counts(load),
        "bench_api_errors": run.api_errors[:5],
    }
    targets = verdict(figures)
    figures |= {
        "targets": targets,
        "targets_met": all(targets.values()),
        "quick": args.quick,
        "settings": dict(plan.settings),
        "threads": 1,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(figures, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
