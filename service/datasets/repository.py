"""SQL for datasets."""

from __future__ import annotations

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from service.db.tables import Dataset

# built once (docs/decisions.md, "Statements built once")
_LOCK = select(Dataset).where(Dataset.id == bindparam("dataset_id")).with_for_update()


class DatasetRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, dataset: Dataset) -> Dataset:
        self.session.add(dataset)
        self.session.flush()
        return dataset

    def get(self, dataset_id: int) -> Dataset | None:
        return self.session.get(Dataset, dataset_id)

    def class_names(self, dataset_id: int) -> list[str] | None:
        """The dataset's label names (None: integer labels), without loading its manifest."""
        names = self.session.scalar(select(Dataset.class_names).where(Dataset.id == dataset_id))
        return list(names) if names else None

    def lock(self, dataset_id: int) -> Dataset | None:
        return self.session.execute(_LOCK, {"dataset_id": dataset_id}).scalar_one_or_none()

    def list(self, *, after_id: int | None, limit: int) -> list[Dataset]:
        stmt = select(Dataset).order_by(Dataset.id).limit(limit)
        if after_id is not None:
            stmt = stmt.where(Dataset.id > after_id)
        return list(self.session.scalars(stmt))
