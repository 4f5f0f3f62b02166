"""The round's pipelined reads on Postgres (service.jobs.postgres_path.lock_round): the rows it reads
become the session's objects (changes to them are flushed, as to objects the ORM loaded), and the
model's row stays locked until the transaction ends, as ModelRepository.lock leaves it."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.orm import object_session

from service.jobs.postgres_path import lock_round
from service.runtime import Runtime
from tests.integration.conftest import Client

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
