"""Errors the core library raises on bad input.

Every error derives from :class:`UnlearningError` and carries a message that says what to fix, so the
service can map it to a 4xx answer without parsing text.
"""

from __future__ import annotations


class UnlearningError(ValueError):
    """Base class: the caller asked for something the library cannot do with this input."""


class InvalidDatasetError(UnlearningError):
    """The dataset is malformed: NaN/inf features, labels out of range, duplicate ids, bad shapes."""


class UnknownSampleError(UnlearningError):
    """A request names a sample id (or owner, node, edge, graph) that the model was never trained on."""


class AlreadyDeletedError(UnlearningError):
    """A request names a sample that an earlier request already removed."""


class EmptyRequestError(UnlearningError):
    """A request names nothing to forget."""


class DimensionMismatchError(UnlearningError):
    """Weights, vectors or features do not have the dimension the model expects."""


class UnsupportedRequestError(UnlearningError):
    """The method cannot serve this kind of request (for example an edge deletion on a tabular model)."""


class InvalidConfigError(UnlearningError):
    """A hyperparameter or privacy target is out of its valid range."""
