"""Helpers for test suites — fedaudit's own and its users'.

:mod:`fedaudit.testing.planted` holds deliberately broken randomizers, each reproducing one
implementation mistake seen in practice while claiming its correct sibling's guarantee. An
auditor that does not flag them is broken. Never use them for anything but tests.

:mod:`fedaudit.testing.blackbox` holds correct black-box product and rare-event samplers with the
exact pmfs of their privacy loss: the power benchmark of the black-box audit
(``benchmarks/blackbox_power.py``).

This package may import :mod:`fedaudit.mechanisms`; the mechanisms never import it.
"""

from fedaudit.testing.planted import (
    CleartextIndicesSSTQ,
    LeakedNormSSTQ,
    ScaledLaplace,
    UnsplitBudgetSSTQ,
    scaled_gaussian_sampler,
)

__all__ = ["UnsplitBudgetSSTQ", "ScaledLaplace", "LeakedNormSSTQ", "CleartextIndicesSSTQ", "scaled_gaussian_sampler"]
