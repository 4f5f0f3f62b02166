"""Registering models; reading their status, versions and weights; predictions from the served version."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, get_args

import numpy as np
import torch

from service.audit.service import model_chain
from service.db.tables import Model, ModelVersion
from service.errors import Conflict, Gone, NotFound, Unprocessable, from_unlearning_error
from service.graphs.models import check_method_data
from service.graphs.storage import subjects_of
from service.job_limits import JobLimits
from service.jobs.state import BlobCache
from service.jobs.versions import model_holder
from service.models.schemas import (
    BudgetPolicyIn,
    HyperParameterOut,
    MethodOut,
    ModelIn,
    ModelOut,
    PredictIn,
    Prediction,
    PredictOut,
    PrivacyIn,
    QualityOut,
    StatusOut,
    VersionOut,
)
from service.states import ModelState
from service.storage.artifacts import ArtifactStore, BlobNotFound
from service.storage.buckets import digests
from service.storage.hot import HotStore, ServingWeights
from service.uow import UnitOfWork
from unlearning.errors import UnknownSampleError, UnlearningError
from unlearning.methods.job_estimate import DataShape
from unlearning.methods.protocol import (
    BudgetPolicy,
    ChecksRegistration,
    MethodState,
    PredictsOwnData,
    PredictsProbabilities,
    PrivacyTarget,
    dataset_kind,
)
from unlearning.methods.registry import get_method, method_names
from unlearning.models import ModelSpec, build_model
from unlearning.models.flat import shared_model
from unlearning.models.nets import check_mlp_size, hidden_widths
from unlearning.serialization import json_restore
from unlearning.tables.quality import QualityReport

_COPIED = ("seq", "budget_epoch", "num_forgotten", "request_count", "train_size", "certificate", "created_at")


def list_methods() -> list[MethodOut]:
    """Every method as the library declares it, restricted to the families ``ModelIn.family`` allows."""
    registrable = get_args(ModelIn.model_fields["family"].annotation)
    out = []
    for name in method_names():
        method = get_method(name)
        defaults = method.default_config()
        hyperparameters = []
        for p in method.hyperparameters():
            shown = p.to_dict(defaults.get(p.name))
            if p.name == "family":
                shown["choices"] = [family for family in p.choices if family in registrable]
            hyperparameters.append(HyperParameterOut(**shown))
        out.append(
            MethodOut(
                name=name,
                request_kinds=sorted(method.request_kinds),
                needs_training_data=method.needs_training_data,
                dataset_kinds=[dataset_kind(method)],
                release_modes=list(method.release_modes()),
                families=[family for family in method.families() if family in registrable],
                hyperparameters=hyperparameters,
                default_hyperparameters=defaults,
            )
        )
    return out


def register(uow: UnitOfWork, cache: BlobCache, body: ModelIn, limits: JobLimits) -> Model:
    """Validate the registration (422), insert the model and queue its training; the caller commits."""
    try:
        method = get_method(body.method)
        defaults = method.default_config()
        _check_family(body)
        unknown = sorted(set(body.hyperparameters) - set(defaults) - {"family"})
        if unknown:
            raise Unprocessable(
                f"unknown hyperparameter(s) {unknown} for method {body.method!r}; it takes "
                f"{sorted(defaults)}",
                code="invalid_config",
            )
        _check_types(defaults, body.hyperparameters)
        if body.release_mode not in method.release_modes():
            raise Unprocessable(
                f"method {body.method!r} releases only in {list(method.release_modes())} mode, not "
                f"{body.release_mode!r}: choose another release_mode or a method that certifies "
                "(GET /v1/methods)",
                code="invalid_config",
            )
        config = {**defaults, **body.hyperparameters, "family": body.family}
        method.check_config(config)
        target = PrivacyTarget(body.privacy.epsilon, body.privacy.delta, body.release_mode)
        BudgetPolicy(**body.budget_policy.model_dump())
        dataset = uow.datasets.lock(body.dataset_id)  # locked: an erasure cannot swap its arrays under us
        if dataset is None:
            raise Unprocessable(
                f"dataset {body.dataset_id} does not exist: upload one with POST /v1/datasets first",
                code="unknown_dataset",
            )
        if dataset.deleted_at is not None:
            raise Unprocessable(
                f"dataset {body.dataset_id} was deleted: upload it again", code="dataset_deleted"
            )
        if dataset.arrays is None:
            raise Unprocessable(
                f"dataset {body.dataset_id} has no rows left (every subject was erased)", code="empty_dataset"
            )
        check_method_data(body.method, method, dataset.id, dataset.arrays)  # table vs graph (service.graphs)
        shape = DataShape(dataset.num_rows, math.prod(dataset.feature_shape), dataset.num_classes)
        if isinstance(method, ChecksRegistration):
            method.check_registration(config, target, shape.features)
        spec = _check_architecture(
            body.family,
            dataset.feature_shape,
            dataset.num_classes,
            config,
            lambda: limits.check(method.estimate_job(config, shape)),
        )
    except UnlearningError as exc:
        raise from_unlearning_error(exc) from exc
    model = uow.models.add(
        Model(
            name=body.name,
            dataset_id=dataset.id,
            method=body.method,
            family=body.family,
            config=config,
            epsilon=body.privacy.epsilon,
            delta=body.privacy.delta,
            release_mode=body.release_mode,
            policy=body.budget_policy.model_dump(),
            seed=body.seed,
            spec=spec.to_dict(),
            status=ModelState.QUEUED,
            phase=ModelState.QUEUED,
            progress=0.0,
            budget_epoch=0,
            train_size=dataset.num_rows,
            training=dataset.arrays,
        )
    )
    data = cache.dataset(dataset.arrays)
    uow.models.add_samples(model.id, *subjects_of(data))  # a graph's samples: its live nodes, or its graphs
    uow.refs.hold(model_holder(model.id), digests(dataset.arrays))
    logged = ("method", "family", "release_mode", "epsilon", "delta", "policy", "train_size")
    uow.audit.append(
        model_chain(model.id),
        "model.registered",
        model_id=model.id,
        payload={"dataset_id": dataset.id, **{name: getattr(model, name) for name in logged}},
    )
    uow.outbox.add("train_model", {"model_id": model.id}, dedupe_key=f"train:{model.id}")
    return model


def _check_family(body: ModelIn) -> None:
    """422 unless a ``family`` among the hyperparameters equals the top-level ``family``."""
    if "family" not in body.hyperparameters:
        return
    value = body.hyperparameters["family"]
    if not isinstance(value, str) or value != body.family:
        choices = ", ".join(get_args(ModelIn.model_fields["family"].annotation))
        raise Unprocessable(
            f"hyperparameters.family {value!r} is not the model's family {body.family!r}: the architecture is "
            f"chosen by the top-level `family` field ({choices}); set it there and leave family out of "
            "hyperparameters",
            code="invalid_config",
        )


def _check_types(defaults: dict[str, Any], overrides: dict[str, Any]) -> None:
    """422 unless each non-null override has its default's JSON type (an int may stand for a float)."""
    for name, value in overrides.items():
        default = defaults.get(name)
        if value is None or default is None or name == "family":
            continue
        expected: tuple[type, ...] = (int, float) if isinstance(default, float) else (type(default),)
        if isinstance(value, bool) != isinstance(default, bool) or not isinstance(value, expected):
            raise Unprocessable(
                f"hyperparameter {name!r} must be a {type(default).__name__} like its default {default!r}, "
                f"got {value!r}",
                code="invalid_config",
            )


def _check_architecture(
    family: str,
    feature_shape: list[int],
    num_classes: int,
    config: dict[str, Any],
    check_job: Callable[[], None],
) -> ModelSpec:
    """The ModelSpec, built once after ``check_job`` to check it (UnlearningError if it cannot be)."""
    shape = tuple(feature_shape) if family == "cnn" else (math.prod(feature_shape),)
    spec = ModelSpec(family=family, input_shape=shape, num_classes=num_classes)
    if family == "mlp":
        check_mlp_size(shape[0], hidden_widths(config.get("hidden", [64])), num_classes)
    check_job()
    build_model(spec)
    return spec


def get_model(uow: UnitOfWork, model_id: int) -> Model:
    model = uow.models.get(model_id)
    if model is None:
        raise NotFound(f"model {model_id} does not exist")
    return model


def model_out(uow: UnitOfWork, model: Model) -> ModelOut:
    version = uow.models.version(model.current_version_id) if model.current_version_id else None
    report = QualityReport.from_dict(version.accounting.get("quality")) if version else None
    return ModelOut(
        id=model.id,
        name=model.name,
        dataset_id=model.dataset_id,
        method=model.method,
        family=model.family,
        hyperparameters=model.config,
        privacy=PrivacyIn(epsilon=model.epsilon, delta=model.delta),
        release_mode=model.release_mode,
        budget_policy=BudgetPolicyIn(**model.policy),
        seed=model.seed,
        status=StatusOut(
            state=model.status,
            phase=model.phase,
            percent=round(100.0 * model.progress, 2),
            eta_seconds=model.eta_seconds,
            error=model.error,
            started_at=model.started_at,
            finished_at=model.finished_at,
            low_quality=bool(report and report.flagged),
        ),
        current_version=version.seq if version else None,
        quality=QualityOut(**report.to_dict()) if report else None,
        budget_epoch=model.budget_epoch,
        train_size=model.train_size,
        created_at=model.created_at,
    )


def version_out(version: ModelVersion, parent_seq: int | None) -> VersionOut:
    return VersionOut(
        **{k: getattr(version, k) for k in _COPIED},
        kind=version.kind,
        parent_seq=parent_seq,
        weights_sha256=version.released_sha256,
        weights_available=version.released_blob is not None,
    )


def versions_out(versions: list[ModelVersion]) -> list[VersionOut]:
    seq_of = {v.id: v.seq for v in versions}
    return [version_out(v, seq_of.get(v.parent_id) if v.parent_id else None) for v in versions]


def require_live(model: Model) -> None:
    """A deleted model answers 410 to everything but reading its history."""
    if model.status == ModelState.DELETED:
        raise Gone(
            f"model {model.id} was deleted at {model.finished_at:%Y-%m-%dT%H:%M:%SZ}: its weights and data "
            "are gone (its versions, ledger and audit log remain readable)",
            code="model_deleted",
        )


def current_version(uow: UnitOfWork, model: Model) -> ModelVersion:
    require_live(model)
    if model.current_version_id is None and model.status == ModelState.FAILED:
        raise Conflict(
            f"model {model.id} failed to train ({model.error}); register it again", code="model_failed"
        )
    if model.current_version_id is None:
        raise Conflict(
            f"model {model.id} has no version yet (status {model.status}, {round(100 * model.progress)}% of "
            f"{model.phase}); try again when its status is ready",
            code="not_ready",
        )
    version = uow.models.version(model.current_version_id)
    assert version is not None
    return version


def released_weights(artifacts: ArtifactStore, version: ModelVersion) -> bytes:
    """The version's released weights (safetensors); 409 ``superseded`` once a newer version purged them."""
    try:
        if version.released_blob is not None:
            return artifacts.get(version.released_blob)
    except BlobNotFound:
        pass
    raise Conflict(f"the weights of version {version.seq} were superseded; retry", code="superseded")


def serving(uow: UnitOfWork, hot: HotStore, cache: BlobCache, model: Model) -> ServingWeights:
    """The served weights from Redis, republished from the durable stores if Redis lost them."""
    require_live(model)
    current = hot.get_serving(model.id)
    if current is not None:
        return current
    version = current_version(uow, model)
    if version.released_blob is None:
        raise Conflict(f"model {model.id} is switching versions; retry", code="superseded")
    weights = cache.weights(version.released_blob)
    hot.set_serving(model.id, version.id, version.seq, version.spec, weights)
    return ServingWeights(seq=version.seq, version_id=version.id, spec=version.spec, weights=weights)


def predict(
    uow: UnitOfWork, cache: BlobCache, model: Model, served: ServingWeights, body: PredictIn
) -> PredictOut:
    """Predictions of the served version, by the method (``PredictsOwnData``) or the flat model."""
    spec = _flat_spec(served.spec)
    try:
        if isinstance(get_method(model.method), PredictsOwnData) or spec is None:
            predictions = _method_predictions(uow, cache, model, served, body)
        else:
            rows = _own_rows(cache, model, body.sample_ids) if body.sample_ids else body.instances
            predictions = _flat_predictions(served, spec, model.id, rows)
    except UnlearningError as exc:
        raise from_unlearning_error(exc) from None
    return PredictOut(model_id=model.id, version=served.seq, predictions=_named(uow, model, predictions))


def _named(uow: UnitOfWork, model: Model, predictions: list[Prediction]) -> list[Prediction]:
    """The predictions with their class names, when the model's dataset has them."""
    names = uow.datasets.class_names(model.dataset_id)
    if not names:
        return predictions
    return [
        p.model_copy(update={"class_name": names[p.label] if p.label < len(names) else None})
        for p in predictions
    ]


def _flat_spec(spec: dict[str, Any]) -> ModelSpec | None:
    try:
        return ModelSpec.from_dict(spec)
    except (KeyError, TypeError, ValueError):
        return None  # a model over derived features (graph propagation, scattering, fitted row transforms)


def _own_rows(cache: BlobCache, model: Model, sample_ids: list[str]) -> Any:
    """The remaining training rows named by ``sample_ids`` (a forgotten one is unknown)."""
    if model.training is None:
        raise UnknownSampleError(f"model {model.id} has no training rows left")
    data = cache.dataset(model.training)
    return data.features[data.indices_of(sample_ids)].reshape(len(sample_ids), -1).tolist()


def _flat_predictions(served: ServingWeights, spec: ModelSpec, model_id: int, rows: Any) -> list[Prediction]:
    width = math.prod(spec.input_shape)
    for i, row in enumerate(rows):
        if len(row) != width:
            raise Unprocessable(
                f"instance {i} has {len(row)} features; model {model_id} takes {width} "
                f"(input shape {list(spec.input_shape)}, flattened row-major)",
                code="dimension_mismatch",
            )
    flat = shared_model(served.spec)
    x = torch.tensor(rows, dtype=served.weights.dtype).reshape(len(rows), *spec.input_shape)
    with torch.no_grad():
        probabilities = torch.softmax(flat.logits(served.weights, x), dim=1)
    if not torch.isfinite(probabilities).all():
        raise Unprocessable(
            "the features are too large for the model's arithmetic (the scores overflowed): send values of "
            "the scale the model was trained on",
            code="overflow",
        )
    return _from_probabilities(probabilities)


def _from_probabilities(probabilities: Any) -> list[Prediction]:
    return [
        Prediction(label=int(p.argmax()), probabilities=[round(float(v), 7) for v in p])
        for p in probabilities
    ]


def _method_predictions(
    uow: UnitOfWork, cache: BlobCache, model: Model, served: ServingWeights, body: PredictIn
) -> list[Prediction]:
    method = get_method(model.method)
    if not isinstance(method, PredictsOwnData):
        raise Unprocessable(
            f"model {model.id} works on derived features and its method ({model.method}) does not answer "
            "predictions: download its weights from /weights instead",
            code="predictions_unsupported",
        )
    version = uow.models.version(served.version_id)
    if version is None or version.released_blob is None:
        raise Conflict(f"model {model.id} is switching versions; retry", code="superseded")
    state = MethodState(
        method=model.method,
        model=method.restore_model(version.spec),
        clean_weights=served.weights,
        released_weights=served.weights,
        statistics=None,
        accounting=json_restore(dict(version.accounting)),
        artifacts={name: cache.artifact(digest) for name, digest in version.artifacts.items()},
    )
    data = cache.dataset(model.training) if model.training is not None else None
    instances = np.asarray(body.instances, dtype=np.float64) if body.instances else None
    if isinstance(method, PredictsProbabilities):
        probabilities = method.predict_probabilities(
            state, data, instances=instances, item_ids=body.sample_ids
        )
        if probabilities is not None:
            return _from_probabilities(probabilities)
    labels = method.predict(state, data, instances=instances, item_ids=body.sample_ids)
    return [Prediction(label=int(label)) for label in labels]
