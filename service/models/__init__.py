"""Registered models, their versions, weights and predictions."""
