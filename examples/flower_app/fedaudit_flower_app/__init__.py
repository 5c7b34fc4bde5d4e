"""A Flower app (``flwr run``) running fedaudit's RobustStrategy on 8×8 digits: see docs/guides/flower.md."""
