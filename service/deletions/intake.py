"""Group commit: one intake thread per process commits the waiting deletion submissions in one transaction
(a key already present takes :func:`service.idempotency.service.run`; a failed batch is retried one by one)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool

from service.db.base import utcnow
from service.deletions.schemas import BulkIn, DeletionIn
from service.deletions.service import accept_many, bulk_report
from service.deletions.submission_repository import SubmissionRepository
from service.errors import ApiError
from service.graphs.requests import has_graph_items
from service.idempotency import service as idempotency
from service.idempotency.service import Outcome
from service.jobs.context import UpdateContext
from service.jobs.drain import request_update

log = logging.getLogger(__name__)


_WAIT_SLICE_SECONDS = 1.0  # how often a waiting handler checks that the intake thread lives


def deletion_scope(model_id: int, *, bulk: bool = False) -> str:
    """The idempotency-key scope: keys of single and bulk submissions to a model are separate."""
    return f"deletions-bulk:{model_id}" if bulk else f"deletions:{model_id}"


@dataclass
class _Submission:
    model_id: int
    key: str
    payload: dict[str, Any]  # the request body as JSON: what the key's fingerprint covers
    digest: str
    bodies: list[DeletionIn]
    bulk: bool
    outcome: Outcome | None = None
    error: BaseException | None = None
    answered: bool = False
    on_done: Callable[[], object] | None = None  # told when answered (the waiting handler's event loop)

    @property
    def scope(self) -> str:
        return deletion_scope(self.model_id, bulk=self.bulk)

    def answer(self, results: list[Any]) -> tuple[int, dict[str, Any]]:
        """The response stored under the key: a single 202 (its error raised), or a bulk report."""
        if self.bulk:
            return bulk_report(results)
        (result,) = results
        if isinstance(result, ApiError):
            raise result
        return 202, result.model_dump(mode="json")

    def resolve(self, outcome: Outcome | None = None, error: BaseException | None = None) -> None:
        self.outcome, self.error, self.answered = outcome, error, True
        if self.on_done is not None:
            with contextlib.suppress(RuntimeError):  # the waiter's event loop closed (shutdown)
                self.on_done()

    def result(self) -> Outcome:
        """The outcome, or the error raised."""
        if self.error is not None:
            raise self.error
        assert self.outcome is not None
        return self.outcome


_Answer = tuple[_Submission, int, dict[str, Any], ApiError | None]
"""A submission, its status, its stored body, and the error to raise (None: the outcome)."""


def _accepted_any(status: int, body: dict[str, Any]) -> bool:
    """Whether an answer queued any request (a single 202, or a bulk report with accepted items)."""
    return bool(body.get("accepted", status == 202))


class DeletionIntake:
    """One thread per process that commits waiting deletion submissions together."""

    def __init__(self, rt: UpdateContext, max_batch: int = 500) -> None:
        self._rt = rt
        self._max_batch = max_batch
        self._queue: queue.Queue[_Submission | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="lethe-deletion-intake", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    async def submit(self, model_id: int, key: str | None, body: DeletionIn | BulkIn) -> Outcome:
        """Accept (or replay, or reject) a request or a bulk one, once committed, holding no pool thread."""
        return await self._wait(self._submission(model_id, key, body))

    def commit_now(self, model_id: int, key: str | None, body: DeletionIn) -> Outcome:
        """Accept one request in the calling thread as a batch of one (used by ``bench.deletion_path``)."""
        item = self._submission(model_id, key, body)
        self._commit([item])
        return item.result()

    def _submission(self, model_id: int, key: str | None, body: DeletionIn | BulkIn) -> _Submission:
        payload = body.model_dump(mode="json")
        checked = idempotency.check_key(key)
        digest = idempotency.fingerprint(self._rt.hasher, payload)
        bodies = list(body.items) if isinstance(body, BulkIn) else [body]
        return _Submission(model_id, checked, payload, digest, bodies, isinstance(body, BulkIn))

    async def _wait(self, item: _Submission) -> Outcome:
        if self._thread is None:
            return await run_in_threadpool(self._alone, item)
        loop = asyncio.get_running_loop()
        answered = asyncio.Event()
        item.on_done = lambda: loop.call_soon_threadsafe(answered.set)  # before the intake can see it
        self._queue.put(item)
        while True:
            try:
                await asyncio.wait_for(answered.wait(), _WAIT_SLICE_SECONDS)
                return item.result()
            except TimeoutError:
                if self._thread is None or not self._thread.is_alive():
                    raise RuntimeError(
                        "the deletion intake stopped before answering; retry with the same key"
                    ) from None

    def _loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(item)
            self._commit(batch)

    def _commit(self, batch: list[_Submission]) -> None:
        try:
            leftovers = self._commit_together(batch)
        except Exception:  # isolate the culprit: each submission again, alone
            log.warning(
                "a batch of %d deletion submissions failed; retrying each alone", len(batch), exc_info=True
            )
            leftovers = [s for s in batch if not s.answered]
        for item in leftovers:
            self._run_alone(item)

    def _run_alone(self, item: _Submission) -> None:
        try:
            item.resolve(outcome=self._alone(item))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting request thread
            item.resolve(error=exc)

    def _alone(self, item: _Submission) -> Outcome:
        """The one-at-a-time path: a key already present, or a batch that failed."""
        rt = self._rt
        outcome = idempotency.run(
            rt.uow,
            rt.hasher,
            scope=item.scope,
            key=item.key,
            body=item.payload,
            ttl_hours=rt.settings.idempotency_ttl_hours,
            handler=lambda uow: item.answer(
                accept_many(
                    uow, rt.cache, rt.hasher, item.model_id, item.bodies, rt.settings.deletion_sla_seconds
                )
            ),
        )
        if not outcome.replayed and _accepted_any(outcome.status, outcome.body):
            request_update(rt, item.model_id)
        return outcome

    def _commit_together(self, batch: list[_Submission]) -> list[_Submission]:
        """Commit every submission whose key is new in one transaction; returns the others."""
        rt = self._rt
        firsts: dict[tuple[str, str], _Submission] = {}
        for item in batch:
            firsts.setdefault((item.scope, item.key), item)
        keys = [(scope, key, item.digest) for (scope, key), item in firsts.items()]
        now = utcnow()
        expires = now + timedelta(hours=rt.settings.idempotency_ttl_hours)
        answers: list[_Answer] = []
        with rt.uow() as uow:
            accept_for: Callable[[int], Callable[[list[DeletionIn]], list[Any]]]
            store: Callable[[list[tuple[str, str, int, dict[str, Any]]]], None]
            sla = rt.settings.deletion_sla_seconds
            if not any(has_graph_items(b) for s in firsts.values() for b in s.bodies):
                submissions = SubmissionRepository(uow.postgres_connection(), rt.hasher, sla)
                every = _by_model(list(firsts.values()))
                claimed = submissions.claim(keys, now, expires, {m: _bodies(s) for m, s in every.items()})
                accept_for = lambda m: partial(submissions.accept_submissions, m)
                store = partial(submissions.save, uow=uow)
            else:
                claimed = uow.idempotency.claim_many(keys, expires)
                accept_for = lambda m: partial(accept_many, uow, rt.cache, rt.hasher, m, sla_seconds=sla)
                store = uow.idempotency.complete_many
            for model_id, items in _by_model([s for pair, s in firsts.items() if pair in claimed]).items():
                answers.extend(_answers(items, accept_for(model_id)))
            store([(s.scope, s.key, status, _stored(s, body)) for s, status, body, _ in answers])
            uow.commit()
        for item, status, body, error in answers:  # answered as soon as committed ...
            item.resolve(Outcome(status, body, replayed=False) if error is None else None, error)
        for model_id in {s.model_id for s, status, body, _ in answers if _accepted_any(status, body)}:
            request_update(rt, model_id)  # ... while the update job is published
        answered = {id(s) for s, _, _, _ in answers}
        return [item for item in batch if id(item) not in answered]


def _stored(item: _Submission, body: dict[str, Any]) -> dict[str, Any]:
    """The answer as stored under the submission's key (no plain id: :func:`idempotency.at_rest`)."""
    return dict(idempotency.at_rest(item.payload).json(body))


def _by_model(items: list[_Submission]) -> dict[int, list[_Submission]]:
    out: dict[int, list[_Submission]] = {}
    for item in items:
        out.setdefault(item.model_id, []).append(item)
    return out


def _bodies(items: list[_Submission]) -> list[DeletionIn]:
    return [b for s in items for b in s.bodies]


def _answers(items: list[_Submission], accept: Callable[[list[DeletionIn]], list[Any]]) -> list[_Answer]:
    """The answer to each of one model's submissions (one ``accept``)."""
    try:
        results = accept(_bodies(items))
    except ApiError as exc:  # about the model itself (unknown, failed): every submission gets it
        return [(s, exc.status, exc.body(), exc) for s in items]
    out: list[_Answer] = []
    start = 0
    for item in items:
        part, start = results[start : start + len(item.bodies)], start + len(item.bodies)
        try:
            status, body = item.answer(part)
        except ApiError as exc:
            out.append((item, exc.status, exc.body(), exc))
        else:
            out.append((item, status, body, None))
    return out
