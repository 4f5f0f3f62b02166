"""Garbage collection against writers that rely on a blob already stored (blobs are content-addressed,
so a writer's put of bytes identical to another holder's garbage writes nothing).

Without the protocol of ``service.storage.refs`` a completion could delete such a blob after the
writer's put and before its commit, leaving a committed row that names a missing blob. On the real
Postgres (advisory locks, separate connections) and on the embedded SQLite (BEGIN IMMEDIATE).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, text

from service.db.tables import ArtifactRef
from service.jobs.completion import collect_garbage
from service.runtime import Runtime
from service.settings import Settings
from service.storage.artifacts import BlobVanished
from service.storage.refs import rewrite_if_collected
from tests.databases import fresh_database_url

pytestmark = pytest.mark.integration


@pytest.fixture(params=["production", "embedded"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Runtime]:
    if request.param == "production":
        yield request.getfixturevalue("runtime")
        return
    rt = Runtime(Settings(mode="embedded", var_dir=tmp_path, database_url=fresh_database_url(), demo_model=False))
    rt.migrate()
    yield rt
    rt.engine.dispose()


def held_by(rt: Runtime, holder: str) -> set[str]:
    with rt.uow() as uow:
        return set(uow.session.scalars(select(ArtifactRef.blob).where(ArtifactRef.holder == holder)))


def garbage_of_another_holder(rt: Runtime) -> tuple[bytes, str]:
    """A blob whose only holder has just let it go (as a version's transaction does before its
    completion collects the garbage)."""
    data = b"bytes two holders share " + secrets.token_bytes(8)
    first = f"test:first:{secrets.token_hex(4)}"
    digest = rt.artifacts.put(data)
    with rt.uow() as uow:
        uow.refs.hold(first, [digest])
        uow.commit()
    with rt.uow() as uow:
        assert uow.refs.release(first) == {digest}
        uow.commit()
    return data, digest


def collect(rt: Runtime, blobs: list[str]) -> None:
    with rt.uow() as uow:
        collect_garbage(uow, rt, blobs)
        uow.commit()


def test_a_commit_relying_on_a_collected_blob_rolls_back_and_a_retry_writes_it_again(stores: Runtime) -> None:
    rt = stores
    data, digest = garbage_of_another_holder(rt)
    writer = f"test:writer:{secrets.token_hex(4)}"
    attempts: list[int] = []

    def attempt() -> None:
        attempts.append(1)
        assert rt.artifacts.put(data) == digest  # the first time: already stored, nothing written
        if len(attempts) == 1:
            collect(rt, [digest])  # the completion runs between the writer's put and its commit
            assert not rt.artifacts.exists(digest)
        with rt.uow() as uow:
            uow.refs.hold(writer, [digest])
            uow.commit()

    # The same race without the retry: the commit raises, and nothing is committed.
    with pytest.raises(BlobVanished) as raised, rt.uow() as uow:
        assert rt.artifacts.put(data) == digest
        collect(rt, [digest])
        uow.refs.hold(writer, [digest])
        uow.commit()
    assert raised.value.digests == [digest]
    assert held_by(rt, writer) == set()

    rewrite_if_collected(attempt, job="test")
    assert len(attempts) == 2
    assert held_by(rt, writer) == {digest}
    assert rt.artifacts.get(digest) == data
    collect(rt, [digest])  # held now: a collection keeps it
    assert rt.artifacts.exists(digest)


def test_a_collection_waits_for_a_committing_writer_and_keeps_what_it_references(runtime: Runtime) -> None:
    """Postgres: a writer between its check and its commit holds the lock; the collector waits, then
    sees the committed reference. (Without the lock the collector would delete the blob at once.)"""
    rt = runtime
    data, digest = garbage_of_another_holder(rt)
    writer = f"test:writer:{secrets.token_hex(4)}"
    collected = threading.Event()
    with rt.uow() as uow:
        assert rt.artifacts.put(data) == digest
        uow.refs.hold(writer, [digest])
        uow.refs.lock_for_commit()  # where UnitOfWork.commit takes it, before checking its blobs
        collector = threading.Thread(target=lambda: (collect(rt, [digest]), collected.set()))
        collector.start()
        wait_for_a_waiting_advisory_lock(rt)
        assert not collected.is_set()
        uow.commit()
    collector.join(timeout=30)
    assert collected.is_set()
    assert rt.artifacts.get(digest) == data
    assert held_by(rt, writer) == {digest}


def wait_for_a_waiting_advisory_lock(rt: Runtime, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    with rt.engine.connect() as conn:
        while time.monotonic() < deadline:
            waiting = conn.execute(
                text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            ).scalar_one()
            if waiting:
                return
            conn.rollback()  # a fresh snapshot of pg_locks
            time.sleep(0.02)
    raise AssertionError("the collector never waited for the committing writer's lock")
