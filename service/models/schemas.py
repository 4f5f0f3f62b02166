"""Model, version and prediction bodies."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, field_validator, model_validator

from service.schemas import MAX_DB_INT, PRINTABLE, Name, Strict, SubjectId


class PrivacyIn(Strict):
    epsilon: float = Field(1.0, gt=0, le=1e6)
    delta: float = Field(1e-3, gt=0, lt=1)


class BudgetPolicyIn(Strict):
    """When a retrain starts a new budget epoch; the first limit the next update would cross wins."""

    max_sigma: float | None = Field(None, gt=0, description="Largest noise std a certified release may carry")
    max_deletions: int | None = Field(None, ge=1, le=MAX_DB_INT, description="Deletions per budget epoch")
    max_deletion_fraction: float | None = Field(
        0.3, gt=0, le=1, description="Deletions per epoch as a fraction of its training set"
    )


class ModelIn(Strict):
    name: Name
    dataset_id: int = Field(ge=1, le=MAX_DB_INT)
    method: str = Field("hessian_free", min_length=1, max_length=64)
    family: Literal["logistic_regression", "mlp", "cnn"] = "logistic_regression"
    hyperparameters: dict[str, Any] = Field(
        default_factory=dict, description="Overrides of the method's defaults (GET /v1/methods lists them)"
    )
    privacy: PrivacyIn = Field(default_factory=PrivacyIn)
    release_mode: Literal["certified", "audited"] = "audited"
    budget_policy: BudgetPolicyIn = Field(default_factory=BudgetPolicyIn)
    seed: int = Field(0, ge=0, le=2**62)

    @field_validator("hyperparameters")
    @classmethod
    def _finite(cls, value: dict[str, Any]) -> dict[str, Any]:
        def check(v: Any) -> None:
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError("hyperparameters must be finite numbers")
            if isinstance(v, dict):
                for x in v.values():
                    check(x)
            if isinstance(v, list):
                for x in v:
                    check(x)

        check(value)
        return value


class RetrainIn(Strict):
    reason: Annotated[str, StringConstraints(min_length=1, max_length=500, pattern=PRINTABLE)] | None = Field(
        None,
        description="Why, one line of printable text (kept in the ledger and the audit log); default: "
        "requested through the API",
    )


class StatusOut(BaseModel):
    state: Literal["queued", "training", "ready", "retraining", "failed", "deleted"]
    phase: str
    percent: float = Field(description="Progress of the current phase, 0-100")
    eta_seconds: float | None
    error: str | None
    started_at: datetime | None
    finished_at: datetime | None


class ModelOut(BaseModel):
    id: int
    name: str
    dataset_id: int
    method: str
    family: str
    hyperparameters: dict[str, Any]
    privacy: PrivacyIn
    release_mode: str
    budget_policy: BudgetPolicyIn
    seed: int
    status: StatusOut
    current_version: int | None = Field(description="Sequence number of the served version")
    budget_epoch: int
    train_size: int
    created_at: datetime


class ModelList(BaseModel):
    models: list[ModelOut]
    next_after_id: int | None


class VersionOut(BaseModel):
    seq: int
    kind: Literal["initial", "unlearned", "retrained"]
    parent_seq: int | None
    budget_epoch: int
    num_forgotten: int
    request_count: int
    train_size: int
    weights_sha256: str
    weights_available: bool = Field(description="False once a newer version superseded it (weights purged)")
    certificate: dict[str, Any]
    created_at: datetime


class VersionList(BaseModel):
    model_id: int
    versions: list[VersionOut]
    next_after_seq: int | None = Field(
        description="Pass as after_seq for the next page; null: this page is the last"
    )


class PredictIn(Strict):
    instances: list[list[float]] = Field(
        default_factory=list,
        max_length=1000,
        description="Rows of flattened features (row-major for images)",
    )
    sample_ids: list[SubjectId] = Field(
        default_factory=list,
        max_length=1000,
        description="Or items of the model's remaining training data by id: rows, nodes of a node graph, "
        "graphs of a collection (a forgotten item is unknown: 422)",
    )

    @model_validator(mode="after")
    def _one_source(self) -> PredictIn:
        if bool(self.instances) == bool(self.sample_ids):
            raise ValueError("give either instances (feature rows) or sample_ids (items of the model's data)")
        return self


class Prediction(BaseModel):
    label: int = Field(description="The predicted class index")
    class_name: str | None = Field(
        None, description="The class's name, when the dataset's labels were names (its class_names); else null"
    )
    probabilities: list[float] | None = Field(
        None,
        description="Class probabilities (softmax models); null for one-vs-rest models, which give labels",
    )


class PredictOut(BaseModel):
    model_id: int
    version: int
    predictions: list[Prediction]


class MethodOut(BaseModel):
    name: str
    request_kinds: list[str]
    needs_training_data: bool
    default_hyperparameters: dict[str, Any]


class MethodList(BaseModel):
    methods: list[MethodOut]
