"""Deprecated names that keep working for one release, each with one :class:`DeprecationWarning`.

fedaudit renamed some public names so that one concept has one name across the API, plans and
the CLI (issue #24): ``accountant`` (formerly also ``method``), ``distinguisher`` (formerly
``test``), ``confidence`` (formerly ``alpha`` = 1 − confidence) and distinct names for constants
and classes that shared one. The old names still work through the helpers here:

- :func:`renamed_keyword` maps an old keyword argument of a public function to the new one;
- :func:`alpha_to_confidence` reads the old ``alpha`` keyword (a level) as a ``confidence``;
- :func:`module_aliases` gives a module a ``__getattr__`` that serves an old attribute name.

Each warns with the old and the new name, so a user's code says what to change.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Mapping

from fedaudit.errors import FedAuditError

__all__ = ["warn_renamed", "renamed_keyword", "alpha_to_confidence", "module_aliases"]


def warn_renamed(old: str, new: str, where: str, *, stacklevel: int = 3) -> None:
    """One ``DeprecationWarning``: "<where>: <old> is deprecated; use <new>"."""
    warnings.warn(f"{where}: {old} is deprecated; use {new}", DeprecationWarning, stacklevel=stacklevel)


def renamed_keyword(**renames: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``@renamed_keyword(method="accountant")`` lets callers still pass ``method=``,
    with a DeprecationWarning, as ``accountant=`` (both at once is a FedAuditError)."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise FedAuditError(f"{fn.__name__}: give {new}= only ({old}= is its deprecated name)")
                    warn_renamed(f"keyword {old}=", f"{new}=", fn.__name__)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return inner

    return wrap


def alpha_to_confidence(where: str, confidence: float, alpha: float | None) -> float:
    """The level α = 1 − confidence of a function that took ``alpha`` before it took
    ``confidence``: ``1 - confidence`` normally; the deprecated ``alpha`` itself (unchanged, so
    old calls give the same numbers) with a DeprecationWarning when given."""
    if alpha is None:
        return 1.0 - confidence
    warn_renamed("keyword alpha=", "confidence= (= 1 - alpha)", where, stacklevel=4)
    return alpha


def module_aliases(module: str, aliases: Mapping[str, tuple[str, Callable[[], Any]]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving ``old -> (new name, getter)``: reading ``module.old``
    warns and returns ``getter()`` (the object now called ``new``)."""

    def __getattr__(name: str) -> Any:
        if name in aliases:
            new, get = aliases[name]
            warn_renamed(f"{module}.{name}", f"{new}", module)
            return get()
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
