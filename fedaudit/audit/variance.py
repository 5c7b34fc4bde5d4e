"""Mean squared error of a mechanism's decoded reports, and MSE as a function of d/k.

For a fixed input x and i.i.d. reports r_1..r_N of M(x), the per-report squared error
e_i = ‖decode(r_i) − x‖² has mean MSE(x) = E‖x̂ − x‖² (bias² + variance). We report the sample
mean with a CLT confidence interval mean ± z·sd/√N, and the bias of each coordinate as a
z-score |mean_j(x̂) − x_j| / (sd_j/√N): under unbiasedness the largest of d such z-scores
is below Φ⁻¹(1 − α/(2d)) with probability ≥ 1 − α.

Reports are drawn in seeded blocks of ``chunk`` reports (block i of a measurement from the i-th
child of its stream, ``SeedSequence.spawn`` over the fixed block plan), so memory stays bounded
and the result depends only on ``seed`` and ``chunk``. The blocks run as engine chunks
(:func:`fedaudit.engine.iter_chunks`; ``backend=None`` is the engine's default): a task of consecutive blocks
of one measurement returns each block's sums (Σe_i, Σe_i², Σ_i(x̂_i − x), Σ_i(x̂_i − x)²), and the
caller adds them block by block in plan order, so the answer is bit-identical on every backend
and worker count, with or without a checkpoint.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from scipy import stats

from fedaudit.audit.bounds import MAX_SAMPLES
from fedaudit.engine import check_run_options, iter_chunks
from fedaudit.errors import FedAuditError
from fedaudit.json import is_numbers
from fedaudit.validation import check_int, check_probability, check_vector
from fedaudit.mechanisms.base import Mechanism, check_levels
from fedaudit.rng import as_seed_sequence, chunk_plan

__all__ = ["MSEResult", "measure_mse", "VarianceCurve", "variance_vs_dk"]

ProgressFn = Callable[[int], None]

#: at most this many reports per engine task (consecutive blocks of one measurement) ...
TASK_REPORTS = 2**17
#: ... and at most this many returned sums (2·d per block), so a task's record stays small. The
#: caller holds every block's 2·d sums until the reduction (8 bytes each, more as a checkpoint's
#: reloaded lists): 2·d·⌈samples/chunk⌉ per measurement.
TASK_FLOATS = 2**20


@dataclass(frozen=True)
class MSEResult:
    """MSE of decode(M(x)) with a ``confidence`` CI, and the largest per-coordinate bias z-score."""

    mechanism: str
    mse: float
    ci_low: float
    ci_high: float
    normalized_mse: float  # mse / ‖x‖² (relative error), inf when x = 0
    max_bias_z: float
    bias_z_threshold: float  # Bonferroni threshold over d coordinates at 1 − confidence
    samples: int
    confidence: float
    seed: int | None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def unbiased(self) -> bool:
        """No coordinate's bias is significant at the stated confidence (family-wise over d)."""
        return self.max_bias_z <= self.bias_z_threshold

    def to_dict(self) -> dict[str, Any]:
        from fedaudit.json import jsonable  # strict JSON: normalized_mse at x = 0 is "inf"

        out = asdict(self)
        out["unbiased"] = self.unbiased
        return jsonable(out)


def measure_mse(mechanism: Mechanism, x: Any, samples: int = 10_000, seed: int | None = 0, *,
                confidence: float = 0.95, chunk: int = 2_000, progress: ProgressFn | None = None,
                backend: str | None = None, workers: int | None = None, address: str | None = None,
                checkpoint: Any = None, resume: bool = False) -> MSEResult:
    """Estimate E‖decode(M(x)) − x‖² from ``samples`` reports (streamed in blocks of ``chunk``).

    ``seed`` is a non-negative integer (or None: fresh OS entropy); block i of ``samples``
    draws from the i-th child of ``SeedSequence(seed)``. ``backend``, ``workers``, ``address``,
    ``checkpoint`` and ``resume`` are passed to :func:`fedaudit.engine.iter_chunks` (checked
    before any draw; a checkpoint needs an integer seed)."""
    if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))):
        raise FedAuditError(f"seed must be a non-negative integer or None, got {type(seed).__name__}")
    engine = _engine_options(backend, workers, address, checkpoint, resume, seed)
    x = _check_input(mechanism, x)
    return _measure_all([mechanism], x, samples, [as_seed_sequence(seed)], seed=seed, confidence=confidence,
                        chunk=chunk, progress=progress, **engine)[0]


def _engine_options(backend, workers, address, checkpoint, resume, seed) -> dict[str, Any]:
    """The engine keywords, validated (:func:`fedaudit.engine.check_run_options`)."""
    backend, workers, address = check_run_options(backend, workers, address, checkpoint, resume)
    if checkpoint is not None and seed is None:
        raise FedAuditError("checkpoint needs an integer seed: seed=None draws fresh entropy, so a resumed "
                            "run could never continue the recorded one")
    return {"backend": backend, "workers": workers, "address": address, "checkpoint": checkpoint, "resume": resume}


def _check_input(mechanism: Any, x: Any) -> np.ndarray:
    """``x`` as a float vector of the mechanism's dimension (the mechanism must be a :class:`Mechanism`)."""
    if not isinstance(mechanism, Mechanism):
        raise FedAuditError(f"mechanism must be a fedaudit Mechanism, got {type(mechanism).__name__}")
    return check_vector("x", x, dim=mechanism.dim)


def _measure_all(mechanisms: Sequence[Mechanism], x: np.ndarray, samples: int,
                 streams: Sequence[np.random.SeedSequence], *, seed: int | None, confidence: float, chunk: int,
                 progress: ProgressFn | None, backend: str, workers: int | None, address: str | None,
                 checkpoint: Any, resume: bool) -> list[MSEResult]:
    """:class:`MSEResult` of each mechanism at ``x``, block i of mechanism j drawn from the i-th
    child of ``streams[j]`` (left unadvanced); all blocks run in one :func:`~fedaudit.engine.iter_chunks` call, folded as they come."""
    samples = check_int("samples", samples, low=2, high=MAX_SAMPLES, high_name="10^12")
    chunk = check_int("chunk", chunk, low=1)
    confidence = check_probability("confidence", confidence)
    sizes = [size for _, size in chunk_plan(samples, chunk)]
    tasks, owner = [], []
    for j, (mechanism, seq) in enumerate(zip(mechanisms, streams)):
        children = as_seed_sequence(seq, copy=True).spawn(len(sizes))
        per_task = max(1, min(TASK_REPORTS // chunk, TASK_FLOATS // (2 * mechanism.dim)))
        for start in range(0, len(sizes), per_task):
            tasks.append((mechanism, x, sizes[start:start + per_task], children[start:start + per_task]))
            owner.append(j)
    key = None if checkpoint is None else _checkpoint_key(mechanisms, x, samples, chunk, streams)
    done = iter_chunks(_mse_chunk, tasks, backend=backend, workers=workers, address=address, checkpoint=checkpoint,
                       resume=resume, key=key, progress=progress, units=[sum(t[2]) for t in tasks],
                       validate=_check_block_sums)
    sums = [_BlockSums(m.dim) for m in mechanisms]
    for j, record in zip(owner, done):  # chunk order = block order within each measurement; folded as they come
        sums[j].add(record)
    return [_result(m, x, samples, t, seed=seed, confidence=confidence) for m, t in zip(mechanisms, sums)]


class _BlockSums:
    """Running Σe, Σe², Σ(x̂ − x), Σ(x̂ − x)² of one measurement, adding the chunks' block sums one
    block at a time in plan order (the float additions of a single serial loop, on any backend)."""

    def __init__(self, dim: int):
        self.err_sum = self.err_sq = 0.0
        self.coord_sum = np.zeros(dim)
        self.coord_sq = np.zeros(dim)

    def add(self, record: list) -> None:
        s, q, cs, cq = record  # a checkpoint stores ±inf/nan as strings: float() reads them back
        cs, cq = np.asarray(cs, dtype=float), np.asarray(cq, dtype=float)
        for b in range(len(s)):
            self.err_sum += float(s[b])
            self.err_sq += float(q[b])
            self.coord_sum += cs[b]
            self.coord_sq += cq[b]


def _mse_chunk(task) -> list:
    """One engine chunk of B blocks: ``[Σe, Σe², Σ(x̂ − x), Σ(x̂ − x)²]`` with one entry per block
    (sums over the block's reports): two lists of B floats and two (B, d) float64 arrays (8 bytes a
    sum in memory and in pickles; a checkpoint stores them as lists)."""
    mechanism, x, sizes, seqs = task
    err_sum, err_sq = [], []
    coord_sum = np.empty((len(sizes), mechanism.dim))
    coord_sq = np.empty((len(sizes), mechanism.dim))
    for b, (size, seq) in enumerate(zip(sizes, seqs)):
        diff = mechanism.decode(mechanism.sample(x, size, rng=np.random.default_rng(seq))) - x
        e = np.einsum("ij,ij->i", diff, diff)
        err_sum.append(float(e.sum()))
        err_sq.append(float(e @ e))
        coord_sum[b] = diff.sum(0)
        coord_sq[b] = np.einsum("ij,ij->j", diff, diff)
    return [err_sum, err_sq, coord_sum, coord_sq]


def _check_block_sums(record: Any, task) -> None:
    """A chunk's result as a checkpoint stores it (:func:`fedaudit.engine.iter_chunks`'s
    ``validate``): the four sums of :func:`_mse_chunk`, one per block of the chunk (B numbers,
    B numbers, B × d, B × d)."""
    mechanism, _, sizes, _ = task
    b, d = len(sizes), mechanism.dim
    shapes = (("Σe", (b,)), ("Σe²", (b,)), ("Σ(x̂ − x)", (b, d)), ("Σ(x̂ − x)²", (b, d)))
    if not (isinstance(record, list) and len(record) == len(shapes)):
        raise ValueError("expected the four block sums [Σe, Σe², Σ(x̂ − x), Σ(x̂ − x)²]")
    for (name, shape), value in zip(shapes, record):
        if not is_numbers(value, shape):
            raise ValueError(f"{name} is not {' × '.join(map(str, shape))} numbers")


def _checkpoint_key(mechanisms, x, samples, chunk, streams) -> dict[str, Any]:
    """The configuration a checkpoint of MSE blocks belongs to: each mechanism (``to_dict``) with
    its stream, SHA-256 of x, ``samples`` and ``chunk``."""
    return {"run": "fedaudit.audit.variance:mse", "x": hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest(),
            "samples": samples, "chunk": chunk,
            "measurements": [{"mechanism": m.to_dict(),
                              "streams": {"entropy": q.entropy, "spawn_key": list(q.spawn_key)}}
                             for m, q in zip(mechanisms, streams)]}


def _result(mechanism: Mechanism, x: np.ndarray, samples: int, sums: _BlockSums, *, seed: int | None,
            confidence: float) -> MSEResult:
    """From a measurement's :class:`_BlockSums`: MSE with the CLT interval mse ± z·sd/√N and the
    largest per-coordinate bias z-score against its Bonferroni threshold Φ⁻¹(1 − α/(2d))."""
    d = mechanism.dim
    err_sum, err_sq, coord_sum, coord_sq = sums.err_sum, sums.err_sq, sums.coord_sum, sums.coord_sq
    mse = err_sum / samples
    sd = np.sqrt(max(err_sq / samples - mse ** 2, 0.0) * samples / (samples - 1))
    z = float(stats.norm.isf((1 - confidence) / 2))
    half = z * sd / np.sqrt(samples)
    bias = coord_sum / samples
    coord_var = np.maximum(coord_sq / samples - bias ** 2, 0.0) * samples / (samples - 1)
    se = np.sqrt(coord_var / samples)
    with np.errstate(divide="ignore", invalid="ignore"):
        zs = np.where(se > 0, np.abs(bias) / np.where(se > 0, se, 1.0), np.where(np.abs(bias) > 1e-12, np.inf, 0.0))
    norm2 = float(x @ x)
    return MSEResult(
        mechanism=mechanism.name,
        mse=mse,
        ci_low=max(0.0, mse - half),
        ci_high=mse + half,
        normalized_mse=mse / norm2 if norm2 > 0 else float("inf"),
        max_bias_z=float(zs.max()),
        bias_z_threshold=float(stats.norm.isf((1 - confidence) / (2 * d))),
        samples=samples,
        confidence=confidence,
        seed=None if seed is None else int(seed),
        params=mechanism.params(),
    )


@dataclass(frozen=True)
class VarianceCurve:
    """MSE against d/k for SSTQ (private and non-private) next to vqSGD (private and not)
    and PrivUnitG (the optimal unbiased ε-LDP randomizer)."""

    dim: int
    epsilon: float
    levels: int
    ks: tuple[int, ...]
    d_over_k: tuple[float, ...]
    sstq: tuple[MSEResult, ...]
    sstq_nonprivate: tuple[MSEResult, ...]
    vqsgd: MSEResult
    vqsgd_nonprivate: MSEResult
    privunitg: MSEResult
    slope_private: float  # least-squares slope of log MSE on log(d/k)
    slope_nonprivate: float
    samples: int
    seed: int | None

    def to_dict(self) -> dict[str, Any]:
        from fedaudit.json import jsonable  # strict JSON: the slope of a single k is "nan"

        return jsonable({
            "dim": self.dim, "epsilon": self.epsilon, "levels": self.levels,
            "ks": list(self.ks), "d_over_k": list(self.d_over_k),
            "sstq": [r.to_dict() for r in self.sstq],
            "sstq_nonprivate": [r.to_dict() for r in self.sstq_nonprivate],
            "vqsgd": self.vqsgd.to_dict(), "vqsgd_nonprivate": self.vqsgd_nonprivate.to_dict(), "privunitg": self.privunitg.to_dict(),
            "slope_private": self.slope_private, "slope_nonprivate": self.slope_nonprivate,
            "samples": self.samples, "seed": self.seed,
        })


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log y on log x (the exponent a in y ∝ x^a)."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    if len(lx) < 2:
        return float("nan")
    return float(np.polyfit(lx, ly, 1)[0])


def variance_vs_dk(dim: int, ks: Sequence[int], epsilon: float, *, levels: int = 2, clip: float = 1.0,
                   samples: int = 20_000, seed: int = 0, x: Any = None,
                   progress: ProgressFn | None = None, backend: str | None = None, workers: int | None = None,
                   address: str | None = None, checkpoint: Any = None, resume: bool = False) -> VarianceCurve:
    """Measure MSE(d/k) for SSTQ at fixed total ε and ``levels``, with and without privacy,
    and the k-independent references vqSGD(ε) and PrivUnitG(ε), all at the same x.

    x defaults to a random direction of norm ``clip`` (seeded). Each measurement gets its own
    child of ``SeedSequence(seed)``; the blocks of all 2·len(ks) + 3 measurements run as one
    :func:`fedaudit.engine.iter_chunks` call with ``backend``, ``workers``, ``address``,
    ``checkpoint`` and ``resume`` (checked before any draw), as in :func:`measure_mse`.
    """
    from fedaudit.mechanisms.privunit import PrivUnitG
    from fedaudit.mechanisms.sstq import SSTQ
    from fedaudit.mechanisms.vqsgd import VQSGD

    engine = _engine_options(backend, workers, address, checkpoint, resume, seed)
    dim = check_int("dim", dim, low=1)
    samples = check_int("samples", samples, low=2, high=MAX_SAMPLES, high_name="10^12")
    levels = check_levels(levels)
    ks = tuple(check_int("k", k, low=1, high=dim, high_name="dim") for k in ks)
    if not ks:
        raise FedAuditError("ks must list at least one k in [1, dim]")
    root = as_seed_sequence(seed)
    x_seed, *children = root.spawn(2 * len(ks) + 4)
    if x is None:
        g = np.random.default_rng(x_seed).normal(size=dim)
        x = clip * g / np.linalg.norm(g)
    x = check_vector("x", x, dim=dim)
    mechanisms: list[Mechanism] = []
    for k in ks:
        mechanisms += [SSTQ(dim, k, levels, epsilon, clip), SSTQ(dim, k, levels, None, clip)]
    mechanisms += [VQSGD(dim, epsilon, clip), VQSGD(dim, None, clip), PrivUnitG(dim, epsilon, clip=clip)]
    *sstq, vq, vq0, pu = _measure_all(mechanisms, x, samples, children, seed=None, confidence=0.95, chunk=2_000,
                                      progress=progress, **engine)
    private, nonprivate = sstq[0::2], sstq[1::2]
    dk = tuple(dim / k for k in ks)
    return VarianceCurve(
        dim=dim, epsilon=float(epsilon), levels=levels, ks=ks, d_over_k=dk,
        sstq=tuple(private), sstq_nonprivate=tuple(nonprivate), vqsgd=vq, vqsgd_nonprivate=vq0, privunitg=pu,
        slope_private=loglog_slope(dk, [r.mse for r in private]),
        slope_nonprivate=loglog_slope(dk, [r.mse for r in nonprivate]),
        samples=samples, seed=seed,
    )
