"""Argument types and parsers of flag values: counts written as 2e4, seconds, comma-separated
numbers and method lists, ``--agg-param`` items, score files, black-box samplers, and the
parser class whose errors are one line and exit 2.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Sequence

import numpy as np

from fedaudit.errors import FedAuditError


def int_list_arg(text: str) -> list[int]:
    try:
        return [int(float(t)) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def count_arg(text: str) -> int:
    """Integers written as 20000, 2e4 or 1e6 (the range is checked by the API)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(text) if text.strip().lstrip("+-").isdigit() else int(value)


def seconds_arg(text: str) -> float:
    """A duration in seconds, >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, got {text!r}")
    return value


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's error format: one line on stderr, exit 2 (no usage block)."""

    def error(self, message: str):  # noqa: D102 - argparse API
        self.exit(2, f"fedaudit: error: {self.prog}: {message} (see {self.prog} --help)\n")


def scalar_value(raw: str) -> Any:
    """A keyword's VALUE as written on the command line: an integer, a number, true/false, else the
    string itself (the component that takes the keyword checks it)."""
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for convert in (int, float):
        try:
            return convert(raw)
        except ValueError:
            pass
    return raw


def mech_params(items: Sequence[str] | None) -> dict[str, Any] | None:
    """``--mech-param KEY=VALUE`` items as the mechanism's own keywords (the plan key
    ``mechanism_params``, checked as a plan checks it); None when none is given. The mechanism
    registry then checks each keyword against the factory's signature."""
    from fedaudit.experiments.keys import BadValue, coerce, mechanism_params_key, show

    if not items:
        return None
    table: dict[str, Any] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip().isidentifier():
            raise FedAuditError(f"--mech-param must look like KEY=VALUE (e.g. rounds=3), got {item!r}")
        table[key.strip()] = scalar_value(raw.strip())
    try:
        return coerce(table, mechanism_params_key())
    except BadValue:
        raise FedAuditError(f"--mech-param must be {mechanism_params_key().describe()}, got {show(table)}") from None


def scores_header(flag: str, path: str, fh: Any) -> None:
    """Check a .npy header before any data is read: a 1-D array of real numbers whose size fits
    in the file. A header may claim any shape (10^12 float64 is 8 TB): numpy would allocate it
    first and fail after, so the claim is checked against the bytes the file holds."""
    fmt = np.lib.format
    if fh.read(2) == b"PK":
        raise FedAuditError(f"{flag} {path} holds an archive, not one array of scores; save it with numpy.save")
    fh.seek(0)
    version = fmt.read_magic(fh)
    readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
    if version not in readers:
        raise FedAuditError(f"{flag} {path} is a .npy file of format version {version[0]}.{version[1]}, which holds "
                            f"no array of plain numbers; save the scores with numpy.save")
    shape, _, dtype = readers[version](fh)
    if len(shape) != 1:
        raise FedAuditError(f"{flag} {path} must hold a 1-D array of scores, got shape {shape}")
    if not (np.issubdtype(dtype, np.number) or dtype == bool) or np.issubdtype(dtype, np.complexfloating):
        raise FedAuditError(f"{flag} {path} must hold real numbers, got dtype {dtype}")
    need, have = shape[0] * dtype.itemsize, os.fstat(fh.fileno()).st_size - fh.tell()
    if need > have:
        raise FedAuditError(f"{flag} {path}: its header claims shape {shape} ({need} bytes of {dtype}) but the file "
                            f"holds {have} bytes after the header (truncated, or not written by numpy.save)")


def load_scores(flag: str, path: str) -> np.ndarray:
    """A 1-D array of scores from a .npy file (no pickles); a missing or unreadable file, or a
    header that does not describe the file (:func:`scores_header`), is a FedAuditError."""
    try:
        with open(path, "rb") as fh:
            scores_header(flag, path, fh)
            fh.seek(0)
            arr = np.load(fh, allow_pickle=False)
    except FedAuditError:
        raise
    except FileNotFoundError:
        raise FedAuditError(f"{flag} {path}: no such file") from None
    except IsADirectoryError:
        raise FedAuditError(f"{flag} {path} is a directory; give a .npy file") from None
    except (OSError, ValueError, EOFError) as exc:
        raise FedAuditError(f"{flag} {path} is not a readable .npy array: {exc}") from None
    return arr


def number_list(flag: str, text: str, kind: type) -> list:
    """Comma-separated numbers of ``kind`` (int or float); bad text is a FedAuditError (exit 2)."""
    values = []
    for part in str(text).split(","):
        if not part.strip():
            continue
        try:
            value = float(part)
        except ValueError:
            raise FedAuditError(f"{flag} expects comma-separated numbers, got {text!r}") from None
        if kind is int:
            if not value.is_integer():
                raise FedAuditError(f"{flag} expects comma-separated integers, got {text!r}")
            value = int(value)
        values.append(value)
    if not values:
        raise FedAuditError(f"{flag} needs at least one value, got {text!r}")
    return values


def method_list(flag: str, text: str, allowed: Sequence[str]) -> list[str]:
    """``--method a,b`` or ``all`` as a list of allowed method names (exit 2 otherwise)."""
    names = list(allowed) if text.strip().lower() == "all" else [m.strip().lower() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in allowed]
    if bad or not names:
        raise FedAuditError(f"{flag} must be 'all' or comma-separated names from {', '.join(allowed)}, got {text!r}")
    return list(dict.fromkeys(names))


def accountant_list(flag: str, text: str, builtins: Sequence[str], closed_forms: Sequence[str] = ()) -> list[str]:
    """``--accountant a,b`` as a list of accountants: ``all`` is ``builtins``; otherwise each name is
    one of ``closed_forms`` (compose's basic and advanced), a name (or alias) of the
    :data:`~fedaudit.accounting.ACCOUNTANTS` registry, or a ``package.module:attr`` reference that
    imports — what the Python API's ``accountant=``/``method=`` takes. An unknown name is one line
    (exit 2) listing the registered names."""
    from fedaudit.accounting.accountants import ACCOUNTANTS
    from fedaudit.registry import did_you_mean

    if text.strip().lower() == "all":
        return list(builtins)
    names = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name = part if ":" in part else ACCOUNTANTS.canonical(part)
        if name not in closed_forms and name not in ACCOUNTANTS:
            known = [*closed_forms, *ACCOUNTANTS.names()]
            raise FedAuditError(f"{flag}: unknown accountant {part!r}{did_you_mean(name, known)}; give 'all' "
                                f"({', '.join(builtins)}), or comma-separated names from {', '.join(known)} or "
                                f"'package.module:attr' references")
        if ":" in name:
            try:
                ACCOUNTANTS.factory(name)  # the reference imports and names something callable
            except FedAuditError as exc:
                raise FedAuditError(f"{flag}: {exc}") from None
        names.append(name)
    if not names:
        raise FedAuditError(f"{flag} needs at least one accountant name, got {text!r}")
    return list(dict.fromkeys(names))
