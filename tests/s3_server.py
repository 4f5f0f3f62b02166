"""An S3-compatible server for the tests of the S3 artifact store: moto's server (the S3 HTTP API,
served from memory on a local port), started in a thread. There is no S3, MinIO or network here."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str

    def bucket(self) -> str:
        """A new, empty bucket."""
        from service.storage.s3 import s3_client

        name = f"lethe-{secrets.token_hex(6)}"
        s3_client(self.endpoint_url).create_bucket(Bucket=name)
        return name


@contextmanager
def s3_server() -> Iterator[S3Server]:
    server_module = pytest.importorskip("moto.server")
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    saved = {
        k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    }
    # boto3 reads its credentials from the environment, as a deployment would give them.
    os.environ.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1")
    try:
        host, port = server.get_host_and_port()
        yield S3Server(f"http://{host}:{port}")
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
