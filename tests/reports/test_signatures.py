"""Ed25519 signatures that prove who signed (issue #26 §3).

``fedaudit keygen`` makes a key pair, ``fedaudit sign DIR --key-file PRIVATE.pem`` (a step after
the run) writes ``signature.ed25519.json`` over a statement binding the report digest, the plan
hash, the code, the seeds and the environment, and ``fedaudit verify DIR --public-key`` /
``--signer`` checks it, names the signer and says which guarantee each signature gives. HMAC keeps
working beside it. The signature file is data: strict, bounded, never run.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from fedaudit.cli import main
from fedaudit.experiments.kind import ClaimKind, Evidence
from fedaudit.experiments.runner import run_plan_to_dir
from fedaudit.reports import KEY_ENV, Report, write_report
from fedaudit.reports.integrity import SIGNATURE_FILE
from fedaudit.reports.signatures import (HMAC_GUARANTEE, PASSPHRASE_ENV, ed25519_guarantee, load_public_key,
                                         load_signing_key, verify_folder)

PLAN = """[plan]
title = "signatures"
seed = 5

[[claim]]
id = "lap"
kind = "ldp"
mechanism = "laplace"
dim = 2
epsilon = 1.0
samples = 2000
curve = false
"""
NAME = "Privacy team <privacy@example.org>"


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A report folder of :data:`PLAN` (one LDP claim, all renderings), its plan, and two key
    pairs made by ``fedaudit keygen``: ``keys`` (named) and ``other``."""
    root = tmp_path_factory.mktemp("signatures")
    (root / "plan.toml").write_text(PLAN, encoding="utf-8")
    run_plan_to_dir(root / "plan.toml", root / "report")
    assert main(["keygen", "--out", str(root / "keys"), "--name", NAME]) == 0
    assert main(["keygen", "--private-key", str(root / "other.pem"), "--public-key", str(root / "other.pub")]) == 0
    return root


@pytest.fixture
def folder(written, tmp_path):
    """A fresh copy of the unsigned report folder, with the plan beside it."""
    shutil.copytree(written / "report", tmp_path / "report")
    shutil.copy(written / "plan.toml", tmp_path / "plan.toml")
    return tmp_path / "report"


def _keys(written) -> tuple[str, str, str]:
    """(private key path, public key path, fingerprint) of the named pair."""
    public = written / "keys" / "ed25519-public.pem"
    return str(written / "keys" / "ed25519-private.pem"), str(public), load_public_key(public).fingerprint


def _one_line_exit_2(code: int, capsys, *needles: str) -> None:
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("fedaudit: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)


def test_keygen_sign_verify_round_trip(written, folder, capsys):
    private, public, fp = _keys(written)
    keydir = written / "keys"
    assert stat.S_IMODE(os.stat(keydir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600 and stat.S_IMODE(os.stat(public).st_mode) == 0o644
    assert Path(private).read_text().startswith(f"Signer: {NAME}\n-----BEGIN PRIVATE KEY-----")
    before = Path(private).read_bytes()
    capsys.readouterr()
    _one_line_exit_2(main(["keygen", "--out", str(keydir)]), capsys, "exists; pass --force")
    assert Path(private).read_bytes() == before  # nothing replaced

    assert main(["sign", str(folder), "--key-file", private]) == 0
    assert f"signed: {folder} (Ed25519 by {NAME}, key fingerprint {fp}" in capsys.readouterr().out
    doc = json.loads((folder / SIGNATURE_FILE).read_text(encoding="utf-8"))
    st = doc["statement"]
    data = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    assert st["report"]["digest"] == data["digest"] and st["plan_sha256"] == data["manifest"]["plan_sha256"]
    assert st["fedaudit"]["version"] == data["manifest"]["fedaudit"]
    assert st["fedaudit"]["git_commit"] == data["manifest"]["git_commit"]
    assert st["seeds"] == {"plan": data["manifest"]["seed_entropy"], "claims": {"lap": data["claims"][0]["seed"]}}
    assert st["environment"]["dependencies"] == data["manifest"]["dependencies"]
    assert st["signer"] == {"fingerprint": fp, "name": NAME} and st["signed_at"].endswith("Z")

    assert main(["verify", str(folder), "--public-key", public, "--require-signature"]) == 0
    text = capsys.readouterr().out
    assert "valid, by the key given" in text and "the Ed25519 signature binds:" in text
    for line in (f"report digest {data['digest']}", f"plan SHA-256 {data['manifest']['plan_sha256']}",
                 f"signer: {NAME}, key fingerprint {fp}", f"guarantee of Ed25519 (verified): {ed25519_guarantee(fp)}",
                 "intact and signed: the Ed25519 signature is valid"):
        assert line in text, line
    assert "not covered by the report" not in text  # the signature file is checked, not "unlisted"
    assert main(["sign", str(folder), "--key-file", private]) == 0
    assert capsys.readouterr().out.startswith("already signed")

    # without a trusted key: present but unverified, which is "integrity only"
    assert main(["verify", str(folder)]) == 0
    text = capsys.readouterr().out
    assert "present, NOT verified" in text and "integrity only: authenticity not established" in text
    assert main(["verify", str(folder), "--require-signature"]) == 1
    res = verify_folder(folder)
    assert res.ok and not res.authenticated and res.ed25519.status == "unverified"


def test_a_tampered_report_fails(written, folder, capsys):
    private, public, fp = _keys(written)
    assert main(["sign", str(folder), "--key-file", private]) == 0
    saved = (folder / SIGNATURE_FILE).read_bytes()
    data = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    data["claims"][0]["summary"] = "edited after signing"
    # an edit that leaves the digest stale, then a forger who reseals everything (digest, artifact table)
    (folder / "report.json").write_text(json.dumps(data), encoding="utf-8")
    res = verify_folder(folder, trusted=load_public_key(public))
    assert not res.ok and res.ed25519.status == "invalid"
    assert any(p.startswith("signature: it binds report digest") for p in res.problems)
    write_report(Report.from_dict(data), folder, force=True)
    assert not (folder / SIGNATURE_FILE).exists()  # a new report drops the old report's signature
    (folder / SIGNATURE_FILE).write_bytes(saved)
    capsys.readouterr()
    assert main(["verify", str(folder), "--public-key", public]) == 1
    text = capsys.readouterr().out
    assert "signature: it binds report digest" in text and "the report changed after it was signed" in text
    assert "NOT verified" in text
    assert main(["verify", str(folder)]) == 1  # without the key too: the statement does not match the folder


def test_a_signature_by_another_key_fails_naming_its_fingerprint(written, folder, capsys):
    private, public, fp = _keys(written)
    other = load_public_key(written / "other.pub")
    assert main(["sign", str(folder), "--key-file", str(written / "other.pem")]) == 0
    capsys.readouterr()
    assert main(["verify", str(folder), "--public-key", public]) == 1
    text = capsys.readouterr().out
    assert f"signature: made by the key with fingerprint {other.fingerprint}, not by the key given ({fp}, {NAME})" \
        in text
    assert "intact and signed" not in text
    # an attacker's own key verifies "unverified" only: who signed is established by the trusted key alone
    assert verify_folder(folder).ed25519.status == "unverified"
    # replacing a signature by another key needs --force
    _one_line_exit_2(main(["sign", str(folder), "--key-file", private]), capsys, "refusing to sign", "--force")
    assert main(["sign", str(folder), "--key-file", private, "--force"]) == 0
    assert verify_folder(folder, trusted=load_public_key(public)).authenticated


def test_pinning_the_signer_by_fingerprint(written, folder, capsys):
    private, public, fp = _keys(written)
    assert main(["sign", str(folder), "--key-file", private]) == 0
    capsys.readouterr()
    assert main(["verify", str(folder), "--signer", "SHA256:" + fp.upper(), "--require-signature"]) == 0
    assert f"guarantee of Ed25519 (verified): {ed25519_guarantee(fp)}" in capsys.readouterr().out
    other = load_public_key(written / "other.pub").fingerprint
    assert main(["verify", str(folder), "--signer", other]) == 1
    assert f"not by the pinned signer {other}" in capsys.readouterr().out
    assert main(["verify", str(folder), "--public-key", public, "--signer", other]) == 1  # both must hold
    _one_line_exit_2(main(["verify", str(folder), "--signer", fp[:16]]), capsys, "--signer", "64 hex digits")
    # a pin or a key with no signature in the folder fails
    (folder / SIGNATURE_FILE).unlink()
    assert main(["verify", str(folder), "--signer", fp]) == 1
    assert "--signer given, but the folder holds no Ed25519 signature" in capsys.readouterr().out


def test_a_swapped_plan_fails(written, folder, tmp_path, capsys):
    private, public, fp = _keys(written)
    assert main(["sign", str(folder), "--key-file", private]) == 0
    other = tmp_path / "other.toml"
    other.write_text(PLAN.replace("seed = 5", "seed = 6"), encoding="utf-8")
    capsys.readouterr()
    assert main(["verify", str(folder), "--public-key", public, "--plan", str(tmp_path / "plan.toml")]) == 0
    assert main(["verify", str(folder), "--public-key", public, "--plan", str(other)]) == 1
    assert "signature: it binds plan SHA-256" in capsys.readouterr().out
    # the plan hash inside the statement edited: the signature no longer verifies
    doc = json.loads((folder / SIGNATURE_FILE).read_text(encoding="utf-8"))
    doc["statement"]["plan_sha256"] = "0" * 64
    (folder / SIGNATURE_FILE).write_text(json.dumps(doc), encoding="utf-8")
    res = verify_folder(folder, trusted=load_public_key(public))
    assert "signature: the Ed25519 signature does not verify over its statement (the signature file was edited, " \
           "or made for another statement)" in res.problems and not res.ok


def test_an_encrypted_private_key(tmp_path, folder, capsys, monkeypatch):
    keys = tmp_path / "enc"
    _one_line_exit_2(main(["keygen", "--out", str(keys), "--passphrase-env", PASSPHRASE_ENV]), capsys,
                     f"--passphrase-env {PASSPHRASE_ENV}: the variable is not set")
    monkeypatch.setenv(PASSPHRASE_ENV, "correct horse battery staple")
    assert main(["keygen", "--out", str(keys), "--passphrase-env", PASSPHRASE_ENV]) == 0
    assert "encrypted" in capsys.readouterr().out
    private = keys / "ed25519-private.pem"
    assert b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in private.read_bytes()
    _one_line_exit_2(main(["sign", str(folder), "--key-file", str(private)]), capsys, "is encrypted",
                     "--passphrase-env")
    monkeypatch.setenv("WRONG_PASSPHRASE", "tr0ub4dor")
    _one_line_exit_2(main(["sign", str(folder), "--key-file", str(private), "--passphrase-env", "WRONG_PASSPHRASE"]),
                     capsys, "cannot decrypt it")
    assert not (folder / SIGNATURE_FILE).exists()
    assert main(["sign", str(folder), "--key-file", str(private), "--passphrase-env", PASSPHRASE_ENV]) == 0
    assert main(["verify", str(folder), "--public-key", str(keys / "ed25519-public.pem"), "--require-signature"]) == 0


def _edit(doc: dict, how: str) -> bytes:
    """The signature file ``doc`` made malformed in the way ``how`` names."""
    if how == "not json":
        return b"{not json"
    if how == "duplicate key":
        return b'{"format": "x", "format": "y"}'
    if how == "nan":
        return json.dumps({**doc, "signature": float("nan")}).encode()
    if how == "extra key":
        return json.dumps({**doc, "run": "import os"}).encode()
    if how == "bad base64":
        return json.dumps({**doc, "signature": "!!!" + doc["signature"][3:]}).encode()
    if how == "short signature":
        return json.dumps({**doc, "signature": base64.b64encode(b"x" * 63).decode()}).encode()
    if how == "bad signer":
        return json.dumps({**doc, "statement": {**doc["statement"], "signer": {"fingerprint": "abc"}}}).encode()
    if how == "oversized":
        return json.dumps({**doc, "pad": " " * (1 << 20)}).encode()
    raise AssertionError(how)


MALFORMED = ["not json", "duplicate key", "nan", "extra key", "bad base64", "short signature", "bad signer",
             "oversized"]


def test_malformed_or_oversized_signature_files_fail(written, folder, capsys):
    private, public, fp = _keys(written)
    assert main(["sign", str(folder), "--key-file", private]) == 0
    doc = json.loads((folder / SIGNATURE_FILE).read_text(encoding="utf-8"))
    capsys.readouterr()
    for how in MALFORMED:
        (folder / SIGNATURE_FILE).write_bytes(_edit(doc, how))
        res = verify_folder(folder, trusted=load_public_key(public))
        assert not res.ok and res.ed25519.status == "invalid", how
        assert len(res.ed25519.problems) == 1 and res.ed25519.problems[0].startswith(
            f"signature: {SIGNATURE_FILE}" + (" is malformed:" if how != "oversized" else ": refused,")), \
            (how, res.problems)
        assert main(["verify", str(folder), "--public-key", public]) == 1, how
        text = capsys.readouterr().out
        assert "Traceback" not in text and "import os" not in text
    assert "more than the 1 MiB" in res.ed25519.problems[0]
    # a link is refused, never followed
    (folder / SIGNATURE_FILE).unlink()
    (folder / SIGNATURE_FILE).symlink_to(written / "keys" / "ed25519-private.pem")
    res = verify_folder(folder)
    assert res.ed25519.problems[0].startswith(f"signature: {SIGNATURE_FILE}: refused, not inside the report folder")
    (folder / SIGNATURE_FILE).unlink()
    (folder / SIGNATURE_FILE).symlink_to("report.md")
    res = verify_folder(folder)
    assert res.ed25519.problems == [f"signature: {SIGNATURE_FILE}: refused, a symbolic link, not a regular file"]
    _one_line_exit_2(main(["sign", str(folder), "--key-file", private]), capsys, "refusing to sign", "--force")


def test_keys_given_to_the_wrong_flag_are_refused(written, folder, tmp_path, capsys):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    private, public, fp = _keys(written)
    _one_line_exit_2(main(["verify", str(folder), "--key-file", private]), capsys, "holds a PEM key, not an HMAC key")
    _one_line_exit_2(main(["verify", str(folder), "--public-key", private]), capsys, "this is a private key")
    _one_line_exit_2(main(["sign", str(folder), "--key-file", public]), capsys, "holds a PEM key, not an HMAC key")
    ecdsa = tmp_path / "ec.pem"
    ecdsa.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    _one_line_exit_2(main(["sign", str(folder), "--key-file", str(ecdsa)]), capsys, "not Ed25519")
    assert not (folder / SIGNATURE_FILE).exists()


def test_hmac_keeps_working_beside_ed25519(written, folder, tmp_path, capsys):
    private, public, fp = _keys(written)
    hmac_key = tmp_path / "report.key"
    hmac_key.write_text("a shared report key\n")
    assert main(["sign", str(folder), "--key-file", private]) == 0
    capsys.readouterr()
    # HMAC signing rewrites the report, which would break the Ed25519 signature: refused
    _one_line_exit_2(main(["sign", str(folder), "--key-file", str(hmac_key)]), capsys,
                     "it carries an Ed25519 signature", "HMAC key first")
    (folder / SIGNATURE_FILE).unlink()
    assert main(["sign", str(folder), "--key-file", str(hmac_key)]) == 0
    assert main(["sign", str(folder), "--key-file", private]) == 0
    capsys.readouterr()
    assert main(["verify", str(folder), "--key-file", str(hmac_key), "--public-key", public,
                 "--require-signature"]) == 0
    text = capsys.readouterr().out
    assert f"guarantee of HMAC-SHA256 (valid): {HMAC_GUARANTEE}" in text
    assert f"guarantee of Ed25519 (verified): {ed25519_guarantee(fp)}" in text
    assert "intact and signed: the Ed25519 signature is valid" in text and "the HMAC-SHA256 is valid" in text
    # HMAC alone, as before
    assert main(["verify", str(folder), "--key-file", str(hmac_key), "--require-signature"]) == 0
    assert main(["verify", str(folder), "--key-file", str(tmp_path / "report.key"), "--public-key",
                 str(written / "other.pub")]) == 1


class EnvProbe(ClaimKind):
    """Records, in a worker process, whether its environment holds a signing secret."""

    name = "signing-env-probe-test"
    secret = "probe passphrase 7d1c"

    def keys(self):
        return {}

    def default_title(self, params, expect):
        return self.name

    def run(self, spec, rng, progress, *, workdir=None):
        block = Path("/proc/self/environ")
        initial = block.read_bytes() if block.exists() else b""
        values = list(os.environ.values())
        return Evidence(holds=True, violated=False, summary="probe", evidence={
            "pid": os.getpid(), "passphrase_var": PASSPHRASE_ENV in os.environ,
            "secret_seen": any(self.secret in v for v in values) or self.secret.encode() in initial,
            "pem_seen": any("PRIVATE KEY" in v for v in values) or b"PRIVATE KEY" in initial})


def test_the_private_key_stays_out_of_the_run_and_the_folder(written, tmp_path, monkeypatch):
    """``fedaudit run`` opens no private key and its worker processes see no passphrase; after
    ``sign``, no file of the report folder holds the private key in any encoding."""
    from fedaudit.engine import PRIVATE_ENV, shutdown

    private, public, fp = _keys(written)
    assert PASSPHRASE_ENV in PRIVATE_ENV
    monkeypatch.setenv(PASSPHRASE_ENV, EnvProbe.secret)
    opened: list[str] = []
    watch = {os.path.realpath(private), os.path.realpath(written / "other.pem")}
    listening = [True]

    def hook(event, args):
        if listening[0] and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            if os.path.realpath(os.fsdecode(args[0])) in watch:
                opened.append(os.fsdecode(args[0]))

    sys.addaudithook(hook)  # audit hooks cannot be removed: this one stops listening at the end
    plan = tmp_path / "probe.toml"
    plan.write_text('[plan]\nseed = 1\n' + "".join(f'\n[[claim]]\nid = "p{i}"\nkind = "{__name__}:EnvProbe"\n'
                                                  for i in range(2)), encoding="utf-8")  # two: run by the workers
    shutdown()  # workers started earlier inherited whatever the environment held then
    try:
        assert main(["run", str(plan), "--out", str(tmp_path / "out"), "--backend", "process", "--workers", "2",
                     "--quiet"]) == 0
    finally:
        listening[0] = False
        shutdown()
    assert opened == []
    for claim in json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))["claims"]:
        evidence = claim["evidence"]
        assert evidence["pid"] != os.getpid()
        assert not (evidence["passphrase_var"] or evidence["secret_seen"] or evidence["pem_seen"]), evidence

    assert main(["sign", str(tmp_path / "out"), "--key-file", private]) == 0
    key = load_signing_key(private)
    from cryptography.hazmat.primitives import serialization

    raw = key.key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                serialization.NoEncryption())
    secrets = [raw, raw.hex().encode(), base64.b64encode(raw), Path(private).read_bytes().split(b"-----")[2].strip()]
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            blob = path.read_bytes()
            assert b"PRIVATE KEY" not in blob and not any(s in blob for s in secrets), path
