"""Deprecated names that keep working for one release, each with one :class:`DeprecationWarning`.

fedaudit renamed some public names so that one concept has one name across the API, plans and
the CLI (issue #24): the plan keys and flags ``accountant`` (formerly ``method``) and
``distinguisher`` (formerly ``test``, also as a keyword of the audit functions), ``confidence``
(formerly ``alpha = 1 − confidence`` in the bound functions), and distinct names for constants and classes that shared
one (``attacks.GaussianNoise``, ``SCORE_ORIENTATIONS``, ...). The old names still work through
the helpers here:

- :func:`warn_renamed` is the one warning (a plan's renamed key, a CLI flag's old spelling);
- :func:`renamed_keyword` serves a function's renamed keyword argument (``test=`` for
  ``distinguisher=``);
- :func:`module_aliases` gives a module a ``__getattr__`` that serves an old attribute name;
- :func:`flag_note` is the one-line note of a CLI flag's old spelling (the CLI prints it once per
  flag and command line, however often the flag is given).

Each warns with the old and the new name, so a user's code says what to change.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

from fedaudit.errors import FedAuditError

__all__ = ["warn_renamed", "renamed_keyword", "module_aliases", "flag_note"]


def warn_renamed(old: str, new: str, where: str, *, stacklevel: int = 3) -> None:
    """One ``DeprecationWarning``: "<where>: <old> is deprecated; use <new>"."""
    warnings.warn(f"{where}: {old} is deprecated; use {new}", DeprecationWarning, stacklevel=stacklevel)


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


def renamed_keyword(where: str, old: str, new: str, old_value: Any, new_value: Any, default: Any) -> Any:
    """The value of the keyword argument ``new`` of ``where``, whose former name ``old`` (default
    None in the signature) callers may still use: ``old_value`` with one DeprecationWarning when
    given, else ``new_value``. Giving both (``new_value`` not its ``default``) is a one-line error."""
    if old_value is None:
        return new_value
    if new_value != default:
        raise FedAuditError(f"{where}: give {new} (or its deprecated name {old}), not both")
    warn_renamed(f"{old}=", f"{new}=", where, stacklevel=4)
    return old_value


def flag_note(old: str, new: str | None = None, why: str = "") -> str:
    """The note of a deprecated command-line flag (or command) ``old``: "<old> is deprecated and will be removed
    in the next release; use <new>", or, for a flag that chose what no longer exists (``new``
    None), "<old> is deprecated and ignored (<why>); it will be removed in the next release"."""
    if new is None:
        return f"{old} is deprecated and ignored ({why}); it will be removed in the next release"
    return f"{old} is deprecated and will be removed in the next release; use {new}"
