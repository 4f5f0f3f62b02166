"""Lethe's service layer (REST API, persistence, hot store, artifact store, jobs) over :mod:`unlearning`."""
