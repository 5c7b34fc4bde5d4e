"""Server-side defenses: robust aggregators, pre-aggregators and their composition.

An aggregator maps (n, d) → (d,); a pre-aggregator maps (n, d) → (n', d); ``compose`` chains
pre-aggregators and one aggregator. Build by name with :func:`make_aggregator` (registries
:data:`AGGREGATORS`, :data:`PREAGGREGATORS`). Every rule exposes its typed robustness class
(``rule.robustness``), on which :func:`kappa_upper_bound` dispatches. Gossip rules are
:mod:`fedaudit.defenses.gossip`.

Call contract (see :mod:`fedaudit.defenses.base`): ``rule(X, rng=generator)`` — random rules
draw from ``rng`` and are otherwise stateless; rows holding NaN/±inf are dropped up to
``rule.tolerance(n)`` (f for rules that need f with f ≥ 1, else ⌈n/2⌉ − 1) and beyond it
:class:`~fedaudit.errors.AggregatorBreakdown` is raised; finite rows of any magnitude give a
finite result; integer/bool inputs come back as float64; a torch tensor comes back as a tensor
of its dtype and device without autograd history (gradients do not flow through a rule).
"""

from fedaudit.defenses.aggregators import (
    CWMed,
    CWTM,
    MDA,
    Bulyan,
    CenteredClipping,
    GeometricMedian,
    Krum,
    Meamed,
    Mean,
    MultiKrum,
)
from fedaudit.defenses.base import (
    Aggregator,
    Averaging,
    KrumSelection,
    MedianBased,
    NearestNeighbourMixing,
    PreAggregator,
    RobustnessClass,
    TrimmedMean,
    compose,
)
from fedaudit.defenses.preaggregators import ARC, NNM, Bucketing, Clipping
from fedaudit.defenses.registry import (
    AGGREGATORS,
    PREAGGREGATORS,
    make_aggregator,
    register_aggregator,
    register_preaggregator,
)
from fedaudit.defenses.kappa import KappaBound, kappa_lower_bound, kappa_upper_bound
from fedaudit.defenses import gossip

__all__ = [
    "KappaBound", "kappa_lower_bound", "kappa_upper_bound", "gossip",
    "Aggregator",
    "PreAggregator",
    "RobustnessClass",
    "Averaging",
    "TrimmedMean",
    "KrumSelection",
    "MedianBased",
    "NearestNeighbourMixing",
    "compose",
    "Mean",
    "CWTM",
    "CWMed",
    "GeometricMedian",
    "Krum",
    "MultiKrum",
    "MDA",
    "CenteredClipping",
    "Meamed",
    "Bulyan",
    "NNM",
    "Bucketing",
    "ARC",
    "Clipping",
    "AGGREGATORS",
    "PREAGGREGATORS",
    "make_aggregator",
    "register_aggregator",
    "register_preaggregator",
]
