"""SQL for the audit log."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Text, and_, bindparam, cast, func, insert, or_, select, update
from sqlalchemy.orm import Session

from service.audit.chain import GENESIS, event_hash
from service.db.base import table, utcnow
from service.db.tables import SUBJECTS_ERASED_EVENT, AuditEvent, AuditHead, Model, RequestSubject
from service.db.upsert import insert_ignore

# built once on the Core tables (docs/decisions.md, "Statements built once")
_heads = table(AuditHead).c
_LOCK_HEAD = select(_heads.seq, _heads.hash).where(_heads.chain == bindparam("chain")).with_for_update()
_MOVE_HEAD = (
    update(table(AuditHead))
    .where(_heads.chain == bindparam("b_chain"))
    .values(seq=bindparam("b_seq"), hash=bindparam("b_hash"))
)
_INSERT_EVENTS = insert(table(AuditEvent))


@dataclass
class ChainHead:
    """A chain's head as locked in this transaction: its last sequence number and hash."""

    chain: str
    seq: int
    hash: str


def chain_rows(head: ChainHead, events: list[dict[str, Any]], at: datetime) -> list[dict[str, Any]]:
    """``events`` as hashed rows after ``head``, which is advanced to the last."""
    seq, prev = head.seq, head.hash
    rows = []
    for event in events:
        seq += 1
        row = {"chain": head.chain, "chain_seq": seq, "at": at, "prev_hash": prev, **event}
        row["hash"] = prev = event_hash(prev, row)
        rows.append(row)
    head.seq, head.hash = seq, prev
    return rows


class AuditRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def append(
        self,
        chain: str,
        event_type: str,
        *,
        model_id: int | None = None,
        request_id: int | None = None,
        version_id: int | None = None,
        payload: dict[str, Any] | None = None,
    ) -> None:
        ids = {"model_id": model_id, "request_id": request_id, "version_id": version_id}
        self.append_many(chain, [{"event_type": event_type, **ids, "payload": payload or {}}])

    def lock_chain(self, chain: str) -> ChainHead | None:
        """The chain's head (None: no event yet), row-locked until the transaction ends (for :meth:`append_many`)."""
        row = self.session.execute(_LOCK_HEAD, {"chain": chain}).first()
        return ChainHead(chain, row.seq, row.hash) if row is not None else None

    def append_many(self, chain: str, events: list[dict[str, Any]], head: ChainHead | None = None) -> None:
        """Append ``events`` to ``chain`` under its head row lock (``head``: :meth:`lock_chain`'s)."""
        if not events:
            return
        if head is None:
            head = self.lock_chain(chain)
        if head is None:
            insert_ignore(self.session, AuditHead, {"chain": chain, "seq": 0, "hash": GENESIS})
            head = self.lock_chain(chain)
            assert head is not None  # inserted just now, or by a concurrent writer that committed
        rows = chain_rows(head, events, utcnow())
        self.session.execute(_INSERT_EVENTS, rows)
        self.session.execute(_MOVE_HEAD, {"b_chain": chain, "b_seq": head.seq, "b_hash": head.hash})

    def query(
        self,
        *,
        model_id: int | None = None,
        request_id: int | None = None,
        chain: str | None = None,
        subject_hashes: list[str] | None = None,
        event_type: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[AuditEvent]:
        """The events matching every filter given, oldest first (``subject_hashes``: None or non-empty)."""
        stmt = select(AuditEvent)
        if model_id is not None:
            stmt = stmt.where(AuditEvent.model_id == model_id)
        if request_id is not None:
            stmt = stmt.where(AuditEvent.request_id == request_id)
        if chain is not None:
            stmt = stmt.where(AuditEvent.chain == chain)
        if subject_hashes is not None:
            # a literal list, not a subquery: with a subquery in the OR Postgres scans the whole log
            found = select(RequestSubject.request_id).where(RequestSubject.subject_hash.in_(subject_hashes))
            requests = sorted(set(self.session.scalars(found)))
            # datasets' own erasures name hashes in the payload (inlined type: the partial index applies)
            named = and_(
                AuditEvent.event_type
                == bindparam("erased_type", SUBJECTS_ERASED_EVENT, literal_execute=True),
                or_(*(cast(AuditEvent.payload, Text).contains(h) for h in subject_hashes)),
            )
            stmt = stmt.where(or_(AuditEvent.request_id.in_(requests), named))
        if event_type is not None:
            stmt = stmt.where(AuditEvent.event_type == event_type)
        if since is not None:
            stmt = stmt.where(AuditEvent.at >= since)
        if until is not None:
            stmt = stmt.where(AuditEvent.at < until)
        if after_id is not None:
            stmt = stmt.where(AuditEvent.id > after_id)
        return list(self.session.scalars(stmt.order_by(AuditEvent.id).limit(limit)))

    def events_per_chain(self, chains: list[str] | None) -> dict[str, int]:
        """chain -> how many events the log holds of it, among ``chains`` (None: every chain)."""
        counts = select(AuditEvent.chain, func.count()).group_by(AuditEvent.chain)
        if chains is not None:
            counts = counts.where(AuditEvent.chain.in_(chains))
        return {str(name): int(n) for name, n in self.session.execute(counts)}

    def models_known(self, model_ids: list[int] | None) -> tuple[set[int], set[int]]:
        """(the registered models, the models the log's events name), among ``model_ids`` (None: all)."""
        registered = select(Model.id)
        named = select(AuditEvent.model_id).where(AuditEvent.model_id.is_not(None)).distinct()
        if model_ids is not None:
            registered = registered.where(Model.id.in_(model_ids))
            named = named.where(AuditEvent.model_id.in_(model_ids))
        return set(self.session.scalars(registered)), {
            m for m in self.session.scalars(named) if m is not None
        }

    def heads(self, chains: list[str] | None = None) -> list[AuditHead]:
        stmt = select(AuditHead).order_by(AuditHead.chain)
        if chains is not None:
            stmt = stmt.where(AuditHead.chain.in_(chains))
        return list(self.session.scalars(stmt))

    def chain_events(self, chain: str, batch: int = 1000) -> Iterator[AuditEvent]:
        """Every event of ``chain`` in sequence order, read in pages."""
        last = 0
        while True:
            page = select(AuditEvent).where(AuditEvent.chain == chain, AuditEvent.chain_seq > last)
            rows = list(self.session.scalars(page.order_by(AuditEvent.chain_seq).limit(batch)))
            yield from rows
            if len(rows) < batch:
                return
            last = rows[-1].chain_seq
