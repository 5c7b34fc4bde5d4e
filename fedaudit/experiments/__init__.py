"""Experiments: plans, claim kinds and the runner that turns a plan into a report.

* :mod:`~fedaudit.experiments.plan` — TOML plans, their keys and validation;
* :mod:`~fedaudit.experiments.claims` — the claim kinds, each run into a :class:`~fedaudit.reports.Claim`;
* :mod:`~fedaudit.experiments.runner` — ``run_plan`` / ``run_plan_to_dir`` with checkpoint and resume;
* :mod:`~fedaudit.experiments.plan_reference` — generates ``docs/plans.md`` from the claim kinds.

This package sits above :mod:`fedaudit.audit`, :mod:`fedaudit.fl` and :mod:`fedaudit.reports`;
nothing below it imports it.
"""
