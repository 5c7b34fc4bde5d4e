"""Inexact-oracle checker: measure (ζ², α) along a training run and compare with κ·(G², B²).

The reduction of Gaucher, Dieuleveut & Hendrikx (arXiv 2602.03329) says that an (f, κ)-robust
aggregate g_k of honest gradients that are (G, B)-heterogeneous,

    (1/|H|) Σ_{i∈H} ‖∇L_i(x) − ∇L_H(x)‖² ≤ G² + B²‖∇L_H(x)‖²,

is an inexact gradient oracle

    e_k := ‖g_k − ∇L_H(x_k)‖² ≤ ζ² + α·s_k,   s_k := ‖∇L_H(x_k)‖²,   ζ² = κG², α = κB².

From a :class:`~fedaudit.fl.training.Trace` we fit the *tightest envelope* of the
points (s_k, e_k): the line c + a·s with c, a ≥ 0 lying above every point that minimises
c + a·mean(s) (its mean height over the observed s) — a two-variable LP solved by
``scipy.optimize.linprog`` (HiGHS) after rescaling both axes to [0, 1]. The same fit on the
honest heterogeneity (mean_sq_dev_k vs grad_norm_sq_k) gives (Ĝ², B̂²). A non-negative least
squares fit is reported too (a typical, not worst-case, level).

The verdict is pointwise. The two envelopes are fitted independently and neither is unique
(along a run a larger intercept buys a smaller slope), so comparing them component-wise —
ζ̂² against κĜ², α̂ against κB̂² — can fail while the theory's statement holds at every round
(or pass while it fails). The statement is the definition of (f, κ)-robustness applied to
the honest gradients at each query point,

    e_k ≤ κ·dev_k,   dev_k := (1/|H|) Σ_{i∈H} ‖∇L_i(x_k) − ∇L_H(x_k)‖²,

which implies the envelope form for every (G², B²) valid along the run. ``holds`` /
``pointwise_ok`` is that check (``n_violations`` rounds fail it); ν̂_run = max_k e_k/dev_k is an
empirical lower bound on the aggregator's κ *under this attack along this run*. The envelope
constants and κ·(Ĝ², B̂²) are descriptive figures only (plots, reports), never a verdict.

κ comes from :func:`fedaudit.defenses.kappa.kappa_upper_bound` (published, unverified
constants) when the aggregator spec, n and f are given, else from the ``nu`` passed in (e.g.
``audit_robustness(...).nu_empirical``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_real

__all__ = ["OracleFit", "fit_envelope", "fit_least_squares", "fit_oracle"]


@dataclass(frozen=True)
class OracleFit:
    """Measured inexact-oracle constants along one run and their theoretical counterparts."""

    zeta2: float                 # LP envelope intercept ζ̂² (descriptive, like every envelope figure)
    alpha: float                 # LP envelope slope α̂
    zeta2_ls: float              # least-squares intercept (non-negative)
    alpha_ls: float              # least-squares slope (non-negative)
    G2: float | None             # heterogeneity envelope intercept Ĝ² (None without heterogeneity data)
    B2: float | None
    G2_ls: float | None
    B2_ls: float | None
    kappa: float | None          # κ used for the comparison
    kappa_source: str            # "kappa_upper_bound(<rule>, n, f)", "nu (given)" or "none"
    zeta2_bound: float | None    # κ·Ĝ² (descriptive)
    alpha_bound: float | None    # κ·B̂² (descriptive)
    pointwise_ok: bool | None    # the verdict: e_k ≤ κ·dev_k for every k
    n_violations: int | None     # rounds with e_k > κ·dev_k
    nu_run: float | None         # max_k e_k / dev_k
    n_points: int
    s: list[float] = field(repr=False, default_factory=list)
    e: list[float] = field(repr=False, default_factory=list)
    dev: list[float] = field(repr=False, default_factory=list)
    het_s: list[float] = field(repr=False, default_factory=list)
    optimizer: str = ""

    @property
    def holds(self) -> bool | None:
        """The verdict: e_k ≤ κ·dev_k at every recorded round (None without κ or heterogeneity)."""
        return self.pointwise_ok

    def to_dict(self, include_points: bool = False) -> dict[str, Any]:
        from fedaudit.json import jsonable  # strict JSON at any depth (the point lists included)

        return jsonable({k: v for k, v in asdict(self).items() if include_points or k not in ("s", "e", "dev", "het_s")})


def _points(s: Any, e: Any, name_s: str = "s", name_e: str = "e") -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(s, dtype=np.float64)
    e = np.asarray(e, dtype=np.float64)
    if s.ndim != 1 or e.ndim != 1 or s.shape != e.shape or s.size < 1:
        raise FedAuditError(f"{name_s} and {name_e} must be 1-D arrays of equal non-zero length, "
                            f"got shapes {s.shape} and {e.shape}")
    if not (np.isfinite(s).all() and np.isfinite(e).all()):
        raise FedAuditError(f"{name_s} and {name_e} must be finite")
    if (s < 0).any() or (e < 0).any():
        raise FedAuditError(f"{name_s} and {name_e} are squared norms and must be >= 0")
    return s, e


def fit_envelope(s: Sequence[float], e: Sequence[float]) -> tuple[float, float]:
    """Tightest line above the points: min c + a·mean(s) s.t. c + a·s_k ≥ e_k, c, a ≥ 0.

    Returns (c, a). Both axes are rescaled to max 1 before the LP (HiGHS) and the solution is
    mapped back and nudged up by the solver tolerance so every point is below the line.
    With a single distinct s value the slope is 0 and c = max(e).
    """
    from scipy.optimize import linprog

    s, e = _points(s, e)
    es = float(e.max())
    if es == 0.0:
        return 0.0, 0.0
    ss = float(s.max())
    if ss == 0.0 or np.ptp(s) == 0.0:
        return es, 0.0
    sn, en = s / ss, e / es
    res = linprog(c=[1.0, float(sn.mean())], A_ub=-np.column_stack([np.ones_like(sn), sn]), b_ub=-en,
                  bounds=[(0, None), (0, None)], method="highs")
    if res.status != 0:
        raise FedAuditError(f"envelope LP failed: {res.message}")
    cn, an = (float(v) for v in res.x)
    # make feasibility exact despite solver tolerance: raise the intercept by the worst violation
    viol = float(np.max(en - (cn + an * sn)))
    if viol > 0:
        cn += viol
    return cn * es, an * es / ss


def fit_least_squares(s: Sequence[float], e: Sequence[float]) -> tuple[float, float]:
    """Non-negative least squares e ≈ c + a·s (``scipy.optimize.nnls``), returns (c, a)."""
    from scipy.optimize import nnls

    s, e = _points(s, e)
    ss = float(s.max()) or 1.0
    es = float(e.max()) or 1.0
    sol, _ = nnls(np.column_stack([np.ones_like(s), s / ss]), e / es)
    return float(sol[0] * es), float(sol[1] * es / ss)


def fit_oracle(trace: Any, *, aggregator: str | None = None, n: int | None = None, f: int | None = None,
               nu: float | None = None, burn_in: int = 0) -> OracleFit:
    """Fit (ζ², α) and (G², B²) along ``trace`` and compare them through κ.

    ``trace`` is a :class:`~fedaudit.fl.training.Trace` (or any object with
    ``oracle_err_sq``, ``grad_sq`` and optionally ``het_dev_sq``, ``het_grad_sq``).
    κ = ``kappa_upper_bound(aggregator, n, f).kappa`` when those are given and a bound is
    published, else ``nu``; with neither, no comparison is made. ``burn_in`` drops the first
    recorded points.
    """
    from fedaudit.defenses.kappa import kappa_upper_bound

    burn_in = check_int("burn_in", burn_in, low=0)
    e_all = list(getattr(trace, "oracle_err_sq", []))
    s_all = list(getattr(trace, "grad_sq", []))
    if len(e_all) - burn_in < 1:
        raise FedAuditError(f"trace has {len(e_all)} oracle records, need more than burn_in={burn_in}")
    s, e = _points(s_all[burn_in:], e_all[burn_in:], "grad_sq", "oracle_err_sq")
    zeta2, alpha = fit_envelope(s, e)
    zeta2_ls, alpha_ls = fit_least_squares(s, e)

    dev_all = list(getattr(trace, "het_dev_sq", []) or [])
    hs_all = list(getattr(trace, "het_grad_sq", []) or [])
    have_het = len(dev_all) == len(e_all) and len(dev_all) > 0
    G2 = B2 = G2_ls = B2_ls = None
    dev = hs = None
    if have_het:
        hs, dev = _points(hs_all[burn_in:], dev_all[burn_in:], "het_grad_sq", "het_dev_sq")
        G2, B2 = fit_envelope(hs, dev)
        G2_ls, B2_ls = fit_least_squares(hs, dev)

    kappa, source = None, "none"
    if aggregator is not None and n is not None and f is not None:
        bound = kappa_upper_bound(aggregator, n, f)
        if bound is not None and math.isfinite(bound.kappa):
            kappa, source = bound.kappa, f"kappa_upper_bound({bound.rule!r}, n={n}, f={f})"
    if kappa is None and nu is not None:
        kappa, source = check_real("nu", nu, low=0.0), "nu (given)"

    zeta2_bound = alpha_bound = None
    pointwise_ok = n_violations = None
    nu_run = None
    if have_het:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(dev > 0, e / dev, np.where(e > 0, np.inf, 0.0))
        nu_run = float(ratio.max())
    if kappa is not None and have_het:
        zeta2_bound, alpha_bound = kappa * G2, kappa * B2
        # relative slack 1e-9 and absolute 1e-12 for rounding in the squared norms
        n_violations = int(np.count_nonzero(e > kappa * dev * (1 + 1e-9) + 1e-12))
        pointwise_ok = n_violations == 0

    return OracleFit(zeta2=zeta2, alpha=alpha, zeta2_ls=zeta2_ls, alpha_ls=alpha_ls,
                     G2=G2, B2=B2, G2_ls=G2_ls, B2_ls=B2_ls, kappa=kappa, kappa_source=source,
                     zeta2_bound=zeta2_bound, alpha_bound=alpha_bound, pointwise_ok=pointwise_ok,
                     n_violations=n_violations, nu_run=nu_run,
                     n_points=int(s.size), s=s.tolist(), e=e.tolist(),
                     dev=[] if dev is None else dev.tolist(), het_s=[] if hs is None else hs.tolist(),
                     optimizer=str(getattr(trace, "optimizer", "")))
