"""Splitting a training set among clients (ByzFL's schemes).

Every function returns ``list[np.ndarray]``: one int64 array of row indices per client; together
they contain every index exactly once. Randomness comes only from the ``rng`` argument (a numpy
``Generator``, a ``SeedSequence`` or an int, normalised by :func:`fedaudit.rng.as_generator`).

Schemes (ByzFL ``data_distributor``):

* ``"iid"`` — random permutation, then ``np.array_split`` (sizes differ by at most 1);
* ``"dirichlet"`` — per-class Dirichlet(β·1) proportions over clients (small β = more skew);
* ``"gamma"`` — a fraction γ of the samples spread i.i.d., the rest sorted by label and split;
* ``"extreme"`` — all samples sorted by label and split (each client sees ≈ C/n classes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.fl.registry import PARTITIONS, lookup
from fedaudit.rng import RngLike, as_generator
from fedaudit.validation import check_int, check_real

__all__ = [
    "iid_partition",
    "dirichlet_partition",
    "dirichlet_cuts",
    "gamma_similarity_partition",
    "extreme_partition",
    "partition",
]

def _check_labels(labels: Any) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1 or y.size == 0:
        raise FedAuditError(f"labels must be a non-empty 1-D array, got shape {y.shape}")
    if y.dtype.kind not in "iub":
        if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
            y = y.astype(np.int64)
        else:
            raise FedAuditError(f"labels must be integer class labels, got dtype {y.dtype}")
    return y


def _check_clients(n_clients: Any) -> int:
    return check_int("n_clients", n_clients, low=1)


def _check_beta(beta: Any) -> float:
    if beta is None:
        raise FedAuditError("beta (the Dirichlet concentration) is required for scheme 'dirichlet'; "
                            "beta must be a real number > 0")
    return check_real("beta", beta, low=0.0, open_low=True)


def _check_gamma(gamma: Any) -> float:
    if gamma is None:
        raise FedAuditError("gamma (the i.i.d. fraction) is required for scheme 'gamma'; "
                            "gamma must be a real number in [0, 1]")
    return check_real("gamma", gamma, low=0.0, high=1.0)


def _as_int64(parts: list[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(p, dtype=np.int64) for p in parts]


def iid_partition(n_samples: int, n_clients: int, rng: RngLike = 0) -> list[np.ndarray]:
    """Shuffle ``range(n_samples)`` with ``rng`` and ``np.array_split`` it into ``n_clients``
    parts (the first n_samples mod n_clients parts get one extra sample)."""
    n_samples = check_int("n_samples", n_samples, low=1)
    n_clients = _check_clients(n_clients)
    perm = as_generator(rng).permutation(n_samples)
    return _as_int64(np.array_split(perm, n_clients))


def dirichlet_cuts(labels: Any, P: np.ndarray) -> list[np.ndarray]:
    """Apply ByzFL's Dirichlet rule for a given proportion matrix P (classes × clients).

    Row k of P belongs to the k-th class of ``np.unique(labels)``. The class-k indices
    idx_k (ascending dataset positions) are cut at ``(cumsum(P[k])[:-1]·|idx_k|).astype(int)``;
    client j gets the concatenation over classes of its chunk j.
    """
    y = _check_labels(labels)
    P = np.asarray(P, dtype=np.float64)
    classes = np.unique(y)
    if P.ndim != 2 or P.shape[0] != classes.size:
        raise FedAuditError(f"P must have shape ({classes.size}, n_clients), got {P.shape}")
    n_clients = P.shape[1]
    chunks: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for k, c in enumerate(classes):
        idx = np.flatnonzero(y == c)
        cuts = (np.cumsum(P[k])[:-1] * idx.size).astype(int)
        for j, part in enumerate(np.split(idx, cuts)):
            chunks[j].append(part)
    return [np.concatenate(c).astype(np.int64) for c in chunks]


def dirichlet_partition(labels: Any, n_clients: int, beta: float, rng: RngLike = 0, min_size: int = 0,
                        max_redraws: int = 1000) -> list[np.ndarray]:
    """ByzFL's Dirichlet non-i.i.d. split (``dirichlet_niid_idx``), with an optional size floor.

    With C classes (``np.unique(labels)``, ascending) and n clients, draw once
    P = Dirichlet(β·1_n) of shape (C, n) — one proportion vector over clients per class — from
    ``rng``; then cut as in :func:`dirichlet_cuts`. If some client gets fewer
    than ``min_size`` samples, the whole P is redrawn from the same Generator (Flower-style
    rejection), at most ``max_redraws`` times after the first draw, then
    :class:`~fedaudit.errors.FedAuditError`. ``min_size=0`` is ByzFL's rule exactly (no
    rejection; small β can leave clients empty).
    """
    y = _check_labels(labels)
    n_clients = _check_clients(n_clients)
    beta = _check_beta(beta)
    min_size = check_int("min_size", min_size, low=0)
    max_redraws = check_int("max_redraws", max_redraws, low=0)
    if min_size * n_clients > y.size:
        raise FedAuditError(f"min_size={min_size} is impossible: {n_clients} clients × {min_size} > "
                            f"{y.size} samples; min_size must be in [0, n_samples/n_clients]")
    rng = as_generator(rng)
    n_classes = np.unique(y).size
    sizes = None
    for _ in range(max_redraws + 1):
        P = rng.dirichlet(np.full(n_clients, beta), size=n_classes)
        parts = dirichlet_cuts(y, P)
        sizes = [p.size for p in parts]
        if min(sizes) >= min_size:
            return parts
    raise FedAuditError(f"dirichlet_partition: no draw gave every client >= min_size={min_size} samples "
                        f"after max_redraws={max_redraws} redraws (beta={beta:g}, n_clients={n_clients}, "
                        f"last smallest client: {min(sizes)}); raise beta, lower min_size or n_clients")


def _sorted_by_label(y: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return idx[np.argsort(y[idx], kind="stable")]


def gamma_similarity_partition(labels: Any, n_clients: int, gamma: float, rng: RngLike = 0) -> list[np.ndarray]:
    """ByzFL's γ-similarity split: shuffle all indices; the first ⌊γ·N⌋ are split evenly
    (``array_split``) as an i.i.d. part; the rest are sorted by label (stable, so random within a
    class) and split evenly; client j gets its i.i.d. chunk followed by its sorted chunk.
    γ = 1 is i.i.d., γ = 0 is :func:`extreme_partition`."""
    y = _check_labels(labels)
    n_clients = _check_clients(n_clients)
    gamma = _check_gamma(gamma)
    perm = as_generator(rng).permutation(y.size)
    n_iid = int(gamma * y.size)
    iid = np.array_split(perm[:n_iid], n_clients)
    rest = np.array_split(_sorted_by_label(y, perm[n_iid:]), n_clients)
    return _as_int64([np.concatenate([a, b]) for a, b in zip(iid, rest)])


def extreme_partition(labels: Any, n_clients: int, rng: RngLike = 0) -> list[np.ndarray]:
    """ByzFL's extreme non-i.i.d. split: indices shuffled with ``rng``, stably sorted by label,
    then ``array_split`` into ``n_clients`` contiguous parts."""
    y = _check_labels(labels)
    n_clients = _check_clients(n_clients)
    perm = as_generator(rng).permutation(y.size)
    return _as_int64(np.array_split(_sorted_by_label(y, perm), n_clients))


def _iid(labels, n_clients, *, rng, beta=None, gamma=None, min_size=0, max_redraws=1000):
    """Random permutation split into equal parts (sizes differ by at most 1)."""
    return iid_partition(labels.size, n_clients, rng)


def _dirichlet(labels, n_clients, *, rng, beta=None, gamma=None, min_size=0, max_redraws=1000):
    """Per-class Dirichlet(β·1) proportions over clients (needs beta)."""
    return dirichlet_partition(labels, n_clients, _check_beta(beta), rng, min_size=min_size,
                               max_redraws=max_redraws)


def _gamma(labels, n_clients, *, rng, beta=None, gamma=None, min_size=0, max_redraws=1000):
    """A fraction γ of the samples i.i.d., the rest sorted by label (needs gamma)."""
    return gamma_similarity_partition(labels, n_clients, _check_gamma(gamma), rng)


def _extreme(labels, n_clients, *, rng, beta=None, gamma=None, min_size=0, max_redraws=1000):
    """All samples sorted by label and split."""
    return extreme_partition(labels, n_clients, rng)


PARTITIONS.register("iid", _iid)
PARTITIONS.register("dirichlet", _dirichlet, aliases=("niid",))
PARTITIONS.register("gamma", _gamma, aliases=("gamma_similarity", "gamma-similarity"))
PARTITIONS.register("extreme", _extreme)


def partition(labels: Any, n_clients: int, scheme: str, *, beta: float | None = None, gamma: float | None = None,
              rng: RngLike = 0, min_size: int = 0, max_redraws: int = 1000) -> list[np.ndarray]:
    """Split by a scheme of :data:`fedaudit.fl.registry.PARTITIONS` (its registered aliases:
    ``"gamma_similarity"``/``"gamma-similarity"`` for ``"gamma"``, ``"niid"`` for ``"dirichlet"``).

    ``beta`` (> 0) is required for ``"dirichlet"``, ``gamma`` (∈ [0, 1]) for ``"gamma"``; a value
    given for another scheme is still validated. ``min_size`` is enforced by redrawing for
    ``"dirichlet"`` and checked (FedAuditError) for the other schemes.
    """
    y = _check_labels(labels)
    n_clients = _check_clients(n_clients)
    factory = lookup(PARTITIONS, scheme, what="partition scheme")
    key = PARTITIONS.canonical(scheme)
    if beta is not None:
        beta = _check_beta(beta)
    if gamma is not None:
        gamma = _check_gamma(gamma)
    min_size = check_int("min_size", min_size, low=0)
    parts = _as_int64(factory(y, n_clients, rng=rng, beta=beta, gamma=gamma, min_size=min_size,
                              max_redraws=max_redraws))
    if not np.array_equal(np.sort(np.concatenate(parts)), np.arange(y.size)):
        raise FedAuditError(f"partition scheme {scheme!r} must give every index of the {y.size} samples "
                            "to exactly one client")
    smallest = min(p.size for p in parts)
    if smallest < min_size:
        raise FedAuditError(f"scheme {key!r} gives a client only {smallest} samples < min_size={min_size} "
                            f"({y.size} samples over n_clients={n_clients})")
    return parts
