"""The round's pipelined reads on Postgres (service.jobs.round_repository.lock_round): the rows it reads
become the session's objects (changes to them are flushed, as to objects the ORM loaded), the model's
row stays locked until the transaction ends, as ModelRepository.lock leaves it, and its manifests are
read only when the row changed since this process noted them; a commit sent in a pipeline; a round's
commit sent with its writes, after the blobs it put before the commit's lock are found still stored."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, text
from sqlalchemy.orm import object_session

from service.db.base import utcnow
from service.db.tables import IdempotencyKey
from service.jobs import drain, update_round
from service.jobs.completion_repository import complete_version
from service.jobs.round_repository import lock_round
from service.jobs.state import KnownManifests
from service.runtime import Runtime
from service.uow import UnitOfWork
from tests.integration.conftest import Client, deployment_of_its_own

pytestmark = pytest.mark.integration


def test_a_round_s_reads_lock_the_model_and_become_the_session_s_objects(
    client: Client, runtime: Runtime, pg_url: str
) -> None:
    model_id = client.trained(n=40, samples_per_owner=2)
    with runtime.uow() as uow:
        conn = uow.postgres_connection()
        assert conn is not None
        locked = lock_round(conn, uow.session, model_id, limit=10)
        model = locked.model
        assert model is not None and object_session(model) is uow.session
        assert locked.version is not None and locked.version.id == model.current_version_id
        assert locked.requests == [] and locked.owner_samples == {} and locked.sample_owner == {}
        assert model.training is not None and model.training["buckets"]  # the deferred manifests too
        assert model.created_at.tzinfo is not None and model.created_at.utcoffset().total_seconds() == 0
        with (
            psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://")) as other,
            pytest.raises(psycopg.errors.LockNotAvailable),
        ):
            other.execute("SELECT id FROM models WHERE id = %s FOR UPDATE NOWAIT", (model_id,))
        eta = model.eta_seconds
        model.eta_seconds = 1234.5
        uow.session.flush()
        # Read again in the same transaction: the object the session holds is refreshed, not doubled.
        again = lock_round(conn, uow.session, model_id, limit=10)
        assert again.model is model and model.eta_seconds == 1234.5
        uow.commit()
    with runtime.uow() as uow:
        stored = uow.models.get(model_id)
        assert stored is not None and stored.eta_seconds == 1234.5
        stored.eta_seconds = eta
        uow.commit()


def _xmin(conn: Connection, model_id: int) -> str:
    """The xmin of the model's row version, as this connection sees it."""
    return str(conn.execute(text("SELECT xmin::text FROM models WHERE id = :id"), {"id": model_id}).scalar())


def test_a_round_reads_the_manifests_only_when_the_row_changed_since_they_were_noted(
    client: Client, runtime: Runtime
) -> None:
    """KnownManifests: what a process noted for the row version it wrote stands in for the manifests
    while the row is still that version; once anything changes the row, or for a version that never
    committed, the manifests are read from the row."""
    model_id = client.trained(n=40, samples_per_owner=2)
    noted: dict[str, Any] = {"training": {"buckets": {}, "noted": 1}, "statistics": None}
    manifests = KnownManifests()

    def round_model() -> Any:
        with runtime.uow() as uow:
            conn = uow.postgres_connection()
            assert conn is not None
            model = lock_round(conn, uow.session, model_id, limit=1, manifests=manifests).model
            assert model is not None
            values = model.training, model.statistics
        return values

    stored = round_model()
    assert stored[0]["buckets"] and stored[1] is not None  # nothing known: read from the row
    with runtime.engine.connect() as conn:
        manifests.note(model_id, _xmin(conn, model_id), noted)
    assert round_model() == ({"buckets": {}, "noted": 1}, None)  # the row is that version: not read
    with runtime.engine.begin() as conn:  # any change to the row makes a new version
        conn.execute(text("UPDATE models SET eta_seconds = eta_seconds WHERE id = :id"), {"id": model_id})
    assert round_model() == stored
    with runtime.engine.connect() as conn:  # a version noted by a transaction that rolled back
        conn.execute(text("UPDATE models SET eta_seconds = eta_seconds WHERE id = :id"), {"id": model_id})
        rolled_back = _xmin(conn, model_id)
        conn.rollback()
    manifests.note(model_id, rolled_back, noted)
    assert round_model() == stored


_CLAIM = """
INSERT INTO idempotency_keys (scope, key, fingerprint, status, created_at, expires_at)
VALUES ('send-commit-test', %s, 'f', 'in_flight', now(), now() + interval '1 hour')
"""


def _stored_keys(runtime: Runtime, *keys: str) -> set[str]:
    """Which of ``keys`` another connection sees committed."""
    with runtime.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT key FROM idempotency_keys WHERE scope = 'send-commit-test' AND key = ANY(:keys)"),
            {"keys": list(keys)},
        )
        return {row[0] for row in rows}


def test_a_commit_sent_in_the_pipeline_ends_the_transaction_there(runtime: Runtime) -> None:
    """UnitOfWork.send_commit: the pipeline's statements are committed with its round trip; the unit of
    work's own commit afterwards has nothing left to do and commits nothing twice."""
    key = f"folded-{uuid.uuid4().hex}"
    with runtime.uow() as uow:
        conn = uow.postgres_connection()
        assert conn is not None
        with conn.pipeline():
            conn.execute(_CLAIM, (key,))
            assert uow.send_commit(conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert _stored_keys(runtime, key) == {key}  # seen by others before uow.commit()
        uow.commit()
    assert _stored_keys(runtime, key) == {key}


def test_a_commit_with_work_of_its_own_is_not_sent_in_the_pipeline(runtime: Runtime) -> None:
    """With an object the session would flush pending (an outbox message, say), send_commit sends
    nothing: the statements and the object commit together at uow.commit(), or not at all."""
    kept, dropped = f"kept-{uuid.uuid4().hex}", f"dropped-{uuid.uuid4().hex}"
    flushed_later = f"{kept}-orm"
    with runtime.uow() as uow:
        conn = uow.postgres_connection()
        assert conn is not None
        uow.session.add(
            IdempotencyKey(
                scope="send-commit-test",
                key=flushed_later,
                fingerprint="f",
                status="in_flight",
                expires_at=utcnow() + timedelta(hours=1),
            )
        )
        with conn.pipeline():
            conn.execute(_CLAIM, (kept,))
            assert not uow.send_commit(conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert _stored_keys(runtime, kept) == set()
        uow.commit()
    with runtime.uow() as uow:
        conn = uow.postgres_connection()
        assert conn is not None
        uow.refs.held.add("0" * 64)  # a reference the commit must check first
        with conn.pipeline():
            conn.execute(_CLAIM, (dropped,))
            assert not uow.send_commit(conn)
        # the unit of work ends without its commit: nothing of it stays
    assert _stored_keys(runtime, kept, flushed_later, dropped) == {kept, flushed_later}


def test_a_completion_publishes_the_version_it_was_handed_first_and_the_current_one_if_newer(
    client: Client, runtime: Runtime
) -> None:
    """complete_version with ``committed``: the version the caller committed is served while Postgres
    answers; the current version as well only when the model has moved on since. Without it, only the
    current version is served, after the answers."""
    model_id = client.trained(n=40, samples_per_owner=2)
    with runtime.uow() as uow:
        first = uow.models.current_version_id(model_id)
    request = client.delete(model_id, owner_ids=["owner-00000"])
    client.done(request["id"])
    with runtime.uow() as uow:
        current = uow.models.current_version_id(model_id)
    assert current is not None and first is not None and current != first

    def served(version_id: int, committed: bool) -> list[int]:
        published: list[int] = []
        with runtime.uow() as uow:
            conn = uow.postgres_connection()
            version = uow.models.version(version_id)
            assert conn is not None and version is not None
            complete_version(
                conn, uow, lambda v: published.append(v.id), lambda blobs: None, model_id, version, committed
            )
        return published

    assert served(current, committed=True) == [current]
    assert served(first, committed=True) == [first, current]
    assert served(first, committed=False) == [current]


def _current_version(runtime: Runtime, model_id: int) -> int | None:
    """The model's current version as another connection sees it committed."""
    with runtime.engine.connect() as conn:
        found = conn.execute(text("SELECT current_version_id FROM models WHERE id = :id"), {"id": model_id})
        return found.scalar()


def test_a_round_commits_with_its_writes_and_its_completion_s_reads_come_back_with_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round's COMMIT goes in its write pipeline, and a new transaction with its completion's reads
    (its applied requests locked) in the same round trip: when the completion goes on, other connections
    see the version committed and the request applied, and cannot lock the request. No worker runs in
    this deployment: the test runs the job itself."""
    with deployment_of_its_own(tmp_path) as deployment:
        client, runtime = deployment.client, deployment.runtime
        model_id = deployment.trained_model()
        trained = _current_version(runtime, model_id)
        request_id = int(client.delete(model_id, owner_ids=["owner-00000"])["id"])
        seen: list[tuple[psycopg.pq.TransactionStatus, int | None, str, bool]] = []
        complete_in_round_transaction = update_round.complete_in_round_transaction
        database = runtime.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

        def observed(rt: Runtime, uow: UnitOfWork, *args: Any) -> None:
            conn = uow.postgres_connection()
            assert conn is not None
            with psycopg.connect(database) as other:
                state = other.execute("SELECT state FROM deletion_requests WHERE id = %s", (request_id,))
                try:
                    other.execute(
                        "SELECT id FROM deletion_requests WHERE id = %s FOR UPDATE NOWAIT", (request_id,)
                    )
                    locked = False
                except psycopg.errors.LockNotAvailable:
                    locked = True
                seen.append(
                    (
                        conn.info.transaction_status,
                        _current_version(runtime, model_id),
                        state.fetchone()[0],
                        locked,
                    )
                )  # type: ignore[index]
            complete_in_round_transaction(rt, uow, *args)

        monkeypatch.setattr(update_round, "complete_in_round_transaction", observed)
        drain.apply_deletions(runtime, model_id)
        monkeypatch.undo()

        assert client.deletion(request_id)["state"] == "completed"
        new = _current_version(runtime, model_id)
        assert new is not None and new != trained
        assert seen == [(psycopg.pq.TransactionStatus.INTRANS, new, "applied", True)]


def test_a_round_whose_new_blob_was_collected_before_the_commit_lock_writes_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blob the round put before the commit's lock was granted may be another holder's garbage, unlinked
    by a collector meanwhile: the round finds it missing once the lock is held, commits nothing, and runs
    again, writing it anew. Here the weights it releases vanish once, just after they are put."""
    with deployment_of_its_own(tmp_path) as deployment:
        client, runtime = deployment.client, deployment.runtime
        model_id = deployment.trained_model()
        trained = _current_version(runtime, model_id)
        request = client.delete(model_id, owner_ids=["owner-00001"])
        released: list[str] = []
        release_after_forget = update_round.release_after_forget

        def collected_once(*args: Any, **kwargs: Any) -> Any:
            release = release_after_forget(*args, **kwargs)
            released.append(release.released_blob)
            if len(released) == 1:
                runtime.artifacts.delete(release.released_blob)
                runtime.cache.forget([release.released_blob])
            return release

        monkeypatch.setattr(update_round, "release_after_forget", collected_once)
        drain.apply_deletions(runtime, model_id)
        monkeypatch.undo()

        assert len(released) == 2 and released[0] == released[1]  # the same bytes, written again
        done = client.deletion(int(request["id"]))
        assert done["state"] == "completed"
        assert _current_version(runtime, model_id) not in (None, trained)
        assert runtime.artifacts.exists(released[1])
        with runtime.uow() as uow:
            version = uow.models.version(_current_version(runtime, model_id) or 0)
            assert version is not None and version.released_blob == released[1]
