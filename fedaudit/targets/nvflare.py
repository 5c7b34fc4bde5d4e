"""NVIDIA FLARE's privacy filters (``nvflare.app_common.filters``, 2.9.0) as fedaudit targets.

**SVTPrivacy** (``svt_privacy.py``). Its docstring: "Implementation of the standard Sparse Vector
Technique (SVT) differential privacy algorithm"; its accountant records, per call,
``epsilon_total = epsilon_threshold + epsilon_query + epsilon_release`` with ``delta = 0`` ("pure
composition") in the DXO meta ``svt_privacy_budget`` — that record is the claim read here. The
implementation clips to [−γ, γ], draws one threshold τ + Lap(γ/ε₁), then compares *every*
coordinate's |clip(v)| + Lap(2γ·c/ε₂) with it, repeating passes with fresh query noise until at
least c = ``n_upload`` coordinates are accepted, samples c of the accepted ones and releases them
with Lap(2γ·c/ε₃). The textbook SVT bound ε₁ + ε₂ (Lyu, Su & Li 2017, Alg. 1) is proved for a
mechanism that stops after c positive answers; here the number of accepted coordinates and of
passes is not capped at c, so that proof does not cover the selection phase as implemented and no
exact profile is computed here (``calibration_check`` states the claim and this, without a
verdict). The black-box audit calls the real filter (global ``np.random`` seeded per block, then
restored) on a model-diff dict {"w": x} and certifies a lower bound from the released vector and
the ``acceptance_passes`` count the filter writes into the DXO meta it sends.

**PercentilePrivacy** (``percentile_privacy.py``): zeroes the coordinates below a percentile of
|Δw| and clips the rest to [−γ, γ]; it draws no randomness and states no ε ("largest percentile to
share" policy, Shokri & Shmatikov 2015). It is not a DP mechanism and does not say it is; the black
box shows that two updates are told apart with certainty (ε_lb grows with the samples without
bound), which is what a user should know before treating it as a privacy guarantee.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Iterator

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.extras import require
from fedaudit.targets.base import BlackBoxAudit, CountingSampler, audit_sampler, library_version, off_lattice
from fedaudit.validation import check_int

__all__ = ["svt_claim", "blackbox_audit", "FilterSampler"]

_dxo = require("nvflare.apis.dxo", "auditing NVFlare privacy filters")
_filters = require("nvflare.app_common.filters", "auditing NVFlare privacy filters")
from nvflare.apis.fl_context import FLContext  # noqa: E402
from nvflare.apis.shareable import Shareable  # noqa: E402


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """``np.random.seed(seed)`` for one block, the caller's global state and logging restored after."""
    state = np.random.get_state()
    logging.disable(logging.INFO)
    try:
        np.random.seed(seed)
        yield
    finally:
        np.random.set_state(state)
        logging.disable(logging.NOTSET)


class FilterSampler:
    """The real filter's ``process_dxo`` on a WEIGHT_DIFF DXO {"w": x}: report = the filtered "w",
    plus (SVTPrivacy) the ``acceptance_passes`` of its budget record. Last claim in ``budget``."""

    def __init__(self, flt: Any):
        if not isinstance(flt, (_filters.SVTPrivacy, _filters.PercentilePrivacy)):
            raise FedAuditError(f"expected an nvflare SVTPrivacy or PercentilePrivacy, got {type(flt).__name__}")
        self.flt, self.ctx = flt, FLContext()
        self.budget: dict[str, Any] | None = None

    def one(self, x: np.ndarray) -> np.ndarray:
        out = self.flt.process_dxo(_dxo.DXO(_dxo.DataKind.WEIGHT_DIFF, data={"w": x.copy()}), Shareable(), self.ctx)
        w = np.asarray(out.data["w"], dtype=np.float64).ravel()
        if isinstance(self.flt, _filters.SVTPrivacy):
            self.budget = out.get_meta_prop("svt_privacy_budget")
            return np.append(w, float(self.budget["acceptance_passes"]))
        return w

    def __call__(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        with _seeded(int(rng.integers(0, 2**32))):
            return np.stack([self.one(np.asarray(x, dtype=np.float64)) for _ in range(size)])


def svt_claim(flt: Any, dim: int) -> dict[str, Any]:
    """SVTPrivacy's own budget record for a model of ``dim`` parameters (one real call on zeros)."""
    s = FilterSampler(flt)
    with _seeded(0):
        s.one(np.zeros(dim))
    return dict(s.budget)


def blackbox_audit(flt: Any, *, dim: int = 8, samples: int = 5_000, seed: int = 0,
                   confidence: float = 0.95, lattice: bool = True, self_test: str | None = None) -> BlackBoxAudit:
    """Black box on the pair x0 = 0, x1 = γ·1 (every coordinate at the clip bound) for a model of
    ``dim`` parameters; the claim: SVTPrivacy's ``epsilon_total`` (δ = 0); PercentilePrivacy claims
    none, so it is audited against ε = 1 only to report the certified bound (read ``epsilon_lower``).
    ``lattice`` (SVTPrivacy): add the count of released coordinates off the ulp(γ)/2 lattice
    (:func:`fedaudit.targets.base.off_lattice`: the release fl(clip(v) + noise) is a float addition).
    ``self_test``: audit the auditor's self-test variant instead (:func:`~fedaudit.targets.base.audit_sampler`)."""
    samples = check_int("samples", samples, low=100)
    dim = check_int("dim", dim, low=2)
    t0 = time.perf_counter()
    svt = isinstance(flt, _filters.SVTPrivacy)
    eps = float(svt_claim(flt, dim)["epsilon_total"]) if svt else 1.0
    real = FilterSampler(flt)
    counter = CountingSampler(real)
    x1 = [float(flt.gamma)] * dim
    x0 = [0.0] * dim if svt else [float(flt.gamma) * 0.5] * dim
    target: Any = counter
    notes = [] if svt else ["PercentilePrivacy states no ε; the claim 1.0 is a reference point only"]
    if svt and lattice:
        def target(x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
            r = counter(x, size, rng)
            return np.column_stack([r, off_lattice(r[:, :dim], float(flt.gamma)).sum(axis=1)])

        notes.append("reports carry the number of released coordinates off the ulp(γ)/2 lattice (post-processing)")
    audit = audit_sampler(target, x0, x1, epsilon=eps, delta=0.0, samples=samples, seed=seed, confidence=confidence,
                          self_test=self_test)
    return BlackBoxAudit("nvflare", library_version("nvflare"), type(flt).__name__, eps, 0.0, x0, x1, audit,
                         real_calls=counter.calls, calls_per_second=counter.rate, reproducible=True,
                         seconds=time.perf_counter() - t0, notes=notes)
