"""The Planetoid citation graphs (Cora, Citeseer, PubMed) as :class:`NodeGraph` objects.

The Planetoid files are Python 2 pickles. They are read through a restricted unpickler that admits only
the numpy, scipy.sparse and collections classes those files contain, so a crafted file cannot run code
while loading.
"""

from __future__ import annotations

import collections
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from unlearning.data.files import shared_data_dir
from unlearning.data.graphs.node_graph import TEST, TRAIN, VAL, NodeGraph
from unlearning.errors import InvalidDatasetError

__all__ = ["load_cora", "load_planetoid"]

_PLANETOID_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph")


def _planetoid_classes() -> dict[tuple[str, str], Any]:
    # numpy moved _reconstruct to numpy._core in 2.0; the pickles name the old module path.
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    return {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("scipy.sparse.csr", "csr_matrix"): sp.csr_matrix,
        ("scipy.sparse._csr", "csr_matrix"): sp.csr_matrix,
        ("collections", "defaultdict"): collections.defaultdict,
        ("__builtin__", "list"): list,
        ("builtins", "list"): list,
    }


class _RestrictedUnpickler(pickle.Unpickler):
    """Admits only the numpy / scipy.sparse / collections classes the Planetoid files contain.

    A pickle can name any importable callable; refusing every other global means a crafted file cannot
    run code while loading.
    """

    _allowed = _planetoid_classes()

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise InvalidDatasetError(
                f"the Planetoid file references {module}.{name}, which this loader does not admit "
                "(only numpy arrays, scipy CSR matrices and adjacency dicts are allowed)"
            ) from None


def _unpickle(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"Planetoid file not found at {path}")
    with path.open("rb") as fh:
        # The files were written by Python 2: latin1 decodes their numpy buffers byte for byte.
        return _RestrictedUnpickler(fh, encoding="latin1").load()


def load_planetoid(name: str = "cora", root: str | Path | None = None) -> NodeGraph:
    """A Planetoid citation graph (``ind.<name>.*``) with the "full" split.

    Node order is the usual Planetoid reordering: ``allx`` rows first, then the test rows placed at
    their sorted test ids. Split "full" (as graph libraries define it and the certified graph unlearning
    paper uses): validation = nodes len(y)..len(y)+499, test = the ids in ``ind.<name>.test.index``,
    train = every other node. Edges are symmetrised, self-loops and duplicates dropped. Node ids are the
    strings ``"0"``..``"n-1"``.
    """
    folder = Path(root) if root is not None else shared_data_dir() / name
    parts = {p: _unpickle(folder / f"ind.{name}.{p}") for p in _PLANETOID_PARTS}
    index_file = folder / f"ind.{name}.test.index"
    if not index_file.is_file():
        raise FileNotFoundError(f"Planetoid file not found at {index_file}")
    test_idx = np.asarray([int(line) for line in index_file.read_text().split()], dtype=np.int64)
    test_sorted = np.sort(test_idx)
    n_all = parts["allx"].shape[0]
    n = max(int(test_sorted.max()) + 1, n_all + len(test_idx))
    num_features = parts["allx"].shape[1]
    # Citeseer has test ids with no row (isolated nodes): they keep zero features and no label.
    tx = sp.lil_matrix((n - n_all, num_features))
    ty = np.zeros((n - n_all, parts["ally"].shape[1]))
    tx[test_sorted - n_all, :] = parts["tx"]
    ty[test_sorted - n_all, :] = parts["ty"]
    feats = sp.vstack([sp.csr_matrix(parts["allx"]), sp.csr_matrix(tx)]).tolil()
    onehot = np.vstack([parts["ally"], ty])
    feats[test_idx, :] = feats[test_sorted, :]
    onehot[test_idx, :] = onehot[test_sorted, :]
    labels = np.where(onehot.sum(1) > 0, onehot.argmax(1), -1).astype(np.int64)
    edges = [(u, v) for u, nbrs in parts["graph"].items() for v in nbrs if u != v and max(u, v) < n]
    split = np.full(n, TRAIN, dtype=np.int8)
    num_train_public = parts["y"].shape[0]
    split[num_train_public:num_train_public + 500] = VAL
    split[test_idx] = TEST
    return NodeGraph(
        node_ids=tuple(str(i) for i in range(n)),
        features=sp.csr_matrix(feats, dtype=np.float64),
        labels=labels,
        num_classes=int(parts["ally"].shape[1]),
        edges=np.asarray(edges, dtype=np.int64).reshape(-1, 2),
        split=split,
        name=name,
    )


def load_cora(root: str | Path | None = None) -> NodeGraph:
    """Cora (2,708 nodes, 1,433 binary features, 7 classes, 5,278 undirected edges), split "full"."""
    return load_planetoid("cora", root)
