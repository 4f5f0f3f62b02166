"""SQL for deletion requests, their subjects and their state history."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db.tables import DeletionRequest, RequestEvent, RequestSubject


class DeletionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, request: DeletionRequest) -> DeletionRequest:
        self.session.add(request)
        self.session.flush()
        return request

    def add_all(self, requests: list[DeletionRequest]) -> None:
        """Insert the requests (one batched INSERT ... RETURNING); their ids are set afterwards."""
        self.session.add_all(requests)
        self.session.flush()

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
        self.session.add(RequestEvent(request_id=request_id, state=state, at=at, detail=detail))

    def events(self, request_id: int) -> list[RequestEvent]:
        return list(
            self.session.scalars(
                select(RequestEvent).where(RequestEvent.request_id == request_id).order_by(RequestEvent.id)
            )
        )

    def events_for(self, request_ids: Sequence[int]) -> dict[int, list[RequestEvent]]:
        out: dict[int, list[RequestEvent]] = {rid: [] for rid in request_ids}
        if request_ids:
            for ev in self.session.scalars(
                select(RequestEvent)
                .where(RequestEvent.request_id.in_(list(request_ids)))
                .order_by(RequestEvent.id)
            ):
                out[ev.request_id].append(ev)
        return out

    def add_subjects(self, request_id: int, hashes: dict[str, str]) -> None:
        """``hashes``: subject hash -> kind ("sample" or "owner")."""
        self.session.add_all(
            RequestSubject(request_id=request_id, subject_hash=h, kind=k) for h, k in hashes.items()
        )

    def subjects(self, request_id: int) -> list[RequestSubject]:
        return list(
            self.session.scalars(select(RequestSubject).where(RequestSubject.request_id == request_id))
        )
