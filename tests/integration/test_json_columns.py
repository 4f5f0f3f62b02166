"""JSON columns through the engine's codec (service.db.jsoncodec) on Postgres (JSONB)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from service.db.base import JSONType
from service.db.engine import make_engine

pytestmark = pytest.mark.integration

_metadata = sa.MetaData()
_docs = sa.Table(
    "json_codec_probe",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("doc", JSONType),
)
VALUE = {
    "buckets": {"0a1b2c3d4e5f": "e3b0c442" * 8},
    "big": 2**70,
    "text": "Zoë, 東京",
    "nested": [1, 2.5, None, True, {"k": []}],
}


@pytest.fixture
def engine(pg_url: str) -> Iterator[sa.Engine]:
    engine = make_engine(pg_url, pool_size=1)
    _metadata.drop_all(engine)
    _metadata.create_all(engine)
    yield engine
    _metadata.drop_all(engine)
    engine.dispose()


def _store(engine: sa.Engine, doc: object) -> object:
    with engine.begin() as conn:
        conn.execute(sa.delete(_docs))
        conn.execute(sa.insert(_docs), {"id": 1, "doc": doc})
    with engine.connect() as conn:
        return conn.execute(sa.select(_docs.c.doc)).scalar_one()


def test_a_document_reads_back_as_written(engine: sa.Engine) -> None:
    assert _store(engine, VALUE) == VALUE


def test_a_non_finite_float_is_refused_by_postgres(engine: sa.Engine) -> None:
    with pytest.raises(sa.exc.DataError):
        _store(engine, {"sigma": math.inf})
