"""Liveness of running trainings and retrains by heartbeat (service.jobs.heartbeat), on the real Postgres:
a job that holds its model keeps it alive outside its fit too; a job that did not claim the model never
does; and the reconciler re-queues a training or retrain silent for ``job_heartbeat_timeout_seconds``
(not ``stale_job_seconds``), while it leaves one that beats, or a retrain still waiting its turn; one no
job has claimed is sent again after ``stale_job_seconds``, then at most that often."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from service.db.base import utcnow
from service.db.tables import Model, OutboxMessage
from service.jobs import training
from service.jobs.heartbeat import Heartbeat
from service.maintenance import reconcile
from service.runtime import Runtime
from service.states import ModelState
from tests.integration.conftest import Deployment, deployment_of_its_own, wait_for

pytestmark = pytest.mark.integration

BEAT = 0.2
TIMEOUT = 2.0


@pytest.fixture()
def beating(tmp_path: Path) -> Iterator[Deployment]:
    """A deployment (no worker) whose jobs beat every 0.2 s and are presumed dead after 2 s; the stale
    bound of jobs not started stays at its default (60 s)."""
    with deployment_of_its_own(
        tmp_path, job_heartbeat_seconds=str(BEAT), job_heartbeat_timeout_seconds=str(TIMEOUT)
    ) as d:
        yield d


def _hold(
    rt: Runtime, model_id: int, status: ModelState, phase: str, started: datetime, beat: datetime
) -> None:
    """Put the model in ``status`` as a job leaves it: claimed at ``started``, last heard of at ``beat``."""
    with rt.uow() as uow:
        uow.session.execute(
            update(Model)
            .where(Model.id == model_id)
            .values(status=status, phase=phase, started_at=started, updated_at=beat)
        )
        uow.commit()


def _heard_at(rt: Runtime, model_id: int) -> datetime:
    with rt.uow() as uow:
        return uow.session.scalars(select(Model.updated_at).where(Model.id == model_id)).one()


def _requeued(rt: Runtime, task: str, model_id: int, since: datetime) -> bool:
    with rt.uow() as uow:
        payloads = uow.session.scalars(
            select(OutboxMessage.payload).where(OutboxMessage.task == task, OutboxMessage.created_at >= since)
        )
        return any(p.get("model_id") == model_id for p in payloads)


def test_a_job_that_claimed_its_model_keeps_it_alive_outside_the_fit(beating: Deployment) -> None:
    rt, model_id = beating.runtime, beating.trained_model()
    long_ago = utcnow() - timedelta(minutes=10)
    with Heartbeat(rt, model_id, [ModelState.RETRAINING]) as heartbeat:
        _hold(rt, model_id, ModelState.RETRAINING, "retraining", utcnow(), long_ago)  # the job claims it
        wait_for(lambda: _heard_at(rt, model_id) > long_ago, 10, 0.05, "a heartbeat")
        heard = _heard_at(rt, model_id)
        time.sleep(4 * BEAT)  # no progress report: only the heartbeat writes
        assert _heard_at(rt, model_id) > heard
    assert heartbeat.beats >= 2


def test_a_job_that_did_not_claim_the_model_never_keeps_it_alive(beating: Deployment) -> None:
    rt, model_id = beating.runtime, beating.trained_model()
    long_ago = utcnow() - timedelta(minutes=10)
    # another job claimed it before this one began, and died
    _hold(rt, model_id, ModelState.TRAINING, "fitting", long_ago, long_ago)
    with Heartbeat(rt, model_id, [ModelState.TRAINING]) as heartbeat:
        time.sleep(4 * BEAT)
        assert not heartbeat.beat()
    assert heartbeat.beats == 0 and _heard_at(rt, model_id) == long_ago


def test_a_job_run_by_the_runtime_beats_while_it_holds_its_model(
    beating: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt, model_id = beating.runtime, beating.trained_model()
    long_ago = utcnow() - timedelta(minutes=10)
    _hold(rt, model_id, ModelState.RETRAINING, "waiting", long_ago, long_ago)
    heard: list[datetime] = []

    def slow_retrain(context: Runtime, model_id: int) -> None:
        _hold(context, model_id, ModelState.RETRAINING, "retraining", utcnow(), utcnow())
        time.sleep(5 * BEAT)  # writing its release: no progress report
        heard.append(_heard_at(context, model_id))
        _hold(context, model_id, ModelState.READY, "ready", utcnow(), utcnow())

    monkeypatch.setattr(training, "retrain_model", slow_retrain)
    claimed = utcnow()
    rt.run_job("retrain_model", {"model_id": model_id})
    assert heard and heard[0] > claimed + timedelta(seconds=BEAT)


def test_the_reconciler_requeues_a_silent_training_or_retrain_after_the_heartbeat_timeout(
    beating: Deployment,
) -> None:
    rt = beating.runtime
    training_id, retrain_id, beating_id, waiting_id = (beating.trained_model() for _ in range(4))
    now = utcnow()
    silent = now - timedelta(seconds=TIMEOUT + 1)  # far inside stale_job_seconds (60 s)
    _hold(rt, training_id, ModelState.TRAINING, "fitting", silent, silent)
    _hold(rt, retrain_id, ModelState.RETRAINING, "retraining", silent, silent)
    _hold(rt, beating_id, ModelState.RETRAINING, "retraining", silent, now)
    _hold(rt, waiting_id, ModelState.RETRAINING, "waiting", silent, silent)  # its turn on the lane comes
    reconcile(rt)
    assert _requeued(rt, "train_model", training_id, now)
    assert _requeued(rt, "retrain_model", retrain_id, now)
    assert not _requeued(rt, "retrain_model", beating_id, now)
    assert not _requeued(rt, "retrain_model", waiting_id, now)


def test_an_unclaimed_training_or_retrain_is_sent_again_after_the_stale_bound_then_at_most_that_often(
    beating: Deployment,
) -> None:
    """A worker killed after taking the message, before claiming the model, leaves it queued or waiting
    with no heartbeat: the reconciler sends the job again, marks the model, and a later pass inside the
    bound sends nothing more (a training waiting its turn on a busy lane gets one copy per bound)."""
    rt = beating.runtime
    queued_id, waiting_id = (beating.trained_model() for _ in range(2))
    now = utcnow()
    stale = now - timedelta(seconds=rt.settings.stale_job_seconds + 1)
    _hold(rt, queued_id, ModelState.QUEUED, "queued", stale, stale)
    _hold(rt, waiting_id, ModelState.RETRAINING, "waiting", stale, stale)
    reconcile(rt)
    assert _requeued(rt, "train_model", queued_id, now)
    assert _requeued(rt, "retrain_model", waiting_id, now)
    assert _heard_at(rt, queued_id) >= now and _heard_at(rt, waiting_id) >= now  # the re-send's mark
    with rt.uow() as uow:  # published: a new message would no longer be dropped as a duplicate
        uow.session.execute(
            update(OutboxMessage).where(OutboxMessage.dispatched_at.is_(None)).values(dispatched_at=utcnow())
        )
        uow.commit()
    later = utcnow()
    reconcile(rt)
    assert not _requeued(rt, "train_model", queued_id, later)
    assert not _requeued(rt, "retrain_model", waiting_id, later)
