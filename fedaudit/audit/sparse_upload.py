"""What one client's sparse upload leaks about one of its records: a black-box LDP audit.

The audited randomizer is the whole client pipeline ``D ↦ upload(local_update(state, D))``:
local training from the broadcast ``state`` on the client's dataset D (its randomness — gate
noise, minibatches — is the sampler's randomness), then the upload of the resulting
:class:`~fedaudit.mechanisms.gated.ClientUpdate`. The two audited inputs are neighbouring
datasets D0, D1 (one record replaced), so the sampler of :func:`fedaudit.audit.audit_ldp` maps
the indicator x ∈ {0, 1} to draws of the upload on D_x. Any ε-LDP upload mechanism M gives an
ε-DP pipeline (post-processing of a function of D), so the certified bound on
P[M(U(D1)) ∈ E] ≤ e^ε P[M(U(D0)) ∈ E] must stay ≤ the stated ε of the private variant; the
plain gated upload (top-m indices by gate probability, exact values) states nothing and is
expected to leak: the index set moves with the record.

A report is the decoded packet as a dense row ``[1{j sent}, value_j, gate_j]_{j<|θ|}`` (plain
upload, decoded from the exact wire bytes) or the private mechanism's own report.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import numpy as np

from fedaudit.audit.ldp import LDPAudit, audit_ldp
from fedaudit.audit.sampling import ProgressFn, Sampler
from fedaudit.errors import FedAuditError
from fedaudit.json import jsonable

__all__ = ["SparseUploadAudit", "upload_sampler", "packet_row", "audit_upload"]

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


def upload_sampler(local_update: Callable[[Any, np.random.Generator], Any], datasets: tuple[Any, Any],
                   report: Callable[[Any, np.random.Generator], np.ndarray]) -> Sampler:
    """The black-box sampler of the pipeline: ``sampler(x, size, rng)`` draws ``size`` reports
    ``report(local_update(D_x, r_i), r_i')`` with x ∈ {0, 1} choosing the dataset and one child
    generator per draw (so the draws do not depend on how the audit blocks them)."""

    def sampler(x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        data = datasets[int(x[0] > 0.5)]
        seeds = rng.integers(0, 2**63, size=size)
        rows = []
        for s in seeds:
            r = np.random.default_rng(int(s))
            rows.append(np.asarray(report(local_update(data, r), r), dtype=np.float64).ravel())
        return np.stack(rows)

    return sampler


@dataclass(frozen=True)
class SparseUploadAudit:
    """Result of an upload audit. ``epsilon_lower`` is certified at ``confidence`` for the pipeline
    D ↦ upload(local_update(D)) on the neighbouring pair; ``epsilon_claimed`` is the private
    variant's stated ε (None: the plain upload claims nothing). ``violation``: the bound exceeds
    the stated ε. ``bytes_sparse``/``bytes_dense``: one client's upload per round on the wire
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

    @property
    def bytes_ratio(self) -> float:
        """bytes_sparse / bytes_dense."""
        return self.bytes_sparse / self.bytes_dense

    def to_dict(self) -> dict[str, Any]:
        return jsonable({**asdict(self), "bytes_ratio": self.bytes_ratio})

    def summary(self) -> str:
        claim = ("no stated ε" if self.epsilon_claimed is None
                 else f"stated ε = {self.epsilon_claimed:g}" + (" — VIOLATED" if self.violation else ""))
        return (f"{self.upload} upload (|θ| = {self.dim}, m = {self.m}): certified ε ≥ {self.epsilon_lower:.3f} at "
                f"{self.confidence:.0%} ({claim}; at most {self.max_certifiable:.2f} certifiable with "
                f"{self.samples} draws); {self.bytes_sparse} B vs {self.bytes_dense} B dense per client per round "
                f"({self.bytes_ratio:.1%}); {self.runtime_s:.1f} s")


def audit_upload(sampler: Sampler, *, upload: str, epsilon: float | None, dim: int, m: int, bytes_sparse: int,
                 bytes_dense: int, neighbour: dict[str, Any], samples: int, confidence: float, seed: int | None,
                 test: str = "black-box", progress: ProgressFn | None = None) -> SparseUploadAudit:
    """Certify a lower bound on the ε of the pipeline ``sampler`` (:func:`upload_sampler`) with
    :func:`~fedaudit.audit.audit_ldp` in black-box mode on the indicator pair (0, 1).

    ``epsilon`` is the stated ε of a private upload (None for the plain upload: the bound is
    reported and nothing is claimed; the LDP game then runs against a nominal claim that only
    its verdict fields would read, which are reset).
    """
    t0 = time.perf_counter()
    nominal = 1.0 if epsilon is None else epsilon
    res: LDPAudit = audit_ldp(sampler, X0, X1, epsilon=nominal, delta=0.0, samples=samples,
                              confidence=confidence, test=test, seed=seed, progress=progress)
    if epsilon is None:
        res = replace(res, epsilon_claimed=None, violation=False, tightness=None,
                      notes=[n for n in res.notes if "claimed" not in n])
    return SparseUploadAudit(upload=upload, epsilon_lower=res.epsilon_lower, epsilon_claimed=epsilon,
                             violation=res.violation, max_certifiable=res.max_certifiable, samples=res.samples,
                             seed=res.seed, confidence=res.confidence, dim=int(dim), m=int(m),
                             bytes_sparse=int(bytes_sparse), bytes_dense=int(bytes_dense), neighbour=dict(neighbour),
                             runtime_s=time.perf_counter() - t0, ldp=res.to_dict())
