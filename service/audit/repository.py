"""SQL for the audit log."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Text, and_, bindparam, cast, insert, or_, select, update
from sqlalchemy.orm import Session

from service.audit.chain import GENESIS, event_hash
from service.db.base import table, utcnow
from service.db.tables import SUBJECTS_ERASED_EVENT, AuditEvent, AuditHead, RequestSubject
from service.db.upsert import insert_ignore

# Every transaction of a deletion appends to its model's chain: the statements are built once, on the
# Core tables (service.db.base, "Statements built once").
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
    """``events`` (dicts with event_type, model_id, request_id, version_id, payload) as rows of the
    chain after ``head``, each hashed onto its predecessor (:func:`service.audit.chain.event_hash`);
    ``head`` moves to the last of them, so that a caller appending again continues the chain."""
    seq, prev = head.seq, head.hash
    rows = []
    for event in events:
        seq += 1
        row = {"chain": head.chain, "chain_seq": seq, "at": at, "prev_hash": prev, **event}
        row["hash"] = prev = event_hash(
            row["prev_hash"],
            chain=head.chain,
            chain_seq=seq,
            at=at,
            event_type=row["event_type"],
            model_id=row["model_id"],
            request_id=row["request_id"],
            version_id=row["version_id"],
            payload=row["payload"],
        )
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
        self.append_many(
            chain,
            [
                {
                    "event_type": event_type,
                    "model_id": model_id,
                    "request_id": request_id,
                    "version_id": version_id,
                    "payload": payload or {},
                }
            ],
        )

    def lock_chain(self, chain: str) -> ChainHead | None:
        """The chain's head row (None if the chain has no event yet), locked until the transaction ends,
        as :meth:`append_many` would lock it: for a transaction that must hold it before a later lock.
        Hand it to :meth:`append_many` (``head=``) to spare a second read."""
        row = self.session.execute(_LOCK_HEAD, {"chain": chain}).first()
        return ChainHead(chain, row.seq, row.hash) if row is not None else None

    def append_many(self, chain: str, events: list[dict[str, Any]], head: ChainHead | None = None) -> None:
        """Append ``events`` (dicts with event_type, model_id, request_id, version_id, payload) to ``chain``.

        The chain's head row is locked until the transaction ends: writers of one chain are serialised,
        so sequence numbers have no gaps and each event links to its true predecessor, while writers of
        different chains (models) do not contend. Three statements however many events (two when
        ``head`` is the chain's head as :meth:`lock_chain` returned it earlier in this transaction).
        """
        if not events:
            return
        if head is None:
            head = self.lock_chain(chain)
        if head is None:
            insert_ignore(self.session, AuditHead, {"chain": chain, "seq": 0, "hash": GENESIS})
            head = self.lock_chain(chain)
            assert head is not None  # inserted just now, or by a concurrent writer that committed
        rows = chain_rows(head, events, utcnow())
        # Every row names every column (a version event's request_id is None), so all go as one executemany.
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
        """The events matching every filter given, oldest first; ``subject_hashes`` is None or names at
        least one subject."""
        stmt = select(AuditEvent)
        if model_id is not None:
            stmt = stmt.where(AuditEvent.model_id == model_id)
        if request_id is not None:
            stmt = stmt.where(AuditEvent.request_id == request_id)
        if chain is not None:
            stmt = stmt.where(AuditEvent.chain == chain)
        if subject_hashes is not None:
            # The subjects' requests first, as a list: with a subquery in the OR, Postgres scans the
            # whole log; with a list, it reads the request_id index and the partial index below.
            requests = sorted(
                set(
                    self.session.scalars(
                        select(RequestSubject.request_id).where(
                            RequestSubject.subject_hash.in_(subject_hashes)
                        )
                    )
                )
            )
            # A dataset that erased a subject itself (no request, service.datasets.erasure) names it in
            # its event's payload; keyed hashes are 64 hex characters, so a text match cannot misfire.
            # The event type is written into the SQL, not bound, so that the planner can match the
            # partial index ix_audit_events_subjects_erased whatever plan it caches.
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

    def heads(self, chains: list[str] | None = None) -> list[AuditHead]:
        stmt = select(AuditHead).order_by(AuditHead.chain)
        if chains is not None:
            stmt = stmt.where(AuditHead.chain.in_(chains))
        return list(self.session.scalars(stmt))

    def chain_events(self, chain: str, batch: int = 1000) -> Iterator[AuditEvent]:
        """Every event of ``chain`` in sequence order, read in pages."""
        last = 0
        while True:
            rows = list(
                self.session.scalars(
                    select(AuditEvent)
                    .where(AuditEvent.chain == chain, AuditEvent.chain_seq > last)
                    .order_by(AuditEvent.chain_seq)
                    .limit(batch)
                )
            )
            yield from rows
            if len(rows) < batch:
                return
            last = rows[-1].chain_seq
