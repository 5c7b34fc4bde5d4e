"""Experiments: plans, claim kinds and the runner that turns a plan into a report.

* :mod:`~fedaudit.experiments.plan` — TOML plans: plan-level keys, ids, seeds, ``expect``, and
  dispatch to the claim's kind for its keys, cross-checks and title;
* :mod:`~fedaudit.experiments.keys` — :class:`~fedaudit.experiments.keys.Key`, the typed plan key;
* :mod:`~fedaudit.experiments.kind` — the :class:`~fedaudit.experiments.kind.ClaimKind` protocol
  with the :class:`~fedaudit.experiments.kind.ClaimSpec` a run receives and the
  :class:`~fedaudit.experiments.kind.Evidence` it returns;
* :mod:`~fedaudit.experiments.kinds` — one module per claim kind and the open ``CLAIM_KINDS``
  registry (``register_claim_kind``);
* :mod:`~fedaudit.experiments.components` — plan-time checks of aggregators and attacks;
* :mod:`~fedaudit.experiments.runner` — ``run_plan`` / ``run_plan_to_dir`` with checkpoint and resume;
* :mod:`~fedaudit.experiments.plan_reference` — generates ``docs/plans.md`` from the claim kinds;
* :mod:`~fedaudit.experiments.showcase` — the encode → decode tour of ``fedaudit demo --showcase``.

This package sits above :mod:`fedaudit.audit`, :mod:`fedaudit.fl` and :mod:`fedaudit.reports`;
nothing below it imports it.
"""
