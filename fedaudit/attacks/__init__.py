"""Adversaries: Byzantine attacks (``byzantine``), gossip attacks (``gossip``) and privacy
distinguishers (``inference``).

Byzantine call convention (``sparse`` adapts ALIE and IPM to the gated sparse upload, whose
attacker also picks its support; those emit packets and live in ``SPARSE_ATTACKS``): ``attack(honest, f, rng=None) -> (f, d)`` with ``honest`` of shape
(n − f, d); attacks are omniscient and may return non-identical rows.
"""

from fedaudit.deprecation import module_aliases
from fedaudit.attacks.byzantine import (
    ALIE,
    IPM,
    Attack,
    Fang,
    FangKrumNotSelectedWarning,
    GaussianNoise,
    MinMax,
    MinSum,
    Mimic,
    NonFinite,
    Optimal,
    SignFlip,
)
from fedaudit.attacks.registry import (ATTACKS, SPARSE_ATTACKS, make_attack, make_sparse_attack, register_attack,
                                      register_sparse_attack)
from fedaudit.attacks.sparse import ArbitraryPackets, SparseALIE, SparseAttack, SparseIPM
from fedaudit.attacks.inference import (
    ColumnThreshold,
    FrequencyTest,
    LikelihoodRatio,
    LogisticClassifier,
    Projection,
    Statistic,
)

__all__ = [
    "Attack", "ALIE", "IPM", "SignFlip", "GaussianNoise", "Mimic", "MinMax", "MinSum", "Fang", "FangKrumNotSelectedWarning", "NonFinite", "Optimal",
    "ATTACKS", "make_attack", "register_attack",
    "SparseAttack", "SparseALIE", "SparseIPM", "ArbitraryPackets", "SPARSE_ATTACKS", "make_sparse_attack",
    "register_sparse_attack",
    "ColumnThreshold", "FrequencyTest", "LikelihoodRatio", "LogisticClassifier", "Projection", "Statistic",
]


#: the names these had before issue #24 (deprecated; each read warns once with the new name)
__getattr__ = module_aliases(__name__, {"Gaussian": ("GaussianNoise (fedaudit.mechanisms.Gaussian is the mechanism)", lambda: GaussianNoise)})
