"""The mechanism tour behind ``fedaudit demo --showcase``: encode and decode the same random
inputs with every registered mechanism and measure the reconstruction error.

Inputs: n points drawn uniformly in direction and with norm uniform in [0.5, 1] (inside the unit
clip ball); randomized response gets n uniformly drawn one-hot categories instead. For each
mechanism M with decoded estimates x̂_i of x_i, the per-report error is (1/n)·Σ_i ‖x̂_i − x_i‖²
and the error of the mean ‖(1/n)·Σ_i x̂_i − (1/n)·Σ_i x_i‖² (what federated averaging sees).
Randomness: ``SeedSequence(seed).spawn(1 + number of mechanisms)`` — the first stream draws the
inputs, each mechanism encodes with its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

__all__ = ["RoundTrip", "round_trips"]


@dataclass(frozen=True)
class RoundTrip:
    """One mechanism's encode → decode result: its name, the mechanism, the reconstruction errors."""

    name: str
    mechanism: Any
    mse_per_report: float
    mean_error: float

    def to_dict(self) -> dict[str, Any]:
        from fedaudit.json import jsonable

        return jsonable({"name": self.name, "mechanism": self.mechanism.params(),
                         "bits_per_report": self.mechanism.bits_per_report,
                         "mse_per_report": self.mse_per_report, "mean_error": self.mean_error})


def round_trips(dim: int, n: int, epsilon: float, seed: int = 0,
                progress: Callable[[int], None] | None = None) -> tuple[RoundTrip, ...]:
    """Encode and decode ``n`` inputs in R^dim with every registered mechanism at ``epsilon``
    (SSTQ with k = max(1, dim // 16) and 4 levels, clip 1); see the module docstring."""
    from fedaudit.mechanisms.registry import MECHANISMS, make_mechanism
    from fedaudit.rng import spawn_generators

    names = MECHANISMS.names()
    data_rng, *rngs = spawn_generators(seed, len(names) + 1)
    X = data_rng.normal(size=(n, dim))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X *= data_rng.uniform(0.5, 1.0, size=(n, 1))  # inside the unit clip ball
    out = []
    for name, rng in zip(names, rngs):
        m = make_mechanism(name, dim, epsilon, k=max(1, dim // 16), levels=4, clip=1.0)
        inputs = X
        if name == "rr":
            inputs = np.eye(dim)[data_rng.integers(0, dim, size=n)]
        est = m.decode(m.encode(inputs, rng=rng))
        per_report = float(np.mean(np.sum((est - inputs) ** 2, axis=1)))
        mean_err = float(np.sum((est.mean(0) - inputs.mean(0)) ** 2))
        if progress is not None:
            progress(1)
        out.append(RoundTrip(name, m, per_report, mean_err))
    return tuple(out)
