"""The audit log checked from outside (service.audit.check): every hash recomputed from the events the
API exports; a rewritten chain (hashes recomputed, so the service's own check passes) caught by anchors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, text, update

from service.audit.check import check, main
from service.audit.service import rehash
from service.db.tables import AuditEvent, AuditHead, LedgerEntry, ModelVersion
from service.runtime import Runtime
from tests.contract.conftest import forget_owner


def _rewrite(runtime: Runtime, chain: str, seq: int, payload: dict) -> None:
    """What a service covering its tracks would do: change one event and recompute every later hash and
    the head, so that the chain is consistent again."""
    with runtime.uow() as uow:
        events = list(
            uow.session.scalars(
                select(AuditEvent).where(AuditEvent.chain == chain).order_by(AuditEvent.chain_seq)
            )
        )
        prev = events[seq - 2].hash if seq > 1 else "0" * 64
        for event in events[seq - 1 :]:
            if event.chain_seq == seq:
                event.payload = payload
            event.prev_hash = prev
            event.hash = prev = rehash(prev, event)
        uow.session.execute(update(AuditHead).where(AuditHead.chain == chain).values(hash=prev))
        uow.commit()


def test_an_intact_log_checks_and_a_rewritten_chain_fails_against_its_anchors(
    fresh: tuple[TestClient, Runtime], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client, runtime = fresh
    forget_owner(client, "owner-00002")
    forget_owner(client, "owner-00005")
    reports = check(client)
    assert {r.chain for r in reports} >= {"system", "model:1", "model:1:requests"}
    assert all(r.ok for r in reports) and next(r for r in reports if r.chain == "model:1").events >= 5
    anchors = tmp_path / "anchors.json"
    assert main(["--save-anchors", str(anchors)], client=client) == 0
    out = capsys.readouterr().out
    assert "ok      model:1:" in out
    assert "ok      model 1: 3 versions match the ledger, the log and the weights served" in out

    _rewrite(runtime, "model:1", 2, {"rewritten": True})
    assert client.get("/v1/audit/verify").json()["ok"]  # consistent again: the service's own check passes
    assert main([], client=client) == 0  # ... and so does a check without anchors
    assert main(["--anchors", str(anchors)], client=client) == 1
    out = capsys.readouterr().out
    head = json.loads(anchors.read_text())["model:1"]["seq"]  # the anchor is the head seen then
    assert f"FAILED  model:1: event {head} is not the event recorded earlier" in out
    assert "ok      model:1:requests" in out


def test_an_altered_or_truncated_chain_fails_the_check(fresh: tuple[TestClient, Runtime]) -> None:
    client, runtime = fresh
    forget_owner(client, "owner-00003")
    with runtime.uow() as uow:  # an edit that does not recompute the hashes
        uow.session.execute(
            update(AuditEvent)
            .where(AuditEvent.chain == "model:1:requests", AuditEvent.chain_seq == 1)
            .values(payload={"num_samples": 0})
        )
        uow.commit()
    (report,) = check(client, ["model:1:requests"])
    assert not report.ok and report.first_bad_seq == 1 and "altered" in (report.problem or "")

    with runtime.uow() as uow:  # the tail removed, the head left: events missing
        last = uow.session.scalar(select(AuditHead.seq).where(AuditHead.chain == "model:1"))
        uow.session.execute(
            delete(AuditEvent).where(AuditEvent.chain == "model:1", AuditEvent.chain_seq == last)
        )
        uow.commit()
    (report,) = check(client, ["model:1"])
    assert not report.ok and "removed" in (report.problem or "")
    (report,) = check(client, ["model:9"])
    assert not report.ok and report.problem == "the service reports no such chain"


def test_a_ledger_or_served_weights_that_disagree_with_the_versions_fail_the_check(
    fresh: tuple[TestClient, Runtime], capsys: pytest.CaptureFixture[str]
) -> None:
    client, runtime = fresh
    forget_owner(client, "owner-00006")
    assert main(["--no-models"], client=client) == 0
    assert "model 1:" not in capsys.readouterr().out.replace("model:1", "")

    with runtime.uow() as uow:  # the ledger charged less than the certificate says, and overspent
        # as a service that dropped the ledger's cap check would
        table = LedgerEntry.__tablename__
        (constraint,) = uow.session.scalars(
            text(f"SELECT conname FROM pg_constraint WHERE conrelid = '{table}'::regclass AND contype = 'c'")
        )
        uow.session.execute(text(f'ALTER TABLE {table} DROP CONSTRAINT "{constraint}"'))
        entry = uow.session.scalars(select(LedgerEntry).where(LedgerEntry.kind == "charge")).one()
        entry.charge, entry.spent = entry.charge / 2, entry.budget_cap * 2
        uow.commit()
    assert main([], client=client) == 1
    out = capsys.readouterr().out
    assert "FAILED  model 1: version 2: the ledger's charge" in out
    assert "FAILED  model 1: a charge entry of epoch 1 spends" in out

    with runtime.uow() as uow:  # the current version names other weights than those served and logged
        version = uow.session.scalars(select(ModelVersion).where(ModelVersion.seq == 2)).one()
        version.released_sha256 = "0" * 64
        uow.commit()
    assert main(["--chain", "model:1"], client=client) == 1
    out = capsys.readouterr().out
    assert "FAILED  model 1: version 2: the audit log names weights" in out
    assert "FAILED  model 1: the weights served as version 2 hash to" in out
