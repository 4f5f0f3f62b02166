"""Bounds every loader enforces on uploaded and bundled data."""

MAX_CLASSES = 100_000
"""Most classes a table or graph may have, the service's cap on an explicit ``num_classes``. An inferred
class count is max label + 1, so without this bound one huge label would size a model for it."""
