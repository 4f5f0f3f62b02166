"""Two statements whose cost grew with the service's history, with and without the indexes that keep it
flat (migration 0006).

``python -m bench.history [--versions N] [--events E] [--repeats R]`` creates a fresh Postgres database
at the head of the migrations and times, R times each way, alternating, each in a transaction rolled back
afterwards (so a dropped index comes back):

- ``purge``: :meth:`ModelRepository.purge_superseded`, the statement each new version runs to take its
  predecessors' weights, on a model whose current version has N superseded predecessors and on one with
  none, with the partial index ``ix_model_versions_unpurged`` and with it dropped;
- ``subject_query``: :meth:`AuditRepository.query` by subject (``GET /v1/audit/events?owner_id=``) over
  an audit log of E events of deletion requests plus 50 events of datasets erasing subjects themselves,
  with the partial index ``ix_audit_events_subjects_erased`` and with it dropped.

The last line of stdout is one JSON object: per case the median milliseconds with and without the index
and their ratio.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from bench import stack
from bench.service import log
from service.db.tables import SUBJECTS_ERASED_EVENT

_CERTIFICATE_BYTES = 1500  # about what a Hessian-free certificate takes as JSON


def _model(session: Session, versions: int) -> int:
    """A dataset, a model and its ``versions`` versions (the last current, the others purged); its id."""
    from service.db.tables import Dataset, Model, ModelVersion

    dataset = Dataset(
        name="d", source="bundled", format="bundled", num_rows=1, num_classes=2, feature_shape=[1]
    )
    session.add(dataset)
    session.flush()
    model = Model(
        name="m", dataset_id=dataset.id, method="hessian_free", family="logistic_regression", config={},
        epsilon=1.0, delta=1e-5, release_mode="audited", policy={}, seed=0, spec={}, status="ready",
        phase="ready", train_size=1,
    )  # fmt: skip
    session.add(model)
    session.flush()
    session.execute(
        text(
            "INSERT INTO model_versions (model_id, seq, kind, budget_epoch, released_sha256, "
            "weights_purged_at, spec, certificate, accounting, artifacts, num_forgotten, train_size, "
            "request_count, garbage, created_at) "
            "SELECT :m, g, 'unlearned', 1, repeat('0', 64), now(), '{}', "
            "jsonb_build_object('pad', repeat('x', :pad)), '{}', '{}', 1, 1, 1, '[]', now() "
            "FROM generate_series(1, :n) g"
        ),
        {"m": model.id, "pad": _CERTIFICATE_BYTES, "n": versions - 1},
    )
    current = ModelVersion(
        model_id=model.id, seq=versions, kind="unlearned", budget_epoch=1, released_blob="a" * 64,
        clean_blob="b" * 64, released_sha256="a" * 64, spec={}, certificate={"pad": "x" * _CERTIFICATE_BYTES},
        accounting={}, train_size=1,
    )  # fmt: skip
    session.add(current)
    session.flush()
    model.current_version_id = current.id
    session.commit()
    return model.id


def _audit_log(session: Session, model_id: int, events: int) -> str:
    """``events`` audit events of the model's deletion requests (one subject per request, three events
    each) and 50 of datasets erasing subjects; returns the keyed hash of one request's subject."""
    session.execute(
        text(
            "INSERT INTO deletion_requests (id, model_id, state, num_samples, callback_attempts, "
            "expected_by, created_at, updated_at) "
            "SELECT g, :m, 'completed', 1, 0, now(), now(), now() FROM generate_series(1, :n) g"
        ),
        {"m": model_id, "n": events // 3},
    )
    session.execute(
        text(
            "INSERT INTO request_subjects (request_id, subject_hash, kind) "
            "SELECT g, md5(g::text) || md5((g + 1)::text), 'owner' FROM generate_series(1, :n) g"
        ),
        {"n": events // 3},
    )
    session.execute(
        text(
            "INSERT INTO audit_events (chain, chain_seq, at, event_type, model_id, request_id, payload, "
            "prev_hash, hash) SELECT 'model:1', g, now(), (ARRAY['deletion.received', 'deletion.applied', "
            "'deletion.completed'])[1 + g % 3], :m, greatest(g / 3, 1), '{}', md5(g::text), "
            "md5(g::text) FROM generate_series(1, :n) g"
        ),
        {"m": model_id, "n": events},
    )
    session.execute(
        text(
            "INSERT INTO audit_events (chain, chain_seq, at, event_type, payload, prev_hash, hash) "
            "SELECT 'dataset:1', g, now(), :type, jsonb_build_object('subject_hashes', "
            "jsonb_build_array(md5((g * 7)::text) || md5((g * 7 + 1)::text))), 'x', 'x' "
            "FROM generate_series(1, 50) g"
        ),
        {"type": SUBJECTS_ERASED_EVENT},
    )
    session.commit()
    return "".join(hashlib.md5(str(n).encode()).hexdigest() for n in (1000, 1001))


def _timed(engine: Engine, statement: Callable[[Session], object], drop: str | None) -> float:
    """Milliseconds of ``statement``, in a transaction then rolled back; ``drop``: an index dropped
    first (it comes back with the rollback)."""
    with Session(engine) as session:
        if drop is not None:
            session.execute(text(f"DROP INDEX {drop}"))
        started = time.perf_counter()
        statement(session)
        elapsed = time.perf_counter() - started
        session.rollback()
    return elapsed * 1000.0


def measure(
    engine: Engine, statement: Callable[[Session], object], index: str, repeats: int
) -> dict[str, float]:
    samples: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(repeats):
        for with_index in (True, False):
            samples[with_index].append(_timed(engine, statement, None if with_index else index))
    with_index_ms, without = statistics.median(samples[True]), statistics.median(samples[False])
    return {
        "with_index_ms": round(with_index_ms, 3),
        "without_index_ms": round(without, 3),
        "without_over_with": round(without / with_index_ms, 1),
    }


def _purge(model_id: int) -> Callable[[Session], object]:
    from service.db.base import utcnow
    from service.models.repository import ModelRepository

    return lambda session: ModelRepository(session).purge_superseded(model_id, -1, utcnow())


def _subject_query(subject_hash: str) -> Callable[[Session], object]:
    from service.audit.repository import AuditRepository

    def run(session: Session) -> object:
        found = AuditRepository(session).query(subject_hashes=[subject_hash])
        assert found, "the subject's events were not found"
        return found

    return run


def main(argv: list[str] | None = None, *, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", type=int, default=20_000, help="versions of the long history (20000)")
    parser.add_argument("--events", type=int, default=1_000_000, help="audit events (1000000)")
    parser.add_argument("--repeats", type=int, default=30, help="timings of each kind (30)")
    args = parser.parse_args(argv)
    if args.versions < 2 or args.events < 3003 or args.repeats < 1:
        parser.error("need --versions >= 2, --events >= 3003 and --repeats >= 1")
    from service.db.engine import make_engine
    from service.db.migrate import upgrade

    started = time.monotonic()
    with ExitStack() as exit_stack:
        try:
            url = exit_stack.enter_context(stack.postgres_database(f"lethe_history_{stack.new_token()}"))
        except stack.ServersUnavailable as exc:
            print(f"[bench] cannot run: {exc}", file=sys.stderr, flush=True)
            return 2
        engine = make_engine(url, pool_size=2)
        exit_stack.callback(engine.dispose)
        upgrade(engine)
        with Session(engine) as session:
            short, long = _model(session, 1), _model(session, args.versions)
            subject = _audit_log(session, long, args.events)
        with engine.connect() as conn:
            conn.execute(text("ANALYZE"))
            conn.commit()
        log(
            f"{args.versions} versions and {args.events} audit events written at {time.monotonic() - started:.1f}s"
        )
        purge_index, audit_index = "ix_model_versions_unpurged", "ix_audit_events_subjects_erased"
        result: dict[str, Any] = {
            "purge_history_1": measure(engine, _purge(short), purge_index, args.repeats),
            f"purge_history_{args.versions}": measure(engine, _purge(long), purge_index, args.repeats),
            f"subject_query_{args.events}_events": measure(
                engine, _subject_query(subject), audit_index, args.repeats
            ),
        }
    result.update(
        versions=args.versions,
        events=args.events,
        repeats=args.repeats,
        seconds=round(time.monotonic() - started, 1),
    )
    out(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
