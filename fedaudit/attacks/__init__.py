"""Adversaries: Byzantine attacks (``byzantine``), gossip attacks (``gossip``) and privacy
distinguishers (``inference``).

Byzantine call convention: ``attack(honest, f, rng=None) -> (f, d)`` with ``honest`` of shape
(n − f, d); attacks are omniscient and may return non-identical rows.
"""

from fedaudit.attacks.byzantine import (
    ALIE,
    ATTACK_NAMES,
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
    make_attack,
)
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
    "ATTACK_NAMES", "make_attack",
    "ColumnThreshold", "FrequencyTest", "LikelihoodRatio", "LogisticClassifier", "Projection", "Statistic",
]
