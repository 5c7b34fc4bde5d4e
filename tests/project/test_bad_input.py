"""Issue #23 §4: bad input is one line and exit 2, never a traceback.

Each case below was a traceback with exit 1: a non-ASCII digest or signature (``hmac.compare_digest``
on str), a lone surrogate escape or 100,000 nested brackets in report JSON, 50,000 nested brackets
or a 5,000-digit integer in a plan, a 300-character claim id (a file name too long for the
checkpoint, leaving a folder without a report), ``mechanism = "builtins:print"`` (not a
mechanism), ENOSPC while writing the lock or a checkpoint, and a .npy whose header claims 10^12
elements for ``audit scores``."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from fedaudit import json as fjson
from fedaudit.cli import main
from fedaudit.errors import FedAuditError
from fedaudit.reports import KEY_ENV, Claim, Manifest, Report, read_report, verify_report, write_report

LDP = {"id": "lap", "kind": "ldp", "mechanism": "laplace", "dim": 1, "samples": 1000, "backend": "serial"}


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)


def _one_line_exit_2(code: int, capsys, *needles: str) -> str:
    """The command exited 2 with exactly one line on stderr, naming every needle."""
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("fedaudit: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def _report_folder(tmp_path: Path) -> Path:
    m = Manifest.collect(b"plan", 7, "2024-01-01T00:00:00Z", "2024-01-01T00:01:00Z", command="fedaudit run p.toml")
    claims = [Claim(id="eps", kind="ldp", title="ε holds", expect="pass", verdict="PASS",
                    evidence={"epsilon_lower": 0.42, "exact": math.inf}, runtime_s=1.0)]
    out = tmp_path / "r"
    write_report(Report(m, claims, title="bad input"), out)
    return out


def _edit(folder: Path, edit) -> None:
    path = folder / "report.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data, ensure_ascii=True), encoding="utf-8")


def _write_plan(path: Path, body: str) -> Path:
    path.write_text("[plan]\nseed = 0\n" + body, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------ report JSON
def test_a_non_ascii_digest_is_a_changed_digest_not_a_type_error(tmp_path, capsys):
    out = _report_folder(tmp_path)
    _edit(out, lambda d: d.__setitem__("digest", "é" * 64))
    res = verify_report(out)
    assert not res.ok and not res.digest_ok and any(p.startswith("digest: stored") for p in res.problems)
    assert main(["verify", str(out)]) == 1  # not intact: the documented exit code of verify
    assert "Traceback" not in capsys.readouterr().err


def test_a_non_ascii_signature_is_an_invalid_signature_not_a_type_error(tmp_path, capsys):
    out = _report_folder(tmp_path)
    _edit(out, lambda d: d.__setitem__("signature", "\u00e9" * 64))
    res = verify_report(out, key=b"k")
    assert not res.ok and res.signature == "invalid"
    assert main(["verify", str(out)]) == 1


def test_a_lone_surrogate_escape_is_not_strict_json(tmp_path, capsys):
    with pytest.raises(FedAuditError, match=r"^doc is not strict JSON: a string holds the unpaired surrogate "
                                            r"\\ud800"):
        fjson.loads('{"a": ["x\\ud800y"]}', what="doc")
    with pytest.raises(FedAuditError, match="unpaired surrogate"):
        fjson.loads('{"\\udc00": 1}')
    with pytest.raises(FedAuditError, match="unpaired surrogate"):
        fjson.loads('"\ud800"')  # a str holding a raw surrogate
    assert fjson.loads('["\\ud83d\\ude00", "\\\\ud800"]') == ["\U0001F600", "\\ud800"]  # a pair, an escaped backslash
    out = _report_folder(tmp_path)
    _edit(out, lambda d: d.__setitem__("title", "\ud800"))  # ensure_ascii writes it as the escape \ud800
    assert "\\ud800" in (out / "report.json").read_text(encoding="utf-8")
    res = verify_report(out)
    assert not res.ok and any("unpaired surrogate" in p for p in res.problems)
    assert main(["verify", str(out)]) == 1
    assert "Traceback" not in capsys.readouterr().err
    with pytest.raises(FedAuditError, match="unpaired surrogate"):
        read_report(out)
    key = tmp_path / "k"
    key.write_text("secret")
    _one_line_exit_2(main(["sign", str(out), "--key-file", str(key)]), capsys, "unpaired surrogate")


def test_deeply_nested_report_json_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(FedAuditError, match=r"^doc is not strict JSON: arrays and objects nested deeper than 64 "
                                            r"levels$"):
        fjson.loads("[" * 100_000 + "]" * 100_000, what="doc")
    with pytest.raises(FedAuditError, match="nested deeper than 64 levels"):
        fjson.loads("[" * 65 + "]" * 65)  # below Python's recursion limit, above fedaudit's
    assert fjson.loads("[" * 64 + "]" * 64) is not None
    out = _report_folder(tmp_path)
    (out / "report.json").write_text('{"claims": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    res = verify_report(out)
    assert not res.ok and any("nested deeper than 64 levels" in p for p in res.problems)
    assert main(["verify", str(out)]) == 1
    assert "Traceback" not in capsys.readouterr().err
    key = tmp_path / "k"
    key.write_text("secret")
    _one_line_exit_2(main(["sign", str(out), "--key-file", str(key)]), capsys, "nested deeper than 64 levels")


# ------------------------------------------------------------------------------ plans
def test_deeply_nested_plan_is_one_line_exit_2(tmp_path, capsys):
    plan = _write_plan(tmp_path / "deep.toml", '[[claim]]\nid = "a"\nkind = "ldp"\nx = '
                       + "[" * 50_000 + "]" * 50_000 + "\n")
    _one_line_exit_2(main(["run", str(plan), "--out", str(tmp_path / "out")]), capsys, str(plan),
                     "nested deeper than")
    assert not (tmp_path / "out").exists()


def test_a_5000_digit_integer_in_a_plan_is_one_line_exit_2(tmp_path, capsys):
    plan = _write_plan(tmp_path / "big.toml", '[[claim]]\nid = "a"\nkind = "ldp"\nsamples = ' + "9" * 5000 + "\n")
    _one_line_exit_2(main(["run", str(plan), "--out", str(tmp_path / "out")]), capsys, str(plan),
                     "integer with more than 4300 digits")


@pytest.mark.parametrize("claim_id", ["a" * 300, "a" * 65])
def test_a_long_claim_id_is_refused_before_any_folder_is_made(tmp_path, capsys, claim_id):
    plan = _write_plan(tmp_path / "long.toml", f'[[claim]]\nid = "{claim_id}"\nkind = "ldp"\nmechanism = "laplace"\n'
                                               f'dim = 1\nsamples = 1000\n')
    _one_line_exit_2(main(["run", str(plan), "--out", str(tmp_path / "out")]), capsys, "key 'id'",
                     "at most 64 characters")
    assert not (tmp_path / "out").exists()


def test_a_64_character_claim_id_runs(tmp_path):
    from fedaudit.experiments.runner import run_plan_to_dir

    report, _ = run_plan_to_dir({"plan": {"seed": 0}, "claim": [{**LDP, "id": "a" * 64}]}, tmp_path / "out")
    assert report.claims[0].id == "a" * 64 and report.claims[0].error is None


@pytest.mark.parametrize("mechanism, needle", [
    ("builtins:dict", "TypeError: dict expected at most 1 argument"),
    ("builtins:print", "must return a fedaudit Mechanism, got NoneType"),
    ("builtins:object", "TypeError"),
])
def test_a_reference_that_builds_no_mechanism_is_refused_at_validation(tmp_path, capsys, mechanism, needle):
    plan = _write_plan(tmp_path / "p.toml", f'[[claim]]\nid = "a"\nkind = "ldp"\nmechanism = "{mechanism}"\n'
                                            f'dim = 1\nsamples = 1000\n')
    _one_line_exit_2(main(["run", str(plan), "--out", str(tmp_path / "out")]), capsys, "claim 'a' (#1)",
                     mechanism, needle)
    assert not (tmp_path / "out").exists()
    _one_line_exit_2(main(["audit", "ldp", "--mechanism", mechanism, "--dim", "2", "--samples", "1000"]), capsys,
                     mechanism, needle)


def test_a_mechanism_factory_returning_no_mechanism_is_named():
    from fedaudit.mechanisms import make_mechanism

    with pytest.raises(FedAuditError, match=r"^mechanism factory 'builtins:print' must return a fedaudit Mechanism, "
                                            r"got NoneType"):
        make_mechanism("builtins:print", 2, 1.0)


@pytest.mark.parametrize("spec", ["builtins:print", "nnm+builtins:print", "builtins:dict"])
def test_a_reference_that_builds_no_aggregator_is_refused_at_validation(tmp_path, capsys, spec):
    stage = spec.split("+")[-1]
    plan = _write_plan(tmp_path / "p.toml", f'[[claim]]\nid = "a"\nkind = "robustness"\naggregator = "{spec}"\n'
                                            f'n = 7\nf = 1\ndim = 4\ntrials = 2\n')
    err = _one_line_exit_2(main(["run", str(plan), "--out", str(tmp_path / "out")]), capsys, "claim 'a' (#1)",
                           "key 'aggregator'", stage)
    assert "aggregator_params" not in err  # no keyword was given: the reference is what is wrong
    _one_line_exit_2(main(["audit", "robustness", "--aggregator", spec, "--n", "7", "--f", "1", "--dim", "4",
                           "--trials", "2"]), capsys, stage)


# ------------------------------------------------------------------------------ a full disk
def _enospc(*_args, **_kw):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_enospc_while_writing_the_lock_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    import fedaudit.locking as locking

    plan = _write_plan(tmp_path / "p.toml", '[[claim]]\nid = "a"\nkind = "ldp"\nmechanism = "laplace"\ndim = 1\n'
                                            'samples = 1000\nbackend = "serial"\n')
    monkeypatch.setattr(locking.os, "write", _enospc)
    out = tmp_path / "out"
    _one_line_exit_2(main(["run", str(plan), "--out", str(out)]), capsys, str(out / ".lock"),
                     "No space left on device")
    assert not (out / ".lock").exists()  # removed again


def _fail_fsync_of(name_part: str, monkeypatch, exact: bool = False) -> None:
    """``os.fsync`` raises ENOSPC for files whose name holds ``name_part`` (is it, with ``exact``),
    as a full disk does."""
    real = os.fsync

    def fsync(fd):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        base = os.path.basename(target)
        if base == name_part if exact else name_part in base:
            _enospc()
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name an fd's file")
@pytest.mark.parametrize("name", ["_run.json", "lap.json"])
def test_enospc_while_writing_a_checkpoint_is_one_line_exit_2(tmp_path, capsys, monkeypatch, name):
    plan = _write_plan(tmp_path / "p.toml", '[[claim]]\nid = "lap"\nkind = "ldp"\nmechanism = "laplace"\ndim = 1\n'
                                            'samples = 1000\nbackend = "serial"\n')
    _fail_fsync_of(name, monkeypatch)
    out = tmp_path / "out"
    _one_line_exit_2(main(["run", str(plan), "--out", str(out), "--quiet"]), capsys, str(out / ".checkpoint" / name),
                     "No space left on device")
    assert not (out / ".lock").exists() and not [p for p in (out / ".checkpoint").iterdir() if p.name == name]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name an fd's file")
def test_enospc_while_recording_an_engine_checkpoint_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    record = tmp_path / "blocks.jsonl"
    _fail_fsync_of("blocks.jsonl", monkeypatch, exact=True)  # the header is written; a record is not
    from fedaudit.audit.ldp import audit_ldp
    from fedaudit.mechanisms.registry import make_mechanism

    with pytest.raises(FedAuditError) as caught:  # the CLI checkpoints whole claims now (--out): the API's chunks
        audit_ldp(make_mechanism("rr", 2, 1.0), np.eye(2)[0], np.eye(2)[1], samples=2000, backend="serial",
                  checkpoint=str(record))
    assert str(record) in str(caught.value) and "No space left on device" in str(caught.value)
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------------------------ audit scores
def _npy_claiming(path: Path, shape: tuple, dtype: str = "<f8", data: bytes = b"") -> Path:
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": dtype, "fortran_order": False, "shape": shape})
        fh.write(data)
    return path


def test_a_npy_header_claiming_more_than_the_file_holds_is_refused_before_loading(tmp_path, capsys):
    ok = tmp_path / "ok.npy"
    np.save(ok, np.random.default_rng(0).random(100))
    huge = _npy_claiming(tmp_path / "huge.npy", (10**12,), data=np.zeros(10).tobytes())
    _one_line_exit_2(main(["audit", "scores", str(huge), str(ok), "--delta", "1e-5"]), capsys, "IN", str(huge),
                     "(1000000000000,)", "holds 80 bytes")
    flat = _npy_claiming(tmp_path / "2d.npy", (10**6, 10**6))
    _one_line_exit_2(main(["audit", "scores", str(ok), str(flat), "--delta", "1e-5"]), capsys, "OUT", str(flat),
                     "1-D")
    words = _npy_claiming(tmp_path / "str.npy", (10**9,), dtype="<U8")
    _one_line_exit_2(main(["audit", "scores", str(words), str(ok), "--delta", "1e-5"]), capsys, str(words),
                     "real numbers")
    torn = tmp_path / "torn.npy"
    torn.write_bytes(b"\x93NUMPY\x01\x00\xff\xff{")
    _one_line_exit_2(main(["audit", "scores", str(torn), str(ok), "--delta", "1e-5"]), capsys, str(torn))
    # an honest file still loads
    assert main(["audit", "scores", str(ok), str(ok), "--delta", "1e-5"]) == 0
