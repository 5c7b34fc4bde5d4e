"""Adversaries: Byzantine attacks (``byzantine``), gossip attacks (``gossip``) and privacy
distinguishers (``inference``).

Byzantine call convention: ``attack(honest, f, rng=None) -> (f, d)`` with ``honest`` of shape
(n − f, d); attacks are omniscient and may return non-identical rows.
"""

from fedaudit.attacks.byzantine import (
    ALIE,
    IPM,
    Attack,
    Fang,
    FangKrumNotSelectedWarning,
    Gaussian,
    MinMax,
    MinSum,
    Mimic,
    NonFinite,
    Optimal,
    SignFlip,
)
from fedaudit.attacks.registry import ATTACKS, make_attack, register_attack
from fedaudit.attacks.inference import (
    ColumnThreshold,
    FrequencyTest,
    LikelihoodRatio,
    LogisticClassifier,
    Projection,
    Statistic,
)

__all__ = [
    "Attack", "ALIE", "IPM", "SignFlip", "Gaussian", "Mimic", "MinMax", "MinSum", "Fang", "FangKrumNotSelectedWarning", "NonFinite", "Optimal",
    "ATTACKS", "make_attack", "register_attack",
    "ColumnThreshold", "FrequencyTest", "LikelihoodRatio", "LogisticClassifier", "Projection", "Statistic",
]
