"""A client's persistent LDP account: one JSON file on the node that outlives every Flower run.

``context.state``, where :func:`~.ldp.ldp_mod` keeps a run's account, belongs to one run: submitting
the app again (``flwr run`` a second time) starts every node with an empty state, so a budget kept
there is a budget *per run*. A :class:`LedgerFile` is the node's account across runs. Every report
the mod releases is charged to it *before* it leaves the node (write-ahead), so a crash after the
charge can only over-count, never let a report out uncharged.

**Format** — strict JSON (:mod:`fedaudit.json`)::

    {"format": "fedaudit-ldp-ledger", "version": 1,
     "entries": [{"partition": p, "run": run_id, "round": r, "mechanism": fingerprint,
                  "name": "privunitg", "epsilon": ε, "delta": δ}, ...]}

one entry per released report: the partition id p, Flower's run id and the server round, the
56-bit fingerprint of the mechanism (:func:`~.ldp.ldp_mod` sends the same in ``"ldp-mechanism"``),
its name and its claimed (ε, δ) per report. The account of p is the composition of its entries
(:class:`~fedaudit.accounting.Ledger`): entries of the mod's own mechanism enter as that mechanism
(so ``method="pld"`` composes its exact privacy loss distribution), other entries as their claimed
(ε, δ) guarantee.

**Concurrency and durability** — :meth:`LedgerFile.charge` holds an exclusive ``fcntl.flock`` on the
sidecar ``<path>.lock`` (the ledger itself is replaced on every write, so it cannot carry the lock)
while it reads the ledger, asks ``admit`` whether one more entry fits, and writes the new document
to a temporary file in the same directory, flushed, fsynced and renamed over the ledger
(:func:`~fedaudit.reports.io.atomic_write`), then fsyncs the directory. Readers see the old ledger
or the new one, never half of one, and concurrent writers (Ray actors of one simulation, processes
of one SuperNode) never lose each other's charge. A ledger that is not valid JSON of this format is
an error, never an empty account (fail closed).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from fedaudit.errors import FedAuditError
from fedaudit.json import dumps, loads
from fedaudit.validation import check_int, check_real

__all__ = ["LedgerFile", "LedgerRecord", "LEDGER_FORMAT", "NODE_CONFIG_KEY"]

#: ``format`` of a ledger file
LEDGER_FORMAT = "fedaudit-ldp-ledger"
_VERSION = 1
#: the node-config key naming the ledger file (``flower-supernode --node-config "ldp-ledger-path='…'"``)
NODE_CONFIG_KEY = "ldp-ledger-path"


@dataclass(frozen=True)
class LedgerRecord:
    """One released report: ``partition``, Flower ``run`` id, server ``round``, the ``mechanism``
    fingerprint, its ``name`` and its claimed (``epsilon``, ``delta``) per report."""

    partition: int
    run: int
    round: int
    mechanism: int
    name: str
    epsilon: float
    delta: float

    @classmethod
    def from_dict(cls, value: Any, where: str) -> "LedgerRecord":
        if not isinstance(value, dict) or set(value) != {f for f in cls.__dataclass_fields__}:
            raise FedAuditError(f"{where} must be an object with keys {sorted(cls.__dataclass_fields__)}, got {value!r}")
        if not isinstance(value["name"], str):
            raise FedAuditError(f"{where}: name must be a string, got {value['name']!r}")
        return cls(partition=check_int(f"{where}.partition", value["partition"], low=0),
                   run=check_int(f"{where}.run", value["run"], low=0),
                   round=check_int(f"{where}.round", value["round"], low=0),
                   mechanism=check_int(f"{where}.mechanism", value["mechanism"], low=0),
                   name=value["name"],
                   epsilon=check_real(f"{where}.epsilon", value["epsilon"], low=0.0, open_low=True),
                   delta=check_real(f"{where}.delta", value["delta"], low=0.0, high=1.0, open_high=True))


def _check_path(path: Any, what: str) -> Path:
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise FedAuditError(f"{what} must be an absolute file path, got {path!r}")
    p = Path(path)
    if not p.is_absolute():
        raise FedAuditError(f"{what} must be an absolute file path (a relative one would follow the ClientApp "
                            f"process's working directory), got {str(path)!r}")
    if p.is_dir():
        raise FedAuditError(f"{what} {p} is a directory; it must name the ledger file")
    if not p.parent.is_dir():
        raise FedAuditError(f"{what} {p}: its directory {p.parent} does not exist (create it on the node)")
    return p


class LedgerFile:
    """The persistent account at ``path`` (absolute; its directory must exist; the file is created
    by the first charge). See the module docstring for the format and the locking."""

    def __init__(self, path: str | os.PathLike, *, what: str = "ledger_path"):
        self.path = _check_path(path, what)

    def __repr__(self) -> str:
        return f"LedgerFile({str(self.path)!r})"

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            raise FedAuditError("a persistent LDP ledger needs POSIX file locks (fcntl), which this platform "
                                "lacks") from None
        lock = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise FedAuditError(f"cannot open the ledger lock {lock}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocks while another process charges (a short critical section)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _read(self) -> list[LedgerRecord]:
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise FedAuditError(f"cannot read the LDP ledger {self.path}: {exc.strerror or exc}") from None
        doc = loads(text, what=f"the LDP ledger {self.path}")
        if not isinstance(doc, dict) or doc.get("format") != LEDGER_FORMAT or doc.get("version") != _VERSION \
                or not isinstance(doc.get("entries"), list):
            raise FedAuditError(f"{self.path} is not a fedaudit LDP ledger (format {LEDGER_FORMAT!r}, version "
                                f"{_VERSION}, a list of entries); refusing to treat it as an empty account")
        return [LedgerRecord.from_dict(e, f"{self.path}: entries[{i}]") for i, e in enumerate(doc["entries"])]

    def entries(self, partition: int | None = None) -> tuple[LedgerRecord, ...]:
        """The recorded reports (of one partition), in charge order."""
        with self._locked():
            records = self._read()
        return tuple(r for r in records if partition is None or r.partition == partition)

    def charge(self, record: LedgerRecord,
               admit: Callable[[tuple[LedgerRecord, ...]], bool]) -> tuple[bool, tuple[LedgerRecord, ...]]:
        """Under the lock: if ``admit(entries of record.partition)`` append ``record`` and write the ledger
        atomically. Returns (charged, the partition's entries before this charge)."""
        from fedaudit.reports.io import atomic_write, fsync_dir

        with self._locked():
            records = self._read()
            mine = tuple(r for r in records if r.partition == record.partition)
            if not admit(mine):
                return False, mine
            doc = {"format": LEDGER_FORMAT, "version": _VERSION,
                   "entries": [asdict(r) for r in records] + [asdict(record)]}
            try:
                atomic_write(self.path, dumps(doc, indent=1) + "\n")
            except OSError as exc:
                raise FedAuditError(f"cannot write the LDP ledger {self.path}: {exc.strerror or exc}") from None
            fsync_dir(self.path.parent)
            return True, mine
