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
