"""Lethe's service layer: REST API, persistence, hot store, artifact store and job functions.

Depends on :mod:`unlearning` (the core library) and never the other way round.
"""
