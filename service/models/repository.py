"""SQL for models, their versions, their remaining samples and erased-subject tombstones."""

from __future__ import annotations

import builtins  # the class's ``list`` method shadows the builtin in its annotations
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import and_, bindparam, delete, func, insert, literal, or_, select, text, update
from sqlalchemy.orm import Session, undefer
from sqlalchemy.orm.util import identity_key

from service.db.base import table, utcnow
from service.db.tables import DeletionRequest, ErasedSubject, Model, ModelVersion, Sample
from service.db.upsert import insert_ignore
from service.states import ModelState, RequestState

_IN_CHUNK = 5000  # bound on the size of one IN (...) list
HEARTBEAT_LOCK_TIMEOUT = "1s"  # a beat waits no longer for a row a job is recording under
WAITING_PHASE = "waiting"  # a retrain asked for, its job not started

# built once on the Core tables (docs/decisions.md)
_models, _versions, _samples = table(Model).c, table(ModelVersion).c, table(Sample).c
_GET_MODEL = select(Model).where(Model.id == bindparam("model_id")).execution_options(populate_existing=True)
_GET_VERSION = select(ModelVersion).where(ModelVersion.id == bindparam("version_id"))
_LOCK_MODEL = (
    select(Model)
    .where(Model.id == bindparam("model_id"))
    .with_for_update(key_share=True)
    .options(undefer(Model.training), undefer(Model.statistics))
    .execution_options(populate_existing=True)
)
_CURRENT_VERSION = select(_models.current_version_id).where(_models.id == bindparam("model_id"))
_PURGE_SUPERSEDED = (
    update(table(ModelVersion))
    .where(
        _versions.model_id == bindparam("b_model_id"),  # b_: UPDATE reserves the columns' own names
        _versions.id != bindparam("b_current_id"),
        _versions.weights_purged_at.is_(None),
    )
    .values(released_blob=None, clean_blob=None, artifacts={}, weights_purged_at=bindparam("b_at"))
)
_SAMPLES_OF_OWNERS = select(_samples.owner_id, _samples.sample_id).where(
    _samples.model_id == bindparam("model_id"), _samples.owner_id.in_(bindparam("owners", expanding=True))
)
_DELETE_SAMPLES = delete(table(Sample)).where(
    _samples.model_id == bindparam("model_id"), _samples.sample_id.in_(bindparam("ids", expanding=True))
)


def _chunks(items: Sequence[str], size: int = _IN_CHUNK) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class ModelRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, model: Model) -> Model:
        self.session.add(model)
        self.session.flush()
        return model

    def get(self, model_id: int) -> Model | None:
        """The model as stored now (refreshing an object this session loaded before)."""
        return self.session.execute(_GET_MODEL, {"model_id": model_id}).scalar_one_or_none()

    def current_version_id(self, model_id: int) -> int | None:
        """The model's serving version (None for an unknown model or one not trained yet)."""
        return self.session.scalar(_CURRENT_VERSION, {"model_id": model_id})

    def lock(self, model_id: int) -> Model | None:
        """The per-model lock (``FOR NO KEY UPDATE``: deletion requests still insert); loads the manifests."""
        return self.session.execute(_LOCK_MODEL, {"model_id": model_id}).scalar_one_or_none()

    def list(self, *, after_id: int | None, limit: int) -> list[Model]:
        stmt = select(Model).order_by(Model.id).limit(limit)
        if after_id is not None:
            stmt = stmt.where(Model.id > after_id)
        return list(self.session.scalars(stmt))

    def on_dataset(self, dataset_id: int, statuses: Sequence[ModelState] | None = None) -> builtins.list[int]:
        """Ids of the dataset's models in ``statuses`` (None: not deleted)."""
        wanted = Model.status != ModelState.DELETED if statuses is None else Model.status.in_(list(statuses))
        stmt = select(Model.id).where(Model.dataset_id == dataset_id, wanted).order_by(Model.id)
        return list(self.session.scalars(stmt))

    def count(self) -> int:
        return int(self.session.scalar(select(func.count()).select_from(Model)) or 0)

    def record_progress(
        self, model_id: int, fitting: Sequence[ModelState], phase: str, fraction: float, eta: float | None
    ) -> bool:
        """Record progress while the model is in ``fitting``; whether it was."""
        result = self.session.execute(
            update(Model)
            .where(Model.id == model_id, Model.status.in_(list(fitting)))
            .values(phase=phase[:64], progress=fraction, eta_seconds=eta, updated_at=utcnow())
        )
        return bool(getattr(result, "rowcount", 0))

    def unclaimed_jobs(self, before: datetime) -> builtins.list[Model]:
        """Trainings queued and retrains waiting (no job claimed them), unchanged since before ``before``."""
        waiting = or_(
            Model.status == ModelState.QUEUED,
            and_(Model.status == ModelState.RETRAINING, Model.phase == WAITING_PHASE),
        )
        return list(self.session.scalars(select(Model).where(waiting, Model.updated_at < before)))

    def heartbeat(self, model_id: int, holding: Sequence[ModelState], claimed_since: datetime) -> bool:
        """Bump ``updated_at`` of the model in ``holding`` claimed since ``claimed_since``; whether it was."""
        self.session.execute(text(f"SET LOCAL lock_timeout = '{HEARTBEAT_LOCK_TIMEOUT}'"))
        claimed = (Model.id == model_id, Model.status.in_(list(holding)), Model.started_at >= claimed_since)
        result = self.session.execute(update(Model).where(*claimed).values(updated_at=utcnow()))
        return bool(getattr(result, "rowcount", 0))

    def silent_jobs(self, status: ModelState, before: datetime) -> builtins.list[Model]:
        """Models in ``status`` whose job started (phase not ``waiting``) and beat last before ``before``."""
        started = or_(Model.phase.is_(None), Model.phase != WAITING_PHASE)
        stmt = select(Model).where(Model.status == status, started, Model.updated_at < before)
        return list(self.session.scalars(stmt))

    def add_version(self, version: ModelVersion) -> ModelVersion:
        self.session.add(version)
        self.session.flush()
        return version

    def version(self, version_id: int) -> ModelVersion | None:
        """The version row, from the identity map if loaded."""
        known = self.session.identity_map.get(identity_key(ModelVersion, version_id))
        if known is not None:
            return cast(ModelVersion, known)
        return self.session.execute(_GET_VERSION, {"version_id": version_id}).scalar_one_or_none()

    def seqs_of(self, version_ids: Iterable[int]) -> dict[int, int]:
        """version id -> sequence number, for the given versions only (no row is loaded whole)."""
        ids = sorted(set(version_ids))
        if not ids:
            return {}
        rows = self.session.execute(select(ModelVersion.id, ModelVersion.seq).where(ModelVersion.id.in_(ids)))
        return {version_id: seq for version_id, seq in rows}

    def purge_superseded(self, model_id: int, current_version_id: int, at: datetime) -> None:
        """Drop the weights of every unpurged version but ``current_version_id`` (the rows stay)."""
        self.session.execute(
            _PURGE_SUPERSEDED, {"b_model_id": model_id, "b_current_id": current_version_id, "b_at": at}
        )

    def purge_all_versions(self, model_id: int, at: datetime) -> None:
        """Drop every version's weights, artifacts and garbage list (keeping earlier purge times)."""
        self.session.execute(
            update(ModelVersion)
            .where(ModelVersion.model_id == model_id)
            .values(
                released_blob=None,
                clean_blob=None,
                artifacts={},
                garbage=[],
                weights_purged_at=func.coalesce(
                    ModelVersion.weights_purged_at, literal(at, ModelVersion.weights_purged_at.type)
                ),
            )
        )

    def version_by_seq(self, model_id: int, seq: int) -> ModelVersion | None:
        return self.session.scalars(
            select(ModelVersion).where(ModelVersion.model_id == model_id, ModelVersion.seq == seq)
        ).first()

    def versions(
        self, model_id: int, *, after_seq: int | None = None, limit: int = 1000
    ) -> builtins.list[ModelVersion]:
        stmt = select(ModelVersion).where(ModelVersion.model_id == model_id).order_by(ModelVersion.seq)
        stmt = stmt.limit(limit)
        if after_seq is not None:
            stmt = stmt.where(ModelVersion.seq > after_seq)
        return list(self.session.scalars(stmt))

    def add_samples(self, model_id: int, sample_ids: Sequence[str], owner_ids: Sequence[str]) -> None:
        rows = [{"model_id": model_id, "sample_id": s, "owner_id": o} for s, o in zip(sample_ids, owner_ids)]
        for start in range(0, len(rows), _IN_CHUNK):
            self.session.execute(insert(table(Sample)), rows[start : start + _IN_CHUNK])

    def owners_of(self, model_id: int, sample_ids: Sequence[str]) -> dict[str, str]:
        """sample id -> owner id for the samples among ``sample_ids`` still in the training set."""
        return self._lookup(Sample.sample_id, Sample.owner_id, Sample.model_id == model_id, sample_ids)

    def samples_of_owners(self, model_id: int, owner_ids: Sequence[str]) -> dict[str, builtins.list[str]]:
        """owner id -> remaining sample ids, for the owners among ``owner_ids`` with any left."""
        out: dict[str, list[str]] = defaultdict(list)
        for chunk in _chunks(list(owner_ids)):
            rows = self.session.execute(_SAMPLES_OF_OWNERS, {"model_id": model_id, "owners": list(chunk)})
            for r in rows:
                out[r.owner_id].append(r.sample_id)
        return dict(out)

    def delete_all_samples(self, model_id: int) -> None:
        self.session.execute(delete(table(Sample)).where(Sample.model_id == model_id))

    def delete_samples(self, model_id: int, sample_ids: Sequence[str]) -> None:
        for chunk in _chunks(list(sample_ids)):
            self.session.execute(_DELETE_SAMPLES, {"model_id": model_id, "ids": list(chunk)})

    def add_erased(self, rows: builtins.list[dict[str, object]]) -> None:
        for start in range(0, len(rows), _IN_CHUNK):
            insert_ignore(self.session, ErasedSubject, rows[start : start + _IN_CHUNK])

    def erased_among(self, model_id: int, hashes: Sequence[str]) -> dict[str, int | None]:
        """subject hash -> the request that erased it, for the hashes among ``hashes`` already erased."""
        of_model = ErasedSubject.model_id == model_id
        return self._lookup(ErasedSubject.subject_hash, ErasedSubject.request_id, of_model, hashes)

    def _lookup(self, key: Any, value: Any, where: Any, keys: Sequence[str]) -> dict[Any, Any]:
        """``key`` -> ``value`` of the rows matching ``where`` whose ``key`` is among ``keys``."""
        out: dict[Any, Any] = {}
        for chunk in _chunks(list(keys)):
            rows = self.session.execute(select(key, value).where(where, key.in_(chunk)))
            out.update((k, v) for k, v in rows)
        return out

    def erased_hashes(self, model_id: int, kind: str, budget_epoch: int | None = None) -> set[str]:
        stmt = select(ErasedSubject.subject_hash).where(
            ErasedSubject.model_id == model_id, ErasedSubject.kind == kind
        )
        if budget_epoch is not None:
            stmt = stmt.where(ErasedSubject.budget_epoch == budget_epoch)
        return set(self.session.scalars(stmt))

    def models_with_requests(
        self, states: Sequence[RequestState], before: datetime, model_status: ModelState | None
    ) -> builtins.list[int]:
        """Models (in ``model_status``, if given) with a request in ``states`` untouched since ``before``."""
        stmt = (
            select(DeletionRequest.model_id)
            .join(Model, Model.id == DeletionRequest.model_id)
            .where(DeletionRequest.state.in_(states), DeletionRequest.updated_at < before)
            .distinct()
        )
        if model_status is not None:
            stmt = stmt.where(Model.status == model_status)
        return list(self.session.scalars(stmt))
