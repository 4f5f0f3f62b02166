"""The audit chains' statements for the pipelined paths (:mod:`service.db.postgres`), on psycopg."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import Connection, Cursor

from service.audit.chain import GENESIS
from service.audit.repository import ChainHead, chain_rows
from service.db.postgres import array_columns, jsonb_element

_LOCK_HEAD = "SELECT seq, hash FROM audit_heads WHERE chain = %s FOR UPDATE"
_NEW_HEAD = "INSERT INTO audit_heads (chain, seq, hash) VALUES (%s, 0, %s) ON CONFLICT DO NOTHING"
_MOVE_HEAD = "UPDATE audit_heads SET seq = %s, hash = %s WHERE chain = %s"
_AUDIT_EVENTS = """
INSERT INTO audit_events (chain, chain_seq, at, event_type, model_id, request_id, version_id, payload,
    prev_hash, hash)
SELECT %s, t.chain_seq, %s, t.event_type, t.model_id, t.request_id, t.version_id, t.payload, t.prev_hash, t.hash
FROM unnest(%s::int[], %s::varchar[], %s::int[], %s::int[], %s::int[], %s::jsonb[], %s::varchar[],
    %s::varchar[]) WITH ORDINALITY
    AS t(chain_seq, event_type, model_id, request_id, version_id, payload, prev_hash, hash, n)
ORDER BY t.n
"""


def lock_chain_head(conn: Connection[Any], chain: str, *, create: bool = True) -> Cursor[Any]:
    """In a pipeline: the chain's head, locked (read by :func:`chain_head`); ``create``: one made first."""
    if create:
        conn.execute(_NEW_HEAD, (chain, GENESIS))
    return conn.execute(_LOCK_HEAD, (chain,))


def chain_head(chain: str, row: Any) -> ChainHead:
    """The head :func:`lock_chain_head` read (with ``create``, it exists)."""
    if row is None:
        raise LookupError(f"the audit chain {chain} has no head")
    return ChainHead(chain, int(row[0]), str(row[1]))


def append_events(conn: Connection[Any], head: ChainHead, events: list[dict[str, Any]], at: datetime) -> None:
    """Append ``events`` to ``head``'s locked chain and move its head: two statements however many events."""
    if not events:
        return
    columns = array_columns(
        [
            (r["chain_seq"], r["event_type"], r["model_id"], r["request_id"], r["version_id"],
             jsonb_element(r["payload"]), r["prev_hash"], r["hash"])
            for r in chain_rows(head, events, at)
        ]
    )  # fmt: skip
    conn.execute(_AUDIT_EVENTS, (head.chain, at, *columns))
    conn.execute(_MOVE_HEAD, (head.seq, head.hash, head.chain))
