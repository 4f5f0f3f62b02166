"""Datasets and loaders."""

from unlearning.data.builtin import (
    load_covertype,
    load_mnist_idx,
    load_sklearn,
    make_synthetic,
    mnist_subsets,
)
from unlearning.data.dataset import Dataset
from unlearning.data.files import shared_data_dir
from unlearning.data.splits import subsample, train_test_split, train_test_subsets
from unlearning.data.uploads import load_table

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
