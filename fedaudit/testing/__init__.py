"""Helpers for test suites — fedaudit's own and its users'.

:mod:`fedaudit.testing.planted` holds deliberately broken randomizers, each reproducing one
implementation mistake seen in practice while claiming its correct sibling's guarantee. An
auditor that does not flag them is broken. Never use them for anything but tests.

:mod:`fedaudit.testing.blackbox` holds correct black-box product and rare-event samplers with the
exact pmfs of their privacy loss: the power benchmark of the black-box audit
(``benchmarks/blackbox_power.py``).

:func:`check_mechanism`, :func:`check_aggregator`, :func:`check_attack` and
:func:`check_claim_kind` test a component — a built-in or your own — against the contract of its
family, in the spirit of scikit-learn's ``check_estimator``: each returns a
:class:`ContractReport` of the properties that hold, or raises :class:`ContractError` (an
``AssertionError``) naming the component and the first property that fails
(``docs/guides/own-components.md``).

This package sits at the top of the library (it checks claim kinds, so it may import
:mod:`fedaudit.experiments`); nothing in the library imports it.
"""

from fedaudit.testing.planted import (
    CleartextIndicesSSTQ,
    LeakedNormSSTQ,
    ScaledLaplace,
    UnsplitBudgetSSTQ,
    scaled_gaussian_sampler,
)
from fedaudit.testing.aggregator_checks import check_aggregator
from fedaudit.testing.attack_checks import check_attack
from fedaudit.testing.contract import ContractError, ContractReport
from fedaudit.testing.kind_checks import check_claim_kind
from fedaudit.testing.mechanism_checks import check_mechanism

__all__ = ["check_mechanism", "check_aggregator", "check_attack", "check_claim_kind", "ContractError",
           "ContractReport", "UnsplitBudgetSSTQ", "ScaledLaplace", "LeakedNormSSTQ", "CleartextIndicesSSTQ", "scaled_gaussian_sampler"]
