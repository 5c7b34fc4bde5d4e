"""Byzantine attacks: omniscient adversaries that craft the f Byzantine inputs of one round.

Call convention (every attack)::

    rows = attack(honest, f, rng=None)      # honest: (n − f, d)  ->  rows: (f, d)

``honest`` is a numpy array or a torch tensor; ``rows`` has the same type, dtype and device. The
adversary sees every honest vector (omniscient); rows may differ from one another. ``f = 0``
returns an empty ``(0, d)`` array. Inputs are never mutated; arithmetic is float64. ALIE, IPM,
SignFlip, Min-Max and Min-Sum are ``torch_native``: a torch tensor is attacked with torch
operations on its own device (float64 there, no host copy of the honest rows; only (n − f,)
vectors move for Min-Max's γ), bit-identical to numpy for IPM and SignFlip (means summed row
after row, numpy's order) and within a few float64 ulps for the others (torch's float64 square
root and dot products round differently); the other attacks copy the tensor to the host. ``n`` below is
the total number of inputs, ``n = (n − f) + f``; μ and σ are the per-coordinate mean and standard
deviation of the honest vectors.

Conventions chosen here:

* σ is the *unbiased* standard deviation (``ddof=1``), as in the public ALIE / NDSS'21 code, so
  attacks that use σ need at least two honest vectors.
* Attacks push *against* μ: ALIE's default ``sign=−1`` sends μ − zσ (as the Karimireddy et al.
  code does); IPM and SignFlip send −τ·μ; Min-Max/Min-Sum send μ − γ·∇_p.
* ``scale`` is the attack's magnitude knob (z, τ, σ, a multiplier of γ, …); attacks that have one
  implement :meth:`Attack.with_scale`, which is what :class:`Optimal` searches over.

References: Baruch et al. NeurIPS 2019 (ALIE); Xie, Koyejo, Gupta UAI 2019 (IPM); Karimireddy, He,
Jaggi ICLR 2022 (mimic); Shejwalkar & Houmansadr NDSS 2021 (Min-Max / Min-Sum); Fang et al.
USENIX Security 2020 (local model poisoning); Allouah et al. AISTATS 2023 (the line-searched
"optimal" attacks used to estimate (f, κ)).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np
from scipy import stats

from fedaudit.deprecation import module_aliases
from fedaudit.arrays import as_array, is_torch, to_like, torch_input, torch_to_numpy
from fedaudit.defenses.base import Aggregator
from fedaudit.errors import FedAuditError
from fedaudit.kernels import host, krum_order, pairwise_sqdist, sum_rows
from fedaudit.validation import check_choice, check_int, check_real
from fedaudit.rng import RngLike, as_generator, as_seed_sequence

__all__ = [
    "Attack",
    "ALIE",
    "IPM",
    "SignFlip",
    "GaussianNoise",
    "Mimic",
    "MinMax",
    "MinSum",
    "Fang",
    "FangKrumNotSelectedWarning",
    "NonFinite",
    "Optimal",
    "alie_z_max",
]


# ----------------------------------------------------------------------------- helpers


def _honest_array(honest: Any) -> tuple[np.ndarray, Any, np.dtype]:
    """float64 copy-free view of the honest matrix, the type token and the caller's dtype."""
    arr, token = as_array(honest, "honest")
    if arr.dtype.kind == "c":
        raise FedAuditError(f"honest must hold real numbers, got dtype {arr.dtype}")
    if not np.isfinite(arr).all():
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])
        raise FedAuditError(f"honest must contain only finite values, found {arr[bad]} at index {bad}")
    return np.asarray(arr, dtype=np.float64), token, arr.dtype


def _honest_tensor(honest: Any) -> tuple[Any, Any]:
    """float64 copy of the honest tensor on its device and the dtype to return (validated as
    :func:`_honest_array`, same messages)."""
    import torch

    T, out_dtype = torch_input(honest, "honest")
    bad = torch.nonzero(~torch.isfinite(T))
    if bad.shape[0]:
        idx = tuple(int(i) for i in bad[0])
        raise FedAuditError(f"honest must contain only finite values, found {float(T[idx])} at index {idx}")
    return T.to(torch.float64), out_dtype


def _mean(H: Any) -> Any:
    """Per-coordinate mean (float64 rows summed in order: numpy's ``H.mean(axis=0)``)."""
    return sum_rows(H) / H.shape[0]


def _std(H: Any, who: str) -> Any:
    """Per-coordinate σ with ddof=1, computed as numpy's ``H.std(axis=0, ddof=1)`` does:
    √(Σ_i (x_i − μ)² / (m − 1))."""
    if H.shape[0] < 2:
        raise FedAuditError(f"{who} needs at least 2 honest vectors (σ uses ddof=1), got {H.shape[0]}")
    C = H - _mean(H)
    var = sum_rows(C * C) / (H.shape[0] - 1)
    return var.sqrt() if is_torch(var) else np.sqrt(var)


def _repeat(row: Any, f: int) -> Any:
    """(f, d): f copies of the (d,) row."""
    return row[None, :].repeat(f, 1) if is_torch(row) else np.repeat(row[None, :], f, axis=0)


def _any(v: Any) -> bool:
    return bool((v != 0).any())


def alie_z_max(n: int, f: int, variant: str = "honest") -> float:
    """ALIE's z_max for n inputs of which f are Byzantine (Baruch, Baruch, Goldberg 2019).

    s = ⌊n/2 + 1⌋ − f honest workers must be "won over";

    * ``"paper"``:  z_max = Φ⁻¹((n − s)/n)              (Algorithm 1 of the paper);
    * ``"honest"``: z_max = Φ⁻¹((n − f − s)/(n − f))    (the public implementations).

    The honest variant is 0 for e.g. n = 12, f = 2 and negative for n = 4, f = 1 (it is returned
    as computed). Both need f ≤ ⌊n/2⌋ (s ≥ 1) and n − f ≥ 1.
    """
    n = check_int("n", n, low=1)
    f = check_int("f", f, low=0, high=n - 1, high_name="n-1")
    check_choice("variant", variant, ("paper", "honest"))
    s = (n // 2 + 1) - f
    if s < 1:
        raise FedAuditError(f"ALIE z_max needs f <= floor(n/2) (s = floor(n/2+1) - f >= 1), got n={n}, f={f}")
    cdf = (n - s) / n if variant == "paper" else (n - f - s) / (n - f)
    if not 0.0 < cdf < 1.0:
        raise FedAuditError(f"ALIE z_max is not finite for n={n}, f={f}, variant={variant!r} "
                            f"(Φ⁻¹ argument {cdf:g} not in (0, 1))")
    return float(stats.norm.ppf(cdf))


# ----------------------------------------------------------------------------- base


class Attack:
    """Base class: validation, type round-trip, f = 0. Subclasses implement ``_rows``.

    ``_rows(H, f, rng)`` gets a finite float64 (n − f, d) array, f ≥ 1 and a numpy Generator and
    returns float64 (f, d).
    """

    name: str = "attack"
    #: constructor parameter that :meth:`with_scale` replaces (None: the attack has no scale)
    _scale_param: str | None = None
    #: whether ``_rows`` also computes on a float64 torch tensor (on its device)
    torch_native: bool = False

    def __call__(self, honest: Any, f: int, rng: RngLike = None) -> Any:
        if is_torch(honest) and self.torch_native:
            import torch

            H, out_dtype = _honest_tensor(honest)
            f = check_int("f", f, low=0)
            if f == 0:
                return torch.empty((0, H.shape[1]), dtype=out_dtype, device=H.device)
            return self._rows(H, f, as_generator(rng)).to(out_dtype)
        H, token, dtype = _honest_array(honest)
        f = check_int("f", f, low=0)
        if f == 0:
            return to_like(np.empty((0, H.shape[1])), token, dtype)
        rows = self._rows(H, f, as_generator(rng))
        return to_like(rows, token, dtype)

    def _rows(self, H: np.ndarray, f: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        return {}

    @property
    def has_scale(self) -> bool:
        """Whether the attack has a magnitude parameter (what :class:`Optimal` line-searches)."""
        return self._scale_param is not None

    @property
    def scale(self) -> float | None:
        """The current scale, or None if the attack has none (or it depends on n, f)."""
        return None if self._scale_param is None else self.params()[self._scale_param]

    def default_scale(self, n_honest: int, f: int) -> float | None:
        """Scale used by a call with n − f = ``n_honest`` honest vectors and f Byzantine ones."""
        return self.scale

    def with_scale(self, s: float) -> "Attack":
        """A copy with scale ``s`` (validated like the constructor parameter)."""
        if self._scale_param is None:
            raise FedAuditError(f"attack {self.name!r} has no scale parameter")
        return type(self)(**{**self.params(), self._scale_param: s})

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


def _check_sign(sign: Any) -> int:
    if isinstance(sign, bool) or sign not in (-1, 1):
        raise FedAuditError(f"sign must be -1 or +1, got sign={sign!r}")
    return int(sign)


    return value


# ----------------------------------------------------------------------------- attacks


class ALIE(Attack):
    """A Little Is Enough (Baruch, Baruch, Goldberg, NeurIPS 2019).

    Every Byzantine row is μ + sign·z·σ (per coordinate; σ with ddof=1). ``z=None`` uses
    :func:`alie_z_max` (n, f, ``variant``): ``"paper"`` Φ⁻¹((n − s)/n) or ``"honest"``
    Φ⁻¹((n − f − s)/(n − f)), s = ⌊n/2 + 1⌋ − f. Scale = z (any finite real).
    """

    name = "alie"
    _scale_param = "z"
    torch_native = True

    def __init__(self, z: float | None = None, variant: str = "honest", sign: int = -1):
        self.z = None if z is None else check_real("z", z)
        self.variant = check_choice("variant", variant, ("paper", "honest"))
        self.sign = _check_sign(sign)

    def params(self) -> dict[str, Any]:
        return {"z": self.z, "variant": self.variant, "sign": self.sign}

    def default_scale(self, n_honest: int, f: int) -> float:
        return self.z if self.z is not None else alie_z_max(n_honest + f, f, self.variant)

    def _rows(self, H, f, rng):
        z = self.default_scale(H.shape[0], f)
        row = _mean(H) + self.sign * z * _std(H, "ALIE")
        return _repeat(row, f)


class IPM(Attack):
    """Inner Product Manipulation (Xie, Koyejo, Gupta, UAI 2019): every row is −τ·μ. Scale = τ ≥ 0."""

    name = "ipm"
    _scale_param = "tau"
    torch_native = True

    def __init__(self, tau: float = 0.1):
        self.tau = check_real("tau", tau, low=0.0)

    def params(self) -> dict[str, Any]:
        return {"tau": self.tau}

    def _rows(self, H, f, rng):
        return _repeat(-self.tau * _mean(H), f)


class SignFlip(IPM):
    """Sign flipping: every row is −scale·μ (the negated honest *mean*, as in ByzFL; flipping each
    honest vector individually would not be a function of f). ``SignFlip(s)`` ≡ ``IPM(tau=s)``;
    the separate name keeps the usual default scale 1. Scale ≥ 0."""

    name = "signflip"
    _scale_param = "scale"

    def __init__(self, scale: float = 1.0):
        self.tau = check_real("scale", scale, low=0.0)  # the rows are IPM's with τ = scale

    def params(self) -> dict[str, Any]:
        return {"scale": self.tau}


class GaussianNoise(Attack):
    """Gaussian noise: f independent rows of i.i.d. N(mu, sigma²) entries drawn from ``rng``
    (reproducible for a fixed seed; ``rng=None`` is fresh OS entropy). Scale = sigma ≥ 0."""

    name = "gaussian"
    _scale_param = "sigma"

    def __init__(self, sigma: float = 1.0, mu: float = 0.0):
        self.sigma = check_real("sigma", sigma, low=0.0)
        self.mu = check_real("mu", mu)

    def params(self) -> dict[str, Any]:
        return {"sigma": self.sigma, "mu": self.mu}

    def _rows(self, H, f, rng):
        return self.mu + self.sigma * rng.standard_normal((f, H.shape[1]))


class Mimic(Attack):
    """Mimic (Karimireddy, He, Jaggi, ICLR 2022, "Byzantine-robust learning on heterogeneous
    datasets via bucketing"): every Byzantine copies the honest vector i* that is most extreme
    along the top principal direction v of the honest vectors,

        v = top right singular vector of (H − μ),   i* = argmax_i |⟨x_i − μ, v⟩|

    (equivalently argmax_i ⟨x_i, v⟩ with v oriented so that the extreme row lies on its positive
    side; ties → smallest index). Departure from the paper: v is computed exactly by an SVD of the
    current round (stateless), instead of the paper's running power-iteration estimate during a
    warm-up phase after which i* is frozen. No scale.
    """

    name = "mimic"

    def _rows(self, H, f, rng):
        i = self.target_index(H)
        return np.repeat(H[i][None, :], f, axis=0)

    @staticmethod
    def target_index(honest: Any) -> int:
        """Index i* of the honest vector that the Byzantines copy."""
        H = _honest_array(honest)[0]
        C = H - H.mean(axis=0)
        if H.shape[0] < 2 or not np.any(C):
            return 0
        _, _, vt = np.linalg.svd(C, full_matrices=False)
        proj = np.abs(C @ vt[0])
        return int(np.argmax(proj))


_PERTURBATIONS = ("unit", "sign", "std")


class _MinDistance(Attack):
    _scale_param = "scale"
    torch_native = True

    def __init__(self, perturbation: str = "unit", scale: float = 1.0):
        self.perturbation = check_choice("perturbation", perturbation, _PERTURBATIONS)
        self._scale = check_real("scale", scale, low=0.0)

    def params(self) -> dict[str, Any]:
        return {"perturbation": self.perturbation, "scale": self._scale}

    def _direction(self, H: Any, mu: Any) -> Any:
        if self.perturbation == "unit":
            norm = float((mu @ mu) ** 0.5) if is_torch(mu) else float(np.linalg.norm(mu))
            return mu / norm if norm > 0 else mu * 0.0
        if self.perturbation == "sign":
            return mu.sign() if is_torch(mu) else np.sign(mu)
        return _std(H, f"{self.name} with perturbation='std'")

    def _gamma(self, C: np.ndarray, p: np.ndarray) -> float:
        raise NotImplementedError

    def gamma(self, honest: Any) -> float:
        """The largest feasible γ (before ``scale``) for these honest vectors."""
        H = _honest_tensor(honest)[0] if is_torch(honest) and self.torch_native else _honest_array(honest)[0]
        mu = _mean(H)
        p = self._direction(H, mu)
        if not _any(p):
            return 0.0
        return self._gamma(H - mu, p)

    def _rows(self, H, f, rng):
        mu = _mean(H)
        p = self._direction(H, mu)
        g = self._gamma(H - mu, p) if _any(p) else 0.0
        return _repeat(mu - self._scale * g * p, f)


class MinMax(_MinDistance):
    """Min-Max (Shejwalkar & Houmansadr, NDSS 2021). Every row is ∇_m = μ − scale·γ·∇_p with
    ∇_p ∈ {"unit": μ/‖μ‖, "sign": sign(μ), "std": σ (ddof=1)} and γ the largest value with

        max_i ‖∇_m − x_i‖ ≤ max_{i,j} ‖x_i − x_j‖      (at scale 1).

    With c_i = ‖μ − x_i‖², b_i = ⟨μ − x_i, ∇_p⟩ and R² the squared diameter, each constraint is
    the convex quadratic c_i − 2γb_i + γ²‖∇_p‖² ≤ R² whose feasible interval contains 0
    (c_i ≤ R² since μ is in the convex hull), so exactly
    γ = min_i (b_i + √(b_i² + ‖∇_p‖²(R² − c_i)))/‖∇_p‖²  (the paper's bisection converges to the
    same value). ∇_p = 0 (e.g. μ = 0 with "unit") gives ∇_m = μ.
    """

    name = "minmax"

    def _gamma(self, C, p):
        pp = float(p @ p)
        R2 = float(pairwise_sqdist(C).max())
        c = host((C * C).sum(1)) if is_torch(C) else np.einsum("ij,ij->i", C, C)
        b = -host(C @ p)  # ⟨μ − x_i, p⟩
        disc = np.maximum(b * b + pp * np.maximum(R2 - c, 0.0), 0.0)
        return float(max(np.min((b + np.sqrt(disc)) / pp), 0.0))


class MinSum(_MinDistance):
    """Min-Sum (Shejwalkar & Houmansadr, NDSS 2021). Every row is ∇_m = μ − scale·γ·∇_p (∇_p as in
    :class:`MinMax`) with γ the largest value with

        Σ_i ‖∇_m − x_i‖² ≤ min_i Σ_j ‖x_i − x_j‖²      (at scale 1).

    Since Σ_i (μ − x_i) = 0, the left side is Σ_i‖μ − x_i‖² + (n − f)γ²‖∇_p‖² and the right side
    is Σ_j‖μ − x_j‖² + (n − f)·min_i‖x_i − μ‖², so exactly γ = min_i ‖x_i − μ‖ / ‖∇_p‖.
    """

    name = "minsum"

    def _gamma(self, C, p):
        c = host((C * C).sum(1)) if is_torch(C) else np.einsum("ij,ij->i", C, C)
        return float(np.sqrt(c.min() / float(p @ p)))


class FangKrumNotSelectedWarning(RuntimeWarning):
    """Fang's Krum variant found no λ for which Krum selects a Byzantine row (see :class:`Fang`)."""


class Fang(Attack):
    """Local model poisoning (Fang, Cao, Jia, Gong, USENIX Security 2020), full-knowledge versions,
    in update space (the reference global model is the zero update). s_j = sign(μ_j) (0 → +1).

    * ``"trmean"`` / ``"median"`` (the paper uses the same attack for both): per coordinate j with
      honest max w_max and min w_min, each Byzantine entry is drawn uniformly (independently per row)
      from
        s_j = −1: [w_max, b·w_max] if w_max > 0 else [w_max, w_max/b];
        s_j = +1: [w_min/b, w_min] if w_min > 0 else [b·w_min, w_min].
    * ``"krum"``: every row is −λ·s with λ halved from
        λ₀ = min_i Σ_{l∈Γ_i} ‖x_l − x_i‖ / ((n − 2f − 1)√d) + max_i ‖x_i‖/√d
      (Γ_i: the n − f − 2 nearest other honest vectors) until Krum (n − f − 2 neighbours, squared
      distances) on honest ∪ Byzantine selects a Byzantine row, stopping below 1e-5·λ₀. All f
      rows are identical. Needs n ≥ 2f + 3. When no λ ≥ 1e-5·λ₀ makes Krum select a Byzantine
      row the attack has failed: it returns the last λ tried, emits a
      :class:`FangKrumNotSelectedWarning` and records the outcome, readable after each call as
      ``attack.krum_selected`` (True/False; None before the first krum-variant call) and
      ``attack.krum_lambda`` (the λ returned). These two attributes are the only state, are
      overwritten by every call and are not meant to be shared between threads.

    ``b > 1`` (default 2). No scale.
    """

    name = "fang"

    def __init__(self, variant: str = "trmean", b: float = 2.0):
        self.variant = check_choice("variant", variant, ("trmean", "median", "krum"))
        self.b = check_real("b", b, low=1.0, open_low=True)
        self.krum_selected: bool | None = None
        self.krum_lambda: float | None = None

    def params(self) -> dict[str, Any]:
        return {"variant": self.variant, "b": self.b}

    def _rows(self, H, f, rng):
        if self.variant == "krum":
            return self._krum_rows(H, f, np.where(H.mean(axis=0) < 0, -1.0, 1.0))
        lo, hi = self.intervals(H)
        return rng.uniform(lo, hi, size=(f, H.shape[1]))

    def intervals(self, honest: Any) -> tuple[np.ndarray, np.ndarray]:
        """Per-coordinate sampling interval [lo_j, hi_j] of the trmean/median variant."""
        H = _honest_array(honest)[0]
        b = self.b
        s = np.where(H.mean(axis=0) < 0, -1.0, 1.0)
        wmax, wmin = H.max(axis=0), H.min(axis=0)
        up_lo, up_hi = wmax, np.where(wmax > 0, b * wmax, wmax / b)    # s_j = −1: above w_max
        dn_lo, dn_hi = np.where(wmin > 0, wmin / b, b * wmin), wmin    # s_j = +1: below w_min
        return np.where(s < 0, up_lo, dn_lo), np.where(s < 0, up_hi, dn_hi)

    def _krum_rows(self, H, f, s):
        m, d = H.shape
        n = m + f
        if n < 2 * f + 3:
            raise FedAuditError(f"Fang krum variant needs n >= 2f+3 inputs (Krum's n-f-2 >= 1 neighbours "
                                f"and n-2f-1 >= 1), got n={n}, f={f}")
        D = np.sqrt(pairwise_sqdist(H))
        np.fill_diagonal(D, np.inf)
        k = n - f - 2  # ≤ m − 1 other honest vectors since n − f − 2 = m − 2
        min_sum = float(np.sort(D, axis=1)[:, :k].sum(axis=1).min())
        lam0 = min_sum / ((n - 2 * f - 1) * math.sqrt(d)) + float(np.linalg.norm(H, axis=1).max()) / math.sqrt(d)
        if not math.isfinite(lam0):
            raise FedAuditError(f"Fang krum variant: λ₀ = {lam0} is not finite (honest vectors too large "
                                "for their norms and distances to be represented)")
        lam = lam0
        while True:
            row = -lam * s
            X = np.vstack([H, np.repeat(row[None, :], f, axis=0)])
            selected = int(krum_order(pairwise_sqdist(X), f, X)[0]) >= m
            if selected or lam / 2 < 1e-5 * lam0 or lam0 == 0:
                self.krum_selected, self.krum_lambda = bool(selected), float(lam)
                if not selected:
                    warnings.warn(f"Fang krum variant: Krum selected no Byzantine row for any λ in "
                                  f"[{lam:.3g}, {lam0:.3g}] (n={n}, f={f}); returning λ={lam:.3g} "
                                  "(attack.krum_selected is False)", FangKrumNotSelectedWarning, stacklevel=4)
                return X[m:]
            lam /= 2


class NonFinite(Attack):
    """Non-finite rows: ``"nan"``, ``"inf"``, ``"-inf"``, or ``"mixed"`` (entry (i, j) is
    [NaN, +inf, −inf][(i + j) mod 3], so with d ≥ 3 every row holds all three). A finite-input
    rule must treat such rows as Byzantine (see :mod:`fedaudit.defenses.base`). No scale."""

    name = "nonfinite"

    def __init__(self, value: str = "nan"):
        self.value = check_choice("value", value, ("nan", "inf", "-inf", "mixed"))

    def params(self) -> dict[str, Any]:
        return {"value": self.value}

    def _rows(self, H, f, rng):
        d = H.shape[1]
        if self.value == "mixed":
            cycle = np.array([np.nan, np.inf, -np.inf])
            return cycle[(np.arange(f)[:, None] + np.arange(d)[None, :]) % 3]
        return np.full((f, d), float(self.value))


# ----------------------------------------------------------------------------- optimal


class Optimal(Attack):
    """Line-searched attack (the "optimal" ALIE/IPM of Allouah et al. 2023 / ByzFL, generalised).

    Maximises  g(s) = ‖F(honest ∪ byz(s)) − μ‖₂  over the wrapped attack's scale s ∈ [low, high]
    (high=None: unbounded) with ``evals`` calls of the aggregator F at most:

    1. evaluate g at ``low`` and at the attack's default scale (clipped), keep the better;
    2. expansion: step δ₀ = |default − low| (1 if 0); propose best + δ, accept and double δ while
       it improves;
    3. contraction: halve δ and probe best ± δ (both sides), moving to any improvement, until the
       budget is spent or δ is negligible.

    Repeated scales are cached (no extra call). A non-finite aggregate counts as g = +inf (the
    rule was broken). The wrapped attack's randomness is common across probes (one seed, fresh
    stream per probe), so g is a deterministic function of s for a given ``rng``. F receives the
    honest rows followed by the Byzantine rows, in the caller's array type; F must be permutation
    invariant for the result not to depend on that order. A fedaudit :class:`Aggregator` is
    called as ``aggregator(X, rng=...)`` with the same child stream of ``rng`` at every probe
    (common random numbers, so a random rule such as bucketing does not make g noisy); other
    callables are called as ``aggregator(X)``. ``search`` returns the rows at the best scale
    with that scale and its objective; ``__call__`` returns the rows only.
    """

    def __init__(self, attack: Attack, aggregator: Callable[[Any], Any], evals: int = 24,
                 low: float = 0.0, high: float | None = None):
        if not isinstance(attack, Attack) or isinstance(attack, Optimal):
            raise FedAuditError(f"attack must be a fedaudit Byzantine attack (not Optimal), got {attack!r}")
        if not attack.has_scale:
            raise FedAuditError(f"attack {attack.name!r} has no scale parameter to optimise")
        if not callable(aggregator):
            raise FedAuditError(f"aggregator must be callable (n, d) -> (d,), got {type(aggregator).__name__}")
        self.attack = attack
        self.aggregator = aggregator
        self.evals = check_int("evals", evals, low=2)
        self.low = check_real("low", low)
        self.high = None if high is None else check_real("high", high, low=self.low, open_low=True)
        attack.with_scale(self.low)  # raises if low is outside the attack's scale range
        if self.high is not None:
            attack.with_scale(self.high)
        self.name = f"optimal-{attack.name}"

    def params(self) -> dict[str, Any]:
        return {"attack": self.attack, "aggregator": self.aggregator, "evals": self.evals,
                "low": self.low, "high": self.high}

    def _rows(self, H, f, rng):  # pragma: no cover - __call__ is overridden
        raise NotImplementedError

    def __call__(self, honest: Any, f: int, rng: RngLike = None) -> Any:
        return self.search(honest, f, rng)[0]

    def search(self, honest: Any, f: int, rng: RngLike = None) -> tuple[Any, float, float]:
        """(rows at the best scale, best scale, its objective g)."""
        H, token, dtype = _honest_array(honest)
        f = check_int("f", f, low=0)
        m, d = H.shape
        mu = H.mean(axis=0)
        default = self.attack.default_scale(m, f)
        default = self.low if default is None else self._clip(default)
        if f == 0:
            return to_like(np.empty((0, d)), token, dtype), default, 0.0
        seed = as_seed_sequence(rng)
        agg_seed = seed.spawn(1)[0]
        cache: dict[float, tuple[float, np.ndarray]] = {}
        calls = 0

        def g(s: float) -> float:
            nonlocal calls
            s = self._clip(s)
            if s in cache:
                return cache[s][0]
            if calls >= self.evals:
                return -np.inf
            byz = self.attack.with_scale(s)(H, f, np.random.default_rng(seed))
            X = to_like(np.vstack([H, byz]), token, dtype)
            if isinstance(self.aggregator, Aggregator):  # common random numbers for a random rule
                out = self.aggregator(X, rng=np.random.default_rng(agg_seed))
            else:
                out = self.aggregator(X)
            calls += 1
            if is_torch(out):
                out = torch_to_numpy(out, "aggregator output")[0]
            out = np.asarray(out, dtype=np.float64).reshape(-1)
            if out.shape != (d,):
                raise FedAuditError(f"aggregator must return a vector of shape ({d},), got shape {out.shape}")
            val = float(np.linalg.norm(out - mu)) if np.isfinite(out).all() else np.inf
            cache[s] = (val, byz)
            return val

        best, best_val = self.low, g(self.low)
        if default != self.low and g(default) > best_val:
            best, best_val = default, cache[default][0]
        delta = abs(default - self.low) or 1.0
        # expansion
        while calls < self.evals:
            x = self._clip(best + delta)
            if x == best:
                break
            v = g(x)
            if v > best_val:
                best, best_val, delta = x, v, 2.0 * delta
            else:
                break
        # contraction, both sides
        while calls < self.evals and delta > 1e-12 * max(1.0, abs(best)):
            delta *= 0.5
            for x in (self._clip(best + delta), self._clip(best - delta)):
                if x != best and g(x) > best_val:
                    best, best_val = x, cache[x][0]
                    break
        return to_like(cache[best][1], token, dtype), best, best_val

    def _clip(self, s: float) -> float:
        s = max(float(s), self.low)
        return s if self.high is None else min(s, self.high)


#: the names these had before issue #24 (deprecated; each read warns once with the new name)
__getattr__ = module_aliases(__name__, {"Gaussian": ("GaussianNoise (fedaudit.mechanisms.Gaussian is the mechanism)", lambda: GaussianNoise)})
