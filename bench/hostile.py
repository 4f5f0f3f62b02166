"""The service under a hostile client, beside a well-behaved one: ``python -m bench.hostile [--quick]``.

Production mode on this machine's Postgres and Redis (a fresh database and Redis database,
:mod:`bench.stack`), the workers as ``python -m workers`` starts them (one process per lane group:
updates and callbacks, retrains, first trainings; ``--worker single``: one Celery worker on every lane,
:func:`bench.stack.celery_worker`) and the API, each a subprocess with one torch/OMP/BLAS thread
(``LETHE_TORCH_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``) and a
deletion SLA of ``--sla`` seconds (``LETHE_DELETION_SLA_SECONDS``).

- The victim uploads a table, registers a Hessian-free model (``audited``) and, once it is ready, forgets
  one owner per request at ``--rate`` requests/s, each with an Idempotency-Key, following each request
  (``GET /v1/deletions/{id}``) to its final state. First a quiet run with nobody else (after a warm-up),
  then the same load while the hostile client runs; midway through that, it retrains its own model.
- The hostile client, meanwhile: registrations with absurd hyperparameters (:data:`ABSURD`, each should be
  a 422); a gzip CSV that decompresses to 2 GB (413 or 422); an NPZ whose header claims 10^9 x 1000
  floats (4xx); a 2,000-row table with one label 99999 and a model on it (the registration, if the upload
  is accepted, a 422 naming the classes or memory); then the longest training the service accepts
  (langevin, epochs halved from 10^9 while registration refuses them or the training fails as it starts),
  deleted once it is training: ``worker_freed_s`` runs from the DELETE's answer to the end line of that
  job in the workers' log. ``hostile_unexpected`` names each input answered otherwise than expected.
- Afterwards one victim owner is forgotten from the whole dataset, and its ids are searched for in the
  database, the artifact directory, Redis and the API's and workers' logs (:mod:`bench.plain_ids`).

The API's RSS is read from /proc every 100 ms (and its VmHWM at the end). The last line of stdout is one
JSON object: ``victim_p99_ms`` (POST to its answer, under attack), ``quiet_p99_ms`` (the same, quiet),
``victim_missed_deadlines`` (completed after ``expected_by``, or not final by ``expected_by`` + 5 s),
``victim_errors`` (non-2xx answers, failed requests, failed or canceled deletions), ``hostile_5xx``,
``api_rss_peak_mb``, ``worker_freed_s``, ``plain_ids_found``, ``hostile_answers`` and ``targets_met``
(with ``targets``: each target's verdict, :func:`bench.hostile_inputs.verdict`). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import plain_ids, stack
from bench.hostile_inputs import (
    ABSURD,
    forged_npz,
    gzip_csv_bomb,
    owner_id,
    stray_label_csv,
    subject_ids,
    table_npz,
    task_spans,
    train_task_end,
    verdict,
)
from bench.hostile_victim import (
    PER_OWNER,
    Follower,
    log,
    message_of,
    offer,
    setup_victim,
    victim_figures,
    wait_final,
)
from bench.service import percentile
from workers.launcher import plan

THREADS = {
    "LETHE_TORCH_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}
WORKER_THREADS = 2  # each thread-pool worker's concurrency (LETHE_WORKER_CONCURRENCY)


@dataclass(frozen=True)
class Phases:
    """How long each part runs and how large its data is (``--quick`` or the full run)."""

    warmup: int  # victim deletions before the quiet run (until they completed), excluded from every figure
    quiet_s: float
    # the victim's load under attack lasts this long, and until the hostile client is done
    hostile_min_s: float
    retrain_after_s: float  # into the attack, the victim retrains its model
    freed_wait_s: float  # how long to wait for the deleted training's job to end
    owners: int
    hostile_rows: int
    hostile_features: int
    bomb_bytes: int = 2 * 10**9


QUICK = Phases(10, 8, 15, 5, 12, owners=900, hostile_rows=4_000, hostile_features=16)
FULL = Phases(20, 30, 90, 40, 60, owners=3000, hostile_rows=50_000, hostile_features=32)


# -- the hostile client ----------------------------------------------------------------------------


@dataclass
class Payloads:
    """The hostile uploads, made before the clients start (so that making them takes no CPU from the
    service while it is measured); the bomb is its chunks, the repeated one shared."""

    small: bytes
    bomb: list[bytes]
    forged: bytes
    stray: bytes
    table: bytes

    @classmethod
    def make(cls, phases: Phases) -> Payloads:
        header, row = b"sample_id,owner_id,f0,f1,f2,f3,label\n", b"b.s,b.o,0,0,0,0,0\n"
        return cls(
            small=stray_label_csv(500, None),
            bomb=list(gzip_csv_bomb(phases.bomb_bytes, header, row)),
            forged=forged_npz((10**9, 1000)),
            stray=stray_label_csv(2000, 99999),
            table=table_npz(phases.hostile_rows, phases.hostile_features),
        )


@dataclass
class Hostile:
    """Sends the hostile inputs one after the other (:meth:`run`), recording each answer."""

    base: str
    workers_log: Path
    phases: Phases
    payloads: Payloads
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    fivexx: int = 0
    training: dict[str, Any] = field(default_factory=dict)
    worker_freed_s: float | None = None
    failure: str | None = None
    done: threading.Event = field(default_factory=threading.Event)
    http: httpx.Client = field(init=False)

    def call(
        self, name: str, expected: tuple[int, ...], method: str, path: str, **kw: Any
    ) -> httpx.Response | None:
        """One request; its status and message go to ``answers[name]`` (a transport failure counts as a 5xx)."""
        start = time.monotonic()
        try:
            r = self.http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            self.fivexx += 1
            self.answers[name] = {"status": None, "message": f"{type(exc).__name__}: {exc}"[:120]}
            self.unexpected.append(name)
            return None
        self.fivexx += r.status_code >= 500
        seconds = round(time.monotonic() - start, 3)
        self.answers[name] = {"status": r.status_code, "message": message_of(r), "seconds": seconds}
        if r.status_code not in expected:
            self.unexpected.append(name)
        return r

    def upload(
        self, name: str, expected: tuple[int, ...], data: bytes, filename: str, kind: str
    ) -> httpx.Response | None:
        return self.call(
            name, expected, "POST", f"/v1/datasets?name={name}", files={"file": (filename, data, kind)}
        )

    def run(self) -> None:
        self.http = httpx.Client(base_url=self.base, timeout=300)
        try:
            small = self.upload("small_table", (201,), self.payloads.small, "h.csv", "text/csv")
            dataset = int(small.json()["id"]) if small is not None and small.status_code == 201 else 0
            for name, method, hyper in ABSURD:
                self.register(name, (422,), dataset, method, hyper)
            self.call(
                "gzip_csv_2gb",
                (413, 422),
                "POST",
                "/v1/datasets?format=csv&name=bomb",
                content=iter(self.payloads.bomb),
                headers={"Content-Type": "application/gzip"},
            )
            client_errors = tuple(range(400, 500))
            self.upload(
                "npz_header_1e9x1000", client_errors, self.payloads.forged, "f.npz", "application/x-npz"
            )
            self.stray_label()
            self.longest_training()
        except (httpx.HTTPError, RuntimeError, ValueError, KeyError, OSError) as exc:  # reported in the JSON
            self.failure = f"{type(exc).__name__}: {exc}"
            log(f"the hostile client stopped: {self.failure}")
        finally:
            self.http.close()
            self.done.set()

    def register(
        self, name: str, expected: tuple[int, ...], dataset: int, method: str, hyper: dict[str, Any]
    ) -> httpx.Response | None:
        body = {"name": name, "dataset_id": dataset, "method": method, "hyperparameters": hyper}
        r = self.call(name, expected, "POST", "/v1/models", json=body)
        if r is not None and r.status_code == 202 and 202 not in expected:
            self.http.delete(f"/v1/models/{r.json()['id']}")  # accepted: it must not take the worker
        return r

    def stray_label(self) -> None:
        r = self.upload(
            "stray_label_99999_upload", (201, *range(400, 500)), self.payloads.stray, "s.csv", "text/csv"
        )
        if r is None or r.status_code != 201:
            return
        reg = self.register("stray_label_99999_model", (422,), int(r.json()["id"]), "hessian_free", {})
        if (
            reg is not None
            and reg.status_code == 422
            and not any(w in reg.text.lower() for w in ("memory", "class"))
        ):
            self.unexpected.append("stray_label_99999_model (its 422 names neither memory nor classes)")

    def longest_training(self) -> None:
        """The longest langevin training the service accepts and starts, deleted once it fits: epochs halved
        from 10^9 while registration refuses them (422) or the training fails before fitting."""
        rows, data = self.phases.hostile_rows, self.payloads.table
        up = self.upload("longest_table_upload", (201,), data, "t.npz", "application/x-npz")
        while up is not None and up.status_code in (413, 422) and rows > 1000:
            rows //= 2
            data = table_npz(rows, self.phases.hostile_features)
            up = self.upload("longest_table_upload", (201,), data, "t.npz", "application/x-npz")
        if up is None or up.status_code != 201:
            return
        dataset, epochs, refusals = int(up.json()["id"]), 10**9, []
        self.training = {"rows": rows, "features": self.phases.hostile_features}
        while epochs >= 1:
            registered_at = time.time()
            hyper = {"epochs": epochs, "l2": 0.2}
            reg = self.register("longest_training_register", (202,), dataset, "langevin", hyper)
            if reg is None or reg.status_code not in (202, 422):
                return
            if reg.status_code == 202:
                model = int(reg.json()["id"])
                status = self.fitting(model)
                if status["state"] == "training":
                    break
                refusals.append(f"{epochs}: training {status['state']}: {status.get('error')}"[:200])
                self.http.delete(f"/v1/models/{model}")
            else:
                refusals.append(f"{epochs}: 422 {message_of(reg)}")
            epochs //= 2
        else:
            return
        self.unexpected = [u for u in self.unexpected if u != "longest_training_register"]
        self.training |= {"epochs": epochs, "refusals": len(refusals), "last_refusals": refusals[-2:]}
        self.training["state_at_delete"] = {
            k: status.get(k) for k in ("state", "phase", "percent", "eta_seconds")
        }
        log(
            f"hostile: langevin fits {epochs:,} epochs on {rows:,} x {self.phases.hostile_features} "
            f"(after {len(refusals)} refusals); deleting it"
        )
        sent = time.time()
        self.call("delete_training_model", (200,), "DELETE", f"/v1/models/{model}")
        answered = time.time()
        self.worker_freed_s = self.freed_after(registered_at, sent, answered)
        self.training["worker_log"] = [
            line[:200]
            for line in self.workers_log.read_text(errors="replace").splitlines()
            if f"model {model}" in line or "train_model" in line
        ][-4:]

    def fitting(self, model: int, timeout: float = 120, settle: float = 3.0) -> dict[str, Any]:
        """The model's status once it is ``training`` and its job reports progress (a phase other than
        ``starting``) or ``settle`` seconds have passed in ``training``; or once it left the
        ``queued``/``training`` states; or after ``timeout`` seconds."""
        deadline, training_since = time.monotonic() + timeout, None
        while True:
            status: dict[str, Any] = self.http.get(f"/v1/models/{model}").json()["status"]
            now = time.monotonic()
            if status["state"] == "training":
                training_since = training_since or now
                if status.get("phase") not in (None, "queued", "starting") or now - training_since >= settle:
                    return status
            if status["state"] not in ("queued", "training") or now > deadline:
                return status
            time.sleep(0.1)

    def freed_after(self, registered_at: float, sent: float, answered: float) -> float | None:
        """Seconds from the DELETE's answer to the end line of the training job (0 if it ended before the
        answer); None if it has not ended within ``phases.freed_wait_s``."""
        deadline = time.monotonic() + self.phases.freed_wait_s
        while time.monotonic() < deadline:
            end = train_task_end(self.workers_log.read_text(errors="replace"), registered_at, sent)
            if end is not None:
                self.training["job_end"] = end.event
                log(
                    f"hostile: the deleted training's job ended ({end.event}) {end.at - answered:.2f} s after the DELETE"
                )
                return round(max(end.at - answered, 0.0), 3)
            time.sleep(0.25)
        self.training["still_running_after_s"] = self.phases.freed_wait_s
        log(
            f"hostile: the deleted training's job still runs {self.phases.freed_wait_s:.0f} s after the DELETE"
        )
        return None


# -- processes -------------------------------------------------------------------------------------


class RssSampler:
    """The API's VmRSS every ``interval`` seconds; :meth:`stop` returns the peak (with VmHWM) in MiB."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid, self.interval, self.peak_kb = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self, field_name: str) -> int:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak_kb = max(self.peak_kb, self._read("VmRSS"))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return round(max(self.peak_kb, self._read("VmHWM")) / 1024, 1)


@contextmanager
def workers(env: dict[str, str], log_path: Path, single: bool, token: str) -> Iterator[list[str]]:
    """The workers: ``python -m workers`` (the launcher's plan), or one Celery worker on every lane; yields
    their names once all are ready."""
    if single:
        with stack.celery_worker(env, log_path, concurrency=4, name=f"hostile-{token}"):
            yield ["single"]
        return
    names = [p.name for p in plan([], queue_prefix=env["LETHE_CELERY_QUEUE"], concurrency=WORKER_THREADS)]
    ready = lambda: log_path.read_bytes().count(b" ready.") >= len(names)
    argv = [sys.executable, "-m", "workers"]
    with stack.started("the workers (python -m workers)", argv, env, log_path, ready) as proc:
        try:
            yield names
        finally:
            stack.stop_children(proc.pid)


def enter_together(exit_stack: ExitStack, *managers: AbstractContextManager[Any]) -> list[Any]:
    """Enter ``managers`` at the same time (each in a thread: the API and the workers start in parallel),
    each entered one pushed on ``exit_stack``; the first failure is raised once the others are in."""
    with ThreadPoolExecutor(len(managers)) as pool:
        futures = [pool.submit(m.__enter__) for m in managers]
    entered, failure = [], None
    for manager, future in zip(managers, futures, strict=True):
        try:
            entered.append(future.result())
            exit_stack.push(manager)
        except Exception as exc:  # noqa: BLE001 -- raised below, once every manager that did start is held
            failure = failure or exc
    if failure is not None:
        raise failure
    return entered


@contextmanager
def tails_on_error(*logs: Path) -> Iterator[None]:
    """On an exception, the last lines of ``logs`` to stderr (the deployment's directory goes with it)."""
    try:
        yield
    except BaseException:
        for path in logs:
            if path.exists():
                tail = "\n".join(path.read_text(errors="replace").splitlines()[-40:])
                log(f"{path.name}, its last lines:\n{tail}")
        raise


# -- the run ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="shorter phases and a smaller hostile table (< 90 s)"
    )
    parser.add_argument(
        "--rate", type=float, default=20.0, help="the victim's deletions per second (default 20)"
    )
    parser.add_argument("--sla", type=float, default=20.0, help="LETHE_DELETION_SLA_SECONDS (default 20)")
    parser.add_argument(
        "--worker",
        choices=("launcher", "single"),
        default="launcher",
        help="python -m workers (default), or one Celery worker on every lane",
    )
    parser.add_argument(
        "--logs", type=Path, default=None, help="copy the API's and workers' logs to this folder"
    )
    args = parser.parse_args(argv)
    phases = QUICK if args.quick else FULL
    started = time.monotonic()
    payloads = Payloads.make(phases)
    log(
        f"hostile payloads made in {time.monotonic() - started:.1f} s (the gzip CSV: {sum(map(len, payloads.bomb)):,} bytes)"
    )
    with ExitStack() as exit_stack:
        deployment = stack.enter_fresh_deployment(exit_stack, "hostile")
        if deployment is None:
            return 2
        var = deployment.var
        env = {
            **deployment.env,
            **THREADS,
            "LETHE_DELETION_SLA_SECONDS": f"{args.sla:g}",
            "LETHE_GPUS": "none",
            "LETHE_WORKER_CONCURRENCY": str(WORKER_THREADS),
        }
        (base, api), names = enter_together(
            exit_stack,
            stack.api_process(env, var / "api.log"),
            workers(env, var / "workers.log", args.worker == "single", deployment.token),
        )
        rss = RssSampler(api.pid)
        log(
            f"stack up in {time.monotonic() - started:.1f} s at {base}: workers {names}, one torch/OMP thread each"
        )
        exit_stack.enter_context(tails_on_error(var / "api.log", var / "workers.log"))
        http = exit_stack.enter_context(httpx.Client(base_url=base, timeout=120))
        dataset, model = setup_victim(http, phases.owners)
        log(f"victim model {model} ready at {time.monotonic() - started:.1f} s")
        owners = [
            owner_id(k) for k in range(phases.owners - 1)
        ]  # the last one is forgotten entirely at the end
        follower = Follower(base)
        n_warm, n_quiet = phases.warmup, int(phases.quiet_s * args.rate)
        warm = offer(base, model, owners[:n_warm], args.rate, follower, n_warm / args.rate)
        # A fresh worker's first round pays one-time costs (statements, caches): the quiet run starts after it.
        for post in warm.posts:
            if post.request_id is not None:
                wait_final(http, post.request_id, 120)
        log(f"warm-up done at {time.monotonic() - started:.1f} s")
        quiet = offer(base, model, owners[n_warm : n_warm + n_quiet], args.rate, follower, phases.quiet_s)
        log(f"quiet run: {len(quiet.posts)} requests, POST p99 {percentile(quiet.post_ms(), 0.99):.1f} ms")
        hostile = Hostile(base, var / "workers.log", phases, payloads)
        attacker = threading.Thread(target=hostile.run, daemon=True)
        attacker.start()
        attacked = offer(
            base,
            model,
            owners[n_warm + n_quiet :],
            args.rate,
            follower,
            phases.hostile_min_s,
            until=hostile.done,
            retrain_after=phases.retrain_after_s,
        )
        attacker.join()
        log(
            f"under attack: {len(attacked.posts)} requests, POST p99 {percentile(attacked.post_ms(), 0.99):.1f} ms"
        )
        follower.finish()
        # One owner forgotten from the whole dataset (every model on it), then searched for everywhere.
        last = phases.owners - 1
        r = http.post(
            f"/v1/datasets/{dataset}/deletions",
            json={"owner_ids": [owner_id(last)]},
            headers={"Idempotency-Key": str(uuid.uuid4())},
        )
        r.raise_for_status()
        states = [wait_final(http, int(item["id"]), 120) for item in r.json()["results"] if item.get("id")]
        hits = plain_ids.everywhere(
            env["LETHE_DATABASE_URL"],
            Path(env["LETHE_ARTIFACT_DIR"]),
            env["LETHE_REDIS_URL"],
            [var / "api.log", var / "workers.log"],
            subject_ids(last, PER_OWNER),
        )
        log(f"forgotten entirely ({states}); plain ids found: {len(hits)}")
        api_rss = rss.stop()
        if args.logs:
            args.logs.mkdir(parents=True, exist_ok=True)
            for name in ("api.log", "workers.log"):
                shutil.copy(var / name, args.logs / name)
        figures = victim_figures(quiet, attacked, follower.outcomes, follower.errors)
        worker_log = (var / "workers.log").read_text(errors="replace")
    figures |= {
        "hostile_5xx": hostile.fivexx,
        "api_rss_peak_mb": api_rss,
        "worker_freed_s": hostile.worker_freed_s,
        "plain_ids_found": len(hits),
        "plain_id_hits": hits[:10],
        "hostile_answers": hostile.answers,
        "hostile_unexpected": hostile.unexpected,
        "hostile_failure": hostile.failure,
        "hostile_training": hostile.training,
        "forget_entirely": states,
        "job_seconds": {  # received to end in the workers' log: the victim's first training, then its retrain
            name: [round(end - start, 1) for start, end in task_spans(worker_log, f"lethe.{name}")][:2]
            for name in ("train_model", "retrain_model")
        },
    }
    targets = verdict(figures)
    figures |= {
        "targets": targets,
        "targets_met": all(targets.values()),
        "sla_seconds": args.sla,
        "rate_rps": args.rate,
        "threads": {k: int(v) for k, v in THREADS.items()},
        "workers": names,
        "quick": args.quick,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
