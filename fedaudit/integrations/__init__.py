"""Adapters that run fedaudit's rules, attacks and mechanisms inside other frameworks (``flower``: Flower ≥ 1.42)."""
