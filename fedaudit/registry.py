"""One open registry: a name (or a ``"module:attr"`` reference) mapped to a factory.

Every pluggable family of the toolkit — mechanisms, aggregators, pre-aggregators, attacks,
optimizers, partitions, datasets and claim kinds — is one :class:`Registry`. A registry

- maps a case-insensitive name to a factory (a class or a function);
- accepts ``"package.module:attr"`` wherever a name is accepted, so a user's own component runs
  in plans and in the CLI without being registered;
- checks keywords against the factory's signature before calling it, and suggests the nearest
  name ("did you mean") for a misspelt name or keyword;
- lists its entries with a one-line summary for the CLI and the documentation.

Users add their own entries with :meth:`Registry.register` (or the ``register_*`` helper of the
family, e.g. :func:`fedaudit.mechanisms.register_mechanism`).

The caller's registrations reach engine workers. A worker is a fresh interpreter that never runs
the caller's main module (:mod:`fedaudit.engine`), so a factory registered by a script would be
unknown there. Each registry therefore remembers the registrations of factories defined outside
fedaudit; :func:`user_registrations` lists them and the engine sends them with every task to a
process or Ray worker, where :func:`replay_registrations` registers them again (factories defined
in ``__main__`` travel by value, as the task's function does) before the task runs.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, TypeVar

from fedaudit.errors import FedAuditError

__all__ = ["Entry", "Registry", "did_you_mean", "load_reference", "user_registrations", "replay_registrations"]

T = TypeVar("T")


def did_you_mean(word: str, choices: Any) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices`` to ``word``, else ``""``."""
    close = difflib.get_close_matches(str(word).lower(), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_reference(reference: str, *, what: str = "object") -> Any:
    """Import ``"package.module:attr"`` (``attr`` may be dotted) and return the attribute.

    This is the one place where fedaudit runs code a user named: the ``module:attr`` references of
    a plan (``fedaudit run``) and of the CLI's component flags. The module is looked up on
    ``sys.path`` and then in the working directory, which is *appended* to ``sys.path`` here (and
    kept, so spawned workers find the module too): a file in the working directory never shadows
    an installed package, and commands that load no reference (``verify``, rendering) never put
    the working directory on ``sys.path`` at all (a report folder is data, never code)."""
    module_name, sep, attr = reference.partition(":")
    if not sep or not module_name or not attr:
        raise FedAuditError(f"{what} reference {reference!r} must look like 'package.module:attr'")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise FedAuditError(f"{what} reference {reference!r}: cannot import module {module_name!r} ({exc})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise FedAuditError(f"{what} reference {reference!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


#: every registry by (the module that made it, its ``kind``)
_REGISTRIES: dict[tuple[str, str], "Registry[Any]"] = {}


def user_registrations() -> list[tuple[str, str, list[Entry[Any]]]]:
    """``(module, kind, entries)`` for every registry holding registrations of factories defined
    outside fedaudit (a script's, a notebook's, a user module's), in registration order; empty
    when there are none. Only registries that are globals of their module are listed (a worker
    makes them by importing it). What the engine sends to its workers (module docstring)."""
    return [(module, kind, list(reg._user.values())) for (module, kind), reg in list(_REGISTRIES.items())
            if reg._user and _module_level(reg, module)]


def _module_level(reg: "Registry[Any]", module: str) -> bool:
    """Whether ``reg`` is a global of ``module`` (so importing the module makes it again in a
    worker); a registry made inside a function exists in this process only."""
    namespace = getattr(sys.modules.get(module), "__dict__", {})
    return any(value is reg for value in list(namespace.values()))


def replay_registrations(registrations: list[tuple[str, str, list[Entry[Any]]]]) -> None:
    """Register :func:`user_registrations` of another process in this one (an engine worker): each
    registry's module is imported (its built-ins first), then each entry is registered again,
    replacing what the name held."""
    for module, kind, entries in registrations:
        importlib.import_module(module)
        reg = _REGISTRIES.get((module, kind))
        for e in entries if reg is not None else ():
            current = reg._entries.get(e.name)
            if current is None or current.factory is not e.factory:
                reg.register(e.name, e.factory, summary=e.summary, replace=True, aliases=e.aliases)


def _article(word: str) -> str:
    """"an" before a vowel ("an aggregator factory"), else "a"."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def _summary(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered factory: its name, the factory itself and a one-line summary."""

    name: str
    factory: Callable[..., T]
    summary: str
    aliases: tuple[str, ...] = ()


class Registry(Generic[T]):
    """Names to factories for one family of components (``kind`` names the family in messages).

    ``skip`` lists parameters the caller always supplies itself (e.g. ``f`` for aggregators),
    so they are neither required nor reported as accepted keywords. ``allow_plus=True`` lets
    names contain '+' (for a family whose names never appear in a '+'-composed aggregator spec,
    e.g. the gossip rule ``"cs+"``).
    """

    def __init__(self, kind: str, *, skip: tuple[str, ...] = (), allow_plus: bool = False):
        self.kind = kind
        self.skip = tuple(skip)
        self.allow_plus = bool(allow_plus)
        self._entries: dict[str, Entry[T]] = {}
        self._aliases: dict[str, str] = {}  # alias key -> canonical name
        self._user: dict[str, Entry[T]] = {}  # registrations of factories defined outside fedaudit
        _REGISTRIES[(sys._getframe(1).f_globals.get("__name__", ""), kind)] = self

    # -- registration -------------------------------------------------------------------------
    def register(self, name: str, factory: Callable[..., T] | None = None, *, summary: str | None = None,
                 replace: bool = False, aliases: tuple[str, ...] = ()) -> Any:
        """Register ``factory`` under ``name``; without ``factory`` this is a decorator.

        A name is lowercase letters, digits, '-', '_' or '.'; registering a taken name is an error
        unless ``replace=True``. ``aliases`` are further names that resolve to ``name`` (the
        listings show ``name`` only; :meth:`canonical` maps an alias to it).
        """
        if factory is None:
            return lambda fn: self.register(name, fn, summary=summary, replace=replace, aliases=aliases)
        if isinstance(aliases, str):
            aliases = (aliases,)
        key = self._check_name(name)
        alias_keys = tuple(dict.fromkeys(self._check_name(a) for a in aliases if self._check_name(a) != key))
        if not callable(factory):
            raise FedAuditError(f"{self.kind} {name!r}: the factory must be callable, got {type(factory).__name__}")
        for a in alias_keys:
            if a in self._entries:
                raise FedAuditError(f"{self.kind} alias {a!r} is the name of another entry")
        for k in (key, *alias_keys):
            if (k in self._entries or k in self._aliases) and not replace:
                raise FedAuditError(f"{self.kind} {k!r} is already registered; pass replace=True to override it")
        if key in self._entries:
            self.unregister(key)
        for k in (key, *alias_keys):  # replace=True: an alias of another entry moves to this one
            if k in self._aliases:
                old = self._entries[self._aliases.pop(k)]
                self._entries[old.name] = Entry(old.name, old.factory, old.summary,
                                                tuple(a for a in old.aliases if a != k))
        self._entries[key] = Entry(key, factory, _summary(factory) if summary is None else summary, alias_keys)
        self._aliases.update((a, key) for a in alias_keys)
        module = getattr(factory, "__module__", None) or ""
        if module != "fedaudit" and not module.startswith("fedaudit."):
            self._user[key] = self._entries[key]
        else:  # a built-in registered again (e.g. restored after a user's replacement): nothing to replay
            self._user.pop(key, None)
        return factory

    def _check_name(self, name: Any) -> str:
        bad = ":" if self.allow_plus else ":' or '+"
        if (not isinstance(name, str) or not name.strip() or ":" in name
                or ("+" in name and not self.allow_plus)):
            raise FedAuditError(f"{self.kind} name must be a non-empty string without '{bad}', got {name!r}")
        return name.strip().lower()

    def unregister(self, name: str) -> None:
        """Remove a registered name and its aliases (used by tests and by users replacing a built-in)."""
        entry = self._entries.pop(self.canonical(name) if isinstance(name, str) else name, None)
        for a in entry.aliases if entry is not None else ():
            self._aliases.pop(a, None)
        if entry is not None:
            self._user.pop(entry.name, None)

    def canonical(self, name: str) -> str:
        """The registered name ``name`` (a name or an alias, any case) resolves to; a
        ``module:attr`` reference or an unknown name is returned stripped, unchanged otherwise."""
        key = self._key(name)
        if self._is_reference(name):
            return name.strip()
        return self._aliases.get(key, key)

    def aliases(self, name: str) -> tuple[str, ...]:
        """The aliases registered for ``name`` (empty for a reference or a name without aliases)."""
        entry = self._entries.get(self.canonical(name))
        return entry.aliases if entry is not None else ()

    # -- lookup -------------------------------------------------------------------------------
    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        return tuple(self._entries)

    def entries(self) -> tuple[Entry[T], ...]:
        return tuple(self._entries.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (self.canonical(name) in self._entries or self._is_reference(name))

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _key(name: str) -> str:
        return name.strip().lower()

    @staticmethod
    def _is_reference(name: str) -> bool:
        return ":" in name

    def known(self, name: Any) -> bool:
        """True when ``name`` is registered or is a ``module:attr`` reference that imports."""
        if not isinstance(name, str):
            return False
        try:
            self.factory(name)
        except FedAuditError:
            return False
        return True

    def factory(self, name: str) -> Callable[..., T]:
        """The factory for a registered name or a ``"module:attr"`` reference."""
        if not isinstance(name, str) or not name.strip():
            raise FedAuditError(f"{self.kind} must be a non-empty name string, got {name!r}")
        if self._is_reference(name):
            obj = load_reference(name.strip(), what=self.kind)
            if not callable(obj):
                raise FedAuditError(f"{self.kind} reference {name!r} is not callable")
            return obj
        key = self.canonical(name)
        if key not in self._entries:
            raise FedAuditError(f"unknown {self.kind} {name!r}{did_you_mean(key, [*self._entries, *self._aliases])}; "
                                f"choose one of: {', '.join(self._entries)} (or give 'package.module:attr')")
        return self._entries[key].factory

    # -- keywords -----------------------------------------------------------------------------
    def parameters(self, name: str) -> dict[str, inspect.Parameter] | None:
        """Keyword parameters of the factory (``None`` when it takes ``**kwargs``)."""
        fn = self.factory(name)
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return None
        params = {k: p for k, p in sig.parameters.items() if k not in self.skip and k != "self"}
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return None
        return {k: p for k, p in params.items()
                if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}

    def accepted(self, name: str) -> tuple[str, ...] | None:
        """Names of the keywords the factory accepts (``None``: any keyword)."""
        params = self.parameters(name)
        return None if params is None else tuple(params)

    def required(self, name: str) -> tuple[str, ...]:
        params = self.parameters(name) or {}
        return tuple(k for k, p in params.items() if p.default is inspect.Parameter.empty)

    def check_keywords(self, name: str, keywords: Any, *, supplied: tuple[str, ...] = ()) -> None:
        """Raise :class:`FedAuditError` for a keyword the factory does not take, or a missing one.

        ``supplied`` names keywords the caller passes itself (they count as present).
        """
        accepted = self.accepted(name)
        given = set(keywords)
        if accepted is not None:
            unknown = sorted(given - set(accepted))
            if unknown:
                hint = did_you_mean(unknown[0], accepted)
                raise FedAuditError(f"{self.kind} {name!r} takes no keyword {unknown[0]!r}{hint}; "
                                    f"it accepts: {', '.join(accepted) or 'none'}")
        missing = [k for k in self.required(name) if k not in given and k not in supplied]
        if missing:
            raise FedAuditError(f"{self.kind} {name!r} needs the keyword(s) {', '.join(missing)}")

    def build(self, name: str, /, *args: Any, **keywords: Any) -> T:
        """Check the keywords, then call the factory: ``factory(*args, **keywords)``."""
        self.check_keywords(name, keywords, supplied=self._positional(name, len(args)))
        return self.factory(name)(*args, **keywords)

    def call(self, name: str, args: tuple = (), keywords: dict[str, Any] | None = None, *,
             receives: str | None = None) -> T:
        """``factory(*args, **keywords)`` for ``name``, where a factory that raises anything but a
        :class:`FedAuditError` (a user's factory that rejects a keyword it is given, a bad value)
        becomes one FedAuditError naming the factory, what it was called with and the fix:
        ``receives`` says what this family's factories are given (see :meth:`check_keywords`: a
        keyword is passed only when the signature names it, every one with ``**keywords``)."""
        keywords = dict(keywords or {})
        factory = self.factory(name)
        try:
            return factory(*args, **keywords)
        except FedAuditError:
            raise
        except Exception as exc:  # a user's component: one line, not a traceback
            shown = ", ".join([*(repr(a) for a in args), *(f"{k}={v!r}" for k, v in keywords.items())])
            what = receives or "its positional arguments and the keywords its signature names"
            fix = ("name in its signature only the keywords it takes, or accept and ignore the others"
                   if isinstance(exc, TypeError) else "fix the value it rejects, or the factory")
            message = str(exc).splitlines()[0] if str(exc) else ""
            raise FedAuditError(f"{self.kind} factory {name!r} failed when called as {name}({shown}): "
                                f"{type(exc).__name__}: {message}; {_article(self.kind)} {self.kind} factory receives {what} "
                                f"(all of them with **keywords): {fix}") from None

    def _positional(self, name: str, count: int) -> tuple[str, ...]:
        """The names the first ``count`` positional arguments bind to (``skip`` included)."""
        try:
            params = [k for k in inspect.signature(self.factory(name)).parameters if k != "self"]
        except (TypeError, ValueError):
            return ()
        return tuple(params[:count])

    # -- listing ------------------------------------------------------------------------------
    def describe(self) -> list[tuple[str, str]]:
        """``(name, one-line summary)`` for every entry, for ``fedaudit list`` and the docs."""
        return [(e.name, e.summary) for e in self._entries.values()]

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"
