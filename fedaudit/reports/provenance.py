"""What code computed a report: the fedaudit modules a run imported, the plugins its plan named and
the versions of the libraries that compute its numbers (manifest fields of schema 1.4).

The git commit and ``git_dirty`` of :func:`fedaudit.reports.model.package_checkout` describe the
*source tree*; Python may run other code than that tree holds. A ``.pyc`` in ``__pycache__``
whose header matches the source file (same modification time and size, or an unchecked hash) is
loaded instead of the source, so bytecode compiled from a modified ``audit/bounds.py`` and planted
there runs with a clean checkout. :func:`code_provenance` therefore looks at the modules actually
imported: it hashes the source of every loaded ``fedaudit`` module and, for each one whose cached
bytecode the import system would have used (its header validates against the source), compares
that bytecode with the source compiled afresh. Code objects compare by value (instructions,
constants, names, line table, nested functions; not the file name), so bytecode that does not
come from the source is *stale* and named in the report, and ``fedaudit verify`` refuses it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import marshal
import os
import re
import sys
import warnings
from typing import Any, Iterable

__all__ = ["DEPENDENCIES", "dependency_versions", "code_provenance", "plugin_sources", "REFERENCE_RE"]

#: the distributions whose code computes a number of some claim (accountants, samplers,
#: classifiers, simulations), recorded by version in every report
DEPENDENCIES: tuple[str, ...] = ("dp-accounting", "opacus", "numba", "scikit-learn", "flwr", "torch", "numpy",
                                 "scipy")

#: a ``package.module:attr`` reference (ASCII names) as plans and the registries accept it
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
REFERENCE_RE = re.compile(rf"^{_NAME}(\.{_NAME})*:{_NAME}(\.{_NAME})*$")


def dependency_versions() -> dict[str, str | None]:
    """``{distribution: installed version}`` of :data:`DEPENDENCIES` (None when not installed)."""
    out: dict[str, str | None] = {}
    for dist in DEPENDENCIES:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _bytecode_used(source_path: str, source: bytes, pyc: bytes) -> bool:
    """Whether the import system loads ``pyc`` (the cached bytecode of ``source_path``) rather
    than compiling the source: the header's magic number is this interpreter's and its
    validation (modification time and size, or the source hash; an unchecked hash is always
    accepted) passes, as in ``importlib._bootstrap_external``."""
    import _imp

    if len(pyc) < 16 or pyc[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(pyc[4:8], "little")
    if flags & ~0b11:
        return False
    if flags & 0b1:  # hash-based
        mode = _imp.check_hash_based_pycs
        if mode == "never" or (mode == "default" and not flags & 0b10):
            return True
        return pyc[8:16] == importlib.util.source_hash(source)
    try:
        st = os.stat(source_path)
    except OSError:
        return False
    return (int.from_bytes(pyc[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(pyc[12:16], "little") == st.st_size & 0xFFFFFFFF)


#: :func:`_stale` of (source SHA-256, bytecode SHA-256): compiling is most of the cost of
#: :func:`code_provenance` (some 0.2 s for 80 modules), paid once per pair in a process
_STALE_CACHE: dict[tuple[bytes, bytes], bool] = {}


def _stale(module: Any, path: str, source: bytes) -> bool:
    """Whether ``module`` ran from bytecode that is not its source compiled: its cached ``.pyc``
    is one the import would use and unmarshals to other code than ``compile(source)``."""
    cached = getattr(module, "__cached__", None)
    pyc = _read(cached) if isinstance(cached, str) else None
    if pyc is None or not _bytecode_used(path, source, pyc):
        return False
    pair = (hashlib.sha256(source).digest(), hashlib.sha256(pyc).digest())
    if pair not in _STALE_CACHE:
        try:
            loaded = marshal.loads(pyc[16:])
            with warnings.catch_warnings():  # the import compiled it once already and warned then
                warnings.simplefilter("ignore")
                fresh = compile(source, path, "exec", dont_inherit=True, optimize=sys.flags.optimize)
        except (ValueError, EOFError, TypeError, SyntaxError):
            _STALE_CACHE[pair] = True  # unreadable bytecode the import accepted, or a source that does not compile
        else:
            _STALE_CACHE[pair] = loaded != fresh
    return _STALE_CACHE[pair]


def code_provenance(package: str = "fedaudit") -> dict[str, Any]:
    """The fedaudit code this process runs: ``{"sources_sha256", "modules", "stale_bytecode"}``.

    ``sources_sha256`` is SHA-256 over ``name NUL sha256(source) LF`` of every loaded module of
    ``package`` in name order, ``modules`` their number, ``stale_bytecode`` the names of those
    that run code other than their source (see the module docstring; a module loaded from a
    ``.pyc`` without a source file counts, and hashes its bytecode)."""
    h = hashlib.sha256()
    count = 0
    stale: list[str] = []
    for name, module in sorted(list(sys.modules.items()), key=lambda item: item[0]):
        if module is None or not (name == package or name.startswith(package + ".")):
            continue
        spec = getattr(module, "__spec__", None)
        path = getattr(spec, "origin", None) or getattr(module, "__file__", None)
        if not isinstance(path, str) or not os.path.isfile(path):
            continue  # a namespace package or a module built in memory: no file ran
        blob = _read(path)
        if blob is None:
            continue
        if not path.endswith(".py") or _stale(module, path, blob):
            stale.append(name)
        h.update(name.encode("utf-8") + b"\0" + hashlib.sha256(blob).hexdigest().encode("ascii") + b"\n")
        count += 1
    return {"sources_sha256": h.hexdigest(), "modules": count, "stale_bytecode": stale}


def plugin_sources(references: Iterable[str]) -> dict[str, dict[str, str | None]]:
    """``{"module:attr": {"sha256", "file"}}`` for each reference: the SHA-256 and file name of
    the source file of the module it names, as loaded in this process (both None when that
    module was not imported here or has no source file). Nothing is imported."""
    out: dict[str, dict[str, str | None]] = {}
    for ref in sorted(set(references)):
        module = sys.modules.get(ref.partition(":")[0])
        path = getattr(module, "__file__", None)
        blob = _read(path) if isinstance(path, str) else None
        out[ref] = {"sha256": None if blob is None else hashlib.sha256(blob).hexdigest(),
                    "file": None if blob is None else os.path.basename(path)}
    return out
