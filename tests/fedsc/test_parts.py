"""Fixup ResNet-20, augmentations, hand-written optimisers, kNN monitor and linear probe."""

import math

import pytest
import torch

from fedrepro.algorithms.fedsc.augment import AugmentConfig, augment, plain
from fedrepro.eval.knn import knn_accuracy, knn_predict
from fedrepro.eval.probe import linear_probe
from fedrepro.fl.optim import SGD, Adam
from fedrepro.models import build_model


def test_fixup_resnet20_shapes_init_and_no_batchnorm():
    torch.manual_seed(0)
    net = build_model("fixup_resnet20", in_channels=3, num_classes=0, widen_factor=2)
    assert net.feature_dim == 128
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in net.modules())
    blocks = [m for m in net.modules() if m.__class__.__name__ == "FixupBasicBlock"]
    assert len(blocks) == 9
    assert all(float(b.conv2.weight.detach().abs().sum()) == 0 for b in blocks)  # residual branches start at zero
    std = float(blocks[0].conv1.weight.detach().std())
    assert std == pytest.approx(math.sqrt(2 / (32 * 9)) / 3, rel=0.1)  # He init * L^-1/2, L = 9
    out = net(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 128)
    head = build_model("fixup_resnet20", num_classes=10, widen_factor=1)
    assert head(torch.randn(1, 3, 32, 32)).abs().sum() == 0  # zero-initialised classifier
    assert build_model("fixup_resnet20", widen_factor=1).feature_dim == 64  # 64 w (the paper's w = 8: 512)


def test_augment_seeded_batched_and_identity():
    x = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8)
    cfg = AugmentConfig(mean=(0.5,) * 3, std=(0.25,) * 3)
    a = augment(x, cfg, torch.Generator().manual_seed(1))
    b = augment(x, cfg, torch.Generator().manual_seed(1))
    c = augment(x, cfg, torch.Generator().manual_seed(2))
    assert a.shape == (6, 3, 16, 16) and torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.allclose(a[0], a[1])
    ident = AugmentConfig(
        crop_scale=(1, 1), crop_ratio=(1, 1), jitter_p=0, flip_p=0, gray_p=0, mean=(0.5,) * 3, std=(0.25,) * 3
    )
    assert torch.allclose(augment(x, ident, torch.Generator()), plain(x, ident), atol=1e-5)
    flip = AugmentConfig(
        crop_scale=(1, 1), crop_ratio=(1, 1), jitter_p=0, flip_p=1, gray_p=0, mean=(0.5,) * 3, std=(0.25,) * 3
    )
    assert torch.allclose(augment(x, flip, torch.Generator()), plain(x, ident).flip(-1), atol=1e-5)
    gray = AugmentConfig(
        crop_scale=(1, 1), crop_ratio=(1, 1), jitter_p=0, flip_p=0, gray_p=1, mean=(0,) * 3, std=(1,) * 3
    )
    g = augment(x, gray, torch.Generator())
    assert torch.allclose(g[:, 0], g[:, 1]) and torch.allclose(g[:, 1], g[:, 2])
    with pytest.raises(KeyError, match="allowed"):
        AugmentConfig.from_spec({"crop": 1}, (0.5,), (0.5,))


def test_hue_roundtrip():
    from fedrepro.algorithms.fedsc.augment import _hsv_to_rgb, _rgb_to_hsv

    x = torch.rand(4, 3, 5, 5)
    assert torch.allclose(_hsv_to_rgb(_rgb_to_hsv(x)), x, atol=1e-5)


@pytest.mark.parametrize(
    "ours, theirs, kwargs",
    [
        (SGD, torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4}),
        (Adam, torch.optim.Adam, {"lr": 3e-3}),
    ],
)
def test_optimisers_match_torch(ours, theirs, kwargs):
    torch.manual_seed(0)
    a = torch.nn.Linear(4, 3)
    b = torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    oa, ob = ours(a.parameters(), **kwargs), theirs(b.parameters(), **kwargs)
    for _ in range(5):
        x = torch.randn(8, 4)
        for model, opt in ((a, oa), (b, ob)):
            opt.zero_grad()
            (model(x) ** 2).mean().backward()
            opt.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.allclose(pa, pb, atol=1e-6)


def test_knn_weighted_vote():
    bank = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    labels = torch.tensor([0, 0, 1])
    pred = knn_predict(torch.tensor([[1.0, 0.05], [0.1, 1.0]]), bank, labels, 2, k=3, temperature=0.1)
    assert pred.tolist() == [0, 1]
    # k = 1 with one close neighbour of class 1 beats two farther ones of class 0
    pred = knn_predict(torch.tensor([[0.0, 1.0]]), bank, labels, 2, k=1)
    assert pred.tolist() == [1]
    assert knn_accuracy(bank, labels, bank, labels, 2, k=1) == 1.0


def test_linear_probe_learns_separable_features():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (300,), generator=g)
    f = torch.nn.functional.one_hot(y, 3).float() * 3 + 0.3 * torch.randn(300, 3, generator=g)
    out = linear_probe(f[:200], y[:200], f[200:], y[200:], 3, epochs=30, batch_size=64, seed=0)
    assert out["final_acc"] > 0.95 and len(out["curve"]) == 30
    again = linear_probe(f[:200], y[:200], f[200:], y[200:], 3, epochs=30, batch_size=64, seed=0)
    assert again["curve"] == out["curve"]


def test_projector_and_predictor_sizes_of_the_paper():
    """512-1024-512 heads; the predictor has 1,050,112 parameters and H x H = 262,144 (Section 5.3)."""
    from fedrepro.algorithms.fedsc.base import SSLNet

    backbone = torch.nn.Identity()
    backbone.feature_dim = 512
    net = SSLNet(backbone, 1024, 512, predictor=True)
    assert sum(p.numel() for p in net.predictor.parameters()) == 1_050_112
    assert net(torch.randn(3, 512)).shape == (3, 512)
