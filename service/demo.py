"""The demo model of a first run: a small model on a bundled dataset, trained in seconds."""

from __future__ import annotations

import logging

from service.datasets import service as datasets
from service.datasets.schemas import BundledDatasetIn
from service.job_limits import JobLimits
from service.models import service as models
from service.models.schemas import ModelIn
from service.runtime import Runtime

log = logging.getLogger(__name__)

DEMO_HYPERPARAMETERS = {"epochs": 5}


def ensure_demo(rt: Runtime) -> None:
    """Register ``demo`` (logistic regression on scikit-learn digits, 2 samples per owner) once."""
    with rt.uow() as uow:
        if uow.models.count() > 0:
            return
    dataset = datasets.load_bundled(BundledDatasetIn(name="digits", samples_per_owner=2))
    with rt.uow() as uow:
        row = datasets.store(
            uow,
            rt.artifacts,
            dataset,
            source="bundled",
            fmt="bundled",
            name="digits",
            max_buckets=rt.settings.max_buckets,
        )
        model = models.register(
            uow,
            rt.cache,
            ModelIn(name="demo", dataset_id=row.id, hyperparameters=DEMO_HYPERPARAMETERS),
            JobLimits.of(rt.settings),
        )
        uow.commit()
    log.info("registered demo model %s on dataset %s (digits); it trains in the background", model.id, row.id)
