"""The reads behind the operator's gauges, each a few rows however long the history: waiting deletions
are counted per model through the ``(model_id, state)`` index, and final ones not at all (the
``lethe_deletions_*_total`` counters count those)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from service.states import ModelState, RequestState, VersionKind

FINAL_REQUEST_STATES = (RequestState.COMPLETED, RequestState.FAILED, RequestState.CANCELED)
WAITING_REQUEST_STATES = tuple(s for s in RequestState if s not in FINAL_REQUEST_STATES)
# the job kinds of lethe_trainings_total: a first training's version is the initial one
FITTING_STATES = {ModelState.TRAINING: VersionKind.INITIAL.value, ModelState.RETRAINING: "retrain"}

_WAITING = text(
    "SELECT r.state, count(*), min(r.created_at), count(*) FILTER (WHERE r.expected_by < :now) "
    "FROM models m CROSS JOIN LATERAL ("
    "  SELECT state, created_at, expected_by FROM deletion_requests"
    "  WHERE model_id = m.id AND state = ANY(:waiting)"
    ") r GROUP BY r.state"
)
_MODELS = text("SELECT status, count(*) FROM models GROUP BY status")
_BUDGETS = text(
    "SELECT DISTINCT ON (m.id) m.id, e.spent, e.budget_cap FROM models m "
    "JOIN ledger_entries e ON e.model_id = m.id AND e.budget_epoch = m.budget_epoch "
    f"WHERE m.status <> '{ModelState.DELETED.value}' ORDER BY m.id, e.id DESC"
)
_FITTING = text("SELECT id, status, progress FROM models WHERE status = ANY(:fitting)")


@dataclass(frozen=True)
class WaitingDeletions:
    """Deletion requests not final: how many per state, how many past ``expected_by``, the oldest one's
    creation (None when none waits)."""

    by_state: dict[str, int]
    overdue: int
    oldest_created_at: datetime | None


@dataclass(frozen=True)
class Budget:
    model_id: int
    spent: float
    cap: float | None


class MonitoringRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def waiting_deletions(self, now: datetime) -> WaitingDeletions:
        rows = self.session.execute(
            _WAITING, {"now": now, "waiting": [str(s) for s in WAITING_REQUEST_STATES]}
        )
        by_state, overdue, oldest = dict.fromkeys(map(str, WAITING_REQUEST_STATES), 0), 0, None
        for state, count, created, late in rows:
            by_state[state] = int(count)
            overdue += int(late)
            oldest = created if oldest is None or created < oldest else oldest
        return WaitingDeletions(by_state, overdue, oldest)

    def models_by_state(self) -> dict[str, int]:
        counts = dict.fromkeys(map(str, ModelState), 0)
        counts.update({str(state): int(n) for state, n in self.session.execute(_MODELS)})
        return counts

    def current_budgets(self) -> list[Budget]:
        """The latest ledger entry of each live model's current budget epoch."""
        rows = self.session.execute(_BUDGETS)
        return [Budget(int(m), float(spent), None if cap is None else float(cap)) for m, spent, cap in rows]

    def fitting(self) -> list[tuple[int, str, float]]:
        """(model id, ``initial`` or ``retrain``, progress 0..1) of each training or retrain running."""
        rows = self.session.execute(_FITTING, {"fitting": [str(s) for s in FITTING_STATES]})
        return [(int(m), FITTING_STATES[ModelState(status)], float(p or 0.0)) for m, status, p in rows]
