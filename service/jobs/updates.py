"""Deletion updates: drain every queued request of a model into one new version.

One update, under the model lock (``SELECT ... FOR NO KEY UPDATE`` on the model row):

1. read the queued requests (locked, oldest first) and the current version's state;
2. take the longest prefix of requests the budget policy allows (``method.must_retrain``); the rest
   wait for a retrain, which this transaction schedules;
3. ``method.forget`` on the union (additivity: one call, one new version); a request the method
   rejects is failed alone and the others are applied without it;
4. write the blobs, then in ONE transaction: the version row, the ledger charge, the request states,
   the tombstones, the erasure of the rows from the stored training and dataset arrays, the audit
   events and the statistics in Redis (keyed by version, so Redis ahead of an aborted commit is
   detected and rebuilt); commit;
5. after the commit: serve the version, delete the garbage blobs, complete the requests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from service import metrics
from service.audit.service import model_chain, request_version_events
from service.db.base import utcnow
from service.db.tables import DeletionRequest, Model, ModelVersion
from service.db.uow import UnitOfWork
from service.jobs.completion import finish, finish_sent
from service.jobs.plans import Batch, RequestPlan, plan_requests, tombstones
from service.jobs.postgres_path import (
    LockedRound,
    RecordedVersion,
    RoundReads,
    UnlearnedVersion,
    lock_round,
    read_round,
    record_unlearned_version,
    send_round_reads,
    send_version_reads,
)
from service.jobs.state import (
    derive_seed,
    load_hot_statistics,
    load_state,
    policy_kwargs,
    policy_of,
    privacy_of,
)
from service.jobs.versions import Release, release_after_forget
from service.states import CallbackState, ModelState, RequestState, VersionKind
from service.storage.refs import rewrite_if_collected
from service.storage.statistics import HotStoreLost, RedisSampleStatistics
from unlearning.data import Dataset
from unlearning.errors import UnlearningError
from unlearning.methods.protocol import ForgetOutcome, MethodState, UnlearningMethod
from unlearning.methods.registry import get_method

if TYPE_CHECKING:
    from service.runtime import Runtime

log = logging.getLogger(__name__)

_MAX_ROUNDS = 1000  # drain loop bound: a model under constant load still yields the worker now and then
_HOT_STORE_RETRIES = 3
_MAX_CONSECUTIVE_FAILURES = 3
# Consecutive unexpected failures of a model's update, per worker process. A transient fault (a dropped
# connection) gets retried by the reconciler; a persistent one must not keep requests queued for ever.
_failures: dict[int, int] = {}


class Drains:
    """The models this process's update jobs are draining, and for each whether another job for it
    arrived meanwhile.

    Under load a model's jobs come one after another, and with a pool of threads the next one started
    beside the running one: it waited for the model's lock, then ran its round while the first thread
    completed the previous version, the two taking turns at the interpreter's lock (a round took about
    twice its CPU time). Now a job that finds its model being drained here
    leaves it to the running drain, which passes over the queue once more before it stops: the model's
    rounds and completions run one after the other in one thread, with no broker hop between them.
    Other models' jobs, training and callbacks still run beside it. Between processes the model's row
    lock still orders the rounds."""

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


def request_update(rt: Runtime, model_id: int) -> None:
    """After a commit that queued deletions: make sure an update job for the model is on its way.

    The queued request rows are the durable record of the work (the reconciler re-publishes for any
    left queued), so the job is published directly, and only when no job holds the model's claim (one is
    on its way or draining, :func:`apply_deletions`): under load, one job drains many requests and the
    broker sees one message, not one per request.
    """
    if rt.hot.claim_update(model_id):
        try:
            rt.queue.send("apply_deletions", {"model_id": model_id})
        except Exception:
            rt.hot.release_update(model_id)
            log.warning(
                "could not publish the update job of model %s; the reconciler will", model_id, exc_info=True
            )


def apply_deletions(rt: Runtime, model_id: int) -> None:
    """Drain the model's queued requests, one version per round, until none is left.

    The job holds the model's claim that its request published (:func:`request_update`) until the queue
    is empty, so requests committed meanwhile publish no job of their own: each would cost the API a
    publish and the worker a message, for a round this drain runs anyway.

    An update that fails unexpectedly is retried (the reconciler re-publishes it); after
    ``_MAX_CONSECUTIVE_FAILURES`` in a row the queued requests fail with the error, and the model stays
    on its current version, so a persistent fault is reported instead of keeping requests queued.
    """
    if not _drains.enter(model_id):
        return
    try:
        _drain(rt, model_id)
        while _drains.again(model_id):
            _drain(rt, model_id)
    except Exception as exc:
        _drains.leave(model_id)
        rt.hot.release_update(model_id)  # requests from now on publish a job (a retry) at once
        _failures[model_id] = _failures.get(model_id, 0) + 1
        if _failures[model_id] >= _MAX_CONSECUTIVE_FAILURES:
            _failures.pop(model_id, None)
            _fail_queued(
                rt,
                model_id,
                f"the update failed {_MAX_CONSECUTIVE_FAILURES} times in a row "
                f"({type(exc).__name__}: {exc}); the model stays on its current version",
            )
        raise
    _failures.pop(model_id, None)


def _fail_queued(rt: Runtime, model_id: int, reason: str) -> None:
    with rt.uow() as uow:
        if uow.models.lock(model_id) is None:
            return
        for request in uow.deletions.in_states(model_id, [RequestState.QUEUED], limit=rt.settings.max_batch):
            fail_request(uow, model_id, request, reason)
        uow.commit()
    log.error("model %s: queued deletion requests failed: %s", model_id, reason)


def _drain(rt: Runtime, model_id: int) -> None:
    carried: RoundUnit | None = None  # the next round's unit of work, its reads sent (Round.carried)
    try:
        for _ in range(_MAX_ROUNDS):
            unit, carried = carried, None  # the round ends it, whatever happens
            round_ = _apply_with_retries(rt, model_id, unit)
            carried = round_.carried
            if round_.version is not None:
                finish(rt, model_id, round_.version.id, round_.version)
            if round_.progressed:
                # Requests committed meanwhile published no job: the next round's read is the look at
                # the queue (under load it finds some, and no other statement is spent on looking).
                continue
            # The queue was empty at this round's read: let go of the claim, then look at the queue once
            # more: a request committed before the release published no job and is seen here; one
            # committed after it publishes a job, unless this drain takes the claim back first and so
            # reads it in its next round. A model that cannot take an update now (retraining) gets a job
            # from whatever makes it ready (service.jobs.training).
            rt.hot.release_update(model_id)
            if not round_.updatable or not _has_queued(rt, model_id) or not rt.hot.claim_update(model_id):
                return
    finally:
        if carried is not None:
            carried.close()
    # Still busy: hand the rest, and the claim, to a fresh job instead of monopolising this worker.
    with rt.uow() as uow:
        uow.outbox.add("apply_deletions", {"model_id": model_id}, dedupe_key=f"apply:{model_id}")
        uow.commit()


def _has_queued(rt: Runtime, model_id: int) -> bool:
    with rt.uow() as uow:
        return uow.deletions.any_queued(model_id)


def _apply_with_retries(rt: Runtime, model_id: int, carried: RoundUnit | None = None) -> Round:
    """:func:`apply_batch`, again after a blob collected before its commit or a flushed hot store;
    ``carried`` (the previous round's hand-on) serves the first attempt only."""

    def one_round() -> Round:
        nonlocal carried
        unit, carried = carried, None
        return apply_batch(rt, model_id, unit)

    def attempt() -> Round:
        # A blob collected before the commit (service.storage.refs): the update writes it again.
        return rewrite_if_collected(one_round, job="apply_deletions", detail=f"of model {model_id}")

    for n in range(_HOT_STORE_RETRIES):
        try:
            return attempt()
        except HotStoreLost:
            # Redis was flushed mid-update: the transaction rolled back; the next attempt rebuilds
            # the statistics from the artifact store before reading them.
            metrics.HOT_STORE_REBUILDS.inc()
            log.warning("hot store lost during update of model %s (attempt %d); rebuilding", model_id, n + 1)
    return attempt()


@dataclass
class _Forgot:
    batch: Batch
    outcome: ForgetOutcome | None
    failed: dict[int, str]


class RoundUnit:
    """The unit of work an update round runs in: a new one, or one the previous round's completion
    handed on (:meth:`hand_on`) with this round's reads sent in a transaction begun with that
    completion's COMMIT (:func:`service.jobs.completion.finish_sent`): one round trip fewer per round.
    As a context manager it gives the unit of work and ends it on exit, unless handed on meanwhile."""

    def __init__(self, uow: UnitOfWork, entered: bool = False, reads: RoundReads | None = None) -> None:
        self.uow = uow
        self.reads = reads  # this round's reads, sent (None: the round sends its own)
        self._entered = entered
        self._handed_on = False

    def __enter__(self) -> UnitOfWork:
        if not self._entered:
            self.uow.__enter__()
            self._entered = True
        return self.uow

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._handed_on:
            self.uow.__exit__(exc_type, exc, tb)

    def hand_on(self, reads: RoundReads) -> RoundUnit:
        """This unit of work, for the next round, whose ``reads`` its transaction has sent."""
        self._handed_on = True
        self.uow.session.expunge_all()  # the next round adopts its rows afresh: the map stays small
        return RoundUnit(self.uow, entered=True, reads=reads)

    def close(self) -> None:
        """End a unit of work handed on to a round that never ran (its transaction rolls back)."""
        self.uow.__exit__(None, None, None)


@dataclass(frozen=True)
class Round:
    """What one update round did (:func:`apply_batch`)."""

    progressed: bool  # whether it handled any queued request (then the queue may hold more)
    version: ModelVersion | None  # the version to finish, as committed (the completion need not read it)
    updatable: bool = True  # False: the model is unknown, not trained or not ready (retraining)
    carried: RoundUnit | None = None  # the next round's unit of work, its reads sent (RoundUnit)


def apply_batch(rt: Runtime, model_id: int, carried: RoundUnit | None = None) -> Round:
    """One update round: drain up to ``max_batch`` of the model's queued requests into one version.
    ``carried``: the unit of work the previous round handed on (:class:`RoundUnit`)."""
    started = time.perf_counter()
    unit = carried if carried is not None else RoundUnit(rt.uow())
    with unit as uow:
        locked = _lock_round(rt, uow, model_id, unit.reads)
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
        remaining = (
            rt.cache.dataset(model.training) if method.needs_training_data and model.training else None
        )
        plans = plan_requests(uow, model_id, requests, locked.owner_samples, locked.sample_owner)
        take, wait, reason = _budget_prefix(method, model, state, plans)
        noise_seed = derive_seed(model.seed, "noise", model_id, version.seq + 1)
        forgot = _forget(method, model, state, stats, take, noise_seed, remaining)
        if forgot.outcome is not None and (over := _over_budget(forgot.outcome)):
            # The method's own budget check let through what its certificate says exceeds the cap:
            # never ledger it; the requests wait for a retrain like any over-budget request.
            wait, reason = [*forgot.batch.plans, *wait], over
            forgot = _Forgot(Batch([]), None, forgot.failed)
        if forgot.outcome is not None and (problem := _unverified(method, forgot.outcome)):
            failed = {p.request.id: problem for p in forgot.batch.plans}
            forgot = _Forgot(Batch([]), None, failed | forgot.failed)
        for plan in take:
            if plan.request.id in forgot.failed:
                fail_request(uow, model_id, plan.request, forgot.failed[plan.request.id], claimed_at)
        if wait:
            _await_retrain(uow, model, [p.request for p in wait], reason or "", claimed_at)
        finished: ModelVersion | None = None
        if forgot.outcome is not None and forgot.outcome.forgotten_ids:
            recorded = _record_update(
                rt, uow, model, version, stats, forgot.batch, forgot.outcome, claimed_at
            )
            finished = recorded.version
            if recorded.completion is not None:
                # Committed with its writes, its completion's reads answered in a new transaction of
                # this unit of work: the completion goes on here, and sends the next round's reads
                # with its own commit.
                _observe_round(started, requests)
                next_reads = finish_sent(
                    rt,
                    uow,
                    model_id,
                    recorded.version,
                    recorded.completion,
                    lambda conn: send_round_reads(conn, model_id, rt.settings.max_batch, rt.manifests),
                )
                return Round(True, None, carried=unit.hand_on(next_reads) if next_reads else None)
        elif forgot.batch.plans:
            # Nothing left to forget (an earlier version already excludes these subjects): the
            # current version answers them.
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


def _lock_round(rt: Runtime, uow: UnitOfWork, model_id: int, sent: RoundReads | None = None) -> LockedRound:
    """The model locked, its queued requests (locked, oldest first, none unless the model takes
    updates) and its current version: one pipelined round trip
    (:func:`service.jobs.postgres_path.lock_round`), none when the previous round's completion ``sent``
    the reads already."""
    if sent is not None:
        return read_round(uow.session, sent)
    return lock_round(uow.postgres_connection(), uow.session, model_id, rt.settings.max_batch, rt.manifests)


def _budget_prefix(
    method: UnlearningMethod, model: Model, state: MethodState, plans: list[RequestPlan]
) -> tuple[list[RequestPlan], list[RequestPlan], str | None]:
    """The longest prefix of ``plans`` the budget allows, the requests that must wait, and why.

    Requests keep their order: once one waits for the retrain, every later one waits with it.
    """
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
        return f"the update would spend {cert.budget_spent} {cert.budget_unit} of a budget capped at {cert.budget_cap}"
    return None


def _unverified(method: UnlearningMethod, outcome: ForgetOutcome) -> str | None:
    problems = method.verify_certificate(outcome.certificate)
    if problems:
        return "the certificate of this update did not verify: " + "; ".join(problems)
    return None


def _record_update(
    rt: Runtime,
    uow: UnitOfWork,
    model: Model,
    previous: ModelVersion,
    stats: RedisSampleStatistics | None,
    batch: Batch,
    outcome: ForgetOutcome,
    claimed_at: Any,
) -> RecordedVersion:
    """Write the round's blobs and record its version (``previous``: the version the round started from),
    through the pipelined statements on Postgres, the repositories elsewhere. On Postgres the version's
    completion sends its reads with the round's commit when it can (:func:`record_unlearned_version`)."""
    planned = batch.samples
    if stats is not None:
        planned = {**planned, **stats.staged}
    forgotten = {sid: planned.get(sid, "") for sid in outcome.forgotten_ids}
    if unplanned := [sid for sid, owner in forgotten.items() if not owner]:
        # The method forgot a sample the plan did not name (a collection graph whose last nodes the
        # request deleted leaves whole): its owner from the samples table, so that the owner's tombstone
        # is written (a later request naming that owner is then a 409, not an unknown subject).
        forgotten.update(uow.models.owners_of(model.id, unplanned))
    if set(forgotten) != set(batch.samples):
        log.warning(
            "model %s: the method forgot %d samples, the plan named %d",
            model.id,
            len(forgotten),
            len(batch.samples),
        )
    cert = outcome.certificate
    request = batch.forget_request()  # graphs: the stored graph loses exactly these items (service.graphs)
    emptied = emptied_owners(batch, forgotten)

    def release_blobs() -> Release:
        return release_after_forget(
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
        )

    charge = {
        "budget_unit": cert.budget_unit,
        "budget_cap": cert.budget_cap,
        "charge": cert.charge,
        "spent": cert.budget_spent,
    }

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
        """Make Redis hold the new version's statistics: the round's staged removals applied, or the
        method's new statistics loaded whole."""
        if stats is None or release.statistics is None:
            return
        seq = previous.seq + 1
        if isinstance(outcome.state.statistics, RedisSampleStatistics):
            stats.apply(seq - 1, seq)
        else:
            load_hot_statistics(rt.hot, rt.cache, model.id, seq, release.statistics, release.snapshot)

    conn = uow.postgres_connection()
    with conn.pipeline():
        # The reads the writes need go first, and the blobs are written while Postgres answers them;
        # the hot statistics move while it executes the writes.
        reads = send_version_reads(conn, model, forgotten, emptied)
        release = release_blobs()
    unlearned = UnlearnedVersion(
        model, previous, release, batch, forgotten, emptied, request, charge, claimed_at
    )
    return record_unlearned_version(
        conn, uow, rt.cache, rt.hasher, unlearned, reads, created, rt.manifests, move_hot_statistics
    )


def record_erasure(
    rt: Runtime,
    uow: UnitOfWork,
    model: Model,
    batch: Batch,
    forgotten: dict[str, str],
    *,
    budget_epoch: int,
    emptied: set[str] | None = None,
) -> None:
    """Tombstones (keyed hashes) for the forgotten samples and for owners with nothing left; the plaintext
    sample rows go. ``emptied``: :func:`emptied_owners` of the batch, when the caller has it."""
    uow.models.delete_samples(model.id, list(forgotten))
    if emptied is None:
        emptied = emptied_owners(batch, forgotten)
    owners = {o for o in forgotten.values() if o}
    left = uow.models.samples_of_owners(model.id, sorted(owners - emptied))
    uow.models.add_erased(tombstones(rt.hasher, model.id, batch, forgotten, set(left), budget_epoch))


def emptied_owners(batch: Batch, forgotten: Mapping[str, str]) -> set[str]:
    """Owners a request named whole and whose samples were all forgotten: nothing of theirs is left,
    known without a query (the plan holds every sample they had, read under the model lock)."""
    named = set(batch.owners)
    kept = {owner for sid, owner in batch.samples.items() if owner in named and sid not in forgotten}
    return named - kept


def mark_applied(
    uow: UnitOfWork,
    model_id: int,
    requests: list[DeletionRequest],
    version_id: int,
    claimed_at: Any,
    seq: int,
    *first_events: dict[str, Any],
) -> None:
    """The requests are in version ``seq``; ``first_events`` go to the audit log just before theirs.
    ``claimed_at`` (when the update took them) is recorded as their ``applying`` state; a retrain's
    requests went through ``retraining`` instead and pass None."""
    now = utcnow()
    ids = [r.id for r in requests]
    uow.deletions.set_state(ids, state=RequestState.APPLIED, version_id=version_id)
    applying = (
        [(rid, RequestState.APPLYING, claimed_at, None) for rid in ids] if claimed_at is not None else []
    )
    applied = [(rid, RequestState.APPLIED, now, f"version {seq}") for rid in ids]
    uow.deletions.add_events([*applying, *applied])
    uow.audit.append_many(
        model_chain(model_id),
        [*first_events, *request_version_events("deletion.applied", model_id, version_id, seq, ids)],
    )


def fail_request(
    uow: UnitOfWork, model_id: int, request: DeletionRequest, reason: str, claimed_at: Any = None
) -> None:
    now = utcnow()
    request.state = RequestState.FAILED
    request.failure_reason = reason
    request.subjects = None
    if claimed_at is not None:
        uow.deletions.add_event(request.id, RequestState.APPLYING, claimed_at)
    uow.deletions.add_event(request.id, RequestState.FAILED, now, reason)
    uow.audit.append(
        model_chain(model_id),
        "deletion.failed",
        model_id=model_id,
        request_id=request.id,
        payload={"reason": reason},
    )
    if request.callback_url:
        request.callback_state = CallbackState.PENDING
        uow.outbox.add("deliver_callback", {"request_id": request.id, "attempt": 1})
    metrics.DELETIONS_FAILED.inc()


def _await_retrain(
    uow: UnitOfWork, model: Model, requests: list[DeletionRequest], reason: str, at: Any
) -> None:
    """Park ``requests`` until a retrain excludes them; schedule that retrain (a new budget epoch)."""
    for request in requests:
        request.state = RequestState.AWAITING_RETRAIN
        uow.deletions.add_event(request.id, RequestState.AWAITING_RETRAIN, at, reason)
    schedule_retrain(uow, model, reason, requests)


def schedule_retrain(
    uow: UnitOfWork, model: Model, reason: str, waiting: Sequence[DeletionRequest] = ()
) -> None:
    """Put the (locked) model in ``retraining``, phase ``waiting``, and queue the retrain job for after
    the commit (:func:`service.jobs.training.retrain_model`); the ``retrain.scheduled`` audit event
    names the reason and the requests ``waiting`` for it (none for a retrain asked for through the API).
    While the model is retraining no update runs: requests submitted meanwhile stay queued and the
    retrain excludes them too."""
    model.status = ModelState.RETRAINING
    model.phase = "waiting"
    model.progress = 0.0
    model.eta_seconds = None
    uow.audit.append(
        model_chain(model.id),
        "retrain.scheduled",
        model_id=model.id,
        payload={"reason": reason, "requests": [r.id for r in waiting], "budget_epoch": model.budget_epoch},
    )
    uow.outbox.add(
        "retrain_model", {"model_id": model.id, "reason": reason}, dedupe_key=f"retrain:{model.id}"
    )
