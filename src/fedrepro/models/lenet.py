"""LeNet-5 (LeCun et al. 1998), the MNIST client model of FedAL (§VI-A).

Classic layout: conv 5x5 (6 channels, padding 2) -> ReLU -> max-pool 2 ->
conv 5x5 (16 channels) -> ReLU -> max-pool 2 -> FC 120 -> FC 84 -> FC K.
FedAL does not say which variant: ReLU and max-pooling
instead of the original tanh / average pooling. `num_classes=0` returns the
84-d penultimate features. `input_size` (default 28) sets the flattened width.
"""

from __future__ import annotations

import torch
from torch import nn


class LeNet5(nn.Module):
    def __init__(self, in_channels: int = 1, num_classes: int = 10, input_size: int = 28) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, 6, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )
        side = ((input_size // 2) - 4) // 2
        if side < 1:
            raise ValueError(f"lenet5: input_size must be >= 12, got {input_size}")
        self.fc = nn.Sequential(nn.Linear(16 * side * side, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU())
        self.feature_dim = 84
        self.num_classes = num_classes
        self.head = nn.Linear(84, num_classes) if num_classes > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.fc(self.conv(x)))


def lenet5(in_channels: int = 1, num_classes: int = 10, input_size: int = 28) -> LeNet5:
    """LeNet-5; `num_classes=0` gives the 84-d features."""
    if num_classes < 0:
        raise ValueError(f"num_classes must be >= 0 (0 = features only), got {num_classes}")
    return LeNet5(in_channels=in_channels, num_classes=num_classes, input_size=input_size)
