"""What ``bench.faults`` concludes at the end of a run, from its own Postgres and the client's records.

- :func:`request_rows`: every deletion request with its state, ``expected_by``, creation and completion;
- :func:`double_applied`: requests completed twice, more version slots than completed requests, and keys
  whose replay named other requests;
- :func:`samples_consistent`: each model's current training set is its first one less exactly the samples
  of its completed requests (a request applied twice or not at all shows here);
- :func:`over_budget`: ledger entries whose spent budget passed their cap;
- :func:`outcome`: the JSON figures (``accepted`` ... ``max_completion_s``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from bench.fault_load import Submission

FINAL = ("completed", "failed", "canceled")
DEADLINE_MARGIN_S = 60.0  # a request completed later than expected_by + this missed its deadline


@dataclass(frozen=True)
class RequestRow:
    id: int
    model_id: int
    state: str
    num_samples: int
    created_at: datetime
    expected_by: datetime
    completed_at: datetime | None
    completions: int


def request_rows(conn: psycopg.Connection[Any]) -> dict[int, RequestRow]:
    rows = conn.execute(
        "SELECT r.id, r.model_id, r.state, r.num_samples, r.created_at, r.expected_by, "
        "min(e.at) FILTER (WHERE e.state = 'completed'), count(e.id) FILTER (WHERE e.state = 'completed') "
        "FROM deletion_requests r LEFT JOIN request_events e ON e.request_id = r.id GROUP BY r.id"
    ).fetchall()
    return {int(r[0]): RequestRow(*r) for r in rows}


def double_applied(
    conn: psycopg.Connection[Any], rows: dict[int, RequestRow], replay_mismatches: list[str]
) -> dict[str, Any]:
    """Requests with more than one completion, models whose versions count more requests than completed,
    and keys whose replay answered other requests."""
    twice = [r.id for r in rows.values() if r.completions > 1]
    slots = dict(
        conn.execute("SELECT model_id, sum(request_count) FROM model_versions GROUP BY model_id").fetchall()
    )
    completed: dict[int, int] = {}
    for r in rows.values():
        completed[r.model_id] = completed.get(r.model_id, 0) + (r.state == "completed")
    extra = {m: int(n) - completed.get(m, 0) for m, n in slots.items() if int(n) > completed.get(m, 0)}
    return {
        "count": len(twice) + sum(extra.values()) + len(replay_mismatches),
        "completed_twice": twice[:10],
        "extra_version_slots": extra,
        "replay_mismatches": replay_mismatches[:5],
    }


def samples_consistent(
    conn: psycopg.Connection[Any], rows: dict[int, RequestRow]
) -> dict[int, dict[str, int]]:
    """Per model: the current version's training-set size against its first version's less the samples of
    its completed requests (every owner is forgotten at most once by the load); the mismatches."""
    current = conn.execute(
        "SELECT m.id, i.train_size, v.train_size FROM models m "
        "JOIN model_versions i ON i.model_id = m.id AND i.kind = 'initial' "
        "JOIN model_versions v ON v.id = m.current_version_id WHERE m.status <> 'deleted'"
    ).fetchall()
    forgotten: dict[int, int] = {}
    for r in rows.values():
        if r.state == "completed":
            forgotten[r.model_id] = forgotten.get(r.model_id, 0) + r.num_samples
    out = {}
    for model_id, num_rows, train_size in current:
        expected = int(num_rows) - forgotten.get(model_id, 0)
        if int(train_size) != expected:
            out[int(model_id)] = {"train_size": int(train_size), "expected": expected}
    return out


def over_budget(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM ledger_entries WHERE spent > budget_cap * (1 + 1e-9) + 1e-12"
    ).fetchone()
    return int(row[0]) if row else 0


def failure_reasons(conn: psycopg.Connection[Any]) -> list[str]:
    """The distinct failure reasons of failed requests (at most 5)."""
    rows = conn.execute(
        "SELECT DISTINCT failure_reason FROM deletion_requests WHERE state = 'failed' LIMIT 5"
    ).fetchall()
    return [str(r[0]) for r in rows]


def _end(r: RequestRow, waited_until: float) -> float:
    return r.completed_at.timestamp() if r.completed_at is not None else waited_until


def outcome(
    submissions: list[Submission], rows: dict[int, RequestRow], waited_until: float
) -> dict[str, Any]:
    """The figures over the client's accepted requests: ``accepted``, ``completed``, ``failed`` (failed or
    canceled), ``lost`` (accepted but unknown to the database or not final at the end, and submissions
    never accepted), ``missed_deadline`` (completed after expected_by + 60 s, or not final by then),
    ``max_completion_s`` (creation to completion)."""
    ids = [i for s in submissions for i in s.ids]
    known = [rows[i] for i in ids if i in rows]
    completed = [r for r in known if r.state == "completed"]
    unfinished = [r for r in known if r.state not in FINAL]
    unaccepted = [s for s in submissions if not s.ids and s.rejected is None]
    late = [
        r
        for r in known
        if (
            r.completed_at is not None
            and (r.completed_at - r.expected_by).total_seconds() > DEADLINE_MARGIN_S
        )
        or (r.state not in FINAL and waited_until > r.expected_by.timestamp() + DEADLINE_MARGIN_S)
    ]
    spans = [(r.completed_at - r.created_at).total_seconds() for r in completed if r.completed_at]
    return {
        "accepted": len(ids),
        "completed": len(completed),
        "failed": len([r for r in known if r.state in ("failed", "canceled")]),
        "lost": len(ids) - len(known) + len(unfinished) + len(unaccepted),
        "missed_deadline": len(late),
        "max_completion_s": round(max(spans, default=0.0), 1),
        "unaccepted": len(unaccepted),
        "rejected": [s.rejected for s in submissions if s.rejected][:5],
        "unfinished_states": sorted({r.state for r in unfinished}),
        "late_samples": [
            {
                "id": r.id,
                "state": r.state,
                "late_s": round(_end(r, waited_until) - r.expected_by.timestamp(), 1),
            }
            for r in late[:5]
        ],
    }
