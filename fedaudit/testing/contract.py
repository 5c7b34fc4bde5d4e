"""What every contract check shares: the typed failure, the report of a pass, and the steps a
check runs one property at a time.

A check (:func:`~fedaudit.testing.check_mechanism`, :func:`~fedaudit.testing.check_aggregator`,
:func:`~fedaudit.testing.check_attack`, :func:`~fedaudit.testing.check_claim_kind`) tests one
component property by property and stops at the first that fails, raising
:class:`ContractError`, an ``AssertionError`` whose one-line message names the component and the
property (so a pytest run shows which promise broke, not a traceback into fedaudit). A component
that keeps every promise gets a :class:`ContractReport`: the properties that held and those that
were skipped, each with the reason (a mechanism without ``log_prob`` is not tested against it).
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from fedaudit.errors import FedAuditError
from fedaudit.json import dumps, jsonable, loads

__all__ = ["ContractError", "ContractReport", "Checks"]


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


class ContractError(AssertionError):
    """A component broke one property of its family's contract.

    ``component`` names it (``"mechanism Laplace(dim=2, epsilon=1.0, clip=1.0)"``), ``prop`` is the
    property (``"unbiasedness"``, ``"permutation invariance"``, …) and ``detail`` what was seen;
    the message is the three on one line."""

    def __init__(self, component: str, prop: str, detail: str):
        self.component, self.prop, self.detail = _one_line(component), _one_line(prop), _one_line(detail)
        super().__init__(f"{self.component} fails {self.prop}: {self.detail}")


@dataclass(frozen=True)
class ContractReport:
    """What a passed check tested: the component, the properties that held (in the order they
    were checked) and ``skipped``, ``(property, why)`` for each property the component does not
    claim or the check could not test."""

    component: str
    held: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        text = f"{self.component}: {len(self.held)} properties hold ({', '.join(self.held)})"
        if self.skipped:
            text += "; skipped: " + "; ".join(f"{p} ({why})" for p, why in self.skipped)
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"component": self.component, "held": list(self.held),
                "skipped": [{"property": p, "why": why} for p, why in self.skipped]}


@dataclass
class Checks:
    """The running record of one check: ``fail`` raises, ``held``/``skip`` record; ``report()``
    is the :class:`ContractReport` of a check that got to its end."""

    component: str
    _held: list[str] = field(default_factory=list)
    _skipped: list[tuple[str, str]] = field(default_factory=list)

    def fail(self, prop: str, detail: str) -> None:
        raise ContractError(self.component, prop, detail)

    def require(self, ok: Any, prop: str, detail: str) -> None:
        """``fail(prop, detail)`` unless ``ok``."""
        if not ok:
            self.fail(prop, detail)

    def held(self, prop: str) -> None:
        if prop not in self._held:
            self._held.append(prop)

    def skip(self, prop: str, why: str) -> None:
        self._skipped.append((prop, why))

    @contextmanager
    def step(self, prop: str, *, strict_warnings: bool = False) -> Iterator[None]:
        """Run one property's code: an exception it raises (a FedAuditError, a numpy error, a
        warning when ``strict_warnings``) is that property failing, named; success records it."""
        try:
            with warnings.catch_warnings():
                if strict_warnings:
                    warnings.simplefilter("error", RuntimeWarning)
                yield
        except ContractError:
            raise
        except Exception as exc:  # the component's own code raised: that is the failure
            self.fail(prop, f"raised {type(exc).__name__}: {exc}")
        self.held(prop)

    def strict_json(self, what: str, value: Any) -> None:
        """``value`` (``params()``, ``to_dict()``) is strict JSON data that reads back as written
        (:mod:`fedaudit.json`): no object the reports cannot store, no NaN token."""
        try:
            back = loads(dumps(value), what=what)
            same = back == jsonable(value)
        except FedAuditError as exc:
            self.fail("strict JSON", f"{what}: {exc}")
        self.require(same, "strict JSON", f"{what} does not read back as written")
        self.held("strict JSON")

    def report(self) -> ContractReport:
        return ContractReport(self.component, tuple(self._held), tuple(self._skipped))
