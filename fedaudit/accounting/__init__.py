"""Accountants: what a client has spent over rounds, what shuffling amplifies to, and what a
DP-SGD or DP-FedAvg run costs, built on the typed guarantees of :mod:`fedaudit.guarantees` and on
dp-accounting and Opacus wherever they do the work (issue #11, in progress)."""
