"""The configuration checker's targets: what ``fedaudit check TARGET`` can check, one registry entry each.

A :class:`Target` is a deployed configuration fedaudit can read the true guarantee of without
running anything: its parameters (:class:`Param`, declared once here and shared by every target
that takes them, so one name has one meaning and one range), which of them it requires, the
function that computes its guarantee (``check(**params) -> CheckResult``) and, where the library
has a standard configuration file, its format (``"flower-app"``: a Flower app's ``pyproject.toml``;
``"nvflare-job"``: an NVFlare job's ``config_fed_client.json``; :mod:`fedaudit.integrations.check.config_files`).
:data:`TARGETS` holds them; adding a library's mechanism is one :func:`register_target` call with
the names of the :data:`PARAMS` it takes (add a :class:`Param` to :data:`PARAMS` for a new name).
The claim kind ``config-check`` (:mod:`fedaudit.experiments.kinds.config_check`) and the
``fedaudit check`` command are made from this registry: its plan keys are :data:`PARAMS`.

Every answer is a :class:`CheckResult`: the claimed ε, the true ε at the δ of the claim (exact, or
a certified upper bound where no closed form exists — it says which), whether the configuration
meets the claim, and the setting that would (``fix``), in one line a reviewer can act on
(:meth:`CheckResult.line`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any, Callable, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.json import jsonable
from fedaudit.registry import Registry
from fedaudit.validation import in_range, range_text

__all__ = ["Param", "PARAMS", "Target", "TARGETS", "CheckResult", "register_target", "check_target",
           "validate_params", "library_version", "CONFIG_FORMATS"]

#: the configuration-file formats a target may read (:mod:`fedaudit.integrations.check.config_files`)
CONFIG_FORMATS = ("flower-app", "nvflare-job")


@dataclass(frozen=True)
class Param:
    """One parameter of a deployed configuration: ``type`` ``"float"``, ``"int"`` or ``"str"``, its
    range (``low``/``high``, open or closed) or ``choices``, the default a target uses when it is not
    given (None: absent), and a one-line help. The plan keys of the ``config-check`` kind are these."""

    type: str
    help: str
    default: Any = None
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple[str, ...] | None = None

    def describe(self) -> str:
        """What a valid value is: "a number > 0", "an integer >= 1", "one of 'a', 'b'"."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        base = {"float": "a number", "int": "an integer", "str": "a string"}[self.type]
        return base + range_text(self.low, self.high, open_low=self.open_low, open_high=self.open_high)

    def coerce(self, value: Any) -> Any:
        """``value`` as this parameter takes it, or None when it is not a valid value."""
        if self.type == "str":
            if not isinstance(value, str) or not value.strip():
                return None
            value = value.strip().lower() if self.choices is not None else value.strip()
            return value if self.choices is None or value in self.choices else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        if self.type == "int":
            if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
                return None
            value = int(value)
        else:
            value = float(value)
            if not math.isfinite(value):
                return None
        ok = in_range(value, self.low, self.high, open_low=self.open_low, open_high=self.open_high)
        return value if ok else None


#: every parameter a target takes, by name (one meaning and one range per name)
PARAMS: dict[str, Param] = {
    # the claim
    "claimed_epsilon": Param("float", "the ε the deployment claims (default: the target's own claim — LocalDpMod's "
                                      "and SVTPrivacy's ledger ε, Opacus's reported ε)", low=0, open_low=True),
    "delta": Param("float", "the δ of the claim", 1e-5, low=0, high=1, open_low=True, open_high=True),
    "epsilon": Param("float", "the object's own epsilon parameter (LocalDpMod's, SVTPrivacy's, a diffprivlib mechanism's)", low=0,
                     open_low=True),
    # Flower
    "clipping_norm": Param("float", "clipping norm C (LocalDpMod; the fixed-clipping wrappers; the initial norm of "
                                    "the adaptive ones)", low=0, open_low=True),
    "sensitivity": Param("float", "LocalDpMod's sensitivity (default: clipping_norm)", low=0, open_low=True),
    "noise_multiplier": Param("float", "noise multiplier z (Flower's central wrappers: noise std z·C/m on the mean; "
                                       "Opacus: σ)", low=0),
    "num_sampled_clients": Param("int", "clients sampled per round, m (Flower's num_sampled_clients)", low=1),
    "population": Param("int", "clients in the population the m are drawn from, N", low=1),
    "rounds": Param("int", "rounds (Flower: num-server-rounds)", low=1),
    "sampling": Param("str", "how clients are sampled: 'without-replacement' (what Flower does: m of N, "
                             "replace-one neighbours), 'poisson' (add/remove; not what Flower's samplers do), "
                             "'none' (no amplification, add/remove)", "without-replacement",
                      choices=("without-replacement", "poisson", "none")),
    "clipping": Param("str", "Flower wrapper: 'fixed' (DifferentialPrivacy{Server,Client}SideFixedClipping) or "
                             "'adaptive' (…AdaptiveClipping)", "fixed", choices=("fixed", "adaptive")),
    "clipped_count_stddev": Param("float", "adaptive clipping: the clipped-count noise σ_b (Flower's default m/20)",
                                  low=0, open_low=True),
    "clip_norm_lr": Param("float", "adaptive clipping: the clipping norm's learning rate η", 0.2, low=0,
                          open_low=True),
    "target_clipped_quantile": Param("float", "adaptive clipping: the target clipped quantile γ", 0.5, low=0, high=1),
    "accountant": Param("str", "fedaudit accountant (default: 'pld', or 'dpa-rdp' for sampling without "
                               "replacement, the one that supports it)"),
    # NVFlare SVTPrivacy
    "fraction": Param("float", "SVTPrivacy's fraction of the model uploaded", 0.1, low=0, high=1, open_low=True),
    "noise_var": Param("float", "SVTPrivacy's noise_var (release budget n_upload·noise_var unless epsilon_release)",
                       0.1, low=0, open_low=True),
    "gamma": Param("float", "SVTPrivacy's gamma (clip bound of each coordinate)", 1e-5, low=0, open_low=True),
    "tau": Param("float", "SVTPrivacy's tau (threshold; does not change ε)", 1e-6),
    "epsilon_threshold": Param("float", "SVTPrivacy's epsilon_threshold", low=0, open_low=True),
    "epsilon_query": Param("float", "SVTPrivacy's epsilon_query", low=0, open_low=True),
    "epsilon_release": Param("float", "SVTPrivacy's epsilon_release", low=0, open_low=True),
    "model_size": Param("int", "number of parameters (coordinates) the filter sees, d", low=1),
    "scalar_parameters": Param("int", "0-dimensional parameters in the model (SVTPrivacy passes them through "
                                      "un-noised)", 0, low=0),
    # Opacus
    "sample_rate": Param("float", "Opacus's sample rate q (Poisson)", low=0, high=1, open_low=True),
    "steps": Param("int", "optimizer steps", low=1),
    "opacus_accountant": Param("str", "the Opacus accountant whose ε is compared ('none': skip Opacus)", "rdp",
                               choices=("rdp", "prv", "gdp", "none")),
    # library mechanisms (diffprivlib, OpenDP; fedaudit.integrations.check.libraries)
    "mechanism": Param("str", "diffprivlib: the class of diffprivlib.mechanisms (GaussianAnalytic, GaussianDiscrete, "
                              "Gaussian, Laplace, LaplaceTruncated, LaplaceFolded, Geometric, GeometricTruncated, "
                              "GeometricFolded, Binary)"),
    "constructor": Param("str", "OpenDP: the measurement constructor (make_laplace, make_gaussian, "
                                "make_randomized_response_bool, make_randomized_response, "
                                "make_randomized_response_bitvec)",
                         choices=("laplace", "gaussian", "randomized_response_bool", "randomized_response", "bitvec")),
    "lower": Param("float", "diffprivlib: the mechanism's lower bound (the Truncated/Folded variants)"),
    "upper": Param("float", "diffprivlib: the mechanism's upper bound (the Truncated/Folded variants)"),
    "scale": Param("float", "OpenDP: the noise scale of make_laplace / make_gaussian", low=0, open_low=True),
    "data_type": Param("str", "OpenDP: the input domain of make_laplace / make_gaussian, 'float' or 'int'", "float",
                       choices=("float", "int")),
    "prob": Param("float", "OpenDP: randomized response's probability of reporting the true value", low=0, high=1,
                  open_low=True, open_high=True),
    "categories": Param("int", "OpenDP: the number of categories of make_randomized_response", low=2),
    "f": Param("float", "OpenDP: the bit-vector randomized response's f (each bit is a fair coin with probability f)",
               low=0, high=1, open_low=True),
    "nbytes": Param("int", "OpenDP: bytes in the bit vector", 2, low=1, high=1024),
    "max_weight": Param("int", "OpenDP: the largest number of set bits of an input (default: every bit)", low=1),
}


@dataclass(frozen=True)
class CheckResult:
    """The true guarantee of one deployed configuration against its claim.

    ``epsilon_true`` is the ε at ``delta`` of the configuration as the library implements it
    (``bound``: ``"exact"``, ``"upper"`` for a certified upper bound that need not be attained, or
    ``"idealised"``: exact for the continuous law a floating-point sampler approximates);
    ``claimed_epsilon`` the claim it is held to (``claim_source`` says whose); ``meets`` is
    ``epsilon_true ≤ claimed_epsilon``; ``fix`` the setting that would meet the claim (None when it is
    met, or when no setting of the target's own parameters can); ``unit`` what one ε covers ("per
    round", "after 20 rounds"); ``details`` the by-products; ``notes`` the sentences that decide what
    the number means (assumptions, the lines of the library's code it rests on)."""

    target: str
    library: str
    configuration: str
    claimed_epsilon: float
    claim_source: str
    epsilon_true: float
    delta: float
    unit: str
    bound: str = "exact"
    fix: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def meets(self) -> bool:
        return bool(self.epsilon_true <= self.claimed_epsilon)

    def line(self) -> str:
        """One line a reviewer can act on: the claim, the true ε and what to set."""
        claim, eps = _distinct(self.claimed_epsilon, self.epsilon_true)
        rel = "≤" if self.bound == "upper" else "="
        head = (f"{self.configuration}: claimed ε = {claim} {self.unit} ({self.claim_source}); "
                f"true ε {rel} {eps} at δ = {self.delta:g} {self.unit}"
                + (" (certified upper bound)" if self.bound == "upper" else "")
                + (" (of the continuous idealisation)" if self.bound == "idealised" else ""))
        if self.meets:
            return head + "; meets the claim"
        return head + ("; to meet the claim, " + self.fix if self.fix else "; does not meet the claim")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(meets=self.meets, line=self.line())
        return jsonable(out)


def _distinct(a: float, b: float) -> tuple[str, str]:
    """``a`` and ``b`` to 4 significant digits, or as many more as it takes to tell them apart ("∞" for inf)."""
    def fmt(x: float, digits: int) -> str:
        return "∞" if math.isinf(x) else f"{x:.{digits}g}"

    for digits in range(4, 13):
        if a == b or fmt(a, digits) != fmt(b, digits):
            break
    return fmt(a, digits), fmt(b, digits)


@dataclass(frozen=True)
class Target:
    """One checkable configuration: ``check(**params) -> CheckResult`` over the :data:`PARAMS` named
    in ``params`` (``required`` among them must be given), and the configuration-file format it
    reads (one of :data:`CONFIG_FORMATS`, or None)."""

    name: str
    summary: str
    params: tuple[str, ...]
    required: tuple[str, ...]
    check: Callable[..., CheckResult]
    config_format: str | None = None
    validate: Callable[[dict[str, Any], str], None] | None = None


#: target name -> :class:`Target`
TARGETS: Registry[Target] = Registry("check target")


def register_target(name: str, summary: str, params: tuple[str, ...], required: tuple[str, ...],
                    check: Callable[..., CheckResult], config_format: str | None = None, *,
                    validate: Callable[[dict[str, Any], str], None] | None = None, replace: bool = False) -> Target:
    """Register a target (the module docstring); its parameters must be in :data:`PARAMS`. ``validate(params,
    where)``, when given, checks the parameters against each other (each valid on its own) before anything
    runs, raising one FedAuditError that starts with ``where``."""
    unknown = [p for p in (*params, *required) if p not in PARAMS]
    if unknown:
        raise FedAuditError(f"check target {name!r}: unknown parameter {unknown[0]!r}; add it to PARAMS")
    if not set(required) <= set(params):
        raise FedAuditError(f"check target {name!r}: required parameters must be among its parameters")
    if config_format is not None and config_format not in CONFIG_FORMATS:
        raise FedAuditError(f"check target {name!r}: config_format must be one of {', '.join(CONFIG_FORMATS)}")
    target = Target(name, summary, tuple(params), tuple(required), check, config_format, validate)
    TARGETS.register(name, lambda: target, summary=summary, replace=replace)
    return target


def validate_params(target: Target, given: Mapping[str, Any], where: str | None = None) -> dict[str, Any]:
    """The target's parameters from ``given`` (None = not given), checked one by one: a missing
    required one or a bad value is one FedAuditError naming it (``<where>: key 'x' must be …``) —
    the kind turns ``key 'x'`` into the CLI flag. Parameters of other targets are refused."""
    where = where or f"check {target.name}"
    extra = sorted(k for k, v in given.items() if v is not None and k not in target.params)
    if extra:
        raise FedAuditError(f"{where}: key {extra[0]!r} is not a parameter of target {target.name!r} "
                            f"(its parameters: {', '.join(target.params)})")
    out: dict[str, Any] = {}
    for name in target.params:
        param, value = PARAMS[name], given.get(name)
        if value is None:
            if name in target.required:
                raise FedAuditError(f"{where}: target {target.name!r} needs key {name!r} ({param.describe()}: "
                                    f"{param.help})")
            out[name] = param.default
            continue
        good = param.coerce(value)
        if good is None:
            raise FedAuditError(f"{where}: key {name!r} must be {param.describe()}, got {value!r}")
        out[name] = good
    if target.validate is not None:
        target.validate(out, where)
    return out


def check_target(name: str, **params: Any) -> CheckResult:
    """Check target ``name`` on ``params`` (validated by :func:`validate_params`)."""
    target = TARGETS.factory(name)()
    return target.check(**validate_params(target, params))


def library_version(module: str) -> str:
    """``"<distribution> <version>"`` of an installed library, ``"<name> (not installed)"`` otherwise."""
    dist = {"flwr": "flwr", "nvflare": "nvflare", "opacus": "opacus"}.get(module, module)
    try:
        return f"{dist} {metadata.version(dist)}"
    except metadata.PackageNotFoundError:
        return f"{dist} (not installed)"
