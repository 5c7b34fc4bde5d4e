"""Krum's scoring and its one tie-break rule (used by Krum, Multi-Krum, Bulyan, the Fang attack
and the robustness search)."""

from __future__ import annotations

from functools import cmp_to_key
from typing import Any

import numpy as np

from fedaudit.arrays import is_torch

__all__ = ["krum_scores", "krum_order"]

def krum_scores(D: np.ndarray, f: int) -> np.ndarray:
    """score_i = Σ of the n − f − 2 smallest D_ij over j ≠ i (at least 0 neighbours)."""
    n = D.shape[0]
    k = max(0, n - f - 2)
    if k == 0:
        return np.zeros(n)
    off = D + np.diag(np.full(n, np.inf))
    return np.partition(off, k - 1, axis=1)[:, :k].sum(axis=1)


def krum_order(D: np.ndarray, f: int, X: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Positions 0 … m−1 of D (rows ``rows`` of X, default all) by increasing Krum score, ties
    broken without looking at the row order.

    Ties are structural (mutual nearest neighbours have equal scores when n − f − 2 = 1): they
    go to the smaller total Σ_j D_ij; rows still tied (symmetric configurations) are ordered
    lexicographically by value, and identical rows by index (which one is chosen then does not
    change the result).
    """
    score, total = krum_scores(D, f), D.sum(axis=1)
    order = np.lexsort((total, score))
    s, t = score[order], total[order]
    tied = (s[1:] == s[:-1]) & (t[1:] == t[:-1])
    if not tied.any():
        return order
    group = np.concatenate([[0], np.cumsum(~tied)])
    for g in np.unique(group[1:][tied]):  # only exactly tied groups, usually none
        pos = np.flatnonzero(group == g)
        ids = np.arange(D.shape[0]) if rows is None else rows
        order[pos] = sorted(order[pos], key=cmp_to_key(lambda a, b: _lex_cmp(X[ids[a]], X[ids[b]])))
    return order


def _lex_cmp(a: Any, b: Any) -> int:
    if is_torch(a):
        import torch

        diff = torch.nonzero(a != b).flatten()
        if diff.numel() == 0:
            return 0
        j = int(diff[0])
        return -1 if bool(a[j] < b[j]) else 1
    diff = np.flatnonzero(a != b)
    if diff.size == 0:
        return 0
    j = diff[0]
    return -1 if a[j] < b[j] else 1
