"""The LEAF CelebA CNN (Caldas et al. 2018), FedAL's CelebA client model
(FedAL §VI-A: "CNN", read as LEAF's, since FedAL uses LEAF's CelebA split).

Four blocks of [conv 3x3 (32 channels, same padding), BatchNorm, max-pool 2, ReLU]
then a linear layer to K classes. With the LEAF input of 84x84 the features are
32 * 5 * 5 = 800-d. `num_classes=0` returns them; `input_size` sets the side.
"""

from __future__ import annotations

import torch
from torch import nn


class LeafCNN(nn.Module):
    def __init__(self, in_channels: int = 3, num_classes: int = 2, input_size: int = 84, channels: int = 32) -> None:
        super().__init__()
        if num_classes < 0:
            raise ValueError(f"num_classes must be >= 0 (0 = features only), got {num_classes}")
        blocks, c_in, side = [], in_channels, input_size
        for _ in range(4):
            blocks += [nn.Conv2d(c_in, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.MaxPool2d(2), nn.ReLU()]
            c_in, side = channels, side // 2
        if side < 1:
            raise ValueError(f"leaf_cnn: input_size must be >= 16, got {input_size}")
        self.features = nn.Sequential(*blocks, nn.Flatten())
        self.feature_dim = channels * side * side
        self.num_classes = num_classes
        self.fc = nn.Linear(self.feature_dim, num_classes) if num_classes > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def leaf_cnn(in_channels: int = 3, num_classes: int = 2, input_size: int = 84, channels: int = 32) -> LeafCNN:
    """LEAF CNN; `num_classes=0` gives the flattened features."""
    return LeafCNN(in_channels=in_channels, num_classes=num_classes, input_size=input_size, channels=channels)
