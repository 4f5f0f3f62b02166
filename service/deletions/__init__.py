"""Deletion requests: submission, state history, cancellation."""
