"""`shapes`: a generated image set on which self-supervised encoders beat an untrained one (FedSC stand-in).

Ten shapes that look the same when mirrored left-right, so that SimCLR-style crops and flips keep the
class (0 disk, 1 ring, 2 square, 3 square outline, 4 triangle, 5 diamond, 6 plus, 7 X, 8 horizontal
bars, 9 vertical bars). Each image draws its own nuisances:
* position: the shape's centre anywhere that keeps it inside the image; size: its half-extent a
  fraction `size_range` of the image side;
* grey levels: shape and background uniform in [0.1, 0.9], at least `min_contrast` apart, either
  brighter; a colour tint adds N(0, `tint`) per channel to both (small, so that colour says little:
  with fully random colours the encoders learn colour instead of shape);
* the background carries a linear gradient of random direction and strength up to `gradient`
  (change across the image);
* edges are anti-aliased (the shape is drawn at `supersample` x the resolution and averaged down);
* Gaussian pixel noise of sd `noise`, then clipped to [0, 1] and stored as uint8 (N x 3 x H x W).

Classes are balanced (`train_per_class` and `test_per_class` images each) and shuffled. numpy only; same seed, same arrays.
"""

from __future__ import annotations

import numpy as np

CLASS_NAMES = (
    "disk",
    "ring",
    "square",
    "square outline",
    "triangle",
    "diamond",
    "plus",
    "X",
    "horizontal bars",
    "vertical bars",
)


def _bars(along: np.ndarray, across: np.ndarray) -> np.ndarray:
    """Three bars across the `along` axis, at along = -0.75, 0, 0.75 (each 0.3 thick)."""
    inside = (np.abs(along) <= 1.0) & (np.abs(across) <= 0.95)
    return inside & ((np.abs(along) <= 0.15) | (np.abs(np.abs(along) - 0.75) <= 0.15))


def shape_mask(label: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Whether the points (u, v) (shape frame: half-extent 1, v pointing down) lie inside shape `label`."""
    box = np.maximum(np.abs(u), np.abs(v))
    radius = np.hypot(u, v)
    if label == 0:
        return radius <= 1.0
    if label == 1:
        return (radius <= 1.0) & (radius >= 0.55)
    if label == 2:
        return box <= 0.85
    if label == 3:
        return (box <= 0.9) & (box >= 0.5)
    if label == 4:  # apex up, base down: symmetric about the vertical axis
        return (v >= -0.95) & (v <= 0.85) & (np.abs(u) <= (v + 0.95) / 1.8)
    if label == 5:
        return np.abs(u) + np.abs(v) <= 1.0
    if label == 6:
        return ((np.abs(u) <= 0.3) & (np.abs(v) <= 1.0)) | ((np.abs(v) <= 0.3) & (np.abs(u) <= 1.0))
    if label == 7:
        near_diagonal = np.minimum(np.abs(u - v), np.abs(u + v)) / np.sqrt(2) <= 0.22
        return near_diagonal & (box <= 0.9)
    if label == 8:
        return _bars(v, u)
    if label == 9:
        return _bars(u, v)
    raise ValueError(f"shape label must lie in 0..{len(CLASS_NAMES) - 1}, got {label}")


def _coverage(labels, centres, half, size, supersample) -> np.ndarray:
    """Fraction of each pixel inside the image's shape (N x size x size), from a supersampled grid."""
    fine = (np.arange(size * supersample) + 0.5) / supersample  # pixel coordinates of the fine grid
    out = np.empty((len(labels), size, size))
    for i, label in enumerate(labels):
        u = (fine[None, :] - centres[i, 0]) / half[i]
        v = (fine[:, None] - centres[i, 1]) / half[i]
        mask = shape_mask(int(label), u, v).astype(np.float64)
        out[i] = mask.reshape(size, supersample, size, supersample).mean(axis=(1, 3))
    return out


def grey_levels(rng, n: int, min_contrast: float) -> tuple[np.ndarray, np.ndarray]:
    """Shape and background levels in [0.1, 0.9], |shape - background| >= min_contrast."""
    if not 0.0 <= min_contrast <= 0.8:
        raise ValueError(f"min_contrast must lie in [0, 0.8], got {min_contrast}")
    background = rng.uniform(0.1, 0.9, n)
    # the shape level is drawn from [0.1, 0.9] minus (background +- min_contrast)
    below = np.maximum(background - min_contrast - 0.1, 0.0)
    above = np.maximum(0.9 - background - min_contrast, 0.0)
    pick = rng.uniform(0.0, 1.0, n) * (below + above)
    shape = np.where(pick < below, 0.1 + pick, background + min_contrast + (pick - below))
    return shape, background


def placement(rng: np.random.Generator, n: int, size: int, size_range: tuple[float, float]):
    """Half-extents (N,) and centres (N x 2, pixels) of `n` shapes: the half-extent a fraction `size_range`
    of the side, the centre anywhere that keeps the shape's box [centre - half, centre + half] inside the
    image."""
    lo, hi = size_range
    if not 0.0 < lo <= hi <= 0.5:
        raise ValueError(f"size_range must satisfy 0 < low <= high <= 0.5 (fractions of the side), got {size_range}")
    half = rng.uniform(lo, hi, n) * size
    centres = half[:, None] + rng.uniform(0.0, 1.0, (n, 2)) * (size - 2 * half)[:, None]
    return half, centres


def draw(
    rng: np.random.Generator,
    labels: np.ndarray,
    size: int,
    size_range: tuple[float, float],
    min_contrast: float,
    tint: float,
    gradient: float,
    noise: float,
    supersample: int,
) -> np.ndarray:
    """uint8 images (N x 3 x size x size) of the shapes `labels`, nuisances drawn from `rng`."""
    n = len(labels)
    half, centres = placement(rng, n, size, size_range)
    cover = _coverage(labels, centres, half, size, supersample)[:, None]  # N x 1 x H x W
    shape_level, background_level = grey_levels(rng, n, min_contrast)
    shape_rgb = shape_level[:, None] + tint * rng.standard_normal((n, 3))
    background_rgb = background_level[:, None] + tint * rng.standard_normal((n, 3))
    angle = rng.uniform(0.0, 2 * np.pi, n)
    strength = rng.uniform(0.0, gradient, n)
    axis = (np.arange(size) + 0.5) / size - 0.5  # -0.5 .. 0.5 across the image
    ramp = strength[:, None, None] * (
        np.cos(angle)[:, None, None] * axis[None, None, :] + np.sin(angle)[:, None, None] * axis[None, :, None]
    )
    background = background_rgb[:, :, None, None] + ramp[:, None]
    image = cover * shape_rgb[:, :, None, None] + (1.0 - cover) * background
    image = image + noise * rng.standard_normal(image.shape)
    return np.round(255.0 * np.clip(image, 0.0, 1.0)).astype(np.uint8)


def shapes(
    train_per_class: int = 200,
    test_per_class: int = 100,
    size: int = 16,
    size_range: tuple[float, float] = (0.22, 0.45),
    min_contrast: float = 0.25,
    tint: float = 0.05,
    gradient: float = 0.3,
    noise: float = 0.08,
    supersample: int = 4,
    seed: int = 0,
):
    """x uint8 N x 3 x size x size, y int64: `train_per_class` / `test_per_class` images per class, shuffled."""
    if size < 4 or supersample < 1:
        raise ValueError(f"size must be >= 4 and supersample >= 1, got size={size}, supersample={supersample}")
    rng = np.random.default_rng(seed)
    nuisances = (tuple(size_range), min_contrast, tint, gradient, noise, supersample)
    return balanced_draws(
        rng, (train_per_class, test_per_class), len(CLASS_NAMES), lambda y: draw(rng, y, size, *nuisances)
    )


def balanced_draws(rng, per_class_counts, classes: int, draw_images) -> tuple:
    """(x, y) for each count of images per class: the labels balanced and shuffled by `rng`, then the
    images drawn for them (`draw_images(y)`), in that order, so that a seed gives the same set."""
    out = []
    for per_class in per_class_counts:
        y = rng.permutation(np.arange(per_class * classes) % classes).astype(np.int64)
        out += [draw_images(y), y]
    return tuple(out)
