"""The ZO-server stability probe (issue 28 item 8) runs Algorithm 1's zeroth-order server step."""

import math

import pytest

from fedrepro.algorithms.dpzv import stability


def _cfg(lr_server):
    return {
        "partition": {"clients": 2},
        "model": {"embed_dim": 4, "server_hidden": 8},
        "batch_size": 16,
        "lr": {"dpzv": {"server": lr_server, "client": 1e-4}},
    }


def test_probe_moves_the_head_by_zo_steps_only_when_its_step_is_nonzero():
    still = stability.probe("synthetic_multiview", _cfg(0.0), rounds=20, every=10, samples=64)
    moving = stability.probe("synthetic_multiview", _cfg(0.5), rounds=20, every=10, samples=64)
    assert [r["round"] for r in still] == [1, 10, 20]
    # lr 0: the ZO server leaves the head alone (up to the rounding of perturb-and-restore)
    assert still[-1]["head_norm"] == pytest.approx(still[0]["head_norm"], rel=1e-6)
    assert abs(moving[-1]["head_norm"] - moving[0]["head_norm"]) > 1e-3
    assert all(math.isfinite(r["train_loss"]) for r in moving)


def test_generated_text_and_views_keep_the_format():
    views = stability.generated("synthetic_multiview", 12, 8, 0)
    assert len(views.train) == 12 and tuple(views.train[0].shape[1:]) == (1, 16, 16)
    text = stability.generated("synthetic_text", 3, 8, 0)
    assert text.train[0].dtype.is_floating_point is False and text.num_classes == 2
