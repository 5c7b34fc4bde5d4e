"""What leaves a client: local randomizers with exact likelihoods.

Every mechanism implements :class:`Mechanism` (``encode``, ``sample``, ``decode``,
``log_prob``, ``dim``, ``guarantee``, ``epsilon``, ``delta``, ``bits_per_report``) and is built by
name through :data:`MECHANISMS` (``make_mechanism``; users add theirs with ``register_mechanism``). ``published`` keeps
algorithms *as published* (the SSTQ sketch) so audits can show their flaws; they are never
defaults. ``gated`` is E-FLoPS's gated sparse upload: the top-m coordinates by gate probability in
a documented wire format (:class:`GatedSparseUpload`) and its ε-LDP variant (:class:`GatedPrivateUpload`).
"""

from fedaudit.mechanisms.base import Mechanism, clip_l2
from fedaudit.mechanisms.duchi import Duchi
from fedaudit.mechanisms.gated import ClientUpdate, GatedPrivateUpload, GatedSparseUpload, SparsePacket, m_for_density
from fedaudit.mechanisms.gaussian import Gaussian
from fedaudit.mechanisms.laplace import Laplace
from fedaudit.mechanisms.privunit import PrivUnitG
from fedaudit.mechanisms.randomized_response import RandomizedResponse
from fedaudit.mechanisms.published import SSTQSketch
from fedaudit.mechanisms.registry import MECHANISMS, make_mechanism, register_mechanism
from fedaudit.mechanisms.sstq import SSTQ
from fedaudit.mechanisms.vqsgd import VQSGD

__all__ = [
    "Mechanism", "clip_l2", "SSTQ", "SSTQSketch", "VQSGD", "PrivUnitG", "Duchi", "Laplace", "Gaussian",
    "RandomizedResponse", "MECHANISMS", "make_mechanism", "register_mechanism",
    "ClientUpdate", "SparsePacket", "GatedSparseUpload", "GatedPrivateUpload", "m_for_density",
]
