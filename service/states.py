"""The states of models, deletion requests and callbacks, and the kinds of model versions.

Each is a ``StrEnum`` whose members equal their values, so database columns hold plain strings and SQL
text interpolates ``Member.value`` rather than repeating literals. Imports no domain package.
"""

from __future__ import annotations

from enum import StrEnum, unique


# The class docstrings are the API's descriptions of these types (openapi.yaml): they speak of the API.
# Stored in models.status (and, for a state that is also a phase, models.phase).
@unique
class ModelState(StrEnum):
    """Where a model stands.

    ``queued`` -> ``training`` -> ``ready`` or ``failed``; ``ready`` -> ``retraining`` (the budget ran
    out, or ``POST /v1/models/{id}/retrain``) -> ``ready`` (the retrained version, or the old one when the
    retrain failed); a ``training`` or ``retraining`` whose progress stalls is started again. Any state
    -> ``deleted`` (``DELETE /v1/models/{id}``), which is final.
    """

    QUEUED = "queued"
    """Registered; its first training has not started."""
    TRAINING = "training"
    """The first version is being fitted (no version serves yet)."""
    READY = "ready"
    """A version serves predictions; deletions are applied to it as they come."""
    RETRAINING = "retraining"
    """A retrain on the remaining data is waiting or running (a new budget epoch); the current version
    still serves, and deletions submitted meanwhile wait for the retrain, which excludes them too."""
    FAILED = "failed"
    """The first training failed (``status.error`` says why); the model never served and accepts no
    deletions."""
    DELETED = "deleted"
    """Deleted: its data and weights are gone, its history (versions, ledger, audit log) stays."""


# Stored in deletion_requests.state and request_events.state (the history).
@unique
class RequestState(StrEnum):
    """Where a deletion request stands.

    ``received`` -> ``queued`` (both at acceptance: ``received`` shows only in the history); ``queued``
    -> ``applying`` (history only) -> ``applied`` (an update released a version without its subjects) ->
    ``completed`` (the bytes that version dropped are deleted). When the privacy budget cannot cover it:
    ``queued`` -> ``awaiting_retrain`` -> ``retraining`` -> ``applied`` -> ``completed``; requests
    submitted while a retrain is scheduled go ``queued`` -> ``retraining`` directly. ``queued`` and
    ``awaiting_retrain`` -> ``canceled`` (``POST /v1/deletions/{id}/cancel``); a waiting request -> ``failed``
    when it cannot be applied, or -> ``completed`` when its model is deleted. ``completed``, ``failed``
    and ``canceled`` are final.
    """

    RECEIVED = "received"
    """Accepted by the API (history only: the request is queued at the same time)."""
    QUEUED = "queued"
    """Waiting for the model's next update round."""
    APPLYING = "applying"
    """Taken by an update (history only: recorded with the update's outcome, at the time it took it)."""
    APPLIED = "applied"
    """In a released version that excludes its subjects; the bytes that version dropped are not yet
    deleted from the artifact store."""
    COMPLETED = "completed"
    """Done: no copy of its subjects' data is left (a receipt can be issued)."""
    AWAITING_RETRAIN = "awaiting_retrain"
    """The privacy budget cannot cover it: waiting for a retrain that excludes it."""
    RETRAINING = "retraining"
    """A retrain that excludes it is running."""
    FAILED = "failed"
    """It could not be applied (``failure_reason`` says why); final."""
    CANCELED = "canceled"
    """Canceled by its client before an update took it; final."""


# Stored in deletion_requests.callback_state.
@unique
class CallbackState(StrEnum):
    """The delivery of a deletion request's callback (null when the request has no callback URL, or has
    not ended yet).

    ``pending`` (the request ended: the POST is due, or retried with backoff) -> ``delivered``, or ->
    ``failed`` after the last attempt or a refusal. ``delivered`` and ``failed`` are final.
    """

    PENDING = "pending"
    """Due: the next attempt is queued."""
    DELIVERED = "delivered"
    """The client's endpoint accepted it."""
    FAILED = "failed"
    """Given up: every attempt failed, or the URL may not be reached (the deletion itself stands)."""


# Stored in model_versions.kind.
@unique
class VersionKind(StrEnum):
    """How a model version came to be: the first is ``initial``, each later one ``unlearned`` or
    ``retrained``."""

    INITIAL = "initial"
    """The first training of the model (budget epoch 1)."""
    UNLEARNED = "unlearned"
    """An update that forgot a batch of deletion requests within the current budget epoch."""
    RETRAINED = "retrained"
    """A retrain on the remaining data: a new budget epoch."""
