"""SimCLR-style augmentations as batched tensor ops, driven by one torch.Generator.

The authors' code applies, per image and twice independently (Section 7.1 leaves it unstated):
RandomResizedCrop(size, scale=(0.2, 1)), RandomApply(ColorJitter(0.4, 0.4, 0.4, 0.1), p=0.8),
RandomHorizontalFlip, RandomGrayscale(p=0.2), then Normalize. Here every image in
a batch draws its own parameters and the whole batch is transformed at once
(crop + flip as one affine `grid_sample`), so augmenting costs a few tensor ops.

Differences from torchvision, on purpose: the crop box is drawn once and clamped
into the image instead of torchvision's 10 rejection tries; the four jitter
operations run in the fixed order brightness, contrast, saturation, hue instead
of a random order. On one-channel images saturation, hue and grayscale are no-ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class AugmentConfig:
    crop_scale: tuple[float, float] = (0.2, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1)  # brightness, contrast, saturation, hue
    jitter_p: float = 0.8
    flip_p: float = 0.5
    gray_p: float = 0.2
    mean: tuple[float, ...] = (0.5,)
    std: tuple[float, ...] = (0.5,)

    @classmethod
    def from_spec(cls, spec: dict | None, mean, std) -> AugmentConfig:
        spec = dict(spec or {})
        allowed = {"crop_scale", "crop_ratio", "jitter", "jitter_p", "flip_p", "gray_p"}
        unknown = set(spec) - allowed
        if unknown:
            raise KeyError(f"unknown augmentation keys {sorted(unknown)}; allowed: {sorted(allowed)}")
        spec = {k: tuple(v) if isinstance(v, list) else v for k, v in spec.items()}
        return cls(**spec, mean=tuple(mean), std=tuple(std))


def _uniform(n: int, low: float, high: float, gen: torch.Generator, device) -> Tensor:
    return low + (high - low) * torch.rand(n, generator=gen, device=device)


def _coin(n: int, p: float, gen: torch.Generator, device) -> Tensor:
    return torch.rand(n, generator=gen, device=device) < p


def _crop_flip(x: Tensor, cfg: AugmentConfig, gen: torch.Generator) -> Tensor:
    n, dev = x.shape[0], x.device
    area = _uniform(n, *cfg.crop_scale, gen, dev)
    log_ratio = _uniform(n, math.log(cfg.crop_ratio[0]), math.log(cfg.crop_ratio[1]), gen, dev)
    ratio = torch.exp(log_ratio)
    w = torch.sqrt(area * ratio).clamp(max=1.0)  # fractions of the image width/height
    h = torch.sqrt(area / ratio).clamp(max=1.0)
    cx = (2 * torch.rand(n, generator=gen, device=dev) - 1) * (1 - w)  # centre in [-1, 1] coords
    cy = (2 * torch.rand(n, generator=gen, device=dev) - 1) * (1 - h)
    flip = torch.where(_coin(n, cfg.flip_p, gen, dev), -1.0, 1.0)
    theta = torch.zeros(n, 2, 3, device=dev, dtype=x.dtype)
    theta[:, 0, 0] = w * flip
    theta[:, 0, 2] = cx
    theta[:, 1, 1] = h
    theta[:, 1, 2] = cy
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def _gray(x: Tensor) -> Tensor:
    if x.shape[1] == 1:
        return x
    weights = torch.tensor([0.299, 0.587, 0.114], device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
    return (x * weights).sum(1, keepdim=True)


def _rgb_to_hsv(x: Tensor) -> Tensor:
    r, g, b = x.unbind(1)
    maxc, _ = x.max(1)
    minc, _ = x.min(1)
    delta = maxc - minc
    s = torch.where(maxc > 0, delta / maxc.clamp_min(1e-12), torch.zeros_like(maxc))
    safe = delta.clamp_min(1e-12)
    h = torch.where(maxc == r, ((g - b) / safe) % 6, torch.where(maxc == g, (b - r) / safe + 2, (r - g) / safe + 4)) / 6
    h = torch.where(delta > 0, h, torch.zeros_like(h))
    return torch.stack([h, s, maxc], 1)


def _hsv_to_rgb(x: Tensor) -> Tensor:
    h, s, v = x.unbind(1)
    k = torch.stack([(5 + h * 6) % 6, (3 + h * 6) % 6, (1 + h * 6) % 6], 1)
    return v.unsqueeze(1) - v.unsqueeze(1) * s.unsqueeze(1) * torch.clamp(torch.minimum(k, 4 - k), 0, 1)


def _jitter(x: Tensor, cfg: AugmentConfig, gen: torch.Generator) -> Tensor:
    n, dev = x.shape[0], x.device
    bri, con, sat, hue = cfg.jitter
    apply = _coin(n, cfg.jitter_p, gen, dev).view(n, 1, 1, 1)
    shape = (n, 1, 1, 1)
    b = _uniform(n, max(0.0, 1 - bri), 1 + bri, gen, dev).view(shape)
    c = _uniform(n, max(0.0, 1 - con), 1 + con, gen, dev).view(shape)
    s = _uniform(n, max(0.0, 1 - sat), 1 + sat, gen, dev).view(shape)
    hshift = _uniform(n, -hue, hue, gen, dev)
    y = (x * b).clamp(0, 1)
    mean = _gray(y).mean(dim=(1, 2, 3), keepdim=True)
    y = ((y - mean) * c + mean).clamp(0, 1)
    if x.shape[1] == 3:
        gray = _gray(y)
        y = ((y - gray) * s + gray).clamp(0, 1)
        hsv = _rgb_to_hsv(y)
        hsv = torch.stack([(hsv[:, 0] + hshift.view(n, 1, 1)) % 1.0, hsv[:, 1], hsv[:, 2]], 1)
        y = _hsv_to_rgb(hsv).clamp(0, 1)
    return torch.where(apply, y, x)


def to_unit(x: Tensor) -> Tensor:
    """uint8 images -> float in [0, 1]; float input is assumed to be in [0, 1] already."""
    return x.float() / 255.0 if x.dtype == torch.uint8 else x.float()


def normalize(x: Tensor, cfg: AugmentConfig) -> Tensor:
    mean = torch.tensor(cfg.mean, device=x.device, dtype=x.dtype).view(1, -1, 1, 1)
    std = torch.tensor(cfg.std, device=x.device, dtype=x.dtype).view(1, -1, 1, 1)
    return (x - mean) / std


def augment(x: Tensor, cfg: AugmentConfig, gen: torch.Generator) -> Tensor:
    """One random view of every image in `x` (N, C, H, W), normalised."""
    y = _crop_flip(to_unit(x), cfg, gen)
    y = _jitter(y, cfg, gen)
    if y.shape[1] == 3:
        to_gray = _coin(y.shape[0], cfg.gray_p, gen, y.device).view(-1, 1, 1, 1)
        y = torch.where(to_gray, _gray(y).expand_as(y), y)
    return normalize(y, cfg)


def plain(x: Tensor, cfg: AugmentConfig) -> Tensor:
    """The evaluation transform: ToTensor + Normalize only."""
    return normalize(to_unit(x), cfg)
