"""Audit Flower's central-DP strategy wrappers inside real Flower simulations, with canary clients.

**The wrappers** (flwr 1.42, ``flwr/serverapp/strategy/dp_fixed_clipping.py`` and
``dp_adaptive_clipping.py``, client mods in ``flwr/clientapp/mod/centraldp_mods.py``; the shared
arithmetic in ``flwr/supercore/differential_privacy.py``). Each round the m = ``num_sampled_clients``
replies are clipped (FlatClip to C over all arrays jointly: at the server, or at the client by
``fixedclipping_mod`` / ``adaptiveclipping_mod``), averaged by the wrapped ``FedAvg`` and
N(0, s²) noise is added to every coordinate of the average with s = z·C/m (``compute_stdv``,
differential_privacy.py:61-68). Fixed clipping keeps C; adaptive clipping (Andrew et al. 2021,
arXiv:1905.03871) replaces z by z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2) (``compute_adaptive_noise_params``,
differential_privacy.py:129-169) and moves C every round by C ← C·exp(−η(b̃ − γ)) with b̃ the count of
clipped updates plus N(0, σ_b²), over m (dp_adaptive_clipping.py:105-111).

**The simulation** (:func:`run_central_dp`). ``clients`` supernodes in one
``flwr.simulation.run_simulation`` (:func:`~.simulation.simulate`), all sampled every round (m =
``clients``). The honest clients train logistic regression on their digits partition
(:mod:`.simulation`'s client). Partitions 0 … k−1 (k = ``canaries``) are **canary clients**: in round t
canary j flips a fair coin (seeded by (seed, j, t), unknown to the server) and replies with the global
model plus ``canary_scale``·C₀·u_{j,t} (u_{j,t} a secret random unit vector, also seeded) when it
comes up "in", and with (almost) the zero update when "out": a random step of norm 10⁻⁹·C₀
(:data:`OUT_SCALE`), because Flower's clip divides by the update's norm and an exactly zero update
raises ``ZeroDivisionError`` in the server's aggregation (differential_privacy.py:55-56, 90-91). The next partition is a
**probe** whose update is always ``canary_scale``·C₀ in a fresh random direction: clipped every
round, its norm as the aggregation receives it is the clipping bound actually applied. Every reply
reports ``num-examples`` = 1 (FedAvg's weights equal, as Flower's accounted mode requires,
dp_fixed_clipping.py:176-200).

**Observation, not modification.** Two instance-level observers call Flower's own methods and record
their inputs and outputs: the wrapped FedAvg's ``aggregate_train`` (the replies after clipping: the
probe's norm = the clip applied, C_t) and the wrapper's ``_add_noise_to_aggregated_arrays``
(average before and after noise: the noise actually added, whose RMS over the d coordinates
estimates s_t with relative standard error 1/√(2d)). The effective noise multiplier of round t is
z_eff,t = s_t·m / C_t: the noise reaching the aggregate in units of that round's sensitivity C_t/m.

**The audit** (:func:`audit_central_dp`). A canary (j, t) changes only round t's average, by
C_t/m·u_{j,t} (a client's update replaced by the zero update: the neighbouring relation under which
Flower's accountant composes ``GaussianDpEvent(z)``, add/remove, no amplification); later rounds see
it only through the released model (post-processing). So each canary is protected by one release:
ε_claim = Flower's own ``RdpAccountant`` after one ``GaussianPrivacyEvent(z_claimed, m, m)``. The score
of canary (j, t) is ⟨x_t − x_{t−1}, u_{j,t}⟩·m/C_t and the k·T scores, split by the coins, go to
:func:`fedaudit.audit.one_run.one_run_audit` (Steinke–Nasr–Jagielski 2023): a certified lower bound
ε_lb at ``confidence``. ε_lb > ε_claim is a certified violation. With tens of canaries the bound stays
far below a correct claim (a correct run is not flagged; with 32 canaries ε_lb cannot exceed ≈ 2.4) and
catches only gross mismatches, such as a wrapper run at z = 0.02 whose accountant is told z = 3.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from fedaudit.audit.one_run import OneRunAudit, one_run_audit
from fedaudit.errors import FedAuditError
from fedaudit.integrations.flower._flwr import require_flwr
from fedaudit.json import jsonable
from fedaudit.rng import derive_generator, derive_seed
from fedaudit.validation import check_choice, check_int, check_positive, check_probability, check_real

require_flwr()

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp.mod import adaptiveclipping_mod, fixedclipping_mod  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import (  # noqa: E402
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideAdaptiveClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
)
from flwr.supercore.privacy_accounting import NeighboringRelation, PrivacyConfig, SamplingMethod  # noqa: E402
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant  # noqa: E402

from fedaudit.integrations.flower.accountant_check import flower_epsilon  # noqa: E402
from fedaudit.integrations.flower.records import flatten, unflatten  # noqa: E402
from fedaudit.integrations.flower.simulation import client_app, federated_digits, simulate, train_config  # noqa: E402
from fedaudit.integrations.flower.strategy import PARTITION_KEY  # noqa: E402

__all__ = ["WRAPPERS", "CentralDpRound", "CentralDpRun", "CentralDpAudit", "run_central_dp", "audit_central_dp"]

#: the audited wrappers: name → (Flower class, client mod or None, adaptive)
WRAPPERS: dict[str, tuple[type, Callable[..., Any] | None, bool]] = {
    "server-fixed": (DifferentialPrivacyServerSideFixedClipping, None, False),
    "client-fixed": (DifferentialPrivacyClientSideFixedClipping, fixedclipping_mod, False),
    "server-adaptive": (DifferentialPrivacyServerSideAdaptiveClipping, None, True),
    "client-adaptive": (DifferentialPrivacyClientSideAdaptiveClipping, adaptiveclipping_mod, True),
}
_NOISE_METHOD = "_add_noise_to_aggregated_arrays"  # the wrappers' noising step (both base classes)
#: norm of an "out" canary's update, in units of C₀: Flower's FlatClip computes min(1, C/‖u‖) and raises
#: ZeroDivisionError on an exactly zero update (flwr/supercore/differential_privacy.py:55-56 and 90-91)
OUT_SCALE = 1e-9


@dataclass(frozen=True)
class CentralDpRound:
    """One round as measured: ``clip`` the bound applied to this round's updates (the probe's clipped
    norm), ``clip_next`` the wrapper's ``clipping_norm`` after aggregating it, ``noise_rms`` the RMS of
    the noise added to the average, ``z_effective`` = noise_rms·m/clip, ``canary_in`` the coins and
    ``scores`` ⟨x_t − x_{t−1}, u⟩·m/clip of the canaries, ``clipped`` how many replies were clipped."""

    round: int
    clip: float
    clip_next: float
    noise_rms: float
    z_effective: float
    clipped: int
    canary_in: tuple[bool, ...]
    scores: tuple[float, ...]


@dataclass(frozen=True)
class CentralDpRun:
    """A :func:`run_central_dp` simulation: the wrapper and its settings, Flower's own noise multiplier
    attribute after construction (``z_used``: z for fixed clipping, z_Δ for adaptive), the measured
    rounds, Flower's ε of the whole run (``eps_flower_run``: the fixed wrappers' own accountant, None
    for adaptive, which has none) and the model dimension ``d``."""

    wrapper: str
    noise_multiplier: float
    z_used: float
    clipping_norm: float
    clients: int
    canaries: int
    rounds: tuple[CentralDpRound, ...]
    delta: float
    eps_flower_run: float | None
    d: int
    seed: int
    settings: dict[str, Any] = field(default_factory=dict)
    wall_time_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return jsonable(asdict(self))

    def summary(self) -> str:
        z = np.array([r.z_effective for r in self.rounds])
        return (f"{self.wrapper}: z = {self.noise_multiplier:g} (Flower uses {self.z_used:.4g}), C₀ = "
                f"{self.clipping_norm:g}, {self.clients} clients, {len(self.rounds)} rounds; measured z_eff "
                f"{z.min():.4g} … {z.max():.4g}; clip {self.rounds[0].clip:.4g} → {self.rounds[-1].clip_next:.4g}"
                f" ({self.wall_time_s:.1f} s)")


def _canary(seed: int, partition: int, rnd: int, d: int) -> tuple[bool, np.ndarray]:
    """The coin and secret unit direction of canary ``partition`` in round ``rnd`` (the probe's coin is unused)."""
    g = derive_generator(seed, f"flower-central-dp-canary;partition={partition};round={rnd}")
    coin = bool(g.integers(0, 2))
    u = g.standard_normal(d)
    return coin, u / np.linalg.norm(u)


def _canary_mod(seed: int, canaries: int, scale: float, canary_scale: float) -> Callable[..., Message]:
    """Client mod: canary partitions (< ``canaries``) reply with the global model + coin·scale·u, the probe
    (partition ``canaries``) with + scale·u; every reply reports num-examples = 1."""

    def canary_mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        out = call_next(msg, context)
        if out.has_error():
            return out
        pid = int(context.node_config["partition-id"])
        metrics = out.content["metrics"]
        metrics["num-examples"] = 1
        if pid <= canaries:
            sent, layout = flatten(msg.content["arrays"])
            coin, u = _canary(seed, pid, int(msg.content["config"]["server-round"]), sent.size)
            if coin or pid == canaries:
                update = scale * u
            else:  # "out": a 1e-9·C₀ step off the model, not an exact zero, which Flower's clip divides by
                g = derive_generator(seed, f"flower-central-dp-out;partition={pid};round={msg.content['config']['server-round']}")
                w = g.standard_normal(sent.size)
                update = OUT_SCALE * scale / canary_scale * w / np.linalg.norm(w)
            out.content["arrays"] = unflatten(sent + update, layout)
        return out

    return canary_mod


def _check_wrapper_noise(strategy: Any) -> None:
    if not callable(getattr(strategy, _NOISE_METHOD, None)):
        raise FedAuditError(f"{type(strategy).__name__} has no {_NOISE_METHOD}(): this audit reads Flower 1.42's "
                            f"central-DP wrappers, whose noising step it observes; flwr changed it")


def run_central_dp(wrapper: str, *, noise_multiplier: float, clipping_norm: float = 1.0, clients: int = 6,
                   canaries: int = 4, rounds: int = 10, seed: int = 0, canary_scale: float = 10.0,
                   delta: float = 1e-5, target_clipped_quantile: float = 0.5, clip_norm_lr: float = 0.2,
                   clipped_count_stddev: float | None = None, lr: float = 0.5, local_steps: int = 2,
                   num_cpus: int = 2) -> CentralDpRun:
    """Run Flower's ``wrapper`` (one of :data:`WRAPPERS`) around ``FedAvg`` for ``rounds`` rounds in a real
    simulation with ``canaries`` canary clients and one probe (module docstring) and measure every round.

    ``clipping_norm`` is the fixed C or the adaptive wrappers' ``initial_clipping_norm``; the canary and probe
    updates have norm ``canary_scale``·C₀ (> C₀: always clipped while C stays below it). The fixed wrappers
    run with Flower's own ``RdpAccountant`` (no amplification, population ``clients``) at ``delta``.
    """
    wrapper = check_choice("wrapper", wrapper, tuple(WRAPPERS))
    noise_multiplier = check_real("noise_multiplier", noise_multiplier, low=0.0)
    clipping_norm = check_positive("clipping_norm", clipping_norm)
    clients = check_int("clients", clients, low=2, high=100)
    canaries = check_int("canaries", canaries, low=1, high=clients - 1)
    if canaries + 1 > clients:
        raise FedAuditError(f"clients must be at least canaries + 1 (the probe), got clients={clients}, "
                            f"canaries={canaries}")
    rounds = check_int("rounds", rounds, low=1, high=10_000)
    seed = check_int("seed", seed, low=0)
    canary_scale = check_real("canary_scale", canary_scale, low=1.0, open_low=True)
    delta = check_probability("delta", delta)
    cls, client_mod, adaptive = WRAPPERS[wrapper]
    if not adaptive and noise_multiplier == 0:
        raise FedAuditError("noise_multiplier must be > 0 for the fixed wrappers (their accountant needs it)")
    _, (A_test, _) = federated_digits(seed, clients, "iid", None)
    n_features = A_test.shape[1]
    d = (n_features + 1) * 10
    scale = canary_scale * clipping_norm
    records: dict[int, dict[str, Any]] = {}
    released: dict[int, np.ndarray] = {}
    out: dict[str, Any] = {}
    failures: list[str] = []

    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        inner = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=clients,
                       min_available_nodes=clients)
        if adaptive:
            strategy = cls(inner, noise_multiplier, clients, initial_clipping_norm=clipping_norm,
                           target_clipped_quantile=target_clipped_quantile, clip_norm_lr=clip_norm_lr,
                           clipped_count_stddev=clipped_count_stddev)
        else:
            accountant = RdpAccountant(PrivacyConfig(target_delta=delta, population_size=clients,
                                                     neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                                                     sampling_method=SamplingMethod.NO_AMPLIFICATION))
            strategy = cls(inner, noise_multiplier, clipping_norm, clients, accountant=accountant)
        _check_wrapper_noise(strategy)
        out["z_used"] = float(strategy.noise_multiplier)
        inner_aggregate, add_noise = inner.aggregate_train, getattr(strategy, _NOISE_METHOD)

        def observed_aggregate(server_round: int, replies: Any) -> Any:
            replies = list(replies)
            prev = released[server_round - 1]
            norms = {}
            errors = [str(reply.error.reason) for reply in replies if reply.has_error()]
            failures.extend(errors)
            for reply in replies:
                if not reply.has_error():
                    x, _ = flatten(reply.content["arrays"])
                    norms[int(reply.content["metrics"][PARTITION_KEY])] = float(np.linalg.norm(x - prev))
            records[server_round] = {"norms": norms}
            return inner_aggregate(server_round, replies)

        def observed_noise(aggregated: ArrayRecord) -> ArrayRecord:
            before, _ = flatten(aggregated)
            noised = add_noise(aggregated)
            after, _ = flatten(noised)
            rnd = max(records)
            records[rnd]["noise"] = after - before
            records[rnd]["clip_next"] = float(strategy.clipping_norm)
            return noised

        inner.aggregate_train = observed_aggregate  # instance observers: Flower's class methods run unchanged
        setattr(strategy, _NOISE_METHOD, observed_noise)

        def central(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            released[server_round], _ = flatten(arrays)
            return MetricRecord({})

        state = np.random.get_state()  # Flower's server noise draws from numpy's global RNG
        np.random.seed(derive_seed(seed, f"flower-central-dp-server;{wrapper}") % 2**32)
        try:
            strategy.start(grid=grid, initial_arrays=ArrayRecord({"W": Array(np.zeros((10, n_features))),
                                                                  "b": Array(np.zeros(10))}),
                           num_rounds=rounds, evaluate_fn=central,
                           train_config=ConfigRecord(train_config(seed=seed, clients=clients, partition="iid",
                                                                  lr=lr, local_steps=local_steps)))
        finally:
            np.random.set_state(state)
        out["eps_flower_run"] = None if adaptive else float(strategy.privacy_spent().epsilon)

    mods = ([client_mod] if client_mod is not None else []) + [_canary_mod(seed, canaries, scale, canary_scale)]
    wall = simulate(server_app, client_app(mods), clients, num_cpus)
    missing = [t for t in range(1, rounds + 1) if t not in released or "noise" not in records.get(t, {})]
    if missing:
        why = f"; client errors: {sorted(set(failures))}" if failures else ""
        raise FedAuditError(f"the Flower simulation of {wrapper} released no noised model in rounds {missing}{why}")
    rows = []
    for t in range(1, rounds + 1):
        rec = records[t]
        clip = rec["norms"][canaries]
        noise = rec["noise"]
        rms = float(np.sqrt(np.mean(noise ** 2)))
        step = released[t] - released[t - 1]
        coins, scores = [], []
        for j in range(canaries):
            coin, u = _canary(seed, j, t, d)
            coins.append(coin)
            scores.append(float(step @ u) * clients / clip)
        clipped = sum(1 for n in rec["norms"].values() if n >= clip * (1 - 1e-9))
        rows.append(CentralDpRound(round=t, clip=clip, clip_next=rec["clip_next"], noise_rms=rms,
                                   z_effective=rms * clients / clip, clipped=clipped, canary_in=tuple(coins),
                                   scores=tuple(scores)))
    return CentralDpRun(wrapper=wrapper, noise_multiplier=noise_multiplier, z_used=out["z_used"],
                        clipping_norm=clipping_norm, clients=clients, canaries=canaries, rounds=tuple(rows),
                        delta=delta, eps_flower_run=out["eps_flower_run"], d=d, seed=seed,
                        settings={"canary_scale": canary_scale, "target_clipped_quantile": target_clipped_quantile,
                                  "clip_norm_lr": clip_norm_lr, "clipped_count_stddev": clipped_count_stddev,
                                  "lr": lr, "local_steps": local_steps},
                        wall_time_s=wall)


@dataclass(frozen=True)
class CentralDpAudit:
    """The one-run audit of a :class:`CentralDpRun`: ``eps_claim`` = Flower's RdpAccountant for one release at
    ``z_claimed`` (what protects one canary), ``one_run`` the certified lower bound over the k·T canaries,
    ``violation`` — ε_lb > ε_claim (certified at ``one_run.confidence``)."""

    wrapper: str
    z_claimed: float
    eps_claim: float
    delta: float
    one_run: OneRunAudit
    violation: bool

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"wrapper": self.wrapper, "z_claimed": self.z_claimed, "eps_claim": self.eps_claim,
                         "delta": self.delta, "one_run": self.one_run.to_dict(), "violation": self.violation})

    def summary(self) -> str:
        verdict = "VIOLATION" if self.violation else "consistent"
        return (f"{self.wrapper}: per-canary claim ε = {self.eps_claim:.4f} (one release, z = {self.z_claimed:g}, "
                f"δ = {self.delta:g}); {self.one_run.summary()} → {verdict}")


def audit_central_dp(run: CentralDpRun, *, z_claimed: float | None = None, confidence: float = 0.95) -> CentralDpAudit:
    """One-run audit of ``run``'s canaries against Flower's ε for one release at ``z_claimed`` (default: the
    noise multiplier the wrapper was configured with). See the module docstring."""
    if not isinstance(run, CentralDpRun):
        raise FedAuditError(f"run must be a CentralDpRun (from run_central_dp), got {type(run).__name__}")
    z = run.noise_multiplier if z_claimed is None else check_positive("z_claimed", z_claimed)
    if z <= 0:
        raise FedAuditError("the run's noise_multiplier is 0: give z_claimed > 0, the noise the accountant is told")
    eps_claim, _ = flower_epsilon(z, 1.0, 1, run.delta, sampling="no-amplification", population=run.clients)
    coins = np.array([c for r in run.rounds for c in r.canary_in], dtype=bool)
    scores = np.array([s for r in run.rounds for s in r.scores])
    res = one_run_audit(scores[coins], scores[~coins], delta=run.delta, confidence=confidence)
    return CentralDpAudit(wrapper=run.wrapper, z_claimed=z, eps_claim=eps_claim, delta=run.delta, one_run=res,
                          violation=res.epsilon > eps_claim)
