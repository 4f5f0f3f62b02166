"""Datasets and loaders."""

from unlearning.data.dataset import Dataset
from unlearning.data.loaders import (
    load_covertype,
    load_mnist_idx,
    load_sklearn,
    load_table,
    make_synthetic,
    shared_data_dir,
)
from unlearning.data.splits import mnist_subsets, subsample, train_test_split, train_test_subsets

__all__ = [
    "Dataset",
    "load_covertype",
    "load_mnist_idx",
    "load_sklearn",
    "load_table",
    "make_synthetic",
    "mnist_subsets",
    "shared_data_dir",
    "subsample",
    "train_test_split",
    "train_test_subsets",
]
