"""Accepting a batch of deletion submissions (no graph items) in one pipelined Postgres transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from psycopg import Connection, Cursor

from service import metrics
from service.audit.repository import ChainHead
from service.audit.service import requests_chain
from service.audit.statements import append_events, chain_head, lock_chain_head
from service.db.postgres import array_columns, array_literal, insert_history, jsonb_element
from service.deletions.schemas import DeletionAccepted, DeletionIn
from service.deletions.service import SubmissionPlan, check_accepting, named_subjects, plan_submissions
from service.errors import ApiError
from service.idempotency.repository import claim_keys, store_answers
from service.subjects import SubjectHasher

if TYPE_CHECKING:
    from service.uow import UnitOfWork

_MODEL = "SELECT id, status, error, eta_seconds, finished_at FROM models WHERE id = %s"
_OWNER_SAMPLES = (
    "SELECT owner_id, sample_id FROM samples WHERE model_id = %s AND owner_id = ANY(%s::varchar[])"
)
_SAMPLE_OWNERS = (
    "SELECT sample_id, owner_id FROM samples WHERE model_id = %s AND sample_id = ANY(%s::varchar[])"
)
_ERASED_AMONG = """
SELECT subject_hash, request_id FROM erased_subjects WHERE model_id = %s AND subject_hash = ANY(%s::varchar[])
"""
_REQUEST_IDS = "SELECT nextval(pg_get_serial_sequence('deletion_requests', 'id')) FROM generate_series(1, %s)"
_INSERT_REQUESTS = """
INSERT INTO deletion_requests (id, model_id, state, subjects, num_samples, callback_url, callback_attempts,
    expected_by, created_at, updated_at)
SELECT * FROM unnest(%s::int[], %s::int[], %s::varchar[], %s::jsonb[], %s::int[], %s::text[], %s::int[],
    %s::timestamptz[], %s::timestamptz[], %s::timestamptz[])
"""
_INSERT_SUBJECTS = """
INSERT INTO request_subjects (request_id, subject_hash, kind)
SELECT * FROM unnest(%s::int[], %s::varchar[], %s::varchar[])
"""


@dataclass
class ModelFacts:
    """What accepting deletions reads of a model's row."""

    id: int
    status: str
    error: str | None
    eta_seconds: float | None
    finished_at: datetime | None


@dataclass
class _ModelReads:
    model: Cursor[Any]
    owners: Cursor[Any] | None
    samples: Cursor[Any] | None
    ids: Cursor[Any]
    head: Cursor[Any]


@dataclass
class _Accepting:
    """One model's part of the batch: what :meth:`SubmissionRepository.claim` read, and its plans."""

    model: ModelFacts | None
    owner_samples: dict[str, list[str]]
    sample_owner: dict[str, str]
    ids: list[int]
    head: ChainHead | None
    plans: list[tuple[SubmissionPlan, list[int]]] = field(default_factory=list)


class SubmissionRepository:
    """One intake batch's statements: :meth:`claim`, :meth:`accept_submissions` per model, :meth:`save`."""

    def __init__(self, conn: Connection[Any], hasher: SubjectHasher, sla_seconds: float) -> None:
        self._conn = conn
        self._hasher = hasher
        self._sla = sla_seconds
        self._models: dict[int, _Accepting] = {}

    def claim(
        self,
        keys: Sequence[tuple[str, str, str]],
        created_at: datetime,
        expires_at: datetime,
        bodies_by_model: dict[int, list[DeletionIn]],
    ) -> set[tuple[str, str]]:
        """Claim ``keys`` and read what accepting ``bodies_by_model`` needs; returns the pairs claimed."""
        conn = self._conn
        reads: dict[int, _ModelReads] = {}
        with conn.pipeline():
            claimed = claim_keys(conn, keys, created_at, expires_at)
            for model_id, bodies in bodies_by_model.items():
                owners, samples = named_subjects(bodies)
                reads[model_id] = _ModelReads(
                    model=conn.execute(_MODEL, (model_id,)),
                    owners=_named(conn, _OWNER_SAMPLES, model_id, owners),
                    samples=_named(conn, _SAMPLE_OWNERS, model_id, samples),
                    ids=conn.execute(_REQUEST_IDS, (len(bodies),)),
                    # no genesis head: the model may not exist (save creates it)
                    head=lock_chain_head(conn, requests_chain(model_id), create=False),
                )
        for model_id, read in reads.items():
            row = read.model.fetchone()
            owner_samples: dict[str, list[str]] = {}
            for owner, sample in read.owners.fetchall() if read.owners is not None else []:
                owner_samples.setdefault(owner, []).append(sample)
            head = read.head.fetchone()
            self._models[model_id] = _Accepting(
                model=ModelFacts(*row) if row is not None else None,
                owner_samples=owner_samples,
                sample_owner=dict(read.samples.fetchall()) if read.samples is not None else {},
                ids=[int(r[0]) for r in read.ids.fetchall()],
                head=chain_head(requests_chain(model_id), head) if head is not None else None,
            )
        return {(scope, key) for scope, key in claimed.fetchall()}

    def accept_submissions(
        self, model_id: int, bodies: list[DeletionIn]
    ) -> list[DeletionAccepted | ApiError]:
        """:func:`service.deletions.service.submit_many`'s answers from what :meth:`claim` read."""
        accepting = self._models[model_id]
        check_accepting(accepting.model, model_id)
        plan = plan_submissions(
            self._hasher,
            accepting.model,
            bodies,
            accepting.owner_samples,
            accepting.sample_owner,
            lambda hashes: self._erased_among(model_id, hashes),
            self._sla,
        )
        ids, accepting.ids = accepting.ids[: len(plan.accepted)], accepting.ids[len(plan.accepted) :]
        accepting.plans.append((plan, ids))
        return plan.results(ids)

    def _erased_among(self, model_id: int, hashes: list[str]) -> dict[str, int | None]:
        """Which of ``hashes`` the model erased, and by which request."""
        return dict(self._conn.execute(_ERASED_AMONG, (model_id, array_literal(hashes))).fetchall())

    def save(self, answers: Sequence[tuple[str, str, int, dict[str, Any]]], uow: UnitOfWork) -> None:
        """Insert the accepted requests and store each key's answer, ``uow``'s COMMIT with them if it can."""
        conn = self._conn
        heads = {m: self._head(m) for m, a in self._models.items() if any(p.accepted for p, _ in a.plans)}
        accepted = 0
        with conn.pipeline():
            for model_id, accepting in self._models.items():
                for plan, ids in accepting.plans:
                    if plan.accepted:
                        _insert_requests(conn, plan, ids)
                        insert_history(conn, plan.history(ids))
                        append_events(conn, heads[model_id], plan.events(ids), plan.now)
                        accepted += len(ids)
            store_answers(conn, answers)
            if accepted:
                uow.after_commit(partial(metrics.DELETIONS_RECEIVED.inc, accepted))
            uow.send_commit(conn)

    def _head(self, model_id: int) -> ChainHead:
        """The model's requests chain head, locked (created for the model's first request)."""
        accepting = self._models[model_id]
        if accepting.head is None:
            chain = requests_chain(model_id)
            accepting.head = chain_head(chain, lock_chain_head(self._conn, chain).fetchone())
        return accepting.head


def _named(conn: Connection[Any], statement: str, model_id: int, names: list[str]) -> Cursor[Any] | None:
    """The model's rows of the named owners or samples (None: none named)."""
    return conn.execute(statement, (model_id, array_literal(names))) if names else None


def _insert_requests(conn: Connection[Any], plan: SubmissionPlan, ids: list[int]) -> None:
    rows = [
        (request_id, r["model_id"], r["state"], jsonb_element(r["subjects"]), r["num_samples"],
         r["callback_url"], r["callback_attempts"], r["expected_by"], r["created_at"], r["updated_at"])
        for request_id, r in zip(ids, plan.rows(), strict=True)
    ]  # fmt: skip
    conn.execute(_INSERT_REQUESTS, array_columns(rows))
    subjects = plan.subjects(ids)
    if subjects:
        conn.execute(_INSERT_SUBJECTS, array_columns(subjects))
