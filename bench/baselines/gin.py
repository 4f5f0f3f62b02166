"""Graph Isomorphism Network (Xu et al., ICLR 2019) in plain torch: the retrain-from-scratch baseline of the
graph-classification unlearning benchmark (digest 000 section 7.1).

Architecture and training as the authors' code (``gin.py``) and paper (Appendix F): 2 GIN layers with a
learnable epsilon (``train_eps``), each ``h' = MLP((1 + eps) h + sum_{u in N(v)} h_u)`` with the MLP
``Linear - ReLU - Linear - ReLU - BatchNorm``, 64 hidden units; global mean pooling; then
``Linear - ReLU - Dropout(0.5) - Linear`` and log-softmax with the NLL loss; Adam with learning rate 1e-4,
batch size 128, 500 epochs. The reported test accuracy is taken at the epoch with the lowest validation
loss. Deleted nodes stay as isolated zero nodes (they count in the mean pool, like the scattering
transform's), which is how the authors retrain GIN after a node deletion.

Only the training epochs are timed (``train_seconds``); the per-epoch evaluation that selects the epoch
is reported separately, so the benchmark compares unlearning with what one retrain costs.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from unlearning.data.graphs.collection import Graph
from unlearning.errors import InvalidConfigError

__all__ = ["GIN", "GINConfig", "GINResult", "GraphBatch", "make_batch", "train_gin"]


@dataclass(frozen=True)
class GINConfig:
    hidden: int = 64
    layers: int = 2
    lr: float = 1e-4
    epochs: int = 500
    batch_size: int = 128
    dropout: float = 0.5

    def __post_init__(self) -> None:
        if self.hidden < 1 or self.layers < 1 or self.epochs < 1 or self.batch_size < 1:
            raise InvalidConfigError("GIN hidden, layers, epochs and batch_size must be >= 1")
        if not (self.lr > 0 and 0 <= self.dropout < 1):
            raise InvalidConfigError("GIN lr must be > 0 and dropout in [0, 1)")


class GINConv(nn.Module):
    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(1))
        self.mlp = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.BatchNorm1d(hidden))

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        return self.mlp((1.0 + self.eps) * x + torch.sparse.mm(adj, x))


class GIN(nn.Module):
    def __init__(self, in_dim: int, num_classes: int, config: GINConfig) -> None:
        super().__init__()
        dims = [in_dim] + [config.hidden] * config.layers
        self.convs = nn.ModuleList(GINConv(a, b) for a, b in itertools.pairwise(dims))
        self.head = nn.Sequential(nn.Linear(config.hidden, config.hidden), nn.ReLU(), nn.Dropout(config.dropout),
                                  nn.Linear(config.hidden, num_classes))

    def forward(self, x: torch.Tensor, adj: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
        h = x
        for conv in self.convs:
            h = conv(h, adj)
        return F.log_softmax(self.head(torch.sparse.mm(pool, h)), dim=-1)


@dataclass(frozen=True)
class GraphBatch:
    """Graphs stacked block-diagonally: node features, sparse adjacency, sparse mean-pool matrix, labels."""

    x: torch.Tensor
    adj: torch.Tensor
    pool: torch.Tensor
    labels: torch.Tensor


def make_batch(graphs: Sequence[Graph], signal: Callable[[Graph], np.ndarray]) -> GraphBatch:
    xs, rows, cols, pool_rows, pool_cols, pool_vals = [], [], [], [], [], []
    offset = 0
    for b, graph in enumerate(graphs):
        g = graph.num_nodes
        xs.append(signal(graph))
        e = graph.edges + offset
        rows.extend([e[:, 0], e[:, 1]])
        cols.extend([e[:, 1], e[:, 0]])
        pool_rows.append(np.full(g, b))
        pool_cols.append(np.arange(offset, offset + g))
        pool_vals.append(np.full(g, 1.0 / g))
        offset += g
    r = torch.from_numpy(np.concatenate(rows)) if rows else torch.zeros(0, dtype=torch.long)
    c = torch.from_numpy(np.concatenate(cols)) if cols else torch.zeros(0, dtype=torch.long)
    adj = torch.sparse_coo_tensor(torch.stack([r, c]), torch.ones(len(r)), (offset, offset),
                                  check_invariants=True).coalesce()
    pool = torch.sparse_coo_tensor(
        torch.stack([torch.from_numpy(np.concatenate(pool_rows)), torch.from_numpy(np.concatenate(pool_cols))]),
        torch.from_numpy(np.concatenate(pool_vals)).float(), (len(graphs), offset), check_invariants=True,
    ).coalesce()
    x = torch.from_numpy(np.concatenate(xs)).float()
    return GraphBatch(x, adj, pool, torch.as_tensor([g.label for g in graphs], dtype=torch.long))


@dataclass(frozen=True)
class GINResult:
    test_accuracy: float
    best_epoch: int
    best_val_loss: float
    train_seconds: float
    eval_seconds: float
    epochs: int


def train_gin(
    train: Sequence[Graph],
    val: Sequence[Graph],
    test: Sequence[Graph],
    num_classes: int,
    signal: Callable[[Graph], np.ndarray],
    config: GINConfig = GINConfig(),
    seed: int = 0,
) -> GINResult:
    """Train from scratch; test accuracy at the epoch with the lowest validation loss."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    val_batch, test_batch = make_batch(val, signal), make_batch(test, signal)
    single = len(train) <= config.batch_size
    fixed = make_batch(train, signal) if single else None
    model = GIN(val_batch.x.shape[1], num_classes, config)
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    best_loss, best_epoch = float("inf"), 0
    best_state = {k: v.clone() for k, v in model.state_dict().items()}
    train_seconds = eval_seconds = 0.0
    for epoch in range(1, config.epochs + 1):
        started = time.perf_counter()
        model.train()
        order = torch.randperm(len(train), generator=gen).tolist()
        for lo in range(0, len(train), config.batch_size):
            batch = fixed if fixed is not None else make_batch([train[i] for i in order[lo:lo + config.batch_size]],
                                                               signal)
            assert batch is not None
            optimiser.zero_grad()
            loss = F.nll_loss(model(batch.x, batch.adj, batch.pool), batch.labels)
            loss.backward()
            optimiser.step()
        train_seconds += time.perf_counter() - started
        started = time.perf_counter()
        model.eval()
        with torch.no_grad():
            val_loss = float(F.nll_loss(model(val_batch.x, val_batch.adj, val_batch.pool), val_batch.labels))
            if val_loss < best_loss:
                best_loss, best_epoch = val_loss, epoch
                best_state = {k: v.clone() for k, v in model.state_dict().items()}
        eval_seconds += time.perf_counter() - started
    started = time.perf_counter()
    model.load_state_dict(best_state)
    model.eval()
    with torch.no_grad():
        pred = model(test_batch.x, test_batch.adj, test_batch.pool).argmax(1)
    accuracy = float((pred == test_batch.labels).float().mean())
    eval_seconds += time.perf_counter() - started
    return GINResult(accuracy, best_epoch, best_loss, train_seconds, eval_seconds, config.epochs)
