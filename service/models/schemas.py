"""Model, version and prediction bodies."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints, field_validator, model_validator

from service.schemas import MAX_DB_INT, PRINTABLE, Name, Strict, SubjectId
from service.states import ModelState, VersionKind


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
            for x in v.values() if isinstance(v, dict) else v if isinstance(v, list) else ():
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
    state: ModelState
    phase: str
    percent: float = Field(description="Progress of the current phase, 0-100")
    eta_seconds: float | None
    error: str | None
    started_at: datetime | None
    finished_at: datetime | None
    low_quality: bool = Field(
        False,
        description="The served version's (re)training measured a held-out accuracy no better than always "
        "answering the majority class (see `quality`)",
    )


class QualityOut(BaseModel):
    """The held-out quality report of the served version's (re)training (table models)."""

    verdict: Literal["ok", "below_baseline", "no_better_than_majority", "not_measured"]
    flagged: bool = Field(description="No better than always answering the majority class")
    accuracy: float | None = Field(description="Held-out accuracy of the method with this configuration")
    majority_rate: float | None = Field(
        description="Held-out accuracy of always answering the majority class"
    )
    baseline_accuracy: float | None = Field(
        description="Held-out accuracy of a plain L2-regularised logistic regression (C = 1, standardised "
        "columns) fitted on the same rows in the same job"
    )
    holdout_rows: int
    probe_train_rows: int
    note: str


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
    quality: QualityOut | None = Field(
        None,
        description="Held-out quality of the served version's (re)training (table models; null before "
        "the first version and for graph models)",
    )
    budget_epoch: int
    train_size: int
    created_at: datetime


class ModelList(BaseModel):
    models: list[ModelOut]
    next_after_id: int | None


class VersionOut(BaseModel):
    seq: int
    kind: VersionKind
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
        default_factory=list, max_length=1000, description="Rows of flattened features (row-major for images)"
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
        None,
        description="The class's name, when the dataset's labels were names (its class_names); else null",
    )
    probabilities: list[float] | None = Field(
        None,
        description="Class probabilities (softmax models); null for one-vs-rest models, which give labels",
    )


class PredictOut(BaseModel):
    model_id: int
    version: int
    predictions: list[Prediction]


class HyperParameterOut(BaseModel):
    """One hyperparameter of a method, with the bounds and choices registration enforces."""

    name: str
    type: Literal["integer", "number", "string", "boolean", "integer_list", "object"] = Field(
        description="JSON type of the value (an integer_list's bounds apply to each item)"
    )
    description: str
    default: Any = Field(
        description="The method's current default; null: derived from the data (default_note)"
    )
    default_note: str | None = Field(
        description="What a null default stands for; null when the default is a value"
    )
    minimum: int | float | None = None
    maximum: int | float | None = None
    exclusive_minimum: bool = Field(False, description="The value must lie above minimum, not at it")
    exclusive_maximum: bool = Field(False, description="The value must lie below maximum, not at it")
    choices: list[Any] = Field(
        default_factory=list,
        description="The values a string takes; for a numeric type, named values accepted besides the numbers "
        "within the bounds",
    )
    nullable: bool = Field(False, description="Whether null is accepted (null_means says what it stands for)")
    null_means: str | None = None
    max_items: int | None = Field(None, description="Longest list accepted (integer_list)")


class MethodOut(BaseModel):
    name: str
    request_kinds: list[str]
    needs_training_data: bool
    dataset_kinds: list[Literal["table", "node_graph", "graph_collection"]] = Field(
        description="The kinds of dataset the method trains on (what POST /v1/datasets uploaded)"
    )
    release_modes: list[Literal["certified", "audited"]]
    families: list[str] = Field(description="The model families (ModelIn.family) the method trains")
    hyperparameters: list[HyperParameterOut] = Field(
        description="Every hyperparameter the method takes, with its type, default, bounds and choices"
    )
    default_hyperparameters: dict[str, Any] = Field(
        description="Name -> default (the defaults of `hyperparameters`, kept for older clients)"
    )


class MethodList(BaseModel):
    methods: list[MethodOut]
