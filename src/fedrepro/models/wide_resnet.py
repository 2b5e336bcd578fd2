"""Wide ResNets WRN-d-k (Zagoruyko & Komodakis 2016), FedAL's SVHN client pool
(FedAL §VI-A: WResNet-10-1, WResNet-10-2, WResNet-16-1).

Pre-activation basic blocks, (d - 4) / 6 blocks per group, group widths 16k, 32k,
64k after a 3x3 stem of 16 channels, final BN-ReLU and global average pooling.
WRN-10-k has one block per group, WRN-16-k two. No dropout. `num_classes=0`
returns the 64k-d features (`model.feature_dim`).
"""

from __future__ import annotations

import torch
from torch import nn


class WideBlock(nn.Module):
    """BN-ReLU-conv3x3-BN-ReLU-conv3x3 with a 1x1 projection when the shape changes."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.shortcut = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = torch.relu(self.bn1(x))
        out = self.conv1(pre)
        out = self.conv2(torch.relu(self.bn2(out)))
        skip = x if self.shortcut is None else self.shortcut(pre)
        return out + skip


class WideResNet(nn.Module):
    def __init__(self, depth: int, widen: int, in_channels: int = 3, num_classes: int = 10) -> None:
        super().__init__()
        if (depth - 4) % 6 != 0 or depth < 10:
            raise ValueError(f"wide resnet depth must be 6n+4 with n >= 1, got {depth}")
        if num_classes < 0:
            raise ValueError(f"num_classes must be >= 0 (0 = features only), got {num_classes}")
        per_group = (depth - 4) // 6
        widths = [16 * widen, 32 * widen, 64 * widen]
        layers = [nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)]
        in_planes = 16
        for group, planes in enumerate(widths):
            for i in range(per_group):
                stride = 2 if (group > 0 and i == 0) else 1
                layers.append(WideBlock(in_planes, planes, stride))
                in_planes = planes
        layers += [nn.BatchNorm2d(in_planes), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.feature_dim = in_planes
        self.num_classes = num_classes
        self.fc = nn.Linear(in_planes, num_classes) if num_classes > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def wrn10_1(in_channels: int = 3, num_classes: int = 10) -> WideResNet:
    """WRN-10-1 (64-d features)."""
    return WideResNet(10, 1, in_channels=in_channels, num_classes=num_classes)


def wrn10_2(in_channels: int = 3, num_classes: int = 10) -> WideResNet:
    """WRN-10-2 (128-d features)."""
    return WideResNet(10, 2, in_channels=in_channels, num_classes=num_classes)


def wrn16_1(in_channels: int = 3, num_classes: int = 10) -> WideResNet:
    """WRN-16-1 (64-d features)."""
    return WideResNet(16, 1, in_channels=in_channels, num_classes=num_classes)
