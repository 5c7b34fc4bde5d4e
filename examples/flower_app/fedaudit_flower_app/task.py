"""What server and clients share: the data split, the model and the optional LDP mechanism.

Partition p of ``num-partitions`` is client p's share of scikit-learn's digits training set, split
iid by fedaudit's seeded partitioner; the model is multinomial logistic regression, arrays ``W``
(10, 64) and ``b`` (10,) in float32, the dtype the server aggregates in.
"""

from __future__ import annotations

import functools

import numpy as np

from fedaudit.fl.data import load_digits_dataset
from fedaudit.fl.models import LogisticModel
from fedaudit.fl.partition import partition
from fedaudit.mechanisms import make_mechanism
from fedaudit.rng import derive_seed

N_FEATURES, N_CLASSES = 64, 10
DIM = (N_FEATURES + 1) * N_CLASSES


@functools.lru_cache(maxsize=2)
def data(seed: int, partitions: int):
    """([(A_p, y_p)] per partition, (A_test, y_test))."""
    d = load_digits_dataset(rng=derive_seed(seed, "flower-data"))
    parts = partition(d.y_train, partitions, "iid", rng=derive_seed(seed, "flower-partition"), min_size=1)
    return [(d.X_train[idx], d.y_train[idx]) for idx in parts], (d.X_test, d.y_test)


def model() -> LogisticModel:
    return LogisticModel(N_FEATURES, N_CLASSES, mu=0.0)


def initial_arrays() -> dict[str, np.ndarray]:
    return {"W": np.zeros((N_CLASSES, N_FEATURES), dtype=np.float32), "b": np.zeros(N_CLASSES, dtype=np.float32)}


def mechanism(epsilon: float):
    """The LDP mechanism both sides must agree on (None when ``epsilon`` is 0): Laplace, clip 2."""
    return make_mechanism("laplace", DIM, float(epsilon), clip=2.0) if epsilon > 0 else None
