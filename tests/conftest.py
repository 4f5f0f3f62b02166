"""Shared test configuration, and the S3-compatible server. Fixtures for the service live next to
their tests: tests/integration/conftest.py (real Postgres, Redis and Celery) and tests/contract/conftest.py
(the embedded app)."""

from collections.abc import Iterator

import pytest

from tests.s3_server import S3Server, s3_server


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """An S3-compatible server (moto's, in a thread) for the S3 artifact store's tests."""
    with s3_server() as server:
        yield server
