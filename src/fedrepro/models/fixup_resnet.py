"""Fixup ResNet-20 for 32x32 images (Zhang, Dauphin & Ma 2019), FedSC's "modified ResNet20".

No normalisation layers. Each basic block has four scalar biases and one scalar
scale; conv1 is drawn from N(0, sqrt(2/(c_out*9)) * L^-1/2) with L the number of
blocks, conv2 starts at zero, and a classifier layer starts at zero. Stages have
16w/32w/64w channels (w = widen_factor; FedSC uses w = 8, so 128/256/512); the
downsampling shortcut is AvgPool(1, stride 2) followed by zero channels ("option A").
`num_classes=0` returns the pooled features (width `feature_dim` = 64w), as the
official code does by replacing `fc` with Identity.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class FixupBasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        if stride != 1 and cout != 2 * cin:
            raise ValueError("option-A shortcut doubles the channels when it downsamples")
        self.bias1a = nn.Parameter(torch.zeros(1))
        self.conv1 = _conv3x3(cin, cout, stride)
        self.bias1b = nn.Parameter(torch.zeros(1))
        self.bias2a = nn.Parameter(torch.zeros(1))
        self.conv2 = _conv3x3(cout, cout)
        self.scale = nn.Parameter(torch.ones(1))
        self.bias2b = nn.Parameter(torch.zeros(1))
        self.downsample = nn.AvgPool2d(1, stride=stride) if stride != 1 else None

    def forward(self, x: Tensor) -> Tensor:
        out = torch.relu(self.conv1(x + self.bias1a) + self.bias1b)
        out = self.conv2(out + self.bias2a) * self.scale + self.bias2b
        identity = x
        if self.downsample is not None:
            identity = self.downsample(x + self.bias1a)
            identity = torch.cat([identity, torch.zeros_like(identity)], 1)
        return torch.relu(out + identity)


class FixupResNet(nn.Module):
    def __init__(self, blocks_per_stage: int = 3, in_channels: int = 3, num_classes: int = 0, widen_factor: int = 1):
        super().__init__()
        if widen_factor < 1 or blocks_per_stage < 1:
            raise ValueError(f"widen_factor and blocks_per_stage must be >= 1, got {widen_factor}, {blocks_per_stage}")
        widths = [16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        self.num_layers = 3 * blocks_per_stage
        self.conv1 = _conv3x3(in_channels, widths[0])
        self.bias1 = nn.Parameter(torch.zeros(1))
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            for b in range(blocks_per_stage):
                stride = 2 if (i > 0 and b == 0) else 1
                layers.append(FixupBasicBlock(cin, w, stride))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.bias2 = nn.Parameter(torch.zeros(1))
        self.feature_dim = widths[-1]
        self.fc = nn.Linear(widths[-1], num_classes) if num_classes > 0 else nn.Identity()
        self._fixup_init()

    def _fixup_init(self) -> None:
        for m in self.modules():
            if isinstance(m, FixupBasicBlock):
                fan = m.conv1.weight.shape[0] * 9
                nn.init.normal_(m.conv1.weight, 0.0, math.sqrt(2.0 / fan) * self.num_layers**-0.5)
                nn.init.zeros_(m.conv2.weight)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.relu(self.conv1(x) + self.bias1)
        x = self.layers(x)
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)
        return self.fc(x + self.bias2)


def fixup_resnet20(in_channels: int = 3, num_classes: int = 0, widen_factor: int = 8) -> FixupResNet:
    """Fixup ResNet-20 (3 stages x 3 basic blocks); FedSC uses widen_factor 8 (512-d features)."""
    return FixupResNet(3, in_channels, num_classes, widen_factor)
