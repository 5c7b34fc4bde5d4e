"""Tamper-evident checkpoints: records chained by HMAC under a secret their folder does not hold.

A checkpoint is read back by a later run (``--resume``), and what it holds becomes part of a
result: a count summed into a certified ε, a claim's evidence in a signed report. Whoever can
write the checkpoint's folder could otherwise change a number and have the resumed run certify
it. So every checkpoint fedaudit writes (a plan run's ``DIR/.checkpoint/``, an engine
``--checkpoint FILE``, a stress grid's ``cells.jsonl``) is a *chain*:

* a **header** names the run (its configuration and a random ``nonce``, fresh for every run);
* the run's key is ``k = HMAC-SHA256(secret, "fedaudit-<purpose>" ‖ 0x00 ‖ nonce)``
  (:func:`derive_key`), so a record of one run never authenticates in another;
* the header carries ``mac = HMAC(k, "" ‖ 0x00 ‖ canonical JSON of the header without mac)``;
* record *s* (``seq`` = 1, 2, … in the order they were written) carries ``prev``, the ``mac`` of
  record *s − 1* (of the header for the first), and ``mac = HMAC(k, prev ‖ 0x00 ‖ canonical JSON
  of the record without mac)`` (:func:`record_mac`).

A reader recomputes every MAC in ``seq`` order (:class:`Chain`): an edited record, one moved from
another run, two swapped or one missing before the last all break the chain. Only the *last*
records may be missing undetected — exactly what a run killed before writing them leaves; their
work is simply done again. Canonical JSON is :func:`fedaudit.json.dumps` with sorted keys and no
spaces, UTF-8; the reader canonicalises the JSON it parsed, so the MAC covers values, not layout.

The secret. A plan run that signs its report takes the report key (``FEDAUDIT_REPORT_KEY``) as
its secret, so its checkpoints resume wherever the key is. Otherwise, and for engine checkpoints
and stress cells (:func:`new_user_chain`, :func:`open_user_chain`), the secret is this user's fedaudit secret: 32 random bytes in ``checkpoint.key`` of the state
directory (:func:`state_dir`: ``$FEDAUDIT_STATE_DIR``, else ``$XDG_STATE_HOME/fedaudit``, else
``~/.local/state/fedaudit``), created on first use with mode 0600 (directory 0700), never inside
an output folder. One secret per user rather than one per run: the per-run key comes from the
nonce, and nothing is left behind when a checkpoint is deleted or a run abandoned. A header
records which secret it used and ``key_id`` (:func:`key_id`, an HMAC of a constant: it reveals
nothing about the secret), so a checkpoint resumed by another user, on another machine or under
another signing key is told apart from a tampered one. The threat model: someone who can write
(or replace) the output folder but cannot read the user's state directory or the signing key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedaudit.errors import CheckpointError, FedAuditError
from fedaudit.json import dumps

__all__ = ["STATE_ENV", "SECRET_FILE", "PLAN_PURPOSE", "ENGINE_PURPOSE", "CELLS_PURPOSE", "state_dir",
           "secret_path", "user_secret", "key_id", "new_nonce", "is_nonce", "derive_key", "record_mac", "Chain",
           "new_user_chain", "open_user_chain"]

#: environment variable naming the state directory that holds the user's checkpoint secret
STATE_ENV = "FEDAUDIT_STATE_DIR"
#: the secret's file name inside the state directory
SECRET_FILE = "checkpoint.key"
#: the purposes keys are derived for (domain separation between the chained file formats)
PLAN_PURPOSE = "plan-checkpoint"
ENGINE_PURPOSE = "engine-checkpoint"
CELLS_PURPOSE = "stress-cells"

_SECRET_BYTES = 32
_NONCE = re.compile(r"[0-9a-f]{32}")
_MAC = re.compile(r"[0-9a-f]{64}")


def state_dir() -> Path:
    """The directory of fedaudit's per-user state: ``$FEDAUDIT_STATE_DIR``, else
    ``$XDG_STATE_HOME/fedaudit`` (an absolute path), else ``~/.local/state/fedaudit``."""
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "fedaudit"
    return Path.home() / ".local" / "state" / "fedaudit"


def secret_path() -> Path:
    """Where this user's checkpoint secret is (or will be) kept."""
    return state_dir() / SECRET_FILE


def user_secret(*, create: bool) -> bytes | None:
    """This user's checkpoint secret (32 bytes); with ``create``, made on first use (mode 0600, in
    a 0700 directory; two processes creating it at once agree on one). None when it does not exist
    and ``create`` is false. A file that is not a secret, or a state directory that cannot be
    written, is a :class:`FedAuditError` naming the path and :data:`STATE_ENV`."""
    path = secret_path()
    secret = _read_secret(path)
    if secret is not None or not create:
        return secret
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{SECRET_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(secrets.token_hex(_SECRET_BYTES) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)  # never replaces: a secret another process made first wins
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
    except OSError as exc:
        raise FedAuditError(f"cannot create fedaudit's checkpoint secret {path}: {exc.strerror or exc} "
                            f"(set {STATE_ENV} to a private, writable directory)") from None
    secret = _read_secret(path)
    if secret is None:  # pragma: no cover - removed between link and read
        raise FedAuditError(f"fedaudit's checkpoint secret {path} vanished while it was created")
    return secret


def _read_secret(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            text = fh.read(4 * _SECRET_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FedAuditError(f"cannot read fedaudit's checkpoint secret {path}: {exc.strerror or exc}") from None
    try:
        secret = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        secret = b""
    if len(secret) != _SECRET_BYTES:
        raise FedAuditError(f"{path} is not a fedaudit checkpoint secret (64 hex digits); remove it (checkpoints "
                            f"written with it can then no longer be resumed) or set {STATE_ENV}")
    return secret


def key_id(secret: bytes) -> str:
    """A short public name of ``secret`` (16 hex digits of an HMAC of a constant): equal ids say
    two headers used one secret; it reveals nothing about the secret."""
    return hmac.new(secret, b"fedaudit key id", hashlib.sha256).hexdigest()[:16]


def new_nonce() -> str:
    """A fresh run nonce: 32 random hex digits."""
    return secrets.token_hex(16)


def is_nonce(value: Any) -> bool:
    """``value`` is a nonce as :func:`new_nonce` makes them (safe as part of a file name)."""
    return isinstance(value, str) and _NONCE.fullmatch(value) is not None


def derive_key(secret: bytes, purpose: str, nonce: str) -> bytes:
    """The run's MAC key: ``HMAC-SHA256(secret, "fedaudit-<purpose>" ‖ 0x00 ‖ nonce)``."""
    return hmac.new(secret, f"fedaudit-{purpose}".encode("ascii") + b"\0" + nonce.encode("ascii"),
                    hashlib.sha256).digest()


def _canonical(record: Mapping[str, Any]) -> bytes:
    return dumps(dict(record), sort_keys=True, separators=(",", ":")).encode("utf-8", "surrogatepass")


def record_mac(key: bytes, prev: str, record: Mapping[str, Any]) -> str:
    """``HMAC-SHA256(key, prev ‖ 0x00 ‖ canonical JSON of record)`` in hex (``prev`` is "" for a
    header, else the previous record's mac; ``record`` without its own ``mac``)."""
    return hmac.new(key, prev.encode("ascii") + b"\0" + _canonical(record), hashlib.sha256).hexdigest()


def _same(mac: Any, expected: str) -> bool:
    """``mac`` is a well-formed MAC equal to ``expected`` (compared in constant time)."""
    return isinstance(mac, str) and _MAC.fullmatch(mac) is not None and hmac.compare_digest(mac, expected)


class Chain:
    """One run's chain of records (see the module docstring): :meth:`seal` the next record on the
    writing side, :meth:`follows` each stored one in ``seq`` order on the reading side; both
    advance the chain's tip."""

    def __init__(self, key: bytes, header: Mapping[str, Any]):
        """Start after ``header`` (a dict with its ``mac``); use :meth:`header_ok` first when the
        header was read back."""
        self.key = key
        self.tip = str(header.get("mac", ""))
        self.seq = 0
        self._header = header

    @staticmethod
    def seal_header(key: bytes, header: Mapping[str, Any]) -> dict[str, Any]:
        """``header`` with its ``mac``."""
        body = {k: v for k, v in header.items() if k != "mac"}
        return {**body, "mac": record_mac(key, "", body)}

    def header_ok(self) -> bool:
        """The header's mac is right (it was written with this key and not altered since)."""
        body = {k: v for k, v in self._header.items() if k != "mac"}
        return _same(self._header.get("mac"), record_mac(self.key, "", body))

    def seal(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """``record`` as the next link: with ``seq``, ``prev`` and ``mac``."""
        body = {**{k: v for k, v in record.items() if k not in ("seq", "prev", "mac")},
                "seq": self.seq + 1, "prev": self.tip}
        sealed = {**body, "mac": record_mac(self.key, self.tip, body)}
        self.seq, self.tip = self.seq + 1, sealed["mac"]
        return sealed

    def follows(self, record: Any) -> bool:
        """``record`` (as read back) is the next link: its ``seq`` is the next number, its ``prev``
        this chain's tip and its ``mac`` right. Advances on success only."""
        if not isinstance(record, Mapping):
            return False
        seq, prev = record.get("seq"), record.get("prev")
        if type(seq) is not int or seq != self.seq + 1 or not _same(prev, self.tip):
            return False
        body = {k: v for k, v in record.items() if k != "mac"}
        if not _same(record.get("mac"), record_mac(self.key, self.tip, body)):
            return False
        self.seq, self.tip = seq, record["mac"]
        return True


def new_user_chain(purpose: str, fields: Mapping[str, Any]) -> tuple[dict[str, Any], Chain]:
    """Start the chain of a new file authenticated with this user's secret (created on first
    use): ``(header, chain)``, the header being ``fields`` with a fresh ``nonce``, the secret's
    ``key_id`` and its ``mac`` under ``derive_key(secret, purpose, nonce)``."""
    secret = user_secret(create=True)
    nonce = new_nonce()
    key = derive_key(secret, purpose, nonce)
    header = Chain.seal_header(key, {**fields, "nonce": nonce, "key_id": key_id(secret)})
    return header, Chain(key, header)


def open_user_chain(header: Mapping[str, Any], purpose: str, what: str, advice: str) -> Chain:
    """The chain of a header read back that :func:`new_user_chain` wrote: this user's secret, the
    key of its nonce, its mac checked. Each way it can fail is one :class:`CheckpointError`
    ``"<what> …; <advice>"``: no valid nonce, no secret here or another one (another user,
    machine or :data:`STATE_ENV` wrote it), an altered header."""
    nonce = header.get("nonce")
    if not is_nonce(nonce):
        raise CheckpointError(f"{what}: its header has no valid nonce (altered?); {advice}")
    secret = user_secret(create=False)
    if secret is None or key_id(secret) != header.get("key_id"):
        reason = (f"fedaudit's secret {secret_path()} does not exist" if secret is None else
                  f"it was written with another secret than {secret_path()}")
        raise CheckpointError(f"{what} cannot be authenticated on this machine by this user ({reason}; another "
                              f"user, machine or {STATE_ENV} wrote it): {advice}")
    link = Chain(derive_key(secret, purpose, nonce), header)
    if not link.header_ok():
        raise CheckpointError(f"{what}: its header fails its authentication (altered); {advice}")
    return link
