"""Stable string names for mechanisms, used by the CLI, plans and reports."""

from __future__ import annotations

from typing import Any, Callable

from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.base import Mechanism

__all__ = ["MECHANISM_NAMES", "make_mechanism"]


def _factories() -> dict[str, Callable[..., Mechanism]]:
    from fedaudit.mechanisms.duchi import Duchi
    from fedaudit.mechanisms.gaussian import Gaussian
    from fedaudit.mechanisms.laplace import Laplace
    from fedaudit.mechanisms.privunit import PrivUnitG
    from fedaudit.mechanisms.randomized_response import RandomizedResponse
    from fedaudit.mechanisms.published import SSTQSketch
    from fedaudit.mechanisms.sstq import SSTQ
    from fedaudit.mechanisms.vqsgd import VQSGD

    return {
        "sstq": lambda dim, epsilon, k, levels, clip, delta, rotate: SSTQ(dim, k, levels, epsilon, clip, rotate=rotate),
        "sstq-sketch": lambda dim, epsilon, k, levels, clip, delta, rotate: SSTQSketch(dim, k, levels, epsilon),
        "vqsgd": lambda dim, epsilon, k, levels, clip, delta, rotate: VQSGD(dim, epsilon, clip),
        "privunitg": lambda dim, epsilon, k, levels, clip, delta, rotate: PrivUnitG(dim, epsilon, clip=clip),
        "duchi": lambda dim, epsilon, k, levels, clip, delta, rotate: Duchi(dim, epsilon, clip),
        "laplace": lambda dim, epsilon, k, levels, clip, delta, rotate: Laplace(dim, epsilon, clip),
        "gaussian": lambda dim, epsilon, k, levels, clip, delta, rotate: Gaussian(dim, epsilon, delta, clip),
        "rr": lambda dim, epsilon, k, levels, clip, delta, rotate: RandomizedResponse(dim, epsilon),
    }


MECHANISM_NAMES = ("sstq", "sstq-sketch", "vqsgd", "privunitg", "duchi", "laplace", "gaussian", "rr")


def make_mechanism(name: str, dim: int, epsilon: float | None, *, k: int | None = None, levels: int = 4,
                   clip: float = 1.0, delta: float = 1e-5, rotate: bool = True) -> Mechanism:
    """Build a mechanism by registry name. ``k`` defaults to max(1, dim // 16); for ``rr``,
    ``dim`` is the number of categories."""
    factories = _factories()
    key = name.lower()
    if key not in factories:
        raise FedAuditError(f"unknown mechanism {name!r}; choose one of: {', '.join(MECHANISM_NAMES)}")
    if k is None:
        k = max(1, int(dim) // 16) if isinstance(dim, int) and dim >= 1 else 1
    return factories[key](dim=dim, epsilon=epsilon, k=k, levels=levels, clip=clip, delta=delta, rotate=rotate)
