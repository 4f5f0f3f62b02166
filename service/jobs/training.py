"""Training and retraining: no lock while fitting, the result recorded under the model lock."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import partial
from typing import Any

from prometheus_client import Counter

from service import metrics
from service.audit.service import model_chain
from service.db.base import utcnow
from service.db.tables import Model, ModelVersion
from service.faults import is_transient, short_cause
from service.graphs.erasure import after_present, departed
from service.graphs.storage import is_graph, sample_count, write_graph
from service.jobs.completion import collect_garbage, finish
from service.jobs.context import UpdateContext
from service.jobs.job_guard import GuardedProgress, JobCanceled, job_estimate
from service.jobs.plans import Batch, plan_requests
from service.jobs.request_lifecycle import fail_request, mark_applied, record_erasure
from service.jobs.requeue import INITIAL, Run
from service.jobs.state import derive_seed, load_hot_statistics, policy_kwargs, policy_of, privacy_of
from service.jobs.versions import Release, blobs_of, erase_from_source, record_version, release_after_fit
from service.states import ModelState, RequestState, VersionKind
from service.storage.refs import rewrite_if_collected
from service.uow import UnitOfWork
from unlearning.errors import UnlearningError
from unlearning.methods.protocol import ForgetRequest, MethodState
from unlearning.methods.registry import get_method
from unlearning.privacy.certificate import Certificate
from unlearning.tables.quality import QualityReport, quality_problem

log = logging.getLogger(__name__)


def _fit(
    rt: UpdateContext, model: Model, training: dict[str, Any], seed: int
) -> tuple[MethodState, Certificate, int]:
    """Fit on ``training`` under the job's guard: (state, certificate, sample count), certificate verified."""
    dataset = rt.cache.dataset(training)
    method = get_method(model.method)
    policy = policy_of(model)
    progress = GuardedProgress(rt, model.id, job_estimate(method, model))
    state, certificate = method.fit(
        dataset, dict(model.config), privacy_of(model), seed, progress, **policy_kwargs(method.fit, policy)
    )
    problems = method.verify_certificate(certificate)
    if problems:
        raise RuntimeError("the certificate of the trained model did not verify: " + "; ".join(problems))
    return state, certificate, sample_count(dataset)


def _quality(state: MethodState, run: Run) -> QualityReport | None:
    """The fit's held-out quality report (table models); a flagged one is logged and noted on ``run``."""
    report = QualityReport.from_dict(state.accounting.get("quality"))
    run.low_quality = report is not None and report.flagged
    if report is not None and report.flagged:
        log.warning("a %s fitted a model no better than the majority class: %s", run.kind, report.note)
    return report


def _count(run: Run, outcome: Counter) -> None:
    """Count how ``run`` ended (and a low-quality fit), once committed: a run rolled back counts once."""
    outcome.inc()
    if run.low_quality:
        metrics.LOW_QUALITY.labels(run.kind).inc()


def _release(
    rt: UpdateContext,
    run: Run,
    started: float,
    write: Callable[[], Release],
    record: Callable[[Release], int | None],
) -> None:
    """``record(write())`` (again on BlobVanished), then the version is finished, if ``record`` made one."""
    model_id, initial = run.model_id, run.kind == INITIAL

    def attempt() -> int | None:
        try:
            release = write()
        except Exception as exc:  # any other failure is the model's error, never a crash loop
            if is_transient(exc):
                raise  # the job runs again (Run.retry_later)
            (_fail_training if initial else _fail_retrain)(rt, run, exc)
            return None
        version_id = record(release)
        if version_id is None:
            _discard_if_deleted(rt, model_id, release)
        return version_id

    job = "train_model" if initial else "retrain_model"
    version_id = rewrite_if_collected(attempt, job=job, detail=f"of model {model_id}")
    if version_id is None:
        return
    _count(run, metrics.TRAININGS.labels(run.kind, "ok"))  # record committed the version
    metrics.TRAINING_SECONDS.labels(run.kind).observe(time.perf_counter() - started)
    finish(rt, model_id, version_id)
    refresh_planner_statistics(rt)


def _discard_if_deleted(rt: UpdateContext, model_id: int, release: Release) -> None:
    """If the model was deleted meanwhile, collect the release's blobs that nothing holds now."""
    with rt.uow() as uow:
        model = uow.models.get(model_id)
        if model is None or model.status != ModelState.DELETED:
            return
        collect_garbage(uow, rt, blobs_of(release))
        uow.commit()


def refresh_planner_statistics(rt: UpdateContext) -> None:
    """:meth:`UnitOfWork.refresh_planner_statistics` in its own transaction; a failure is only logged."""
    try:
        with rt.uow() as uow:
            uow.refresh_planner_statistics()
            uow.commit()
    except Exception:  # autovacuum refreshes them within a minute anyway
        log.warning("could not refresh the planner's statistics after training", exc_info=True)


def _stale(rt: UpdateContext, model: Model) -> bool:
    """Whether the model's job is presumed dead (service.jobs.heartbeat)."""
    return model.updated_at < utcnow() - timedelta(seconds=rt.settings.job_heartbeat_timeout_seconds)


def _requeue_if_transient(rt: UpdateContext, run: Run, job: Callable[[], None]) -> None:
    """``job()``; a transient fault fails nothing: the job is queued again (:meth:`Run.retry_later`)."""
    try:
        job()
    except Exception as exc:
        if not is_transient(exc):
            raise
        run.retry_later(rt, exc)


def _failure(kind: str, model_id: int, exc: BaseException, failed: str) -> str | None:
    """Why the (re)training failed, logged; None when the model was deleted meanwhile (counted canceled)."""
    if isinstance(exc, JobCanceled):
        log.info("the %s of model %s stopped: the model was deleted", kind, model_id)
        metrics.TRAININGS.labels(kind, "canceled").inc()
        return None
    what = failed.removesuffix(" failed")
    if isinstance(exc, UnlearningError):  # the request's own error (bad data or hyperparameters): one line
        reason = str(exc)
        log.warning("%s of model %s failed: %s", what, model_id, reason)
    else:
        reason = f"{failed}: {short_cause(exc)}"
        log.error("%s of model %s failed", what, model_id, exc_info=exc)
    return reason


def train_model(rt: UpdateContext, model_id: int) -> None:
    """Fit the model's first version (a model ``queued``, or ``training`` and stale)."""
    run = Run(INITIAL, model_id)
    _requeue_if_transient(rt, run, lambda: _train(rt, run))


def _train(rt: UpdateContext, run: Run) -> None:
    model_id = run.model_id
    with rt.uow() as uow:
        model = uow.models.lock(model_id)
        if model is None or not (
            model.status == ModelState.QUEUED or (model.status == ModelState.TRAINING and _stale(rt, model))
        ):
            return
        model.status, model.phase = ModelState.TRAINING, "starting"
        model.progress, model.eta_seconds = 0.0, None
        model.started_at, model.error = utcnow(), None
        run.started_at = model.started_at
        uow.audit.append(model_chain(model_id), "training.started", model_id=model_id)
        uow.commit()
    started = time.perf_counter()
    training = model.training
    try:
        if training is None:
            raise UnlearningError("the model's training data is empty")
        state, certificate, size = _fit(rt, model, training, int(model.seed))
        problem = quality_problem(_quality(state, run), model.config.get("min_quality"))
        if problem:
            raise UnlearningError(problem)
    except Exception as exc:  # any other failure is the model's error, never a crash loop
        if is_transient(exc):
            raise
        _fail_training(rt, run, exc)
        return
    max_buckets = rt.settings.max_buckets
    _release(
        rt,
        run,
        started,
        lambda: release_after_fit(rt.artifacts, state, certificate, training, size, max_buckets),
        lambda release: _record_training(rt, model_id, release, certificate),
    )


def _record_training(
    rt: UpdateContext, model_id: int, release: Release, certificate: Certificate
) -> int | None:
    with rt.uow() as uow:
        model = uow.models.lock(model_id)
        if model is None or model.status != ModelState.TRAINING:
            return None
        version = record_version(
            uow, model, release, kind=VersionKind.INITIAL, budget_epoch=1, num_forgotten=0, request_count=0
        )
        model.budget_epoch = 1
        _ledger(uow, model, version.id, certificate, kind=INITIAL, reason=None)
        uow.audit.append(
            model_chain(model_id),
            "model.trained",
            model_id=model_id,
            version_id=version.id,
            payload={
                "seq": version.seq,
                "train_size": release.train_size,
                "guarantee": certificate.guarantee,
                "weights_sha256": release.released_blob,
            },
        )
        return _serve(rt, uow, model, version, release)


def _fail_training(rt: UpdateContext, run: Run, exc: BaseException) -> None:
    """The model cannot serve: record why, and fail the deletions waiting for it (counted once committed)."""
    model_id = run.model_id
    reason = _failure(run.kind, model_id, exc, "training failed")
    if reason is None:
        return
    with rt.uow() as uow:
        model = uow.models.lock(model_id)
        if model is None or model.status == ModelState.DELETED:
            return
        model.status = model.phase = ModelState.FAILED
        model.error, model.finished_at = reason, utcnow()
        model.eta_seconds = None
        uow.after_commit(partial(_count, run, metrics.TRAININGS.labels(run.kind, "failed")))
        uow.audit.append(
            model_chain(model_id), "training.failed", model_id=model_id, payload={"reason": reason}
        )
        for request in uow.deletions.in_states(model_id, [RequestState.QUEUED]):
            fail_request(uow, model_id, request, f"the model failed to train: {reason}")
        uow.commit()


def retrain_model(rt: UpdateContext, model_id: int, reason: str | None = None) -> None:
    """Retrain a model ``retraining`` without its waiting requests' subjects, in a new budget epoch."""
    run = Run("retrain", model_id, reason=reason)
    _requeue_if_transient(rt, run, lambda: _retrain(rt, run, reason))


def _retrain(rt: UpdateContext, run: Run, reason: str | None) -> None:
    model_id = run.model_id
    with rt.uow() as uow:
        model = uow.models.lock(model_id)
        if model is None or model.status != ModelState.RETRAINING:
            return
        if model.phase != "waiting" and not _stale(rt, model):
            return  # another worker is retraining it
        requests = uow.deletions.in_states(
            model_id, [RequestState.AWAITING_RETRAIN, RequestState.RETRAINING, RequestState.QUEUED]
        )
        if not requests and model.retrain_reason is None:
            _ready(model)  # the requests it was for were canceled: nothing to retrain for
            uow.commit()
            return
        reason = (
            model.retrain_reason
            or reason
            or (_last_reason(uow, requests) if requests else None)
            or "budget exhausted"
        )
        batch = Batch(plan_requests(uow, model_id, requests))
        forgotten = batch.samples
        now = utcnow()
        for request in requests:
            if request.state != RequestState.RETRAINING:
                request.state = RequestState.RETRAINING
                uow.deletions.add_event(request.id, RequestState.RETRAINING, now, reason)
        model.phase = ModelState.RETRAINING
        model.progress, model.eta_seconds, model.started_at = 0.0, None, now
        run.started_at, run.reason = now, reason
        epoch = model.budget_epoch + 1
        uow.audit.append(
            model_chain(model_id),
            "retrain.started",
            model_id=model_id,
            payload={
                "reason": reason,
                "requests": [r.id for r in requests],
                "forgotten": len(forgotten),
                "budget_epoch": epoch,
            },
        )
        training = model.training
        forget_request = batch.forget_request()
        uow.commit()
    started = time.perf_counter()
    try:
        if training is None:
            raise UnlearningError("the model has no training data left to retrain on")
        remaining = _remaining(rt, training, forget_request, forgotten)
        if is_graph(training):  # graph subjects that leave with the requests' items beyond those named
            forgotten = {**departed(rt.cache, training, remaining), **forgotten}
        if not remaining["buckets"]:
            raise UnlearningError("these deletions would leave no training data: nothing to retrain on")
        state, certificate, size = _fit(rt, model, remaining, derive_seed(model.seed, "retrain", epoch))
        _quality(state, run)  # a retrain is never failed for its quality: the deletions must go through
    except Exception as exc:  # any other failure fails the waiting requests
        if is_transient(exc):
            raise
        _fail_retrain(rt, run, exc)
        return
    max_buckets = rt.settings.max_buckets
    written_before_fit = iter([remaining])  # serves the first attempt only

    def write() -> Release:
        # A retry writes the remaining arrays again too: whatever was collected must come back.
        manifest = next(written_before_fit, None) or _remaining(rt, training, forget_request, forgotten)
        return release_after_fit(rt.artifacts, state, certificate, manifest, size, max_buckets)

    def record(release: Release) -> int | None:
        with rt.uow() as uow:
            model = uow.models.lock(model_id)
            if model is None or model.status != ModelState.RETRAINING or model.training != training:
                return None
            requests = uow.deletions.in_states(model_id, [RequestState.RETRAINING])
            by_id = {r.id: r for r in requests}
            applied = Batch([p for p in batch.plans if p.request.id in by_id])
            for plan in applied.plans:
                plan.request = by_id[plan.request.id]
            garbage = erase_from_source(
                uow,
                rt.cache,
                model,
                forgotten,
                old_training=training,
                new_training=release.training,
                request=forget_request,
            )
            version = record_version(
                uow,
                model,
                release,
                kind=VersionKind.RETRAINED,
                budget_epoch=epoch,
                num_forgotten=len(forgotten),
                request_count=len(requests),
                garbage=garbage,
            )
            model.budget_epoch = epoch
            _ledger(
                uow, model, version.id, certificate, kind="retrain", reason=reason, deletions=len(forgotten)
            )
            # Tombstones belong to the epoch that ended: the new epoch starts with nothing forgotten.
            record_erasure(rt, uow, model, applied, dict(forgotten), budget_epoch=epoch - 1)
            completed = {
                "event_type": "retrain.completed",
                "model_id": model_id,
                "request_id": None,
                "version_id": version.id,
                "payload": {
                    "seq": version.seq,
                    "budget_epoch": epoch,
                    "reason": reason,
                    "forgotten": len(forgotten),
                    "train_size": release.train_size,
                    "weights_sha256": release.released_blob,
                },
            }
            mark_applied(uow, model_id, requests, version.id, None, version.seq, completed)
            return _serve(rt, uow, model, version, release)

    _release(rt, run, started, write, record)


def _remaining(
    rt: UpdateContext, training: dict[str, Any], request: ForgetRequest, forgotten: Mapping[str, str]
) -> dict[str, Any]:
    """The manifest of the data a retrain fits on (graphs: without the waiting requests' items)."""
    if is_graph(training):
        return write_graph(rt.artifacts, after_present(rt.cache.dataset(training), request))
    return rt.cache.drop_rows(training, forgotten)[0]


def _last_reason(uow: UnitOfWork, requests: list[Any]) -> str | None:
    for event in reversed(uow.deletions.events(requests[0].id)):
        if event.state == RequestState.AWAITING_RETRAIN and event.detail:
            return event.detail
    return None


def _fail_retrain(rt: UpdateContext, run: Run, exc: BaseException) -> None:
    """The old version keeps serving; the waiting requests fail with the reason (counted once committed)."""
    model_id = run.model_id
    reason = _failure(run.kind, model_id, exc, "retraining failed")
    if reason is None:
        return
    with rt.uow() as uow:
        model = uow.models.lock(model_id)
        if model is None or model.status == ModelState.DELETED:
            return
        waiting = [RequestState.RETRAINING, RequestState.AWAITING_RETRAIN]
        for request in uow.deletions.in_states(model_id, waiting):
            fail_request(uow, model_id, request, reason)
        _ready(model)
        model.error = reason
        uow.after_commit(partial(_count, run, metrics.TRAININGS.labels(run.kind, "failed")))
        uow.audit.append(
            model_chain(model_id), "retrain.failed", model_id=model_id, payload={"reason": reason}
        )
        uow.outbox.add("apply_deletions", {"model_id": model_id}, dedupe_key=f"apply:{model_id}")
        uow.commit()


def _ready(model: Model) -> None:
    """Training, or a retrain, is over (done or failed): so is any retrain asked for through the API."""
    model.status = model.phase = ModelState.READY
    model.progress, model.eta_seconds = 1.0, 0.0
    model.finished_at = utcnow()
    model.retrain_reason = None


def _ledger(
    uow: UnitOfWork,
    model: Model,
    version_id: int,
    certificate: Any,
    *,
    kind: str,
    reason: str | None,
    deletions: int = 0,
) -> None:
    uow.ledger.add(
        model_id=model.id,
        budget_epoch=model.budget_epoch,
        kind=kind,
        version_id=version_id,
        budget_unit=certificate.budget_unit,
        budget_cap=certificate.budget_cap,
        charge=certificate.charge,
        spent=certificate.budget_spent,
        deletions=deletions,
        reason=reason,
    )


def _serve(rt: UpdateContext, uow: UnitOfWork, model: Model, version: ModelVersion, release: Release) -> int:
    """The model ready on ``version``, its updates queued, committed (Redis statistics loaded first)."""
    _ready(model)
    uow.session.flush()
    if release.statistics is not None:
        load_hot_statistics(rt.hot, rt.cache, model.id, version.seq, release.statistics, release.snapshot)
    else:
        rt.hot.clear_stats(model.id)
    uow.outbox.add("apply_deletions", {"model_id": model.id}, dedupe_key=f"apply:{model.id}")
    uow.commit()
    return version.id
