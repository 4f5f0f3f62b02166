"""The graph-collection text format of the TU benchmark files (IMDB-BINARY, PROTEINS) as
:class:`GraphCollection` objects."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from unlearning.data.files import shared_data_dir
from unlearning.data.graphs.collection import Graph, GraphCollection
from unlearning.data.graphs.structure import check_class_count
from unlearning.errors import InvalidDatasetError

__all__ = ["load_imdb_binary", "load_proteins", "load_tu_text", "tu_from_text"]


def load_tu_text(path: str | Path, name: str | None = None) -> GraphCollection:
    """The graph-collection text format of ``../shared/data`` (the DGCNN files of IMDB-BINARY, PROTEINS).

    First line: the number of graphs. Per graph a line ``g label``, then g lines ``tag m nbr_1 .. nbr_m``
    (node tag, then neighbour count and neighbour indices), optionally followed by continuous node
    attributes. Graph ids are ``"0".."G-1"`` in file order, node ids ``"0".."g-1"``; labels are remapped
    to 0..C-1 in sorted order of the raw values and tags to 0..T-1 likewise.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"graph collection file not found at {file}")
    return tu_from_text(file.read_text(), name or file.stem)


def tu_from_text(text: str, name: str) -> GraphCollection:
    """The collection the TU text ``text`` describes (format: :func:`load_tu_text`), named ``name``."""
    # (1-based line number, values) of every non-blank line; messages name the line, not the file (the
    # caller knows which file it passed, and the upload service prefixes the name it was uploaded as).
    lines = [(k, ln.split()) for k, ln in enumerate(text.splitlines(), 1) if ln.strip()]
    raw: list[tuple[int, list[int], list[list[int]], list[list[float]]]] = []
    width: tuple[int, int] | None = None  # (attribute count, line that set it)
    lineno = 0
    try:
        it = iter(lines)
        lineno, row = next(it)
        count = int(row[0])
        if count < 0:
            raise _tu_error(lineno, f"the number of graphs is {count}; it must be >= 0")
        for gi in range(count):
            lineno, row = next(it)
            if len(row) < 2:
                raise _tu_error(
                    lineno, f"graph {gi} (0-based) starts with a line '<number of nodes> <label>'"
                )
            g, label = int(row[0]), int(row[1])
            if g < 0:
                raise _tu_error(lineno, f"graph {gi} (0-based) has {g} nodes; it must be >= 0")
            tags, nbrs, attrs = [], [], []
            for _v in range(g):
                lineno, row = next(it)
                if len(row) < 2:
                    raise _tu_error(
                        lineno,
                        f"a node line is '<tag> <m> <neighbour 1> .. <neighbour m>', got {len(row)} value(s)",
                    )
                m = int(row[1])
                if m < 0:
                    raise _tu_error(lineno, f"the neighbour count m is {m}; it must be >= 0")
                if len(row) < 2 + m:
                    raise _tu_error(
                        lineno, f"the node declares {m} neighbours but the line lists {len(row) - 2}"
                    )
                extra = [float(x) for x in row[2 + m:]]
                if width is None:
                    width = (len(extra), lineno)
                elif len(extra) != width[0]:
                    raise _tu_error(
                        lineno, f"the node has {len(extra)} attribute value(s) after its neighbours but the "
                        f"node on line {width[1]} has {width[0]}: every node needs the same number of "
                        "attributes"
                    )
                tags.append(int(row[0]))
                nbrs.append([int(x) for x in row[2:2 + m]])
                attrs.append(extra)
            raw.append((label, tags, nbrs, attrs))
    except StopIteration:
        raise InvalidDatasetError(
            f"malformed graph-collection text: the file ends after line {lineno}, before all the declared "
            "graphs and nodes (truncated?)"
        ) from None
    except InvalidDatasetError:
        raise  # names its line already
    except (IndexError, ValueError) as exc:
        raise _tu_error(lineno, str(exc)) from None
    leftover = next(it, None)
    if leftover is not None:
        raise _tu_error(
            leftover[0], f"the file declares {count} graph(s) on line {lines[0][0]} but goes on after "
            "them: fix the count or remove the extra lines"
        )
    label_values = sorted({r[0] for r in raw})
    tag_values = sorted({t for r in raw for t in r[1]})
    label_map = {v: i for i, v in enumerate(label_values)}
    tag_map = {v: i for i, v in enumerate(tag_values)}
    graphs = []
    for gi, (label, tags, nbrs, attrs) in enumerate(raw):
        edges = [(u, v) for u, ns in enumerate(nbrs) for v in ns if u != v]
        has_attrs = bool(width and width[0])
        graphs.append(Graph(
            graph_id=str(gi),
            node_ids=tuple(str(v) for v in range(len(tags))),
            edges=np.asarray(edges, dtype=np.int64).reshape(-1, 2),
            label=label_map[label],
            node_tags=np.asarray([tag_map[t] for t in tags], dtype=np.int64),
            node_features=np.asarray(attrs, dtype=np.float64) if has_attrs else None,
        ))
    check_class_count(len(label_values), "the number of distinct graph labels", "graph-collection text")
    check_class_count(len(tag_values), "the number of distinct node tags", "graph-collection text")
    return GraphCollection(tuple(graphs), max(len(label_values), 2), max(len(tag_values), 1), name=name)


def _tu_error(lineno: int, problem: str) -> InvalidDatasetError:
    return InvalidDatasetError(f"malformed graph-collection text: line {lineno}: {problem}")


def load_imdb_binary(root: str | Path | None = None) -> GraphCollection:
    """IMDB-BINARY: 1,000 ego-networks, 2 classes, no node features (use a one-hot degree signal)."""
    folder = Path(root) if root is not None else shared_data_dir() / "imdb-binary"
    return load_tu_text(folder / "IMDBBINARY.txt", "imdb-binary")


def load_proteins(root: str | Path | None = None) -> GraphCollection:
    """PROTEINS: 1,113 graphs, 2 classes, 3 node tags (use a one-hot tag signal)."""
    folder = Path(root) if root is not None else shared_data_dir() / "proteins"
    return load_tu_text(folder / "PROTEINS.txt", "proteins")
