"""Checks of DESIGN.md's invariants that several integration tests share: each deletion applied exactly
once, a gap-free version chain, a cumulative ledger never above its cap, one tombstone per sample, an
intact audit chain."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from service.db.tables import ErasedSubject, LedgerEntry, ModelVersion, RequestEvent
from service.runtime import Runtime
from tests.integration.conftest import Client


@dataclass
class Chain:
    versions: list[ModelVersion]
    charges: list[LedgerEntry]


def assert_applied_exactly_once(
    client: Client, runtime: Runtime, model_id: int, request_ids: list[int], forgotten_samples: int
) -> Chain:
    """Every request in ``request_ids`` went into exactly one version of a gap-free chain (seq 1, 2, ..,
    each the child of the one before), ``forgotten_samples`` samples were each forgotten once, the
    ledger's charges are cumulative and within the cap, and the model's audit chain verifies."""
    with runtime.uow() as uow:
        versions = list(
            uow.session.scalars(
                select(ModelVersion).where(ModelVersion.model_id == model_id).order_by(ModelVersion.seq)
            )
        )
        ledger = list(
            uow.session.scalars(
                select(LedgerEntry).where(LedgerEntry.model_id == model_id).order_by(LedgerEntry.id)
            )
        )
        tombstones = list(
            uow.session.scalars(
                select(ErasedSubject).where(
                    ErasedSubject.model_id == model_id, ErasedSubject.kind == "sample"
                )
            )
        )
        applied = list(
            uow.session.scalars(
                select(RequestEvent).where(
                    RequestEvent.request_id.in_(request_ids), RequestEvent.state == "applied"
                )
            )
        )
    assert [v.seq for v in versions] == list(range(1, len(versions) + 1))
    assert all(v.parent_id == versions[i - 1].id for i, v in enumerate(versions) if i > 0)
    assert len(applied) == len(request_ids) and {e.request_id for e in applied} == set(request_ids)
    assert sum(v.request_count for v in versions[1:]) == len(request_ids)
    assert sum(v.num_forgotten for v in versions[1:]) == forgotten_samples
    assert len(tombstones) == forgotten_samples == len({t.subject_hash for t in tombstones})
    charges = [e for e in ledger if e.kind == "charge"]
    assert len(charges) == len(versions) - 1
    assert all(e.spent <= e.budget_cap for e in ledger)
    assert [e.spent for e in charges] == sorted(e.spent for e in charges)
    assert client.http.get(f"/v1/audit/verify?model_id={model_id}").json()["ok"] is True
    return Chain(versions, charges)
