"""The `textures` stand-in (fedrepro.data.textures): classes, symmetry, nuisances, preparation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedrepro.data import textures as gen
from fedrepro.data.arrays import load_prepared
from fedrepro.data.prepare import prepare_dataset, sample_shape

PERIODIC = [label for label in range(len(gen.CLASS_NAMES)) if label not in gen.RANDOM_FIELDS]


def grid(points: int = 201, extent: float = 4.0):
    """Points over several periods, off the textures' edges (an offset no edge formula hits exactly)."""
    axis = np.linspace(-extent, extent, points) + 0.0123
    return np.meshgrid(axis, axis)


@pytest.mark.parametrize("label", PERIODIC)
def test_every_periodic_texture_mirrored_is_the_same_texture_shifted(label):
    """Horizontal flips (an augmentation of the training recipe) must not change the class: the mirrored
    texture is the texture at another phase (a shift of 0 to 2 periods, the generator's phase range), up to
    points on an edge."""
    u, v = grid()
    mirrored = gen.periodic_mask(label, -u, v)
    shifts = [(du, dv) for du in np.arange(0, 2, 0.125) for dv in np.arange(0, 2, 0.125)]
    assert min((mirrored != gen.periodic_mask(label, u + du, v + dv)).mean() for du, dv in shifts) < 0.01


def test_textures_are_distinct_at_every_phase():
    u, v = grid(101, 2.0)
    masks = {label: gen.periodic_mask(label, u, v) for label in PERIODIC}
    for a in PERIODIC:
        for b in PERIODIC:
            if a < b:
                shifted = [gen.periodic_mask(b, u + d, v + e) for d in np.arange(0, 2, 0.25) for e in np.arange(0, 2, 0.25)]
                assert min((masks[a] != m).mean() for m in shifted) > 0.05, (gen.CLASS_NAMES[a], gen.CLASS_NAMES[b])


def test_random_fields_are_about_half_ink_and_mirror_symmetric_in_distribution():
    rng = np.random.default_rng(0)
    for label in gen.RANDOM_FIELDS:
        fields = np.stack([gen._random_field(rng, label, 16, 4, 6.0) for _ in range(2000)]).astype(float)
        assert fields.mean() == pytest.approx(0.5, abs=0.01)
        # left and right halves carry the same ink on average (within 4 standard errors)
        gap = fields[:, :, :32].mean((1, 2)) - fields[:, :, 32:].mean((1, 2))
        assert abs(gap.mean()) < 4 * gap.std() / np.sqrt(len(gap))


def test_unknown_label_and_bad_options_fail():
    u, v = grid(5)
    with pytest.raises(ValueError, match="periodic texture"):
        gen.periodic_mask(6, u, v)
    with pytest.raises(ValueError, match="period_range"):
        gen.textures(train_per_class=1, test_per_class=1, period_range=(1.0, 4.0))
    with pytest.raises(ValueError, match="max_angle"):
        gen.textures(train_per_class=1, test_per_class=1, max_angle=60.0)
    with pytest.raises(ValueError, match="min_contrast"):
        gen.textures(train_per_class=1, test_per_class=1, min_contrast=0.9)


def test_seeded_balanced_tinted_and_shaped():
    a = gen.textures(train_per_class=3, test_per_class=2, size=12, period_range=(3.0, 6.0), seed=5)
    b = gen.textures(train_per_class=3, test_per_class=2, size=12, period_range=(3.0, 6.0), seed=5)
    c = gen.textures(train_per_class=3, test_per_class=2, size=12, period_range=(3.0, 6.0), seed=6)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    x_train, y_train, x_test, y_test = a
    assert x_train.shape == (30, 3, 12, 12) and x_train.dtype == np.uint8
    assert x_test.shape == (20, 3, 12, 12) and y_test.dtype == np.int64
    np.testing.assert_array_equal(np.bincount(y_train), [3] * 10)
    np.testing.assert_array_equal(np.bincount(y_test), [2] * 10)
    assert not all(np.array_equal(image[0], image[1]) for image in x_train)  # tinted, not grey


def test_clean_images_are_ink_on_background_apart_by_the_contrast():
    """Without colour, noise and anti-aliasing an image holds two grey levels, at least `min_contrast` apart,
    and every texture covers part of the image, never all of it."""
    x, y, _, _ = gen.textures(train_per_class=5, test_per_class=1, supersample=1, colour=0.0, noise=0.0, min_contrast=0.3)
    for image in x.astype(np.float64) / 255:
        assert np.array_equal(image[0], image[1]) and np.array_equal(image[0], image[2])
        levels = np.unique(image[0])
        assert len(levels) == 2 and levels[1] - levels[0] >= 0.3 - 1 / 255


def test_period_sets_the_scale_of_the_stripes():
    """Horizontal stripes of period p change level every p / 2 rows (no rotation, no anti-aliasing)."""
    rng = np.random.default_rng(3)
    image = gen.draw(rng, np.array([0]), 16, (8.0, 8.0), 0.0, 0.3, 0.0, 0.0, 1)[0, 0].astype(float)
    assert all(len(np.unique(row)) == 1 for row in image)  # constant along each row
    changes = np.flatnonzero(np.diff(image[:, 0]) != 0)
    assert np.all(np.diff(changes) == 4)


def test_prepared_like_any_data_set(tmp_path):
    options = {"train_per_class": 4, "test_per_class": 2, "size": 10, "period_range": [3.0, 5.0]}
    out = prepare_dataset("textures", tmp_path / "textures", tmp_path, options)
    prepared = load_prepared(out)
    assert prepared.x_train.shape == (40, *sample_shape("textures", options)) == (40, 3, 10, 10)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["class_names"] == list(gen.CLASS_NAMES)
    assert meta["options"]["size"] == 10 and meta["provenance"]["source"].endswith("fedrepro.data.textures")
