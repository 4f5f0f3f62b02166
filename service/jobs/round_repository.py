"""An update round's transaction on Postgres: lock what the round works on, then record its version.

Two operations, in one transaction of the caller's unit of work
(:func:`service.jobs.update_round.apply_batch`):

- :func:`lock_round` reads the model, locked as :meth:`service.models.repository.ModelRepository.lock`
  locks it (``FOR NO KEY UPDATE``), its queued requests (oldest first, ``FOR UPDATE``), its current
  version, and the samples still held of the subjects those requests name. The rows become the
  session's objects, so that what the round changes on them is flushed with its writes.
- :func:`record_round`, once ``method.forget`` has run and the round's blobs are written, locks the source
  dataset's row, the model chain's head and the commit's lock (shared with other writers, exclusive of
  collectors: :data:`service.storage.refs.COLLECTION_LOCK_KEY`), and draws the new version's id
  (:func:`start_record_round`); then writes the new version, the model's pointers and manifests, the
  source dataset's manifest and row counts, the artifact references of both, the superseded version's
  purge, the ledger charge, the removal of the forgotten samples' rows, the tombstones, the requests'
  ``applied`` state and history and the audit events, and commits.

The values written are those a retrain writes through the repositories
(:func:`service.jobs.versions.record_version`, :func:`~service.jobs.versions.erase_from_source`,
:func:`service.jobs.request_lifecycle.record_erasure`, :func:`service.jobs.request_lifecycle.mark_applied`),
computed by the same helpers.

The statements run on the unit of work's own connection, in its transaction (whatever the session holds
unflushed is flushed first, and committed with them), in pipeline mode (:mod:`service.db.postgres`):
three round trips per round (its reads; the record's reads, answered while the blobs are written; the
writes with the COMMIT). The reads can be started in the pipeline of the transaction before
(:func:`start_lock_round`: a drain starts the next round's with the previous completion's COMMIT), and
the round's COMMIT begins its completion's transaction and starts that one's reads
(:func:`service.jobs.completion_repository.start_completion`).
"""

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
from service.db.postgres import (
    adopt,
    array_literal,
    insert_history,
    insert_row,
    select_list,
)
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

if TYPE_CHECKING:
    from service.jobs.state import BlobCache, KnownManifests, KnownRow
    from service.subjects import SubjectHasher
    from service.uow import UnitOfWork


# -- locking the round ---------------------------------------------------------------------------------------

# The queued requests' named owners and samples that the model still holds: read with the locks, for the
# plan (a superset of what the requests taken need when more are queued than a round takes). ``= ANY(ARRAY(
# subquery))``, not ``IN (subquery)``: the names become one array, found through the samples' indexes,
# where ``IN`` let the planner hash-join the model's every sample (a scan that grows with the model).
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
    """What a round reads under the model lock: the model (None: unknown), its queued requests (oldest
    first, locked), its current version (None: not trained) and, of the subjects those requests name, the
    samples still there (owner -> samples, sample -> owner)."""

    model: Model | None
    requests: list[DeletionRequest]
    version: ModelVersion | None
    owner_samples: dict[str, list[str]] | None = None  # None: not read (the plan looks them up)
    sample_owner: dict[str, str] | None = None


@dataclass
class PendingRoundLock:
    """:func:`lock_round`'s statements, sent in a pipeline (:func:`start_lock_round`); their answers are
    read once it ends (:func:`finish_lock_round`)."""

    known: KnownRow | None  # the model's manifests as this process noted them (read only if changed)
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
    """Lock the model's row (``FOR NO KEY UPDATE``) and up to ``limit`` of its queued requests (oldest
    first, ``FOR UPDATE``), and read them with its current version and the named subjects' remaining
    samples, in the caller's transaction. The rows become the session's objects without a second query
    (:func:`service.db.postgres.adopt`): what the round changes on them is flushed with its writes.
    ``manifests``: the model's bucket manifests are read only if the row changed since this process's
    last round wrote them (:class:`service.jobs.state.KnownManifests`)."""
    with conn.pipeline():
        pending = start_lock_round(conn, model_id, limit, manifests)
    return finish_lock_round(session, pending)


def start_lock_round(
    conn: Connection[Any], model_id: int, limit: int, manifests: KnownManifests | None = None
) -> PendingRoundLock:
    """Send, in the caller's pipeline, :func:`lock_round`'s statements; :func:`finish_lock_round` reads
    their answers once the pipeline ends."""
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
    """:func:`lock_round`'s result, from the answers to :func:`start_lock_round`'s statements."""
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
    """The model's row, its manifests from ``known`` when the row is still the version they came from
    (then the statement read them as NULL)."""
    *columns, xmin = row
    return adopt(
        session, Model, columns, known.values() if known is not None and known.xmin == xmin else None
    )


# The row version's xmin, and the manifests only when it is not the version this process knows.
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


# -- recording the round -------------------------------------------------------------------------------------

# The dataset row, locked; its manifest is read only when it differs from the model's (the usual case is
# that the two hold the same buckets, and then the model's, already loaded, stands for it).
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
# Through the partial index ix_model_versions_unpurged: the previous version alone, however long the history.
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

    model: Model  # locked by the round, as loaded
    previous: ModelVersion  # the version the round started from
    release: Release
    batch: Batch
    forgotten: Mapping[str, str]  # sample id -> owner id
    emptied: Collection[str]  # owners named whole with nothing left (request_lifecycle.emptied_owners)
    request: ForgetRequest
    charge: dict[str, Any]  # the ledger entry's budget_unit, budget_cap, charge, spent
    claimed_at: datetime


@dataclass
class PendingRecord:
    """The reads and locks :func:`record_round` needs, sent in a pipeline (:func:`start_record_round`);
    their answers are read once it ends."""

    dataset: Cursor[Any]  # the source dataset's row, locked (:data:`_LOCK_DATASET`)
    version_id: Cursor[Any]  # the new version's id
    head: Cursor[Any]  # the model chain's head, locked
    owners_left: Cursor[Any] | None  # which of the round's owners not named whole keep samples
    commit_lock: Cursor[Any]  # the commit's lock (service.storage.refs), granted once the pipeline ends


def start_record_round(
    conn: Connection[Any], model: Model, forgotten: Mapping[str, str], emptied: Collection[str]
) -> PendingRecord:
    """Send, in the caller's pipeline, what :func:`record_round` reads first: the source dataset's row
    (locked), the new version's id, the model chain's head (locked) and which of the forgotten samples'
    owners not named whole keep samples, then the commit's lock (shared with other writers, exclusive of
    collectors). No deadlock with a collector: a collector takes its lock after its row locks and waits
    for none after it, and the rows the round writes once it holds the lock are ones no collector holds
    (the model's and the dataset's rows and the chain's head, locked by the round already; the previous
    version's row, the requests it took and the model's references, tombstones and samples, which only
    the holder of the model's lock writes; the dataset's references, which only the holder of its row
    lock writes). The caller writes the round's blobs before it ends the pipeline, so that they are
    written while Postgres answers."""
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
    """What :func:`record_round` recorded: the version's row and, when its COMMIT went with the writes,
    its completion's reads, started in the transaction that began with it (the unit of work is then in
    that transaction)."""

    version: ModelVersion
    completion: PendingCompletion | None


@dataclass
class _SourceDataset:
    """The locked dataset row: its counts and its manifest (None: every row erased already)."""

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
    """Write the round's version and everything that goes with it (see the module's docstring) in
    ``uow``'s transaction; returns its row (not in the session).

    ``pending``: :func:`start_record_round`'s, answered: the commit's lock is held from then on, so no
    collector deletes a blob until this transaction ends. The release's new blobs, put before the lock
    was granted, are checked to be still stored (:meth:`UnitOfWork.check_stored`: if one is gone,
    :class:`service.storage.artifacts.BlobVanished` is raised and nothing commits); those put after it
    (the dataset's rewritten buckets) need no check. The COMMIT goes with the writes
    (:meth:`UnitOfWork.send_commit`) unless the unit of work has something else to commit (a failed
    request's state, an outbox message): then the caller commits ``uow``. ``created_event(version_id,
    seq)``: the ``version.created`` audit event. The model's new manifests are noted in ``manifests``
    with the row version that holds them. ``while_writing``: work of the caller's (the hot statistics'
    move to the new version) run once every write is sent, while Postgres executes them, and before the
    COMMIT is sent: if it fails, nothing commits.

    When the COMMIT goes with the writes, a new transaction of ``uow`` begins with it and the version's
    completion's reads are started in it (:func:`service.jobs.completion_repository.start_completion`);
    they are returned with the version, and the caller completes the version in that transaction
    (:func:`service.jobs.completion_repository.complete_version` with them). None when the COMMIT did
    not go with the writes."""
    model, previous = unlearned.model, unlearned.previous
    chain = model_chain(model.id)
    source = _source_dataset(pending.dataset.fetchone(), model)
    version_row = pending.version_id.fetchone()
    assert version_row is not None
    version_id = int(version_row[0])
    head = chain_head(chain, pending.head.fetchone())
    owners_left = (
        {row[0] for row in pending.owners_left.fetchall()} if pending.owners_left is not None else set()
    )
    pending.commit_lock.fetchone()
    uow.refs.commit_locked = True
    release = unlearned.release
    old_blobs = digests(model.training) | digests(model.statistics) | version_blobs(previous)
    new_blobs = blobs_of(release)
    uow.check_stored(new_blobs - old_blobs)  # old_blobs: held by the model's committed row all along

    now = utcnow()
    dataset_arrays = _dataset_after(cache, source, model, unlearned)
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
        manifests_written = {column: manifest_text(getattr(release, column)) for column in _MANIFEST_COLUMNS}
        moved_cur = conn.execute(
            _MOVE_MODEL,
            (
                version_id,
                manifests_written["training"],
                release.train_size,
                manifests_written["statistics"],
                now,
                model.id,
            ),
        )
        conn.execute(_PURGE_SUPERSEDED, (now, model.id, version_id))
        append_charge(
            conn, model.id, model.budget_epoch, version_id, unlearned.charge, len(unlearned.forgotten), now
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
    _point_model(model, version_id, release)
    moved = moved_cur.fetchone()
    if manifests is not None and moved is not None:
        # Noted before the commit: should it roll back, no row version ever has this xmin.
        manifests.note(model.id, str(moved[0]), manifests_written)
    return RecordedRound(version, completion)


def _source_dataset(row: Any, model: Model) -> _SourceDataset:
    """The locked dataset's row; its manifest read back, or the model's when the two are the same text."""
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


def _dataset_after(
    cache: BlobCache, source: _SourceDataset, model: Model, unlearned: UnlearnedVersion
) -> dict[str, Any] | None:
    if source.arrays is None:
        return None
    return dataset_arrays_after(
        cache,
        source.arrays,
        unlearned.forgotten,
        old_training=model.training,
        new_training=unlearned.release.training,
        request=unlearned.request,
    )


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
    """Point the dataset at ``arrays`` and recount its rows (as
    :func:`service.jobs.versions.replace_dataset_arrays`); returns the blobs it stopped holding."""
    old, new = digests(source.arrays), digests(arrays)
    _swap_refs(conn, dataset_holder(dataset_id), old, new, now)
    remaining = row_count(cache, arrays)
    erased = source.erased_rows + max(source.num_rows - remaining, 0)
    conn.execute(_MOVE_DATASET, (manifest_text(arrays), remaining, erased, dataset_id))
    return old - new


def _point_model(model: Model, version_id: int, release: Release) -> None:
    """The loaded model row as this transaction left it, without marking it changed (the statements
    above wrote it; a flush of the unit of work must not write it again)."""
    set_committed_value(model, "current_version_id", version_id)
    set_committed_value(model, "training", release.training)
    set_committed_value(model, "train_size", release.train_size)
    set_committed_value(model, "statistics", release.statistics)
