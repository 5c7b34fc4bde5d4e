"""Ed25519 signatures of a report folder: who signed a report, and what they vouched for.

HMAC-SHA256 (:mod:`fedaudit.reports.integrity`) proves that a report came from *a* holder of a
shared key, and every verifier holds that key, so every verifier could have made it. An Ed25519
signature is made with a private key that only its holder has and is checked with the public
key: a verifier cannot make one.

* ``fedaudit keygen`` (:func:`generate_keypair`): an Ed25519 key pair through ``cryptography``.
  The private key is PEM PKCS#8, written with mode 0600 and encrypted under a passphrase when one
  is given; the public key is PEM SubjectPublicKeyInfo (mode 0644). An optional signer name is
  written before the PEM block of both files as a ``Signer: NAME`` line (text before a PEM block
  is explanatory text, which PEM readers skip). Existing files are not replaced without ``force``.
* ``fedaudit sign DIR --key-file PRIVATE.pem`` (:func:`sign_folder`) is a separate step after the
  run, so no plugin of the run ever sees the private key. The report is verified first (every
  verdict re-derived from its evidence, as for HMAC signing); then the *statement*
  (:func:`statement_for`) is signed and written beside report.json as
  :data:`~fedaudit.reports.integrity.SIGNATURE_FILE`. report.json itself is not touched.
* The statement binds the report digest (SHA-256 of the canonical report, which covers its
  claims, evidence, embedded plan text, provenance and renderings) and its content digest, the
  plan's SHA-256, fedaudit's version, git commit and source hash, the plan's root seed and every
  claim's seed, the environment (Python, platform, the dependencies' versions), the signer's
  fingerprint (:func:`fingerprint`: SHA-256 of the raw 32-byte public key) and name, and the
  signing time. The signed bytes are its canonical JSON
  (:func:`~fedaudit.reports.canonical.canonical_bytes`).
* ``fedaudit verify DIR --public-key PUBLIC.pem`` and/or ``--signer FINGERPRINT``
  (:func:`verify_folder`): the signature must verify, be made by that key, and every fact it
  binds must be the folder's. Without either, a signature is *present but unverified*: it is
  checked against the public key it carries, which whoever edits the folder can replace with
  their own, so it establishes nothing about who signed.

The signature file is data, read like report.json: a regular file inside the folder (no link, no
FIFO), at most 1 MiB, strict JSON with exactly the keys of its format; nothing in it is run.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as _dt
import hashlib
import hmac
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from fedaudit import json as fjson
from fedaudit.errors import FedAuditError
from fedaudit.reports.canonical import canonical_bytes, canonical_json_bytes, digest
from fedaudit.reports.integrity import (MAX_REPORT_BYTES, SIGNATURE_FILE, NotRegular, Rederive, VerifyResult,
                                        read_bounded, read_regular, verify_report)
from fedaudit.reports.io import atomic_write
from fedaudit.reports.model import utc_now

__all__ = ["FORMAT", "PASSPHRASE_ENV", "PRIVATE_NAME", "PUBLIC_NAME", "HMAC_GUARANTEE", "ed25519_guarantee",
           "SigningKey", "PublicKey", "Ed25519Check", "fingerprint", "parse_fingerprint", "passphrase_from_env",
           "key_paths", "generate_keypair", "is_private_key_pem", "load_signing_key", "load_public_key",
           "statement_for", "check_signature", "verify_folder", "sign_folder"]

#: the format of the signature file and of the statement it signs (domain separation: a
#: signature over this statement means nothing in any other protocol)
FORMAT = "fedaudit-report-signature/1"
#: the largest signature file ``verify`` reads (its claim seeds grow with the plan)
MAX_SIGNATURE_BYTES = 1 << 20
#: a key file larger than this is not a PEM key
MAX_PEM_BYTES = 1 << 16
#: the passphrase variable the documentation uses (``--passphrase-env`` takes any name); the
#: engine never passes it to a worker process (:data:`fedaudit.engine.PRIVATE_ENV`)
PASSPHRASE_ENV = "FEDAUDIT_SIGNING_PASSPHRASE"
#: the files ``fedaudit keygen --out KEYDIR`` writes
PRIVATE_NAME, PUBLIC_NAME = "ed25519-private.pem", "ed25519-public.pem"

#: what a valid HMAC-SHA256 signature proves, as ``verify`` says it
HMAC_GUARANTEE = ("integrity against anyone without the shared key; any key holder, verifiers included, could "
                  "have produced it")

_NAME_PREFIX = "Signer: "
_MAX_NAME = 200
_HEX64 = re.compile(r"[0-9a-f]{64}")
_PRIVATE_PEM = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_STATEMENT_KEYS = {"format", "algorithm", "report", "plan_sha256", "fedaudit", "seeds", "environment", "signer",
                   "signed_at"}
_FILE_KEYS = {"format", "statement", "public_key", "signature"}


def ed25519_guarantee(fp: str) -> str:
    """What a verified Ed25519 signature by the key with fingerprint ``fp`` proves, as ``verify`` says it."""
    return f"made by the holder of the private key with fingerprint {fp}; verifiers cannot forge it"


# ------------------------------------------------------------------------------ keys
@dataclass(frozen=True)
class PublicKey:
    """A trusted Ed25519 public key (``verify --public-key``): the key, its :func:`fingerprint`
    and the signer name its file states (None when it states none)."""

    key: Any
    fingerprint: str
    name: str | None = None


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 private key loaded for ``fedaudit sign``, with its public half and the signer
    name its file states (bound in every statement it signs)."""

    key: Any
    public: PublicKey


def _raw_public(public_key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(public_key: Any) -> str:
    """The fingerprint of an Ed25519 public key: SHA-256 (64 hex digits) of its raw 32 bytes."""
    return hashlib.sha256(_raw_public(public_key)).hexdigest()


def parse_fingerprint(text: str, flag: str = "--signer") -> str:
    """A fingerprint as typed (``verify --signer``): 64 hex digits, any case, optionally after
    ``SHA256:``. Anything else, a shortened one included (a prefix pins less), is a
    :class:`FedAuditError` naming ``flag``."""
    fp = text.strip().lower().removeprefix("sha256:")
    if not _HEX64.fullmatch(fp):
        raise FedAuditError(f"{flag} {text!r}: a fingerprint is the 64 hex digits that fedaudit keygen, sign and "
                            f"verify print (SHA-256 of the raw Ed25519 public key)")
    return fp


def _check_name(name: str | None, where: str) -> str | None:
    """A signer name: one printable line of at most 200 characters (None stays None)."""
    if name is None:
        return None
    name = name.strip()
    if not name or len(name) > _MAX_NAME or not name.isprintable():
        raise FedAuditError(f"{where}: a signer name is one printable line of 1 to {_MAX_NAME} characters, "
                            f"got {name[:60]!r}")
    return name


def _name_in(blob: bytes) -> str | None:
    """The ``Signer: NAME`` line before the PEM block of a key file, if any (a line that is not a
    valid name is ignored: the name is a label, never needed to check a signature)."""
    head = blob.split(b"-----BEGIN", 1)[0].decode("utf-8", "replace")
    for line in head.splitlines():
        if line.startswith(_NAME_PREFIX):
            try:
                return _check_name(line[len(_NAME_PREFIX):], "key file")
            except FedAuditError:
                return None
    return None


def passphrase_from_env(var: str) -> bytes:
    """The passphrase in the environment variable ``var`` (``--passphrase-env VAR``), as bytes:
    an unset or empty variable is a :class:`FedAuditError` (never "no passphrase")."""
    environb = getattr(os, "environb", None)
    if environb is not None:
        value = environb.get(var.encode("utf-8", "surrogateescape"))
    else:  # pragma: no cover - Windows: the environment is Unicode
        text = os.environ.get(var)
        value = None if text is None else text.encode("utf-8", "surrogatepass")
    if not value:
        raise FedAuditError(f"--passphrase-env {var}: the variable is {'empty' if value == b'' else 'not set'}; "
                            f"set it to the passphrase of the private key")
    return value


def key_paths(out: str | None, private: str | None, public: str | None) -> tuple[Path, Path]:
    """Where ``fedaudit keygen`` writes: ``KEYDIR/ed25519-private.pem`` and ``KEYDIR/ed25519-public.pem``
    for ``--out KEYDIR`` (the folder is made, mode 0700), else the two files named by
    ``--private-key`` and ``--public-key`` (both needed, and different)."""
    if out is not None:
        if private is not None or public is not None:
            raise FedAuditError("give --out KEYDIR, or --private-key FILE and --public-key FILE, not both")
        folder = Path(out)
        if folder.exists() and not folder.is_dir():
            raise FedAuditError(f"--out {out}: exists and is not a directory")
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise FedAuditError(f"--out {out}: cannot create it ({exc.strerror or exc})") from None
        return folder / PRIVATE_NAME, folder / PUBLIC_NAME
    if private is None or public is None:
        raise FedAuditError("give --out KEYDIR, or both --private-key FILE and --public-key FILE")
    if os.path.abspath(private) == os.path.abspath(public):
        raise FedAuditError(f"--private-key and --public-key name the same file {private}")
    return Path(private), Path(public)


def _install(path: Path, blob: bytes, mode: int, force: bool) -> None:
    """Write ``blob`` to ``path`` with ``mode`` through a temporary file made with mode 0600 in the
    same folder (a private key is never readable by others, not even while it is written): put in
    place by a hard link, which never replaces, or with ``force`` by a rename."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, mode)
            if force:
                os.replace(tmp, path)
            else:
                os.link(tmp, path)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
    except FileExistsError:
        raise FedAuditError(f"{path} exists; pass --force to replace it") from None
    except OSError as exc:
        raise FedAuditError(f"cannot write {path}: {exc.strerror or exc}") from None


def generate_keypair(private_path: str | os.PathLike, public_path: str | os.PathLike, *,
                     passphrase: bytes | None = None, name: str | None = None, force: bool = False) -> PublicKey:
    """Make an Ed25519 key pair: the private key as PEM PKCS#8 in ``private_path`` (mode 0600;
    encrypted with ``passphrase`` by the best scheme ``cryptography`` offers when one is given),
    the public key as PEM in ``public_path``; ``name`` (the signer's name or identity) is written
    before both PEM blocks. Either file existing is refused unless ``force``, before anything is
    written. Returns the public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    name = _check_name(name, "--name")
    private_path, public_path = Path(private_path), Path(public_path)
    for path in (private_path, public_path):
        if os.path.lexists(path) and not force:
            raise FedAuditError(f"{path} exists; pass --force to replace it (a replaced private key cannot sign "
                                f"as the old one: verifiers need the new public key)")
        if path.is_dir():
            raise FedAuditError(f"{path} is a directory")
    key = Ed25519PrivateKey.generate()
    encryption = (serialization.BestAvailableEncryption(passphrase) if passphrase
                  else serialization.NoEncryption())
    head = f"{_NAME_PREFIX}{name}\n".encode("utf-8") if name else b""
    _install(private_path, head + key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    encryption), 0o600, force)
    _install(public_path, head + key.public_key().public_bytes(serialization.Encoding.PEM,
                                                               serialization.PublicFormat.SubjectPublicKeyInfo),
             0o644, force)
    return PublicKey(key.public_key(), fingerprint(key.public_key()), name)


def is_private_key_pem(blob: bytes) -> bool:
    """Whether a key file's bytes hold a PEM private key (any algorithm: an RSA or OpenSSH key is
    refused by :func:`load_signing_key`, never taken for an HMAC key)."""
    return _PRIVATE_PEM.search(blob) is not None


def load_signing_key(path: str | os.PathLike, passphrase: bytes | None = None, *,
                     flag: str = "--key-file") -> SigningKey:
    """The Ed25519 private key in the PEM file ``path`` (decrypted with ``passphrase`` when it is
    encrypted) and the signer name the file states. A file that is unreadable, larger than
    64 KiB, not a PEM private key, encrypted without a passphrase (or with another one), or a key
    of another algorithm is a one-line :class:`FedAuditError` naming ``flag``."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    blob = read_bounded(path, MAX_PEM_BYTES, flag, "a key file holds one PEM key")
    encrypted = b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in blob
    if encrypted and passphrase is None:
        raise FedAuditError(f"{flag} {path}: the private key is encrypted; pass --passphrase-env VAR, VAR being "
                            f"the environment variable that holds its passphrase (e.g. {PASSPHRASE_ENV})")
    try:
        key = serialization.load_pem_private_key(blob, password=passphrase if encrypted else None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        why = ("cannot decrypt it with the passphrase given (wrong passphrase?)" if encrypted
               else f"not a PEM private key that can be read ({str(exc).split('.')[0]})")
        raise FedAuditError(f"{flag} {path}: {why}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise FedAuditError(f"{flag} {path}: a {type(key).__name__.removeprefix('_')} key, not Ed25519; make an "
                            f"Ed25519 key pair with fedaudit keygen")
    public = key.public_key()
    return SigningKey(key, PublicKey(public, fingerprint(public), _name_in(blob)))


def load_public_key(path: str | os.PathLike, *, flag: str = "--public-key") -> PublicKey:
    """The Ed25519 public key in the PEM file ``path`` with the signer name the file states. A
    private key given here, a file that is not a PEM public key or a key of another algorithm is
    a one-line :class:`FedAuditError` naming ``flag``."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    blob = read_bounded(path, MAX_PEM_BYTES, flag, "a key file holds one PEM key")
    if is_private_key_pem(blob):
        raise FedAuditError(f"{flag} {path}: this is a private key; verifiers use the public key (keygen wrote it "
                            f"as {PUBLIC_NAME}), and the private key should not leave its holder")
    try:
        key = serialization.load_pem_public_key(blob)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise FedAuditError(f"{flag} {path}: not a PEM public key that can be read "
                            f"({str(exc).split('.')[0]})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise FedAuditError(f"{flag} {path}: a {type(key).__name__.removeprefix('_')} key, not Ed25519")
    return PublicKey(key, fingerprint(key), _name_in(blob))


# ------------------------------------------------------------------------------ the statement
def _bound(data: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of report ``data`` a signature binds: every key of the statement but the
    format, the algorithm, the signer and the time (see the module docstring)."""
    m = data.get("manifest") if isinstance(data.get("manifest"), Mapping) else {}
    prov = m.get("provenance") if isinstance(m.get("provenance"), Mapping) else {}
    deps = m.get("dependencies")
    claims = data.get("claims") if isinstance(data.get("claims"), list) else []
    return {
        "report": {"digest": digest(canonical_json_bytes(data)),
                   "content_digest": digest(canonical_json_bytes(data, without_artifacts=True)),
                   "schema_version": data.get("schema_version"), "overall": data.get("overall")},
        "plan_sha256": m.get("plan_sha256"),
        "fedaudit": {"version": m.get("fedaudit"), "git_commit": m.get("git_commit"), "git_dirty": m.get("git_dirty"),
                     "sources_sha256": prov.get("sources_sha256")},
        "seeds": {"plan": m.get("seed_entropy"),
                  "claims": {str(c.get("id")): c.get("seed") for c in claims if isinstance(c, Mapping)}},
        "environment": {"python": m.get("python"), "platform": m.get("platform"),
                        "dependencies": dict(deps) if isinstance(deps, Mapping)
                        else {k: m.get(k) for k in ("numpy", "scipy", "torch")}},
    }


def statement_for(data: Mapping[str, Any], signer: PublicKey, signed_at: str | None = None) -> dict[str, Any]:
    """The statement an Ed25519 signature of report ``data`` signs (in canonical JSON): the
    report's bound facts, the signer's fingerprint and name, and ``signed_at`` (default now, UTC)."""
    return {"format": FORMAT, "algorithm": "Ed25519", **_bound(data),
            "signer": {"fingerprint": signer.fingerprint, "name": signer.name},
            "signed_at": signed_at or utc_now()}


def _b64(value: Any, size: int, what: str) -> bytes:
    if not isinstance(value, str) or len(value) > 4 * size:
        raise FedAuditError(f"{what} is not base64 text")
    try:
        raw = base64.b64decode(value.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise FedAuditError(f"{what} is not base64 text") from None
    if len(raw) != size:
        raise FedAuditError(f"{what} has {len(raw)} bytes, not the {size} of Ed25519")
    return raw


def _parse(blob: bytes) -> tuple[dict[str, Any], Any, bytes]:
    """``(statement, embedded public key, signature)`` of a signature file's bytes; anything but
    exactly its format is a :class:`FedAuditError` (strict JSON, the keys, base64 of the sizes of
    Ed25519, a statement of the known keys with a well-formed signer and time)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    doc = fjson.loads(blob, what="the file")
    if not isinstance(doc, dict) or set(doc) != _FILE_KEYS:
        raise FedAuditError("not a fedaudit signature file: its keys must be exactly "
                            + ", ".join(sorted(_FILE_KEYS)))
    if doc["format"] != FORMAT:
        raise FedAuditError(f"format {str(doc['format'])[:60]!r} is not {FORMAT}")
    try:
        public = Ed25519PublicKey.from_public_bytes(_b64(doc["public_key"], 32, "public_key"))
    except ValueError as exc:
        raise FedAuditError(f"public_key: {exc}") from None
    signature = _b64(doc["signature"], 64, "signature")
    st = doc["statement"]
    if not isinstance(st, dict) or set(st) != _STATEMENT_KEYS:
        raise FedAuditError("statement: its keys must be exactly " + ", ".join(sorted(_STATEMENT_KEYS)))
    if st["format"] != FORMAT or st["algorithm"] != "Ed25519":
        raise FedAuditError(f"statement: format and algorithm must be {FORMAT} and Ed25519")
    signer = st["signer"]
    if not (isinstance(signer, dict) and set(signer) == {"fingerprint", "name"}
            and isinstance(signer["fingerprint"], str) and _HEX64.fullmatch(signer["fingerprint"])
            and (signer["name"] is None or isinstance(signer["name"], str))):
        raise FedAuditError("statement: signer must be {fingerprint: 64 hex digits, name: text or null}")
    _check_name(signer["name"], "statement: signer name")
    try:
        _dt.datetime.fromisoformat(str(st["signed_at"]).replace("Z", "+00:00"))
    except ValueError:
        raise FedAuditError(f"statement: signed_at {str(st['signed_at'])[:40]!r} is not an ISO-8601 time") from None
    return st, public, signature


_WHAT = {"report": "report digest", "plan_sha256": "plan SHA-256", "fedaudit": "fedaudit version, commit and sources",
         "seeds": "seeds", "environment": "environment"}


def _short(value: Any) -> str:
    text = fjson.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:79] + "…"


@dataclass(frozen=True)
class Ed25519Check:
    """The check of a folder's detached Ed25519 signature (:func:`check_signature`).

    ``status``: "verified" (it verifies, binds this folder's facts, and is by the public key or
    fingerprint given), "unverified" (it verifies with the key it carries and binds this folder's
    facts, but no trusted key was given: anyone could have made it), "invalid" (see
    ``problems``) or "absent". ``fingerprint`` is that of the key the file carries, ``name`` the
    signer name the statement binds, ``key_name`` the one the ``--public-key`` file states."""

    status: str
    fingerprint: str | None = None
    name: str | None = None
    key_name: str | None = None
    signed_at: str | None = None
    statement: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def signer(self) -> str:
        """Who signed, in words: the name (the statement's, and the public key file's when it
        differs) and the fingerprint."""
        names = [n for n in dict.fromkeys((self.key_name, self.name)) if n]
        return (" / ".join(names) + ", " if names else "") + f"key fingerprint {self.fingerprint}"

    def bound(self) -> list[str]:
        """What the signature binds, one line each (empty unless it verified: the statement of
        an invalid signature is not shown)."""
        st = self.statement
        if self.status not in ("verified", "unverified") or st is None:
            return []
        rep, code, seeds, env = st["report"], st["fedaudit"], st["seeds"], st["environment"]
        dirty = {True: "modified checkout", False: "clean checkout"}.get(code["git_dirty"], "no checkout")
        claim_seeds = ", ".join(f"{k} {v}" for k, v in list(seeds["claims"].items())[:8])
        more = len(seeds["claims"]) - 8
        deps = ", ".join(f"{k} {v}" for k, v in env["dependencies"].items() if v is not None)
        absent = [k for k, v in env["dependencies"].items() if v is None]
        return [f"report digest {rep['digest']} (content digest {rep['content_digest']}; schema "
                f"{rep['schema_version']}, overall {rep['overall']})",
                f"plan SHA-256 {st['plan_sha256']}",
                f"fedaudit {code['version']}, git commit {code['git_commit'] or 'none'} ({dirty}), sources SHA-256 "
                f"{code['sources_sha256'] or 'not recorded'}",
                f"seeds: plan {seeds['plan']}; claims: {claim_seeds or 'none'}" + (f" and {more} more" if more > 0 else ""),
                f"environment: Python {env['python']} on {env['platform']}; {deps}"
                + (f" (not installed: {', '.join(absent)})" if absent else ""),
                f"signer: {self.signer}",
                f"signed at {st['signed_at']}"]

    def to_dict(self) -> dict[str, Any]:
        """The check as JSON data."""
        return {"status": self.status, "fingerprint": self.fingerprint, "name": self.name, "key_name": self.key_name,
                "signed_at": self.signed_at, "problems": list(self.problems),
                "statement": self.statement if self.status in ("verified", "unverified") else None}


def _read_report_data(folder: Path) -> Any:
    try:
        return fjson.loads(read_regular(folder / "report.json", MAX_REPORT_BYTES, folder), what="report.json")
    except (OSError, FedAuditError):
        return None


def check_signature(folder: str | os.PathLike, *, trusted: PublicKey | None = None, signer: str | None = None,
                    plan: bytes | None = None, content_digest: str | None = None) -> Ed25519Check:
    """Check the detached Ed25519 signature in report folder ``folder``: the file is read as data
    (see the module docstring); the signature must verify over its statement with the key the
    file carries, the statement's signer fingerprint must be that key's, every fact it binds
    must be the folder's (report digest and content digest recomputed from report.json,
    ``content_digest`` when given, the manifest's plan hash, code, seeds and environment), the
    bytes of ``plan`` (when given) must hash to the plan SHA-256 it binds, and the key must be
    ``trusted`` and/or have the fingerprint ``signer``. Without ``trusted`` and ``signer`` a good
    signature is "unverified". Every failure is one problem line starting ``signature:``; with a
    trusted key or a pin but no signature file, that is a problem too."""
    from cryptography.exceptions import InvalidSignature

    folder = Path(folder)
    path = folder / SIGNATURE_FILE
    wanted = [f for f, v in (("--public-key", trusted), ("--signer", signer)) if v is not None]
    key_name = trusted.name if trusted is not None else None
    if not os.path.lexists(path):
        return Ed25519Check("absent", key_name=key_name, problems=[
            f"signature: {' and '.join(wanted)} given, but the folder holds no Ed25519 signature ({SIGNATURE_FILE}; "
            f"sign it with fedaudit sign DIR --key-file PRIVATE.pem)"] if wanted else [])
    try:
        st, public, sig = _parse(read_regular(path, MAX_SIGNATURE_BYTES, folder))
    except NotRegular as exc:
        return Ed25519Check("invalid", key_name=key_name, problems=[f"signature: {SIGNATURE_FILE}: refused, {exc}"])
    except OSError as exc:
        return Ed25519Check("invalid", key_name=key_name,
                            problems=[f"signature: {SIGNATURE_FILE}: cannot read it ({exc.strerror or exc})"])
    except FedAuditError as exc:
        return Ed25519Check("invalid", key_name=key_name, problems=[f"signature: {SIGNATURE_FILE} is malformed: {exc}"])
    fp = fingerprint(public)
    found = {"fingerprint": fp, "name": st["signer"]["name"], "key_name": key_name, "signed_at": st["signed_at"],
             "statement": st}
    problems = []
    try:
        public.verify(sig, canonical_bytes(st))
    except InvalidSignature:
        problems.append("signature: the Ed25519 signature does not verify over its statement (the signature file "
                        "was edited, or made for another statement)")
    if st["signer"]["fingerprint"] != fp:
        problems.append(f"signature: the statement names signer {st['signer']['fingerprint']}, but the file's key "
                        f"has fingerprint {fp}")
    if trusted is not None and not hmac.compare_digest(trusted.fingerprint, fp):
        problems.append(f"signature: made by the key with fingerprint {fp}"
                        + (f" ({st['signer']['name']})" if st["signer"]["name"] else "")
                        + f", not by the key given ({trusted.fingerprint}"
                        + (f", {trusted.name}" if trusted.name else "") + ")")
    if signer is not None and not hmac.compare_digest(signer, fp):
        problems.append(f"signature: made by the key with fingerprint {fp}, not by the pinned signer {signer}")
    data = _read_report_data(folder)
    if not isinstance(data, dict):
        problems.append("signature: report.json is not readable strict JSON, so nothing the signature binds can be "
                        "matched to it")
    else:
        expected = _bound(data)
        if content_digest is not None and expected["report"]["content_digest"] != content_digest:
            problems.append("signature: report.json changed while it was verified")
        for k, want in expected.items():
            if st[k] != want:
                got = st[k].get("digest") if k == "report" and isinstance(st[k], dict) else st[k]
                now = want["digest"] if k == "report" else want
                problems.append(f"signature: it binds {_WHAT[k]} {_short(got)}, but the report has {_short(now)}"
                                + ("; the report changed after it was signed" if k == "report" else ""))
    if plan is not None:
        given = hashlib.sha256(plan).hexdigest()
        if st["plan_sha256"] != given:
            problems.append(f"signature: it binds plan SHA-256 {_short(st['plan_sha256'])}, not the plan given "
                            f"({given})")
    status = "invalid" if problems else ("verified" if wanted else "unverified")
    return Ed25519Check(status, problems=problems, **found)


def verify_folder(path: str | os.PathLike, *, key: bytes | None = None, plan: bytes | None = None,
                  rederive: Rederive | None = None, trusted: PublicKey | None = None,
                  signer: str | None = None) -> VerifyResult:
    """:func:`~fedaudit.reports.integrity.verify_report` (schema, digest, renderings, HMAC under
    ``key``, content, ``plan``, ``rederive``) and :func:`check_signature` of the folder's Ed25519
    signature (``trusted``, ``signer``): its problems join the result's, its check is
    ``VerifyResult.ed25519``, and the result is ``authenticated`` when either signature is
    verified. An Ed25519 signature present but checked against no trusted key does not fail
    the report: it is "unverified", and the report counts as unsigned ("integrity only")."""
    res = verify_report(path, key=key, plan=plan, rederive=rederive)
    folder = Path(path)
    folder = folder if folder.is_dir() else folder.parent
    check = check_signature(folder, trusted=trusted, signer=signer, plan=plan, content_digest=res.content_digest)
    unlisted = res.unlisted if check.status == "absent" else [n for n in res.unlisted if n != SIGNATURE_FILE]
    return dataclasses.replace(res, ok=res.ok and not check.problems, problems=res.problems + check.problems,
                               unlisted=unlisted, ed25519=check)


def sign_folder(path: str | os.PathLike, signing: SigningKey, *, force: bool = False,
                rederive: Rederive | None = None) -> tuple[str, VerifyResult]:
    """Sign the report in folder ``path`` with the Ed25519 key ``signing``
    (``fedaudit sign DIR --key-file PRIVATE.pem``): write :data:`SIGNATURE_FILE` beside report.json.

    The report is verified first (schema, digest, every rendering, its content; every verdict
    re-derived with ``rederive``): one that is not intact or not consistent is refused, so a
    signature never vouches for an edited file or a forged verdict (an HMAC signature that cannot
    be checked here is no reason to refuse). A folder already signed by this key over its current
    facts is left alone ("already signed"); a signature by another key, a stale or a malformed
    one is replaced only with ``force``. Returns ``("signed" | "already signed", the
    VerifyResult of the folder with the signature checked against this key)``."""
    folder = Path(path)
    folder = folder.parent if folder.name == "report.json" and not folder.is_dir() else folder
    before = verify_report(folder, rederive=rederive)
    problems = [p for p in before.problems if not p.startswith("signature:")]
    if not (before.schema_ok and before.digest_ok and before.artifacts_ok) or problems:
        raise FedAuditError(f"refusing to sign {folder}: the report is not intact ("
                            + "; ".join(problems or before.problems) + ")")
    existing = check_signature(folder, trusted=signing.public, content_digest=before.content_digest)
    if existing.status == "verified":
        return "already signed", verify_folder(folder, rederive=rederive, trusted=signing.public)
    if existing.status != "absent" and not force:
        raise FedAuditError(f"refusing to sign {folder}: it already holds an Ed25519 signature that is not this "
                            f"key's over the report as it is ({existing.problems[0].removeprefix('signature: ')}); "
                            f"pass --force to replace it")
    data = fjson.loads(read_regular(folder / "report.json", MAX_REPORT_BYTES, folder), what="report.json")
    st = statement_for(data, signing.public)
    doc = {"format": FORMAT, "statement": st, "public_key": base64.b64encode(_raw_public(signing.public.key)).decode("ascii"),
           "signature": base64.b64encode(signing.key.sign(canonical_bytes(st))).decode("ascii")}
    try:
        atomic_write(folder / SIGNATURE_FILE, fjson.dumps(doc, indent=2) + "\n")
    except OSError as exc:
        raise FedAuditError(f"cannot write {folder / SIGNATURE_FILE}: {exc.strerror or exc}") from None
    after = verify_folder(folder, rederive=rederive, trusted=signing.public)
    if after.ed25519.status != "verified" or after.content_digest != before.content_digest:
        raise FedAuditError(f"signing {folder}: the signature written does not verify ("
                            + "; ".join(after.ed25519.problems or ["the report changed meanwhile"]) + ")")
    return "signed", after
