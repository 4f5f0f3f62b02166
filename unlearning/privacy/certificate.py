"""What a released model version guarantees, stated so that it can be recomputed and audited."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from unlearning.serialization import json_restore, json_safe

ReleaseMode = Literal["certified", "audited"]
Guarantee = Literal["certified", "empirical", "none", "exact"]
Calibration = Literal["classical", "analytic", "none"]


@dataclass(frozen=True)
class Certificate:
    """The guarantee one released model version carries.

    ``guarantee`` is what actually holds:
    - ``certified``: (epsilon, delta)-certified unlearning, noise ``sigma`` calibrated from a rigorous
      bound ``bound`` on the distance to the exact retrain;
    - ``empirical``: no noise was added (audited release mode); ``measured`` carries the figures that
      were checked instead, and epsilon/delta are None;
    - ``none``: the method gives no guarantee (heuristics such as repair or Mini-Unlearning);
    - ``exact``: the version is an exact retrain on the remaining data.

    ``inputs`` holds every method-specific quantity the bound was computed from (step size, decay,
    contraction rho, gradient bound G and where it came from, seeds) so that
    ``method.verify_certificate`` can recompute ``bound`` and ``sigma`` from it.
    """

    method: str
    release_mode: ReleaseMode
    guarantee: Guarantee
    epsilon: float | None
    delta: float | None
    bound_name: str
    bound: float
    sigma: float
    calibration: Calibration
    cumulative_deletions: int
    budget_unit: str
    budget_cap: float
    budget_spent: float
    charge: float
    noise_seed: int | None
    inputs: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)
    notes: str = ""

    @property
    def budget_remaining(self) -> float:
        return max(self.budget_cap - self.budget_spent, 0.0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (infinities become the strings "inf" so strict JSON parsers accept it).
        :func:`json_safe` builds every container anew: ``dataclasses.asdict``'s deep copy first would be
        redundant, and cost a fifth of a millisecond per update round."""
        return dict(json_safe(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Certificate:
        return cls(**json_restore(data))

