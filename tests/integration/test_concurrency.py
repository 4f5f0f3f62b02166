"""50 concurrent deletions on one model: a gap-free version chain, every request applied exactly once,
the ledger never above its cap."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select

from service.db.tables import ErasedSubject, LedgerEntry, ModelVersion, RequestEvent
from service.runtime import Runtime
from tests.integration.conftest import Client, key

pytestmark = pytest.mark.integration


def test_fifty_concurrent_deletions_make_a_gap_free_chain_applied_exactly_once(
    client: Client, runtime: Runtime
) -> None:
    model_id = client.trained(n=400, samples_per_owner=2, policy={"max_deletion_fraction": 0.5})
    owners = [f"owner-{i:05d}" for i in range(50)]

    def submit(owner: str) -> int:
        r = client.http.post(f"/v1/models/{model_id}/deletions", json={"owner_ids": [owner]}, headers=key())
        assert r.status_code == 202, r.text
        return int(r.json()["id"])

    with ThreadPoolExecutor(max_workers=16) as pool:
        ids = list(pool.map(submit, owners))
    assert len(set(ids)) == 50
    done = [client.done(i) for i in ids]

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
        applied_events = list(
            uow.session.scalars(
                select(RequestEvent).where(RequestEvent.request_id.in_(ids), RequestEvent.state == "applied")
            )
        )

    # Gap-free chain: seq 1..k, each version's parent is the one before it.
    assert [v.seq for v in versions] == list(range(1, len(versions) + 1))
    assert all(v.parent_id == versions[i - 1].id for i, v in enumerate(versions) if i > 0)
    # Coalescing happened (fewer versions than requests), and every request went into exactly one version.
    assert 2 <= len(versions) <= 51
    assert len(applied_events) == 50 and len({e.request_id for e in applied_events}) == 50
    assert sum(v.request_count for v in versions[1:]) == 50
    assert sum(v.num_forgotten for v in versions[1:]) == 100
    by_version = {d["version"]["seq"] for d in done}
    assert by_version <= {v.seq for v in versions[1:]}
    # Each sample was forgotten exactly once (one tombstone per sample, all 100 of them).
    assert len(tombstones) == 100 and len({t.subject_hash for t in tombstones}) == 100
    # The ledger: one charge per version, cumulative, never above the cap.
    charges = [e for e in ledger if e.kind == "charge"]
    assert len(charges) == len(versions) - 1
    assert all(e.spent <= e.budget_cap for e in ledger)
    assert [e.spent for e in charges] == sorted(e.spent for e in charges)
    assert charges[-1].spent == 100
    assert client.http.get(f"/v1/audit/verify?model_id={model_id}").json()["ok"] is True
