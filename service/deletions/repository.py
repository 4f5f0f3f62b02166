"""SQL for deletion requests, their subjects and their state history."""

from __future__ import annotations

import builtins  # the class's ``list`` method shadows the builtin in its annotations
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from service.db.base import table, utcnow
from service.db.tables import DeletionRequest, RequestEvent, RequestSubject


class Completed(NamedTuple):
    """A request just marked completed: what the completion step needs of it."""

    id: int
    callback_url: str | None
    created_at: datetime


class DeletionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, request: DeletionRequest) -> DeletionRequest:
        self.session.add(request)
        self.session.flush()
        return request

    def insert_many(self, rows: list[dict[str, Any]]) -> list[int]:
        """Insert request rows (column -> value) in one batched INSERT ... RETURNING; their ids, in order.

        Core rather than ORM objects: a burst inserts hundreds of requests, and the unit of work would
        spend more time tracking them than the database spends storing them."""
        if not rows:
            return []
        stmt = insert(table(DeletionRequest)).returning(DeletionRequest.id, sort_by_parameter_order=True)
        return list(self.session.scalars(stmt, rows))

    def set_state(self, request_ids: Sequence[int], **values: Any) -> None:
        """One UPDATE for many requests (``state=...``, ``version_id=...``). Loaded request objects are not
        refreshed: callers read the new values back with a query if they need them."""
        if request_ids:
            self.session.execute(
                update(DeletionRequest)
                .where(DeletionRequest.id.in_(list(request_ids)))
                .values(updated_at=utcnow(), **values)
                .execution_options(synchronize_session=False)
            )

    def lock_applied(self, model_id: int, version_id: int) -> list[Completed]:
        """The model's requests applied in ``version_id``, locked until the transaction ends; what the
        completion step needs of them, oldest first."""
        stmt = (
            select(DeletionRequest.id, DeletionRequest.callback_url, DeletionRequest.created_at)
            .where(
                DeletionRequest.model_id == model_id,
                DeletionRequest.state == "applied",
                DeletionRequest.version_id == version_id,
            )
            .order_by(DeletionRequest.id)
            .with_for_update()
        )
        return [Completed(*row) for row in self.session.execute(stmt)]

    def mark_completed(self, request_ids: Sequence[int], at: datetime) -> None:
        """The requests (locked by :meth:`lock_applied`) become completed at ``at``, their plaintext
        subject ids dropped, in one UPDATE."""
        if request_ids:
            self.session.execute(
                update(DeletionRequest)
                .where(DeletionRequest.id.in_(list(request_ids)))
                .values(state="completed", completed_at=at, subjects=None, updated_at=at)
                .execution_options(synchronize_session=False)
            )

    def get(self, request_id: int) -> DeletionRequest | None:
        return self.session.get(DeletionRequest, request_id, populate_existing=True)

    def lock(self, request_id: int) -> DeletionRequest | None:
        return self.session.execute(
            select(DeletionRequest)
            .where(DeletionRequest.id == request_id)
            .with_for_update()
            .execution_options(populate_existing=True)
        ).scalar_one_or_none()

    def in_states(
        self, model_id: int, states: Sequence[str], limit: int | None = None, *, lock: bool = True
    ) -> list[DeletionRequest]:
        """Requests of a model in ``states``, oldest first, by default locked until the transaction ends.

        The row locks make a concurrent cancel wait for the worker's decision instead of racing it.
        """
        stmt = (
            select(DeletionRequest)
            .where(DeletionRequest.model_id == model_id, DeletionRequest.state.in_(states))
            .order_by(DeletionRequest.id)
            .execution_options(populate_existing=True)
        )
        if lock:
            stmt = stmt.with_for_update()
        if limit is not None:
            stmt = stmt.limit(limit)
        return list(self.session.scalars(stmt))

    def count_in_states(self, model_id: int, states: Sequence[str]) -> int:
        return int(
            self.session.scalar(
                select(func.count())
                .select_from(DeletionRequest)
                .where(DeletionRequest.model_id == model_id, DeletionRequest.state.in_(states))
            )
            or 0
        )

    def list(
        self, *, model_id: int | None, state: str | None, after_id: int | None, limit: int
    ) -> list[DeletionRequest]:
        stmt = select(DeletionRequest).order_by(DeletionRequest.id).limit(limit)
        if model_id is not None:
            stmt = stmt.where(DeletionRequest.model_id == model_id)
        if state is not None:
            stmt = stmt.where(DeletionRequest.state == state)
        if after_id is not None:
            stmt = stmt.where(DeletionRequest.id > after_id)
        return list(self.session.scalars(stmt))

    def add_event(self, request_id: int, state: str, at: datetime, detail: str | None = None) -> None:
        self.add_events([(request_id, state, at, detail)])

    def add_events(self, events: Sequence[tuple[int, str, datetime, str | None]]) -> None:
        """(request id, state, at, detail) rows, inserted now and in this order (one executemany), so a
        request's history reads back in the order its states were entered."""
        if events:
            self.session.execute(
                insert(table(RequestEvent)),
                [{"request_id": r, "state": st, "at": at, "detail": d} for r, st, at, d in events],
            )

    def events(self, request_id: int) -> builtins.list[RequestEvent]:
        return list(
            self.session.scalars(
                select(RequestEvent).where(RequestEvent.request_id == request_id).order_by(RequestEvent.id)
            )
        )

    def events_for(self, request_ids: Sequence[int]) -> dict[int, builtins.list[RequestEvent]]:
        out: dict[int, list[RequestEvent]] = {rid: [] for rid in request_ids}
        if request_ids:
            for ev in self.session.scalars(
                select(RequestEvent)
                .where(RequestEvent.request_id.in_(list(request_ids)))
                .order_by(RequestEvent.id)
            ):
                out[ev.request_id].append(ev)
        return out

    def add_subjects(self, subjects: Sequence[tuple[int, str, str]]) -> None:
        """(request id, subject hash, kind) rows; kind is "sample" or "owner"."""
        if subjects:
            self.session.execute(
                insert(table(RequestSubject)),
                [{"request_id": r, "subject_hash": h, "kind": k} for r, h, k in subjects],
            )

    def subjects(self, request_id: int) -> builtins.list[RequestSubject]:
        return list(
            self.session.scalars(select(RequestSubject).where(RequestSubject.request_id == request_id))
        )
