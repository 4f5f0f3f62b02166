"""A deletion's update round and completion on Postgres: a few plain statements, pipelined.

An update round (:func:`service.jobs.updates.apply_batch`) reads, under the model lock, the model, its
queued requests, its current version and the named subjects' remaining samples (:func:`lock_round`);
then, once ``method.forget`` has run and its blobs are written, records in the same transaction the new
version, the model's pointers and manifests, the source dataset's manifest, the artifact references of
both, the superseded version's purge, the ledger charge, the tombstones, the removal of the forgotten
samples' rows, the requests' states and history and the audit events (:func:`record_unlearned_version`).
Its completion (:func:`service.jobs.completion.finish`) serves the version, deletes its garbage and marks
its requests completed (:func:`complete_version`). Through the ORM unit of work and SQLAlchemy that was
some 30 statements, each a round trip, and about two thirds of the round's CPU (``bench/README.md``,
items 18 to 21 and 29). Here they run as psycopg statements on the session's own connection (so in the
same transaction: whatever the unit of work still holds, such as a failed request's state, is flushed at
its commit as before), in pipeline mode (:mod:`service.db.postgres`): three round trips for the round
(its reads; the reads whose answers the writes need: the dataset's row, the version's id, the audit
chain's head, and the commit's lock, sent before the round's blobs are written so that Postgres answers
them meanwhile; all the writes, during which the caller moves the hot statistics, and the COMMIT) and two
for the completion (its reads, then its writes and COMMIT). While a drain keeps going, each COMMIT is
followed in its round trip by the next step's reads (the completion's after the round's, the next
round's after the completion's), so a round and its completion take three round trips between them.

The values written are those a retrain writes through the repositories
(:func:`service.jobs.versions.record_version`, :func:`~service.jobs.versions.erase_from_source`,
:func:`service.jobs.updates.record_erasure`, :func:`service.jobs.updates.mark_applied`), computed by
the same helpers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg import Connection, Cursor
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from service.audit.service import completions_chain, model_chain, request_version_events
from service.db import jsoncodec
from service.db.base import manifest_text, utcnow
from service.db.postgres import (
    adopt,
    append_events,
    array_literal,
    chain_head,
    insert_history,
    insert_row,
    lock_chain_head,
    select_list,
)
from service.db.tables import DeletionRequest, Model, ModelVersion
from service.deletions.repository import Completed
from service.jobs.plans import Batch, tombstones
from service.jobs.versions import (
    Release,
    blobs_of,
    dataset_arrays_after,
    dataset_holder,
    model_holder,
    row_count,
    serving_version,
    version_blobs,
    version_of,
)
from service.states import CallbackState, RequestState, VersionKind
from service.storage.buckets import digests
from service.storage.refs import COLLECTION_LOCK_KEY
from unlearning.methods.protocol import ForgetRequest

if TYPE_CHECKING:
    from service.db.uow import UnitOfWork
    from service.jobs.state import BlobCache, KnownManifests, KnownRow
    from service.subjects import SubjectHasher

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
_CHARGE = """
INSERT INTO ledger_entries (model_id, budget_epoch, kind, version_id, budget_unit, budget_cap, charge,
    spent, deletions, created_at)
VALUES (%s, %s, 'charge', %s, %s, %s, %s, %s, %s, %s)
"""
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


# -- the round's reads -----------------------------------------------------------------------------

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
class RoundReads:
    """The reads of a round (:func:`send_round_reads`), pending until the pipeline that sent them ends."""

    known: KnownRow | None  # the model's manifests as this process noted them (read only if changed)
    model: Cursor[Any]
    requests: Cursor[Any]
    version: Cursor[Any]
    owners: Cursor[Any]
    samples: Cursor[Any]


def send_round_reads(
    conn: Connection[Any], model_id: int, limit: int, manifests: KnownManifests | None = None
) -> RoundReads:
    """Send, in the caller's pipeline, :func:`lock_round`'s reads."""
    known = manifests.known(model_id) if manifests is not None else None
    return RoundReads(
        known=known,
        model=conn.execute(_SELECT_MODEL, {"id": model_id, "xmin": known.xmin if known else None}),
        requests=conn.execute(_SELECT_QUEUED, (model_id, limit)),
        version=conn.execute(_SELECT_CURRENT_VERSION, (model_id,)),
        owners=conn.execute(_NAMED_OWNERS, {"model_id": model_id}),
        samples=conn.execute(_NAMED_SAMPLES, {"model_id": model_id}),
    )


def lock_round(
    conn: Connection[Any],
    session: Session,
    model_id: int,
    limit: int,
    manifests: KnownManifests | None = None,
) -> LockedRound:
    """The reads of :func:`service.jobs.updates.apply_batch` in one round trip: the model row locked as
    :meth:`service.models.repository.ModelRepository.lock` locks it (``FOR NO KEY UPDATE``), the queued
    requests as :meth:`service.deletions.repository.DeletionRepository.in_states` (``FOR UPDATE``), the
    current version, and the named subjects' remaining samples. The rows become the session's objects
    without a second query (:func:`service.db.postgres.adopt`), so what the round changes on them is flushed as before.
    ``manifests``: the model's bucket manifests are read only if the row changed since this process's
    last round wrote them (:class:`service.jobs.state.KnownManifests`)."""
    with conn.pipeline():
        reads = send_round_reads(conn, model_id, limit, manifests)
    return read_round(session, reads)


def read_round(session: Session, reads: RoundReads) -> LockedRound:
    """:func:`lock_round`'s answer from its reads, answered (sent by :func:`send_round_reads`)."""
    model_row = reads.model.fetchone()
    version_row = reads.version.fetchone()
    owner_samples: dict[str, list[str]] = {}
    for owner, sample in reads.owners.fetchall():
        owner_samples.setdefault(owner, []).append(sample)
    return LockedRound(
        model=_adopt_model(session, model_row, reads.known) if model_row is not None else None,
        requests=[adopt(session, DeletionRequest, row) for row in reads.requests.fetchall()],
        version=adopt(session, ModelVersion, version_row) if version_row is not None else None,
        owner_samples=owner_samples,
        sample_owner=dict(reads.samples.fetchall()),
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


@dataclass
class UnlearnedVersion:
    """What a round records, as the caller computed it."""

    model: Model  # locked by the round, as loaded
    previous: ModelVersion  # the version the round started from
    release: Release
    batch: Batch
    forgotten: Mapping[str, str]  # sample id -> owner id
    emptied: Collection[str]  # owners named whole with nothing left (service.jobs.updates.emptied_owners)
    request: ForgetRequest
    charge: dict[str, Any]  # the ledger entry's budget_unit, budget_cap, charge, spent
    claimed_at: datetime


@dataclass
class VersionReads:
    """The reads whose answers a round's writes need (:func:`send_version_reads`), pending until the
    pipeline that sent them ends."""

    dataset: Cursor[Any]  # the source dataset's row, locked (:data:`_LOCK_DATASET`)
    version_id: Cursor[Any]  # the new version's id
    head: Cursor[Any]  # the model chain's head, locked
    owners_left: Cursor[Any] | None  # which of the round's owners not named whole keep samples
    commit_lock: Cursor[Any]  # the commit's lock (service.storage.refs), granted once the pipeline ends


def send_version_reads(
    conn: Connection[Any], model: Model, forgotten: Mapping[str, str], emptied: Collection[str]
) -> VersionReads:
    """Send, in the caller's pipeline, the round's second round trip: the source dataset's row, the new
    version's id, the model chain's head and the owners that keep samples, then the commit's lock
    (shared with other writers, exclusive of collectors). No deadlock with a collector: a collector
    takes its lock after its row locks and waits for none after it, and the rows the round writes once
    it holds the lock are ones no collector holds (the model's and the dataset's rows and the chain's
    head, locked by the round already; the previous version's row, the requests it took and the
    model's references, tombstones and samples, which only the holder of the model's lock writes;
    the dataset's references, which only the holder of its row lock writes). The caller writes the
    round's blobs before it ends the pipeline, so that they are written while Postgres answers; :func:`record_unlearned_version` reads the answers."""
    undecided = sorted({o for o in forgotten.values() if o} - set(emptied))
    return VersionReads(
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
class RecordedVersion:
    """What :func:`record_unlearned_version` recorded: the version's row and, when its completion's reads
    went with its commit, those reads (the unit of work is then in the completion's transaction)."""

    version: ModelVersion
    completion: CompletionReads | None


@dataclass
class _SourceDataset:
    """The locked dataset row: its counts and its manifest (None: every row erased already)."""

    num_rows: int
    erased_rows: int
    arrays: dict[str, Any] | None


def record_unlearned_version(
    conn: Connection[Any],
    uow: UnitOfWork,
    cache: BlobCache,
    hasher: SubjectHasher,
    round_: UnlearnedVersion,
    reads: VersionReads,
    created_event: Callable[[int, int], dict[str, Any]],
    manifests: KnownManifests | None = None,
    while_writing: Callable[[], None] | None = None,
) -> RecordedVersion:
    """Record the round's version (see the module's docstring); returns its row (not in the session).

    ``reads``: :func:`send_version_reads`'s, answered: the commit's lock is held from then on, so no
    collector deletes a blob until this transaction ends. The release's new blobs, put before the lock
    was granted, are checked to be still stored here (:meth:`UnitOfWork.check_stored`); those put after
    it (the dataset's rewritten buckets) need no check. The writes therefore end with the COMMIT in
    their own round trip (:meth:`UnitOfWork.send_commit`) instead of one of its own (bench/README.md,
    item 33), unless the unit of work has something else to commit (a failed request's state, an
    outbox message). ``created_event(version_id, seq)``: the ``version.created`` audit event. The
    model's new manifests are noted in ``manifests`` with the row version that holds them.
    ``while_writing``: work of the caller's (the hot statistics' move to the new version) run once
    every write is sent, while Postgres executes them, and before the COMMIT is sent: if it fails,
    nothing commits.

    When the COMMIT goes with the writes, a new transaction begins in the same round trip and the
    version's completion sends its reads in it (:func:`send_completion_reads`): the unit of work goes on
    in that transaction, in which the caller completes the version (:func:`complete_version` with these
    reads), one round trip fewer than a completion of its own. The reads are
    returned with the version (None when the COMMIT could not go with the writes)."""
    model, previous = round_.model, round_.previous
    chain = model_chain(model.id)
    source = _source_dataset(reads.dataset.fetchone(), model)
    version_row = reads.version_id.fetchone()
    assert version_row is not None
    version_id = int(version_row[0])
    head = chain_head(chain, reads.head.fetchone())
    owners_left = {row[0] for row in reads.owners_left.fetchall()} if reads.owners_left is not None else set()
    reads.commit_lock.fetchone()
    uow.refs.commit_locked = True
    release = round_.release
    old_blobs = digests(model.training) | digests(model.statistics) | version_blobs(previous)
    new_blobs = blobs_of(release)
    uow.check_stored(new_blobs - old_blobs)  # old_blobs: held by the model's committed row all along

    now = utcnow()
    dataset_arrays = _dataset_after(cache, source, model, round_)
    erased = tombstones(hasher, model.id, round_.batch, round_.forgotten, owners_left, model.budget_epoch)
    request_ids = [p.request.id for p in round_.batch.plans]
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
            num_forgotten=len(round_.forgotten),
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
        charge = round_.charge
        conn.execute(
            _CHARGE,
            (model.id, model.budget_epoch, version_id, charge["budget_unit"], charge["budget_cap"],
             charge["charge"], charge["spent"], len(round_.forgotten), now),
        )  # fmt: skip
        conn.execute(_DELETE_SAMPLES, (model.id, array_literal(round_.forgotten)))
        conn.execute(
            _TOMBSTONES,
            (model.id, model.budget_epoch, erased[0]["erased_at"] if erased else now,
             array_literal(r["subject_hash"] for r in erased), array_literal(r["kind"] for r in erased),
             array_literal(r["request_id"] for r in erased)),
        )  # fmt: skip
        conn.execute(_MARK_APPLIED, (version_id, now, array_literal(request_ids)))
        history: list[tuple[int, RequestState, datetime, str | None]] = [
            (rid, RequestState.APPLYING, round_.claimed_at, None) for rid in request_ids
        ]
        history += [(rid, RequestState.APPLIED, now, f"version {seq}") for rid in request_ids]
        insert_history(conn, history)
        append_events(conn, head, events, now)
        if while_writing is not None:
            while_writing()
        completion = None
        if uow.send_commit(conn, begin_next=True):
            completion = send_completion_reads(conn, model.id, version)
    _point_model(model, version_id, release)
    moved = moved_cur.fetchone()
    if manifests is not None and moved is not None:
        # Noted before the commit: should it roll back, no row version ever has this xmin.
        manifests.note(model.id, str(moved[0]), manifests_written)
    return RecordedVersion(version, completion)


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
    cache: BlobCache, source: _SourceDataset, model: Model, round_: UnlearnedVersion
) -> dict[str, Any] | None:
    if source.arrays is None:
        return None
    return dataset_arrays_after(
        cache,
        source.arrays,
        round_.forgotten,
        old_training=model.training,
        new_training=round_.release.training,
        request=round_.request,
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


# -- the completion ------------------------------------------------------------------------------

_CURRENT_VERSION = "SELECT current_version_id FROM models WHERE id = %s"
_LOCK_APPLIED = f"""
SELECT id, callback_url, created_at FROM deletion_requests
WHERE model_id = %s AND state = '{RequestState.APPLIED.value}' AND version_id = %s
ORDER BY id
FOR UPDATE
"""
_COLLECTION_LOCK = "SELECT pg_advisory_xact_lock(%s)"
_STILL_HELD = "SELECT DISTINCT blob FROM artifact_refs WHERE blob = ANY(%s::varchar[])"
_MARK_COMPLETED = f"""
UPDATE deletion_requests
SET state = '{RequestState.COMPLETED.value}', completed_at = %s, subjects = NULL, updated_at = %s
WHERE id = ANY(%s::int[])
"""
_CALLBACKS_PENDING = (
    f"UPDATE deletion_requests SET callback_state = '{CallbackState.PENDING.value}' WHERE id = ANY(%s::int[])"
)


@dataclass
class Completion:
    """What a completion did: the requests it completed (oldest first) and when."""

    requests: list[Completed]
    at: datetime
    # The next round's reads, sent in a transaction begun with the completion's COMMIT (``next_round``).
    next_round: RoundReads | None = None


@dataclass
class CompletionReads:
    """The first round trip of a version's completion (:func:`send_completion_reads`), pending until the
    pipeline that sent them ends."""

    current: Cursor[Any]  # the model's current version
    applied: Cursor[Any]  # the version's applied requests, locked
    head: Cursor[Any]  # the completions chain's head, locked
    held: Cursor[Any] | None  # which of the version's garbage blobs a reference holds (None: no garbage)


def send_completion_reads(conn: Connection[Any], model_id: int, version: ModelVersion) -> CompletionReads:
    """Send, in the caller's pipeline, a completion's reads, with the locks in the portable path's order:
    the version's applied requests, the completions chain's head, and the collection lock when the
    version left garbage, then which garbage blobs a reference still holds."""
    current = conn.execute(_CURRENT_VERSION, (model_id,))
    applied = conn.execute(_LOCK_APPLIED, (model_id, version.id))
    head = lock_chain_head(conn, completions_chain(model_id))
    held = None
    if version.garbage:
        conn.execute(_COLLECTION_LOCK, (COLLECTION_LOCK_KEY,))
        held = conn.execute(_STILL_HELD, (array_literal(version.garbage),))
    return CompletionReads(current, applied, head, held)


def complete_version(
    conn: Connection[Any],
    uow: UnitOfWork,
    serve: Callable[[ModelVersion], None],
    collect: Callable[[set[str]], None],
    model_id: int,
    version: ModelVersion,
    committed: bool = False,
    reads: CompletionReads | None = None,
    next_round: Callable[[Connection[Any]], RoundReads] | None = None,
) -> Completion | None:
    """:func:`service.jobs.completion.finish` on Postgres, in two round trips, the commit in the second. First
    the model's current version, then the locks in the portable path's order (the version's applied
    requests, the completions chain's head, and the collection lock when the version left garbage) and
    which garbage blobs no reference holds; ``serve`` publishes the current version and ``collect``
    deletes those blobs; then, stamped after the unlinks, the requests' states, history and audit
    events, and the commit with them when it has nothing else to do (:meth:`UnitOfWork.send_commit`).
    None: the model is gone or has no version.

    ``committed``: the caller committed ``version`` as the model's current version itself, just now
    (an update's drain). It is then published while Postgres answers the first round trip, and again
    only if the model has moved on meanwhile. Publishing it early is as safe as afterwards: the hot
    store never moves the pointer back to an older version, nor past a deleted model's tombstone
    (:meth:`service.storage.hot.HotStore.set_serving`, :meth:`~service.storage.hot.HotStore.retire`).

    ``reads``: the first round trip, sent already (:func:`send_completion_reads`) and answered: the
    round that committed ``version`` sent it with its COMMIT (:func:`record_unlearned_version`); the
    version is then published first thing, the round's commit being known to have succeeded.

    ``next_round``: when the completion's COMMIT goes in its last round trip, a new transaction begins in
    the same round trip and ``next_round`` sends the next update round's reads in it
    (:func:`send_round_reads`); they are returned in the :class:`Completion`, and the unit of work goes
    on in that transaction (the caller must not commit it: the next round does)."""
    chain = completions_chain(model_id)
    if reads is None:
        with conn.pipeline():
            reads = send_completion_reads(conn, model_id, version)
            if committed:
                serve(version)  # while Postgres answers
    elif committed:
        serve(version)
    current_row = reads.current.fetchone()
    if current_row is None or current_row[0] is None:
        return None
    current_id = int(current_row[0])
    requests = [Completed(*row) for row in reads.applied.fetchall()]
    head = chain_head(chain, reads.head.fetchone())
    if not committed or current_id != version.id:
        serve(serving_version(uow, version, current_id))
    if reads.held is not None:
        collect(set(version.garbage) - {row[0] for row in reads.held.fetchall()})
    now = utcnow()
    if not requests:
        return Completion(requests, now)
    ids = [r.id for r in requests]
    called = [r.id for r in requests if r.callback_url]
    for request_id in called:
        uow.outbox.add("deliver_callback", {"request_id": request_id, "attempt": 1})
    with conn.pipeline():
        conn.execute(_MARK_COMPLETED, (now, now, array_literal(ids)))
        insert_history(conn, [(rid, RequestState.COMPLETED, now, None) for rid in ids])
        if called:
            conn.execute(_CALLBACKS_PENDING, (array_literal(called),))
        append_events(
            conn,
            head,
            request_version_events("deletion.completed", model_id, version.id, version.seq, ids),
            now,
        )
        # Not with callbacks: their outbox rows are flushed at the commit.
        sent = uow.send_commit(conn, begin_next=next_round is not None)
        next_reads = next_round(conn) if sent and next_round is not None else None
    return Completion(requests, now, next_reads)
