"""``lethe upload``: a table or graph file to ``POST /v1/datasets``, with a bar while it is sent."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm
from tqdm.utils import CallbackIOWrapper

from lethe_cli.commands import Commands, add_command
from lethe_cli.context import Context
from lethe_cli.errors import OK, UsageError

# The upload's query parameters: (option, parameter, help); the last two are integers.
_PARAMETERS = (
    ("--name", "name", "the dataset's name (default: the file name)"),
    (
        "--format",
        "format",
        "csv, npz, parquet, json (a node graph) or tu (a graph collection); default: from the file name",
    ),
    ("--id-column", "id_column", "the sample id column (sample_id)"),
    ("--owner-column", "owner_column", "the owner id column (owner_id)"),
    ("--label-column", "label_column", "the label column (label)"),
    ("--feature-columns", "feature_columns", "comma-separated; default: every other column"),
    ("--feature-shape", "feature_shape", "each row's shape, e.g. 1,28,28"),
    ("--num-classes", "num_classes", "the number of classes (default: from the labels)"),
    ("--label-offset", "label_offset", "subtracted from integer labels"),
)


def register(commands: Commands, common: argparse.ArgumentParser) -> None:
    parser = add_command(
        commands,
        common,
        "upload",
        "upload a dataset file (CSV, Parquet, NPZ, graph JSON, TU)",
        "Upload a table (sample id, owner id, label and numeric feature columns) or a graph; prints the "
        "dataset's id, rows and kind.",
    )
    parser.add_argument("file", type=Path, help="the file to upload")
    for option, parameter, text in _PARAMETERS:
        kind = int if parameter in ("num_classes", "label_offset") else str
        metavar = "N" if kind is int else parameter.split("_")[-1].upper()
        parser.add_argument(option, dest=parameter, type=kind, metavar=metavar, help=text)
    parser.set_defaults(run=upload)


def upload(context: Context, args: argparse.Namespace) -> int:
    params = {p: getattr(args, p) for _, p, _ in _PARAMETERS if getattr(args, p) is not None}
    try:
        size = args.file.stat().st_size
        handle = args.file.open("rb")
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from exc
    with (
        handle,
        tqdm(
            total=size,
            desc=f"uploading {args.file.name}",
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=sys.stderr,
            disable=True if context.out.json else None,
            leave=False,
        ) as bar,
    ):
        sent = CallbackIOWrapper(bar.update, handle, "read")
        dataset = context.api.post("/v1/datasets", params=params, files={"file": (args.file.name, sent)})
    context.out.emit(dataset, describe(dataset))
    return OK


def describe(dataset: dict[str, Any]) -> str:
    """``dataset 3 (people): 60 rows, table, 2 classes`` (graphs: their nodes, edges or graphs)."""
    kind = dataset.get("kind", "table")
    sizes = {
        "table": f"{dataset['num_rows']} rows",
        "node_graph": f"{dataset.get('num_nodes')} nodes, {dataset.get('num_edges')} edges",
        "graph_collection": f"{dataset.get('num_graphs')} graphs",
    }
    return (
        f"dataset {dataset['id']} ({dataset['name']}): {sizes.get(kind, str(dataset['num_rows']) + ' rows')}, "
        f"{kind}, {dataset['num_classes']} classes"
    )
