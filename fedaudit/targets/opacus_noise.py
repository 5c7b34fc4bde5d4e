"""Opacus's noise generation (``opacus.optimizers.optimizer._generate_noise``) as a fedaudit target.

``DPOptimizer.add_noise`` calls ``_generate_noise(std=self.noise_multiplier * self.max_grad_norm,
reference=p.summed_grad, generator=self.generator, secure_mode=self.secure_mode)``
(``optimizer.py`` l. 484–489), and the claim every Opacus accountant makes is that the noise is
N(0, (z·C)²) per coordinate. :func:`noise_check` draws it for real, in the parameter's dtype
(float64, float32, float16, bfloat16), with and without ``secure_mode``, and reports:

* the sample std against z·C with a 99.9 % chi-square interval (a std outside it is a finding);
* the dtype the noise is generated in and how many distinct values it takes (a low-precision
  gradient gets noise on the float16/bfloat16 grid; ``secure_mode`` draws default-dtype (float32)
  normals whatever the parameter's dtype — l. 144–157 pass no ``dtype`` — and sums four of them);
* :func:`blackbox_audit`: the noising step ``p.grad = p.summed_grad + noise`` (l. 490), computed in
  the dtype, on the summed gradients x0 = 0 and x1 = C (one coordinate), certified against the exact
  ε of N(0, (zC)²) at sensitivity C and δ. The report is (y, ℓ(y)) with ℓ(y) = 1 when 0 < |y| < C/2
  and y is not a multiple of ulp(C)/2 — a deterministic function of the output, so post-processing.
  Why ℓ: for x1 = C an output y = fl(C + n) with |y| < C/2 needs n ∈ (−3C/2, −C/2), where the
  subtraction is exact (Sterbenz) and y = C + n is a multiple of ulp(C)/2; for x0 = 0 the output is
  n itself, finer-grained near 0. So ℓ(y) = 1 has probability :func:`off_lattice_probability`
  (0.26 at z = 1) under x0 and exactly 0 under x1: the floating-point output is not (ε, δ)-DP for δ below that probability
  (Mironov 2012 for the Laplace; the same holds for any noise added in floating point). It concerns
  the addition, not how the noise is sampled, so ``secure_mode`` (which Opacus documents as
  preventing "certain floating-point arithmetic-based attacks") does not change it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fedaudit.extras import require
from fedaudit.json import jsonable
from fedaudit.mechanisms.gaussian import gaussian_pair_epsilon
from fedaudit.targets.base import BlackBoxAudit, CountingSampler, audit_sampler, library_version, off_lattice
from fedaudit.validation import check_int, check_positive

__all__ = ["NoiseCheck", "noise_check", "blackbox_audit", "off_lattice_probability", "DTYPES"]

#: the torch dtypes Opacus's noise is audited in (torch is imported only when one is used, so this
#: module imports without the ``torch`` extra)
DTYPES = ("float64", "float32", "float16", "bfloat16")


def _torch() -> Any:
    """torch, through the extras gate (one line naming ``fedaudit[torch]`` when it is missing)."""
    return require("torch", "auditing Opacus noise")


def _dtype(name: str) -> Any:
    from fedaudit.errors import FedAuditError

    if name not in DTYPES:
        raise FedAuditError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    return getattr(_torch(), name)


@dataclass(frozen=True)
class NoiseCheck:
    """Std of ``samples`` real noise draws against ``std_claimed`` = z·C, its 99.9 % interval
    [``std_low``, ``std_high``], the returned dtype and the number of distinct values."""

    dtype: str
    secure_mode: bool
    std_claimed: float
    std_measured: float
    std_low: float
    std_high: float
    returned_dtype: str
    distinct_values: int
    samples: int
    draws_per_second: float

    @property
    def violation(self) -> bool:
        return not (self.std_low <= self.std_claimed <= self.std_high)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({**asdict(self), "violation": self.violation})


def _noise(std: float, n: int, dtype: Any, secure: bool, seed: int) -> Any:
    torch = _torch()
    _opt = require("opacus.optimizers.optimizer", "auditing Opacus noise")
    g = torch.Generator().manual_seed(seed)
    return _opt._generate_noise(std, torch.zeros(n, dtype=dtype), generator=g, secure_mode=secure)


def noise_check(noise_multiplier: float, max_grad_norm: float, *, dtype: str = "float32", secure_mode: bool = False,
                samples: int = 200_000, seed: int = 0) -> NoiseCheck:
    """Draw ``samples`` coordinates of Opacus's noise at std = z·C and compare the measured std."""
    from scipy.stats import chi2

    std = check_positive("noise_multiplier", noise_multiplier) * check_positive("max_grad_norm", max_grad_norm)
    n = check_int("samples", samples, low=1000)
    t0 = time.perf_counter()
    z = _noise(std, n, _dtype(dtype), secure_mode, seed)
    dt = time.perf_counter() - t0
    torch = _torch()
    v = z.double().numpy()
    ss = float(np.sum(v * v))  # mean 0 known: ss/σ² ~ χ²_n
    lo, hi = np.sqrt(ss / chi2.ppf(0.9995, n)), np.sqrt(ss / chi2.ppf(0.0005, n))
    return NoiseCheck(dtype, secure_mode, std, float(np.sqrt(ss / n)), float(lo), float(hi), str(z.dtype).replace(
        "torch.", ""), int(torch.unique(z).numel()), n, n / dt if dt > 0 else float("inf"))


def blackbox_audit(noise_multiplier: float, max_grad_norm: float = 1.0, *, dtype: str = "float32",
                   secure_mode: bool = False, delta: float = 1e-5, samples: int = 20_000, seed: int = 0,
                   confidence: float = 0.95, self_test: str | None = None) -> BlackBoxAudit:
    """Certify a lower bound on the ε of one noised coordinate fl(x + noise), x ∈ {0, C}, against the
    exact ε of the Gaussian mechanism N(0, (zC)²) at sensitivity C and ``delta`` (module docstring:
    the report is the output and its off-lattice indicator ℓ). ``self_test``: audit the auditor's
    self-test variant instead (:func:`~fedaudit.targets.base.audit_sampler`)."""
    std = check_positive("noise_multiplier", noise_multiplier) * check_positive("max_grad_norm", max_grad_norm)
    tdt = _dtype(dtype)
    torch = _torch()
    t0 = time.perf_counter()

    c = torch.tensor(float(max_grad_norm), dtype=tdt)
    half_ulp = float((torch.nextafter(c, torch.tensor(float("inf"), dtype=tdt)) - c).double()) / 2
    half_c = float(c.double()) / 2

    def draw(x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        ref = torch.full((size,), float(x[0]), dtype=tdt)
        y = (ref + _noise(std, size, tdt, secure_mode, int(rng.integers(0, 2**63)))).double().numpy()
        return np.column_stack([y, off_lattice(y, 2 * half_c, half_ulp)])

    counter = CountingSampler(draw)
    eps = gaussian_pair_epsilon(1.0 / noise_multiplier, delta)
    audit = audit_sampler(counter, [0.0], [max_grad_norm], epsilon=eps, delta=delta, samples=samples, seed=seed,
                          confidence=confidence, self_test=self_test)
    return BlackBoxAudit("opacus", library_version("opacus"), f"_generate_noise[{dtype}{', secure' if secure_mode else ''}]",
                         eps, delta, [0.0], [max_grad_norm], audit, real_calls=counter.calls,
                         calls_per_second=counter.rate, reproducible=True, seconds=time.perf_counter() - t0)


def off_lattice_probability(noise_multiplier: float, max_grad_norm: float = 1.0) -> float:
    """≈ P[ℓ(y) = 1 | x0 = 0] for noise N(0, (zC)²) in a wide float format: the binade
    [C/2^{k+1}, C/2^k), k ≥ 1, has spacing ulp(C)/2^{k+1}, so a share 1 − 2^{−k} of its values is off
    the ulp(C)/2 lattice (values spread evenly within a binade). That probability is a lower bound on
    the δ of the floating-point output at ε = ∞, against the Gaussian claim."""
    from scipy.special import erf

    s = check_positive("noise_multiplier", noise_multiplier) * np.sqrt(2.0)
    k = np.arange(1, 200)
    mass = erf(0.5 ** k / s) - erf(0.5 ** (k + 1) / s)  # P(C/2^{k+1} ≤ |n| < C/2^k), C = 1 by scale
    return float(np.sum(mass * (1.0 - 0.5 ** k)))
