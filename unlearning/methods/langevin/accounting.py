"""The accounting of a ``langevin`` model version, typed: the constants of its noisy chain, the W_inf state
Z of the sequential accountant, and the counters of its budget epoch.

At the protocol boundary ``MethodState.accounting`` stays a plain dict: :meth:`LangevinAccounting.to_dict`
writes, and :meth:`LangevinAccounting.from_dict` reads, exactly the JSON keys stored model versions carry
(the problem's keys of :meth:`LogisticProblem.to_dict`, then one key per field below), and keys added by
other layers (the table wrapper's ``feature_transform`` and ``quality``) pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, cast

from unlearning.methods.langevin.problem import LogisticProblem
from unlearning.privacy.langevin.constants import Conversion, PabiVariant, PNSGDConstants
from unlearning.privacy.langevin.sequential import RequestCharge

PROBLEM_KEYS = ("num_classes", "num_features", "intercept", "l2", "clip", "feature_bound", "row_clip")
"""The keys of :meth:`LogisticProblem.to_dict`, stored flat at the head of the accounting."""

CERTIFICATE_KEYS = (
    "slots", "batch_size", "batches", "eta", "l2", "clip", "radius", "smoothness", "feature_bound", "num_classes",
    "intercept", "sigma", "sigma_source", "pabi", "conversion", "burn_in_epochs", "stationarity_gap",
    "max_unlearning_epochs", "partition_seed", "training_seed",
)
"""The constants every certificate records among its inputs, from which its figures recompute."""


@dataclass(frozen=True)
class LangevinAccounting:
    """What a ``langevin`` model version records between requests.

    The chain: ``slots`` n = N b (real samples plus null padding), ``batch_size`` b (the largest batch of
    the partition at fit time), ``batches`` N, ``requested_batch_size`` (as configured), the step size
    ``eta`` <= 1/L with L = ``smoothness``, the projection ``radius`` R, the noise ``sigma`` (and
    ``sigma_source``, where it came from), the accountant's ``pabi`` and ``conversion`` variants,
    ``max_unlearning_epochs``, the burn-in ``burn_in_epochs`` T and its ``stationarity_gap`` 2R c^(TN)
    (Lemma 3.6).

    The sequential state: ``z_out``, the W_inf distance between the current law and the stationary law of
    PNSGD on the remaining data (Thm 3.11; the stationarity gap right after a fit); ``deleted_count`` of
    the ``train_size`` samples forgotten in this budget epoch, in ``requests`` requests that took
    ``unlearning_epochs_total`` noisy epochs; ``live_digest``, the order-free keyed digest of the samples
    still held (:func:`unlearning.methods.langevin.batching.live_digest`).

    Provenance and measurements: ``partition_seed``, ``training_seed``, the gradient evaluations of the
    fit and of all unlearning, ``seconds_fit`` and ``train_accuracy``. ``extra`` holds the keys other
    layers add, written back unchanged.
    """

    problem: LogisticProblem
    slots: int
    batch_size: int
    batches: int
    requested_batch_size: int
    eta: float
    smoothness: float
    radius: float
    sigma: float
    sigma_source: str
    pabi: PabiVariant
    conversion: Conversion
    max_unlearning_epochs: int
    burn_in_epochs: int
    stationarity_gap: float
    z_out: float
    deleted_count: int
    train_size: int
    requests: int
    unlearning_epochs_total: int
    gradient_evaluations_fit: int
    gradient_evaluations_unlearning: int
    partition_seed: int
    training_seed: int
    live_digest: str
    seconds_fit: float
    train_accuracy: float
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LangevinAccounting:
        """The accounting of a stored version (``MethodState.accounting``); a missing ``row_clip`` reads as
        False, as :meth:`LogisticProblem.from_dict` does."""
        return cls(
            problem=LogisticProblem.from_dict(d),
            slots=int(d["slots"]),
            batch_size=int(d["batch_size"]),
            batches=int(d["batches"]),
            requested_batch_size=int(d["requested_batch_size"]),
            eta=float(d["eta"]),
            smoothness=float(d["smoothness"]),
            radius=float(d["radius"]),
            sigma=float(d["sigma"]),
            sigma_source=str(d["sigma_source"]),
            pabi=cast(PabiVariant, d["pabi"]),
            conversion=cast(Conversion, d["conversion"]),
            max_unlearning_epochs=int(d["max_unlearning_epochs"]),
            burn_in_epochs=int(d["burn_in_epochs"]),
            stationarity_gap=float(d["stationarity_gap"]),
            z_out=float(d["z_out"]),
            deleted_count=int(d["deleted_count"]),
            train_size=int(d["train_size"]),
            requests=int(d["requests"]),
            unlearning_epochs_total=int(d["unlearning_epochs_total"]),
            gradient_evaluations_fit=int(d["gradient_evaluations_fit"]),
            gradient_evaluations_unlearning=int(d["gradient_evaluations_unlearning"]),
            partition_seed=int(d["partition_seed"]),
            training_seed=int(d["training_seed"]),
            live_digest=str(d["live_digest"]),
            seconds_fit=float(d["seconds_fit"]),
            train_accuracy=float(d["train_accuracy"]),
            extra={k: v for k, v in d.items() if k not in _KEYS},
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able dict ``MethodState.accounting`` holds: the problem's keys, every field, the extras."""
        out: dict[str, Any] = self.problem.to_dict()
        out.update({f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("problem", "extra")})
        out.update(self.extra)
        return out

    @property
    def constants(self) -> PNSGDConstants:
        """The accountant's constants of this chain: n slots, b, eta, m = l2, M = clip, R, L."""
        return PNSGDConstants(n=self.slots, b=self.batch_size, eta=self.eta, m=self.problem.l2,
                              M=self.problem.clip, R=self.radius, L=self.smoothness)

    @property
    def remaining(self) -> int:
        """The samples the model still holds: ``train_size - deleted_count``."""
        return self.train_size - self.deleted_count

    def certificate_inputs(self) -> dict[str, Any]:
        """The constants a certificate records (``CERTIFICATE_KEYS``), as the accounting writes them."""
        stored = self.to_dict()
        return {k: stored[k] for k in CERTIFICATE_KEYS}

    def after_request(self, charge: RequestCharge, forgotten: int, kept: int, live_digest: str) -> LangevinAccounting:
        """The accounting after one request forgot ``forgotten`` samples in ``charge.epochs`` noisy epochs over
        the ``kept`` remaining ones: Z becomes the charge's Z_out, the counters grow."""
        return replace(
            self,
            deleted_count=self.deleted_count + forgotten,
            z_out=charge.z_out,
            requests=self.requests + 1,
            unlearning_epochs_total=self.unlearning_epochs_total + charge.epochs,
            gradient_evaluations_unlearning=self.gradient_evaluations_unlearning + charge.epochs * kept,
            live_digest=live_digest,
        )


_KEYS = frozenset(PROBLEM_KEYS) | ({f.name for f in fields(LangevinAccounting)} - {"problem", "extra"})
