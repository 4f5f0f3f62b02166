"""Deletion request bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AnyHttpUrl, BaseModel, Field, UrlConstraints, model_validator

from service.schemas import Strict, SubjectId
from service.states import CallbackState, RequestState, VersionKind
from service.subjects import ID_FIELDS, PAIR_FIELDS

MAX_IDS = 10_000

Pair = Annotated[list[SubjectId], Field(min_length=2, max_length=2)]
"""Two ids: an edge [node id, node id], or a node inside a graph [graph id, node id]."""

CallbackUrl = Annotated[AnyHttpUrl, UrlConstraints(max_length=2000, allowed_schemes=["http", "https"])]


class DeletionIn(Strict):
    owner_ids: list[SubjectId] = Field(
        default_factory=list, max_length=MAX_IDS, description="Forget every sample of these owners"
    )
    sample_ids: list[SubjectId] = Field(
        default_factory=list,
        max_length=MAX_IDS,
        description="Forget these samples (a node graph: nodes, with their features and edges; a graph "
        "collection: whole graphs)",
    )
    edges: list[Pair] = Field(
        default_factory=list,
        max_length=MAX_IDS,
        description="Node graphs: forget these undirected edges, each a [node id, node id] pair",
    )
    node_feature_ids: list[SubjectId] = Field(
        default_factory=list,
        max_length=MAX_IDS,
        description="Node graphs: forget these nodes' features and labels (their edges stay)",
    )
    graph_ids: list[SubjectId] = Field(
        default_factory=list, max_length=MAX_IDS, description="Graph collections: forget these whole graphs"
    )
    graph_nodes: list[Pair] = Field(
        default_factory=list,
        max_length=MAX_IDS,
        description="Graph collections: forget these nodes inside graphs, each a [graph id, node id] pair "
        "(the node's tag, attributes and edges)",
    )
    callback_url: CallbackUrl | None = Field(
        None,
        description="POSTed the outcome once the request ends (http or https); a publicly reachable host, "
        "or one in the networks the operator allows (LETHE_CALLBACK_ALLOWED_NETWORKS): 422 otherwise",
    )

    @model_validator(mode="after")
    def _names_something(self) -> DeletionIn:
        if not any(getattr(self, name) for name in (*ID_FIELDS, *PAIR_FIELDS)):
            raise ValueError(
                "name at least one owner id (owner_ids) or sample id (sample_ids) to forget (graph models also "
                "take edges, node_feature_ids, graph_ids or graph_nodes)"
            )
        return self


class BulkIn(Strict):
    items: list[DeletionIn] = Field(min_length=1, max_length=1000)


class DeletionAccepted(BaseModel):
    id: int
    model_id: int
    state: RequestState
    expected_by: datetime
    created_at: datetime


class BulkItem(BaseModel):
    index: int
    status: int = Field(description="202 when accepted, else the status the item alone would have had")
    id: int | None = None
    expected_by: datetime | None = None
    error: dict[str, Any] | None = None


class BulkOut(BaseModel):
    accepted: int
    rejected: int
    results: list[BulkItem]


class DatasetDeletionItem(BaseModel):
    model_id: int
    status: int = Field(
        description="202 when accepted, else the status the deletion on this model alone would have had"
    )
    id: int | None = None
    expected_by: datetime | None = None
    error: dict[str, Any] | None = None


class DatasetDeletionOut(BaseModel):
    dataset_id: int
    accepted: int
    rejected: int
    results: list[DatasetDeletionItem] = Field(description="One deletion request per model, by model id")
    erased_rows: int = Field(
        0, description="Rows erased from the dataset itself, at once (when no model uses it: answered 200)"
    )


class HistoryEntry(BaseModel):
    state: RequestState
    at: datetime
    detail: str | None


class VersionRef(BaseModel):
    seq: int
    kind: VersionKind
    certificate: dict[str, Any]


class CallbackOut(BaseModel):
    url: str
    state: CallbackState | None
    attempts: int


class DeletionOut(BaseModel):
    id: int
    model_id: int
    state: RequestState
    num_samples: int = Field(description="Samples the request covered when it was accepted")
    num_owner_ids: int | None = Field(description="Owner ids named (None once the request has ended)")
    num_sample_ids: int | None = Field(description="Sample ids named (None once the request has ended)")
    history: list[HistoryEntry]
    version: VersionRef | None = Field(
        description="The version that excludes the subjects, and its certificate"
    )
    failure_reason: str | None
    callback: CallbackOut | None
    expected_by: datetime
    created_at: datetime
    completed_at: datetime | None


class DeletionList(BaseModel):
    deletions: list[DeletionOut]
    next_after_id: int | None
