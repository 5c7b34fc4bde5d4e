"""fedaudit — audit the privacy and Byzantine robustness of distributed and federated learning.

Sub-packages follow the data flow, bottom to top (nothing imports upward):

* the floor — :mod:`~fedaudit.errors`, :mod:`~fedaudit.validation`, :mod:`~fedaudit.arrays`,
  :mod:`~fedaudit.json`, :mod:`~fedaudit.rng`, :mod:`~fedaudit.registry`,
  :mod:`~fedaudit.guarantees`, :mod:`~fedaudit.kernels`, :mod:`~fedaudit.engine`;
* :mod:`fedaudit.mechanisms` (client side) and :mod:`fedaudit.defenses` (server rules) — the
  systems under test;
* :mod:`fedaudit.attacks` — adversarial inputs and privacy distinguishers;
  :mod:`fedaudit.testing` — deliberately broken mechanisms for test suites;
* :mod:`fedaudit.fl` — the simulated federated system (data, partitions, models, optimizers,
  training loop, gossip simulator, stress grids);
* :mod:`fedaudit.audit` — samples and scores in, certified numbers out;
* :mod:`fedaudit.reports` — renders verdicts and evidence, runs nothing;
* :mod:`fedaudit.experiments` — plans, claim kinds and the runner;
* :mod:`fedaudit.cli` — a thin shell.

The ``register_*`` functions below add a user's own component to the registry of its family;
they are loaded on first use, so ``import fedaudit`` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from fedaudit.errors import AggregatorBreakdown, FedAuditError
from fedaudit.version import __version__

_LAZY = {
    "register_mechanism": "fedaudit.mechanisms.registry",
    "register_aggregator": "fedaudit.defenses.registry",
    "register_preaggregator": "fedaudit.defenses.registry",
    "register_attack": "fedaudit.attacks.registry",
    "register_optimizer": "fedaudit.fl.registry",
    "register_partition": "fedaudit.fl.registry",
    "register_dataset": "fedaudit.fl.registry",
    "register_claim_kind": "fedaudit.experiments.kinds",
}

__all__ = ["FedAuditError", "AggregatorBreakdown", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fedaudit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
