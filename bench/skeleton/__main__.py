"""``python -m bench.skeleton [--rate R] [--requests N] [--loads K] [--with V,...] [--ladder]``.

Starts the skeleton's API and Celery worker (:mod:`bench.skeleton`) on a fresh Postgres database, an
empty Redis database and a temporary blob directory, drives ``--requests`` deletions (one owner each) at
``--rate`` requests/s with ``bench.service``'s open-loop generator after a warm-up, ``--loads`` times,
and reports per load ``p50_ms``, ``p95_ms``, ``p99_ms`` (POST to the server's ``completed_at``),
``post_p50_ms``, ``stage_p50_ms`` (from the history rows), ``versions``, ``cpu_ms_per_request`` (each
process group, as ``bench.service`` counts it) and ``p50_over_target`` (the issue's 20 ms); then, as a
check that the skeleton did the erasure it times, ``leftover``: what remains of the forgotten owners in
each store (all zero).

``--with`` turns variants on (:data:`bench.skeleton.VARIANTS`: each puts back one thing the service does
that the skeleton does not). ``--ladder`` measures, each on a fresh stack, in one sitting: the bare
skeleton, each variant alone, each pair, all of them together, and the bare skeleton again, and adds to each its
``p50_ratio`` and ``cpu_ratio`` (all processes' CPU per request) against the mean of the two bare runs.

The last line of stdout is one JSON object: ``configs``, a list of ``{"variants": [...], "loads":
[...], "p50_ms": median over the loads, "cpu_ms_per_request": median total}`` (with the ratios under
``--ladder``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench import stack
from bench.service import cpu_per_request, log, offered_load, percentile
from bench.skeleton import (
    ENV_BLOBS,
    ENV_DSN,
    ENV_PREFIX,
    ENV_REDIS,
    ENV_VARIANTS,
    MODEL_ID,
    VARIANTS,
    parse_variants,
)
from bench.skeleton.schema import create, owner_ids, vector_key
from service.storage.artifacts import LocalArtifactStore
from workers.launcher import celery_program

TARGET_P50_MS = 20.0
WARMUP, WARMUP_RATE = 20, 50.0


def wait_completed(dsn: str, ids: list[int], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM requests WHERE id = ANY(%s) AND state = 'completed'", (ids,)
            ).fetchone()
            done = row[0] if row else 0
            if done == len(ids):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(ids) - done} of {len(ids)} requests did not complete")
            time.sleep(0.1)


def measure(dsn: str, base: str, owners: list[str], rate: float, processes: dict[str, int]) -> dict[str, Any]:
    """One open-loop load of ``owners`` at ``rate``; its figures, read back from the history rows."""
    cpu = stack.cpu_seconds(processes)
    sent = offered_load(base, MODEL_ID, owners, rate)
    ids = [rid for _, _, rid in sent]
    wait_completed(dsn, ids)
    after = stack.cpu_seconds(processes)
    with psycopg.connect(dsn, autocommit=True) as conn:
        history = conn.execute(
            "SELECT request_id, state, extract(epoch FROM at) FROM history WHERE request_id = ANY(%s)", (ids,)
        ).fetchall()
        versions = conn.execute(
            "SELECT count(DISTINCT version_id) FROM requests WHERE id = ANY(%s)", (ids,)
        ).fetchone()
    at = {(int(r), s): float(t) for r, s, t in history}
    completed = [(at[(rid, "completed")] - t) * 1000.0 for t, _, rid in sent]
    p50 = percentile(completed, 0.5)
    return {
        "rate_rps": rate,
        "requests": len(sent),
        "p50_ms": round(p50, 2),
        "p95_ms": round(percentile(completed, 0.95), 2),
        "p99_ms": round(percentile(completed, 0.99), 2),
        "post_p50_ms": round(percentile([a * 1000.0 for _, a, _ in sent], 0.5), 2),
        "stage_p50_ms": {
            state: round(statistics.median((at[(rid, state)] - t) * 1000.0 for t, _, rid in sent), 2)
            for state in ("queued", "applying", "applied", "completed")
        },
        "versions": versions[0] if versions else None,
        "cpu_ms_per_request": cpu_per_request(cpu, after, len(sent)),
        "p50_over_target": round(p50 / TARGET_P50_MS, 3),
    }


def leftovers(dsn: str, redis_url: str, prefix: str, blobs: Path, owners: list[str]) -> dict[str, int]:
    """What is left of ``owners`` (all forgotten) in each store: their samples, bucket rows or manifest
    entries, approximator vectors in Redis, and the bucket blobs the versions named as garbage."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        samples = conn.execute("SELECT count(*) FROM samples WHERE owner_id = ANY(%s)", (owners,)).fetchone()
        rows = conn.execute("SELECT count(*) FROM buckets WHERE owner_id = ANY(%s)", (owners,)).fetchone()
        manifest = conn.execute("SELECT manifest FROM models WHERE id = %s", (MODEL_ID,)).fetchone()
        garbage = conn.execute("SELECT unnest(garbage) FROM versions").fetchall()
    named = set(owners) & set((manifest[0] if manifest else None) or {})
    hot = redis.Redis.from_url(redis_url)
    return {
        "samples": samples[0] if samples else -1,
        "bucket_rows": rows[0] if rows else -1,
        "manifest_entries": len(named),
        "vectors": int(hot.exists(*(vector_key(prefix, o) for o in owners))),
        "garbage_blobs": sum(LocalArtifactStore(blobs).exists(digest) for (digest,) in garbage),
    }


def skeleton_worker_argv(queue: str) -> list[str]:
    """The skeleton's Celery worker: 2 threads, as ``bench.service`` runs the service's, on ``queue``."""
    return [
        *(celery_program(), "-A", "bench.skeleton.worker", "worker", "--pool=threads", "--concurrency=2"),
        *("-Q", queue, "-n", f"{queue}@%h", "-l", "info"),
        *("--without-gossip", "--without-mingle", "--without-heartbeat"),
    ]


def run_config(chosen: frozenset[str], rate: float, requests: int, loads: int) -> dict[str, Any]:
    """The skeleton with ``chosen`` variants on a fresh stack: ``loads`` measured loads after a warm-up."""
    owners = owner_ids(WARMUP + requests * loads)
    with ExitStack() as exits:
        token = stack.new_token()
        url = exits.enter_context(stack.postgres_database(f"lethe_skeleton_{token}"))
        redis_url = exits.enter_context(stack.redis_database(token))
        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        var = Path(exits.enter_context(tempfile.TemporaryDirectory(prefix="lethe-skeleton-")))
        prefix = f"skeleton-{token}"
        create(dsn, redis_url, prefix, var / "blobs", owners, seed=0, manifest="manifest" in chosen)
        env = {
            ENV_DSN: dsn,
            ENV_REDIS: redis_url,
            ENV_BLOBS: str(var / "blobs"),
            ENV_PREFIX: prefix,
            ENV_VARIANTS: ",".join(sorted(chosen)),
        }
        port = stack.free_port()
        base = f"http://127.0.0.1:{port}"
        api = exits.enter_context(
            stack.started(
                "the skeleton's API",
                [sys.executable, "-m", "bench.skeleton.api"],
                {**env, "SKELETON_PORT": str(port)},
                var / "api.log",
                stack.answers(f"{base}/healthz"),
            )
        )
        worker_log = var / "worker.log"
        worker = exits.enter_context(
            stack.started(
                "the skeleton's worker",
                skeleton_worker_argv(prefix),
                env,
                worker_log,
                stack.celery_ready(worker_log),
            )
        )
        processes = {"api": api.pid, "worker": worker.pid}
        try:
            warm = offered_load(base, MODEL_ID, owners[:WARMUP], WARMUP_RATE)
            wait_completed(dsn, [rid for _, _, rid in warm])
            points = []
            for k in range(loads):
                chunk = owners[WARMUP + k * requests : WARMUP + (k + 1) * requests]
                points.append(measure(dsn, base, chunk, rate, processes))
                log(
                    f"{sorted(chosen) or 'bare'} load {k + 1}: p50 {points[-1]['p50_ms']} ms, "
                    f"p99 {points[-1]['p99_ms']} ms"
                )
            forgotten = leftovers(dsn, redis_url, prefix, var / "blobs", owners)
        except Exception:
            for name in ("api.log", "worker.log"):
                log(f"{name}, last lines:\n{(var / name).read_text()[-6000:]}")
            raise
    return {
        "variants": sorted(chosen),
        "p50_ms": round(statistics.median(p["p50_ms"] for p in points), 2),
        "cpu_ms_per_request": round(
            statistics.median(sum(p["cpu_ms_per_request"].values()) for p in points), 2
        ),
        "leftover": forgotten,
        "loads": points,
    }


def ladder_configs() -> list[frozenset[str]]:
    """The bare skeleton, each variant alone, each pair, all of them, and the bare skeleton again (the
    machine's drift over the sitting shows as the difference between the two bare runs)."""
    bare: frozenset[str] = frozenset()
    pairs = [frozenset(p) for p in itertools.combinations(VARIANTS, 2)]
    return [bare, *(frozenset([v]) for v in VARIANTS), *pairs, frozenset(VARIANTS), bare]


def with_ratios(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each configuration's p50 and CPU per request against the mean of the bare skeleton's runs."""
    bare = [c for c in configs if not c["variants"]]
    p50 = statistics.mean(c["p50_ms"] for c in bare)
    cpu = statistics.mean(c["cpu_ms_per_request"] for c in bare)
    return [
        {**c, "p50_ratio": round(c["p50_ms"] / p50, 3), "cpu_ratio": round(c["cpu_ms_per_request"] / cpu, 3)}
        for c in configs
    ]


def variants_argument(text: str) -> frozenset[str]:
    try:
        return parse_variants(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.skeleton", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="offered load in requests/s (default 100)")
    parser.add_argument("--requests", type=int, default=500, help="requests per measured load (default 500)")
    parser.add_argument("--loads", type=int, default=1, help="measured loads per configuration (default 1)")
    parser.add_argument(
        "--with",
        dest="variants",
        type=variants_argument,
        default=frozenset(),
        help="variants to turn on, comma-separated: " + "; ".join(f"{k}: {v}" for k, v in VARIANTS.items()),
    )
    parser.add_argument(
        "--ladder", action="store_true", help="bare, each variant, each pair, all, bare again"
    )
    args = parser.parse_args(argv)
    if args.requests < 1 or args.loads < 1:
        parser.error("--requests and --loads must be at least 1")
    try:
        configs = [
            run_config(chosen, args.rate, args.requests, args.loads)
            for chosen in (ladder_configs() if args.ladder else [args.variants])
        ]
    except stack.ServersUnavailable as exc:
        print(f"[bench] cannot run: {exc}", file=sys.stderr, flush=True)
        return 2
    if args.ladder:
        configs = with_ratios(configs)
        for c in configs:
            log(
                f"{'+'.join(c['variants']) or 'bare':<40} p50 {c['p50_ms']:7.2f} ms ({c['p50_ratio']:.2f}x)  "
                f"CPU {c['cpu_ms_per_request']:6.2f} ms/request ({c['cpu_ratio']:.2f}x)"
            )
    print(json.dumps({"configs": configs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
