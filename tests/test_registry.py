"""The open Registry: names, module:attr references, keyword checks and did-you-mean."""

import pytest

from fedaudit.errors import FedAuditError
from fedaudit.registry import Registry, did_you_mean, load_reference


def _reg():
    reg = Registry("widget", skip=("f",))

    @reg.register("box")
    class Box:
        """A box of a given size.

        More text."""

        def __init__(self, size, f=0, colour="red"):
            self.size, self.f, self.colour = size, f, colour

    reg.register("anything", lambda **kw: kw)
    return reg, Box


def test_register_and_build_checks_keywords():
    reg, Box = _reg()
    assert reg.names() == ("box", "anything")
    b = reg.build("BOX", size=3, colour="blue")
    assert isinstance(b, Box) and (b.size, b.colour) == (3, "blue")
    assert reg.build("box", 5).size == 5           # positional counts as supplied
    with pytest.raises(FedAuditError, match=r"no keyword 'colur' \(did you mean 'colour'\?\)"):
        reg.build("box", size=1, colur="x")
    with pytest.raises(FedAuditError, match="needs the keyword.*size"):
        reg.build("box", colour="x")
    assert reg.accepted("box") == ("size", "colour")   # f is skipped
    # positional arguments bind in signature order, skipped parameters included: size=1, f=2
    with pytest.raises(FedAuditError, match="needs the keyword.*size"):
        reg.build("box", colour="x")
    skip_first = Registry("gadget", skip=("dim",))
    skip_first.register("g", lambda dim, width, tint="x": (dim, width, tint))
    assert skip_first.build("g", 3, width=2) == (3, 2, "x")
    with pytest.raises(FedAuditError, match="needs the keyword.*width"):
        skip_first.build("g", 3)
    assert reg.accepted("anything") is None
    assert reg.build("anything", q=1) == {"q": 1}
    assert reg.describe()[0] == ("box", "A box of a given size.")


def test_unknown_name_suggests_and_lists():
    reg, _ = _reg()
    with pytest.raises(FedAuditError, match=r"unknown widget 'bax' \(did you mean 'box'\?\); choose one of: box, anything"):
        reg.factory("bax")
    assert "bax" not in reg and "box" in reg and not reg.known("bax")
    with pytest.raises(FedAuditError, match="already registered"):
        reg.register("box", lambda: 0)
    reg.register("box", lambda: 0, replace=True)
    assert reg.build("box") == 0
    with pytest.raises(FedAuditError, match="without ':'"):
        reg.register("a:b", lambda: 0)


def test_module_attr_reference():
    reg, _ = _reg()
    assert reg.factory("fedaudit.registry:Registry") is Registry
    assert reg.known("fedaudit.registry:Registry")
    assert load_reference("fedaudit.registry:Registry.register") is Registry.register
    with pytest.raises(FedAuditError, match="cannot import module 'no_such_mod'"):
        reg.factory("no_such_mod:x")
    with pytest.raises(FedAuditError, match="has no attribute 'Nope'"):
        reg.factory("fedaudit.registry:Nope")
    with pytest.raises(FedAuditError, match="must look like"):
        load_reference("fedaudit.registry:")


def test_did_you_mean_is_empty_when_nothing_is_close():
    assert did_you_mean("zzzz", ["box"]) == ""


def test_aliases_resolve_to_the_registered_name():
    reg = Registry("scheme")
    reg.register("gamma", lambda n=1: ("gamma", n), aliases=("gamma_similarity", "Gamma-Similarity"))
    assert reg.names() == ("gamma",) and reg.describe()[0][0] == "gamma"
    assert reg.aliases("GAMMA_SIMILARITY") == ("gamma_similarity", "gamma-similarity")
    assert reg.canonical(" Gamma-Similarity ") == "gamma" and reg.canonical("other") == "other"
    assert "gamma_similarity" in reg and reg.build("gamma-similarity", n=2) == ("gamma", 2)
    assert reg.accepted("gamma_similarity") == ("n",)
    with pytest.raises(FedAuditError, match=r"unknown scheme 'gama_similarity' \(did you mean 'gamma_similarity'\?\)"):
        reg.factory("gama_similarity")
    with pytest.raises(FedAuditError, match="'gamma_similarity' is already registered"):
        reg.register("other", lambda: 0, aliases=("gamma_similarity",))
    with pytest.raises(FedAuditError, match="alias 'gamma' is the name of another entry"):
        reg.register("other", lambda: 0, aliases=("gamma",), replace=True)
    reg.register("other", lambda: 0, aliases=("gamma_similarity",), replace=True)  # the alias moves
    assert reg.canonical("gamma_similarity") == "other" and reg.aliases("gamma") == ("gamma-similarity",)
    reg.unregister("gamma-similarity")  # by alias: the entry and its aliases go
    assert "gamma" not in reg and "gamma-similarity" not in reg and reg.names() == ("other",)


def test_plus_in_names_only_when_allowed():
    with pytest.raises(FedAuditError, match=r"without ':' or '\+'"):
        Registry("widget").register("cs+", lambda: 0)
    rules = Registry("gossip rule", allow_plus=True)
    rules.register("cs+", lambda: 1, aliases=("cs_plus", "cs+rg"))
    assert rules.build("CS+") == 1 and rules.canonical("cs+rg") == "cs+"
    with pytest.raises(FedAuditError, match="without ':'"):
        rules.register("a:b", lambda: 0)
