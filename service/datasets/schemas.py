"""Dataset request and response bodies."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from pydantic import BaseModel, Field

from service.schemas import Name, Strict

BundledName = Literal[
    "digits", "breast_cancer", "wine", "iris", "mnist", "synthetic", "cora", "imdb-binary", "proteins"
]
BUNDLED = get_args(BundledName)


class BundledDatasetIn(Strict):
    name: BundledName = Field(
        description="digits, breast_cancer, wine, iris (scikit-learn), mnist (the shared IDX files), synthetic; "
        "graphs: cora (one node graph), imdb-binary and proteins (graph collections)"
    )
    n: int | None = Field(
        None,
        ge=10,
        le=100_000,
        description="Draw this many rows (graph collections: graphs) (seeded); default all",
    )
    seed: int = Field(0, ge=0, le=2**31 - 1)
    samples_per_owner: int = Field(
        1, ge=1, le=1000, description="Rows (nodes, graphs) per owner (owner-00000, owner-00001, ...)"
    )
    display_name: Name | None = Field(None, description="Name to show; defaults to the dataset's name")


class DatasetOut(BaseModel):
    id: int
    name: str
    source: Literal["upload", "bundled"]
    format: str
    num_rows: int = Field(
        description="Rows still stored (erased subjects' rows are removed); graphs: live nodes, or graphs"
    )
    num_classes: int
    class_names: list[str] | None = Field(
        None,
        description="The label names, when the label column held names: class i is class_names[i] (names in "
        "sorted order); null for integer labels, which are the class indices themselves",
    )
    feature_shape: list[int]
    erased_rows: int
    created_at: datetime
    kind: Literal["table", "node_graph", "graph_collection"] = Field(
        "table", description="A table, one node-classification graph, or a collection of graphs"
    )
    num_nodes: int | None = Field(
        None, description="Graphs: nodes stored (erased nodes stay as empty tombstones)"
    )
    num_edges: int | None = Field(None, description="Graphs: undirected edges")
    num_graphs: int | None = Field(None, description="Graph collections: graphs")
    deleted_at: datetime | None = Field(
        None, description="When the dataset was deleted (DELETE /v1/datasets/{id}): its rows are gone"
    )


class DatasetList(BaseModel):
    datasets: list[DatasetOut]
    next_after_id: int | None


class BundledList(BaseModel):
    names: list[str]
