"""An update round's transaction on Postgres, pipelined: :func:`lock_round`, then :func:`record_round`."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg import Connection, Cursor
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from service.audit.service import model_chain, request_version_events
from service.audit.statements import append_events, chain_head, lock_chain_head
from service.db import jsoncodec
from service.db.base import manifest_text, utcnow
from service.db.postgres import adopt, array_literal, insert_history, insert_row, select_list
from service.db.tables import DeletionRequest, Model, ModelVersion
from service.jobs.completion_repository import PendingCompletion, start_completion
from service.jobs.plans import Batch, tombstones
from service.jobs.versions import (
    Release,
    blobs_of,
    dataset_arrays_after,
    dataset_holder,
    model_holder,
    row_count,
    version_blobs,
    version_of,
)
from service.ledger.repository import append_charge
from service.states import RequestState, VersionKind
from service.storage.buckets import digests
from service.storage.refs import COLLECTION_LOCK_KEY
from unlearning.methods.protocol import ForgetRequest
from unlearning.privacy.certificate import Certificate

if TYPE_CHECKING:
    from service.jobs.state import BlobCache, KnownManifests, KnownRow
    from service.subjects import SubjectHasher
    from service.uow import UnitOfWork


# The queued requests' named subjects the model still holds (docs/decisions.md, "Named subjects").
_NAMED_OWNERS = f"""
SELECT s.owner_id, s.sample_id FROM samples s
WHERE s.model_id = %(model_id)s AND s.owner_id = ANY(ARRAY(
    SELECT jsonb_array_elements_text(r.subjects -> 'owner_ids') FROM deletion_requests r
    WHERE r.model_id = %(model_id)s AND r.state = '{RequestState.QUEUED.value}'))
"""
_NAMED_SAMPLES = f"""
SELECT s.sample_id, s.owner_id FROM samples s
WHERE s.model_id = %(model_id)s AND s.sample_id = ANY(ARRAY(
    SELECT jsonb_array_elements_text(r.subjects -> 'sample_ids') FROM deletion_requests r
    WHERE r.model_id = %(model_id)s AND r.state = '{RequestState.QUEUED.value}'))
"""


@dataclass
class LockedRound:
    """What a round reads under the model lock (None: unknown model, no version)."""

    model: Model | None
    requests: list[DeletionRequest]
    version: ModelVersion | None
    owner_samples: dict[str, list[str]] | None = None  # None: not read
    sample_owner: dict[str, str] | None = None


@dataclass
class PendingRoundLock:
    """:func:`lock_round`'s statements sent in a pipeline, answered by :func:`finish_lock_round`."""

    known: KnownRow | None  # the model's manifests as this process noted them
    model: Cursor[Any]
    requests: Cursor[Any]
    version: Cursor[Any]
    owners: Cursor[Any]
    samples: Cursor[Any]


def lock_round(
    conn: Connection[Any],
    session: Session,
    model_id: int,
    limit: int,
    manifests: KnownManifests | None = None,
) -> LockedRound:
    """Lock the model and up to ``limit`` queued requests (oldest first); read what the round plans on."""
    with conn.pipeline():
        pending = start_lock_round(conn, model_id, limit, manifests)
    return finish_lock_round(session, pending)


def start_lock_round(
    conn: Connection[Any], model_id: int, limit: int, manifests: KnownManifests | None = None
) -> PendingRoundLock:
    """Send :func:`lock_round`'s statements in the caller's pipeline."""
    known = manifests.known(model_id) if manifests is not None else None
    return PendingRoundLock(
        known=known,
        model=conn.execute(_SELECT_MODEL, {"id": model_id, "xmin": known.xmin if known else None}),
        requests=conn.execute(_SELECT_QUEUED, (model_id, limit)),
        version=conn.execute(_SELECT_CURRENT_VERSION, (model_id,)),
        owners=conn.execute(_NAMED_OWNERS, {"model_id": model_id}),
        samples=conn.execute(_NAMED_SAMPLES, {"model_id": model_id}),
    )


def finish_lock_round(session: Session, pending: PendingRoundLock) -> LockedRound:
    """:func:`lock_round`'s result from :func:`start_lock_round`'s answers."""
    model_row = pending.model.fetchone()
    version_row = pending.version.fetchone()
    owner_samples: dict[str, list[str]] = {}
    for owner, sample in pending.owners.fetchall():
        owner_samples.setdefault(owner, []).append(sample)
    return LockedRound(
        model=_adopt_model(session, model_row, pending.known) if model_row is not None else None,
        requests=[adopt(session, DeletionRequest, row) for row in pending.requests.fetchall()],
        version=adopt(session, ModelVersion, version_row) if version_row is not None else None,
        owner_samples=owner_samples,
        sample_owner=dict(pending.samples.fetchall()),
    )


def _adopt_model(session: Session, row: Sequence[Any], known: KnownRow | None) -> Model:
    """The model's row; its manifests from ``known`` when the row is still that version."""
    *columns, xmin = row
    return adopt(session, Model, columns, known.values() if known and known.xmin == xmin else None)


# The manifests only when the row's xmin is not the one this process knows.
_MANIFEST_COLUMNS = ("training", "statistics")
_SELECT_MODEL = f"""
SELECT {select_list(Model, dict.fromkeys(_MANIFEST_COLUMNS, "xmin = %(xmin)s::xid"))}, xmin::text
FROM models WHERE id = %(id)s FOR NO KEY UPDATE
"""
_SELECT_QUEUED = f"""
SELECT {select_list(DeletionRequest)} FROM deletion_requests
WHERE model_id = %s AND state = '{RequestState.QUEUED.value}' ORDER BY id LIMIT %s FOR UPDATE
"""
_SELECT_CURRENT_VERSION = f"""
SELECT {select_list(ModelVersion)} FROM model_versions
WHERE id = (SELECT current_version_id FROM models WHERE id = %s)
"""


# The dataset row, locked; its manifest only when it differs from the model's.
_LOCK_DATASET = """
SELECT d.num_rows, d.erased_rows, d.arrays IS NULL,
       CASE WHEN d.arrays::text IS NOT DISTINCT FROM m.training::text THEN NULL ELSE d.arrays::text END
FROM datasets d JOIN models m ON m.id = %(model_id)s
WHERE d.id = %(dataset_id)s
FOR UPDATE OF d
"""
_NEXT_VERSION_ID = "SELECT nextval(pg_get_serial_sequence('model_versions', 'id'))"
_OWNERS_LEFT = """
SELECT DISTINCT owner_id FROM samples
WHERE model_id = %s AND owner_id = ANY(%s::varchar[]) AND NOT (sample_id = ANY(%s::varchar[]))
"""

_RELEASE_REFS = "DELETE FROM artifact_refs WHERE holder = %s AND blob = ANY(%s::varchar[])"
_HOLD_REFS = """
INSERT INTO artifact_refs (blob, holder, created_at) SELECT unnest(%s::varchar[]), %s, %s
ON CONFLICT DO NOTHING
"""
_MOVE_MODEL = """
UPDATE models SET current_version_id = %s, training = %s, train_size = %s, statistics = %s, updated_at = %s
WHERE id = %s
RETURNING xmin::text
"""
_PURGE_SUPERSEDED = """
UPDATE model_versions SET released_blob = NULL, clean_blob = NULL, artifacts = '{}', weights_purged_at = %s
WHERE model_id = %s AND id <> %s AND weights_purged_at IS NULL
"""
_MOVE_DATASET = "UPDATE datasets SET arrays = %s, num_rows = %s, erased_rows = %s WHERE id = %s"
_COMMIT_LOCK = "SELECT pg_advisory_xact_lock_shared(%s)"
_DELETE_SAMPLES = "DELETE FROM samples WHERE model_id = %s AND sample_id = ANY(%s::varchar[])"
_TOMBSTONES = """
INSERT INTO erased_subjects (model_id, subject_hash, kind, budget_epoch, request_id, erased_at)
SELECT %s, t.subject_hash, t.kind, %s, t.request_id, %s
FROM unnest(%s::varchar[], %s::varchar[], %s::int[]) AS t(subject_hash, kind, request_id)
ON CONFLICT DO NOTHING
"""
_MARK_APPLIED = f"""
UPDATE deletion_requests SET state = '{RequestState.APPLIED.value}', version_id = %s, updated_at = %s
WHERE id = ANY(%s::int[])
"""


@dataclass
class UnlearnedVersion:
    """What a round records, as the caller computed it."""

    model: Model  # locked by the round
    previous: ModelVersion
    release: Release
    batch: Batch
    forgotten: Mapping[str, str]  # sample id -> owner id
    emptied: Collection[str]  # owners named whole with nothing left
    request: ForgetRequest
    cert: Certificate  # the ledger entry's charge
    claimed_at: datetime


@dataclass
class PendingRecord:
    """The reads and locks :func:`record_round` needs, sent by :func:`start_record_round`."""

    dataset: Cursor[Any]
    version_id: Cursor[Any]
    head: Cursor[Any]
    owners_left: Cursor[Any] | None  # which of the round's owners not named whole keep samples
    commit_lock: Cursor[Any]


def start_record_round(
    conn: Connection[Any], model: Model, forgotten: Mapping[str, str], emptied: Collection[str]
) -> PendingRecord:
    """Send :func:`record_round`'s reads in the caller's pipeline, the commit's lock after every row lock."""
    undecided = sorted({o for o in forgotten.values() if o} - set(emptied))
    return PendingRecord(
        dataset=conn.execute(_LOCK_DATASET, {"model_id": model.id, "dataset_id": model.dataset_id}),
        version_id=conn.execute(_NEXT_VERSION_ID),
        head=lock_chain_head(conn, model_chain(model.id)),
        owners_left=(
            conn.execute(_OWNERS_LEFT, (model.id, array_literal(undecided), array_literal(forgotten)))
            if undecided
            else None
        ),
        commit_lock=conn.execute(_COMMIT_LOCK, (COLLECTION_LOCK_KEY,)),
    )


@dataclass
class RecordedRound:
    """The version recorded, and its completion's reads if the COMMIT went with the writes."""

    version: ModelVersion
    completion: PendingCompletion | None


@dataclass
class _SourceDataset:
    """The locked dataset row (``arrays`` None: every row erased)."""

    num_rows: int
    erased_rows: int
    arrays: dict[str, Any] | None


def record_round(
    conn: Connection[Any],
    uow: UnitOfWork,
    cache: BlobCache,
    hasher: SubjectHasher,
    unlearned: UnlearnedVersion,
    pending: PendingRecord,
    created_event: Callable[[int, int], dict[str, Any]],
    manifests: KnownManifests | None = None,
    while_writing: Callable[[], None] | None = None,
) -> RecordedRound:
    """Write the round's version under the commit's lock (``BlobVanished``: a blob gone), COMMIT if it can."""
    model, previous = unlearned.model, unlearned.previous
    source = _source_dataset(pending.dataset.fetchone(), model)
    version_row = pending.version_id.fetchone()
    assert version_row is not None
    version_id = int(version_row[0])
    head = chain_head(model_chain(model.id), pending.head.fetchone())
    left = pending.owners_left
    owners_left = {row[0] for row in left.fetchall()} if left is not None else set()
    pending.commit_lock.fetchone()
    uow.refs.commit_locked = True
    release = unlearned.release
    old_blobs = digests(model.training) | digests(model.statistics) | version_blobs(previous)
    new_blobs = blobs_of(release)
    uow.check_stored(new_blobs - old_blobs)

    now = utcnow()
    dataset_arrays = None
    if source.arrays is not None:
        dataset_arrays = dataset_arrays_after(
            cache,
            source.arrays,
            unlearned.forgotten,
            old_training=model.training,
            new_training=release.training,
            request=unlearned.request,
        )
    erased = tombstones(
        hasher, model.id, unlearned.batch, unlearned.forgotten, owners_left, model.budget_epoch
    )
    request_ids = [p.request.id for p in unlearned.batch.plans]
    seq = previous.seq + 1
    events = [
        created_event(version_id, seq),
        *request_version_events("deletion.applied", model.id, version_id, seq, request_ids),
    ]
    garbage = old_blobs - new_blobs
    with conn.pipeline():
        _swap_refs(conn, model_holder(model.id), old_blobs, new_blobs, now)
        if source.arrays is not None and dataset_arrays != source.arrays:
            garbage |= _move_dataset(conn, cache, model.dataset_id, source, dataset_arrays, now)
        version = version_of(
            model.id,
            release,
            previous,
            kind=VersionKind.UNLEARNED,
            budget_epoch=model.budget_epoch,
            num_forgotten=len(unlearned.forgotten),
            request_count=len(request_ids),
            garbage=garbage,
            id=version_id,
            created_at=now,
        )
        conn.execute(*insert_row(version))
        written = {column: manifest_text(getattr(release, column)) for column in _MANIFEST_COLUMNS}
        moved_cur = conn.execute(
            _MOVE_MODEL,
            (version_id, written["training"], release.train_size, written["statistics"], now, model.id),
        )
        conn.execute(_PURGE_SUPERSEDED, (now, model.id, version_id))
        append_charge(
            conn, model.id, model.budget_epoch, version_id, unlearned.cert, len(unlearned.forgotten), now
        )
        conn.execute(_DELETE_SAMPLES, (model.id, array_literal(unlearned.forgotten)))
        conn.execute(
            _TOMBSTONES,
            (model.id, model.budget_epoch, erased[0]["erased_at"] if erased else now,
             array_literal(r["subject_hash"] for r in erased), array_literal(r["kind"] for r in erased),
             array_literal(r["request_id"] for r in erased)),
        )  # fmt: skip
        conn.execute(_MARK_APPLIED, (version_id, now, array_literal(request_ids)))
        history: list[tuple[int, RequestState, datetime, str | None]] = [
            (rid, RequestState.APPLYING, unlearned.claimed_at, None) for rid in request_ids
        ]
        history += [(rid, RequestState.APPLIED, now, f"version {seq}") for rid in request_ids]
        insert_history(conn, history)
        append_events(conn, head, events, now)
        if while_writing is not None:
            while_writing()
        completion = None
        if uow.send_commit(conn, begin_next=True):
            completion = start_completion(conn, model.id, version)
    # the loaded model row as written, not marked changed (a flush must not write it again)
    set_committed_value(model, "current_version_id", version_id)
    for column in ("training", "train_size", "statistics"):
        set_committed_value(model, column, getattr(release, column))
    moved = moved_cur.fetchone()
    if manifests is not None and moved is not None:
        manifests.note(
            model.id, str(moved[0]), {column: getattr(release, column) for column in _MANIFEST_COLUMNS}
        )
    return RecordedRound(version, completion)


def _source_dataset(row: Any, model: Model) -> _SourceDataset:
    """The locked dataset's row; its manifest read back, or the model's when the same."""
    if row is None:
        return _SourceDataset(0, 0, None)
    num_rows, erased_rows, empty, text = row
    if empty:
        arrays = None
    elif text is None:
        arrays = dict(model.training) if model.training is not None else None
    else:
        arrays = jsoncodec.loads(text)
    return _SourceDataset(int(num_rows), int(erased_rows), arrays)


def _swap_refs(conn: Connection[Any], holder: str, old: set[str], new: set[str], now: datetime) -> None:
    """``holder`` stops holding ``old - new`` and holds ``new - old``."""
    if old - new:
        conn.execute(_RELEASE_REFS, (holder, array_literal(sorted(old - new))))
    if new - old:
        conn.execute(_HOLD_REFS, (array_literal(sorted(new - old)), holder, now))


def _move_dataset(
    conn: Connection[Any],
    cache: BlobCache,
    dataset_id: int,
    source: _SourceDataset,
    arrays: dict[str, Any] | None,
    now: datetime,
) -> set[str]:
    """Point the dataset at ``arrays`` and recount its rows; returns the blobs it stopped holding."""
    old, new = digests(source.arrays), digests(arrays)
    _swap_refs(conn, dataset_holder(dataset_id), old, new, now)
    remaining = row_count(cache, arrays)
    erased = source.erased_rows + max(source.num_rows - remaining, 0)
    conn.execute(_MOVE_DATASET, (manifest_text(arrays), remaining, erased, dataset_id))
    return old - new
