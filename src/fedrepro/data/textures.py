"""`textures`: a generated image set of periodic and random textures (FedSC's second stand-in).

A different kind of data from `shapes` (fedrepro.data.shapes): the class is a texture that fills the
whole image (no object, no position, no outline). Ten textures whose distribution is the same when
mirrored left-right, so that SimCLR-style crops and flips keep the class (0 horizontal stripes, 1 vertical
stripes, 2 checkerboard, 3 dots, 4 grid, 5 diagonal cross-hatch, 6 blobs, 7 speckle, 8 waves, 9 bricks).
Each image draws its own nuisances:
* period: `period_range` pixels (one cycle of the pattern), random phase in both directions (over two
  periods: waves and bricks repeat every two) and a rotation of up to `max_angle` degrees either way;
* colours: an ink and a background level uniform in [0.1, 0.9], at least `min_contrast` apart (either
  brighter), each moved by N(0, `colour`) per channel (a tint of its own per image);
* edges are anti-aliased (drawn at `supersample` x the resolution and averaged down), then Gaussian
  pixel noise of sd `noise`, clipped to [0, 1] and stored as uint8 (N x 3 x H x W).
Blobs are a smooth random field (a coarse Gaussian grid upsampled) above its median; speckle is a
random binary field of cells a third of the period.

The defaults make federated self-supervision beat the untrained encoder at the stand-in's budget (one
texture per client over 10 clients, 20 rounds x 5 local epochs, seed 0, FedAvg+SC against the untrained
encoder only): colour 0.05 gives 28.0 % against 23.7 %; strong colours (0.15) 16.7 % against 20.2 %
(the local encoders learn each image's colours), and 20x20 images 24.8 % against 28.3 %. Centralized SC
beats the untrained encoder either way (about 90 % against 20-25 %).

Classes are balanced (`train_per_class` and `test_per_class` images each) and shuffled. numpy only;
same seed, same arrays.
"""

from __future__ import annotations

import numpy as np

from fedrepro.data.shapes import balanced_draws, grey_levels

CLASS_NAMES = (
    "horizontal stripes",
    "vertical stripes",
    "checkerboard",
    "dots",
    "grid",
    "cross-hatch",
    "blobs",
    "speckle",
    "waves",
    "bricks",
)
RANDOM_FIELDS = (6, 7)  # textures drawn from a random field rather than a periodic formula


def _frac(t: np.ndarray) -> np.ndarray:
    return t - np.floor(t)


def periodic_mask(label: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Whether the points (u, v) (texture frame: one period = 1, v pointing down) lie on texture `label`'s ink."""
    fu, fv = _frac(u), _frac(v)
    if label == 0:
        return fv < 0.5
    if label == 1:
        return fu < 0.5
    if label == 2:
        return (fu < 0.5) ^ (fv < 0.5)
    if label == 3:
        return np.hypot(fu - 0.5, fv - 0.5) <= 0.3
    if label == 4:
        return (fu < 0.25) | (fv < 0.25)
    if label == 5:  # lines centred on the half periods, so that mirroring swaps the two families
        return (np.abs(_frac((u + v) / 2**0.5) - 0.5) < 0.125) | (np.abs(_frac((u - v) / 2**0.5) - 0.5) < 0.125)
    if label == 8:
        return _frac(v + 0.3 * np.sin(np.pi * u)) < 0.5
    if label == 9:  # mortar lines between courses, joints half a brick apart from one course to the next
        course = np.floor(v)
        return (fv < 0.25) | (_frac(u / 2 + course / 2) < 0.125)
    raise ValueError(f"periodic texture label must be one of 0-5, 8, 9, got {label}")


def _random_field(rng, label: int, size: int, supersample: int, period: float) -> np.ndarray:
    """A random binary field on the fine grid (size * supersample per side), about half of it ink."""
    fine = size * supersample
    if label == 6:  # blobs: a Gaussian grid one value per period, bilinearly upsampled
        cells = int(np.ceil(size / period)) + 2
        coarse = rng.standard_normal((cells, cells))
        axis = (np.arange(fine) + 0.5) / supersample / period + rng.uniform(0.0, 1.0, 2)[:, None]
        i0 = np.floor(axis).astype(int)
        w = axis - i0
        rows = coarse[i0[0]] * (1 - w[0])[:, None] + coarse[i0[0] + 1] * w[0][:, None]
        field = rows[:, i0[1]] * (1 - w[1]) + rows[:, i0[1] + 1] * w[1]
        return field > np.median(field)
    if label == 7:  # speckle: random cells of side period / 3 pixels
        cell = max(1, int(round(period / 3 * supersample)))
        coarse = rng.uniform(0.0, 1.0, (-(-fine // cell),) * 2) < 0.5
        return np.repeat(np.repeat(coarse, cell, 0), cell, 1)[:fine, :fine]
    raise ValueError(f"random texture label must be one of {RANDOM_FIELDS}, got {label}")


def _coverage(rng, labels, periods, angles, size, supersample) -> np.ndarray:
    """Fraction of each pixel on the texture's ink (N x size x size), from a supersampled grid."""
    fine = (np.arange(size * supersample) + 0.5) / supersample  # pixel coordinates of the fine grid
    x, y = fine[None, :], fine[:, None]
    out = np.empty((len(labels), size, size))
    for i, label in enumerate(labels):
        phase = rng.uniform(0.0, 2.0, 2)  # two periods: waves and bricks repeat every two
        if int(label) in RANDOM_FIELDS:
            mask = _random_field(rng, int(label), size, supersample, periods[i])
        else:
            cos, sin = np.cos(angles[i]), np.sin(angles[i])
            u = (cos * x + sin * y) / periods[i] + phase[0]
            v = (-sin * x + cos * y) / periods[i] + phase[1]
            mask = periodic_mask(int(label), u, v)
        out[i] = mask.astype(np.float64).reshape(size, supersample, size, supersample).mean(axis=(1, 3))
    return out


def draw(
    rng: np.random.Generator,
    labels: np.ndarray,
    size: int,
    period_range: tuple[float, float],
    max_angle: float,
    min_contrast: float,
    colour: float,
    noise: float,
    supersample: int,
) -> np.ndarray:
    """uint8 images (N x 3 x size x size) of the textures `labels`, nuisances drawn from `rng`."""
    n = len(labels)
    lo, hi = period_range
    if not 2.0 <= lo <= hi <= size:
        raise ValueError(f"period_range must satisfy 2 <= low <= high <= size (pixels), got {period_range}")
    if not 0.0 <= max_angle <= 45.0:
        raise ValueError(f"max_angle must lie in [0, 45] degrees, got {max_angle}")
    periods = rng.uniform(lo, hi, n)
    angles = np.deg2rad(rng.uniform(-max_angle, max_angle, n))
    cover = _coverage(rng, labels, periods, angles, size, supersample)[:, None]  # N x 1 x H x W
    ink, background = grey_levels(rng, n, min_contrast)
    ink_rgb = ink[:, None] + colour * rng.standard_normal((n, 3))
    background_rgb = background[:, None] + colour * rng.standard_normal((n, 3))
    image = cover * ink_rgb[:, :, None, None] + (1.0 - cover) * background_rgb[:, :, None, None]
    image = image + noise * rng.standard_normal(image.shape)
    return np.round(255.0 * np.clip(image, 0.0, 1.0)).astype(np.uint8)


def textures(
    train_per_class: int = 200,
    test_per_class: int = 100,
    size: int = 16,
    period_range: tuple[float, float] = (4.0, 8.0),
    max_angle: float = 10.0,
    min_contrast: float = 0.25,
    colour: float = 0.05,
    noise: float = 0.05,
    supersample: int = 4,
    seed: int = 0,
):
    """x uint8 N x 3 x size x size, y int64: `train_per_class` / `test_per_class` images per class, shuffled."""
    if size < 8 or supersample < 1:
        raise ValueError(f"size must be >= 8 and supersample >= 1, got size={size}, supersample={supersample}")
    rng = np.random.default_rng(seed)
    nuisances = (tuple(period_range), max_angle, min_contrast, colour, noise, supersample)
    return balanced_draws(
        rng, (train_per_class, test_per_class), len(CLASS_NAMES), lambda y: draw(rng, y, size, *nuisances)
    )
