"""Federated-learning simulation: offline datasets, client partitions, models and the federation
that turns honest gradients, Byzantine vectors and a robust aggregator into an inexact oracle.

* :mod:`fedaudit.fl.data` — :class:`Dataset`, :func:`load_digits_dataset`, :func:`load_mnist`
  (local files only), :func:`synthetic_logistic`, :func:`synthetic_linear`, :func:`load_dataset`;
* :mod:`fedaudit.fl.partition` — ByzFL's iid / Dirichlet / γ-similarity / extreme splits;
* :mod:`fedaudit.fl.models` — :class:`LogisticModel` (exact numpy loss/grad/HVP), torch
  :func:`mlp` and :func:`cnn`;
* :mod:`fedaudit.fl.federation` — :class:`Federation` (``Federation.build(...)``).
"""

from fedaudit.fl.data import (
    DATASET_NAMES,
    Dataset,
    load_dataset,
    load_digits_dataset,
    load_mnist,
    stratified_split,
    synthetic_linear,
    synthetic_logistic,
)
from fedaudit.fl.federation import Federation, LabelFlip
from fedaudit.fl.models import LogisticModel, cnn, mlp
from fedaudit.fl.partition import (
    PARTITION_SCHEMES,
    dirichlet_cuts,
    dirichlet_partition,
    extreme_partition,
    gamma_similarity_partition,
    iid_partition,
    partition,
)

__all__ = [
    "Dataset", "DATASET_NAMES", "load_digits_dataset", "load_mnist", "synthetic_logistic", "synthetic_linear",
    "load_dataset", "stratified_split",
    "PARTITION_SCHEMES", "iid_partition", "dirichlet_partition", "dirichlet_cuts", "gamma_similarity_partition",
    "extreme_partition", "partition",
    "LogisticModel", "mlp", "cnn",
    "Federation", "LabelFlip",
]
