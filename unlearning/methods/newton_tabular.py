"""The ``newton_removal`` method: certified removal by a Newton step for logistic regression on tabular
features (Guo, Goldstein, Hannun, van der Maaten, ICML 2020, "Certified Data Removal from Machine Learning
Models", Algorithm 2; digest 001 section 1). It is also the certified graph unlearning benchmark's "without
the graph" baseline (digest 001 section 5.1, baseline 3): the same model on raw node features.

fit     standardise/normalise the rows (:class:`TabularFeatureMap`), draw ``B ~ N(0, alpha^2 I)`` from
        the fit seed, minimise the perturbed loss to tight optimality (:mod:`unlearning.newton`).
forget  ``W <- W + H^{-1} Delta`` with ``Delta`` the gradient of the leaving rows plus ``lam r W``
        (r rows leave), ``H`` the Hessian on the rows that stay, solved by CG; the data-dependent
        residual bound is charged; when the epoch's charges would pass
        ``alpha * epsilon / sqrt(2 ln(1.5/delta))`` the method retrains on what remains with fresh
        noise (a new budget epoch) instead of stepping.

The design matrix is recomputed from ``remaining`` on every request (a row-local transform), so the
state holds no training rows: only the weights, the frozen feature statistics of ``standardize`` and
scalars. Rows only leave within an epoch, so the operator norm measured at the epoch's start bounds
every later design (a row-submatrix never has a larger norm).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from unlearning.data import Dataset
from unlearning.device import default_device
from unlearning.errors import (
    AlreadyDeletedError,
    DimensionMismatchError,
    InvalidConfigError,
    InvalidDatasetError,
)
from unlearning.methods.hyperparameters import HyperParameter
from unlearning.methods.job_estimate import FLOAT64, DataShape, JobEstimate, estimate, hot_store_bytes
from unlearning.methods.protocol import (
    BudgetPolicy,
    ForgetRequest,
    MethodState,
    PrivacyTarget,
    ProgressCallback,
)
from unlearning.methods.registry import register
from unlearning.newton import (
    DenseDesign,
    EpochStart,
    NewtonAccounting,
    NewtonConfig,
    NewtonMethodBase,
    NewtonModelSpec,
    Objective,
    Removal,
    columns_for,
    gradient_difference,
    newton_hyperparameters,
    newton_progress,
    one_source,
    predict_labels,
    released_weight_matrix,
    signed_targets,
    start_epoch,
)
from unlearning.newton.config import MIN_LAM
from unlearning.newton.estimate import newton_terms
from unlearning.privacy.certificate import Certificate

NORMALIZATIONS = ("scaled_clip", "clip", "row_l2", "standardize", "none")
MAX_INTERCEPT = 1e3  # the bias column's value: rows are scaled into the unit ball, the default is 1
AUDITED_C = 10.0  # the derived lam is scikit-learn's C = 10 (audited) or C = 1 (certified) on standardised rows
CERTIFIED_C = 1.0


INTERCEPT = HyperParameter("intercept", "number", "Value of a constant column appended as a bias (0: none)", minimum=0,
                           maximum=MAX_INTERCEPT)


def derived_lam(n: int, num_features: int, release_mode: str) -> float:
    """lam when ``lam`` is None: lam = 1 / (C n D), D the number of feature columns, C = 10 for an
    audited release and C = 1 for a certified one.

    The objective is sum_i l_i + (lam n / 2) ||W||^2 on rows divided by about sqrt(D) (``scaled_clip``;
    a standardised row has E||x||^2 = D), so this lam is scikit-learn's ``C`` on the standardised rows.
    One-vs-rest needs the weaker regulariser where no budget is at stake (C = 1 costs 13 points on iris'
    middle class); a certified release keeps C = 1, whose Newton steps charge less of the residual budget
    per deletion. At least ``MIN_LAM``, which only a table of more than 1e11 cells would go below.
    """
    c = CERTIFIED_C if release_mode == "certified" else AUDITED_C
    return max(MIN_LAM, 1.0 / (c * max(int(n), 1) * max(int(num_features), 1)))


@dataclass(frozen=True)
class TabularFeatureMap:
    """Row transform before the linear model.

    ``scaled_clip``: ``x / max(sqrt(D), ||x||)`` for D feature columns (data-independent: a standardised
    row, of typical norm sqrt(D), is scaled into the unit ball, a longer one is clipped onto its sphere);
    ``clip``: ``x / max(1, ||x||)`` (data-independent; rows already inside the unit ball are kept);
    ``row_l2``: ``x / ||x||``; ``standardize``: the certified-graph-unlearning code's preprocessing,
    column-wise ``(x - mean) / std`` then every row divided by the largest standardised row norm, with
    statistics fitted at the epoch's start (they depend on every row present then; see the notes of
    the certificate); ``none``: raw. ``intercept`` > 0 appends a constant column of that value (a
    bias; it is regularised like every other weight).
    """

    normalization: str = "clip"
    intercept: float = 0.0
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None
    divisor: float = 1.0

    @staticmethod
    def check(normalization: object, intercept: object) -> None:
        if normalization not in NORMALIZATIONS:
            raise InvalidConfigError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
        INTERCEPT.check(intercept)

    @classmethod
    def fit(cls, features: np.ndarray, normalization: str, intercept: float) -> TabularFeatureMap:
        cls.check(normalization, intercept)
        if normalization != "standardize":
            return cls(normalization, float(intercept))
        x = np.asarray(features, dtype=np.float64).reshape(len(features), -1)
        mean, std = x.mean(0), x.std(0)
        scale = np.where(std > 1e-12, std, 1.0)
        norms = np.linalg.norm((x - mean) / scale, axis=1)
        divisor = float(norms.max()) if norms.size and norms.max() > 0 else 1.0
        return cls(normalization, float(intercept), mean, scale, divisor)

    @property
    def uses_statistics(self) -> bool:
        return self.normalization == "standardize"

    def transform(self, features: np.ndarray) -> np.ndarray:
        x = np.asarray(features, dtype=np.float64).reshape(len(features), -1)
        if self.normalization == "standardize":
            assert self.mean is not None and self.scale is not None
            x = (x - self.mean) / self.scale / self.divisor
        elif self.normalization in ("scaled_clip", "clip", "row_l2"):
            norms = np.linalg.norm(x, axis=1, keepdims=True)
            if self.normalization == "row_l2":
                denom = np.where(norms > 0, norms, 1.0)
            else:
                radius = np.sqrt(max(x.shape[1], 1)) if self.normalization == "scaled_clip" else 1.0
                denom = np.maximum(norms, radius)
            x = x / denom
        if self.intercept > 0:
            x = np.concatenate([x, np.full((len(x), 1), self.intercept)], axis=1)
        return np.ascontiguousarray(x)

    def describe(self) -> dict[str, Any]:
        return {"kind": "tabular", "normalization": self.normalization, "intercept": self.intercept,
                "standardize_divisor": self.divisor}

    def artifacts(self) -> dict[str, torch.Tensor]:
        if self.mean is None or self.scale is None:
            return {}
        return {"feature_mean": torch.from_numpy(self.mean.copy()), "feature_scale": torch.from_numpy(self.scale.copy())}

    @classmethod
    def restore(cls, described: Mapping[str, Any], artifacts: Mapping[str, torch.Tensor]) -> TabularFeatureMap:
        mean = artifacts.get("feature_mean")
        scale = artifacts.get("feature_scale")
        return cls(
            str(described["normalization"]), float(described["intercept"]),
            None if mean is None else mean.cpu().numpy(), None if scale is None else scale.cpu().numpy(),
            float(described.get("standardize_divisor", 1.0)),
        )


def _dataset(data: Any, what: str) -> Dataset:
    if not isinstance(data, Dataset):
        raise InvalidDatasetError(f"the newton_removal method {what} a tabular Dataset, got {type(data).__name__}")
    return data


class NewtonTabular(NewtonMethodBase[NewtonAccounting]):
    """The ``newton_removal`` method; see the module docstring."""

    name: ClassVar[str] = "newton_removal"
    request_kinds: ClassVar[frozenset[str]] = frozenset({"sample", "owner"})
    needs_training_data: ClassVar[bool] = True
    forget_needs: ClassVar[str] = "the remaining training data"
    accounting_type = NewtonAccounting

    def hyperparameters(self) -> tuple[HyperParameter, ...]:
        return (
            *newton_hyperparameters("derived from the data: 1/(C n D), C = 10 audited, 1 certified"),
            HyperParameter("normalization", "string", "Row transform before the model: clip (x / max(1, ||x||)), "
                           "row_l2, standardize (statistics fitted at each budget epoch's start) or none",
                           choices=NORMALIZATIONS),
            INTERCEPT,
        )

    def default_config(self) -> dict[str, Any]:
        """Guo et al. / digest 001 defaults (alpha 0.1, tight residual bound, CG) on rows scaled into the unit
        ball (``scaled_clip``) with a bias column of 1; ``lam`` None: :func:`derived_lam`, 1 / (C n D),
        recorded in the accounting's ``config``."""
        return {**NewtonConfig().to_dict(), "lam": None, "normalization": "scaled_clip", "intercept": 1.0}

    def check_config(self, config: Mapping[str, Any]) -> None:
        merged, _ = self._configs(self._with_lam(config, 1.0))  # a None lam is derived at fit
        TabularFeatureMap.check(merged["normalization"], merged["intercept"])

    def estimate_job(self, config: Mapping[str, Any], shape: DataShape) -> JobEstimate:
        """Newton-CG on the transformed rows (:func:`unlearning.newton.estimate.newton_terms`; a null lam
        as an audited release derives it, the smaller), the row transform making three float64 copies of
        the design."""
        merged = self._with_lam(config, derived_lam(shape.rows, shape.features, "audited"))  # the smaller lam
        dim = shape.features + (1 if merged["intercept"] else 0)
        memory, flops, fixed = newton_terms(shape.rows, dim, shape.classes, merged)
        memory["the design and its row transform (3 float64 copies)"] = 3.0 * shape.rows * dim * FLOAT64
        return estimate(memory, flops, fixed, hot_store=hot_store_bytes(dim * shape.classes, FLOAT64))

    def _with_lam(self, config: Mapping[str, Any], lam: float) -> dict[str, Any]:
        """``config`` over the defaults, ``lam`` standing in where its value is None."""
        merged = {**self.default_config(), **dict(config)}
        if merged.get("lam") is None:
            merged["lam"] = lam
        return merged

    # ----------------------------------------------------------------------------------------- fit
    def fit(
        self,
        dataset: Dataset,
        config: Mapping[str, Any],
        privacy: PrivacyTarget,
        seed: int,
        progress: ProgressCallback | None = None,
        policy: BudgetPolicy | None = None,
    ) -> tuple[MethodState, Certificate]:
        data = _dataset(dataset, "trains on")
        merged, cfg = self._configs(
            self._with_lam(config, derived_lam(len(data), data.num_features, privacy.release_mode))
        )
        fmap = TabularFeatureMap.fit(data.features, str(merged["normalization"]), float(merged["intercept"]))
        state = self._open_epoch(data, fmap, merged, cfg, privacy, seed, noise_seed=seed, epoch=0, retrains=0,
                                 progress=progress)
        if progress:
            progress("done", 1.0)
        return state, self._opening_certificate(state, privacy)

    def _objective(self, data: Dataset, fmap: TabularFeatureMap, cfg: NewtonConfig) -> Objective:
        device = default_device()
        design = torch.from_numpy(fmap.transform(data.features)).to(device)
        targets = signed_targets(data.labels, data.num_classes, device)
        weight = torch.ones(len(data), dtype=torch.float64, device=device)
        return Objective(DenseDesign(design), targets, weight, cfg.lam)

    def _open_epoch(
        self, data: Dataset, fmap: TabularFeatureMap, merged: Mapping[str, Any], cfg: NewtonConfig,
        privacy: PrivacyTarget, seed: int, *, noise_seed: int, epoch: int, retrains: int,
        init: torch.Tensor | None = None, progress: ProgressCallback | None = None,
    ) -> MethodState:
        objective = self._objective(data, fmap, cfg)
        noise_std = cfg.alpha if privacy.release_mode == "certified" else 0.0
        start: EpochStart = start_epoch(objective, cfg, noise_std, noise_seed, init=init,
                            on_step=newton_progress(progress, cfg.max_newton))
        spec = NewtonModelSpec("logistic_regression_ovr", fmap.describe(), objective.design.dim,
                               columns_for(data.num_classes), data.num_classes)
        accounting = NewtonAccounting.opening(
            start, cfg, privacy, len(data), fit_seed=seed, epoch=epoch, retrains=retrains,
            method_config={k: merged[k] for k in ("normalization", "intercept")},
        )
        flat = start.weights.detach().reshape(-1).cpu()
        return MethodState(
            method=self.name, model=spec, clean_weights=flat, released_weights=flat.clone(), statistics=None,
            accounting=accounting.to_dict(), artifacts=fmap.artifacts(), deleted_ids=set(),
        )

    def predict(self, state: MethodState, data: Any, *, instances: Any | None = None,
                item_ids: Sequence[str] = ()) -> np.ndarray:
        """Labels of raw rows, or of remaining rows named by sample id, through the epoch's feature map."""
        one_source(instances, item_ids, "sample ids of the model's remaining rows")
        rows = _dataset(data, "predicts on").features[data.indices_of(item_ids)] if item_ids else instances
        fmap = TabularFeatureMap.restore(state.model.feature_map, state.artifacts)
        features = fmap.transform(np.asarray(rows, dtype=np.float64))
        W = released_weight_matrix(state)
        if features.shape[1] != W.shape[0]:
            width = W.shape[0] - (1 if fmap.intercept > 0 else 0)
            raise DimensionMismatchError(f"each row needs {width} features, got {np.asarray(rows).shape[-1]}")
        return predict_labels(W, torch.from_numpy(features))

    # -------------------------------------------------------------------------------------- forget
    def _removal(
        self, state: MethodState, acc: NewtonAccounting, request: ForgetRequest, remaining: Any,
        privacy: PrivacyTarget,
    ) -> Removal:
        """The leaving rows' gradient plus ``lam r W`` (r rows leave), on the design recomputed from ``remaining``."""
        data = _dataset(remaining, "forgets from")
        if len(data) != acc.remaining:
            raise DimensionMismatchError(
                f"the remaining data has {len(data)} rows, this model's budget epoch has {acc.remaining}: "
                "pass the current training data of the epoch"
            )
        leaving = self._resolve(state, data, request)
        spec: NewtonModelSpec = state.model
        merged, cfg = self._configs({**acc.config.to_dict(), **acc.method_config})
        fmap = TabularFeatureMap.restore(spec.feature_map, state.artifacts)
        objective_old = self._objective(data, fmap, cfg)
        rows = torch.as_tensor(data.indices_of(leaving), device=objective_old.weight.device)
        weight_new = objective_old.weight.clone()
        weight_new[rows] = 0.0
        objective = objective_old.with_weight(weight_new)
        if objective.count == 0:
            raise InvalidDatasetError("forgetting these samples would leave no training data")
        W = spec.weight_matrix(state.clean_weights.to(torch.float64)).to(objective.weight.device)
        block = objective_old.design.take(rows)
        targets = objective_old.targets[rows]
        delta = gradient_difference(W, targets, block, torch.ones_like(rows, dtype=torch.float64), block,
                                    torch.zeros_like(rows, dtype=torch.float64), cfg.lam,
                                    objective_old.count, objective.count)

        def reopen(seed: int, *, noise_seed: int, epoch: int, retrains: int, init: torch.Tensor) -> MethodState:
            kept = data.without(leaving)
            fitted = TabularFeatureMap.fit(kept.features, fmap.normalization, fmap.intercept)
            return self._open_epoch(kept, fitted, merged, cfg, privacy, seed, noise_seed=noise_seed, epoch=epoch,
                                    retrains=retrains, init=init)

        # Rows only leave: the epoch's operator-norm bound stays valid for every later design.
        return Removal(objective, W, delta, acc.op_norm_bound, "epoch_value_rows_only_leave", len(leaving),
                       tuple(leaving), reopen)

    def _notes(self, state: MethodState, privacy: PrivacyTarget) -> str:
        method_config = self.ledger(state).method_config
        base = (
            "Newton-step removal with objective perturbation (Guo et al. 2020, Algorithm 2). The bound is the "
            "accumulated data-dependent gradient-residual bound of this budget epoch, starting at the optimiser's "
            "residual; the budget is alpha*epsilon/sqrt(2 ln(1.5/delta)) for the joint model (not multiplied by "
            "the number of classes). The noise seed is secret-equivalent: keep certificates from model users."
        )
        if method_config["normalization"] == "standardize":
            base += (" Feature statistics (column means/stds, max row norm) were fitted at this epoch's start over "
                     "every row present then; deleted rows influence them until the next retrain.")
        if privacy.release_mode != "certified":
            base += " Audited release: trained without noise, so no (epsilon, delta) guarantee holds."
        return base

    @staticmethod
    def _resolve(state: MethodState, data: Dataset, request: ForgetRequest) -> list[str]:
        if len(set(request.sample_ids)) != len(request.sample_ids):
            raise AlreadyDeletedError("the request names the same sample id twice")
        ids: list[str] = []
        for sid in request.sample_ids:
            if sid in state.deleted_ids and not data.contains(sid):
                raise AlreadyDeletedError(f"sample {sid!r} was already forgotten in this budget epoch")
            ids.append(sid)
        if request.owner_ids:
            for sid in data.samples_of_owners(request.owner_ids):
                if sid not in ids:
                    ids.append(sid)
        data.indices_of(ids)  # unknown ids raise UnknownSampleError naming the first
        return ids


register(NewtonTabular())
