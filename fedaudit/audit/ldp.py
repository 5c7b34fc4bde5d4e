"""Certified lower bounds on the local-DP ε of a randomizer, white box or black box.

The game (Ding et al. 2018; Jagielski et al. 2020): draw N reports of M(x0) and N of M(x1).
A distinguisher (:mod:`fedaudit.attacks.inference`) maps a report to a score s; an event is
E = {s ≥ t} or {s ≤ t} with a "positive" input a ∈ {x0, x1}. Any ε-LDP (or (ε,δ)) randomizer
satisfies P[M(a) ∈ E] ≤ e^ε P[M(b) ∈ E] + δ, so Clopper–Pearson bounds on the two rates
certify ε ≥ log((TPR_lb − δ)/FPR_ub) (:mod:`fedaudit.audit.bounds`).

Three disjoint splits make the stated confidence family-wise with no multiplicity loss:
1. **train** — black-box distinguishers are fitted (classifier, column ranking, counts);
2. **select** — every statistic × threshold × orientation × positive input is scored by the
   bound the certification split would give at rates estimated here; the best one is kept.
   For the exact likelihood ratio L (white box) both rates of an event come from *all* its
   pooled hits by importance weighting (the weight of a report is a function of its L), so an
   event that is rare under one input is measured from its hits under the other and is not
   undervalued (:func:`_weighted_rates`); L needs no training, so it also selects on the
   training draws. Fitted (black-box) statistics are scored at the pessimistic
   Clopper–Pearson ends of their directly counted rates (:func:`_selection_score`), which
   keeps noisy few-count tail thresholds from winning by chance;
3. **certify** — fresh draws; exactly one event is evaluated, one bound at level 1 − α.
Since the event is fixed before the certification draws, P[ε_lb > ε_true] ≤ α.

Sampling is streamed in blocks of reports, each from its own child of
``SeedSequence(seed)`` — the block size depends only on the report width — so memory stays
bounded (selection scores and a capped training set live in memory; certification keeps
counters only) and results do not depend on ``chunk``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from fedaudit.attacks.inference import LikelihoodRatio, Statistic, fit_black_box
from fedaudit.audit.bounds import (
    cp_lower,
    cp_upper,
    epsilon_lower_bound,
    MAX_SAMPLES,
    gdp_mu_estimate,
    max_certifiable_epsilon,
)
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_positive, check_probability, check_real, check_vector
from fedaudit.json import jsonable
from fedaudit.mechanisms.base import Mechanism
from fedaudit.rng import as_seed_sequence

__all__ = ["LDPAudit", "audit_ldp", "Sampler", "BLACK_BOX_FAMILIES", "TESTS"]

Sampler = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]
ProgressFn = Callable[[int], None]

BLACK_BOX_FAMILIES = ("column", "projection", "classifier", "frequency")
TESTS = ("auto", "likelihood-ratio", "black-box") + BLACK_BOX_FAMILIES

#: bytes of reports per seeded block (per input); the block size in reports follows from the width
_BLOCK_BYTES = 8 * 2**20
#: cap on the selection split per input (train + select), and on stored training bytes
_MAX_SELECTION = 200_000
_TRAIN_BYTES = 32 * 2**20


@dataclass(frozen=True)
class LDPAudit:
    """Result of :func:`audit_ldp`. ``epsilon_lower`` is certified at ``confidence``;
    ``gdp_mu`` is an estimate (Gaussian-shape assumption), never a bound."""

    epsilon_lower: float
    epsilon_claimed: float | None
    delta_claimed: float
    violation: bool
    epsilon_exact: float | None
    tpr: float
    fpr: float
    test: str
    samples: int
    seed: int | None
    confidence: float
    tightness: float | None
    event: dict[str, Any]
    candidates: list[dict[str, Any]]
    gdp_mu: float | None
    max_certifiable: float
    selection_samples: int
    certification_samples: int
    runtime_s: float
    sampling_s: float
    mechanism: dict[str, Any] | None = None
    x0: list[float] | None = field(default=None, repr=False)
    x1: list[float] | None = field(default=None, repr=False)
    search: dict[str, Any] | None = field(default=None, repr=False)
    #: ε_exact(pair)/ε_claimed: the most of the claim this pair can show (None when unknown)
    pair_power: float | None = None
    #: plain sentences on what the result does and does not show (e.g. a low-power pair)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return jsonable(asdict(self))  # ±inf anywhere (ε, event threshold of an LR test) -> "inf"/"-inf"


#: below this pair power a PASS is flagged in ``notes`` as saying little about the claim
LOW_PAIR_POWER = 0.5


def _pair_power(eps_exact: float | None, eps_claim: float | None) -> float | None:
    """ε_exact/ε_claimed (``inf`` for a pair of infinite loss), None when either is unknown."""
    if eps_exact is None or not eps_claim:
        return None
    return float(eps_exact) / float(eps_claim)


def _notes(eps_exact: float | None, eps_claim: float | None, power: float | None, violation: bool,
           max_cert: float, searched: bool) -> list[str]:
    """The sentences of ``LDPAudit.notes``: a low-power pair, a claim beyond what the sample
    size can certify, a pair whose exact loss already exceeds the claim."""
    out = []
    if eps_claim and max_cert <= eps_claim and not violation:
        out.append(f"with these samples no audit can certify more than ε = {max_cert:.3g}, not above the "
                   f"claimed {eps_claim:g}: a violation could not have been detected; draw more samples")
    if power is not None and eps_exact is not None:
        if power < LOW_PAIR_POWER and not violation:
            hint = ("the search found no stronger pair; a PASS here says little" if searched
                    else "a PASS here says little; try --pair search")
            out.append(f"this pair's exact ε is {eps_exact:.3g}, {power:.0%} of the claimed {eps_claim:g}: {hint}")
        elif power > 1.0 + 1e-9:
            out.append(f"this pair's exact ε is {eps_exact:.3g}, above the claimed {eps_claim:g}: "
                       f"the mechanism does not meet the claim"
                       + ("" if violation else " (this audit's samples did not certify it)"))
    return out


# --------------------------------------------------------------------------- sources
class _Source:
    """Uniform access to a Mechanism or a black-box sampler, with output validation."""

    def __init__(self, target: Mechanism | Sampler, dim: int | None):
        self.mechanism = target if isinstance(target, Mechanism) else None
        if self.mechanism is None and not callable(target):
            raise FedAuditError("mechanism must be a fedaudit Mechanism or a callable sampler(x, size, rng)")
        self.fn = target.sample if self.mechanism is not None else target
        self.dim = self.mechanism.dim if self.mechanism is not None else dim
        self.seconds = 0.0
        self.width: int | None = self.mechanism.report_width if self.mechanism is not None else None

    def draw(self, x: np.ndarray, size: int, rng: np.random.Generator, which: str) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            out = self.fn(x, size, rng)
        except FedAuditError as exc:  # e.g. a Mechanism rejecting x: say which input
            raise FedAuditError(f"{exc} (input {which})") from None
        except Exception as exc:  # a user's sampler failing deep inside
            raise FedAuditError(f"sampler failed on input {which}: {type(exc).__name__}: {exc}") from exc
        self.seconds += time.perf_counter() - t0
        try:
            out = np.asarray(out.detach().cpu().numpy() if hasattr(out, "detach") else out, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise FedAuditError(f"sampler returned {type(out).__name__}, not an array of real numbers "
                                f"(input {which}): {exc}") from None
        if out.ndim == 0:
            raise FedAuditError(f"sampler returned a scalar, expected an array of {size} rows (input {which})")
        if out.shape[0] != size:
            raise FedAuditError(f"sampler returned {out.shape[0]} rows for size={size} (input {which})")
        if out.ndim == 1:
            out = out[:, None]
        if out.ndim != 2:
            out = out.reshape(out.shape[0], -1)
        if out.shape[1] == 0:
            raise FedAuditError(f"sampler returned empty reports (0 columns) (input {which})")
        if self.width is not None and out.shape[1] != self.width:
            raise FedAuditError(f"sampler returned reports of width {out.shape[1]}, expected {self.width} (input {which})")
        if not np.isfinite(out).all():
            i, j = np.argwhere(~np.isfinite(out))[0]
            raise FedAuditError(f"sampler returned a non-finite value {out[i, j]} for input {which} "
                                f"(row {i}, column {j})")
        return out


def _blocks(total: int, block: int) -> list[int]:
    sizes = [block] * (total // block)
    if total % block:
        sizes.append(total % block)
    return sizes


def _stream(source: _Source, x: np.ndarray, total: int, block: int, seq: np.random.SeedSequence,
            chunk_blocks: int, which: str, progress: ProgressFn | None):
    """Yield arrays of whole seeded blocks (chunk_blocks at a time)."""
    sizes = _blocks(total, block)
    children = seq.spawn(len(sizes))
    for start in range(0, len(sizes), chunk_blocks):
        parts = [source.draw(x, n, np.random.default_rng(c), which)
                 for n, c in zip(sizes[start:start + chunk_blocks], children[start:start + chunk_blocks])]
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if progress is not None:
            progress(len(out))
        yield out


# --------------------------------------------------------------------------- selection
@dataclass(frozen=True)
class _Event:
    statistic: Statistic
    upper: bool  # E = {s >= t} if True else {s <= t}
    threshold: float
    positive: int  # 0: TPR is measured on x0, 1: on x1
    projected: float

    def hits(self, s: np.ndarray) -> np.ndarray:
        return s >= self.threshold if self.upper else s <= self.threshold


def _thresholds(s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
    pooled = np.concatenate([s0, s1])
    uniq = np.unique(pooled)
    if len(uniq) <= 4096:
        return uniq
    tail = np.geomspace(1e-6, 0.02, 120)
    q = np.unique(np.concatenate([np.linspace(0, 1, 2049), tail, 1 - tail]))
    return np.unique(np.concatenate([np.quantile(pooled, q), [s0.min(), s0.max(), s1.min(), s1.max()]]))


def _best_event(stat: Statistic, s0: np.ndarray, s1: np.ndarray, n_cert: int, delta: float,
                alpha: float) -> _Event:
    """Maximise the projected bound over thresholds, orientation and positive input: by
    :func:`_weighted_rates` for the exact likelihood ratio, by :func:`_selection_score` otherwise."""
    t = _thresholds(s0, s1)
    if stat.family == "likelihood-ratio":
        return _best_lr_event(stat, s0, s1, t, n_cert, delta, alpha)
    a, b = np.sort(s0), np.sort(s1)
    n0, n1 = len(a), len(b)
    ge0 = n0 - np.searchsorted(a, t, side="left")
    ge1 = n1 - np.searchsorted(b, t, side="left")
    le0 = np.searchsorted(a, t, side="right")
    le1 = np.searchsorted(b, t, side="right")
    best = None
    for upper, c0, c1 in ((True, ge0, ge1), (False, le0, le1)):
        for positive, tp, fp in ((0, c0, c1), (1, c1, c0)):
            n_tp, n_fp = (n0, n1) if positive == 0 else (n1, n0)
            idx = _promising(tp, n_tp, fp, n_fp, delta, alpha)
            score = _selection_score(tp[idx], n_tp, fp[idx], n_fp, delta, alpha, n_cert)
            i = int(np.argmax(score))
            if best is None or score[i] > best.projected:
                best = _Event(stat, upper, float(t[idx[i]]), positive, float(score[i]))
    return best


def _weighted_rates(s0: np.ndarray, s1: np.ndarray, t: np.ndarray, alpha: float):
    """Both inputs' rates of {L ≥ t} and {L ≤ t} from the pooled draws, for the exact privacy
    loss L = log p(r|x0) − log p(r|x1).

    Balance-heuristic importance sampling (Veach & Guibas 1995; Owen 2013, §9.12): with the
    pooled sample from the mixture m = π0·P0 + π1·P1 (π_i = n_i/(n0 + n1)), the weights
    w0 = p0/m = 1/(π0 + π1·e^{−L}) and w1 = p1/m = 1/(π0·e^{L} + π1) give unbiased estimates
    P̂_i[E] = Σ_{r∈E} w_i(r)/(n0 + n1) of both rates from *every* hit of E, whichever input drew
    it. An event rare under x1 is then estimated from its many x0 hits (its likelihood ratio is
    known exactly), not from the handful of x1 hits that direct counts would use — the rates'
    ratio carries no count noise beyond the event's composition. What remains uncertain is the
    event's mass: both rates are scaled by CP_lower(h, n0 + n1, α/2)/(h/(n0 + n1)) for the h
    pooled hits, so a rare event is not preferred because chance gave it a few extra hits.
    Returns (ge0, ge1, le0, le1) rates, each (len(t),).
    """
    s = np.concatenate([s0, s1])
    order = np.argsort(s, kind="stable")
    s = s[order]
    total = len(s)
    pi0, pi1 = len(s0) / total, len(s1) / total
    with np.errstate(over="ignore"):
        w0 = 1.0 / (pi0 + pi1 * np.exp(-s))
        w1 = 1.0 / (pi0 * np.exp(s) + pi1)
    c0 = np.concatenate([[0.0], np.cumsum(w0)])  # c[i] = sum of the i smallest scores' weights
    c1 = np.concatenate([[0.0], np.cumsum(w1)])
    lo = np.searchsorted(s, t, side="left")  # count of s < t
    hi = np.searchsorted(s, t, side="right")  # count of s <= t
    out = []
    for h, r0, r1 in ((total - lo, c0[-1] - c0[lo], c1[-1] - c1[lo]), (hi, c0[hi], c1[hi])):
        with np.errstate(divide="ignore", invalid="ignore"):
            shrink = np.where(h > 0, cp_lower(h, total, alpha / 2) * total / np.maximum(h, 1), 0.0)
        out += [np.clip(r0 * shrink / total, 0.0, 1.0), np.clip(r1 * shrink / total, 0.0, 1.0)]
    return out


def _best_lr_event(stat: Statistic, s0: np.ndarray, s1: np.ndarray, t: np.ndarray, n_cert: int,
                   delta: float, alpha: float) -> _Event:
    """The event whose estimated rates (:func:`_weighted_rates`) certify the most at n_cert:
    the bound of the certification split evaluated at those rates (expected counts)."""
    ge0, ge1, le0, le1 = _weighted_rates(s0, s1, t, alpha)
    best = None
    for upper, r0, r1 in ((True, ge0, ge1), (False, le0, le1)):
        for positive, tpr, fpr in ((0, r0, r1), (1, r1, r0)):
            score = epsilon_lower_bound(tpr * n_cert, n_cert, fpr * n_cert, n_cert, delta=delta, alpha=alpha)
            i = int(np.argmax(score))
            if best is None or score[i] > best.projected:
                best = _Event(stat, upper, float(t[i]), positive, float(score[i]))
    return best


def _selection_score(tp, n_tp, fp, n_fp, delta, alpha, n_cert):
    """The bound the certification split would give if the rates sat at their pessimistic
    selection values: TPR at its Clopper–Pearson lower and FPR at its upper bound (α/2 each),
    projected to n_cert draws. Noisy few-count tail events are penalised twice (winner's curse),
    while events that only certify well at the larger n_cert are still preferred."""
    tpr = cp_lower(tp, n_tp, alpha / 2)
    fpr = cp_upper(fp, n_fp, alpha / 2)
    return epsilon_lower_bound(tpr * n_cert, n_cert, fpr * n_cert, n_cert, delta=delta, alpha=alpha)


def _promising(tp: np.ndarray, n_tp: int, fp: np.ndarray, n_fp: int, delta: float, alpha: float,
               keep: int = 64) -> np.ndarray:
    """Indices of the ``keep`` events with the best Wilson-score approximation of the bound
    (exact Clopper–Pearson is then computed only for these)."""
    if len(tp) <= keep:
        return np.arange(len(tp))
    from scipy.stats import norm

    z = norm.isf(alpha / 2)

    def wilson(k, n, sign):
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return centre + sign * half

    num = wilson(tp, n_tp, -1.0) - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        approx = np.where(num > 0, np.log(np.maximum(num, 1e-300) / wilson(fp, n_fp, 1.0)), -np.inf)
    return np.argsort(-approx, kind="stable")[:keep]


# --------------------------------------------------------------------------- API
def _families(test: str, has_lr: bool) -> tuple[bool, tuple[str, ...]]:
    names = [p.strip().lower() for p in str(test).split(",") if p.strip()]
    if not names or any(n not in TESTS and n != "lr" for n in names):
        raise FedAuditError(f"test must be one of {', '.join(TESTS)} (comma-separated allowed), got test={test!r}")
    use_lr, fams = False, []
    for n in names:
        if n == "auto":
            use_lr = use_lr or has_lr
            fams += BLACK_BOX_FAMILIES
        elif n in ("likelihood-ratio", "lr"):
            if not has_lr:
                raise FedAuditError("test='likelihood-ratio' needs a Mechanism with a tractable log_prob")
            use_lr = True
        elif n == "black-box":
            fams += BLACK_BOX_FAMILIES
        else:
            fams.append(n)
    return use_lr, tuple(dict.fromkeys(fams))


def audit_ldp(mechanism: Mechanism | Sampler, x0: Any, x1: Any, *, epsilon: float | None = None,
              delta: float | None = None, samples: int = 1_000_000, confidence: float = 0.95,
              test: str = "auto", seed: int | None = 0, selection_fraction: float = 0.1,
              chunk: int | None = None, progress: ProgressFn | None = None) -> "LDPAudit":
    """Certify a lower bound on the LDP ε of ``mechanism`` from the pair (x0, x1).

    Parameters
    ----------
    mechanism : a :class:`~fedaudit.mechanisms.Mechanism`, or a black-box
        ``sampler(x, size, rng) -> (size, ...)`` array; then ``epsilon`` (the claim) is required.
    x0, x1 : the audited inputs (must differ).
    epsilon, delta : the claimed guarantee; default the mechanism's own (δ = 0 for samplers).
    samples : draws per input in total (selection + certification), in [100, 10^12].
    confidence : 1 − α for the certified bound.
    test : "auto" (likelihood ratio when ``log_prob`` exists, plus every black-box family),
        "likelihood-ratio", "black-box", or any of "column", "projection", "classifier",
        "frequency" (comma-separated).
    seed : root of all randomness (``SeedSequence(seed)``).
    selection_fraction : share of ``samples`` used to train and select (capped at 2·10^5).
    chunk : reports per processing step (rounded to whole seeded blocks); the result does
        not depend on it.
    progress : called with the number of reports drawn after each step.
    """
    t_start = time.perf_counter()
    if isinstance(mechanism, Mechanism):
        dim = mechanism.dim
        eps_claim = mechanism.epsilon if epsilon is None else check_positive("epsilon", epsilon)
        delta_claim = mechanism.delta if delta is None else check_real("delta", delta, low=0.0, high=1.0, open_high=True)
        if mechanism.delta > 0 and delta_claim == 0:
            # an approximate-DP mechanism (Gaussian) has no pure-DP claim to audit: say so, never
            # audit δ = 0 silently or substitute a default
            raise FedAuditError(f"delta must be in (0, 1) for {type(mechanism).__name__} (an approximate-DP "
                                f"mechanism with delta={mechanism.delta:g}), got delta=0")
    else:
        if epsilon is None:
            raise FedAuditError("epsilon (the claimed guarantee) is required when auditing a black-box sampler")
        eps_claim = check_positive("epsilon", epsilon)
        delta_claim = 0.0 if delta is None else check_real("delta", delta, low=0.0, high=1.0, open_high=True)
        dim = None
    x0 = check_vector("x0", x0, dim=dim)
    x1 = check_vector("x1", x1, dim=x0.shape[0])
    if np.array_equal(x0, x1):
        raise FedAuditError("x0 and x1 must differ: an audit of a pair of equal inputs certifies nothing")
    samples = check_int("samples", samples, low=100, high=MAX_SAMPLES, high_name="10^12")
    confidence = check_probability("confidence", confidence)
    selection_fraction = check_probability("selection_fraction", selection_fraction)
    alpha = 1.0 - confidence
    source = _Source(mechanism, dim=x0.shape[0])

    root = as_seed_sequence(seed)
    probe_seq, train_seq, select_seq, cert_seq = root.spawn(4)
    if source.width is None:
        source.width = source.draw(x0, 2, np.random.default_rng(probe_seq), "x0").shape[1]
    block = max(1, min(8192, _BLOCK_BYTES // (8 * source.width)))
    chunk_blocks = 1 if chunk is None else max(1, check_int("chunk", chunk, low=1) // block)

    n_sel = min(_MAX_SELECTION, max(int(round(selection_fraction * samples)), min(2000, samples // 2)))
    n_train = n_sel // 2
    n_select = n_sel - n_train
    n_cert = samples - n_sel

    halves = {name: seq.spawn(2) for name, seq in (("train", train_seq), ("select", select_seq), ("cert", cert_seq))}

    def collect(name, total, cap_rows):
        out = []
        for w, x in ((0, x0), (1, x1)):
            rows, kept = [], 0
            for part in _stream(source, x, total, block, halves[name][w], chunk_blocks, f"x{w}", progress):
                if kept < cap_rows:
                    rows.append(part[: cap_rows - kept])
                    kept += len(rows[-1])
            out.append(np.concatenate(rows))
        return out

    # 1. train
    train0, train1 = collect("train", n_train, max(1000, _TRAIN_BYTES // (8 * source.width)))
    has_lr = source.mechanism is not None and _has_log_prob(source.mechanism, train0[:1], x0)
    use_lr, families = _families(test, has_lr)
    stats: list[Statistic] = [LikelihoodRatio(source.mechanism, x0, x1)] if use_lr else []
    decode = source.mechanism.decode if source.mechanism is not None else None
    # the exact likelihood ratio is not fitted, so it also selects on the (kept) training draws
    lr_train = [[stats[0](train0)], [stats[0](train1)]] if use_lr else None
    stats += fit_black_box(train0, train1, x0=x0, x1=x1, decode=decode, families=families,
                           seed=int(root.generate_state(1)[0]))
    del train0, train1
    if not stats:
        raise FedAuditError(f"no distinguisher applies for test={test!r} to reports of width {source.width}")

    # 2. select
    scores: list[list[list[np.ndarray]]] = [[[] for _ in stats] for _ in range(2)]
    if lr_train is not None:
        scores[0][0], scores[1][0] = lr_train
    for w, x in ((0, x0), (1, x1)):
        for part in _stream(source, x, n_select, block, halves["select"][w], chunk_blocks, f"x{w}", progress):
            for i, st in enumerate(stats):
                scores[w][i].append(st(part))
    events = [_best_event(st, np.concatenate(scores[0][i]), np.concatenate(scores[1][i]), n_cert, delta_claim, alpha)
              for i, st in enumerate(stats)]
    del scores
    events.sort(key=lambda e: -e.projected)
    chosen = events[0]

    # 3. certify
    hits = [0, 0]
    for w, x in ((0, x0), (1, x1)):
        for part in _stream(source, x, n_cert, block, halves["cert"][w], chunk_blocks, f"x{w}", progress):
            hits[w] += int(np.count_nonzero(chosen.hits(chosen.statistic(part))))
    tp, fp = hits[chosen.positive], hits[1 - chosen.positive]
    eps_lb = float(epsilon_lower_bound(tp, n_cert, fp, n_cert, delta=delta_claim, alpha=alpha))
    tpr, fpr = tp / n_cert, fp / n_cert

    eps_exact = None
    if source.mechanism is not None:
        pair = getattr(source.mechanism, "epsilon_for_pair", None)
        eps_exact = pair(x0, x1) if pair is not None else None
    runtime = time.perf_counter() - t_start
    mech = source.mechanism
    eps_exact = None if eps_exact is None else float(eps_exact)
    violation = eps_claim is not None and eps_lb > eps_claim
    power = _pair_power(eps_exact, eps_claim)
    max_cert = max_certifiable_epsilon(n_cert, delta=delta_claim, alpha=alpha)
    return LDPAudit(
        epsilon_lower=eps_lb,
        epsilon_claimed=eps_claim,
        delta_claimed=delta_claim,
        violation=violation,
        epsilon_exact=eps_exact,
        tpr=tpr,
        fpr=fpr,
        test=chosen.statistic.name,
        samples=samples,
        seed=int(seed) if isinstance(seed, (int, np.integer)) else None,
        confidence=confidence,
        tightness=(eps_lb / eps_claim) if eps_claim else None,
        event={
            "statistic": chosen.statistic.name,
            "family": chosen.statistic.family,
            "event": f"s {'>=' if chosen.upper else '<='} {chosen.threshold:.6g}",
            "threshold": chosen.threshold,
            "positive_input": f"x{chosen.positive}",
            "tp": tp, "fp": fp, "n": n_cert,
            "tpr_lower": float(cp_lower(tp, n_cert, alpha / 2)),
            "fpr_upper": float(cp_upper(fp, n_cert, alpha / 2)),
            "event_mass": max(tpr, fpr),
            "selection": "train/select/certify splits; one event certified (no multiplicity correction needed)",
        },
        candidates=[{"statistic": e.statistic.name, "family": e.statistic.family,
                     "selection_score": e.projected} for e in events],
        gdp_mu=gdp_mu_estimate(tpr, fpr) if tp > 0 and fp < n_cert else None,
        max_certifiable=max_cert,
        selection_samples=n_sel,
        certification_samples=n_cert,
        runtime_s=runtime,
        sampling_s=source.seconds,
        mechanism=mech.to_dict() if mech is not None else {"mechanism": "black-box sampler"},
        x0=x0.tolist() if x0.size <= 4096 else None,
        x1=x1.tolist() if x1.size <= 4096 else None,
        pair_power=power,
        notes=_notes(eps_exact, eps_claim, power, violation, max_cert, searched=False),
    )


def _has_log_prob(mechanism: Mechanism, reports: np.ndarray, x: np.ndarray) -> bool:
    try:
        mechanism.log_prob(reports, x)
    except NotImplementedError:
        return False
    return True
