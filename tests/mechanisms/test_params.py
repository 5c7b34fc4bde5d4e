"""Issue #24 §2: a mechanism's own keywords work from plans (``mechanism_params``) and from the
CLI (``--mech-param KEY=VALUE``), not only from Python, through the registry's keyword check."""

from __future__ import annotations

import json
import textwrap

import pytest

from fedaudit.cli import main
from fedaudit.errors import FedAuditError
from fedaudit.cli.argtypes import mech_params
from fedaudit.experiments.plan import parse_plan
from fedaudit.mechanisms import Laplace, make_mechanism

MODULE = textwrap.dedent('''
    from fedaudit.mechanisms import Laplace


    class Rounded(Laplace):
        """Laplace whose ε is split over ``rounds`` reports: each report spends epsilon / rounds."""

        def __init__(self, dim, epsilon, clip, rounds):
            super().__init__(dim, epsilon / rounds, clip)
            self.rounds = rounds


    def rounded(dim, epsilon, *, clip=1.0, rounds=1, label="x"):
        """A user's mechanism factory with its own keywords: rounds (and a string label)."""
        if not isinstance(label, str):
            raise TypeError("label must be a string")
        return Rounded(dim, epsilon, clip, rounds)
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "vocab_user_mech.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "vocab_user_mech:rounded"


def test_make_mechanism_passes_the_mechanisms_own_keywords(user_module):
    m = make_mechanism(user_module, 4, 2.0, params={"rounds": 4})
    assert m.rounds == 4 and m.epsilon == pytest.approx(0.5)
    assert make_mechanism(user_module, 4, 2.0).rounds == 1  # the factory's default without params


def test_make_mechanism_checks_own_keywords_against_the_signature(user_module):
    with pytest.raises(FedAuditError, match=r"takes no keyword 'round' \(did you mean 'rounds'\?\)"):
        make_mechanism(user_module, 4, 2.0, params={"round": 4})
    with pytest.raises(FedAuditError, match="takes no keyword 'rounds'"):
        make_mechanism("laplace", 4, 2.0, params={"rounds": 4})  # a built-in without it
    with pytest.raises(FedAuditError, match="'clip' is a common keyword"):
        make_mechanism(user_module, 4, 2.0, params={"clip": 2.0})


def _plan(mechanism: str, extra: str, kind: str = "ldp") -> dict:
    import tomllib

    body = f'[[claim]]\nid = "c"\nkind = "{kind}"\nmechanism = "{mechanism}"\ndim = 4\n{extra}'
    if kind == "ldp":
        body += "samples = 1000\n"
    else:
        body += "rounds = 3\nmax_epsilon = 100.0\n"
    return tomllib.loads(body)


@pytest.mark.parametrize("kind", ["ldp", "accounting"])
def test_plans_take_mechanism_params(user_module, kind):
    plan = parse_plan(_plan(user_module, "mechanism_params = { rounds = 4, label = 'y' }\n", kind))
    assert plan.claims[0].params["mechanism_params"] == {"rounds": 4, "label": "y"}
    with pytest.raises(FedAuditError, match=r"claim 'c' \(#1\): .*takes no keyword 'round'"):
        parse_plan(_plan(user_module, "mechanism_params = { round = 4 }\n", kind))
    with pytest.raises(FedAuditError, match="key 'mechanism_params' must be a table of keyword"):
        parse_plan(_plan(user_module, "mechanism_params = 4\n", kind))


def test_a_plan_runs_a_user_mechanism_with_its_own_keyword(user_module, tmp_path, capsys):
    plan = tmp_path / "plan.toml"
    plan.write_text(f'[[claim]]\nid = "c"\nkind = "ldp"\nmechanism = "{user_module}"\ndim = 2\nsamples = 2000\n'
                    'curve = false\nmechanism_params = { rounds = 4 }\n')
    assert main(["run", str(plan), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["claims"][0]["evidence"]["epsilon_claimed"] == pytest.approx(0.25)  # ε / rounds


def test_cli_mech_param(user_module, tmp_path, capsys):
    out = tmp_path / "a.json"
    assert main(["audit", "ldp", "--mechanism", user_module, "--mech-param", "rounds=4", "--dim", "2",
                 "--samples", "2000", "--quiet", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["evidence"]["epsilon_claimed"] == pytest.approx(0.25)  # default ε 1, 4 rounds
    assert main(["audit", "ldp", "--mechanism", user_module, "--mech-param", "round=4", "--dim", "2",
                 "--samples", "2000", "--quiet"]) == 2
    assert "takes no keyword 'round' (did you mean 'rounds'?)" in capsys.readouterr().err
    assert main(["account", "compose", "--epsilon", "1", "--uses", "2", "--mechanism", user_module,
                 "--mech-param", "rounds=2", "--accountant", "basic"]) == 0
    assert "1" in capsys.readouterr().out  # 2 reports at ε = 0.5 each: basic ε = 1


def test_mech_params():
    assert mech_params(["rounds=3", "on=true", "x=0.5", "name=abc"]) == {
        "rounds": 3, "on": True, "x": 0.5, "name": "abc"}
    assert mech_params(None) is None
    with pytest.raises(FedAuditError, match="--mech-param must look like KEY=VALUE"):
        mech_params(["rounds"])
    with pytest.raises(FedAuditError, match="--mech-param must be a table of keyword"):
        mech_params(["x=nan"])


def test_generated_kind_commands_take_mech_param(user_module, tmp_path):
    out = tmp_path / "c.json"
    assert main(["audit", "accounting", "--mechanism", user_module, "--dim", "4", "--rounds", "3",
                 "--max-epsilon", "100", "--mech-param", "rounds=4", "--curve-points", "2", "--quiet",
                 "--json", str(out)]) == 0
    assert json.loads(out.read_text())["evidence"]["per_report"]["epsilon"] == pytest.approx(0.25)  # 1 / rounds


def test_laplace_is_not_changed_by_empty_params():
    assert make_mechanism("laplace", 4, 1.0, params={}).params() == Laplace(4, 1.0, 1.0).params()


# ----------------------------------------------------------------------------- one name per concept
@pytest.mark.parametrize("module, old, new", [
    ("fedaudit.attacks", "Gaussian", "GaussianNoise"),
    ("fedaudit.attacks.byzantine", "Gaussian", "GaussianNoise"),
    ("fedaudit.audit.sparse_upload", "PAIRS", "UPLOAD_PAIRS"),
    ("fedaudit.audit.scores", "ORIENTATIONS", "SCORE_ORIENTATIONS"),
    ("fedaudit.fl", "ORIENTATIONS", "GENE_CSV_ORIENTATIONS"),
    ("fedaudit.fl.sparse_data", "ORIENTATIONS", "GENE_CSV_ORIENTATIONS"),
    ("fedaudit.engine", "CHECKPOINT_FORMAT", "CHUNK_CHECKPOINT_FORMAT"),
    ("fedaudit.engine.checkpoints", "CHECKPOINT_FORMAT", "CHUNK_CHECKPOINT_FORMAT"),
    ("fedaudit.experiments.runner", "CHECKPOINT_FORMAT", "RUN_CHECKPOINT_FORMAT"),
])
def test_renamed_names_keep_a_deprecated_alias(module, old, new):
    import importlib

    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated; use {new}"):
        assert getattr(mod, old) is getattr(mod, new)
    assert old not in mod.__all__  # "import *" never warns
    with pytest.raises(AttributeError):
        getattr(mod, "no_such_name")


def test_the_attack_and_the_mechanism_have_distinct_names():
    from fedaudit.attacks import ATTACKS, GaussianNoise
    from fedaudit.mechanisms import Gaussian

    assert ATTACKS.factory("gaussian") is GaussianNoise and GaussianNoise is not Gaussian


# ----------------------------------------------------------------------------- one word per concept
@pytest.mark.parametrize("kind, old, new, value, extra", [
    ("accounting", "method", "accountant", "'advanced'", 'mechanism = "rr"\ndim = 4\nrounds = 3\nmax_epsilon = 100.0\n'),
    ("ldp", "test", "distinguisher", "'black-box'", 'mechanism = "laplace"\ndim = 2\nsamples = 1000\n'),
])
def test_a_plan_with_a_renamed_key_loads_with_a_deprecation_note(kind, old, new, value, extra):
    import tomllib

    body = f'[[claim]]\nid = "c"\nkind = "{kind}"\n{extra}'
    with pytest.warns(DeprecationWarning, match=f"claim 'c' \\(#1\\): key '{old}' is deprecated; use '{new}'"):
        plan = parse_plan(tomllib.loads(body + f"{old} = {value}\n"))
    assert plan.claims[0].params[new] == value.strip("'") and old not in plan.claims[0].params
    assert parse_plan(tomllib.loads(body + f"{new} = {value}\n")).claims[0].params == plan.claims[0].params
    with pytest.raises(FedAuditError, match=f"key '{old}' is the deprecated name of '{new}'"):
        parse_plan(tomllib.loads(body + f"{old} = {value}\n{new} = {value}\n"))


def test_the_cli_prints_one_note_for_a_deprecated_plan_key_and_flag(tmp_path, capsys):
    plan = tmp_path / "plan.toml"
    plan.write_text('[[claim]]\nid = "c"\nkind = "accounting"\nmechanism = "rr"\ndim = 4\nrounds = 3\n'
                    'max_epsilon = 100.0\nmethod = "basic"\ncurve_points = 2\n')
    assert main(["run", str(plan), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "fedaudit: note: claim 'c' (#1): key 'method' is deprecated; use 'accountant'\n" in err
    assert err.count("deprecated") == 1
    assert main(["account", "compose", "--epsilon", "1", "--uses", "2", "--method", "basic"]) == 0
    captured = capsys.readouterr()
    assert "fedaudit: note: --method is deprecated and will be removed in the next release; use --accountant" in captured.err
    assert main(["account", "compose", "--epsilon", "1", "--uses", "2", "--accountant", "basic"]) == 0
    assert capsys.readouterr().out == captured.out  # the same result under either name
    assert "--method" not in _help(["account", "compose", "--help"], capsys)


def test_a_generated_kind_command_takes_the_flag_of_a_renamed_key_with_a_note(capsys):
    argv = ["audit", "accounting", "--mechanism", "rr", "--dim", "4", "--rounds", "3", "--max-epsilon", "100",
            "--curve-points", "2"]
    assert main(argv + ["--method", "basic"]) == 0
    captured = capsys.readouterr()
    assert "fedaudit: note: --method is deprecated and will be removed in the next release; use --accountant" in captured.err
    assert main(argv + ["--accountant", "basic"]) == 0
    assert capsys.readouterr().out == captured.out
    assert "--method" not in _help(["audit", "accounting", "--help"], capsys)


def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit):
        main(argv)
    return capsys.readouterr().out
