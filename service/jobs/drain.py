"""The drain of a model's deletion queue: update rounds, one version each, until no request is left."""

from __future__ import annotations

import logging
import threading

from service import metrics
from service.faults import is_transient, short_cause
from service.jobs.completion import finish
from service.jobs.context import UpdateContext
from service.jobs.request_lifecycle import fail_request
from service.jobs.update_round import Round, RoundTransaction, apply_batch
from service.states import RequestState
from service.storage.refs import rewrite_if_collected
from service.storage.statistics import HotStoreLost

log = logging.getLogger(__name__)


_MAX_ROUNDS = 1000  # drain loop bound: a model under constant load still yields the worker now and then
_HOT_STORE_RETRIES = 3
_MAX_CONSECUTIVE_FAILURES = 3
_failures: dict[int, int] = {}  # consecutive unexpected failures of a model's update, in this process


class Drains:
    """The models this process drains: a job arriving meanwhile makes the running drain pass again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._again: dict[int, bool] = {}

    def enter(self, model_id: int) -> bool:
        """Whether this job drains the model; if not, the running drain passes over the queue again."""
        with self._lock:
            if model_id in self._again:
                self._again[model_id] = True
                return False
            self._again[model_id] = False
            return True

    def again(self, model_id: int) -> bool:
        """After a pass: whether another job arrived during it (then pass again), else the model is left."""
        with self._lock:
            if self._again.get(model_id):
                self._again[model_id] = False
                return True
            self._again.pop(model_id, None)
            return False

    def leave(self, model_id: int) -> None:
        with self._lock:
            self._again.pop(model_id, None)


_drains = Drains()


def request_update(rt: UpdateContext, model_id: int) -> None:
    """After a commit that queued deletions: publish the model's update job unless one holds its claim."""
    if rt.hot.claim_update(model_id):
        try:
            rt.queue.send("apply_deletions", {"model_id": model_id})
        except Exception:
            rt.hot.release_update(model_id)
            log.warning(
                "could not publish the update job of model %s; the reconciler will", model_id, exc_info=True
            )


def apply_deletions(rt: UpdateContext, model_id: int) -> None:
    """Drain the model's queued requests, one version per round (after repeated failures, they fail)."""
    if not _drains.enter(model_id):
        return
    try:
        _drain(rt, model_id)
        while _drains.again(model_id):
            _drain(rt, model_id)
    except Exception as exc:
        _drains.leave(model_id)
        _release(rt, model_id)  # requests from now on publish a job (a retry) at once
        if is_transient(exc):
            log.warning(
                "the update of model %s met a transient fault (%s); retried", model_id, short_cause(exc)
            )
            raise
        _failures[model_id] = _failures.get(model_id, 0) + 1
        if _failures[model_id] >= _MAX_CONSECUTIVE_FAILURES:
            _failures.pop(model_id, None)
            reason = f"the update failed {_MAX_CONSECUTIVE_FAILURES} times in a row ({short_cause(exc)})"
            _fail_queued(rt, model_id, f"{reason}; the model stays on its current version")
        raise
    _failures.pop(model_id, None)


def _release(rt: UpdateContext, model_id: int) -> None:
    """Let go of the model's update claim; with Redis unreachable it expires on its own."""
    try:
        rt.hot.release_update(model_id)
    except Exception as exc:
        if not is_transient(exc):
            raise
        log.warning("could not release the update claim of model %s (%s)", model_id, short_cause(exc))


def _fail_queued(rt: UpdateContext, model_id: int, reason: str) -> None:
    with rt.uow() as uow:
        if uow.models.lock(model_id) is None:
            return
        for request in uow.deletions.in_states(model_id, [RequestState.QUEUED], limit=rt.settings.max_batch):
            fail_request(uow, model_id, request, reason)
        uow.commit()
    log.error("model %s: queued deletion requests failed: %s", model_id, reason)


def _drain(rt: UpdateContext, model_id: int) -> None:
    """Rounds until the queue is empty (the claim let go), or ``_MAX_ROUNDS`` (a fresh job takes over)."""
    next_transaction: RoundTransaction | None = None  # Round.next_transaction of the last round
    try:
        for _ in range(_MAX_ROUNDS):
            transaction, next_transaction = next_transaction, None  # the round ends it, whatever happens
            round_ = _round_with_retries(rt, model_id, transaction)
            next_transaction = round_.next_transaction
            if round_.version is not None:
                finish(rt, model_id, round_.version.id, round_.version)
            if round_.progressed:
                continue  # requests committed meanwhile published no job: the next round reads them
            # empty: let go of the claim, then look once more (a request committed before it published no job)
            rt.hot.release_update(model_id)
            if not round_.updatable or not _has_queued(rt, model_id) or not rt.hot.claim_update(model_id):
                return
    finally:
        if next_transaction is not None:
            next_transaction.close()
    # Still busy: hand the rest, and the claim, to a fresh job instead of monopolising this worker.
    with rt.uow() as uow:
        uow.outbox.add("apply_deletions", {"model_id": model_id}, dedupe_key=f"apply:{model_id}")
        uow.commit()


def _has_queued(rt: UpdateContext, model_id: int) -> bool:
    with rt.uow() as uow:
        return uow.deletions.any_queued(model_id)


def _round_with_retries(
    rt: UpdateContext, model_id: int, transaction: RoundTransaction | None = None
) -> Round:
    """:func:`apply_batch`, again after a blob collected before its commit or a flushed hot store."""

    def one_round() -> Round:
        nonlocal transaction
        given, transaction = transaction, None
        return apply_batch(rt, model_id, given)

    detail = f"of model {model_id}"  # a blob collected before the commit: the update writes it again
    for n in range(_HOT_STORE_RETRIES):
        try:
            return rewrite_if_collected(one_round, job="apply_deletions", detail=detail)
        except HotStoreLost:  # rolled back: the next attempt rebuilds the statistics first
            metrics.HOT_STORE_REBUILDS.inc()
            log.warning("hot store lost during update of model %s (attempt %d); rebuilding", model_id, n + 1)
    return rewrite_if_collected(one_round, job="apply_deletions", detail=detail)
