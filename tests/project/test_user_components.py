"""Issue #22 §4: a user component that fails while the plan is checked is one line naming the
factory, the keywords and the fix (exit 2), never a traceback with the "claim failed" code; the
exact pair ε hook of a mechanism is the public ``epsilon_for_pair`` (``_epsilon_for_pair`` is a
deprecated alias that keeps working)."""

from __future__ import annotations

import textwrap
import warnings

import numpy as np
import pytest

from fedaudit.audit import audit_ldp
from fedaudit.cli import main
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms import Laplace, make_mechanism

COMPONENTS = textwrap.dedent('''
    from fedaudit.defenses.registry import make_aggregator
    from fedaudit.mechanisms import Laplace


    def no_clip(dim, epsilon, **keywords):
        """A mechanism factory that rejects one of the keywords it is given."""
        if "clip" in keywords:
            raise TypeError("no_clip() got an unexpected keyword argument 'clip'")
        return Laplace(dim, epsilon)


    def picky(dim, epsilon, levels):
        """A mechanism factory that rejects a value."""
        raise ValueError(f"levels must be 8, got {levels}")


    def agg(f, **keywords):
        """An aggregator factory that rejects every keyword."""
        if keywords:
            raise TypeError(f"agg() got unexpected keywords {sorted(keywords)}")
        return make_aggregator("cwtm", f)
''')


@pytest.fixture
def components(tmp_path, monkeypatch):
    (tmp_path / "my_components.py").write_text(COMPONENTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _run_plan(tmp_path, claim: str, capsys) -> tuple[int, str]:
    plan = tmp_path / "plan.toml"
    plan.write_text('[plan]\ntitle = "t"\nseed = 0\n\n[[claim]]\nid = "mine"\n' + textwrap.dedent(claim))
    code = main(["run", str(plan), "--out", str(tmp_path / "out"), "--quiet"])
    return code, capsys.readouterr().err


def test_a_mechanism_factory_that_rejects_a_keyword_is_one_line_exit_2(components, capsys):
    code, err = _run_plan(components, 'kind = "ldp"\nmechanism = "my_components:no_clip"\ndim = 4\n'
                                      'samples = 1000\n', capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("fedaudit: error: claim 'mine' (#1): ")
    assert "mechanism factory 'my_components:no_clip' failed when called as my_components:no_clip(4, 1.0, " in err
    assert "k=1, levels=4, clip=1.0, delta=1e-05, rotate=True" in err  # the keywords it was given
    assert "TypeError: no_clip() got an unexpected keyword argument 'clip'" in err
    assert ("receives (dim, epsilon) positionally and, of k, levels, clip, delta and rotate, the keywords its "
            "signature names (all of them with **keywords): name in its signature only the keywords it takes") in err
    assert not (components / "out").exists()  # refused before the directory was touched


def test_a_mechanism_factory_that_rejects_a_value_and_an_aggregator_factory(components, capsys):
    code, err = _run_plan(components, 'kind = "ldp"\nmechanism = "my_components:picky"\ndim = 4\n', capsys)
    assert code == 2 and err.count("\n") == 1
    assert "my_components:picky(4, 1.0, levels=4): ValueError: levels must be 8, got 4" in err
    assert "fix the value it rejects, or the factory" in err
    code, err = _run_plan(components, 'kind = "robustness"\naggregator = "my_components:agg"\nn = 7\nf = 1\n'
                                      'aggregator_params = { s = 2 }\n', capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "aggregator factory 'my_components:agg' failed when called as my_components:agg(f=1, s=2)" in err


def test_make_mechanism_says_what_a_factory_receives(components):
    with pytest.raises(FedAuditError, match=r"^mechanism factory 'my_components:no_clip' failed when called as "
                                            r"my_components:no_clip\(3, 2\.0, k=1, levels=4, clip=1\.0"):
        make_mechanism("my_components:no_clip", 3, 2.0)


# ------------------------------------------------------------------------------ epsilon_for_pair
class _Halved(Laplace):
    """The public hook overridden: half of Laplace's exact loss (checked inputs, float out)."""

    def epsilon_for_pair(self, x0, x1):
        assert isinstance(x0, np.ndarray) and x0.dtype == np.float64  # the hook gets validated vectors
        return np.float32(super().epsilon_for_pair(x0, x1) / 2)


def test_epsilon_for_pair_is_the_public_hook_and_the_audit_uses_it():
    m, full = _Halved(1, 1.0), Laplace(1, 1.0).epsilon_for_pair([1.0], [-1.0])
    out = m.epsilon_for_pair([1.0], [-1.0])
    assert type(out) is float and out == pytest.approx(full / 2, rel=1e-6) and 0.4 < out < 0.6
    with pytest.raises(FedAuditError, match="x0"):
        m.epsilon_for_pair([1.0, 2.0], [0.0])  # the wrapper checks the inputs before the override
    res = audit_ldp(m, [1.0], [-1.0], samples=2000, seed=0)
    assert res.epsilon_exact == pytest.approx(out) and res.pair_power == pytest.approx(out)


def test_the_former_private_hook_still_works_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="defines _epsilon_for_pair, the former name of the hook"):
        class Legacy(Laplace):
            def _epsilon_for_pair(self, x0, x1):
                return super()._epsilon_for_pair(x0, x1) / 4  # reaches Laplace's own hook

    full = Laplace(1, 1.0).epsilon_for_pair([1.0], [-1.0])
    assert Legacy(1, 1.0).epsilon_for_pair([1.0], [-1.0]) == pytest.approx(full / 4) and full > 0.9
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the built-in mechanisms use the public hook: no warning

        class Modern(Laplace):
            def epsilon_for_pair(self, x0, x1):
                return 0.0

    assert Modern(1, 1.0).epsilon_for_pair([1.0], [-1.0]) == 0.0
