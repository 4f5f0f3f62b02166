"""The floor of the deletion path: each phase of one deletion alone, in one thread, on the real servers.

``python -m bench.deletion_path [--rounds N] [--rows N] [--owners K] [--dataset mnist|covertype]`` creates
a fresh Postgres database and an empty Redis database, trains R1 (the model of ``bench.service``, 1 epoch)
on ``--rows`` rows of MNIST or Covertype through the API and a Celery worker, stops both, and then, in this
process, takes ``--rounds`` deletion requests of ``--owners`` owners each, one at a time, through the three
transactions of a deletion:

- ``intake``: the API's group commit of one submission (:meth:`DeletionIntake.commit_now`);
- ``round``: one update round (:func:`service.jobs.update_round.apply_batch`);
- ``completion``: its completion (:func:`service.jobs.completion.finish`). The round goes on into it in
  its own unit of work (:func:`service.jobs.completion.complete_in_round_transaction`, whose reads went
  with the round's COMMIT): the phase starts there, and holds the next round's reads, sent with the
  completion's COMMIT, which this bench then discards (it takes one owner at a time; in the service the
  drain's next round uses them).

Each phase is timed (the thread's CPU time and the wall time, and the CPU time of the Postgres server's
processes) and its SQL statements and round trips to Postgres counted; the first
``--warmup`` rounds are left out (SQLAlchemy compiles each statement once per process). Nothing else
runs, so these are the floor of ``bench.service``'s figures: add the job's dispatch (publishing it and
the worker picking it up, a few milliseconds) and HTTP, and they make POST-to-completed of an unloaded
service. Under load every phase waits for the cores as well.

The last line of stdout is one JSON object: per phase the medians ``cpu_ms``, ``wall_ms``,
``statements`` and ``round_trips``, and the mean ``postgres_cpu_ms``; ``floor_ms``, the sum of the phases' wall times; and ``floor_over_target``, that floor
divided by the issue's p50 target (20 ms at 100 requests/s): above 1, the target is out of reach before
any load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench import stack
from bench.service import R1, Bench, log, owner_ids

TARGET_P50_MS = 20.0
PHASES = ("intake", "round", "completion")


class PhaseTimer:
    """CPU time, wall time, SQL statements and round trips of each phase, one sample per round.

    Statements are counted through SQLAlchemy's cursor events and, for the hot path's plain statements
    (:mod:`service.db.postgres`), by wrapping psycopg's ``Connection.execute`` and ``Connection.pipeline``
    in this process: a statement sent inside a pipeline shares the pipeline's one round trip (its
    closing sync), one sent outside is a round trip of its own. Commits are not counted."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy import event

        self.samples: dict[str, list[tuple[float, float, int, int]]] = {p: [] for p in PHASES}
        self.server: dict[str, list[float]] = {p: [] for p in PHASES}  # Postgres' CPU seconds per phase
        self._statements = 0
        self._round_trips = 0
        self._started: dict[str, tuple[float, float, float, int, int]] = {}

        @event.listens_for(engine, "before_cursor_execute")
        def _count(*_: Any) -> None:
            self._statements += 1
            self._round_trips += 1

        self._count_plain_statements()

    def _count_plain_statements(self) -> None:
        import psycopg

        execute, pipeline = psycopg.Connection.execute, psycopg.Connection.pipeline

        def counted_execute(conn: Any, *args: Any, **kwargs: Any) -> Any:
            self._statements += 1
            self._round_trips += conn._pipeline is None
            return execute(conn, *args, **kwargs)

        def counted_pipeline(conn: Any) -> Any:
            self._round_trips += 1
            return pipeline(conn)

        psycopg.Connection.execute = counted_execute  # type: ignore[method-assign,assignment]
        psycopg.Connection.pipeline = counted_pipeline  # type: ignore[method-assign,assignment]

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.start(name)
        yield
        self.stop(name)

    def start(self, name: str) -> None:
        """Begin timing ``name`` (:meth:`stop` ends it): for a phase that begins inside a call."""
        server = _postgres_cpu()  # read outside the timed span: it walks /proc
        self._started[name] = (
            server,
            time.thread_time(),
            time.perf_counter(),
            self._statements,
            self._round_trips,
        )

    def stop(self, name: str) -> None:
        cpu_, wall_ = time.thread_time(), time.perf_counter()
        server, cpu, wall, statements, round_trips = self._started.pop(name)
        self.samples[name].append(
            (cpu_ - cpu, wall_ - wall, self._statements - statements, self._round_trips - round_trips)
        )
        self.server[name].append(_postgres_cpu() - server)

    def running(self, name: str) -> bool:
        return name in self._started

    def medians(self, skip: int) -> dict[str, dict[str, float]]:
        out = {}
        for name, samples in self.samples.items():
            kept = samples[skip:]
            out[name] = {
                "cpu_ms": round(statistics.median(s[0] for s in kept) * 1000, 2),
                "wall_ms": round(statistics.median(s[1] for s in kept) * 1000, 2),
                "statements": statistics.median(s[2] for s in kept),
                "round_trips": statistics.median(s[3] for s in kept),
                # /proc counts in ticks of 10 ms: a mean over the phases, not a median of single ones
                "postgres_cpu_ms": round(statistics.fmean(self.server[name][skip:]) * 1000, 2),
            }
        return out


def _postgres_cpu() -> float:
    """CPU seconds used so far by every Postgres server process (0 off Linux)."""
    return stack.cpu_seconds({}).get("postgres", 0.0)


def train_model(env: dict[str, str], var: Path, dataset: str, rows: int, token: str) -> tuple[int, list[str]]:
    """R1's model (1 epoch) on ``rows`` rows of ``dataset`` (``mnist``: the bundled rows; ``covertype``: a
    seeded subsample of the shared split, uploaded as CSV), registered through an API process and trained
    by a Celery worker; both stop before the measurement, which runs in this process alone. Returns the
    model and its owners."""
    with ExitStack() as stack_:
        base, _ = stack_.enter_context(stack.api_process(env, var / "api.log"))
        stack_.enter_context(
            stack.celery_worker(env, var / "worker.log", concurrency=2, name=f"path-{token}")
        )
        bench = Bench(base)
        if dataset == "mnist":
            body = {"name": "mnist", "n": rows, "seed": 0}
            dataset_id = bench.http.post("/v1/datasets/bundled", json=body).json()["id"]
            owners = owner_ids(rows, 0)
        else:
            from bench.tabular import table_csv
            from unlearning.data import load_covertype

            data = load_covertype(n=rows, seed=0)
            files = {"file": ("covertype.csv.gz", table_csv(data.features, data.labels, "c", per_owner=1))}
            dataset_id = bench.http.post("/v1/datasets?name=covertype", files=files).json()["id"]
            owners = [f"c-owner-{i}" for i in range(rows)]
        model = bench.register(dataset_id, {**R1, "epochs": 1}, {"max_deletion_fraction": 0.95}, "R1")
        bench.ready(model, timeout=3600)
        return model, owners


def measure(env: dict[str, str], model_id: int, owners: list[list[str]], warmup: int) -> dict[str, Any]:
    """Each group of owners (one request) through intake, round and completion in this thread; the
    phases' medians."""
    import os

    os.environ.update(env)  # the service's settings come from LETHE_ variables, as in its own processes
    from service.deletions.schemas import DeletionIn
    from service.jobs import update_round
    from service.jobs.completion import finish
    from service.runtime import Runtime
    from service.settings import Settings

    rt = Runtime(Settings(), role="worker")
    intake = rt.deletion_intake()  # not started: commit_now runs in this thread
    timer = PhaseTimer(rt.engine)
    complete_in_round_transaction = update_round.complete_in_round_transaction

    def timed_completion(*args: Any, **kwargs: Any) -> Any:
        # The round's completion goes on in its unit of work: the completion's phase starts here.
        timer.stop("round")
        timer.start("completion")
        return complete_in_round_transaction(*args, **kwargs)

    update_round.complete_in_round_transaction = timed_completion
    try:
        for i, owner in enumerate(owners):
            with timer.phase("intake"):
                outcome = intake.commit_now(model_id, f"path-{i}", DeletionIn(owner_ids=owner))
            _check(outcome.status == 202, f"the deletion of {owner} was not accepted: {outcome.body}")
            timer.start("round")
            round_ = update_round.apply_batch(rt, model_id)
            _check(round_.progressed, f"the round of {owner} took no request")
            if timer.running("completion"):
                timer.stop("completion")
                if round_.next_transaction is not None:  # the next round's lock, started with the commit
                    round_.next_transaction.close()  # one owner at a time: the next intake comes first
                continue
            timer.stop("round")
            version = round_.version
            _check(version is not None, f"the round of {owner} made no version")
            assert version is not None
            with timer.phase("completion"):
                finish(rt, model_id, version.id, version)
    finally:
        update_round.complete_in_round_transaction = complete_in_round_transaction
        rt.stop()
    phases = timer.medians(skip=warmup)
    floor = sum(p["wall_ms"] for p in phases.values())
    return {
        "phases": phases,
        "floor_ms": round(floor, 2),
        "floor_over_target": round(floor / TARGET_P50_MS, 2),
        "target_p50_ms": TARGET_P50_MS,
    }


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)


def main(argv: list[str] | None = None, *, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.deletion_path", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=120, help="deletions measured, warm-up included (120)")
    parser.add_argument("--warmup", type=int, default=20, help="first rounds left out (20)")
    parser.add_argument(
        "--rows", type=int, default=1000, help="rows of the model's dataset, one owner each (1000)"
    )
    parser.add_argument(
        "--owners", type=int, default=1, help="owners per deletion request, forgotten in one round (1)"
    )
    parser.add_argument(
        "--dataset", choices=("mnist", "covertype"), default="mnist",
        help="mnist: R1's bundled rows (at most 10,000); covertype: the shared split (at most 92,962)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not 0 <= args.warmup < args.rounds and args.rounds * args.owners <= args.rows * 0.9:
        parser.error(
            "need 0 <= --warmup < --rounds, --rounds x --owners <= 90% of --rows (the policy admits 95%)"
        )
    started = time.monotonic()
    with ExitStack() as exit_stack:
        deployment = stack.enter_fresh_deployment(exit_stack, "path")
        if deployment is None:
            return 2
        env = deployment.env
        model_id, owners = train_model(env, deployment.var, args.dataset, args.rows, deployment.token)
        log(
            f"trained on {args.rows} {args.dataset} rows at {time.monotonic() - started:.1f}s; "
            f"measuring {args.rounds} rounds"
        )
        k = args.owners
        result = measure(
            env, model_id, [owners[i * k : (i + 1) * k] for i in range(args.rounds)], args.warmup
        )
    result.update(
        rounds=args.rounds, warmup=args.warmup, rows=args.rows, owners=args.owners, dataset=args.dataset,
        seconds=round(time.monotonic() - started, 1),
    )  # fmt: skip
    out(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
