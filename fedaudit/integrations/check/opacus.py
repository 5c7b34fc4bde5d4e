"""Check target ``opacus``: the ε of an Opacus DP-SGD run, by fedaudit's accountants against Opacus's own.

A run is (σ, q, steps) — or the history of a ``PrivacyEngine``'s accountant, read through Opacus's
public ``state_dict()`` (``history``: one ``(noise_multiplier, sample_rate, steps)`` per stretch of
equal steps) by :func:`check_privacy_engine`. Opacus samples each example with probability q
(Poisson, its ``DPDataLoader``), clips per-example gradients to C and adds N(0, (σC)²): the
Poisson-subsampled Gaussian under add/remove-one-example neighbours, which fedaudit accounts with
dp-accounting's PLD (:func:`~fedaudit.accounting.dpsgd_event`, :func:`~fedaudit.accounting.schedule_event`;
pessimistic discretisation, an upper bound within 0.01 % of the exact ε,
:mod:`fedaudit.accounting.dpsgd`). Opacus's own ε comes from a fresh accountant of the engine's
mechanism (``rdp``, ``prv`` or ``gdp``) loaded with the same history. The claim is Opacus's ε
unless one is given: Opacus's ``gdp`` accountant (the central-limit approximation of Dong, Roth,
Su) is not an upper bound and can under-count, its ``rdp`` over-counts by the RDP-to-DP
conversion, its ``prv`` is within its ``eps_error``.
"""

from __future__ import annotations

from typing import Any, Sequence

from fedaudit.errors import FedAuditError
from fedaudit.extras import require
from fedaudit.integrations.check.targets import CheckResult, library_version, register_target

__all__ = ["check_opacus", "check_privacy_engine", "opacus_epsilon"]


def opacus_epsilon(history: Sequence[tuple[float, float, int]], delta: float, mechanism: str = "rdp") -> float:
    """ε at ``delta`` that Opacus's accountant ``mechanism`` reports for ``history``."""
    accountants = require("opacus.accountants", "the Opacus check target")
    acc = accountants.create_accountant(mechanism)
    acc.load_state_dict({"history": [tuple(h) for h in history], "mechanism": mechanism})
    return float(acc.get_epsilon(delta=delta))


def _check(history: list[tuple[float, float, int]], delta: float, claimed_epsilon: float | None,
           opacus_accountant: str, configuration: str) -> CheckResult:
    from fedaudit.accounting import account, calibrate, schedule_event

    if any(z <= 0 for z, _, _ in history):
        eps = float("inf")
    else:
        eps = account(schedule_event(history), delta=delta, accountant="pld").epsilon
    own = None if opacus_accountant == "none" else opacus_epsilon(history, delta, opacus_accountant)
    if claimed_epsilon is None and own is None:
        raise FedAuditError("check opacus: give key 'claimed_epsilon' or an Opacus accountant (opacus_accountant "
                            "'none' leaves nothing to compare with)")
    claim = own if claimed_epsilon is None else claimed_epsilon
    source = f"Opacus's {opacus_accountant} accountant" if claimed_epsilon is None else "the claim given"
    fix = None
    if eps > claim and len(history) == 1:
        _, q, steps = history[0]
        z = calibrate(lambda x: schedule_event([(x, q, steps)]), claim, delta, accountant="pld")
        fix = f"set noise_multiplier ≥ {z:.4g}"
    elif eps > claim:
        fix = "raise the noise multipliers of the schedule (fedaudit.accounting.calibrate on its schedule_event)"
    steps = sum(s for _, _, s in history)
    notes = ["Poisson sampling, add/remove-one-example neighbours (Opacus's DPDataLoader); fedaudit's ε: "
             "dp-accounting's PLD, pessimistic (an upper bound)"]
    if own is not None:
        notes.append(f"Opacus's {opacus_accountant} accountant reports ε = {own:.4g}"
                     + (" (gdp is a central-limit approximation, not an upper bound; Opacus warns that it "
                        "'can underestimate privacy expenditure', opacus/accountants/gdp.py)"
                        if opacus_accountant == "gdp" else ""))
    return CheckResult(target="opacus", library=library_version("opacus"), configuration=configuration,
                       claimed_epsilon=claim, claim_source=source, epsilon_true=eps, delta=delta,
                       unit=f"after {steps} steps", bound="upper", fix=fix,
                       details={"history": [list(h) for h in history], "epsilon_opacus": own,
                                "opacus_accountant": opacus_accountant, "accountant": "pld"},
                       notes=tuple(notes))


def check_opacus(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                 claimed_epsilon: float | None = None, opacus_accountant: str = "rdp") -> CheckResult:
    """ε after ``steps`` DP-SGD steps of noise multiplier σ at sample rate q (module docstring)."""
    return _check([(noise_multiplier, sample_rate, steps)], delta, claimed_epsilon, opacus_accountant,
                  f"Opacus DP-SGD(noise_multiplier={noise_multiplier:g}, sample_rate={sample_rate:g}, steps={steps})")


def check_privacy_engine(engine: Any, delta: float, claimed_epsilon: float | None = None) -> CheckResult:
    """The check of an Opacus ``PrivacyEngine`` (or its ``accountant``) as trained so far: its history
    through the public ``state_dict()``, Opacus's ε from an accountant of its own mechanism."""
    from fedaudit.integrations.check.targets import PARAMS, TARGETS, validate_params

    acc = getattr(engine, "accountant", engine)
    state = getattr(acc, "state_dict", None)
    mechanism = getattr(acc, "mechanism", None)
    if not callable(state) or not callable(mechanism):
        raise FedAuditError(f"expected an Opacus PrivacyEngine or accountant, got {type(engine).__name__}")
    history = [tuple(h) for h in state().get("history", [])]
    if not history:
        raise FedAuditError("the Opacus accountant has no history yet: check after at least one optimizer step")
    target = TARGETS.factory("opacus")()
    checked = validate_params(target, {"delta": delta, "claimed_epsilon": claimed_epsilon, "noise_multiplier": 1.0,
                                      "sample_rate": 0.5, "steps": 1}, "check_privacy_engine")
    name = mechanism()
    if name not in PARAMS["opacus_accountant"].choices:
        raise FedAuditError(f"the engine's accountant {name!r} is not one fedaudit compares with "
                            f"({', '.join(PARAMS['opacus_accountant'].choices)})")
    return _check([(float(z), float(q), int(s)) for z, q, s in history], checked["delta"], checked["claimed_epsilon"],
                  name, f"Opacus PrivacyEngine ({name} accountant, {len(history)} stretch(es) of steps)")


register_target("opacus", "an Opacus DP-SGD run (noise_multiplier, sample_rate, steps): ε by fedaudit's PLD against "
                "Opacus's own accountant", ("noise_multiplier", "sample_rate", "steps", "delta", "claimed_epsilon",
                                              "opacus_accountant"),
                ("noise_multiplier", "sample_rate", "steps"), check_opacus)
