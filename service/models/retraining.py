"""Retraining on request (``POST /v1/models/{id}/retrain``), the caller's reason in the ledger and events."""

from __future__ import annotations

from service.db.tables import Model
from service.errors import Conflict, NotFound
from service.jobs.request_lifecycle import schedule_retrain
from service.models.service import require_live
from service.states import ModelState
from service.uow import UnitOfWork

DEFAULT_REASON = "requested through the API"


def request_retrain(uow: UnitOfWork, model_id: int, reason: str) -> Model:
    """Schedule a retrain of a ready model (under the model lock; 404, 410, 409); the caller commits."""
    model = uow.models.lock(model_id)
    if model is None:
        raise NotFound(f"model {model_id} does not exist")
    require_live(model)
    _check_retrainable(model)
    model.retrain_reason = reason
    schedule_retrain(uow, model, reason)
    return model


def _check_retrainable(model: Model) -> None:
    progress = f"phase {model.phase}, {round(100 * model.progress)}%"
    if model.status == ModelState.RETRAINING:
        raise Conflict(
            f"model {model.id} is already retraining ({progress}): its retrained version is released when "
            "its status is ready again",
            code="already_retraining",
        )
    if model.status == ModelState.FAILED:
        raise Conflict(
            f"model {model.id} failed to train ({model.error}); register it again", code="model_failed"
        )
    if model.status != ModelState.READY or model.current_version_id is None:
        raise Conflict(
            f"model {model.id} is still training ({progress}); it needs no retrain before its first version",
            code="not_ready",
        )
    if model.training is None or model.train_size == 0:
        raise Conflict(f"model {model.id} has no training data left to retrain on", code="no_training_data")
