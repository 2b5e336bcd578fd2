"""`compile: true` (fedrepro.fl.precision): FedSC and FedAvg training forwards under torch.compile give
the eager numbers within float tolerance, compile once per architecture, and leave job specs alone.

The fast tests compile with the "aot_eager" backend (dynamo's traced forward and AOTAutograd's backward
graph, run eagerly): the path `compile: true` takes, without C++ code generation. The inductor test
(the backend jobs use) generates and compiles C++ kernels, about 20 s warm and minutes cold on the
2-core development machine: it runs with FEDREPRO_INDUCTOR_TESTS=1.
"""

import os
import shutil

import numpy as np
import pytest
import torch

from fedrepro.algorithms.fedavg.fedavg import FedAvg
from fedrepro.algorithms.fedsc.fedsc import FedSC
from fedrepro.data.tensors import TensorData
from fedrepro.experiments import fedavg as fedavg_plan
from fedrepro.experiments import training_options
from fedrepro.fl import precision, seeding
from fedrepro.fl.precision import Precision
from tests.fedsc.conftest import tiny_digits  # noqa: F401 (fixture)
from tests.fedsc.helpers import tiny_spec
from tests.foundation.conftest import FEDAVG_SPEC

CNN = {"in_channels": 1, "num_classes": 10, "width": 4, "feature_dim": 16, "image_size": 8}


@pytest.fixture
def backend(monkeypatch):
    import torch._dynamo

    monkeypatch.setattr(precision, "COMPILE_BACKEND", "aot_eager")
    precision.compiled.cache_clear()
    torch._dynamo.reset()  # graphs of earlier tests would otherwise serve this one
    yield "aot_eager"
    precision.compiled.cache_clear()


def digits() -> tuple[TensorData, list[np.ndarray]]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16, dtype=torch.float32).reshape(-1, 1, 8, 8)
    data = TensorData(x[:200], torch.tensor(y[:200]), x[200:260], torch.tensor(y[200:260]), 10)
    return data, [np.arange(i, 200, 4) for i in range(4)]


def fedavg_params(compile_on: bool, batched: bool, **options) -> dict[str, torch.Tensor]:
    data, clients = digits()
    spec = {
        **FEDAVG_SPEC,
        "model": "small_cnn",
        "model_options": CNN,
        "participation": 1.0,
        "local_steps": 2,
        "batched": batched,
        "compile": compile_on,
        **options,
    }
    seeding.seed_everything(0)
    algo = FedAvg(spec, data, clients, 0, torch.device("cpu"))
    losses = [algo.round(t)["train_loss"] for t in (1, 2)]
    return {"losses": torch.tensor(losses), **algo.model.state_dict()}


def assert_close(compiled: dict, eager: dict) -> None:
    for key in eager:
        torch.testing.assert_close(compiled[key], eager[key], rtol=1e-5, atol=1e-6, msg=key)


def test_compile_is_off_by_default_and_never_reaches_a_spec_when_off():
    assert Precision.from_spec({}) == Precision("fp32", False, False)
    assert training_options({"compile": False, "precision": "fp32", "channels_last": False}) == {}
    section = {
        "dataset": "digits",
        "partition": {"num_clients": 4, "alphas": [1.0], "seed": 0},
        "methods": {"fedavg": {"lr": 0.1}},
    }
    assert (
        fedavg_plan.runs({"fedavg": section, "compile": False})[0].spec == fedavg_plan.runs({"fedavg": section})[0].spec
    )


def test_compile_on_reaches_the_spec_of_jobs_that_honour_it():
    from fedrepro.experiments import TRAINING_DEFAULTS

    if "compile" not in TRAINING_DEFAULTS:
        pytest.skip(
            "fedrepro.experiments.TRAINING_DEFAULTS has no 'compile' key yet: the config key "
            "does not reach job specs (a one-line change in fedrepro/experiments/__init__.py)"
        )
    assert training_options({"compile": True}) == {"compile": True}


def test_compiled_fedavg_matches_eager(backend):
    from torch._dynamo.utils import counters

    counters.clear()
    compiled = fedavg_params(True, batched=False)
    # one graph for 8 client models (a fresh model per client and round): parameters are graph inputs
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    assert_close(compiled, fedavg_params(False, batched=False))


def test_fedavg_batched_path_stays_eager_under_compile(backend):
    """dynamo cannot trace inside vmap(grad): the forward must not try (an attempt costs a failed trace)."""
    from torch._dynamo.utils import counters

    counters.clear()
    compiled = fedavg_params(True, batched=True)
    assert counters["frames"]["total"] == 0
    assert_close(compiled, fedavg_params(False, batched=True))


def test_compiled_fedsc_client_update_matches_eager_and_compiles_once(backend, tiny_digits):  # noqa: F811
    from torch._dynamo.utils import counters

    updates = {}
    for compile_on in (False, True):
        counters.clear()
        seeding.seed_everything(0)
        algo = FedSC(tiny_spec(compile=compile_on), tiny_digits, seed=0)
        weights = algo.global_state()
        updates[compile_on] = [algo.client_update(j, weights, 1, 0.03) for j in (0, 1)]
        graphs = counters["stats"]["unique_graphs"]
    assert (
        graphs == 2
    )  # went through dynamo: one graph per batch shape (16, then the last 8 as a dynamic size), not per client
    (eager_0, eager_loss_0), (eager_1, _) = updates[False]
    (compiled_0, compiled_loss_0), (compiled_1, _) = updates[True]
    assert float(compiled_loss_0) == pytest.approx(float(eager_loss_0), rel=1e-5)  # losses stay on the device
    assert_close(compiled_0, eager_0)
    assert_close(compiled_1, eager_1)
    assert not torch.equal(compiled_0["projector.0.weight"], weights["projector.0.weight"])  # it trained


@pytest.mark.skipif(
    os.environ.get("FEDREPRO_INDUCTOR_TESTS") != "1",
    reason="inductor compiles C++ kernels (minutes cold on 2 cores): set FEDREPRO_INDUCTOR_TESTS=1",
)
@pytest.mark.skipif(
    shutil.which(os.environ.get("CXX", "g++")) is None,
    reason="no C++ compiler on this machine: torch.compile's inductor backend cannot run on the CPU",
)
def test_inductor_compiled_fedavg_matches_eager():
    precision.compiled.cache_clear()
    assert_close(fedavg_params(True, False), fedavg_params(False, False))
