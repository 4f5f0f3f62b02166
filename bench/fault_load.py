"""The steady client load of ``bench.faults``: single and bulk deletions, each with an Idempotency-Key,
retried with the same key until the service accepts them.

- :class:`Load`: at ``rate`` submissions/s, alternating between the models, every ``bulk_every``-th a bulk
  of ``bulk_size`` owners (``POST .../deletions/bulk``), the others one owner (``POST .../deletions``).
  A submission is retried, with the same key and a backoff of 0.25 s doubling to 4 s, after a transport
  error or a 409/429/5xx answer, until it is accepted or ``give_up_s`` has passed (then it is counted
  ``unaccepted``); any other answer is a client error (``rejected``).
- :func:`replay_mismatches`: the same keys sent again must name the same requests (no second deletion).
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

RETRY_STATUSES = frozenset({409, 429, 500, 502, 503, 504})
FIRST_BACKOFF_S, MAX_BACKOFF_S = 0.25, 4.0


@dataclass
class Submission:
    """One client submission (one key) and what became of it."""

    key: str
    model_id: int
    owners: list[str]
    bulk: bool
    sent: float
    attempts: int = 0
    answers: list[str] = field(default_factory=list)  # each attempt's status or error class
    ids: list[int] = field(default_factory=list)
    accepted_at: float | None = None
    rejected: str | None = None  # a client error (or a bulk item refused): not retried

    @property
    def path(self) -> str:
        return f"/v1/models/{self.model_id}/deletions" + ("/bulk" if self.bulk else "")

    @property
    def body(self) -> dict[str, Any]:
        if self.bulk:
            return {"items": [{"owner_ids": [o]} for o in self.owners]}
        return {"owner_ids": self.owners}


def accepted_ids(sub: Submission, answer: dict[str, Any]) -> list[int]:
    """The request ids an accepted answer names (a bulk's accepted items only)."""
    if sub.bulk:
        return [int(item["id"]) for item in answer["results"] if item.get("status") == 202]
    return [int(answer["id"])]


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


class Load:
    """The open-loop load, on a thread of its own until :meth:`stop`."""

    def __init__(
        self,
        base: str,
        owners: dict[int, list[str]],
        *,
        rate: float,
        bulk_every: int = 5,
        bulk_size: int = 4,
        give_up_s: float = 240.0,
    ) -> None:
        self._http = httpx.Client(base_url=base, timeout=30, limits=httpx.Limits(max_connections=32))
        self._owners = {model: iter(ids) for model, ids in owners.items()}
        self._models = itertools.cycle(sorted(owners))
        self._rate, self._bulk_every, self._bulk_size, self._give_up_s = (
            rate,
            bulk_every,
            bulk_size,
            give_up_s,
        )
        self._pool = ThreadPoolExecutor(24, thread_name_prefix="fault-load")
        self._futures: list[Future[None]] = []
        self._halt = threading.Event()
        self._lock = threading.Lock()  # the owner iterators, shared by the load's thread and bursts
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.submissions: list[Submission] = []
        self.exhausted = False

    def start(self) -> None:
        self._thread.start()

    def _next(self, i: int) -> Submission | None:
        bulk = i % self._bulk_every == self._bulk_every - 1
        with self._lock:
            model = next(self._models)
            owners = list(itertools.islice(self._owners[model], self._bulk_size if bulk else 1))
        if not owners:
            return None
        return Submission(str(uuid.uuid4()), model, owners, bulk, time.time())

    def _run(self) -> None:
        t0 = time.monotonic()
        for i in itertools.count():
            if self._halt.wait(max(t0 + i / self._rate - time.monotonic(), 0)):
                return
            sub = self._next(i)
            if sub is None:
                self.exhausted = True
                return
            self.submissions.append(sub)
            self._futures.append(self._pool.submit(self._submit, sub))

    def _submit(self, sub: Submission) -> None:
        backoff = FIRST_BACKOFF_S
        while True:
            sub.attempts += 1
            try:
                r = self._http.post(sub.path, json=sub.body, headers={"Idempotency-Key": sub.key})
                sub.answers.append(str(r.status_code))
                if r.status_code in (200, 202):
                    sub.ids, sub.accepted_at = accepted_ids(sub, r.json()), time.time()
                    if len(sub.ids) < len(sub.owners):
                        sub.rejected = f"bulk items refused: {r.text[:200]}"
                    return
                if r.status_code not in RETRY_STATUSES:
                    sub.rejected = f"{r.status_code}: {r.text[:200]}"
                    return
            except httpx.HTTPError as exc:
                sub.answers.append(type(exc).__name__)
            if time.time() - sub.sent > self._give_up_s:
                return
            time.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    def burst(self, n: int) -> None:
        """``n`` submissions at once, beside the steady load (to have requests in flight at a fault)."""
        for i in range(n):
            sub = self._next(i)
            if sub is not None:
                self.submissions.append(sub)
                self._futures.append(self._pool.submit(self._submit, sub))

    def stop(self) -> None:
        """No new submissions; waits for those being retried."""
        self._halt.set()
        self._thread.join()
        for future in self._futures:
            future.result()
        self._pool.shutdown()

    def close(self) -> None:
        self._http.close()

    def replay_mismatches(self, sample: int = 200) -> list[str]:
        """Send up to ``sample`` accepted submissions again with their keys: each answer must name the same
        requests; the keys whose answer differs."""
        accepted = [s for s in self.submissions if s.ids]
        step = max(1, len(accepted) // sample)
        out = []
        for sub in accepted[::step]:
            r = self._http.post(sub.path, json=sub.body, headers={"Idempotency-Key": sub.key})
            if r.status_code not in (200, 202) or accepted_ids(sub, r.json()) != sub.ids:
                out.append(f"{sub.key}: {sub.ids} then {r.status_code} {r.text[:120]}")
        return out
