"""Check targets for Flower (flwr 1.42): ``local-dp-mod`` and ``flower-central``.

**local-dp-mod** — ``LocalDpMod(clipping_norm, sensitivity, epsilon, delta)``: the exact ε under
local DP of the Gaussian noise Flower calibrates (:func:`fedaudit.integrations.flower.local_dp_audit.local_dp_mod_epsilon`,
whose module docstring derives it; the ``flower-local-dp`` claim audits the same mod in black box).
Its claim is the mod's own (ε, δ) per round; the fix is the ``sensitivity`` at which Flower's own
formula reaches the σ the claim needs.

**flower-central** — Flower's central-DP strategy wrappers
(``DifferentialPrivacy{Server,Client}Side{Fixed,Adaptive}Clipping``, ``serverapp/strategy/``): each
round the ``m = num_sampled_clients`` updates, clipped to C, are averaged and
N(0, (z·C/m)²) is added per coordinate (``supercore/differential_privacy.py``, ``compute_stdv``:
``noise_multiplier · clipping_norm / num_sampled_clients``). With equal client weights (what
Flower's own accounted path requires, ``dp_fixed_clipping.py`` ``_validate_uniform_weights``) the
mean has L2 sensitivity C/m under add/remove and 2C/m under replace-one. ``sampling``:

* ``without-replacement`` (default; what Flower does: its grid samples a fixed number of nodes, m
  of N, without replacement): neighbours *replace one client* (N is public), and one round is
  dp-accounting's ``SampledWithoutReplacementDpEvent(N, m, GaussianDpEvent(z/2))`` — the noise
  multiplier over the *replace-one* sensitivity 2C, which is z/2 — accounted by the RDP bound of
  Wang, Balle, Kasiviswanathan (2019, Thm. 27; fedaudit's ``dpa-rdp``, the one accountant that
  supports it), an upper bound;
* ``poisson``: every client independently with q = m/N, add/remove neighbours
  (:func:`~fedaudit.accounting.dpsgd_event`): the usual DP-FedAvg accounting, *not* valid for
  Flower's fixed-size sampler (stated in the result's notes);
* ``none``: no amplification (each round a Gaussian of multiplier z, add/remove).

**Adaptive clipping** (Andrew et al. 2021, arXiv:1905.03871; ``compute_adaptive_noise_params``):
Flower takes the configured z as the round's *total* noise multiplier, gives the clipped count
(the number of sampled updates whose norm exceeded the current norm) noise σ_b (default m/20) and
the update z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2). Jointly, under replace-one (update sensitivity 2C, count
sensitivity 1), that is one Gaussian of noise multiplier z over 2C, as intended; under add/remove
the count (uncentred, as Flower sums the bits) has sensitivity 1, so the joint multiplier is
(z_Δ⁻² + σ_b⁻²)^(−1/2) < z. And Flower scales the round's noise with the clipping norm it has just
*updated* from the noisy count (``aggregate_train`` calls ``_geometric_update`` before
``_add_noise_to_aggregated_arrays``), while the updates were clipped with the old norm: the
effective update multiplier is z_Δ·C_{t+1}/C_t, C_{t+1}/C_t = exp(−η(b̃ − γ)) with b̃ the noisy
clipped fraction, below z_Δ whenever b̃ > γ. fedaudit certifies an upper bound: b̃ ≤ 1 + k·σ_b/m
except with probability δ_t = Φ(−k) per round; on that event the ratio is at least
r = exp(−η(1 + kσ_b/m − γ)), and the mechanism with the ratio floored at r is a post-processing of
the joint Gaussian with the update multiplier z_Δ·r (extra noise added given b̃), so it is
accounted as that Gaussian; the real mechanism differs from it with probability ≤ T·δ_t, so its δ is
δ_acc + (1 + e^ε)·T·δ_t, with δ_acc = δ/2 and k chosen so the second term is at most δ/2.
"""

from __future__ import annotations

import math
from typing import Any

from fedaudit.errors import FedAuditError
from fedaudit.integrations.check.targets import CheckResult, library_version, register_target

__all__ = ["check_local_dp_mod", "check_flower_central", "flower_central_event", "adaptive_noise"]

#: lines of flwr 1.42's code the central check rests on (cited in its notes)
_ADAPTIVE_ORDER = ("flwr/serverapp/strategy/dp_adaptive_clipping.py: the server-side wrapper's aggregate_train updates "
                   "the clipping norm (_geometric_update, line 216) before _add_noise_to_aggregated_arrays scales the "
                   "noise with it (line 223); the client-side one likewise (lines 319 and 322)")


def check_local_dp_mod(clipping_norm: float, sensitivity: float | None, epsilon: float, delta: float,
                       claimed_epsilon: float | None = None) -> CheckResult:
    """The exact ε per round of ``LocalDpMod(clipping_norm, sensitivity, epsilon, delta)`` under local
    DP against its own ε (or ``claimed_epsilon``), and the ``sensitivity`` that would meet it."""
    from fedaudit.integrations.flower.local_dp_audit import flower_sigma, local_dp_mod_epsilon

    sensitivity = clipping_norm if sensitivity is None else sensitivity
    claim = epsilon if claimed_epsilon is None else claimed_epsilon
    cal = local_dp_mod_epsilon(clipping_norm, sensitivity, epsilon, delta)
    fix = None
    if cal.epsilon_true > claim:
        if claim == epsilon:
            needed = cal.sensitivity_needed
        else:  # a claim other than the mod's own: the sensitivity whose σ gives exactly that claim
            from fedaudit.mechanisms.gaussian import analytic_gaussian_sigma

            sigma = analytic_gaussian_sigma(claim, delta, 2.0 * cal.clipping_norm)
            needed = sigma * epsilon / math.sqrt(2.0 * math.log(1.25 / delta))
            while flower_sigma(needed, epsilon, delta) < sigma:
                needed = math.nextafter(needed, math.inf)
        fix = (f"set sensitivity = {needed:.6g} (= {needed / cal.clipping_norm:.4f}·clipping_norm; "
               f"LocalDpMod's σ is then ≥ {flower_sigma(needed, epsilon, delta):.4g})")
    return CheckResult(
        target="local-dp-mod", library=library_version("flwr"),
        configuration=f"LocalDpMod(clipping_norm={clipping_norm:g}, sensitivity={sensitivity:g}, epsilon={epsilon:g}, "
                      f"delta={delta:g})",
        claimed_epsilon=claim, claim_source="LocalDpMod's epsilon" if claimed_epsilon is None else "the claim given",
        epsilon_true=cal.epsilon_true, delta=delta, unit="per round", bound="exact", fix=fix,
        details=cal.to_dict(),
        notes=("local DP: any two client updates are neighbours, so the clipped update's L2 sensitivity is "
               "2·clipping_norm; exact ε of the Gaussian at that sensitivity (Balle & Wang 2018, Thm. 8)",
               f"Flower's σ = sensitivity·√(2 ln(1.25/δ))/ε = {cal.sigma:.6g} (flwr/supercore/differential_privacy.py)"))


def adaptive_noise(noise_multiplier: float, num_sampled_clients: int,
                   clipped_count_stddev: float | None) -> tuple[float, float]:
    """(σ_b, z_Δ) of Flower's adaptive wrappers for a configured z (``compute_adaptive_noise_params``:
    σ_b defaults to m/20; Flower refuses z ≥ 2σ_b, and so does this)."""
    sigma_b = num_sampled_clients / 20 if clipped_count_stddev is None else clipped_count_stddev
    if noise_multiplier >= 2 * sigma_b:
        raise FedAuditError(f"= {noise_multiplier:g} must be < 2·clipped_count_stddev = {2 * sigma_b:g} under "
                            f"adaptive clipping (Flower refuses it too; clipped_count_stddev defaults to m/20)")
    return sigma_b, (noise_multiplier ** -2 - (2 * sigma_b) ** -2) ** -0.5


def flower_central_event(noise_multiplier: float, num_sampled_clients: int, population: int, rounds: int,
                         sampling: str) -> tuple[Any, str, str]:
    """(the dp-accounting event of ``rounds`` rounds, the neighbouring relation, the default
    accountant) for a *joint* noise multiplier z over the add/remove sensitivity C (module docstring)."""
    from dp_accounting import dp_event

    from fedaudit.accounting import dpsgd_event

    q = num_sampled_clients / population
    if sampling == "without-replacement":
        inner = dp_event.GaussianDpEvent(noise_multiplier / 2.0)  # over the replace-one sensitivity 2C
        if num_sampled_clients == population:  # no sampling: the Gaussian of μ = 2/z, stated as add/remove
            return dp_event.SelfComposedDpEvent(inner, rounds), "add-remove", "pld"
        one = dp_event.SampledWithoutReplacementDpEvent(population, num_sampled_clients, inner)
        return dp_event.SelfComposedDpEvent(one, rounds), "replace-one", "dpa-rdp"
    if sampling == "poisson":
        return dpsgd_event(noise_multiplier, q, rounds), "add-remove", "pld"
    return dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(noise_multiplier), rounds), "add-remove", "pld"


def _validate_central(p: dict[str, Any], where: str) -> None:
    """m ≤ N, a known accountant, and adaptive clipping's z < 2σ_b (Flower refuses it)."""
    from fedaudit.accounting import ACCOUNTANTS

    if p.get("accountant") is not None and not ACCOUNTANTS.known(p["accountant"]):
        raise FedAuditError(f"{where}: key 'accountant' must be one of {', '.join(ACCOUNTANTS.names())}, got "
                            f"{p['accountant']!r}")
    if p["num_sampled_clients"] > p["population"]:
        raise FedAuditError(f"{where}: key 'num_sampled_clients' ({p['num_sampled_clients']}) must be at most key "
                            f"'population' ({p['population']})")
    if p["clipping"] == "adaptive" and p["noise_multiplier"] > 0:
        try:
            adaptive_noise(p["noise_multiplier"], p["num_sampled_clients"], p["clipped_count_stddev"])
        except FedAuditError as exc:
            raise FedAuditError(f"{where}: key 'noise_multiplier' {exc}") from None


def _epsilon(z: float, m: int, n: int, rounds: int, sampling: str, delta: float, accountant: str | None) -> float:
    from fedaudit.accounting import account

    if z <= 0:
        return math.inf
    event, relation, default = flower_central_event(z, m, n, rounds, sampling)
    return account(event, delta=delta, accountant=accountant or default, neighbouring=relation).epsilon


def check_flower_central(noise_multiplier: float, clipping_norm: float | None, num_sampled_clients: int,
                         population: int, rounds: int, claimed_epsilon: float, delta: float, sampling: str,
                         clipping: str, clipped_count_stddev: float | None, clip_norm_lr: float,
                         target_clipped_quantile: float, accountant: str | None) -> CheckResult:
    """The client-level ε after ``rounds`` rounds of a Flower central-DP wrapper (module docstring)
    against ``claimed_epsilon``, and the ``noise_multiplier`` that would meet it (fixed clipping)."""
    from fedaudit.accounting import calibrate

    m, n, z = num_sampled_clients, population, noise_multiplier
    _validate_central(dict(num_sampled_clients=m, population=n, noise_multiplier=z, clipping=clipping,
                           clipped_count_stddev=clipped_count_stddev, accountant=accountant), "check flower-central")
    acc_name = accountant or flower_central_event(1.0, m, n, 1, sampling)[2]
    notes = [f"client-level DP, neighbours: {'replace one client (N public)' if sampling == 'without-replacement' else 'add or remove one client'}; "
             f"{sampling} sampling of m = {m} of N = {n} per round; accountant {acc_name!r} (an upper bound)",
             "assumes equal client weights in the mean (Flower's accounted path checks them; FedAvg weighted by "
             "example counts gives a client more than 1/m of the mean, and more sensitivity)"]
    if sampling == "poisson":
        notes.append("Poisson sampling is not what Flower's samplers do (they draw a fixed number of nodes without "
                     "replacement): this ε is the usual DP-FedAvg reading, not a guarantee of the deployment")
    details: dict[str, Any] = {"noise_multiplier": z, "clipping_norm": clipping_norm, "num_sampled_clients": m,
                               "population": n, "sample_rate": m / n, "rounds": rounds, "sampling": sampling,
                               "accountant": acc_name, "clipping": clipping}
    if clipping_norm is not None:
        details["noise_std_on_mean"] = z * clipping_norm / m
    unit = f"after {rounds} round{'s' if rounds > 1 else ''}"
    if clipping == "fixed":
        eps = _epsilon(z, m, n, rounds, sampling, delta, accountant)
        name = "DifferentialPrivacy{Server,Client}SideFixedClipping"
        fix = None
        if eps > claimed_epsilon:
            z_needed = calibrate(lambda x: flower_central_event(x, m, n, rounds, sampling)[0], claimed_epsilon, delta,
                                 accountant=acc_name, neighbouring=flower_central_event(1.0, m, n, 1, sampling)[1])
            fix = f"set noise_multiplier ≥ {z_needed:.4g}"
            details["noise_multiplier_needed"] = z_needed
        if sampling == "without-replacement" and m < n:
            from dp_accounting import dp_event

            from fedaudit.accounting import account

            at_c = account(dp_event.SelfComposedDpEvent(dp_event.SampledWithoutReplacementDpEvent(
                n, m, dp_event.GaussianDpEvent(z)), rounds), delta=delta, accountant=acc_name,
                neighbouring="replace-one").epsilon if z > 0 else math.inf
            details["epsilon_if_replace_one_sensitivity_were_c"] = at_c
            notes.append(f"replacing one client moves the clipped sum by up to 2C, so the noise over that sensitivity "
                         f"is z/2; an accountant that takes it as C reports ε = {at_c:.4g} — Flower's own RdpAccountant "
                         f"with sampling_method='without-replacement' composes SampledWithoutReplacementDpEvent(N, m, "
                         f"GaussianDpEvent(z)) under REPLACE_ONE (flwr/supercore/privacy_accounting/rdp_accountant.py, "
                         f"_to_backend_event, lines 209 and 215-220; Flower's fixed-clipping wrappers take an accountant only "
                         f"with sampling_method='no-amplification', dp_fixed_clipping.py line 104)")
        if acc_name == "pld":
            notes.append("pld: dp-accounting's PLD with pessimistic discretisation, an upper bound within 0.01 % of "
                         "the exact ε")
        return CheckResult(target="flower-central", library=library_version("flwr"),
                           configuration=f"{name}(noise_multiplier={z:g}, num_sampled_clients={m}) over N = {n}",
                           claimed_epsilon=claimed_epsilon, claim_source="the claim given", epsilon_true=eps,
                           delta=delta, unit=unit, bound="upper", fix=fix, details=details, notes=tuple(notes))
    return _check_adaptive(z, m, n, rounds, claimed_epsilon, delta, sampling, clipped_count_stddev, clip_norm_lr,
                           target_clipped_quantile, accountant, details, notes, unit)


def _check_adaptive(z, m, n, rounds, claim, delta, sampling, clipped_count_stddev, lr, gamma_q, accountant,
                    details, notes, unit) -> CheckResult:
    """Adaptive clipping: the certified upper bound of the module docstring."""
    from scipy.stats import norm

    sigma_b, z_delta = adaptive_noise(z, m, clipped_count_stddev) if z > 0 else (clipped_count_stddev or m / 20, 0.0)
    count_sensitivity = 1.0
    update_sensitivity = 2.0 if sampling == "without-replacement" else 1.0  # in units of C

    def joint(ratio: float) -> float:
        """The joint noise multiplier over the add/remove sensitivity C (the event's convention)."""
        if z_delta <= 0:
            return 0.0
        inv = (update_sensitivity / (z_delta * ratio)) ** 2 + (count_sensitivity / sigma_b) ** 2
        return update_sensitivity / math.sqrt(inv) if sampling == "without-replacement" else 1.0 / math.sqrt(inv)

    # the per-round tail δ_t = Φ(−k): shrink until (1 + e^ε)·T·δ_t ≤ δ/2
    delta_acc, delta_tail, certified = delta / 2, delta / (4 * rounds), False
    for _ in range(60):
        k = float(norm.isf(delta_tail))
        ratio = math.exp(-lr * (1.0 + k * sigma_b / m - gamma_q))
        eps = _epsilon(joint(ratio), m, n, rounds, sampling, delta_acc, accountant)
        if math.isinf(eps) or eps > 700:
            eps, certified = math.inf, True
            break
        if (1 + math.exp(eps)) * rounds * delta_tail <= delta / 2:
            certified = True
            break
        delta_tail /= max(2.0, 2.0 * math.exp(eps))
    if not certified:  # the tail never fitted in δ/2: nothing finite is certified
        eps = math.inf
    intended = _epsilon(z, m, n, rounds, sampling, delta, accountant)
    details.update(clipped_count_stddev=sigma_b, update_noise_multiplier=z_delta, noise_ratio_floor=ratio,
                   tail_k=k, tail_delta_per_round=delta_tail, delta_accountant=delta_acc,
                   joint_noise_multiplier_certified=joint(ratio), epsilon_as_designed=intended)
    notes.append(f"adaptive clipping: the count gets σ_b = {sigma_b:g}, the update z_Δ = {z_delta:.4g}; "
                 f"as designed (noise scaled with the norm the updates were clipped to) the rounds would be a "
                 f"Gaussian of joint multiplier {'z' if sampling == 'without-replacement' else f'{joint(1.0):.4g} < z (uncentred count)'}"
                 f" and ε = {intended:.4g}")
    notes.append(f"{_ADAPTIVE_ORDER}: the effective multiplier is z_Δ·exp(−η(b̃ − γ)); certified with the ratio "
                 f"floored at {ratio:.4f} (b̃ ≤ 1 + {k:.2f}·σ_b/m except with probability {delta_tail:.3g} per round)")
    fix = None
    if eps > claim:
        fix = ("raise noise_multiplier or clipped_count_stddev (no closed-form setting: the bound is certified, "
               "not exact)")
    return CheckResult(target="flower-central", library=library_version("flwr"),
                       configuration=f"DifferentialPrivacy{{Server,Client}}SideAdaptiveClipping(noise_multiplier={z:g}, "
                                     f"num_sampled_clients={m}, clipped_count_stddev={sigma_b:g}) over N = {n}",
                       claimed_epsilon=claim, claim_source="the claim given", epsilon_true=eps, delta=delta,
                       unit=unit, bound="upper", fix=fix, details=details, notes=tuple(notes))


register_target("local-dp-mod", "Flower's LocalDpMod(clipping_norm, sensitivity, epsilon, delta): exact ε per round "
                "under local DP", ("clipping_norm", "sensitivity", "epsilon", "delta", "claimed_epsilon"),
                ("clipping_norm", "epsilon"), check_local_dp_mod, "flower-app")
register_target("flower-central", "Flower's central-DP wrappers (fixed or adaptive clipping, server or client side): "
                "client-level ε after the rounds by fedaudit's accountants",
                ("noise_multiplier", "clipping_norm", "num_sampled_clients", "population", "rounds", "claimed_epsilon",
                 "delta", "sampling", "clipping", "clipped_count_stddev", "clip_norm_lr", "target_clipped_quantile",
                 "accountant"),
                ("noise_multiplier", "num_sampled_clients", "population", "rounds", "claimed_epsilon"),
                check_flower_central, "flower-app", validate=_validate_central)
