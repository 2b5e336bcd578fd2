"""Linear probe ("linear evaluation", FedSC §7.2 and Tables 2-5; settings from its authors' code).

The backbone is frozen (eval mode, features computed once without
augmentation), and one `Linear(feature_dim, num_classes)` layer is trained with
Adam (lr 3e-3 by default) and cross-entropy on the whole labelled training set
for `epochs` epochs; the test accuracy is logged after every epoch. Tables use
the final epoch (`final_acc`); `max_acc` is logged too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedrepro.fl.optim import Adam


@torch.no_grad()
def extract_features(backbone: nn.Module, x: Tensor, transform, batch_size: int = 1024) -> Tensor:
    """Backbone features of `transform(x)` in eval mode (the model's mode is restored)."""
    was_training = backbone.training
    backbone.eval()
    out = torch.cat([backbone(transform(x[i : i + batch_size])) for i in range(0, x.shape[0], batch_size)])
    backbone.train(was_training)
    return out


def linear_probe(
    train_f: Tensor,
    train_y: Tensor,
    test_f: Tensor,
    test_y: Tensor,
    num_classes: int,
    epochs: int = 200,
    batch_size: int = 512,
    lr: float = 3e-3,
    seed: int = 0,
) -> dict:
    """Train a linear classifier on frozen features; accuracies are fractions."""
    if epochs < 1 or batch_size < 1 or lr <= 0:
        raise ValueError(f"probe needs epochs >= 1, batch_size >= 1 and lr > 0, got {epochs}, {batch_size}, {lr}")
    gen = torch.Generator().manual_seed(seed)
    head = nn.Linear(train_f.shape[1], num_classes).to(train_f.device)
    with torch.no_grad():  # seeded init, independent of the global RNG
        bound = 1.0 / train_f.shape[1] ** 0.5
        head.weight.copy_(torch.rand(head.weight.shape, generator=gen) * 2 * bound - bound)
        head.bias.copy_(torch.rand(head.bias.shape, generator=gen) * 2 * bound - bound)
    opt = Adam(head.parameters(), lr=lr)
    n, curve = train_f.shape[0], []
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen).to(train_f.device)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            loss = F.cross_entropy(head(train_f[idx]), train_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            curve.append(float((head(test_f).argmax(1) == test_y).float().mean()))
    return {"final_acc": curve[-1], "max_acc": max(curve), "curve": curve}
