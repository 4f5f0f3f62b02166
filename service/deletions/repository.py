"""SQL for deletion requests, their subjects and their state history."""

from __future__ import annotations

import builtins  # the class's ``list`` method shadows the builtin in its annotations
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

from sqlalchemy import Select, Update, bindparam, exists, insert, select, update
from sqlalchemy.orm import Session

from service.db.base import table, utcnow
from service.db.postgres import insert_history, session_connection
from service.db.tables import DeletionRequest, RequestEvent, RequestSubject
from service.states import RequestState

_requests = table(DeletionRequest).c  # statements built once (docs/decisions.md)
_INSERT_REQUESTS = insert(table(DeletionRequest)).returning(_requests.id, sort_by_parameter_order=True)
_INSERT_SUBJECTS = insert(table(RequestSubject))
_ANY_QUEUED = select(
    exists().where(_requests.model_id == bindparam("model_id"), _requests.state == RequestState.QUEUED)
)


@cache
def _in_states(lock: bool, limited: bool) -> Select[DeletionRequest]:
    stmt = (
        select(DeletionRequest)
        .where(
            DeletionRequest.model_id == bindparam("model_id"),
            DeletionRequest.state.in_(bindparam("states", expanding=True)),
        )
        .order_by(DeletionRequest.id)
        .execution_options(populate_existing=True)
    )
    if lock:
        stmt = stmt.with_for_update()
    return stmt.limit(bindparam("limit")) if limited else stmt


@cache
def _set_state(columns: tuple[str, ...]) -> Update:
    """:meth:`DeletionRepository.set_state`'s UPDATE of ``columns`` (``b_``: UPDATE reserves column names)."""
    return (
        update(table(DeletionRequest))
        .where(_requests.id.in_(bindparam("ids", expanding=True)))
        .values(updated_at=bindparam("b_now"), **{c: bindparam(f"b_{c}") for c in columns})
    )


class Completed(NamedTuple):
    """A request just marked completed: what the completion step needs of it."""

    id: int
    callback_url: str | None
    created_at: datetime


class DeletionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def insert_many(self, rows: list[dict[str, Any]]) -> list[int]:
        """Insert request rows (column -> value) in one Core INSERT ... RETURNING; their ids, in order."""
        if not rows:
            return []
        return list(self.session.scalars(_INSERT_REQUESTS, rows))

    def set_state(self, request_ids: Sequence[int], **values: Any) -> None:
        """One UPDATE of ``columns`` for many requests; loaded request objects are not refreshed."""
        if request_ids:
            params = {f"b_{column}": value for column, value in values.items()}
            self.session.execute(
                _set_state(tuple(sorted(values))), {**params, "ids": list(request_ids), "b_now": utcnow()}
            )

    def get(self, request_id: int) -> DeletionRequest | None:
        return self.session.get(DeletionRequest, request_id, populate_existing=True)

    def lock(self, request_id: int) -> DeletionRequest | None:
        return self.session.get(DeletionRequest, request_id, populate_existing=True, with_for_update=True)

    def in_states(
        self, model_id: int, states: Sequence[RequestState], limit: int | None = None, *, lock: bool = True
    ) -> list[DeletionRequest]:
        """Requests of a model in ``states``, oldest first, by default locked until the transaction ends."""
        params: dict[str, Any] = {"model_id": model_id, "states": list(states)}
        if limit is not None:
            params["limit"] = limit
        return list(self.session.scalars(_in_states(lock, limit is not None), params))

    def any_queued(self, model_id: int) -> bool:
        return bool(self.session.scalar(_ANY_QUEUED, {"model_id": model_id}))

    def list(
        self, *, model_id: int | None, state: RequestState | None, after_id: int | None, limit: int
    ) -> list[DeletionRequest]:
        stmt = select(DeletionRequest).order_by(DeletionRequest.id).limit(limit)
        if model_id is not None:
            stmt = stmt.where(DeletionRequest.model_id == model_id)
        if state is not None:
            stmt = stmt.where(DeletionRequest.state == state)
        if after_id is not None:
            stmt = stmt.where(DeletionRequest.id > after_id)
        return list(self.session.scalars(stmt))

    def add_event(
        self, request_id: int, state: RequestState, at: datetime, detail: str | None = None
    ) -> None:
        self.add_events([(request_id, state, at, detail)])

    def add_events(self, events: Sequence[tuple[int, RequestState, datetime, str | None]]) -> None:
        insert_history(session_connection(self.session), events)

    def events(self, request_id: int) -> builtins.list[RequestEvent]:
        return self.events_for([request_id])[request_id]

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
                _INSERT_SUBJECTS, [{"request_id": r, "subject_hash": h, "kind": k} for r, h, k in subjects]
            )

    def subjects(self, request_id: int) -> builtins.list[RequestSubject]:
        return list(
            self.session.scalars(select(RequestSubject).where(RequestSubject.request_id == request_id))
        )
