"""The `shapes` stand-in (fedrepro.data.shapes): classes, symmetry, nuisances, preparation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedrepro.data import shapes as gen
from fedrepro.data.arrays import load_prepared
from fedrepro.data.prepare import prepare_dataset, sample_shape

CLEAN = {"tint": 0.0, "gradient": 0.0, "noise": 0.0}  # one shape level, one background level per image


def grid(points: int = 101):
    """A grid exactly symmetric about u = 0 and v = 0 in the shape frame (mirrored values, not linspace's)."""
    half = np.linspace(0.0, 1.2, points // 2 + 1)
    axis = np.concatenate([-half[:0:-1], half])
    return np.meshgrid(axis, axis)


@pytest.mark.parametrize("label", range(len(gen.CLASS_NAMES)))
def test_every_shape_is_mirror_symmetric(label):
    """Horizontal flips (an augmentation of the training recipe) must not change the class."""
    u, v = grid()
    mask = gen.shape_mask(label, u, v)
    assert mask.any()
    np.testing.assert_array_equal(mask, mask[:, ::-1])


def test_shapes_are_distinct():
    u, v = grid()
    masks = [gen.shape_mask(label, u, v) for label in range(len(gen.CLASS_NAMES))]
    for a in range(len(masks)):
        for b in range(a + 1, len(masks)):
            assert (masks[a] != masks[b]).mean() > 0.05, (gen.CLASS_NAMES[a], gen.CLASS_NAMES[b])


def test_unknown_label_and_bad_options_fail():
    u, v = grid(5)
    with pytest.raises(ValueError, match="0..9"):
        gen.shape_mask(10, u, v)
    with pytest.raises(ValueError, match="size_range"):
        gen.shapes(train_per_class=1, test_per_class=1, size_range=(0.3, 0.6))
    with pytest.raises(ValueError, match="min_contrast"):
        gen.shapes(train_per_class=1, test_per_class=1, min_contrast=0.9)


def test_seeded_balanced_and_shaped():
    a = gen.shapes(train_per_class=3, test_per_class=2, size=12, seed=5)
    b = gen.shapes(train_per_class=3, test_per_class=2, size=12, seed=5)
    c = gen.shapes(train_per_class=3, test_per_class=2, size=12, seed=6)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    x_train, y_train, x_test, y_test = a
    assert x_train.shape == (30, 3, 12, 12) and x_train.dtype == np.uint8
    assert x_test.shape == (20, 3, 12, 12) and y_test.dtype == np.int64
    np.testing.assert_array_equal(np.bincount(y_train), [3] * 10)
    np.testing.assert_array_equal(np.bincount(y_test), [2] * 10)


def test_clean_images_hold_two_levels_apart_by_the_contrast():
    """Without tint, gradient and noise, and without anti-aliasing, an image is its shape's level on its
    background's level (the same in every channel), at least `min_contrast` apart."""
    x, y, _, _ = gen.shapes(train_per_class=5, test_per_class=1, supersample=1, min_contrast=0.3, **CLEAN)
    for image in x.astype(np.float64) / 255:
        assert np.array_equal(image[0], image[1]) and np.array_equal(image[0], image[2])
        levels = np.unique(image[0])
        assert len(levels) == 2
        assert levels[1] - levels[0] >= 0.3 - 1 / 255


def test_edges_are_anti_aliased():
    """Supersampling puts edge pixels between the two levels."""
    x, _, _, _ = gen.shapes(train_per_class=5, test_per_class=1, supersample=4, **CLEAN)
    assert all(len(np.unique(image[0])) > 2 for image in x)


def test_the_shape_lies_where_its_mask_says():
    """A clean disk: the pixels inside the drawn disk differ from the background, the corners do not."""
    rng = np.random.default_rng(0)
    image = gen.draw(rng, np.array([0]), 16, (0.45, 0.45), 0.3, 0.0, 0.0, 0.0, 1)[0, 0].astype(float)
    centre, corner = image[8, 8], image[0, 0]
    assert abs(centre - corner) >= 0.3 * 255 - 1
    assert image[0, 15] == image[15, 0] == image[15, 15] == corner


def test_pixel_noise_has_the_configured_sd():
    """The noise is the last draw: the same seed with and without noise differs by the noise alone."""
    labels = np.arange(100) % 10
    clean = gen.draw(np.random.default_rng(1), labels, 16, (0.22, 0.45), 0.25, 0.05, 0.3, 0.0, 4) / 255.0
    noisy = gen.draw(np.random.default_rng(1), labels, 16, (0.22, 0.45), 0.25, 0.05, 0.3, 0.08, 4) / 255.0
    unclipped = (clean > 0.35) & (clean < 0.65)
    assert (noisy - clean)[unclipped].std() == pytest.approx(0.08, rel=0.05)


def test_gradient_changes_the_background_across_the_image():
    rng = np.random.default_rng(2)
    flat = gen.draw(rng, np.zeros(50, dtype=np.int64), 16, (0.05, 0.05), 0.25, 0.0, 0.0, 0.0, 1)
    ramp = gen.draw(rng, np.zeros(50, dtype=np.int64), 16, (0.05, 0.05), 0.25, 0.0, 0.5, 0.0, 1)

    def spread(x):
        corners = x[:, 0, [0, 0, -1, -1], [0, -1, 0, -1]].astype(float)
        return (corners.max(1) - corners.min(1)).mean() / 255

    assert spread(flat) == 0.0
    assert spread(ramp) > 0.1


def test_prepared_like_any_data_set(tmp_path):
    options = {"train_per_class": 4, "test_per_class": 2, "size": 10}
    out = prepare_dataset("shapes", tmp_path / "shapes", tmp_path, options)
    prepared = load_prepared(out)
    assert prepared.x_train.shape == (40, *sample_shape("shapes", options)) == (40, 3, 10, 10)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["class_names"] == list(gen.CLASS_NAMES)
    assert meta["options"]["size"] == 10 and meta["provenance"]["source"].endswith("fedrepro.data.shapes")
    with pytest.raises(ValueError, match="unknown option"):
        prepare_dataset("shapes", tmp_path / "bad", tmp_path, {"n_train": 4})


def test_every_shape_lies_inside_the_image_over_many_draws():
    """Placement: over many seeded draws (every class, every size up to the largest allowed), the shape's box
    [centre - half, centre + half] lies inside the image, and the drawn shape loses no ink to the border:
    its coverage on the image equals its coverage drawn whole on a canvas three times the side (the same
    shape and sub-pixel position, shifted by a whole image side)."""
    for seed in range(12):
        rng = np.random.default_rng(seed)
        size = int(rng.integers(8, 25))
        size_range = (0.22, 0.5) if seed % 2 else (0.05, 0.3)
        labels = np.arange(300) % len(gen.CLASS_NAMES)
        half, centres = gen.placement(rng, len(labels), size, size_range)
        assert np.all(centres - half[:, None] >= 0.0) and np.all(centres + half[:, None] <= size)
        on_image = gen._coverage(labels, centres, half, size, 4).sum(axis=(1, 2))
        whole = gen._coverage(labels, centres + size, half, 3 * size, 4).sum(axis=(1, 2))
        np.testing.assert_allclose(on_image, whole, rtol=0, atol=1e-9)


def test_every_shape_stays_within_its_half_extent():
    """The masks stay inside the unit box of the shape frame (half-extent 1), which placement keeps inside
    the image."""
    u, v = grid(241)
    outside = np.maximum(np.abs(u), np.abs(v)) > 1.0
    for label in range(len(gen.CLASS_NAMES)):
        assert not gen.shape_mask(label, u, v)[outside].any(), gen.CLASS_NAMES[label]
