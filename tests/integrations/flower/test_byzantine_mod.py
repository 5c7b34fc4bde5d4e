"""byzantine_mod refuses omniscient attacks (issue #22): a client mod sees only its own update."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedaudit.attacks import ALIE, IPM, Optimal, SignFlip  # noqa: E402
from fedaudit.attacks.registry import ATTACKS  # noqa: E402
from fedaudit.defenses import make_aggregator  # noqa: E402
from fedaudit.errors import FedAuditError  # noqa: E402
from fedaudit.integrations.flower.byzantine import CLIENT_ATTACKS, byzantine_mod  # noqa: E402

OMNISCIENT = sorted(set(ATTACKS.names()) - set(CLIENT_ATTACKS))


def test_there_are_omniscient_attacks_to_refuse():
    assert {"alie", "minmax", "mimic"} <= set(OMNISCIENT)


@pytest.mark.parametrize("name", OMNISCIENT)
def test_every_omniscient_attack_is_refused_by_name(name):
    with pytest.raises(FedAuditError, match=rf"attack '{name}' is omniscient .* run omniscient attacks at the server"):
        byzantine_mod(name, [0])


@pytest.mark.parametrize("attack", [ALIE(z=30), Optimal(ALIE(), make_aggregator("cwtm", 1))],
                         ids=["ALIE()", "Optimal(ALIE)"])
def test_omniscient_attack_instances_are_refused(attack):
    with pytest.raises(FedAuditError, match="is omniscient"):
        byzantine_mod(attack, [0])


def test_client_attacks_and_own_callables_are_accepted():
    for attack in list(CLIENT_ATTACKS) + [SignFlip(scale=2.0), IPM()]:
        assert callable(byzantine_mod(attack, [0]))

    def own(honest, f, rng):  # a user's attack on the client's own row
        return -np.asarray(honest)

    assert callable(byzantine_mod(own, [0]))
