"""The contract of a local randomizer: :func:`check_mechanism`.

Every property is tested on a few input pairs of the mechanism's own domain (by default the
structured pairs the pair search starts from, :func:`fedaudit.audit.pair_search.structured_pairs`:
±clip·e1, ±clip·1/√d, 0 against the boundary, random antipodal directions; one-hot pairs for a
categorical mechanism) with a fixed seed, so a check passes or fails the same way on every run.
Statistical properties compare an estimate with its own standard error at a Bonferroni-corrected
level ``alpha`` over every number compared: a correct mechanism fails one with probability at
most ``alpha`` (for one seed, never again), a wrong one by more than a few standard errors fails.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy import stats

from fedaudit.mechanisms.base import Mechanism
from fedaudit.rng import spawn_generators
from fedaudit.testing.contract import Checks, ContractReport

__all__ = ["check_mechanism"]

#: relative slack of the exact-ε comparisons (float rounding of a closed form or an enumeration)
EPS_SLACK = 1e-9
#: a mechanism whose reports take at most this many distinct values gets a goodness-of-fit test
#: of ``exp(log_prob)`` against the sampled frequencies
MAX_CELLS = 64


def _pairs(m: Mechanism, inputs: Sequence[tuple[Any, Any]] | None, seed: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    if inputs is not None:
        return [(f"pair #{i + 1}", np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
                for i, (a, b) in enumerate(inputs)]
    from fedaudit.audit.pair_search import structured_pairs
    from fedaudit.mechanisms.base import has_categorical_inputs

    clip = float(getattr(m, "clip", 1.0))
    return structured_pairs(m.dim, clip, np.random.default_rng(seed), categorical=has_categorical_inputs(m))


def _z(alpha: float, comparisons: int) -> float:
    """Two-sided normal quantile of a Bonferroni share of ``alpha``."""
    return float(stats.norm.isf(alpha / (2 * max(1, comparisons))))


def _has_log_prob(m: Mechanism, reports: np.ndarray, x: np.ndarray) -> bool:
    try:
        m.log_prob(reports[:1], x)
    except NotImplementedError:
        return False
    return True


def check_mechanism(m: Mechanism, *, inputs: Sequence[tuple[Any, Any]] | None = None, samples: int = 20_000,
                    seed: int = 0, alpha: float = 1e-6) -> ContractReport:
    """Check that the randomizer ``m`` keeps the promises of :class:`~fedaudit.mechanisms.Mechanism`.

    Properties, in order (the first that fails raises :class:`~fedaudit.testing.ContractError`
    naming it):

    * **interface** — ``dim``, ``report_width``, ``bits_per_report`` are positive integers
      (bits ≥ 0) and ``guarantee`` a :class:`~fedaudit.guarantees.Guarantee` or None;
    * **strict JSON** — ``params()`` and ``to_dict()`` are strict JSON (:mod:`fedaudit.json`);
    * **shapes** — ``sample``/``encode`` give finite float64 ``(n, report_width)`` reports and
      ``decode`` ``(n, dim)`` estimates;
    * **determinism under a seed** — the same seed gives the same reports (``sample`` and
      ``encode``), a different seed other ones;
    * **unbiasedness** (unless ``decode_bias()`` is None) — on each input the mean decoded
      report is within ``decode_bias()`` plus z standard errors (its own) of the input;
    * **log_prob consistent with sampling** (when ``log_prob`` is implemented) — every sampled
      report has positive probability under its input; the likelihood ratio has mean 1 under
      sampling, E_{r∼M(x0)}[p(r|x1)/p(r|x0)] = 1, in both directions (a log_prob off by an
      x-dependent term fails; a base measure that does not depend on x cancels, as it must);
      and with at most 64 distinct reports, a chi-square test of ``exp(log_prob)`` against the
      sampled frequencies;
    * **guarantee within the exact pair ε** — wherever ``epsilon_for_pair`` is computable it is
      at most the claimed ε, and (pure DP, ``log_prob`` implemented) no sampled report's privacy
      loss exceeds it or the claim; a mechanism with neither is audited
      (:func:`~fedaudit.audit.audit_ldp`) on each pair and must not be refuted. Skipped for a
      mechanism without a claim and for one kept ``as_published`` (its claim is known not to hold).

    ``inputs``: pairs (x0, x1) of the mechanism's input domain (default: the structured pairs of
    the pair search, see the module docstring); ``samples`` reports per input and property;
    ``seed`` fixes every draw; ``alpha`` is the false-alarm level of each statistical property.
    Returns a :class:`~fedaudit.testing.ContractReport`.
    """
    checks = Checks(f"mechanism {m!r}" if isinstance(m, Mechanism) else f"mechanism {type(m).__name__}")
    checks.require(isinstance(m, Mechanism), "interface", f"{type(m).__name__} is not a fedaudit Mechanism subclass")
    _interface(checks, m)
    checks.strict_json("params()", m.params())
    checks.strict_json("to_dict()", m.to_dict())
    pairs = _pairs(m, inputs, seed)
    checks.require(pairs, "interface", "no input pair to test")
    x0 = pairs[0][1]
    _shapes(checks, m, x0)
    _determinism(checks, m, x0, pairs[0][2], seed)
    draws = {}
    gens = iter(spawn_generators(seed, 2 * len(pairs)))
    with checks.step("shapes"):
        for i, (_, a, b) in enumerate(pairs):
            draws[i] = (m.sample(a, samples, rng=next(gens)), m.sample(b, samples, rng=next(gens)))
    _unbiasedness(checks, m, pairs, draws, alpha)
    has_log_prob = _has_log_prob(m, draws[0][0], x0)
    if has_log_prob:
        _log_prob(checks, m, pairs, draws, alpha)
    else:
        checks.skip("log_prob consistent with sampling", "log_prob is not implemented")
    _guarantee(checks, m, pairs, draws, has_log_prob, samples, seed)
    return checks.report()


def _interface(checks: Checks, m: Mechanism) -> None:
    from fedaudit.guarantees import Guarantee

    with checks.step("interface"):
        for attr in ("dim", "report_width"):
            value = getattr(m, attr, None)
            checks.require(isinstance(value, int) and not isinstance(value, bool) and value >= 1, "interface",
                           f"{attr} must be a positive int, got {value!r}")
        bits = m.bits_per_report
        checks.require(isinstance(bits, int) and bits >= 0, "interface",
                       f"bits_per_report must be a non-negative int, got {bits!r}")
        checks.require(m.guarantee is None or isinstance(m.guarantee, Guarantee), "interface",
                       f"guarantee must be a fedaudit Guarantee or None, got {m.guarantee!r}")
        bias = m.decode_bias()
        checks.require(bias is None or (isinstance(bias, (int, float)) and 0 <= bias < math.inf), "interface",
                       f"decode_bias() must be a finite number >= 0 or None, got {bias!r}")


def _shapes(checks: Checks, m: Mechanism, x: np.ndarray) -> None:
    with checks.step("shapes"):
        for what, reports in (("sample(x, 5)", m.sample(x, 5, rng=0)), ("encode(X)", m.encode(np.stack([x] * 3), rng=0))):
            checks.require(isinstance(reports, np.ndarray) and reports.dtype == np.float64, "shapes",
                           f"{what} must be a float64 numpy array, got {type(reports).__name__} "
                           f"{getattr(reports, 'dtype', '')}")
            checks.require(reports.ndim == 2 and reports.shape[1] == m.report_width, "shapes",
                           f"{what} has shape {reports.shape}, want (n, report_width={m.report_width})")
            checks.require(np.isfinite(reports).all(), "shapes", f"{what} holds non-finite values")
            decoded = m.decode(reports)
            checks.require(np.shape(decoded) == (reports.shape[0], m.dim), "shapes",
                           f"decode of {what} has shape {np.shape(decoded)}, want ({reports.shape[0]}, dim={m.dim})")


def _determinism(checks: Checks, m: Mechanism, x0: np.ndarray, x1: np.ndarray, seed: int) -> None:
    with checks.step("determinism under a seed"):
        X = np.stack([x0, x1, x0])
        for what, draw in (("sample", lambda s: m.sample(x0, 64, rng=s)), ("encode", lambda s: m.encode(X, rng=s))):
            a, b, c = draw(seed), draw(seed), draw(seed + 1)
            checks.require(np.array_equal(a, b), "determinism under a seed",
                           f"{what} with the same seed gave different reports (randomness not drawn from rng)")
            if m.guarantee is not None:  # a randomizer that claims privacy must draw something
                checks.require(not np.array_equal(a, c), "determinism under a seed",
                               f"{what} with seeds {seed} and {seed + 1} gave the same reports")


def _unbiasedness(checks: Checks, m: Mechanism, pairs, draws, alpha: float) -> None:
    prop = "unbiasedness"
    bias = m.decode_bias()
    if bias is None:
        checks.skip(prop, "decode_bias() is None: the mechanism claims no unbiasedness")
        return
    z = _z(alpha, 2 * len(pairs) * m.dim)
    with checks.step(prop):
        for i, (label, a, b) in enumerate(pairs):
            for which, x, R in (("x0", a, draws[i][0]), ("x1", b, draws[i][1])):
                D = m.decode(R)
                mean = D.mean(axis=0)
                se = D.std(axis=0, ddof=1) / math.sqrt(D.shape[0])
                err = np.abs(mean - x)
                slack = bias + z * se + 1e-12 * (1.0 + np.abs(x))
                j = int(np.argmax(err - slack))
                checks.require(err[j] <= slack[j], prop,
                               f"on {which} of {label}, coordinate {j}: mean decoded {mean[j]:.6g} vs input {x[j]:.6g} "
                               f"(|error| {err[j]:.3g} > decode_bias {bias:.3g} + {z:.2f} standard errors "
                               f"{se[j]:.3g})")


def _log_prob(checks: Checks, m: Mechanism, pairs, draws, alpha: float) -> None:
    prop = "log_prob consistent with sampling"
    z = _z(alpha, 2 * len(pairs) + 1)
    with checks.step(prop):
        for i, (label, a, b) in enumerate(pairs):
            for which, x, y, R in (("x0", a, b, draws[i][0]), ("x1", b, a, draws[i][1])):
                own = np.asarray(m.log_prob(R, x), dtype=np.float64)
                checks.require(own.shape == (R.shape[0],), prop,
                               f"log_prob returned shape {own.shape} for {R.shape[0]} reports")
                if not np.all(own > -np.inf):  # -inf or NaN: the report could not have been drawn
                    checks.fail(prop, f"a report sampled from {which} of {label} has log_prob "
                                      f"{own[~(own > -np.inf)][0]} under {which}")
                with np.errstate(over="ignore", invalid="ignore"):
                    w = np.exp(np.asarray(m.log_prob(R, y), dtype=np.float64) - own)
                mean, se = float(w.mean()), float(w.std(ddof=1) / math.sqrt(w.size))
                # E[w] = P_y(supp p_x): exactly 1 when supports agree, below 1 otherwise
                low = 1.0 if np.all(w > 0) else -np.inf
                checks.require(low - z * se - 1e-9 <= mean <= 1.0 + z * se + 1e-9, prop,
                               f"on {which} of {label}, the mean likelihood ratio p(r|other)/p(r|{which}) over "
                               f"reports r drawn from {which} is {mean:.6g} ± {se:.3g}, not 1")
        _goodness_of_fit(checks, m, pairs[0][1], draws[0][0], alpha, prop)


def _goodness_of_fit(checks: Checks, m: Mechanism, x: np.ndarray, R: np.ndarray, alpha: float, prop: str) -> None:
    """Chi-square test of the sampled frequencies of a few-valued report against exp(log_prob);
    the probability log_prob leaves to reports never drawn forms one more cell."""
    cells, counts = np.unique(R, axis=0, return_counts=True)
    if cells.shape[0] > MAX_CELLS:
        return
    p = np.exp(np.asarray(m.log_prob(cells, x), dtype=np.float64))
    total = float(p.sum())
    checks.require(total <= 1.0 + 1e-9, prop, f"exp(log_prob) of the {cells.shape[0]} distinct reports of x sums to "
                                              f"{total:.9g} > 1 (log_prob is not a log-pmf)")
    n = R.shape[0]
    expected = np.append(n * p, n * max(0.0, 1.0 - total))
    observed = np.append(counts, 0)
    keep = expected > 0
    stat = float(np.sum((observed[keep] - expected[keep]) ** 2 / expected[keep]))
    pvalue = float(stats.chi2.sf(stat, max(1, int(keep.sum()) - 1)))
    checks.require(pvalue >= alpha, prop, f"the frequencies of the {cells.shape[0]} distinct reports of x do not follow "
                                          f"exp(log_prob) (chi-square {stat:.4g}, p = {pvalue:.3g} < {alpha:g})")


def _guarantee(checks: Checks, m: Mechanism, pairs, draws, has_log_prob: bool, samples: int, seed: int) -> None:
    prop = "guarantee within the exact pair ε"
    claim = m.epsilon
    if claim is None:
        checks.skip(prop, "the mechanism claims no guarantee")
        return
    if getattr(m, "as_published", False):
        checks.skip(prop, "kept as published: its claim is known not to hold")
        return
    bound = claim * (1 + EPS_SLACK) + 1e-12
    exact_any = False
    with checks.step(prop):
        for i, (label, a, b) in enumerate(pairs):
            exact = m.epsilon_for_pair(a, b)
            if exact is not None:
                exact_any = True
                checks.require(exact <= bound, prop, f"the exact ε of {label} is {exact:.6g} > the claimed ε = {claim:g}")
            if not has_log_prob or m.delta > 0:
                continue
            exact_any = True
            loss = np.concatenate([m.privacy_loss(draws[i][0], a, b), m.privacy_loss(draws[i][1], a, b)])
            worst = float(np.max(np.abs(loss)))
            checks.require(worst <= bound, prop, f"a sampled report of {label} has privacy loss {worst:.6g} > the "
                                                 f"claimed ε = {claim:g}")
            if exact is not None:
                checks.require(worst <= exact * (1 + EPS_SLACK) + 1e-12, prop,
                               f"a sampled report of {label} has privacy loss {worst:.6g} > epsilon_for_pair = "
                               f"{exact:.6g} (the exact pair ε understates the loss log_prob gives)")
        if not exact_any:
            from fedaudit.audit.ldp import audit_ldp

            for label, a, b in pairs[:2]:
                res = audit_ldp(m, a, b, samples=samples, seed=seed, backend="serial")
                checks.require(not res.violation, prop,
                               f"an audit of {label} certifies ε ≥ {res.epsilon_lower:.4g} > the claimed ε = {claim:g}")
