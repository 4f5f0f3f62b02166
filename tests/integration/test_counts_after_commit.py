"""Counters of domain events move only once the transaction recording the event committed: a deletion
intake, or a request's failure, whose COMMIT Postgres refuses (a deferred constraint trigger) counts
nothing, not even when the intake tries the submission again on its own; the same commit, allowed, counts
once. A COMMIT sent in a pipeline runs the unit of work's after-commit hooks only once it is known to have
committed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import func, select, text

from service.db.tables import DeletionRequest
from service.jobs.request_lifecycle import fail_request
from service.runtime import Runtime
from service.states import RequestState
from tests.integration.conftest import Deployment, key

pytestmark = pytest.mark.integration

_REFUSE = """
CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER {event} ON deletion_requests
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW {when} EXECUTE FUNCTION refuse_at_commit();
"""
_ALLOW = "DROP TRIGGER refuse_at_commit ON deletion_requests; DROP FUNCTION refuse_at_commit();"


def _counted(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def _execute(runtime: Runtime, statements: str) -> None:
    with runtime.uow() as uow:
        uow.session.execute(text(statements))
        uow.commit()


@contextmanager
def commits_refused(runtime: Runtime, event: str, when: str = "") -> Iterator[None]:
    """Every transaction that did ``event`` on a deletion request fails at its COMMIT (rolled back)."""
    _execute(runtime, _REFUSE.format(event=event, when=when))
    try:
        yield
    finally:
        _execute(runtime, _ALLOW)


def _requests(runtime: Runtime, model_id: int) -> int:
    with runtime.uow() as uow:
        query = select(func.count()).select_from(DeletionRequest).where(DeletionRequest.model_id == model_id)
        return int(uow.session.scalar(query) or 0)


def test_a_deletion_intake_that_fails_at_commit_counts_nothing_received(deployment: Deployment) -> None:
    d = deployment
    model_id = d.trained_model()
    path, body = f"/v1/models/{model_id}/deletions", {"owner_ids": ["owner-00000"]}
    before = _counted("lethe_deletions_received_total")

    with commits_refused(d.runtime, "INSERT"):  # the batch fails, then the submission alone fails too
        refused = d.client.http.post(path, json=body, headers=key())
    assert refused.status_code >= 500, refused.text
    assert _requests(d.runtime, model_id) == 0
    assert _counted("lethe_deletions_received_total") == before

    bulk = {"items": [body, {"owner_ids": ["owner-00001"]}]}
    accepted = d.client.http.post(f"{path}/bulk", json=bulk, headers=key())
    assert accepted.status_code == 202, accepted.text
    assert _requests(d.runtime, model_id) == 2
    assert _counted("lethe_deletions_received_total") == before + 2


def test_a_failure_that_rolls_back_is_not_counted_and_one_that_commits_is(deployment: Deployment) -> None:
    d = deployment
    model_id = d.trained_model()
    request_id = int(d.client.delete(model_id, owner_ids=["owner-00000"])["id"])  # queued: no worker runs
    before = _counted("lethe_deletions_failed_total")

    def fail(commit: bool) -> None:
        with d.runtime.uow() as uow:
            request = uow.deletions.lock(request_id)
            assert request is not None and request.state == RequestState.QUEUED
            fail_request(uow, model_id, request, f"failed on purpose {uuid.uuid4().hex}")
            if commit:
                uow.commit()

    fail(commit=False)  # the unit of work ends without its commit
    refused = commits_refused(d.runtime, "UPDATE", "WHEN (NEW.state = 'failed')")
    with refused, pytest.raises(Exception, match="refused at commit"):
        fail(commit=True)
    assert _counted("lethe_deletions_failed_total") == before
    assert d.client.deletion(request_id)["state"] == "queued"

    fail(commit=True)
    assert d.client.deletion(request_id)["state"] == "failed"
    assert _counted("lethe_deletions_failed_total") == before + 1


def test_after_commit_hooks_wait_for_a_commit_sent_in_a_pipeline_to_be_known(runtime: Runtime) -> None:
    ran: list[str] = []
    with runtime.uow() as uow:
        conn = uow.postgres_connection()
        uow.after_commit(lambda: ran.append("counted"))
        with conn.pipeline():
            conn.execute("SELECT 1")
            assert not uow.send_commit(conn, begin_next=True)  # its outcome known only at the sync
            assert ran == []
            assert uow.send_commit(conn)  # awaited
            assert ran == ["counted"]
        uow.commit()  # nothing left: nothing counted twice
    with runtime.uow() as uow:
        uow.after_commit(lambda: ran.append("rolled back"))
    assert ran == ["counted"]
