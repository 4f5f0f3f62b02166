"""``python -m workers.alive``: exit 0 when a worker of this host renewed its liveness record recently
(:mod:`service.monitoring.liveness`), 1 otherwise, saying why: docker-compose's healthcheck of the
worker service. ``--lanes train,retrain`` also requires those lanes among this host's workers."""

from __future__ import annotations

import argparse
import json
import socket
import sys

import redis

from service.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.alive", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", default="", help="comma-separated lanes that must be served here")
    args = parser.parse_args(argv)
    settings = Settings()
    if not settings.redis_url:
        print("no LETHE_REDIS_URL: embedded mode runs no worker process", file=sys.stderr)
        return 1
    client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=3, socket_timeout=3)
    pattern = f"{settings.redis_prefix}:worker:*@{socket.gethostname()}"
    try:
        keys = list(client.scan_iter(match=pattern, count=100))
        records = [json.loads(raw) for raw in client.mget(keys) if raw is not None] if keys else []
    except redis.RedisError as exc:
        print(f"Redis unreachable: {exc}", file=sys.stderr)
        return 1
    served = {lane for record in records for lane in record.get("lanes", [])}
    missing = [lane for lane in args.lanes.split(",") if lane and lane not in served]
    if not records or missing:
        print(f"no live worker on this host for {missing or 'any lane'}", file=sys.stderr)
        return 1
    print(f"alive: {len(records)} worker(s) serving {sorted(served)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
