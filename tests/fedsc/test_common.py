"""The shared pieces of the FedSC methods against independent references: colour jitter, local SGD's
weight decay, client weights, clients per round and the defaults of a spec without them."""

import os

import numpy as np
import pytest
import torch

from fedrepro.algorithms.fedsc.augment import AugmentConfig, _jitter
from fedrepro.algorithms.fedsc.base import TrainConfig, local_sgd, uniform_or_size_weights
from fedrepro.algorithms.fedsc.fedsc import FedSC
from fedrepro.algorithms.fedsc.participation import clients_per_round
from tests.fedsc.helpers import tiny_spec


def _jitter_draws(n: int, seed: int) -> np.ndarray:
    """The five uniform draws of `_jitter` per image, in its order: apply, brightness, contrast, saturation, hue."""
    gen = torch.Generator().manual_seed(seed)
    return np.stack([torch.rand(n, generator=gen).double().numpy() for _ in range(5)])


def test_brightness_factor_is_uniform_on_one_minus_b_to_one_plus_b():
    """ColorJitter(brightness=0.5) always applied to a grey 0.5 image: pixel = 0.5 * U(0.5, 1.5)."""
    n = 400
    x = torch.full((n, 1, 2, 2), 0.5)
    cfg = AugmentConfig(jitter=(0.5, 0.0, 0.0, 0.0), jitter_p=1.0)
    out = _jitter(x, cfg, torch.Generator().manual_seed(3)).double().numpy()
    factor = 0.5 + 1.0 * _jitter_draws(n, 3)[1]
    np.testing.assert_allclose(out[:, 0, 0, 0], 0.5 * factor, atol=1e-6)
    assert out.min() < 0.5 * 0.55 and out.max() > 0.5 * 1.45  # darker and brighter images both occur


def test_saturation_blends_each_pixel_with_its_grey_value():
    """Saturation s ~ U(0.5, 1.5): y = clamp(gray + s (x - gray)), gray = 0.299 r + 0.587 g + 0.114 b; no hue shift."""
    n = 64
    gen = torch.Generator().manual_seed(5)
    x = 0.25 + 0.5 * torch.rand(n, 3, 3, 3, generator=gen)
    cfg = AugmentConfig(jitter=(0.0, 0.0, 0.5, 0.0), jitter_p=1.0)
    out = _jitter(x, cfg, torch.Generator().manual_seed(7)).double().numpy()
    s = (0.5 + _jitter_draws(n, 7)[3]).reshape(n, 1, 1, 1)
    xd = x.double().numpy()
    gray = (0.299 * xd[:, 0] + 0.587 * xd[:, 1] + 0.114 * xd[:, 2])[:, None]
    np.testing.assert_allclose(out, np.clip(gray + s * (xd - gray), 0, 1), atol=1e-5)


def test_local_sgd_applies_weight_decay():
    """A loss with zero gradient: one SGD step only decays, w <- w (1 - lr wd) (momentum starts at the gradient)."""
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    before = [p.detach().clone().double() for p in net.parameters()]
    cfg = TrainConfig(rounds=1, local_epochs=1, batch_size=8, momentum=0.9, weight_decay=0.1, grad_clip=None)
    x = torch.randn(8, 3)
    local_sgd(net, x, lambda batch: 0.0 * net(batch).sum(), cfg, lr=0.5, gen=torch.Generator().manual_seed(0))
    for p, p0 in zip(net.parameters(), before):
        np.testing.assert_allclose(p.detach().double().numpy(), (p0 * (1 - 0.5 * 0.1)).numpy(), rtol=1e-6)


def test_client_weights_uniform_or_proportional_to_size():
    assert uniform_or_size_weights([1, 3, 4], "uniform") == pytest.approx([1 / 3] * 3)
    assert uniform_or_size_weights([1, 3, 4], "size") == pytest.approx([1 / 8, 3 / 8, 4 / 8])
    with pytest.raises(ValueError, match="uniform, size"):
        uniform_or_size_weights([1, 2], "equal")


@pytest.mark.parametrize(
    "clients, participation, expected",
    [
        (10, "full", 10),
        (10, 0.2, 2),
        (10, 0.1, 2),
        (20, 0.2, 4),
        (5, 0.2, 2),
        (1, 0.5, 1),
        (10, 3, 3),
        (4, 9, 4),
        (10, 0.35, 3),
        (10, 0.39, 3),
    ],
)
def test_clients_per_round_is_max_of_p_j_and_two(clients, participation, expected):
    """The code's partial rule max(int(p J), 2), never more than J; int truncates (0.39 x 10 gives 3, not 4)."""
    assert clients_per_round(clients, participation) == expected


def test_spec_without_train_or_participation_uses_the_defaults(tiny_digits):
    spec = tiny_spec()
    del spec["train"], spec["participation"]
    algo = FedSC(spec, tiny_digits, seed=0)
    assert algo.per_round == 5  # full participation
    assert algo.train_cfg == TrainConfig(rounds=3)  # the official configs' optimiser settings


def test_leave_one_out_is_the_reweighted_mean_of_the_others_and_needs_q_j_below_one():
    from fedrepro.algorithms.fedsc.loss import leave_one_out

    mats = [torch.full((2, 2), float(v)) for v in (1.0, 2.0, 4.0)]
    q = [0.5, 0.25, 0.25]
    np.testing.assert_allclose(leave_one_out(mats, q, 0).numpy(), np.full((2, 2), (0.25 * 2 + 0.25 * 4) / 0.5))
    with pytest.raises(ValueError, match="q_j < 1"):
        leave_one_out(mats[:2], [1.0, 0.0], 0)  # R_-j undefined: (1 - q_j) = 0
    with pytest.raises(ValueError, match="at least two"):
        leave_one_out(mats[:1], [1.0], 0)


def test_fedu_threshold_defaults_and_fedema_fedsc_code_needs_a_fixed_lambda(tiny_digits):
    from fedrepro.algorithms.fedsc.byol import FedEMA, FedU

    assert FedU(tiny_spec(fedu={"rule": "dapu"}), tiny_digits, seed=0).threshold == 0.4  # FedU paper
    assert FedU(tiny_spec(fedu={"rule": "keep_or_replace"}), tiny_digits, seed=0).threshold == 0.2  # FedSC code
    with pytest.raises(ValueError, match="fixed fedema.lambda"):
        FedEMA(tiny_spec(fedema={"convention": "fedsc_code"}), tiny_digits, seed=0)


def test_divergence_summary_names_min_mean_max_of_every_download(tiny_digits):
    from fedrepro.algorithms.fedsc.byol import FedU

    algo = FedU(tiny_spec(), tiny_digits, seed=0)
    algo.divergences = [[1, 0, 0.5, 1.0], [2, 3, 1.5, 0.0], [2, 4, 1.0, 1.0]]
    assert algo.divergence_summary() == {
        "downloads": 3,
        "divergence_min": 0.5,
        "divergence_mean": 1.0,
        "divergence_max": 1.5,
        "fedu_global_min": 0.0,
        "fedu_global_mean": pytest.approx(2 / 3),
        "fedu_global_max": 1.0,
        "log": algo.divergences,
    }


def test_param_distance_does_not_depend_on_the_hash_seed():
    """FedU/FedEMA's divergence sums per-parameter terms in one fixed order: the same bits in every process."""
    import subprocess
    import sys

    script = (
        "import torch\n"
        "from fedrepro.algorithms.fedsc.byol import param_distance\n"
        "g = torch.Generator().manual_seed(0)\n"
        "a = {f'backbone.l{i}.weight': torch.randn(50, generator=g) for i in range(40)}\n"
        "b = {k: v + 10.0 ** -torch.randint(1, 6, (1,), generator=g).item() * torch.randn(50, generator=g)\n"
        "     for k, v in a.items()}\n"
        "print(repr(param_distance(a, b, ('backbone.',), set(a))))\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("0", "1")
    }
    assert len(outputs) == 1
