"""Which kind of dataset a method trains on, read from what it forgets (never from its name)."""

from __future__ import annotations

from typing import Any

from service.errors import Unprocessable
from service.graphs.storage import GRAPH_COLLECTION, NODE_GRAPH, TABLE, kind_of
from unlearning.methods.protocol import UnlearningMethod, dataset_kind
from unlearning.methods.registry import get_method, method_names

_DESCRIBED: dict[str, str] = {
    TABLE: "a table",
    NODE_GRAPH: "a node-classification graph",
    GRAPH_COLLECTION: "a graph collection",
}


def check_method_data(method_name: str, method: UnlearningMethod, dataset_id: int, arrays: Any) -> None:
    """422 when the method cannot train on the dataset's kind, naming the methods that can."""
    have, want = kind_of(arrays), dataset_kind(method)
    if have == want:
        return
    fitting = [name for name in method_names() if dataset_kind(get_method(name)) == have]
    raise Unprocessable(
        f"method {method_name!r} trains on {_DESCRIBED[want]}, but dataset {dataset_id} is {_DESCRIBED[have]}: "
        f"register it with one of {fitting} or pick a dataset of the right kind",
        code="dataset_kind_mismatch",
    )
