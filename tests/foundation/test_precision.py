"""Mixed precision and channels-last (fedrepro.fl.precision): where they apply, and where not."""

import numpy as np
import pytest
import torch

from fedrepro.algorithms.fedavg.fedavg import FedAvg
from fedrepro.data.tensors import TensorData
from fedrepro.experiments import fedavg as fedavg_plan
from fedrepro.experiments import training_options
from fedrepro.fl import seeding
from fedrepro.fl.precision import Precision
from fedrepro.models import build_model
from tests.foundation.conftest import FEDAVG_SPEC

CNN = {"in_channels": 1, "num_classes": 10, "width": 4, "feature_dim": 16, "image_size": 8}


def linear_input_dtypes(model):
    """Records the dtype every Linear layer computes in during a forward pass."""
    seen = []
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, args, out: seen.append(out.dtype))
    return seen


def test_unknown_precision_is_an_error_naming_the_key_and_the_allowed_values():
    with pytest.raises(ValueError, match=r"config key 'precision': 'fp16' is not allowed \(allowed: fp32, bf16\)"):
        Precision.from_spec({"precision": "fp16"})


def test_bf16_computes_the_network_in_bf16_but_hands_back_fp32():
    model = build_model("small_cnn", **CNN)
    seen = linear_input_dtypes(model)
    x = torch.randn(5, 1, 8, 8)
    out = Precision("bf16").forward(model, x)
    assert set(seen) == {torch.bfloat16} and out.dtype == torch.float32
    seen.clear()
    exact = Precision().forward(model, x)
    assert set(seen) == {torch.float32}
    assert not torch.equal(out, exact) and torch.allclose(out, exact, atol=0.05, rtol=0.05)


def test_channels_last_changes_the_layout_not_the_result():
    model = build_model("small_cnn", **CNN)
    x = torch.randn(5, 1, 8, 8)
    expected = model(x)
    nhwc = Precision(channels_last=True)
    conv = nhwc.prepare(model).features[2].weight  # 4 input channels: the layouts differ
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    torch.testing.assert_close(nhwc.forward(model, x), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("batched", [True, False])
def test_fedavg_trains_in_bf16_close_to_fp32(blobs, clients, batched):
    results = {}
    for name in ("fp32", "bf16"):
        seeding.seed_everything(0)
        algo = FedAvg({**FEDAVG_SPEC, "batched": batched, "precision": name}, blobs, clients, 0, torch.device("cpu"))
        algo.round(1)
        results[name] = algo.model.head.weight.detach().clone()
    assert not torch.equal(results["bf16"], results["fp32"]), "bf16 was not applied"
    torch.testing.assert_close(results["bf16"], results["fp32"], atol=0.02, rtol=0.05)


def test_only_non_default_options_reach_a_job_spec():
    """Adding the keys must not change (and so re-run) jobs that keep the papers' fp32."""
    config = {"precision": "fp32", "channels_last": False}
    assert training_options(config) == {} and training_options({}) == {}
    assert training_options({"precision": "bf16", "channels_last": False}) == {"precision": "bf16"}
    section = {
        "dataset": "digits",
        "partition": {"num_clients": 4, "alphas": [1.0], "seed": 0},
        "methods": {"fedavg": {"lr": 0.1}},
    }
    default_spec = fedavg_plan.runs({"fedavg": section})[0].spec
    assert "precision" not in default_spec
    assert fedavg_plan.runs({"fedavg": section, "precision": "bf16"})[0].spec["precision"] == "bf16"


def test_channels_last_fedavg_matches_nchw_in_both_paths():
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16, dtype=torch.float32).reshape(-1, 1, 8, 8)
    data = TensorData(x[:400], torch.tensor(y[:400]), x[400:500], torch.tensor(y[400:500]), 10)
    clients = [np.arange(i, 400, 4) for i in range(4)]
    spec = {**FEDAVG_SPEC, "model": "small_cnn", "model_options": CNN, "participation": 1.0}
    heads = {}
    for batched in (True, False):
        for channels_last in (False, True):
            seeding.seed_everything(0)
            algo = FedAvg(
                {**spec, "batched": batched, "channels_last": channels_last}, data, clients, 0, torch.device("cpu")
            )
            algo.round(1)
            heads[batched, channels_last] = algo.model.head.weight.detach()
    for key, head in heads.items():
        torch.testing.assert_close(head, heads[False, False], rtol=1e-5, atol=1e-6, msg=str(key))
