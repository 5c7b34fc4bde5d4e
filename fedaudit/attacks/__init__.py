"""Adversaries: privacy distinguishers (``inference``) and, later, Byzantine attacks."""

from fedaudit.attacks.inference import (
    ColumnThreshold,
    FrequencyTest,
    LikelihoodRatio,
    LogisticClassifier,
    Projection,
    Statistic,
)

__all__ = ["ColumnThreshold", "FrequencyTest", "LikelihoodRatio", "LogisticClassifier", "Projection", "Statistic"]
