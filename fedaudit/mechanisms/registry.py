"""The mechanism registry: names (or ``"module:attr"`` references) to factories.

Every factory is called as ``factory(dim, epsilon, **keywords)`` and takes only the keywords its
mechanism uses, so :meth:`fedaudit.registry.Registry.check_keywords` rejects one it does not take
(``k`` for ``laplace``, with "did you mean"). Users add their own with :func:`register_mechanism`
or name a factory ``"package.module:attr"`` wherever a mechanism name is accepted.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.base import Mechanism
from fedaudit.mechanisms.duchi import Duchi
from fedaudit.mechanisms.gated import GatedPrivateUpload
from fedaudit.mechanisms.gaussian import Gaussian
from fedaudit.mechanisms.laplace import Laplace
from fedaudit.mechanisms.privunit import PrivUnitG
from fedaudit.mechanisms.published import SSTQSketch
from fedaudit.mechanisms.randomized_response import RandomizedResponse
from fedaudit.mechanisms.sstq import SSTQ
from fedaudit.mechanisms.vqsgd import VQSGD
from fedaudit.registry import Registry

__all__ = ["MECHANISMS", "register_mechanism", "make_mechanism", "default_k"]

#: every mechanism factory, called as ``factory(dim, epsilon, **keywords)``
MECHANISMS: Registry[Mechanism] = Registry("mechanism", skip=("dim", "epsilon"))


def register_mechanism(name: str, factory: Callable[..., Mechanism] | None = None, *, summary: str | None = None,
                       replace: bool = False) -> Any:
    """Register ``factory(dim, epsilon, **keywords) -> Mechanism`` under ``name`` (decorator
    without ``factory``); afterwards ``make_mechanism(name, ...)`` and plans accept it."""
    return MECHANISMS.register(name, factory, summary=summary, replace=replace)


def default_k(dim: Any) -> int:
    """Coordinates kept per report when ``k`` is not given: max(1, dim // 16) (1 for an invalid
    ``dim``, which the mechanism itself then rejects with its own message)."""
    return max(1, int(dim) // 16) if isinstance(dim, int) and dim >= 1 else 1


@register_mechanism("sstq")
def _sstq(dim: int, epsilon: float | None, *, k: int | None = None, levels: int = 4, clip: float = 1.0,
          rotate: bool = True) -> SSTQ:
    """SSTQ: clip, randomized Hadamard rotation, subsample k, s-level rounding, s-ary RR at ε/k (ε-LDP)."""
    return SSTQ(dim, default_k(dim) if k is None else k, levels, epsilon, clip, rotate=rotate)


@register_mechanism("sstq-sketch")
def _sstq_sketch(dim: int, epsilon: float, *, k: int | None = None, levels: int = 4) -> SSTQSketch:
    """The SSTQ sketch as published: NOT LDP (sends the norm, unscaled noise, unsplit budget)."""
    return SSTQSketch(dim, default_k(dim) if k is None else k, levels, epsilon)


@register_mechanism("vqsgd")
def _vqsgd(dim: int, epsilon: float | None, *, clip: float = 1.0) -> VQSGD:
    """vqSGD: one signed vertex of the scaled cross-polytope, ε-LDP randomized response over vertices."""
    return VQSGD(dim, epsilon, clip)


@register_mechanism("privunitg")
def _privunitg(dim: int, epsilon: float, *, clip: float = 1.0) -> PrivUnitG:
    """PrivUnitG (Asi, Feldman, Talwar 2022): ε-LDP, asymptotically optimal unbiased mean estimation."""
    return PrivUnitG(dim, epsilon, clip=clip)


@register_mechanism("duchi")
def _duchi(dim: int, epsilon: float, *, clip: float = 1.0) -> Duchi:
    """Duchi, Jordan, Wainwright's L2 mechanism: a point on a sphere, ε-LDP."""
    return Duchi(dim, epsilon, clip)


@register_mechanism("laplace")
def _laplace(dim: int, epsilon: float, *, clip: float = 1.0) -> Laplace:
    """Laplace mechanism with exact discrete-Laplace noise on a power-of-two grid (ε-LDP)."""
    return Laplace(dim, epsilon, clip)


@register_mechanism("gaussian")
def _gaussian(dim: int, epsilon: float, *, delta: float = 1e-5, clip: float = 1.0) -> Gaussian:
    """Gaussian mechanism with exact discrete-Gaussian noise, analytic calibration ((ε, δ)-LDP)."""
    return Gaussian(dim, epsilon, delta, clip)


@register_mechanism("rr")
def _rr(dim: int, epsilon: float) -> RandomizedResponse:
    """k-ary randomized response over dim categories (one-hot inputs), ε-LDP."""
    return RandomizedResponse(dim, epsilon)


@register_mechanism("gated-private")
def _gated_private(dim: int, epsilon: float, *, k: int | None = None, clip: float = 1.0, gate_clip: float = 4.0,
                   select_share: float = 0.5, gate_share: float = 0.25) -> GatedPrivateUpload:
    """Gated sparse upload, private: exponential-mechanism top-k gates + discrete-Laplace values and gates (ε-LDP);
    dim = 2|θ| (weights then log α), k = m sent coordinates (default max(1, |θ| // 16))."""
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2 or dim % 2:
        raise FedAuditError(f"dim must be an even integer >= 2 for gated-private (2|θ|: weights then log α), "
                            f"got dim={dim!r}")
    return GatedPrivateUpload(dim // 2, default_k(dim // 2) if k is None else k, epsilon, clip=clip,
                              gate_clip=gate_clip, select_share=select_share, gate_share=gate_share)


#: the keywords ``make_mechanism`` offers every factory (each passed when its signature names it)
COMMON_KEYWORDS = ("k", "levels", "clip", "delta", "rotate")

#: what ``make_mechanism`` passes a mechanism factory (the docs and its error messages say this)
FACTORY_RECEIVES = ("(dim, epsilon) positionally and, of k, levels, clip, delta and rotate, the keywords its "
                    "signature names")


def make_mechanism(name: str, dim: int, epsilon: float | None, *, k: int | None = None, levels: int = 4,
                   clip: float = 1.0, delta: float = 1e-5, rotate: bool = True,
                   params: Mapping[str, Any] | None = None) -> Mechanism:
    """Build a mechanism by registry name or ``"module:attr"`` reference.

    The factory is called as ``factory(dim, epsilon, **keywords)``: the common keywords ``k``,
    ``levels``, ``clip``, ``delta`` and ``rotate`` are passed only when its signature names them
    (``k`` is ignored for ``laplace``; a factory with ``**keywords`` gets all five). A factory that
    raises anything but a FedAuditError is one FedAuditError naming it, the call and the fix
    (:meth:`~fedaudit.registry.Registry.call`), as is one that returns anything but a
    :class:`~fedaudit.mechanisms.Mechanism`, so a plan that names it fails validation with
    one line (exit 2). ``k`` defaults to
    max(1, dim // 16); for ``rr``, ``dim`` is the number of categories. Use
    ``MECHANISMS.build(name, dim, epsilon, **keywords)`` to reject keywords a mechanism does not take.

    ``params`` holds the mechanism's own further keywords (a plan's ``mechanism_params``, the CLI's
    ``--mech-param KEY=VALUE``), e.g. ``{"rounds": 3}`` for a user's factory that takes ``rounds``;
    unlike the common five they are checked strictly: a keyword the factory does not take is an
    error with the keywords it does take, and the common five are set by their own arguments.
    """
    keywords = {"k": default_k(dim) if k is None else k, "levels": levels, "clip": clip, "delta": delta, "rotate": rotate}
    accepted = MECHANISMS.accepted(name)
    if accepted is not None:
        keywords = {key: v for key, v in keywords.items() if key in accepted}
    own = {str(key): value for key, value in (params or {}).items()}
    common = sorted(set(own) & set(COMMON_KEYWORDS))
    if common:
        raise FedAuditError(f"mechanism parameter {common[0]!r} is a common keyword of every mechanism: set it with "
                            f"its own argument ({', '.join(COMMON_KEYWORDS)}), not as a mechanism parameter")
    keywords.update(own)
    MECHANISMS.check_keywords(name, keywords)  # a user factory's required keyword beyond these: say so
    mechanism = MECHANISMS.call(name, (dim, epsilon), keywords, receives=FACTORY_RECEIVES)
    if not isinstance(mechanism, Mechanism):  # e.g. "builtins:print": called fine, built nothing
        raise FedAuditError(f"mechanism factory {name!r} must return a fedaudit Mechanism, got "
                            f"{type(mechanism).__name__}; a mechanism factory returns an instance of a "
                            f"fedaudit.mechanisms.Mechanism subclass")
    return mechanism
