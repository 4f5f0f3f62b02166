"""Where a deployment still names a subject in plain: every row of every table of its database (as text),
every blob of its artifact directory (decompressed when gzip- or zlib-compressed), every key and value of
its Redis database, and log files. Each hit is one string saying where, and which id.

The approach of ``tests/integration/test_no_plain_ids.py``, against a deployment run as subprocesses (its
database URL, artifact directory and Redis URL rather than an in-process runtime).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import redis
from psycopg import sql


def _dsn(database_url: str) -> str:
    """A SQLAlchemy URL (``postgresql+psycopg://``) as psycopg takes it."""
    return database_url.replace("postgresql+psycopg://", "postgresql://", 1)


def database_hits(database_url: str, needles: Sequence[str]) -> list[str]:
    """``table: needle`` for every row of every base table of the current schema whose text names a needle."""
    hits: list[str] = []
    with psycopg.connect(_dsn(database_url), autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            )
        ]
        for table in tables:
            query = sql.SQL("SELECT t::text FROM {} t WHERE strpos(t::text, %s) > 0").format(
                sql.Identifier(table)
            )
            for needle in needles:
                hits += [f"database {table}: {needle}" for _ in conn.execute(query, (needle,))]
    return hits


def _decoded(data: bytes) -> bytes:
    """``data``, decompressed when it is a gzip or zlib stream (else as it is)."""
    try:
        if data[:2] == b"\x1f\x8b":
            return gzip.decompress(data)
        if data[:1] == b"\x78" and len(data) > 2 and int.from_bytes(data[:2], "big") % 31 == 0:
            return zlib.decompress(data)
    except (OSError, zlib.error, EOFError):
        pass
    return data


def _hits_in(where: str, data: bytes, needles: Sequence[str]) -> list[str]:
    return [f"{where}: {n}" for n in needles if n.encode() in data]


def blob_hits(root: Path, needles: Sequence[str]) -> list[str]:
    """Every file under ``root`` (the artifact directory) that names a needle, as stored or decompressed."""
    hits: list[str] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        decoded = _decoded(raw)
        found = set(_hits_in(f"blob {path.relative_to(root)}", raw, needles))
        found |= set(_hits_in(f"blob {path.relative_to(root)}", decoded, needles))
        hits += sorted(found)
    return hits


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _redis_values(client: redis.Redis) -> Iterable[tuple[bytes, bytes]]:
    """(key, key or one of its values) for every key of the database."""
    for key in client.scan_iter(count=1000):
        yield _as_bytes(key), _as_bytes(key)
        kind = client.type(key)
        values: list[Any] = []
        if kind == b"hash":
            values = [x for pair in client.hgetall(key).items() for x in pair]
        elif kind == b"string":
            values = [client.get(key) or b""]
        elif kind == b"list":
            values = list(client.lrange(key, 0, -1))
        elif kind == b"set":
            values = list(client.smembers(key))
        elif kind == b"zset":
            values = list(client.zrange(key, 0, -1))
        elif kind == b"stream":
            values = [
                x for _, fields in client.xrange(key) or [] for pair in (fields or {}).items() for x in pair
            ]
        for value in values:
            yield _as_bytes(key), _as_bytes(value)


def redis_hits(redis_url: str, needles: Sequence[str]) -> list[str]:
    """Every key of the Redis database at ``redis_url`` whose name or a value names a needle."""
    client = redis.Redis.from_url(redis_url)
    hits: set[str] = set()
    for key, value in _redis_values(client):
        hits |= set(_hits_in(f"redis {key.decode(errors='replace')}", _decoded(value), needles))
    return sorted(hits)


def file_hits(paths: Iterable[Path], needles: Sequence[str]) -> list[str]:
    """Every file of ``paths`` (logs) that names a needle."""
    return [hit for p in paths if p.exists() for hit in _hits_in(f"file {p.name}", p.read_bytes(), needles)]


def everywhere(
    database_url: str, artifact_dir: Path, redis_url: str, logs: Iterable[Path], needles: Sequence[str]
) -> list[str]:
    """The hits of the database, the artifact directory, Redis and ``logs``, in that order."""
    return [
        *database_hits(database_url, needles),
        *blob_hits(artifact_dir, needles),
        *redis_hits(redis_url, needles),
        *file_hits(logs, needles),
    ]
