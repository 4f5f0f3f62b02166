"""Shared test configuration. Fixtures for the service live next to their tests:
tests/integration/conftest.py (real Postgres, Redis and Celery) and tests/contract/conftest.py
(the embedded app)."""
