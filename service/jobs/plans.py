"""Queued deletion requests as one batch for ``method.forget``, each sample attributed to one request."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.db.base import utcnow
from service.db.tables import DeletionRequest
from service.graphs.requests import GraphItems, plan_graph_items, with_graph_items
from service.subjects import SubjectHasher
from service.uow import UnitOfWork
from unlearning.methods.protocol import ForgetRequest


@dataclass
class RequestPlan:
    request: DeletionRequest
    owners: list[str] = field(default_factory=list)  # owners with remaining samples, first named here
    samples: dict[str, str] = field(default_factory=dict)  # sample id -> owner id, newly covered here
    graph: GraphItems = field(default_factory=GraphItems)  # edges, node features, graphs (service.graphs)


@dataclass
class Batch:
    plans: list[RequestPlan]

    @property
    def owners(self) -> list[str]:
        return [o for p in self.plans for o in p.owners]

    @property
    def samples(self) -> dict[str, str]:
        return {s: o for p in self.plans for s, o in p.samples.items()}

    def forget_request(self) -> ForgetRequest:
        owners = self.owners
        owner_set = set(owners)
        explicit = [s for s, o in self.samples.items() if o not in owner_set]
        request = ForgetRequest(sample_ids=tuple(explicit), owner_ids=tuple(owners))
        return with_graph_items(request, [p.graph for p in self.plans])

    def request_of(self) -> dict[str, int]:
        """sample id -> id of the request it is attributed to."""
        return {s: p.request.id for p in self.plans for s in p.samples}


def plan_requests(
    uow: UnitOfWork,
    model_id: int,
    requests: Sequence[DeletionRequest],
    owner_samples: Mapping[str, Sequence[str]] | None = None,
    sample_owner: Mapping[str, str] | None = None,
) -> list[RequestPlan]:
    """One plan per request, in order, against the model's remaining samples (read here if not given)."""
    named = [request.subjects or {} for request in requests]
    if owner_samples is None:
        owner_names = list(dict.fromkeys(o for subjects in named for o in subjects.get("owner_ids", [])))
        owner_samples = uow.models.samples_of_owners(model_id, owner_names)
    if sample_owner is None:
        sample_names = list(dict.fromkeys(s for subjects in named for s in subjects.get("sample_ids", [])))
        sample_owner = uow.models.owners_of(model_id, sample_names)
    seen_owners: set[str] = set()
    covered: set[str] = set()
    plans = []
    for request, subjects in zip(requests, named):
        plan = RequestPlan(request)
        for owner in subjects.get("owner_ids", []):
            if owner in seen_owners or owner not in owner_samples:
                continue
            seen_owners.add(owner)
            plan.owners.append(owner)
            for sid in owner_samples[owner]:
                if sid not in covered:
                    covered.add(sid)
                    plan.samples[sid] = owner
        for sid in subjects.get("sample_ids", []):
            if sid in sample_owner and sid not in covered:
                covered.add(sid)
                plan.samples[sid] = sample_owner[sid]
        plans.append(plan)
    plan_graph_items(uow, model_id, plans, covered)
    return plans


def tombstones(
    hasher: SubjectHasher,
    model_id: int,
    batch: Batch,
    forgotten: Mapping[str, str],
    owners_left: Collection[str],
    budget_epoch: int,
) -> list[dict[str, Any]]:
    """Tombstone rows: each forgotten sample, and each of their owners not in ``owners_left``."""
    request_of = batch.request_of()
    owner_request = {o: p.request.id for p in batch.plans for o in p.owners}
    emptied = sorted({o for o in forgotten.values() if o} - set(owners_left))
    rows = [(hasher.sample(s), "sample", request_of.get(s)) for s in forgotten]
    rows += [(hasher.owner(o), "owner", owner_request.get(o)) for o in emptied]
    common = {"model_id": model_id, "budget_epoch": budget_epoch, "erased_at": utcnow()}
    return [{**common, "subject_hash": h, "kind": kind, "request_id": r} for h, kind, r in rows]
