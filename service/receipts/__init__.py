"""Deletion receipts: signed statements that a completed request's subjects are out of a model."""
