"""Weighted kNN monitor (InstDisc / SimCLR-code style), FedSC's Figure 2 metric.

Features are L2-normalised; each test point takes its k most cosine-similar
memory-bank points, weights each by exp(cos / temperature) and predicts the
class with the largest summed weight. FedSC's paper gives no settings; its authors'
code (`knn_monitor`) uses k = 200, temperature 0.1 and the whole training set without
augmentation as memory bank, the defaults here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


@torch.no_grad()
def knn_predict(
    features: Tensor,
    bank: Tensor,
    bank_labels: Tensor,
    num_classes: int,
    k: int = 200,
    temperature: float = 0.1,
    batch_size: int = 1024,
) -> Tensor:
    """Predicted labels of `features` (M, H) from a labelled memory bank (N, H)."""
    if k < 1 or temperature <= 0:
        raise ValueError(f"kNN needs k >= 1 and temperature > 0, got k={k}, temperature={temperature}")
    bank = F.normalize(bank, dim=1)
    k = min(k, bank.shape[0])
    preds = []
    for start in range(0, features.shape[0], batch_size):
        f = F.normalize(features[start : start + batch_size], dim=1)
        weight, index = (f @ bank.T).topk(k, dim=1)
        labels = bank_labels[index]
        scores = torch.zeros(f.shape[0], num_classes, device=f.device, dtype=f.dtype)
        scores.scatter_add_(1, labels, (weight / temperature).exp())
        preds.append(scores.argmax(dim=1))
    return torch.cat(preds)


def knn_accuracy(
    bank: Tensor,
    bank_labels: Tensor,
    features: Tensor,
    labels: Tensor,
    num_classes: int,
    k: int = 200,
    temperature: float = 0.1,
) -> float:
    """Top-1 accuracy (fraction) of the weighted kNN classifier."""
    pred = knn_predict(features, bank, bank_labels.to(bank.device), num_classes, k, temperature)
    return float((pred == labels.to(pred.device)).float().mean())
