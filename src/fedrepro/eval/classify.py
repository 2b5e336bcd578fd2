"""Accuracy and loss of a classifier on a tensor data set."""

from __future__ import annotations

import torch
import torch.nn.functional as F


@torch.no_grad()
def evaluate_classifier(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024, prefix: str = "test"
) -> dict[str, float]:
    """Mean cross-entropy and accuracy; the model is put in eval mode and restored."""
    was_training = model.training
    model.eval()
    loss_sum, correct = 0.0, 0
    for start in range(0, len(y), batch_size):
        logits = model(x[start : start + batch_size])
        target = y[start : start + batch_size]
        loss_sum += F.cross_entropy(logits, target, reduction="sum").item()
        correct += (logits.argmax(dim=1) == target).sum().item()
    model.train(was_training)
    return {f"{prefix}_loss": loss_sum / len(y), f"{prefix}_acc": correct / len(y)}
