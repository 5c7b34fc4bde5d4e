"""Checkpoints of chunked runs (:func:`fedaudit.engine.iter_chunks` ``checkpoint=FILE``): an
append-only, tamper-evident record of each finished chunk, so a killed run can resume.

Checkpoint file (``checkpoint=FILE``), JSON lines in strict JSON (:mod:`fedaudit.json`), a
tamper-evident chain (:mod:`fedaudit.chain`):

* line 1, the header ``{"format": "fedaudit-checkpoint", "version": 2, "digest": D, "chunks": n,
  "key": K, "nonce": N, "key_id": I, "mac": M}``, written to a temporary file, fsynced and renamed
  into place (atomic); ``D`` is :func:`config_digest` ``(K, n)``, the SHA-256 of the canonical
  JSON of the caller's ``key`` (a description of ``fn``, every parameter, the root seed) and the
  chunk count; ``N`` a fresh random nonce; ``I`` names the user's checkpoint secret
  (:func:`fedaudit.chain.key_id`) and ``M`` is the header's HMAC under the run's key
  ``derive_key(secret, "engine-checkpoint", N)``;
* then one line ``{"chunk": i, "result": R, "seq": s, "prev": P, "mac": M}`` per finished chunk
  (``s`` = 1, 2, … in completion order, ``P`` the mac of the line before), appended as it
  completes with one ``write`` followed by ``flush`` and ``fsync``. A record is stored and
  returned as ``fedaudit.json.jsonable(result)`` (tuples become lists, numpy arrays lists,
  ±inf/nan the strings ``"inf"``/``"-inf"``/``"nan"``), so with a checkpoint a fresh and a
  resumed run return identical values; chunk functions should return JSON-native data (ints,
  floats, lists, dicts).

The secret is this user's (``checkpoint.key`` in :func:`fedaudit.chain.state_dir`, never beside
the checkpoint), so whoever can write the checkpoint's folder cannot make a record the resumed run
accepts: a changed count, a record from another run, two records swapped or one deleted before the
last break the chain and are refused with one :class:`FedAuditError` naming the file and the
line. A checkpoint is resumed by the user, on the machine, that wrote it (elsewhere: one line
saying it cannot be authenticated there). Authenticated records are then checked by the caller's
``validate`` hook (:func:`iter_chunks`), which states the shape and range of what it will sum.

A process killed mid-append (SIGKILL) leaves at most a torn last line: on resume it is detected
(it does not parse), ignored and cut off before new records are appended; lost last records are
simply computed again. An invalid line before the last one, a record of a chunk out of range or a
chunk recorded twice is corruption and a :class:`FedAuditError`. ``resume=True`` reloads the
finished chunks and runs only the others; a header whose digest differs from this run's is
refused (never mixed in); ``resume=True`` without the file starts from the beginning; an
existing file without ``resume=True`` is refused (it would be overwritten). The file is held
under an exclusive ``flock`` while a run writes it (POSIX), so two runs never append to one
checkpoint.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fedaudit import chain
from fedaudit.deprecation import module_aliases
from fedaudit.errors import FedAuditError, writing
from fedaudit.json import dumps, jsonable, loads

__all__ = ["CHUNK_CHECKPOINT_FORMAT", "config_digest", "Checkpoint"]

#: ``format`` field of a checkpoint header, and its version
CHUNK_CHECKPOINT_FORMAT = "fedaudit-checkpoint"
_CHECKPOINT_VERSION = 2


def config_digest(key: Any, n_chunks: int) -> str:
    """SHA-256 (hex) of ``{"chunks": n_chunks, "key": key}`` as canonical strict JSON (sorted
    keys, no spaces): the identity of a chunked run, stored in its checkpoint header."""
    try:
        text = dumps({"chunks": int(n_chunks), "key": key}, sort_keys=True, separators=(",", ":"))
    except FedAuditError as exc:
        raise FedAuditError(f"key (the checkpoint's description of the run) must be JSON data: {exc}") from None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Checkpoint:
    """The append-only, chained record of a chunked run (format in the module docstring)."""

    def __init__(self, path: str | os.PathLike, key: Any, n: int, resume: bool):
        self.path = Path(path)
        self.digest = config_digest(key, n)
        self.finished: dict[int, Any] = {}
        self.lines: dict[int, int] = {}  # chunk -> line number of its record (for the messages)
        self.records = 0  # finished chunks in the file: reloaded and recorded by this run
        if self.path.is_dir():
            raise FedAuditError(f"checkpoint {self.path} is a directory, expected a file")
        if self.path.exists():
            if not resume:
                raise FedAuditError(f"checkpoint {self.path} already exists: pass resume=True (--resume) to "
                                    f"continue it, or remove it to start again")
            self.file = self._open("r+b")  # locked before reading: no other run appends meanwhile
            try:
                valid = self._load(key, n)
            except BaseException:
                self.file.close()
                raise
            self.records = len(self.finished)
            self.file.truncate(valid)  # cut a torn last record before appending
            self.file.seek(valid)
        else:
            header, self.chain = chain.new_user_chain(chain.ENGINE_PURPOSE, {
                "format": CHUNK_CHECKPOINT_FORMAT, "version": _CHECKPOINT_VERSION, "digest": self.digest, "chunks": n,
                "key": jsonable(key)})
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            try:
                with open(tmp, "wb") as fh:
                    fh.write((dumps(header, sort_keys=True) + "\n").encode("utf-8"))
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
            except OSError as exc:
                raise FedAuditError(f"cannot write checkpoint {self.path}: {exc.strerror or exc}") from None
            _fsync_dir(self.path.parent)
            self.file = self._open("ab")

    def _open(self, mode: str):
        try:
            fh = open(self.path, mode)
        except OSError as exc:
            raise FedAuditError(f"cannot open checkpoint {self.path}: {exc.strerror or exc}") from None
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no advisory lock
            return fh
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            raise FedAuditError(f"checkpoint {self.path} is being written by another run") from None
        return fh

    def _load(self, key: Any, n: int) -> int:
        """Read the header and records into ``finished``, authenticating each (the chain of the
        module docstring); return the byte length of the valid part."""
        data = self.path.read_bytes()
        lines = data.split(b"\n")  # the piece after the last newline is b"" or a torn record
        what = f"checkpoint {self.path}"
        start_over = "remove it to start again"
        try:
            header = loads(lines[0], what=what)
        except FedAuditError:
            header = None
        if (not isinstance(header, dict) or header.get("format") != CHUNK_CHECKPOINT_FORMAT or len(lines) < 2):
            raise FedAuditError(f"{what} is not a fedaudit checkpoint (no valid header line)")
        if header.get("version") != _CHECKPOINT_VERSION:
            raise FedAuditError(f"{what} has format version {header.get('version')!r}, this fedaudit reads "
                                f"version {_CHECKPOINT_VERSION}; {start_over}")
        if header.get("digest") != self.digest:
            raise FedAuditError(f"{what} was written by a different configuration "
                                f"({_differences(header.get('key'), header.get('chunks'), key, n)}); it is refused "
                                f"rather than mixed in: remove it or choose another checkpoint file")
        self.chain = chain.open_user_chain(header, chain.ENGINE_PURPOSE, what, start_over)
        valid = len(lines[0]) + 1
        complete = lines[1:-1]  # each was followed by a newline; lines[-1] is b"" or a torn tail (ignored)
        for j, line in enumerate(complete):
            where = f"{what}: line {j + 2}"
            try:
                rec = loads(line, what=where)
            except FedAuditError:
                if j == len(complete) - 1 and lines[-1] == b"":  # the last line, torn
                    break
                raise FedAuditError(f"{where} is not a valid record (not JSON); {start_over}") from None
            if not self.chain.follows(rec):
                raise FedAuditError(f"{where} fails its authentication: the record was altered, or one before it "
                                    f"is missing or out of place; {start_over}")
            i = _parse_record(rec)
            if i is None:
                raise FedAuditError(f"{where} is not a valid record; {start_over}")
            if not 0 <= i < n:
                raise FedAuditError(f"{where} records chunk {i}, out of range [0, {n}); {start_over}")
            if i in self.finished:
                raise FedAuditError(f"{where} records chunk {i} a second time; {start_over}")
            self.finished[i] = rec["result"]
            self.lines[i] = j + 2
            valid += len(line) + 1
        return valid

    def validate(self, check: Callable[[Any, Any], None], chunks: Sequence[Any]) -> None:
        """Apply the caller's ``check(result, chunk)`` to every reloaded record; a record it
        rejects (any exception but an interrupt) is one :class:`FedAuditError` naming the file, the
        line and the chunk."""
        for i in sorted(self.finished):
            try:
                check(self.finished[i], chunks[i])
            except Exception as exc:
                raise FedAuditError(f"checkpoint {self.path}: line {self.lines[i]} (chunk {i}) is not a valid "
                                    f"result: {exc}; remove it to start again") from None

    def record(self, index: int, result: Any) -> Any:
        """Append chunk ``index``'s result as the chain's next record (one write, flush, fsync);
        return it as stored."""
        stored = jsonable(result, f"result of chunk {index}")
        line = dumps(self.chain.seal({"chunk": index, "result": stored}), separators=(",", ":")) + "\n"
        with writing(f"checkpoint {self.path}"):  # a torn last line is cut on resume
            self.file.write(line.encode("utf-8"))
            self.file.flush()
            os.fsync(self.file.fileno())
        self.records += 1
        return stored

    def close(self) -> None:
        self.file.close()


def _parse_record(rec: Any) -> int | None:
    """The chunk index of an authenticated record, None when it is not a record."""
    if not (isinstance(rec, dict) and set(rec) == {"chunk", "result", "seq", "prev", "mac"}
            and type(rec["chunk"]) is int):
        return None
    return rec["chunk"]


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _differences(old_key: Any, old_n: Any, key: Any, n: int) -> str:
    """Which top-level fields of the stored and the new configuration differ, for the refusal."""
    if old_n != n:
        return f"{old_n} chunks recorded, {n} now"
    old, new = jsonable(old_key), jsonable(key)
    if isinstance(old, dict) and isinstance(new, dict):
        names = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if names:
            return "differs in " + ", ".join(names)
    return "its key differs"


#: the name this had before issue #24 (deprecated; a read warns with the new name)
__getattr__ = module_aliases(__name__, {"CHECKPOINT_FORMAT": ("CHUNK_CHECKPOINT_FORMAT", lambda: CHUNK_CHECKPOINT_FORMAT)})
