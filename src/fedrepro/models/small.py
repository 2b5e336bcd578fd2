"""Small models for quick-scale runs and tabular data."""

from __future__ import annotations

import math

from torch import nn


class Classifier(nn.Module):
    """A feature extractor followed by a linear head (no head when num_classes=0)."""

    def __init__(self, features: nn.Module, feature_dim: int, num_classes: int):
        super().__init__()
        self.features = features
        self.feature_dim = feature_dim
        self.head = nn.Linear(feature_dim, num_classes) if num_classes > 0 else nn.Identity()

    def forward(self, x):
        return self.head(self.features(x))


def logistic_regression(in_features: int, num_classes: int = 2) -> nn.Module:
    """Linear logits; with num_classes=1 the single logit of binary logistic regression."""
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, num_classes))


def mlp(in_features: int, num_classes: int, hidden: list[int] | tuple[int, ...] = (64,)) -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return Classifier(nn.Sequential(*layers), width, num_classes)


def small_cnn(
    in_channels: int = 1, num_classes: int = 10, width: int = 16, image_size: int = 8, feature_dim: int = 64
) -> nn.Module:
    """Two 3x3 conv blocks (width, 2*width channels) with one 2x2 pooling, then a linear feature layer.

    Sized for 8x8 digits at quick scale; works for any square image size.
    """
    pooled = math.ceil(image_size / 2)
    features = nn.Sequential(
        nn.Conv2d(in_channels, width, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2, ceil_mode=True),
        nn.Flatten(),
        nn.Linear(2 * width * pooled * pooled, feature_dim),
        nn.ReLU(),
    )
    return Classifier(features, feature_dim, num_classes)
