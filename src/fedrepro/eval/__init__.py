"""Evaluation: classifier accuracy, linear probe, kNN monitor, fairness metrics."""
