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
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable

import numpy as np

from fedaudit.audit.ldp import LDPAudit, audit_ldp
from fedaudit.audit.sampling import ProgressFn, Sampler
from fedaudit.errors import FedAuditError
from fedaudit.json import jsonable
from fedaudit.rng import derive_seed
from fedaudit.validation import check_choice, check_int, check_real

__all__ = ["SparseUploadAudit", "UPLOADS", "audit_sparse_upload", "neighbouring_datasets", "upload_sampler",
           "packet_row", "audit_upload"]

#: the audited uploads: the plain top-m gated upload and its private variant ("gated-private")
UPLOADS = ("plain", "private")

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


@contextlib.contextmanager
def _torch_threads(n: int):
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def audit_sparse_upload(upload: str = "plain", *, dim: int = 64, density: float = 0.05, temperature: float = 0.01,
                        epsilon: float = 1.0, claimed_epsilon: float | None = None, records: int = 20,
                        local_steps: int = 5, samples: int = 4000,
                        confidence: float = 0.95, seed: int | None = 0,
                        progress: ProgressFn | None = None) -> SparseUploadAudit:
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
    """
    from fedaudit.fl.eflops import EFLoPS, EFLoPSState, local_update
    from fedaudit.fl.gates import GatedModel, HardConcrete
    from fedaudit.mechanisms.gated import GatedPrivateUpload, GatedSparseUpload, m_for_density
    import torch

    upload = check_choice("upload", upload, UPLOADS)
    dim = check_int("dim", dim, low=4, high=4096)
    m = m_for_density(density, dim)
    temperature = check_real("temperature", temperature, low=0.0)
    epsilon = check_real("epsilon", epsilon, low=0.0, open_low=True)
    stated = epsilon if claimed_epsilon is None else check_real("claimed_epsilon", claimed_epsilon, low=0.0,
                                                                open_low=True)
    records = check_int("records", records, low=2, high=100_000)
    local_steps = check_int("local_steps", local_steps, low=1, high=1000)
    root = 0 if seed is None else seed
    data0, data1, info = neighbouring_datasets(dim, records, m, np.random.default_rng(derive_seed(root, "data")))
    method = EFLoPS(density=density, temperature=temperature, anneal=None, local_steps=local_steps)
    model = GatedModel(torch.nn.Linear(dim, 1, bias=False).double())
    jitter = np.random.default_rng(derive_seed(root, "gates")).standard_normal(dim)
    state = EFLoPSState(method, model, "mse", np.zeros(dim),
                        HardConcrete.log_alpha_for(method.init_density) + 0.01 * jitter, 0.0, temperature)
    wire = GatedSparseUpload(dim, m)

    def step(data, rng):
        return local_update(state, data, rng=rng)

    if upload == "plain":
        def report(update, rng):
            packet = wire.decode(wire.encode(update))
            return packet_row(packet.indices, packet.values, packet.gate_stats, dim)
        claim, sent = (None if claimed_epsilon is None else stated), wire.packet_bytes()
    else:
        private = GatedPrivateUpload(dim, m, epsilon)

        def report(update, rng):
            return private.sample(np.concatenate([update.weights, update.log_alpha]), 1, rng)[0]
        # its report carries the Laplace grid values exactly: float64 values and gates on the wire
        claim, sent = stated, GatedSparseUpload(dim, m, value_dtype="float64").packet_bytes()
    neighbour = {**info, "broadcast": "θ̃ = 0, P(z ≠ 0) = 1/2 (+ N(0, 0.01²) jitter on log α), λ = 0",
                 "local_steps": local_steps, "temperature": temperature}
    with _torch_threads(1):
        return audit_upload(upload_sampler(step, (data0, data1), report), upload=upload, epsilon=claim, dim=dim, m=m,
                            bytes_sparse=sent, bytes_dense=wire.dense_bytes(), neighbour=neighbour, samples=samples,
                            confidence=confidence, seed=seed, progress=progress)
