"""The well-behaved client of ``bench.hostile``: a victim that forgets one owner per request at a steady
rate and follows each request to its final state.

- :func:`offer`: the open-loop load (POST ``/v1/models/{id}/deletions``, one owner each, with an
  Idempotency-Key; optionally a retrain of the model partway), on the lean client of :mod:`bench.loadgen`;
- :class:`Follower`: ``GET /v1/deletions/{id}`` of every accepted request until it is final, or past its
  ``expected_by`` + :data:`MARGIN_S` (a missed deadline);
- :func:`victim_figures`: the JSON's victim figures from a quiet run and a run under attack.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx

from bench.hostile_inputs import victim_csv
from bench.loadgen import HttpError, KeepAliveClient
from bench.service import percentile

FINAL = ("completed", "failed", "canceled")
MARGIN_S = 5.0  # a request not final by expected_by + this is a missed deadline
POLL_S = 0.5  # the victim first looks at a request this long after its answer, then twice as long each time
MAX_POLL_S = 4.0
PER_OWNER = 2


def log(message: str) -> None:
    print(f"[hostile {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def message_of(r: httpx.Response) -> str:
    """The first 120 characters of an answer's ``error.message``, else of its body."""
    try:
        body = r.json()
        text = body["error"]["message"] if isinstance(body, dict) and "error" in body else r.text
    except (ValueError, KeyError, TypeError):
        text = r.text
    return str(text)[:120]


# -- the victim ------------------------------------------------------------------------------------


@dataclass
class Post:
    sent: float
    post_ms: float
    request_id: int | None
    error: str | None


@dataclass
class Outcome:
    state: str
    missed: bool
    detail: dict[str, Any]  # the request's times and the states it passed through, for a report


class Follower:
    """Follows every accepted request with ``GET /v1/deletions/{id}`` until it is final, or past
    ``expected_by`` + :data:`MARGIN_S` (then a missed deadline): first :data:`POLL_S` after its answer,
    then at twice the previous interval (at most :data:`MAX_POLL_S`), and once just past that deadline."""

    def __init__(self, base: str) -> None:
        self.http = httpx.Client(base_url=base, timeout=30)
        self.inbox: list[tuple[int, float]] = []
        self.outcomes: dict[int, Outcome] = {}
        self.errors: list[str] = []
        self.closing = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def add(self, request_id: int, expected_by: float) -> None:
        with self._lock:
            self.inbox.append((request_id, expected_by))

    def finish(self) -> None:
        """Until every request added so far is final or past its deadline."""
        self.closing.set()
        self._thread.join()
        self.http.close()

    def _run(self) -> None:
        pending: dict[int, tuple[float, float, float]] = {}  # id -> (expected_by, next poll, interval)
        while True:
            with self._lock:
                pending.update({rid: (exp, time.time() + POLL_S, POLL_S) for rid, exp in self.inbox})
                self.inbox.clear()
            if self.closing.is_set() and not pending:
                return
            for rid, (exp, due, interval) in list(pending.items()):
                now = time.time()
                if due <= now:
                    pending.pop(rid)
                    if not self._poll(rid, exp, now):
                        late = exp + MARGIN_S + 0.05
                        wait = min(2 * interval, MAX_POLL_S)
                        pending[rid] = (exp, min(now + wait, late) if now < late else now + wait, wait)
            time.sleep(0.05)

    def _poll(self, rid: int, expected_by: float, now: float) -> bool:
        """Whether the request is settled (final, or a missed deadline)."""
        try:
            r = self.http.get(f"/v1/deletions/{rid}")
        except httpx.HTTPError as exc:
            self.errors.append(f"GET /v1/deletions/{rid}: {type(exc).__name__}: {exc}")
            return False
        if r.status_code != 200:
            self.errors.append(f"GET /v1/deletions/{rid} answered {r.status_code}: {message_of(r)}")
            return r.status_code < 500  # a 4xx will not change; a 5xx may
        d = r.json()
        detail = {
            k: d.get(k)
            for k in ("id", "state", "created_at", "expected_by", "completed_at", "failure_reason")
        }
        detail["history"] = [f"{e.get('state')} {e.get('at')}" for e in d.get("history", [])]
        if d["state"] in FINAL:
            done = at(d["completed_at"]) if d.get("completed_at") else None
            self.outcomes[rid] = Outcome(d["state"], done is not None and done > expected_by, detail)
            return True
        if now > expected_by + MARGIN_S:
            self.outcomes[rid] = Outcome(d["state"], True, detail)
            return True
        return False


@dataclass
class Load:
    """What one run of the victim's load saw."""

    posts: list[Post]
    retrain: dict[str, Any] | None = None

    def post_ms(self) -> list[float]:
        return [p.post_ms for p in self.posts if p.error is None]

    def errors(self) -> list[str]:
        return [p.error for p in self.posts if p.error is not None]


def offer(
    base: str,
    model_id: int,
    owners: list[str],
    rate: float,
    follower: Follower,
    min_seconds: float,
    until: threading.Event | None = None,
    retrain_after: float | None = None,
) -> Load:
    """Open loop: one owner per request at ``rate``/s for ``min_seconds`` and until ``until`` is set (or the
    owners run out), each accepted request handed to ``follower``; ``retrain_after`` seconds in, a
    retrain of the model."""

    async def one(client: KeepAliveClient, owner: str) -> Post:
        sent, start = time.time(), time.perf_counter()
        try:
            answer = await client.post_json(
                f"/v1/models/{model_id}/deletions",
                {"owner_ids": [owner]},
                {"Idempotency-Key": str(uuid.uuid4())},
            )
        except (TimeoutError, HttpError, OSError) as exc:
            return Post(
                sent, (time.perf_counter() - start) * 1000, None, f"{type(exc).__name__}: {exc}"[:300]
            )
        ms = (time.perf_counter() - start) * 1000
        body = answer.json()
        follower.add(int(body["id"]), at(body["expected_by"]))
        return Post(sent, ms, int(body["id"]), None)

    async def retrain(client: KeepAliveClient) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            answer = await client.post_json(f"/v1/models/{model_id}/retrain", {"reason": "bench.hostile"})
            return {"status": answer.status, "post_ms": round((time.perf_counter() - start) * 1000, 1)}
        except (TimeoutError, HttpError, OSError) as exc:
            return {"status": None, "error": f"{type(exc).__name__}: {exc}"[:300]}

    async def run() -> Load:
        client = KeepAliveClient(base, connections=32, timeout=60)
        loop = asyncio.get_running_loop()
        t0 = loop.time() + 0.1
        tasks: list[asyncio.Task[Post]] = []
        retraining: asyncio.Task[dict[str, Any]] | None = None
        try:
            for i, owner in enumerate(owners):
                if i / rate >= min_seconds and (until is None or until.is_set()):
                    break
                await asyncio.sleep(max(t0 + i / rate - loop.time(), 0))
                if retrain_after is not None and retraining is None and i / rate >= retrain_after:
                    retraining = asyncio.create_task(retrain(client))
                tasks.append(asyncio.create_task(one(client, owner)))
            if len(tasks) == len(owners) and until is not None and not until.is_set():
                log(f"the victim ran out of owners after {len(owners)} requests")
            posts = list(await asyncio.gather(*tasks))
            return Load(posts, await retraining if retraining else None)
        finally:
            await client.aclose()

    return asyncio.run(run())


def setup_victim(http: httpx.Client, owners: int) -> tuple[int, int]:
    """Upload the victim's table and train its model; (dataset id, model id)."""
    r = http.post(
        "/v1/datasets?name=victim", files={"file": ("victim.csv", victim_csv(owners, PER_OWNER), "text/csv")}
    )
    r.raise_for_status()
    dataset = int(r.json()["id"])
    r = http.post(
        "/v1/models",
        json={
            "name": "victim",
            "dataset_id": dataset,
            "method": "hessian_free",
            "release_mode": "audited",
            "hyperparameters": {"epochs": 2, "batch_size": 256},
            "budget_policy": {"max_deletion_fraction": 1.0},
        },
    )
    r.raise_for_status()
    model = int(r.json()["id"])
    wait_state(http, model, ("ready",), 600)
    return dataset, model


def wait_state(http: httpx.Client, model_id: int, states: tuple[str, ...], timeout: float) -> dict[str, Any]:
    """The model's status once its state is one of ``states`` (RuntimeError if it fails or times out)."""
    deadline = time.monotonic() + timeout
    while True:
        status: dict[str, Any] = http.get(f"/v1/models/{model_id}").json()["status"]
        if status["state"] in states:
            return status
        if status["state"] == "failed" or time.monotonic() > deadline:
            raise RuntimeError(f"model {model_id} did not reach {states}: {status}")
        time.sleep(0.2)


def wait_final(http: httpx.Client, request_id: int, timeout: float) -> dict[str, Any]:
    """The request's state and failure reason once it is final (RuntimeError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = http.get(f"/v1/deletions/{request_id}").json()
        if d["state"] in FINAL:
            return {"id": request_id, "state": d["state"], "failure_reason": d.get("failure_reason")}
        time.sleep(0.2)
    raise RuntimeError(f"deletion {request_id} is not final after {timeout:.0f} s")


def victim_figures(
    quiet: Load, attacked: Load, outcomes: dict[int, Outcome], follow_errors: list[str]
) -> dict[str, Any]:
    """The victim's figures: POST latencies of each run; errors (failed POSTs, non-2xx GETs, failed or
    canceled deletions, a retrain not answered 202) and missed deadlines of both runs, from ``outcomes``
    (:attr:`Follower.outcomes`; the warm-up's requests are left out)."""
    posts = {p.request_id for p in attacked.posts if p.request_id is not None}
    counted = posts | {p.request_id for p in quiet.posts if p.request_id is not None}
    outcomes = {rid: o for rid, o in outcomes.items() if rid in counted}
    retrain_error = (
        [] if attacked.retrain and attacked.retrain.get("status") == 202 else [f"retrain: {attacked.retrain}"]
    )
    failed = [f"deletion {rid} {o.state}" for rid, o in outcomes.items() if o.state in ("failed", "canceled")]
    errors = quiet.errors() + attacked.errors() + follow_errors + failed + retrain_error
    missed = [rid for rid, o in outcomes.items() if o.missed]
    attacked_ms, quiet_ms = attacked.post_ms(), quiet.post_ms()
    return {
        "victim_p99_ms": round(percentile(attacked_ms, 0.99), 2),
        "victim_p50_ms": round(percentile(attacked_ms, 0.50), 2),
        "quiet_p99_ms": round(percentile(quiet_ms, 0.99), 2),
        "quiet_p50_ms": round(percentile(quiet_ms, 0.50), 2),
        "victim_requests": len(attacked.posts),
        "quiet_requests": len(quiet.posts),
        "victim_missed_deadlines": len(missed),
        "victim_missed_under_attack": len([r for r in missed if r in posts]),
        "victim_errors": len(errors),
        "victim_error_samples": errors[:5],
        "victim_missed_samples": [outcomes[rid].detail for rid in missed[:3]],
        "victim_retrain": attacked.retrain,
    }
