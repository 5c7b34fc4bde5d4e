"""Experiments that turn samples into certified numbers."""

from fedaudit.audit.variance import MSEResult, VarianceCurve, measure_mse, plot_variance_curve, variance_vs_dk

__all__ = ["MSEResult", "VarianceCurve", "measure_mse", "plot_variance_curve", "variance_vs_dk"]
