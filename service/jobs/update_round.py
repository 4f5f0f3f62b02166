"""One deletion update round under the model lock: the requests the budget allows, forgotten together."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from service import metrics
from service.db.base import utcnow
from service.db.tables import DeletionRequest, Model, ModelVersion
from service.jobs.completion import complete_in_round_transaction
from service.jobs.context import UpdateContext
from service.jobs.plans import Batch, RequestPlan, plan_requests
from service.jobs.request_lifecycle import await_retrain, emptied_owners, fail_request, mark_applied
from service.jobs.round_repository import (
    PendingRoundLock,
    RecordedRound,
    UnlearnedVersion,
    finish_lock_round,
    lock_round,
    record_round,
    start_lock_round,
    start_record_round,
)
from service.jobs.state import (
    derive_seed,
    load_hot_statistics,
    load_state,
    policy_kwargs,
    policy_of,
    privacy_of,
)
from service.jobs.versions import release_after_forget
from service.states import ModelState, VersionKind
from service.storage.statistics import HotStoreLost, RedisSampleStatistics
from service.uow import UnitOfWork
from unlearning.data import Dataset
from unlearning.errors import UnlearningError
from unlearning.methods.protocol import ForgetOutcome, MethodState, UnlearningMethod, needs_remaining_data
from unlearning.methods.registry import get_method

log = logging.getLogger(__name__)


@dataclass
class _Forgot:
    batch: Batch
    outcome: ForgetOutcome | None
    failed: dict[int, str]


class RoundTransaction:
    """An update round's unit of work (new, or the previous round's), ended on exit unless continued."""

    def __init__(
        self, uow: UnitOfWork, entered: bool = False, pending_lock: PendingRoundLock | None = None
    ) -> None:
        self.uow = uow
        self.pending_lock = pending_lock  # this round's lock, started (None: the round takes it itself)
        self._entered = entered
        self._continued = False

    def __enter__(self) -> UnitOfWork:
        if not self._entered:
            self.uow.__enter__()
            self._entered = True
        return self.uow

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._continued:
            self.uow.__exit__(exc_type, exc, tb)

    def continue_into_next_round(self, pending_lock: PendingRoundLock) -> RoundTransaction:
        """This unit of work, for the next round, whose lock (``pending_lock``) its transaction started."""
        self._continued = True
        self.uow.session.expunge_all()  # the next round adopts its rows afresh: the map stays small
        return RoundTransaction(self.uow, entered=True, pending_lock=pending_lock)

    def close(self) -> None:
        """End a unit of work continued into a round that never ran (its transaction rolls back)."""
        self.uow.__exit__(None, None, None)


@dataclass(frozen=True)
class Round:
    """What one update round did (:func:`apply_batch`)."""

    progressed: bool  # whether it handled any queued request (then the queue may hold more)
    version: ModelVersion | None  # the version to finish, as committed
    updatable: bool = True  # False: the model is unknown, not trained or not ready (retraining)
    next_transaction: RoundTransaction | None = None  # the next round's, its lock started (version completed)


def apply_batch(rt: UpdateContext, model_id: int, transaction: RoundTransaction | None = None) -> Round:
    """One update round: up to ``max_batch`` queued requests into one version (``transaction``: continued)."""
    started = time.perf_counter()
    round_transaction = transaction if transaction is not None else RoundTransaction(rt.uow())
    with round_transaction as uow:
        pending = round_transaction.pending_lock  # started by the previous round's completion
        if pending is not None:
            locked = finish_lock_round(uow.session, pending)
        else:
            conn, max_batch = uow.postgres_connection(), rt.settings.max_batch
            locked = lock_round(conn, uow.session, model_id, max_batch, rt.manifests)
        model, requests, version = locked.model, locked.requests, locked.version
        if model is None or model.status != ModelState.READY or model.current_version_id is None:
            return Round(False, None, updatable=False)
        if not requests:
            return Round(False, None)
        claimed_at = utcnow()
        method = get_method(model.method)
        if version is None:
            raise RuntimeError(f"model {model_id} points at a missing version {model.current_version_id}")
        state, stats = load_state(rt.hot, rt.cache, rt.hasher, uow, model, version)
        needs_rows = needs_remaining_data(method, model.config, privacy_of(model))  # certified Hessian-free
        remaining = rt.cache.dataset(model.training) if needs_rows and model.training else None
        plans = plan_requests(uow, model_id, requests, locked.owner_samples, locked.sample_owner)
        take, wait, reason = _budget_prefix(method, model, state, plans)
        noise_seed = derive_seed(model.seed, "noise", model_id, version.seq + 1)
        forgot = _forget(method, model, state, stats, take, noise_seed, remaining)
        if forgot.outcome is not None and (over := _over_budget(forgot.outcome)):
            # over the cap by its own certificate: never ledgered, the requests wait for a retrain
            wait, reason = [*forgot.batch.plans, *wait], over
            forgot = _Forgot(Batch([]), None, forgot.failed)
        if forgot.outcome is not None and (problems := method.verify_certificate(forgot.outcome.certificate)):
            problem = "the certificate of this update did not verify: " + "; ".join(problems)
            failed = {p.request.id: problem for p in forgot.batch.plans}
            forgot = _Forgot(Batch([]), None, failed | forgot.failed)
        for plan in take:
            if plan.request.id in forgot.failed:
                fail_request(uow, model_id, plan.request, forgot.failed[plan.request.id], claimed_at)
        if wait:
            await_retrain(uow, model, [p.request for p in wait], reason or "", claimed_at)
        finished: ModelVersion | None = None
        if forgot.outcome is not None and forgot.outcome.forgotten_ids:
            recorded = _record_update(
                rt, uow, model, version, stats, forgot.batch, forgot.outcome, claimed_at
            )
            finished = recorded.version
            if recorded.completion is not None:
                # committed with its writes: the completion goes on here, starting the next round's lock
                _observe_round(started, requests)
                next_lock = complete_in_round_transaction(
                    rt,
                    uow,
                    model_id,
                    recorded.version,
                    recorded.completion,
                    lambda conn: start_lock_round(conn, model_id, rt.settings.max_batch, rt.manifests),
                )
                if next_lock is None:
                    return Round(True, None)
                next_transaction = round_transaction.continue_into_next_round(next_lock)
                return Round(True, None, next_transaction=next_transaction)
        elif forgot.batch.plans:
            # Nothing left to forget (an earlier version excludes these subjects): the current one answers.
            mark_applied(
                uow, model_id, [p.request for p in forgot.batch.plans], version.id, claimed_at, version.seq
            )
            finished = version
        uow.commit()
    _observe_round(started, requests)
    return Round(True, finished)


def _observe_round(started: float, requests: Sequence[DeletionRequest]) -> None:
    metrics.UPDATE_SECONDS.observe(time.perf_counter() - started)
    metrics.UPDATE_BATCH.observe(len(requests))


def _budget_prefix(
    method: UnlearningMethod, model: Model, state: MethodState, plans: list[RequestPlan]
) -> tuple[list[RequestPlan], list[RequestPlan], str | None]:
    """The longest prefix of ``plans`` the budget allows, the requests that must wait, and why."""
    privacy, policy = privacy_of(model), policy_of(model)
    covered: set[str] = set()
    for i, plan in enumerate(plans):
        pending = covered | set(plan.samples)
        if plan.samples:
            reason = method.must_retrain(state, policy, privacy, pending_deletions=len(pending))
            if reason is not None:
                return plans[:i], plans[i:], reason
        covered = pending
    return plans, [], None


def _forget(
    method: UnlearningMethod,
    model: Model,
    state: MethodState,
    stats: RedisSampleStatistics | None,
    plans: list[RequestPlan],
    noise_seed: int,
    remaining: Dataset | None,
) -> _Forgot:
    """``method.forget`` on the batch; a request the method rejects fails alone."""
    privacy, policy = privacy_of(model), policy_of(model)
    extra = policy_kwargs(method.forget, policy)

    def run(batch: Batch) -> ForgetOutcome | None:
        request = batch.forget_request()
        if stats is not None:
            stats.discard_staged()
        if not request.kinds():
            return None
        return method.forget(state, request, noise_seed, privacy, remaining=remaining, **extra)

    if stats is not None:
        stats.prefetch_owners(o for p in plans for o in p.owners)
    batch = Batch(plans)
    try:
        return _Forgot(batch, run(batch), {})
    except UnlearningError as exc:
        _check_hot_store(stats)
        if len(plans) == 1:
            return _Forgot(Batch([]), None, {plans[0].request.id: str(exc)})
    # Find the culprits one by one (rare: submissions are validated), then apply the rest together.
    failed: dict[int, str] = {}
    good: list[RequestPlan] = []
    for plan in plans:
        try:
            run(Batch([plan]))
            good.append(plan)
        except UnlearningError as exc:
            _check_hot_store(stats)
            failed[plan.request.id] = str(exc)
    batch = Batch(good)
    return _Forgot(batch, run(batch) if good else None, failed)


def _check_hot_store(stats: RedisSampleStatistics | None) -> None:
    """An error caused by statistics vanishing from Redis is not the request's fault: retry instead."""
    if stats is not None and stats.loaded_seq() is None:
        raise HotStoreLost("statistics vanished from Redis during the update")


def _over_budget(outcome: ForgetOutcome) -> str | None:
    cert = outcome.certificate
    if cert.budget_spent > cert.budget_cap:
        return (
            f"the update would spend {cert.budget_spent} {cert.budget_unit} "
            f"of a budget capped at {cert.budget_cap}"
        )
    return None


def _record_update(
    rt: UpdateContext,
    uow: UnitOfWork,
    model: Model,
    previous: ModelVersion,
    stats: RedisSampleStatistics | None,
    batch: Batch,
    outcome: ForgetOutcome,
    claimed_at: Any,
) -> RecordedRound:
    """Write the round's blobs and record its version after ``previous`` (:func:`record_round`)."""
    planned = batch.samples
    if stats is not None:
        planned = {**planned, **stats.staged}
    forgotten = {sid: planned.get(sid, "") for sid in outcome.forgotten_ids}
    if unplanned := [sid for sid, owner in forgotten.items() if not owner]:
        # a sample the plan did not name (a graph whose last nodes went): its owner is tombstoned too
        forgotten.update(uow.models.owners_of(model.id, unplanned))
    if set(forgotten) != set(batch.samples):
        named = len(batch.samples)
        log.warning(
            "model %s: the method forgot %d samples, the plan named %d", model.id, len(forgotten), named
        )
    cert = outcome.certificate
    request = batch.forget_request()  # graphs: the stored graph loses exactly these items (service.graphs)
    emptied = emptied_owners(batch, forgotten)

    def created(version_id: int, seq: int) -> dict[str, Any]:
        return {
            "event_type": "version.created",
            "model_id": model.id,
            "request_id": None,
            "version_id": version_id,
            "payload": {
                "seq": seq,
                "kind": VersionKind.UNLEARNED.value,
                "budget_epoch": model.budget_epoch,
                "requests": [p.request.id for p in batch.plans],
                "forgotten": len(forgotten),
                "charge": cert.charge,
                "spent": cert.budget_spent,
                "cap": cert.budget_cap,
                "guarantee": cert.guarantee,
                "weights_sha256": release.released_blob,
            },
        }

    def move_hot_statistics() -> None:
        """Redis to the new version's statistics: the staged removals applied, or the new ones loaded."""
        if stats is None or release.statistics is None:
            return
        seq = previous.seq + 1
        if isinstance(outcome.state.statistics, RedisSampleStatistics):
            stats.apply(seq - 1, seq)
        else:
            load_hot_statistics(rt.hot, rt.cache, model.id, seq, release.statistics, release.snapshot)

    conn = uow.postgres_connection()
    with conn.pipeline():
        # The blobs are written while Postgres answers the reads; the statistics move during the writes.
        pending = start_record_round(conn, model, forgotten, emptied)
        release = release_after_forget(
            rt.artifacts,
            rt.cache,
            model,
            outcome.state,
            cert,
            forgotten,
            rt.settings.max_buckets,
            staged=isinstance(outcome.state.statistics, RedisSampleStatistics),
            request=request,
            whole_owners=emptied,
            previous_artifacts=previous.artifacts,
        )
    unlearned = UnlearnedVersion(
        model, previous, release, batch, forgotten, emptied, request, cert, claimed_at
    )
    return record_round(
        conn, uow, rt.cache, rt.hasher, unlearned, pending, created, rt.manifests, move_hot_statistics
    )
