"""Deletion receipts: a signed statement, verifiable by anyone holding the service's public key, that a
completed deletion request's subjects are out of a model, by which version and under what guarantee."""
