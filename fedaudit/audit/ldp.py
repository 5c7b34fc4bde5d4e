"""Certified lower bounds on the local-DP ε of a randomizer, white box or black box.

The game (Ding et al. 2018; Jagielski et al. 2020): draw N reports of M(x0) and N of M(x1).
A distinguisher (:mod:`fedaudit.attacks.inference`) maps a report to a score s; an event is
E = {s ≥ t} or {s ≤ t} with a "positive" input a ∈ {x0, x1}. Any ε-LDP (or (ε,δ)) randomizer
satisfies P[M(a) ∈ E] ≤ e^ε P[M(b) ∈ E] + δ, so Clopper–Pearson bounds on the two rates
certify ε ≥ log((TPR_lb − δ)/FPR_ub) (:mod:`fedaudit.audit.bounds`).

:func:`audit_ldp` runs three stages, on three disjoint splits of seeded draws, which make the
stated confidence family-wise with no multiplicity loss:

1. **sampling** (:mod:`fedaudit.audit.sampling`) — reports of both inputs in seeded streaming
   blocks, a train, a select and a certify split;
2. **distinguishers** (:mod:`fedaudit.audit.distinguishers`) — black-box statistics are fitted
   on the train split; every statistic × threshold × orientation × positive input is scored on
   the select split by the bound the certification split would give, and the best event is
   kept. The exact likelihood ratio L (white box) needs no training, so it also selects on the
   training draws, and both rates of its events come from all pooled hits by importance
   weighting, so an event that is rare under one input is not undervalued; fitted statistics
   are scored at the pessimistic Clopper–Pearson ends of their counted rates, except the
   naive-Bayes family (:func:`fedaudit.attacks.inference.NaiveBayes`), a fitted estimate
   s = Σ_j ℓ̂_j(r_j) of the privacy loss — exact in form for products of per-coordinate
   randomizers. Its rates are importance-weighted as for L (weights 1/(π0 + π1·e^{−s}) and
   1/(π0·e^{s} + π1) of every pooled select-split hit), each clamped into the Clopper–Pearson
   interval (α/2) of the event's counted hits, so a score that overstates L cannot promote an
   event beyond what its counts allow;
3. **certification** — fresh draws; exactly one event is evaluated: the hit counts (the event
   indicators are a sufficient statistic) go to :class:`fedaudit.audit.scores.ScoreAuditor`,
   which certifies that one pre-registered event at level 1 − α.

Since the event is fixed before the certification draws, P[ε_lb > ε_true] ≤ α: nothing is
selected on the certification split, so no union bound over the candidate statistics,
thresholds, orientations and positive inputs is needed (selection may use any estimate, even a
wrong one; a bad choice costs power, never soundness). The splits: n_sel =
min(2·10^5, max(⌊selection_fraction·N⌉, min(2000, N/2))) per input, half train, half select,
certification N − n_sel. Memory stays
bounded (selection scores and a capped training set live in memory; certification keeps
counters only) and results do not depend on ``chunk``.

Every split runs on the engine (:func:`fedaudit.engine.run_chunks`): its seeded blocks are
grouped into chunks of ``chunk`` reports (default 2^20); a training chunk returns its reports
(only the blocks that reach the stored training cap are drawn), a selection chunk the scores of
every fitted statistic, a certification chunk — the bulk of the draws — its hit count, and the
results are reduced in chunk order (so an expensive sampler, e.g. one training run per report,
is drawn on the workers in every split). Block i of a stream is still drawn from the i-th child of its
``SeedSequence``, so ε_lb, the counts and every other number are bit-identical on ``serial``,
``process`` (any ``workers``) and ``ray``, and identical to the in-process audit. With
``checkpoint`` the finished chunks' counts are recorded as they complete; ``resume`` redoes the
(cheap, deterministic) selection stages and draws only the unfinished certification chunks.

The audited claim is the mechanism's typed :attr:`~fedaudit.mechanisms.Mechanism.guarantee`
(``epsilon``/``delta`` override its parts), read by type (:func:`fedaudit.guarantees.epsilon_delta`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from fedaudit.attacks.inference import LikelihoodRatio, Statistic, fit_black_box
from fedaudit.audit.bounds import MAX_SAMPLES, gdp_mu_estimate, max_certifiable_epsilon_at
from fedaudit.audit.distinguishers import BLACK_BOX_FAMILIES, TESTS, has_log_prob, parse_test, select_event
from fedaudit.audit.sampling import ProgressFn, ReportSource, Sampler, block_rows, block_sizes, draw_blocks
from fedaudit.audit.scores import BonferroniSelection, ScoreAuditor
from fedaudit.deprecation import renamed_keyword
from fedaudit.engine import check_run_options, run_chunks
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import ApproxLDP, Guarantee, epsilon_delta, make_guarantee
from fedaudit.json import dumps, jsonable
from fedaudit.mechanisms.base import Mechanism
from fedaudit.rng import as_seed_sequence
from fedaudit.validation import check_int, check_positive, check_probability, check_real, check_vector

__all__ = ["LDPAudit", "audit_ldp", "audit_ldp_streams", "audit_notes", "claimed_guarantee", "Sampler",
           "sample_splits", "min_certifying_samples", "BLACK_BOX_FAMILIES", "TESTS",
           "LOW_PAIR_POWER"]

#: cap on the selection split per input (train + select), and on stored training bytes
_MAX_SELECTION = 200_000
_TRAIN_BYTES = 32 * 2**20
#: reports per certification chunk (an engine task) when ``chunk`` is not given
CERT_CHUNK = 2**20


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


def audit_notes(eps_exact: float | None, eps_claim: float | None, power: float | None, violation: bool,
                max_cert: float, searched: bool) -> list[str]:
    """The sentences of ``LDPAudit.notes``: a low-power pair, a claim beyond what the sample
    size can certify, a pair whose exact loss already exceeds the claim (``searched``: the pair
    came from a pair search)."""
    out = []
    if eps_claim and max_cert <= eps_claim and not violation:
        out.append(f"with these samples no audit can certify more than ε = {max_cert:.3g}, not above the "
                   f"claimed {eps_claim:g}: a violation could not have been detected; draw more samples")
    if power is not None and eps_exact is not None:
        if power < LOW_PAIR_POWER and not violation:
            hint = ("the search found no stronger pair; a PASS here says little" if searched
                    else "a PASS here says little; try --pair search")
            out.append(f"this pair carries {power:.0%} of the claim (its exact ε {eps_exact:.3g} of the claimed "
                       f"{eps_claim:g}): {hint}")
        elif power > 1.0 + 1e-9:
            out.append(f"this pair's exact ε is {eps_exact:.3g}, above the claimed {eps_claim:g}: "
                       f"the mechanism does not meet the claim"
                       + ("" if violation else " (this audit's samples did not certify it)"))
    return out


def sample_splits(samples: int, selection_fraction: float = 0.1) -> tuple[int, int, int]:
    """How an audit of ``samples`` draws per input splits them (module docstring): ``(n_train,
    n_select, n_cert)`` with n_sel = n_train + n_select = min(2·10^5, max(⌊selection_fraction·N⌉,
    min(2000, N/2))) to fit and choose the distinguisher and n_cert = N − n_sel to certify."""
    n_sel = min(_MAX_SELECTION, max(int(round(selection_fraction * samples)), min(2000, samples // 2)))
    return n_sel // 2, n_sel - n_sel // 2, samples - n_sel


def min_certifying_samples(confidence: float = 0.95, delta: float = 0.0, selection_fraction: float = 0.1) -> int:
    """The fewest draws per input (at least 100, the audit's minimum) with which an audit at
    ``confidence`` (and the claim's ``delta``) can certify any ε > 0 at all: below it every
    certification draw coming out in the audit's favour (TP = n_cert, FP = 0) still certifies
    ε ≥ 0 only (:func:`~fedaudit.audit.bounds.max_certifiable_epsilon_at` is 0), so no result could
    say anything. 100 at the usual confidences (n_cert ≥ 6 certifies ε > 0 at 95 %); it grows as
    confidence nears 1 (1 − 10^-15 needs 101). None of the search's candidate audits is
    affected: this bounds the certification."""
    alpha = 1.0 - confidence

    def certifies(n: int) -> bool:
        return max_certifiable_epsilon_at(sample_splits(n, selection_fraction)[2], delta, alpha) > 0

    low, high = 100, MAX_SAMPLES  # n_cert grows with n: bisect the first n that certifies
    if certifies(low):
        return low
    if not certifies(high):
        raise FedAuditError(f"no sample size up to 10^12 certifies an ε > 0 at confidence {confidence!r} "
                            f"and δ = {delta!r}")
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if certifies(mid) else (mid, high)
    return high


# --------------------------------------------------------------------------- claim
def claimed_guarantee(mechanism: Mechanism | Sampler, epsilon: float | None,
                      delta: float | None) -> tuple[Guarantee | None, float]:
    """The audited claim and the δ its bound uses.

    A mechanism's own :attr:`~fedaudit.mechanisms.Mechanism.guarantee`, with ``epsilon`` and
    ``delta`` (when given) replacing its parts; for a black-box sampler ``epsilon`` is required
    and δ defaults to 0. An :class:`~fedaudit.guarantees.ApproxLDP` mechanism has no pure-DP
    claim to audit, so δ = 0 is refused, never substituted. Returns (claim or None for a
    mechanism that claims nothing, δ).
    """
    if isinstance(mechanism, Mechanism):
        own = mechanism.guarantee
        own_eps, own_delta = epsilon_delta(own)
    else:
        if epsilon is None:
            raise FedAuditError("epsilon (the claimed guarantee) is required when auditing a black-box sampler")
        own, own_eps, own_delta = None, None, 0.0
    eps = own_eps if epsilon is None else check_positive("epsilon", epsilon)
    delta = own_delta if delta is None else check_real("delta", delta, low=0.0, high=1.0, open_high=True)
    if isinstance(own, ApproxLDP) and delta == 0:
        raise FedAuditError(f"delta must be in (0, 1) for {type(mechanism).__name__} (an approximate-DP "
                            f"mechanism with delta={own.delta:g}), got delta=0")
    return make_guarantee(eps, delta), delta


# --------------------------------------------------------------------------- API
def audit_ldp(mechanism: Mechanism | Sampler, x0: Any, x1: Any, *, epsilon: float | None = None,
              delta: float | None = None, samples: int = 1_000_000, confidence: float = 0.95,
              distinguisher: str = "auto", seed: int | None = 0, selection_fraction: float = 0.1,
              chunk: int | None = None, progress: ProgressFn | None = None, backend: str | None = None,
              workers: int | None = None, address: str | None = None, checkpoint: Any = None,
              resume: bool = False, test: str | None = None) -> "LDPAudit":
    """Certify a lower bound on the LDP ε of ``mechanism`` from the pair (x0, x1).

    The audit's randomness is ``SeedSequence(seed)`` (``seed=None``: fresh entropy), so
    ``audit_ldp(..., seed=s)`` is ``audit_ldp_streams(..., streams=SeedSequence(s))`` with
    ``LDPAudit.seed = s``.

    Parameters
    ----------
    mechanism : a :class:`~fedaudit.mechanisms.Mechanism`, or a black-box
        ``sampler(x, size, rng) -> (size, ...)`` array; then ``epsilon`` (the claim) is required.
    x0, x1 : the audited inputs (must differ).
    epsilon, delta : the claimed guarantee; default the mechanism's own (δ = 0 for samplers).
    samples : draws per input in total (selection + certification), in [100, 10^12].
    confidence : 1 − α for the certified bound.
    distinguisher : "auto" (likelihood ratio when ``log_prob`` exists, plus every black-box family but
        "naive-bayes", the fitted estimate of that likelihood ratio; without ``log_prob`` every
        black-box family), "likelihood-ratio", "black-box", or any of "column", "projection",
        "classifier", "frequency", "naive-bayes" (comma-separated): the test that tells the two
        inputs' reports apart. The report's field ``test`` names the statistic chosen.
    seed : root of all randomness (``SeedSequence(seed)``).
    selection_fraction : share of ``samples`` used to train and select (capped at 2·10^5).
    chunk : reports per processing step and per certification chunk (rounded to whole seeded
        blocks; default one block per step and 2^20 reports per chunk); the result does not
        depend on it.
    progress : called with the number of reports drawn after each step or chunk.
    backend, workers, address : where the chunks of every split run (train, select and
        certification; :func:`fedaudit.engine.run_chunks`): ``"process"``, ``"serial"`` (in this process) or
        ``"ray"``; the result is the same on each. None (default):
        :func:`fedaudit.engine.default_backend`, i.e. ``"process"`` with one worker per core
        unless an :func:`~fedaudit.engine.engine_defaults` block or ``FEDAUDIT_BACKEND`` says
        otherwise; an audit with a single certification chunk (≤ 2^20 reports per input) runs
        in this process.
    checkpoint, resume : a file recording finished certification chunks, and whether to continue
        it (a checkpoint of another configuration is refused; a black-box sampler is identified
        by its qualified name, and by its ``config`` attribute when it has one, so give a
        configurable sampler object a ``config`` describing everything its draws depend on).
    test : deprecated name of ``distinguisher``.
    """
    distinguisher = renamed_keyword("audit_ldp", "test", "distinguisher", test, distinguisher, "auto")
    if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))):
        raise FedAuditError(f"seed must be a non-negative integer or None, got seed={seed!r} (a stream of a larger "
                            f"experiment goes to audit_ldp_streams(streams=...))")
    res = audit_ldp_streams(mechanism, x0, x1, streams=as_seed_sequence(seed), epsilon=epsilon, delta=delta,
                            samples=samples, confidence=confidence, distinguisher=distinguisher,
                            selection_fraction=selection_fraction,
                            chunk=chunk, progress=progress, backend=backend, workers=workers, address=address,
                            checkpoint=checkpoint, resume=resume)
    return res if seed is None else replace(res, seed=int(seed))


def audit_ldp_streams(mechanism: Mechanism | Sampler, x0: Any, x1: Any, *, streams: np.random.SeedSequence,
                      epsilon: float | None = None, delta: float | None = None, samples: int = 1_000_000,
                      confidence: float = 0.95, distinguisher: str = "auto", selection_fraction: float = 0.1,
                      chunk: int | None = None, progress: ProgressFn | None = None, backend: str | None = None,
                      workers: int | None = None, address: str | None = None, checkpoint: Any = None,
                      resume: bool = False, test: str | None = None) -> "LDPAudit":
    """:func:`audit_ldp` drawing from the child streams of ``streams`` (a ``SeedSequence``, e.g. one
    child of a larger seeded experiment such as a pair search); ``LDPAudit.seed`` is None.

    Stream layout: ``streams.spawn(4)`` = (width probe, train, select, certify); each split
    spawns one child per input and each of those one child per block
    (:func:`fedaudit.audit.sampling.stream`). ``backend`` … ``resume``: as in :func:`audit_ldp`;
    ``test``: deprecated name of ``distinguisher``.
    """
    distinguisher = renamed_keyword("audit_ldp_streams", "test", "distinguisher", test, distinguisher, "auto")
    if not isinstance(streams, np.random.SeedSequence):
        raise FedAuditError(f"streams must be a numpy SeedSequence, got {type(streams).__name__}")
    t_start = time.perf_counter()
    claim, delta_claim = claimed_guarantee(mechanism, epsilon, delta)
    eps_claim = epsilon_delta(claim)[0]
    source = ReportSource(mechanism)
    x0 = check_vector("x0", x0, dim=None if source.mechanism is None else source.mechanism.dim)
    x1 = check_vector("x1", x1, dim=x0.shape[0])
    if np.array_equal(x0, x1):
        raise FedAuditError("x0 and x1 must differ: an audit of a pair of equal inputs certifies nothing")
    samples = check_int("samples", samples, low=100, high=MAX_SAMPLES, high_name="10^12")
    confidence = check_probability("confidence", confidence)
    selection_fraction = check_probability("selection_fraction", selection_fraction)
    backend, workers, address = check_run_options(backend, workers, address, checkpoint, resume)
    alpha = 1.0 - confidence

    # ---- 1. sampling: seeded streams of the train, select and certify splits
    probe_seq, train_seq, select_seq, cert_seq = streams.spawn(4)
    width = source.probe_width(x0, np.random.default_rng(probe_seq))
    block = block_rows(width)
    chunk_blocks = 1 if chunk is None else max(1, check_int("chunk", chunk, low=1) // block)
    n_train, n_select, n_cert = sample_splits(samples, selection_fraction)
    n_sel = n_train + n_select
    halves = {name: seq.spawn(2) for name, seq in (("train", train_seq), ("select", select_seq), ("cert", cert_seq))}
    inputs = ((0, x0), (1, x1))
    target = mechanism if source.mechanism is None else source.mechanism
    per_chunk = chunk_blocks if chunk is not None else max(1, CERT_CHUNK // block)
    engine = dict(backend=backend, workers=workers, address=address)

    def split(name: str, total: int, use: Any, cap: int | None = None) -> tuple[list, list[int]]:
        """The engine tasks of one split (both inputs) and the input of each. Block i of input w
        is drawn from child i of the split's stream for w, as in
        :func:`~fedaudit.audit.sampling.stream`; with ``cap``,
        the blocks after the first ``cap`` rows of an input are not drawn (counted as drawn)."""
        tasks, owner = [], []
        for w, x in inputs:
            sizes = block_sizes(total, block)
            seqs = halves[name][w].spawn(len(sizes))
            if cap is not None:
                need = min(len(sizes), int(np.searchsorted(np.cumsum(sizes), cap)) + 1)
                if progress is not None and need < len(sizes):
                    progress(int(sum(sizes[need:])))
                sizes, seqs = sizes[:need], seqs[:need]
            for start in range(0, len(sizes), per_chunk):
                tasks.append((target, width, x, f"x{w}", sizes[start:start + per_chunk],
                              seqs[start:start + per_chunk], chunk_blocks, use))
                owner.append(w)
        return tasks, owner

    def run(fn: Any, tasks: list, **kw: Any) -> list:
        return run_chunks(fn, tasks, progress=progress, units=[sum(t[4]) for t in tasks], **engine, **kw)

    # ---- 2. distinguishers: fit on the train split, choose one event on the select split
    cap_rows = max(1000, _TRAIN_BYTES // (8 * width))
    tasks, owner = split("train", n_train, None, cap=cap_rows)
    drawn: list[list[np.ndarray]] = [[], []]
    for w, (rows, seconds) in zip(owner, run(_sample_chunk, tasks)):
        drawn[w].append(rows)
        source.seconds += seconds
    train0, train1 = (np.concatenate(rows)[:cap_rows] for rows in drawn)
    del drawn
    has_lr = source.mechanism is not None and has_log_prob(source.mechanism, train0[:1], x0)
    use_lr, families = parse_test(distinguisher, has_lr)
    stats: list[Statistic] = [LikelihoodRatio(source.mechanism, x0, x1)] if use_lr else []
    decode = source.mechanism.decode if source.mechanism is not None else None
    # the exact likelihood ratio is not fitted, so it also selects on the (kept) training draws
    lr_train = [[stats[0](train0)], [stats[0](train1)]] if use_lr else None
    stats += fit_black_box(train0, train1, x0=x0, x1=x1, decode=decode, families=families)
    del train0, train1
    if not stats:
        raise FedAuditError(f"no distinguisher applies for distinguisher={distinguisher!r} to reports of width {width}")
    scores: list[list[list[np.ndarray]]] = [[[] for _ in stats] for _ in range(2)]
    if lr_train is not None:
        scores[0][0], scores[1][0] = lr_train
    tasks, owner = split("select", n_select, tuple(stats))
    for w, (part_scores, seconds) in zip(owner, run(_sample_chunk, tasks)):
        for i, sc in enumerate(part_scores):
            scores[w][i].append(sc)
        source.seconds += seconds
    events = [select_event(st, np.concatenate(scores[0][i]), np.concatenate(scores[1][i]), n_cert, delta_claim,
                           alpha) for i, st in enumerate(stats)]
    del scores
    events.sort(key=lambda e: -e.projected)
    chosen = events[0]

    # ---- 3. certification: count the chosen event on fresh draws (engine chunks), bound by ScoreAuditor
    tasks, owner = split("cert", n_cert, chosen)
    key = None if checkpoint is None else _checkpoint_key(mechanism, x0, x1, streams, samples, confidence, distinguisher,
                                                          selection_fraction, delta_claim, chunk, chosen)
    counted = run(_count_chunk, tasks, checkpoint=checkpoint, resume=resume, key=key, validate=_check_count)
    hits = [0, 0]
    for w, (h, _, seconds) in zip(owner, counted):  # chunk order: a fixed reduction
        hits[w] += h
        source.seconds += seconds
    certified = _certify(hits[chosen.positive], hits[1 - chosen.positive], n_cert, confidence, delta_claim)

    mech = source.mechanism
    eps_exact = None if mech is None else mech.epsilon_for_pair(x0, x1)
    violation = eps_claim is not None and certified.epsilon_lower > eps_claim
    power = _pair_power(eps_exact, eps_claim)
    max_cert = max_certifiable_epsilon_at(n_cert, delta_claim, alpha)
    tp, fp = certified.tp, certified.fp
    tpr, fpr = certified.tpr, certified.fpr
    return LDPAudit(
        epsilon_lower=certified.epsilon_lower,
        epsilon_claimed=eps_claim,
        delta_claimed=delta_claim,
        violation=violation,
        epsilon_exact=eps_exact,
        tpr=tpr,
        fpr=fpr,
        test=chosen.statistic.name,
        samples=samples,
        seed=None,
        confidence=confidence,
        tightness=(certified.epsilon_lower / eps_claim) if eps_claim else None,
        event={
            "statistic": chosen.statistic.name,
            "family": chosen.statistic.family,
            "event": f"s {'>=' if chosen.upper else '<='} {chosen.threshold:.6g}",
            "threshold": chosen.threshold,
            "positive_input": f"x{chosen.positive}",
            "tp": tp, "fp": fp, "n": n_cert,
            "tpr_lower": certified.tpr_lower,
            "fpr_upper": certified.fpr_upper,
            "event_mass": max(tpr, fpr),
            "selection": "train/select/certify splits; one event certified (no multiplicity correction needed)",
        },
        candidates=[{"statistic": e.statistic.name, "family": e.statistic.family,
                     "selection_score": e.projected} for e in events],
        gdp_mu=gdp_mu_estimate(tpr, fpr) if tp > 0 and fp < n_cert else None,
        max_certifiable=max_cert,
        selection_samples=n_sel,
        certification_samples=n_cert,
        runtime_s=time.perf_counter() - t_start,
        sampling_s=source.seconds,
        mechanism=mech.to_dict() if mech is not None else {"mechanism": "black-box sampler"},
        x0=x0.tolist() if x0.size <= 4096 else None,
        x1=x1.tolist() if x1.size <= 4096 else None,
        pair_power=power,
        notes=audit_notes(eps_exact, eps_claim, power, violation, max_cert, searched=False),
    )


def _chunk_parts(task) -> tuple[ReportSource, Any]:
    """The reports of one engine chunk of a split: its seeded blocks ``step`` at a time (block i
    from ``seqs[i]``, :func:`~fedaudit.audit.sampling.draw_blocks`); returns (source, iterator)."""
    target, width, x, which, sizes, seqs, step, _ = task
    source = ReportSource(target)
    source.width = width
    return source, draw_blocks(source, x, sizes, seqs, step, which)


def _sample_chunk(task) -> list:
    """One chunk of the train split (``use`` None: returns ``[reports, seconds]``) or of the select
    split (``use`` the statistics: returns ``[one score array per statistic, seconds]``)."""
    stats = task[-1]
    source, parts = _chunk_parts(task)
    if stats is None:
        return [np.concatenate(list(parts)), source.seconds]
    scored = [[st(part) for st in stats] for part in parts]
    return [[np.concatenate([row[i] for row in scored]) for i in range(len(stats))], source.seconds]


def _count_chunk(task) -> list:
    """One certification chunk: the chosen event's hits among its reports. Returns
    ``[hits, reports, seconds]``."""
    event = task[-1]
    source, parts = _chunk_parts(task)
    hits = sum(int(np.count_nonzero(event.hits(event.statistic(part)))) for part in parts)
    return [hits, int(sum(task[4])), source.seconds]


def _check_count(record: Any, task) -> None:
    """A certification chunk's result as a checkpoint stores it (:func:`fedaudit.engine.iter_chunks`'s
    ``validate``): ``[hits, reports, seconds]`` with ``reports`` the chunk's size, integer
    ``0 ≤ hits ≤ reports`` and ``seconds ≥ 0`` — what the certification sums."""
    size = int(sum(task[4]))
    if not (isinstance(record, list) and len(record) == 3):
        raise ValueError(f"expected [hits, reports, seconds], got {dumps(record)[:60]}")
    hits, reports, seconds = record
    if type(reports) is not int or reports != size:
        raise ValueError(f"reports {dumps(reports)[:30]} is not the chunk's {size} draws")
    if type(hits) is not int or not 0 <= hits <= size:
        raise ValueError(f"hits {dumps(hits)[:30]} is not an integer in [0, {size}]")
    if type(seconds) not in (int, float) or not 0 <= seconds < float("inf"):
        raise ValueError(f"seconds {dumps(seconds)[:30]} is not a time")


def _checkpoint_key(mechanism, x0, x1, streams, samples, confidence, test, selection_fraction, delta, chunk,
                    chosen) -> dict[str, Any]:
    """The configuration an audit's checkpoint belongs to: the mechanism (its ``to_dict``, or a
    sampler's qualified name and, when it has one, its ``config`` attribute: JSON data describing
    everything its draws depend on), SHA-256 of x0 and x1, every parameter, the root stream and
    the chosen event (a changed selection never reuses old counts)."""
    import hashlib

    if isinstance(mechanism, Mechanism):
        target: Any = mechanism.to_dict()
    else:
        target = f"{getattr(mechanism, '__module__', '?')}:{getattr(mechanism, '__qualname__', type(mechanism).__name__)}"
        config = getattr(mechanism, "config", None)
        if config is not None:
            target = {"sampler": target, "config": jsonable(config)}
    return {"run": "fedaudit.audit.ldp:certification", "mechanism": target,
            "x0": hashlib.sha256(x0.tobytes()).hexdigest(), "x1": hashlib.sha256(x1.tobytes()).hexdigest(),
            "samples": samples, "confidence": confidence, "test": test, "selection_fraction": selection_fraction,
            "delta": delta, "chunk": chunk, "streams": {"entropy": streams.entropy, "spawn_key": list(streams.spawn_key)},
            "event": {"statistic": chosen.statistic.name, "upper": chosen.upper, "threshold": chosen.threshold,
                      "positive": chosen.positive}}


def _certify(tp: int, fp: int, n: int, confidence: float, delta: float):
    """The certified bound of one pre-registered event with ``tp`` hits in ``n`` draws of the
    positive input and ``fp`` in ``n`` of the other: :class:`ScoreAuditor` on the event
    indicators (values 0/1 with their counts) with the single event {indicator ≥ 1}."""
    auditor = ScoreAuditor.from_counts([0.0, 1.0], [n - tp, tp], [0.0, 1.0], [n - fp, fp])
    return auditor.epsilon_lower(confidence, delta, BonferroniSelection((1.0,), ("in-high",)))
