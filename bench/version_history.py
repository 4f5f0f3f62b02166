"""The cost of a new version as a model's history grows, with and without the index that keeps it flat.

``python -m bench.version_history [--versions N] [--repeats R]`` creates a fresh Postgres database at
the head of the migrations with one dataset and one model, whose current version has N superseded
(purged) predecessors. It then times :meth:`ModelRepository.purge_superseded`, the statement each new
version runs to take the weights of its predecessors (here: the one current version), R times with the
partial index ``ix_model_versions_unpurged`` (migration 0006) and R times with it dropped, alternating,
each in a transaction rolled back afterwards; and the same on a model with no history, for reference.

The last line of stdout is one JSON object: per history length the median milliseconds with and without
the index and their ratio.
"""

from __future__ import annotations

import argparse
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


def _timed(engine: Engine, model_id: int, *, index: bool) -> float:
    """Milliseconds of one purge, as the next version would run it, in a transaction then rolled back."""
    from service.db.base import utcnow
    from service.models.repository import ModelRepository

    with Session(engine) as session:
        if not index:
            session.execute(text("DROP INDEX ix_model_versions_unpurged"))  # back with the rollback
        started = time.perf_counter()
        ModelRepository(session).purge_superseded(model_id, -1, utcnow())
        elapsed = time.perf_counter() - started
        session.rollback()
    return elapsed * 1000.0


def measure(engine: Engine, model_id: int, repeats: int) -> dict[str, float]:
    samples: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(repeats):
        for index in (True, False):
            samples[index].append(_timed(engine, model_id, index=index))
    with_index, without = statistics.median(samples[True]), statistics.median(samples[False])
    return {
        "with_index_ms": round(with_index, 3),
        "without_index_ms": round(without, 3),
        "without_over_with": round(without / with_index, 1),
    }


def main(argv: list[str] | None = None, *, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.version_history", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--versions", type=int, default=20_000, help="versions of the long history (20000)")
    parser.add_argument("--repeats", type=int, default=50, help="timings of each kind (50)")
    args = parser.parse_args(argv)
    if args.versions < 2 or args.repeats < 1:
        parser.error("need --versions >= 2 and --repeats >= 1")
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
        with engine.connect() as conn:
            conn.execute(text("ANALYZE model_versions"))
            conn.commit()
        log(f"{args.versions} versions written at {time.monotonic() - started:.1f}s")
        result: dict[str, Any] = {"history_1": measure(engine, short, args.repeats)}
        result[f"history_{args.versions}"] = measure(engine, long, args.repeats)
    result.update(versions=args.versions, repeats=args.repeats, seconds=round(time.monotonic() - started, 1))
    out(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
