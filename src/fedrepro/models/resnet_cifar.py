"""ResNet-18 / ResNet-34, CIFAR variant (He et al. 2016; FedAL §VI-A, FedSC backbone).

CIFAR variant: a 3x3 stride-1 stem with 64 channels and no max-pool, four stages
of BasicBlocks (64, 128, 256, 512 channels; stride 2 from the second stage on),
BatchNorm, global average pooling. `num_classes=0` returns the 512-d feature
extractor (`model.feature_dim == 512`).
"""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and an identity (or 1x1 projection) shortcut."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNetCifar(nn.Module):
    """CIFAR-style ResNet; `num_classes=0` gives features only."""

    def __init__(self, blocks: list[int], in_channels: int = 3, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, 64, 3, stride=1, padding=1, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
        )
        layers, in_planes = [], 64
        for stage, (planes, count) in enumerate(zip((64, 128, 256, 512), blocks)):
            for i in range(count):
                stride = 2 if (stage > 0 and i == 0) else 1
                layers.append(BasicBlock(in_planes, planes, stride))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.feature_dim = 512
        self.num_classes = num_classes
        self.fc = nn.Linear(512, num_classes) if num_classes > 0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.layers(self.stem(x))))


def _check(in_channels: int, num_classes: int) -> None:
    if in_channels < 1:
        raise ValueError(f"in_channels must be >= 1, got {in_channels}")
    if num_classes < 0:
        raise ValueError(f"num_classes must be >= 0 (0 = features only), got {num_classes}")


def resnet18(in_channels: int = 3, num_classes: int = 10) -> ResNetCifar:
    """ResNet-18 (BasicBlocks 2-2-2-2), CIFAR stem."""
    _check(in_channels, num_classes)
    return ResNetCifar([2, 2, 2, 2], in_channels=in_channels, num_classes=num_classes)


def resnet34(in_channels: int = 3, num_classes: int = 10) -> ResNetCifar:
    """ResNet-34 (BasicBlocks 3-4-6-3), CIFAR stem."""
    _check(in_channels, num_classes)
    return ResNetCifar([3, 4, 6, 3], in_channels=in_channels, num_classes=num_classes)
