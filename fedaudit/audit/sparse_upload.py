"""What one client's sparse upload leaks about one of its records: a black-box LDP audit.

The audited randomizer is the whole client pipeline ``D ↦ upload(local_update(state, D))``:
local training from the broadcast ``state`` on the client's dataset D (its randomness — gate
noise, minibatches — is the sampler's randomness), then the upload of the resulting
:class:`~fedaudit.mechanisms.gated.ClientUpdate`. The two audited inputs are neighbouring
datasets D0, D1 (one record replaced), so the sampler of :func:`fedaudit.audit.audit_ldp` maps
the indicator x ∈ {0, 1} to draws of the upload on D_x. Any ε-LDP upload mechanism M gives an
ε-DP pipeline (post-processing of a function of D), so the certified bound on
P[M(U(D1)) ∈ E] ≤ e^ε P[M(U(D0)) ∈ E] must stay ≤ the stated ε of the private variant; the
plain gated upload (top-m indices by gate probability, exact values) states nothing by default and is
expected to leak: the index set moves with the record.

A report is the decoded packet as a dense row ``[1{j sent}, value_j, gate_j]_{j<|θ|}`` (plain
upload, decoded from the exact wire bytes) or the private mechanism's own report.

One record moves the private upload's inputs only slightly, so the data-level bound says what one
record leaks, not whether the stated ε holds: that ε is a guarantee over ANY two inputs of the
clamped domain. :func:`worst_pair` builds the input pair of largest privacy loss from the
mechanism's construction and :func:`audit_worst_pair` certifies a bound on it (the audit of the
stated ε); ``audit_sparse_upload("private")`` reports both.

Both audits draw on the engine (:func:`fedaudit.engine.run_chunks` through
:func:`~fedaudit.audit.audit_ldp`: ``backend``, ``workers``, ``address``, ``checkpoint``,
``resume``): the training, selection and certification draws alike. Their samplers are top-level
objects (:class:`UploadSampler`, :class:`ReducedReports`) that travel to the workers; each block
is drawn from its own child of the audit's ``SeedSequence`` (block i ← child i), so the bounds are
bit-identical on ``serial``, ``process`` (1 or N workers) and ``ray``. A sampler's ``config``
(everything its draws depend on) is part of the audit's checkpoint key: a checkpoint of another
configuration is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np

from fedaudit.audit.ldp import LDPAudit, audit_ldp
from fedaudit.audit.sampling import ProgressFn
from fedaudit.deprecation import module_aliases, renamed_keyword
from fedaudit.engine import check_run_options
from fedaudit.errors import FedAuditError
from fedaudit.extras import require
from fedaudit.json import jsonable
from fedaudit.mechanisms.base import clip_l2
from fedaudit.mechanisms.gated import MAX_LOG_PROB_M, GatedPrivateUpload
from fedaudit.rng import derive_seed
from fedaudit.validation import check_choice, check_int, check_real

__all__ = ["SparseUploadAudit", "UPLOADS", "UPLOAD_PAIRS", "audit_sparse_upload", "neighbouring_datasets", "UploadSampler",
           "packet_row", "audit_upload", "WorstPair", "WorstPairAudit", "worst_pair", "audit_worst_pair",
           "ReducedReports", "WORST_SUFFIX", "worst_pair_self_test"]

#: the audited uploads: the plain top-m gated upload and its private variant ("gated-private")
UPLOADS = ("plain", "private")

#: what a sparse-upload audit compares: neighbouring datasets ("data"), the mechanism's worst input
#: pair ("worst"), or both (the vector pairs of an LDP audit are :data:`fedaudit.audit.pairs.LDP_PAIRS`)
UPLOAD_PAIRS = ("data", "worst", "both")


#: the name this had before issue #24 (deprecated for one release; a read warns with the new name)
__getattr__ = module_aliases(__name__, {"PAIRS": ("UPLOAD_PAIRS (the LDP audit's pairs are fedaudit.audit.pairs.LDP_PAIRS)",
                                                  lambda: UPLOAD_PAIRS)})

#: the two audited inputs of the black-box game: the indicator of D0 / D1
X0, X1 = np.zeros(1), np.ones(1)


def packet_row(indices: np.ndarray, values: np.ndarray, gate_stats: np.ndarray, dim: int) -> np.ndarray:
    """A sparse packet as the dense row ``[s, v, g]`` of width 3·dim: s_j = 1 when coordinate j
    was sent, v_j and g_j its value and gate statistic (0 when not sent)."""
    row = np.zeros(3 * dim)
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= dim):
        raise FedAuditError(f"packet indices must lie in [0, {dim}), got {idx.min()}..{idx.max()}")
    row[idx] = 1.0
    row[dim + idx] = values
    row[2 * dim + idx] = gate_stats
    return row


class UploadSampler:
    """The black-box sampler of the pipeline: ``sampler(x, size, rng)`` draws ``size`` reports
    ``report(local_update(D_x, rng=r_i), r_i)`` with x ∈ {0, 1} choosing the dataset and one child
    generator r_i per draw (so the draws do not depend on how the audit blocks them).

    A top-level object, so it travels to the engine's workers (``local_update``, ``report`` and
    the datasets travel with it, by cloudpickle as the engine ships tasks). ``config`` (JSON data)
    describes everything the draws depend on; :func:`~fedaudit.audit.audit_ldp`'s checkpoint key
    records it, so a checkpoint of another configuration is refused."""

    def __init__(self, local_update: Callable[..., Any], datasets: tuple[Any, Any],
                 report: Callable[[Any, np.random.Generator], np.ndarray], *, config: Any):
        if not callable(local_update) or not callable(report):
            raise FedAuditError("local_update and report must be callables")
        if len(datasets) != 2:
            raise FedAuditError(f"datasets must be the pair (D0, D1), got {len(datasets)} datasets")
        self.local_update, self.datasets, self.report = local_update, tuple(datasets), report
        self.config = jsonable(config)

    def __call__(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        data = self.datasets[int(x[0] > 0.5)]
        rows = []
        for s in rng.integers(0, 2**63, size=size):
            r = np.random.default_rng(int(s))
            rows.append(np.asarray(self.report(self.local_update(data, rng=r), r), dtype=np.float64).ravel())
        return np.stack(rows)


def _wire_report(wire: Any, update: Any, rng: np.random.Generator) -> np.ndarray:
    """The plain upload's report: the update through ``wire`` (a
    :class:`~fedaudit.mechanisms.gated.GatedSparseUpload`) to its bytes and back, as :func:`packet_row`."""
    packet = wire.decode(wire.encode(update))
    return packet_row(packet.indices, packet.values, packet.gate_stats, wire.dim)


def _private_report(mechanism: GatedPrivateUpload, update: Any, rng: np.random.Generator) -> np.ndarray:
    """The private upload's report: one draw of ``mechanism`` on the row [θ̃, log α] of the update."""
    return mechanism.sample(np.concatenate([update.weights, update.log_alpha]), 1, rng)[0]


def _array_digest(*arrays: np.ndarray) -> str:
    """SHA-256 of the float64 bytes of ``arrays`` (with their shapes)."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a, dtype=np.float64)
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


@dataclass(frozen=True)
class SparseUploadAudit:
    """Result of an upload audit. ``epsilon_lower`` is certified at ``confidence`` for the pipeline
    D ↦ upload(local_update(D)) on the neighbouring pair; ``epsilon_claimed`` is the stated ε
    (None: nothing is claimed, the plain upload's default). ``violation``: the certified bound
    exceeds the stated ε. ``bytes_sparse``/``bytes_dense``: one client's upload per round on the wire
    (gated packet vs dense FedAvg float32 weights)."""

    upload: str
    epsilon_lower: float
    epsilon_claimed: float | None
    violation: bool
    max_certifiable: float
    samples: int
    seed: int | None
    confidence: float
    dim: int
    m: int
    bytes_sparse: int
    bytes_dense: int
    neighbour: dict[str, Any]
    runtime_s: float
    ldp: dict[str, Any] = field(repr=False)
    #: the audited pair of the main fields: "data" (neighbouring datasets) or "worst" (:func:`worst_pair`)
    pair: str = "data"
    #: the worst-pair audit of the private upload (``pair`` "worst" or "both"), else None
    worst: WorstPairAudit | None = field(default=None, repr=False)

    @property
    def bytes_ratio(self) -> float:
        """bytes_sparse / bytes_dense."""
        return self.bytes_sparse / self.bytes_dense

    def to_dict(self) -> dict[str, Any]:
        return jsonable({**asdict(self), "bytes_ratio": self.bytes_ratio,
                         "worst": None if self.worst is None else self.worst.to_dict()})

    def summary(self) -> str:
        claim = ("no stated ε" if self.epsilon_claimed is None
                 else f"stated ε = {self.epsilon_claimed:g}" + (" — VIOLATED" if self.violation else ""))
        worst = "" if self.worst is None or self.pair == "worst" else f"; {self.worst.summary()}"
        on = "neighbouring datasets" if self.pair == "data" else f"its worst pair, {self.worst.mode}"
        return (f"{self.upload} upload (|θ| = {self.dim}, m = {self.m}): certified ε ≥ {self.epsilon_lower:.3f} at "
                f"{self.confidence:.0%} on {on} ({claim}; at most {self.max_certifiable:.2f} "
                f"certifiable with {self.samples} draws){worst}; {self.bytes_sparse} B vs {self.bytes_dense} B dense "
                f"per client per round ({self.bytes_ratio:.1%}); {self.runtime_s:.1f} s")


#: ``chunk`` of the pipeline's audit: audit_ldp rounds it up to one seeded block per step and per engine
#: task (a draw is a local training run of milliseconds, so one block is seconds of work)
_ONE_BLOCK = 1


def audit_upload(sampler: UploadSampler, *, upload: str, epsilon: float | None, dim: int, m: int,
                 bytes_sparse: int, bytes_dense: int, neighbour: dict[str, Any], samples: int, confidence: float,
                 seed: int | None, distinguisher: str = "black-box", progress: ProgressFn | None = None,
                 backend: str | None = None, workers: int | None = None, address: str | None = None,
                 checkpoint: Any = None, resume: bool = False, test: str | None = None) -> SparseUploadAudit:
    """Certify a lower bound on the ε of the pipeline ``sampler`` (:class:`UploadSampler`) with
    :func:`~fedaudit.audit.audit_ldp` in black-box mode on the indicator pair (0, 1).

    ``epsilon`` is the stated ε of a private upload (None for the plain upload: the bound is
    reported and nothing is claimed; the LDP game then runs against a nominal claim that only
    its verdict fields would read, which are reset). ``backend`` … ``resume``: the engine
    keywords of the audit's draws (:func:`~fedaudit.audit.audit_ldp`), one seeded block per task;
    the result is the same on every backend. ``distinguisher``: as in :func:`~fedaudit.audit.audit_ldp`
    (``test``: its deprecated name).
    """
    distinguisher = renamed_keyword("audit_upload", "test", "distinguisher", test, distinguisher, "black-box")
    if not isinstance(sampler, UploadSampler):
        raise FedAuditError(f"sampler must be an UploadSampler, got {type(sampler).__name__}")
    t0 = time.perf_counter()
    nominal = 1.0 if epsilon is None else epsilon
    res: LDPAudit = audit_ldp(sampler, X0, X1, epsilon=nominal, delta=0.0, samples=samples,
                              confidence=confidence, distinguisher=distinguisher, seed=seed, progress=progress, chunk=_ONE_BLOCK,
                              backend=backend, workers=workers, address=address, checkpoint=checkpoint,
                              resume=resume)
    if epsilon is None:
        res = replace(res, epsilon_claimed=None, violation=False, tightness=None,
                      notes=[n for n in res.notes if "claimed" not in n])
    return SparseUploadAudit(upload=upload, epsilon_lower=res.epsilon_lower, epsilon_claimed=epsilon,
                             violation=res.violation, max_certifiable=res.max_certifiable, samples=res.samples,
                             seed=res.seed, confidence=res.confidence, dim=int(dim), m=int(m),
                             bytes_sparse=int(bytes_sparse), bytes_dense=int(bytes_dense), neighbour=dict(neighbour),
                             runtime_s=time.perf_counter() - t0, ldp=res.to_dict())


def neighbouring_datasets(dim: int, records: int, support: int, rng: np.random.Generator
                          ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], dict[str, Any]]:
    """One client's planted sparse-regression dataset D0 (:func:`fedaudit.fl.sparse_data.scarce_regression`,
    one client, ``records`` rows, ``support`` true non-zeros) and its neighbour D1: the last record
    replaced by an outlier on the first coordinate j* outside the true support,
    x = √d·e_{j*}, y = 2√d. Its squared-loss gradient on θ̃_{j*} is −2d at θ̃ = 0, so local training on
    D1 opens gate j* and pushes it into the top m — the record moves the gate ranking."""
    from fedaudit.fl.sparse_data import scarce_regression

    data = scarce_regression(d=dim, support=support, samples=records, clients=1, val_samples=0, test_samples=2,
                             rng=rng)
    X, y = data.clients[0]
    j = int(np.setdiff1d(np.arange(dim), data.support)[0])
    scale = float(np.sqrt(dim))
    X1, y1 = X.copy(), y.copy()
    X1[-1] = 0.0
    X1[-1, j] = scale
    y1[-1] = 2.0 * scale
    info = {"replaced_record": records - 1, "outlier_coordinate": j, "outlier_x": f"{scale:.4g}·e_{j}",
            "outlier_y": 2.0 * scale, "true_support": data.support.tolist(), "records": records}
    return (X, y), (X1, y1), info


# --------------------------------------------------------------------------- worst-case input pair
@dataclass(frozen=True)
class WorstPair:
    """The input pair of :func:`worst_pair` and its privacy loss. ``loss_selection``, ``loss_values``,
    ``loss_gates``: the three parts of log p(o | x0)/p(o | x1) at the outcome o = (S0, values at +c,
    gates at +a); ``epsilon_pair``: the pair's exact ε (max over outcomes) when
    ``epsilon_for_pair`` can compute it (``pair_exact``), else that loss (then ε_pair ∈
    [loss, ε]); ``ratio`` = ε_pair/ε of the mechanism."""

    params: int
    m: int
    epsilon: float
    support: list[int]
    loss_selection: float
    loss_values: float
    loss_gates: float
    epsilon_pair: float
    pair_exact: bool
    x0: np.ndarray = field(repr=False, compare=False)
    x1: np.ndarray = field(repr=False, compare=False)

    @property
    def loss(self) -> float:
        """The privacy loss at the outcome (S0, +c, +a): the sum of the three parts."""
        return self.loss_selection + self.loss_values + self.loss_gates

    @property
    def ratio(self) -> float:
        """ε_pair / ε."""
        return self.epsilon_pair / self.epsilon

    def to_dict(self) -> dict[str, Any]:
        return jsonable({**asdict(self), "loss": self.loss, "ratio": self.ratio})

    def summary(self) -> str:
        kind = "exact" if self.pair_exact else "loss at S0, a lower bound on the pair's exact"
        return (f"worst pair of gated-private (p = {self.params}, m = {self.m}, ε = {self.epsilon:g}): {kind} ε = "
                f"{self.epsilon_pair:.4f} ({self.ratio:.1%} of ε; selection {self.loss_selection:.4f}, values "
                f"{self.loss_values:.4f}, gates {self.loss_gates:.4f})")


def worst_pair(mechanism: GatedPrivateUpload) -> WorstPair:
    """The input pair of largest privacy loss of :class:`~fedaudit.mechanisms.gated.GatedPrivateUpload`.

    With S0 = the first m coordinates, c = ``clip``, a = ``gate_clip``:
    x0 = (θ̃ = +c·1, log α = +a on S0, −a elsewhere), x1 = (−c·1, −log α of x0).

    Why: given S the loss is ΔlogP[S] + ε_v(S) + ε_g(S) (class docstring). The values' Laplace is
    calibrated on the L1 diameter 2c·m of the ball of radius c√m, and ±c·1_S are antipodal points of
    that ball (the box corners lie on its sphere), so ε_v(S) is attained for every S, up to the
    Laplace's rounding slack (its sensitivity adds m + 1 grid units to at least 4096·m); likewise
    ε_g with ±a. Selection: each exponential-mechanism round has loss r·(k0_j − k1_j) + log(W1/W0) ≤
    2·(2K·r); reversing every gate moves each utility by the full range 2K, the picked one down and
    all others up, so at S = S0 round t (t picks made) has loss 2rK + log(W1_t/W0_t) with W0_t =
    (m−t) + (p−m)e^{−2rK}, W1_t = (m−t)e^{−2rK} + (p−m), which tends to 4rK only as (p−m)/(m−t) → ∞:
    to first order in rK the set's loss is ε_s·(1/m)·Σ_t (p−m)/(p−t) (the exponential mechanism's
    factor 2 is only attained when the unpicked mass dominates the normaliser), and r ≤ ε_s/(4Km) is
    a rational at or below the bound. Measured: exact ε/ε = 0.901 (p = 8, m = 2), 0.934 (16, 3), 0.948 (20, 3);
    the loss at S0 is 0.98·ε at p = 64, m = 3. This pair is the maximiser of ``epsilon_for_pair``
    over all pairs of gates in {−a, 0, a}^p (θ̃ = ±c) at p = 5, m = 2, and above 2000 random pairs
    of the domain (measured; the tests check p = 4, m = 2 and 300 random pairs). ``fedaudit audit ldp --mechanism gated-private --dim 16 --pair search
    --samples 20000`` (p = 8, m = 1) finds a pair of exact ε 0.243 and certifies 0; this pair's
    exact ε there is 0.937, and :func:`audit_worst_pair` certifies 0.83 of it from the same 20 000
    draws (0.90 from 100 000).

    The loss at S0 is computed in closed form (all m! pick orders of S0 have the same product):
    log P[S0 | u] = log m! + Σ_{t<m} [log w_in − log((m−t)·w_in + (p−m)·w_out)], w = exp(r·(k − max k)),
    and the Laplace parts Σ_S |k0 − k1|/t from the mechanisms' grids.
    """
    if not isinstance(mechanism, GatedPrivateUpload):
        raise FedAuditError(f"mechanism must be a GatedPrivateUpload, got {type(mechanism).__name__}")
    p, m, c, a = mechanism.params_dim, mechanism.m, mechanism.clip, mechanism.gate_clip
    u0 = np.full(p, -a)
    u0[:m] = a
    x0 = np.concatenate([np.full(p, c), u0])
    x1 = np.concatenate([np.full(p, -c), -u0])
    hi, lo = (int(k) for k in mechanism.gate_levels(np.array([a, -a])))
    r = mechanism.selection_rate
    low = math.exp(r * (lo - hi))                      # the weight of a gate at −a when the maximum is +a

    def log_p_support(w_in: float, w_out: float) -> float:
        return sum(math.log(w_in) - math.log((m - t) * w_in + (p - m) * w_out) for t in range(m))

    selection = log_p_support(1.0, low) - log_p_support(low, 1.0)

    def laplace(mech, v: float) -> float:
        k0 = np.rint(clip_l2(np.full((1, m), v), mech.clip) / mech.grid)
        k1 = np.rint(clip_l2(np.full((1, m), -v), mech.clip) / mech.grid)
        return float(np.abs(k0 - k1).sum() / mech.scale_grid)

    values, gates = laplace(mechanism.values_mechanism, c), laplace(mechanism.gates_mechanism, a)
    exact = mechanism.epsilon_for_pair(x0, x1)
    loss = selection + values + gates
    return WorstPair(params=p, m=m, epsilon=mechanism.epsilon, support=list(range(m)), loss_selection=selection,
                     loss_values=values, loss_gates=gates, epsilon_pair=loss if exact is None else float(exact),
                     pair_exact=exact is not None, x0=x0, x1=x1)


#: the worst-pair audit's tests: "auto" is the likelihood ratio where log_prob is exact (m ≤ 5)
WORST_TESTS = ("auto", "likelihood-ratio", "black-box")


@dataclass(frozen=True)
class WorstPairAudit:
    """Result of :func:`audit_worst_pair`: ``epsilon_lower`` certified at ``confidence`` on the
    :class:`WorstPair` ``pair``; ``violation``: it exceeds ``epsilon_claimed``; ``tightness`` =
    ε_lb/ε_pair (how much of what the pair can show the audit certified); ``mode``: the test used
    ("likelihood-ratio": white box, the exact log_prob; "black-box": fitted statistics on the reports)."""

    epsilon_lower: float
    epsilon_claimed: float
    violation: bool
    epsilon_pair: float
    pair_exact: bool
    tightness: float
    mode: str
    samples: int
    confidence: float
    max_certifiable: float
    seed: int | None
    runtime_s: float
    pair: WorstPair = field(repr=False)
    ldp: dict[str, Any] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({**asdict(self), "pair": self.pair.to_dict()})

    def summary(self) -> str:
        which = "exact" if self.pair_exact else "≥"
        return (f"worst pair ({self.mode}): certified ε ≥ {self.epsilon_lower:.3f} at {self.confidence:.0%} "
                f"{'ABOVE' if self.violation else 'within'} the stated ε = {self.epsilon_claimed:g}; the pair's ε "
                f"{which} {self.epsilon_pair:.3f} (tightness {self.tightness:.2f}; {self.samples} draws, at most "
                f"{self.max_certifiable:.2f} certifiable); {self.runtime_s:.1f} s")


def _worst_source(mechanism: GatedPrivateUpload, distinguisher: str) -> tuple[WorstPair, str, Any]:
    """The worst pair of ``mechanism``, the distinguisher ``distinguisher`` resolves to ("auto": the
    likelihood ratio when m ≤ :data:`~fedaudit.mechanisms.gated.MAX_LOG_PROB_M`, else "black-box")
    and what the audit draws from (the mechanism, or :class:`ReducedReports` of it)."""
    pair = worst_pair(mechanism)
    mode = check_choice("distinguisher", distinguisher, WORST_TESTS)
    if mode == "auto":
        mode = "likelihood-ratio" if mechanism.m <= MAX_LOG_PROB_M else "black-box"
    elif mode == "likelihood-ratio" and mechanism.m > MAX_LOG_PROB_M:
        raise FedAuditError(f"distinguisher='likelihood-ratio' needs m <= {MAX_LOG_PROB_M} (log_prob sums m! "
                            f"orders), got m={mechanism.m}; use distinguisher='black-box'")
    return pair, mode, mechanism if mode == "likelihood-ratio" else ReducedReports(mechanism, pair)


def worst_pair_self_test(kind: str, mechanism: GatedPrivateUpload, *, claimed_epsilon: float, samples: int,
                         confidence: float, seed: int, distinguisher: str = "auto", backend: str | None = None,
                         workers: int | None = None) -> dict[str, Any]:
    """The evidence of the worst-pair auditor's ``kind`` self-test ("null" or "planted"), with the
    settings of :func:`audit_worst_pair` (its pair, distinguisher, confidence and the stated
    ``claimed_epsilon``) at ``samples`` draws per input: the audit of
    :func:`~fedaudit.audit.self_tests.self_test_variant` of what it draws from — the private
    upload on x0 for both inputs (null: ε_lb must be 0), or with a fingerprint of its input
    appended (planted: exact ε ∞, ε_lb must exceed the claim)."""
    from fedaudit.audit.self_tests import ldp_evidence, self_test_variant

    pair, mode, source = _worst_source(mechanism, distinguisher)
    res = audit_ldp(self_test_variant(kind, source, pair.x0), pair.x0, pair.x1, epsilon=claimed_epsilon,
                    samples=samples, confidence=confidence, distinguisher=mode, seed=seed, backend=backend,
                    workers=workers)
    what = {"null": "the private upload on the same input twice (exact ε 0)",
            "planted": "the private upload with a fingerprint of its input appended (exact ε ∞)"}[kind]
    return ldp_evidence(kind, res.epsilon_lower, epsilon=claimed_epsilon, planted=what, pair="worst",
                        distinguisher=res.test, samples=res.samples, confidence=res.confidence, delta=0.0, seed=seed,
                        max_certifiable=res.max_certifiable)


def audit_worst_pair(mechanism: GatedPrivateUpload, *, claimed_epsilon: float | None = None, samples: int = 100_000,
                     confidence: float = 0.95, distinguisher: str = "auto", seed: int | None = 0,
                     progress: ProgressFn | None = None, backend: str | None = None, workers: int | None = None,
                     address: str | None = None, checkpoint: Any = None, resume: bool = False,
                     test: str | None = None) -> WorstPairAudit:
    """Certify a lower bound on the LDP ε of ``mechanism`` on its :func:`worst_pair` with
    :func:`~fedaudit.audit.audit_ldp` (``samples`` reports per input, certified at ``confidence``),
    against ``claimed_epsilon`` (default the ε it runs at; a smaller claim is a mis-stated upload).

    ``distinguisher="auto"`` (``test``: its deprecated name): the exact likelihood ratio log p(·|x0)/p(·|x1) from ``log_prob`` (white box,
    m ≤ 5), else ``"black-box"``: the fitted families on each report reduced to three statistics of
    the pair — Σ_S clamp(v_j, ±c)/c, Σ_S sign(x0's gate j)·clamp(g_j, ±a)/a and |S ∩ S0| (a
    post-processing, so the bound stays sound; the Laplace part of the privacy loss is linear in
    the clamped reports, the raw reports' heavy tails hide it). Measured at ε = 1, p = 64, m = 3
    (ε_pair ≥ 0.98): likelihood ratio ε_lb = 0.17 from 4000 draws, 0.30 from 20 000, 0.44 from
    100 000 (the default, 3 s); black box 0.31 from 100 000. Most of the selection's share of the
    loss sits on outcomes that include S0, which the near-uniform selection rarely draws, so what a
    feasible sample can certify is ≈ ε_v + ε_g = ε/2. Run at 4ε, stated ε: refuted from 10 000
    draws (likelihood ratio, m = 3: ε_lb 1.50-1.74 on 4 seeds); black box at m = 6, from 100 000
    (ε_lb 1.58; 0.66 on the raw reports).

    ``backend``, ``workers``, ``address``, ``checkpoint``, ``resume``: where the audit's draws
    run and its certification checkpoint (:func:`~fedaudit.audit.audit_ldp`); the result is the
    same on every backend.
    """
    claim = mechanism.epsilon if claimed_epsilon is None else check_real("claimed_epsilon", claimed_epsilon, low=0.0,
                                                                          open_low=True)
    distinguisher = renamed_keyword("audit_worst_pair", "test", "distinguisher", test, distinguisher, "auto")
    pair, mode, source = _worst_source(mechanism, distinguisher)
    t0 = time.perf_counter()
    res = audit_ldp(source, pair.x0, pair.x1, epsilon=claim, samples=samples, confidence=confidence,
                    distinguisher=mode,
                    seed=seed, progress=progress, backend=backend, workers=workers, address=address,
                    checkpoint=checkpoint, resume=resume)
    return WorstPairAudit(epsilon_lower=res.epsilon_lower, epsilon_claimed=claim, violation=res.violation,
                          epsilon_pair=pair.epsilon_pair, pair_exact=pair.pair_exact,
                          tightness=res.epsilon_lower / pair.epsilon_pair, mode=mode, samples=res.samples,
                          confidence=res.confidence, max_certifiable=res.max_certifiable, seed=res.seed,
                          runtime_s=time.perf_counter() - t0, pair=pair, ldp=res.to_dict())


class ReducedReports:
    """The black-box sampler of :func:`audit_worst_pair`: reports of ``mechanism`` reduced to
    (Σ_S clamp(v)/c, Σ_S sign(u0)·clamp(g)/a, |S ∩ S0|), rows (n, 3). A top-level object (it
    travels to the engine's workers) whose ``config`` (the mechanism's ``to_dict``) the audit's
    checkpoint key records."""

    def __init__(self, mechanism: GatedPrivateUpload, pair: WorstPair):
        self.mechanism = mechanism
        p = mechanism.params_dim
        self.sign = np.sign(pair.x0[p:])
        self.support = np.asarray(pair.support)
        self.config = mechanism.to_dict()  # the pair is worst_pair(mechanism); the audit's key hashes x0, x1

    def __call__(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        mech = self.mechanism
        p, c, a = mech.params_dim, mech.clip, mech.gate_clip
        r = mech.sample(x, size, rng)
        sent = r[:, :p]
        values = (np.clip(r[:, p:2 * p], -c, c) * sent).sum(axis=1) / c
        gates = (np.clip(r[:, 2 * p:], -a, a) * sent * self.sign).sum(axis=1) / a
        return np.stack([values, gates, sent[:, self.support].sum(axis=1)], axis=1)


#: the suffix of the worst pair's checkpoint when both pairs are audited (FILE: the data pair)
WORST_SUFFIX = ".worst"


def _checkpoint_files(checkpoint: Any, pair: str) -> dict[str, str | None]:
    """The checkpoint file of each audited pair ("data", "worst"; None: not run or no checkpoint)."""
    if checkpoint is None:
        return {"data": None, "worst": None}
    path = os.fspath(checkpoint)
    return {"data": path if pair != "worst" else None,
            "worst": None if pair == "data" else path if pair == "worst" else path + WORST_SUFFIX}


@contextlib.contextmanager
def _torch_threads(n: int):
    torch = require("torch", "the sparse-upload audit")

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def audit_sparse_upload(upload: str = "plain", *, dim: int = 64, density: float = 0.05, temperature: float = 0.01,
                        epsilon: float = 1.0, claimed_epsilon: float | None = None, records: int = 20,
                        local_steps: int = 5, samples: int = 4000,
                        confidence: float = 0.95, seed: int | None = 0, pair: str | None = None,
                        worst_samples: int = 100_000, progress: ProgressFn | None = None, backend: str | None = None,
                        workers: int | None = None, address: str | None = None, checkpoint: Any = None,
                        resume: bool = False) -> SparseUploadAudit:
    """Certify a lower bound on the ε of one E-FLoPS client's upload for one of its records.

    The client holds D0 or D1 (:func:`neighbouring_datasets`, m = ⌊ρ·|θ|⌋ true non-zeros) and a
    linear model of |θ| = ``dim`` gated parameters; the broadcast state is the start of training
    (θ̃ = 0, log α at P(z ≠ 0) = ½ with N(0, 0.01²) jitter, λ = 0, temperature T). Each draw runs
    :func:`fedaudit.fl.eflops.local_update` (``local_steps`` full-batch steps, fresh gate noise)
    and uploads the result: ``"plain"`` — :class:`~fedaudit.mechanisms.gated.GatedSparseUpload`
    (top m by log α), decoded from its wire bytes; ``"private"`` —
    :class:`~fedaudit.mechanisms.gated.GatedPrivateUpload` (``gated-private``: Gumbel noisy top-m and
    discrete-Laplace values and gates on the clamped (θ̃, log α)) run at ``epsilon``.
    :func:`audit_upload` certifies the bound at ``confidence`` from
    ``samples`` uploads per dataset. The private upload states ``claimed_epsilon`` (default
    ``epsilon``, the ε it runs at; a smaller claim is a mis-stated upload whose violation the audit
    can detect). The plain upload states ``claimed_epsilon`` when given (e.g. a claim "the plain
    upload is 1-DP", which a certified bound above 1 refutes) and nothing by default; ``epsilon``
    does not act on it.

    ``pair``: "data" (the neighbouring datasets above; the only one for the plain upload, its
    default), "worst" (the private mechanism on its :func:`worst_pair`, :func:`audit_worst_pair`
    from ``worst_samples`` draws per input: the audit of the stated ε) or "both" (the private
    upload's default: the main fields are the data-level audit — what one record leaks — and
    ``worst`` the worst-pair audit). ``progress`` counts the draws of both.

    ``backend``, ``workers``, ``address``: where the draws of both audits run
    (:func:`fedaudit.engine.run_chunks`, through :func:`~fedaudit.audit.audit_ldp`; one seeded
    block of uploads per task on the data pair); the result is the same on every backend.
    ``checkpoint=FILE`` records the data pair's certified chunks in FILE and the worst pair's in
    FILE + :data:`WORST_SUFFIX` (in FILE itself when ``pair="worst"``); ``resume`` continues them.
    Each is keyed by every parameter (a checkpoint of another configuration is refused), and an
    existing file without ``resume`` is refused before any audit runs.

    One draw is one local training run (a sequential chain of ``local_steps`` steps); the
    independent draws are what the engine spreads.
    """
    from fedaudit.fl.eflops import EFLoPS, EFLoPSState, local_update
    from fedaudit.fl.gates import GatedModel, HardConcrete
    from fedaudit.mechanisms.gated import GatedSparseUpload, m_for_density
    torch = require("torch", "the sparse-upload audit")

    upload = check_choice("upload", upload, UPLOADS)
    dim = check_int("dim", dim, low=4, high=4096)
    m = m_for_density(density, dim)
    temperature = check_real("temperature", temperature, low=0.0)
    epsilon = check_real("epsilon", epsilon, low=0.0, open_low=True)
    stated = epsilon if claimed_epsilon is None else check_real("claimed_epsilon", claimed_epsilon, low=0.0,
                                                                open_low=True)
    pair = check_choice("pair", "data" if pair is None and upload == "plain" else "both" if pair is None else pair,
                        UPLOAD_PAIRS)
    if upload == "plain" and pair != "data":
        raise FedAuditError(f"pair must be 'data' for the plain upload (deterministic given the update: it has no "
                            f"finite ε on a worst pair), got pair={pair!r}")
    worst_samples = check_int("worst_samples", worst_samples, low=100, high=10**9, high_name="10^9")
    records = check_int("records", records, low=2, high=100_000)
    local_steps = check_int("local_steps", local_steps, low=1, high=1000)
    check_run_options(backend, workers, address, checkpoint, resume)
    files = _checkpoint_files(checkpoint, pair)
    if not resume:
        for path in files.values():
            if path is not None and Path(path).exists():
                raise FedAuditError(f"checkpoint {path} already exists: pass resume=True (--resume) to continue it, "
                                    f"or remove it to start again")
    engine = dict(backend=backend, workers=workers, address=address, resume=resume)
    root = 0 if seed is None else seed
    data0, data1, info = neighbouring_datasets(dim, records, m, np.random.default_rng(derive_seed(root, "data")))
    method = EFLoPS(density=density, temperature=temperature, anneal=None, local_steps=local_steps)
    model = GatedModel(torch.nn.Linear(dim, 1, bias=False).double())
    jitter = np.random.default_rng(derive_seed(root, "gates")).standard_normal(dim)
    state = EFLoPSState(method, model, "mse", np.zeros(dim),
                        HardConcrete.log_alpha_for(method.init_density) + 0.01 * jitter, 0.0, temperature)
    wire = GatedSparseUpload(dim, m)
    if upload == "plain":
        report: Callable[[Any, np.random.Generator], np.ndarray] = partial(_wire_report, wire)
        claim, sent, report_config = (None if claimed_epsilon is None else stated), wire.packet_bytes(), wire.params()
    else:
        private = GatedPrivateUpload(dim, m, epsilon)
        report = partial(_private_report, private)
        # its report carries the Laplace grid values exactly: float64 values and gates on the wire
        claim, sent = stated, GatedSparseUpload(dim, m, value_dtype="float64").packet_bytes()
        report_config = private.to_dict()
    neighbour = {**info, "broadcast": "θ̃ = 0, P(z ≠ 0) = 1/2 (+ N(0, 0.01²) jitter on log α), λ = 0",
                 "local_steps": local_steps, "temperature": temperature}
    worst = None
    if pair != "data":
        worst = audit_worst_pair(private, claimed_epsilon=stated, samples=worst_samples, confidence=confidence,
                                 seed=derive_seed(root, "pair=worst"), progress=progress,
                                 checkpoint=files["worst"], **engine)
    if pair == "worst":
        return SparseUploadAudit(upload=upload, epsilon_lower=worst.epsilon_lower, epsilon_claimed=stated,
                                 violation=worst.violation, max_certifiable=worst.max_certifiable,
                                 samples=worst.samples, seed=seed, confidence=worst.confidence, dim=dim, m=m,
                                 bytes_sparse=sent, bytes_dense=wire.dense_bytes(),
                                 neighbour={"pair": "worst", **worst.pair.to_dict()}, runtime_s=worst.runtime_s,
                                 ldp=worst.ldp, pair="worst", worst=worst)
    config = {"pipeline": "fedaudit.fl.eflops:local_update -> upload", "upload": upload, "report": report_config,
              "method": asdict(method), "loss": state.loss, "lam": state.lam, "temperature": state.temperature,
              "broadcast": _array_digest(state.weights, state.log_alpha),
              "datasets": _array_digest(*data0, *data1)}
    sampler = UploadSampler(partial(local_update, state), (data0, data1), report, config=config)
    with _torch_threads(1):
        res = audit_upload(sampler, upload=upload, epsilon=claim, dim=dim, m=m, bytes_sparse=sent,
                           bytes_dense=wire.dense_bytes(), neighbour=neighbour, samples=samples,
                           confidence=confidence, seed=seed, progress=progress, checkpoint=files["data"], **engine)
    return res if worst is None else replace(res, worst=worst, runtime_s=res.runtime_s + worst.runtime_s)
