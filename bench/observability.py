"""Does monitoring see each incident an operator must be paged for? ``python -m bench.observability [--quick]``.

Production mode on a Postgres cluster of the run's own (so that it can be stopped) and the machine's Redis:
the API (``python -m service``), the workers (``python -m workers``: updates and callbacks, retrains,
trainings) and a real Prometheus (:mod:`bench.prometheus_server`) scraping both every second with the
shipped ``ops/prometheus.yml`` and ``ops/alerts.yml``, the alerts' durations (``for:``, ranges, offsets)
multiplied by ``time_scale`` (1/60 with ``--quick``: ``for: 1m`` is 1 s, ``[15m]`` is 15 s). A client keeps
sending deletions and reads throughout. The run:

1. a healthy phase: no alert may fire;
2. model faults, one after the other: a deletion whose callback target always answers 500 (it gives
   up); a first training that fails (its registration's ``min_quality`` out of reach); a model's budget
   taken to 90% of its cap (cleared by a retrain);
3. the workers killed (SIGKILL to ``python -m workers`` and every worker process) while deletions keep
   arriving, so they are left past ``expected_by``; ``/readyz`` is read; then the workers start again;
4. the database stopped for a while (the API answers 503 and cannot compute its gauges), then started.

Each alert's ``seconds_to_alert`` counts from the moment its condition held (the incident's observable
start: the budget read at 85%, the training failed, the callback given up, ``/readyz`` answering 503, the
first deletion past its ``expected_by``, the database stopped) to the first time Prometheus reported it
firing; the target is its scaled ``for`` plus one scrape and one evaluation interval (plus the scaled
range's first sample for rate-based rules). Every dashboard and rule expression is then evaluated over the
whole run (a range query): each must return series. The last line of stdout is one JSON object:
``expressions``, ``expressions_failed`` (with ``failed``: what and why), ``alerts`` (rule -> whether it
fired during its incident and cleared after), ``seconds_to_alert``, ``alert_targets_s``,
``fired_in_healthy_run``, ``unexpected_alerts``, ``readyz_status_without_worker``, ``targets_met``.
Progress goes to stderr. Exit status 2 when Redis, Postgres's binaries or Prometheus are missing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from bench import prometheus_server as prom
from bench import stack
from bench.fault_load import parse_time
from bench.fault_servers import Api, OwnPostgres, Workers
from bench.hostile_inputs import owner_id, victim_csv

LANES = 3  # python -m workers on a CPU host: updates + io, retrain, train
THREADS = {"LETHE_TORCH_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
HEALTHY_HYPER = {"epochs": 5}


@dataclass(frozen=True)
class Plan:
    """Durations of a run (``--quick`` or the full one)."""

    time_scale: float  # the alerts' durations are multiplied by it
    healthy_s: float
    rate: float  # client deletions per second (each with a read)
    sla_s: float  # LETHE_DELETION_SLA_SECONDS
    liveness_s: float  # LETHE_WORKER_LIVENESS_SECONDS (a record lives 3 of them)
    db_down_s: float
    interval_s: float = 1.0  # scrape and evaluation


QUICK = Plan(time_scale=1 / 60, healthy_s=8, rate=2.0, sla_s=4, liveness_s=2, db_down_s=9)
FULL = Plan(time_scale=1 / 10, healthy_s=60, rate=4.0, sla_s=10, liveness_s=2, db_down_s=45)


def log(message: str) -> None:
    print(f"[observability {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class AlertWatch:
    """Polls Prometheus's alerts every 0.25 s in a thread: when each alert was first and last seen firing."""

    def __init__(self, server: prom.Prometheus) -> None:
        self._server = server
        self.seen: dict[str, list[float]] = {}  # alert -> the wall times it was seen firing
        self.labels: dict[str, list[dict[str, str]]] = {}  # alert -> its label sets when first seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                firing = self._server.firing()
            except httpx.HTTPError:
                continue
            now = time.time()
            for name, labels in firing.items():
                self.seen.setdefault(name, []).append(now)
                self.labels.setdefault(name, labels)

    def firing_now(self) -> set[str]:
        now = time.time()
        return {name for name, times in self.seen.items() if times and now - times[-1] < 0.6}

    def first_after(self, name: str, since: float) -> float | None:
        return next((t for t in self.seen.get(name, []) if t >= since), None)

    def between(self, since: float, until: float) -> set[str]:
        return {n for n, times in self.seen.items() if any(since <= t <= until for t in times)}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Client:
    """The deployment's users: steady deletions and reads on one model in a thread, plus one-off calls."""

    def __init__(self, base: str, model_id: int, owners: int, rate: float) -> None:
        self.http = httpx.Client(base_url=base, timeout=30)
        self._model, self._owners, self._rate = model_id, owners, rate
        self._next_owner = 0
        self.accepted: list[tuple[int, float]] = []  # (request id, expected_by as a wall time)
        self.statuses: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1 / self._rate):
            self._next_owner = (self._next_owner + 1) % self._owners
            try:
                r = self.http.post(
                    f"/v1/models/{self._model}/deletions",
                    json={"owner_ids": [owner_id(self._next_owner)]},
                    headers={"Idempotency-Key": str(uuid.uuid4())},
                )
                self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
                if r.status_code == 202:
                    self.accepted.append((int(r.json()["id"]), parse_time(r.json()["expected_by"])))
                self.http.get(f"/v1/models/{self._model}")
            except httpx.HTTPError:
                self.statuses[0] = self.statuses.get(0, 0) + 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.http.close()


def checked(r: httpx.Response) -> dict[str, Any]:
    """The JSON body of a 2xx answer; RuntimeError naming the call and the answer otherwise."""
    if not r.is_success:
        raise RuntimeError(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text[:300]}")
    return dict(r.json())


def until(check: Callable[[], Any], timeout: float, what: str, poll: float = 0.1) -> Any:
    """Poll ``check`` until it returns a truthy value (returned); RuntimeError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        time.sleep(poll)
    return value


@contextmanager
def failing_endpoint() -> Iterator[str]:
    """An HTTP endpoint on 127.0.0.1 that answers every POST with 500; yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()


@dataclass
class Incident:
    """Alerts an incident must raise: name -> wall time its condition began (None: it never did)."""

    name: str
    started: float
    condition_at: dict[str, float | None] = field(default_factory=dict)
    ended: float = 0.0  # when the fix was applied
    cleared: dict[str, bool] = field(default_factory=dict)


class Run:
    """The deployment, its monitoring and the incidents it takes."""

    def __init__(self, api: Api, env: dict[str, str], root: Path, pg: OwnPostgres, plan: Plan) -> None:
        self.api, self.env, self.root, self.pg, self.plan = api, env, root, pg, plan
        self.http = httpx.Client(base_url=api.base, timeout=30)
        self.workers: Workers | None = None
        self.incidents: list[Incident] = []
        self.readyz_without_worker: int | None = None

    def start_workers(self) -> None:
        self.workers = Workers(self.env, self.root / "workers.log", LANES)

    def stop_workers(self) -> None:
        if self.workers is not None:
            self.workers.stop()

    def kill_workers(self) -> None:
        """SIGKILL to the launcher first (so it restarts nothing), then to every worker process."""
        assert self.workers is not None
        kids = stack.children(self.workers.proc.pid)
        self.workers.proc.send_signal(signal.SIGKILL)
        self.workers.proc.wait()
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.workers = None

    def table_model(self, name: str, owners: int, seed: int, **extra: Any) -> int:
        csv = victim_csv(owners, 2, seed=seed)
        dataset = checked(
            self.http.post(f"/v1/datasets?name={name}", files={"file": ("t.csv", csv, "text/csv")})
        )
        return self.register(name, int(dataset["id"]), **extra)

    def register(self, name: str, dataset_id: int, **extra: Any) -> int:
        """A ``hessian_free`` model on the dataset (``extra``: more registration fields); its id."""
        body = {"name": name, "dataset_id": dataset_id, "method": "hessian_free", **extra}
        return int(
            checked(self.http.post("/v1/models", json={"hyperparameters": HEALTHY_HYPER, **body}))["id"]
        )

    def delete(self, model_id: int, **body: Any) -> int:
        """Submit a deletion request; its id."""
        path, key = f"/v1/models/{model_id}/deletions", {"Idempotency-Key": str(uuid.uuid4())}
        return int(checked(self.http.post(path, json=body, headers=key))["id"])

    def model_state(self, model_id: int) -> str:
        return str(self.http.get(f"/v1/models/{model_id}").json()["status"]["state"])

    def ready(self, model_id: int, timeout: float = 120) -> None:
        until(lambda: self.model_state(model_id) == "ready", timeout, f"model {model_id} ready", 0.2)

    def budget_share(self, model_id: int) -> float:
        b = self.http.get(f"/v1/models/{model_id}/budget").json()
        return float(b["spent"]) / float(b["cap"]) if b.get("cap") else 0.0


# -- the incidents -----------------------------------------------------------------------------------


def forget(run: Run, model_id: int, owners: list[str]) -> None:
    """One deletion request for ``owners``, waited for until completed."""
    request_id = run.delete(model_id, owner_ids=owners)
    until(
        lambda: run.http.get(f"/v1/deletions/{request_id}").json()["state"] == "completed", 60, "a deletion"
    )


def exhaust_budget(run: Run, model_id: int, target: float = 0.9) -> float:
    """Forget owners of ``model_id`` (a budget of deletion fractions, charged per sample) until its share
    spent is ``target``: one owner to learn the share an owner costs, then the rest in one request. The
    wall time the share was read at 85% or more."""
    forget(run, model_id, [owner_id(0)])
    each = run.budget_share(model_id)
    more = round((target - each) / each) if each > 0 else 0
    forget(run, model_id, [owner_id(k) for k in range(1, 1 + more)])
    share = run.budget_share(model_id)
    if not 0.85 <= share < 1:
        raise RuntimeError(f"the budget of model {model_id} is at {share:.0%}, not 85% to 99%")
    log(f"budget of model {model_id} at {share:.0%} after {1 + more} owners")
    return time.time()


def failing_training(run: Run) -> float | None:
    """Register a model whose first training cannot reach the held-out accuracy its registration demands
    (``min_quality`` 0.999 on a noisy table): it fails. The wall time the model was read as failed, None
    if it trained."""
    csv = victim_csv(300, 2, seed=3)
    dataset = checked(
        run.http.post("/v1/datasets?name=obs-fails", files={"file": ("t.csv", csv, "text/csv")})
    )
    hyper = {**HEALTHY_HYPER, "min_quality": 0.999}
    model_id = run.register("obs-fails", int(dataset["id"]), hyperparameters=hyper)
    state = until(
        lambda: (s := run.model_state(model_id)) in ("failed", "ready") and s, 60, "the failing model"
    )
    log(f"training with min_quality 0.999: {state}")
    return time.time() if state == "failed" else None


def exhausted_callback(run: Run, model_id: int, url: str) -> float:
    """A deletion whose callback goes to ``url``; the wall time its callback was read as given up."""
    request_id = run.delete(model_id, owner_ids=[owner_id(4999)], callback_url=url)

    def gave_up() -> bool:
        return run.http.get(f"/v1/deletions/{request_id}").json()["callback"]["state"] == "failed"

    until(gave_up, 60, "the callback gives up", 0.05)
    return time.time()


def model_faults(run: Run, budget_model: int, steady_model: int) -> Incident:
    incident = Incident("model_faults", time.time())
    with failing_endpoint() as url:
        incident.condition_at["LetheCallbacksExhausted"] = exhausted_callback(run, steady_model, url)
    incident.condition_at["LetheTrainingFailing"] = failing_training(run)
    incident.condition_at["LetheBudgetNearlyExhausted"] = exhaust_budget(run, budget_model)
    return incident


def workers_killed(run: Run, client: Client, watch: AlertWatch) -> Incident:
    """SIGKILL every worker while the client goes on; the deletions left waiting go past ``expected_by``.
    ``LetheDeletionsOverdue``'s condition time is set by :func:`first_overdue` once they completed."""
    incident = Incident("workers_killed", time.time())
    run.kill_workers()
    readyz = until(
        lambda: (s := run.http.get("/readyz").status_code) != 200 and s, 30, "/readyz not ready", 0.05
    )
    incident.condition_at["LetheNoLiveWorker"] = time.time()
    run.readyz_without_worker = readyz
    incident.condition_at["LetheDeletionsOverdue"] = None
    until(lambda: watch.first_after("LetheDeletionsOverdue", incident.started), 120, "overdue alert", 0.2)
    return incident


def first_overdue(run: Run, accepted: list[tuple[int, float]], since: float) -> float | None:
    """The earliest ``expected_by`` after ``since`` of the requests that completed after it (or not yet)."""
    late = []
    for request_id, expected_by in accepted:
        if expected_by < since:
            continue
        completed = checked(run.http.get(f"/v1/deletions/{request_id}")).get("completed_at")
        if completed is None or parse_time(completed) > expected_by:
            late.append(expected_by)
    return min(late, default=None)


def database_stopped(run: Run) -> Incident:
    incident = Incident("database_stopped", time.time())
    run.pg.stop()
    incident.condition_at = dict.fromkeys(("LetheApiErrorRate", "LetheMonitoringBlind"), time.time())
    time.sleep(run.plan.db_down_s)
    return incident


def clear_each(run: Run, watch: AlertWatch, incident: Incident, timeout: float) -> None:
    """Wait until none of the incident's alerts fires; record which cleared."""
    incident.ended = time.time()
    names = set(incident.condition_at)
    deadline = time.monotonic() + timeout
    while names & watch.firing_now() and time.monotonic() < deadline:
        time.sleep(0.25)
    time.sleep(1)
    incident.cleared = {n: n not in watch.firing_now() for n in names}


# -- the verdict -------------------------------------------------------------------------------------


def evaluate_expressions(
    server: prom.Prometheus, since: float, rules: dict[str, Any]
) -> tuple[int, list[str]]:
    """Every dashboard and rule expression over [since, now]: (how many, those that failed and why).
    A dashboard expression must return series; a rule's must evaluate and every metric it names must
    exist (its firing is judged by the incidents)."""
    failed: list[str] = []
    dashboards = prom.dashboard_expressions()
    for where, expr in dashboards.items():
        ev = server.query_range(expr, since, time.time())
        if ev.error or not ev.series:
            failed.append(f"{where}: {ev.error or 'no series'}")
    exprs = prom.rule_expressions(rules)
    for alert, expr in exprs.items():
        ev = server.query_range(expr, since, time.time())
        missing = [m for m in prom.metric_names(expr) if not server.query_range(m, since, time.time()).series]
        if ev.error or missing:
            failed.append(f"rule {alert}: {ev.error or 'no series for ' + ', '.join(sorted(missing))}")
    return len(dashboards) + len(exprs), failed


def alert_target(rule: dict[str, Any], interval_s: float) -> float:
    """Scaled ``for`` + a scrape and an evaluation interval + the first range of a rate-based rule
    (``increase``/``rate`` need two samples: one more scrape)."""
    extra = interval_s if ("rate(" in rule["expr"] or "increase(" in rule["expr"]) else 0.0
    return prom.seconds(rule.get("for", "0s")) + 2 * interval_s + extra + 0.5  # + the watcher's poll


def verdict(run: Run, watch: AlertWatch, rules: dict[str, Any]) -> dict[str, Any]:
    """Per alert of an injected incident: fired and cleared, seconds from its condition to firing, and
    the target (``rules``: as Prometheus evaluated them, time-scaled)."""
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"] if "alert" in r}
    alerts: dict[str, bool | None] = dict.fromkeys(by_name)
    to_alert: dict[str, float | None] = {}
    targets: dict[str, float] = {}
    for incident in run.incidents:
        for name, at in incident.condition_at.items():
            fired = watch.first_after(name, incident.started)
            alerts[name] = fired is not None and at is not None and incident.cleared.get(name, False)
            to_alert[name] = round(fired - at, 2) if fired is not None and at is not None else None
            targets[name] = round(alert_target(by_name[name], run.plan.interval_s), 2)
    return {"alerts": alerts, "seconds_to_alert": to_alert, "alert_targets_s": targets}


def unexpected(run: Run, watch: AlertWatch, since: float) -> dict[str, int]:
    """Alert -> how many times it was seen firing outside the incidents that expect it."""
    out: dict[str, int] = {}
    for name, times in watch.seen.items():
        windows = [
            (i.started, i.ended + 60) for i in run.incidents if name in i.condition_at
        ]  # firing may outlast the fix by its range
        stray = [t for t in times if t >= since and not any(a <= t <= b for a, b in windows)]
        if stray:
            out[name] = len(stray)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="alert durations scaled by 1/60 (under 2 minutes)"
    )
    parser.add_argument(
        "--logs", type=Path, default=None, help="copy the API's, workers' and Prometheus's logs here"
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    binary = prom.prometheus_binary()
    if binary is None:
        print("[bench] cannot run: no prometheus binary (make install unpacks Debian's)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    began = time.monotonic()
    with ExitStack() as exit_stack:
        root = Path(exit_stack.enter_context(tempfile.TemporaryDirectory(prefix="lethe-observability-")))
        try:
            pg = OwnPostgres(root)
            exit_stack.callback(pg.stop)
            token = stack.new_token()
            redis_url = exit_stack.enter_context(stack.redis_database(token))
        except (stack.ServersUnavailable, OSError, RuntimeError) as exc:
            print(f"[bench] cannot run: {exc}", file=sys.stderr, flush=True)
            return 2
        worker_port = free_ports(LANES)
        env = {
            **stack.service_env(pg.url, redis_url, root, token, log_level="warning"),
            **THREADS,
            "LETHE_GPUS": "none",
            "LETHE_WORKER_CONCURRENCY": "2",
            "LETHE_WORKER_METRICS_PORT": str(worker_port),
            "LETHE_WORKER_LIVENESS_SECONDS": str(plan.liveness_s),
            "LETHE_DELETION_SLA_SECONDS": str(plan.sla_s),
            "LETHE_CALLBACK_ALLOWED_NETWORKS": "127.0.0.0/8",
            "LETHE_CALLBACK_MAX_ATTEMPTS": "2",
            "LETHE_CALLBACK_BACKOFF_SECONDS": "0.1",
            "LETHE_CALLBACK_TIMEOUT_SECONDS": "2",
        }
        api = Api(env, root / "api.log")
        api.start()
        exit_stack.callback(api.stop)
        run = Run(api, env, root, pg, plan)
        run.start_workers()
        exit_stack.callback(run.stop_workers)
        if args.logs:
            exit_stack.callback(copy_logs, root, args.logs)
        owners = 150
        steady = run.table_model("obs-steady", 5000, 1)
        budgeted = run.table_model(
            "obs-budget", owners, 2, release_mode="audited", budget_policy={"max_deletion_fraction": 0.2}
        )
        for model_id in (steady, budgeted):
            run.ready(model_id)
        rules = prom.alert_rules()
        (root / "prom").mkdir()
        scaled = prom.time_scaled_rules(rules, plan.time_scale)
        (root / "prom" / "alerts.yml").write_text(json.dumps(scaled))
        config = prom.scrape_config(
            f"127.0.0.1:{api.port}", [worker_port + i for i in range(LANES)], root / "prom", plan.interval_s
        )
        server = prom.Prometheus(binary, config, root / "prom")
        exit_stack.callback(server.stop)
        watch = AlertWatch(server)
        exit_stack.callback(watch.stop)
        client = Client(api.base, steady, 5000, plan.rate)
        client.start()
        exit_stack.callback(client.stop)
        # Before its first scrapes Prometheus sees no series: absent() rules fire for a moment (a `for:` of
        # seconds does not cover that); the healthy phase starts once every target is up and that passed.
        until(
            lambda: (up := server.targets_up()) and len(up) == 1 + LANES and all(up.values()),
            30,
            "targets up",
        )
        until(lambda: not watch.firing_now(), 30, "no alert firing after Prometheus's start", 0.25)
        log(f"stack and Prometheus up in {time.monotonic() - began:.1f} s")

        healthy_from = time.time()
        time.sleep(plan.healthy_s)
        healthy = sorted(watch.between(healthy_from, time.time()))
        log(f"healthy phase: firing {[watch.labels[n] for n in healthy] or 'nothing'}")

        clear_s = 60 * plan.time_scale * 15 + 30  # the longest range (15m scaled) and the workers' start
        faults = model_faults(run, budgeted, steady)
        run.incidents.append(faults)
        checked(run.http.post(f"/v1/models/{budgeted}/retrain", json={"reason": "bench.observability"}))
        clear_each(run, watch, faults, clear_s)
        log(f"model faults: {faults.condition_at} cleared {faults.cleared}")

        killed = workers_killed(run, client, watch)
        run.incidents.append(killed)
        run.start_workers()
        clear_each(run, watch, killed, clear_s + 30)
        killed.condition_at["LetheDeletionsOverdue"] = first_overdue(
            run, list(client.accepted), killed.started
        )
        log(f"workers killed: cleared {killed.cleared}")

        stopped = database_stopped(run)
        run.incidents.append(stopped)
        pg.start()
        clear_each(run, watch, stopped, clear_s)
        log(f"database stopped: cleared {stopped.cleared}")

        count, failed = evaluate_expressions(server, healthy_from, rules)
        figures = verdict(run, watch, scaled)
        stray = unexpected(run, watch, healthy_from)
        injected = [v for v in figures["alerts"].values() if v is not None]
        in_time = all(
            s is not None and s <= figures["alert_targets_s"][n]
            for n, s in figures["seconds_to_alert"].items()
        )
        result = {
            "expressions": count,
            "expressions_failed": len(failed),
            "failed": failed,
            **figures,
            "fired_in_healthy_run": healthy,
            "unexpected_alerts": stray,
            "readyz_status_without_worker": run.readyz_without_worker,
            "client_statuses": {str(k): v for k, v in sorted(client.statuses.items())},
            "time_scale": round(plan.time_scale, 4),
            "seconds": round(time.monotonic() - began, 1),
        }
        result["targets_met"] = (
            not failed and all(injected) and in_time and not healthy and not stray
            and result["readyz_status_without_worker"] == 503
        )  # fmt: skip
    print(json.dumps(result), flush=True)
    return 0


def free_ports(count: int) -> int:
    """A port p with p .. p + count - 1 all free on this machine (the workers' metrics ports)."""
    for _ in range(50):
        base = stack.free_port()
        if all(port_free(base + i) for i in range(count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def copy_logs(root: Path, to: Path) -> None:
    to.mkdir(parents=True, exist_ok=True)
    for name in ("api.log", "workers.log", "prom/prometheus.log"):
        if (root / name).exists():
            (to / Path(name).name).write_bytes((root / name).read_bytes())


if __name__ == "__main__":
    raise SystemExit(main())
