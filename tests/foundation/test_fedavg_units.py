"""FedAvg (McMahan et al. 2017) unit by unit: which path trains, what crosses the wire, the
size-weighted aggregate against a float64 reference, the summary, and the pipeline entry `run_job`."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from fedrepro.algorithms.fedavg import fedavg
from fedrepro.algorithms.fedavg.fedavg import FedAvg
from fedrepro.data.partition import Partition, save_partition
from fedrepro.data.tensors import TensorData
from fedrepro.eval.health import chance_margin
from fedrepro.fl import seeding
from fedrepro.fl.transport import Message, Wire
from fedrepro.options import EVERY_ENV
from fedrepro.pipeline import hand_over_process_settings, make_job
from tests.foundation.conftest import FEDAVG_SPEC, saved_rounds

CPU = torch.device("cpu")


def new_fedavg(spec, blobs, clients, seed=0):
    seeding.seed_everything(seed)
    return FedAvg(spec, blobs, clients, seed, CPU)


def without(spec, key):
    return {k: v for k, v in spec.items() if k != key}


def test_batched_training_is_the_default(blobs, clients, monkeypatch):
    def no_loop(*args):
        raise AssertionError("the per-client loop ran although batched training is the default")

    monkeypatch.setattr(FedAvg, "_loop_training", no_loop)
    new_fedavg(without(FEDAVG_SPEC, "batched"), blobs, clients).round(1)


@pytest.mark.parametrize("batched", [True, False])
def test_a_round_with_a_single_client(blobs, clients, batched):
    algo = new_fedavg({**FEDAVG_SPEC, "participation": 0.1, "batched": batched}, blobs, clients)
    assert algo.round(1)["clients"] == 1


def test_loop_reports_the_same_mean_loss_as_batched_training(blobs, clients):
    losses = [new_fedavg({**FEDAVG_SPEC, "batched": b}, blobs, clients).round(1)["train_loss"] for b in (True, False)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)


def record_updates(algo):
    """Keep what local training returned, to recompute the server's average independently."""
    seen = {}
    original = algo._local_training

    def local_training(chosen, received):
        updates, losses = original(chosen, received)
        seen.update(chosen=list(chosen), updates=[{k: v.clone() for k, v in u.items()} for u in updates])
        return updates, losses

    algo._local_training = local_training
    return seen


@pytest.mark.parametrize("weighting", [None, "size", "uniform"])
def test_server_model_is_the_weighted_average_of_the_client_updates(blobs, clients, weighting):
    spec = without(FEDAVG_SPEC, "weighting") if weighting is None else {**FEDAVG_SPEC, "weighting": weighting}
    algo = new_fedavg(spec, blobs, clients)
    seen = record_updates(algo)
    algo.round(1)
    sizes = np.array([len(clients[c]) for c in seen["chosen"]], dtype=np.float64)
    weights = np.ones_like(sizes) if weighting == "uniform" else sizes  # size weighting is the default
    for name, value in algo.model.state_dict().items():
        expected = sum(w * u[name].double().numpy() for w, u in zip(weights, seen["updates"])) / weights.sum()
        np.testing.assert_allclose(value.numpy(), expected, rtol=1e-5, atol=1e-7, err_msg=name)


def test_every_message_names_its_round_sender_receiver_and_kind(blobs, clients):
    algo = new_fedavg(FEDAVG_SPEC, blobs, clients)
    algo.wire = Wire()
    seen = record_updates(algo)
    algo.round(3)
    n = sum(p.numel() for p in algo.model.parameters())
    down = [Message(3, "server", f"client{c}", "weights", n, 4 * n) for c in seen["chosen"]]
    up = [Message(3, f"client{c}", "server", "weights", n, 4 * n) for c in seen["chosen"]]
    assert algo.wire.messages == down + up


def bn_images(n_train=24, n_test=8):
    gen = torch.Generator().manual_seed(0)
    y = torch.arange(n_train + n_test) % 2
    x = torch.randn(n_train + n_test, 3, 8, 8, generator=gen) + y.view(-1, 1, 1, 1)
    return TensorData(x[:n_train], y[:n_train], x[n_train:], y[n_train:], 2)


def test_per_client_loop_trains_a_model_with_batchnorm_buffers():
    """Only parameters cross the wire; the running statistics stay as they are on both sides."""
    spec = {
        "model": "wrn10_1",
        "model_options": {"in_channels": 3, "num_classes": 2},
        "local_steps": 1,
        "batch_size": 4,
        "lr": 0.05,
        "participation": 1.0,
        "batched": False,
    }
    algo = new_fedavg(spec, bn_images(), [np.arange(12), np.arange(12, 24)])
    before = {k: v.clone() for k, v in algo.model.state_dict().items() if "running" in k}
    algo.round(1)
    after = algo.model.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in before.items())


def test_model_options_are_optional(blobs):
    images = TensorData(torch.randn(16, 1, 8, 8), torch.arange(16) % 10, torch.randn(4, 1, 8, 8), torch.arange(4), 10)
    spec = {**without(FEDAVG_SPEC, "model_options"), "model": "small_cnn", "participation": 1.0}
    assert new_fedavg(spec, images, [np.arange(8), np.arange(8, 16)]).round(1)["clients"] == 2


@pytest.mark.parametrize("margin_multiple,status", [(0.5, "chance"), (1.5, "ok")])
def test_summary_counts_bytes_and_checks_chance_with_the_test_set_size(blobs, clients, margin_multiple, status):
    algo = new_fedavg(FEDAVG_SPEC, blobs, clients)
    algo.round(1)
    algo.round(2)
    labels = blobs.y_test.numpy()
    chance = np.bincount(labels).max() / len(labels)
    margin = chance_margin(chance, len(labels))
    assert margin > 0.1  # 60 test samples: 3 standard errors, far above the 0.02 floor
    algo.evaluate = lambda t: {"test_acc": chance + margin_multiple * margin}
    summary = algo.summary()
    param_bytes = 4 * sum(p.numel() for p in algo.model.parameters())
    assert summary["uplink_bytes"] == summary["downlink_bytes"] == 2 * algo.per_round * param_bytes
    assert summary["chance_acc"] == pytest.approx(chance) and summary["status"] == status
    assert set(summary) == {"uplink_bytes", "downlink_bytes", "chance_acc", "status", "status_reason"}


# ------------------------------------------------------------------------------------ run_job


@pytest.fixture
def job_inputs(tmp_path, blobs, clients):
    folder = tmp_path / "data"
    folder.mkdir()
    np.savez(
        folder / "arrays.npz",
        x_train=blobs.x_train.numpy(),
        y_train=blobs.y_train.numpy(),
        x_test=blobs.x_test.numpy(),
        y_test=blobs.y_test.numpy(),
    )
    (folder / "meta.json").write_text(json.dumps({"kind": "tabular", "num_classes": 3}))
    save_partition(Partition("horizontal", clients=clients), tmp_path / "part.npz")
    return {"data": str(folder / "arrays.npz"), "partition": str(tmp_path / "part.npz")}


def run_job(tmp_path, inputs, **changes):
    spec = {**FEDAVG_SPEC, "rounds": 3, **changes}
    spec = {k: v for k, v in spec.items() if v is not None}
    out = tmp_path / "run"
    job = make_job(
        spec, {"metrics": str(out / "metrics.parquet"), "summary": str(out / "summary.json")}, input=inputs, seeds=[0]
    )
    fedavg.run_job(job)
    return pd.read_parquet(out / "metrics.parquet"), json.loads((out / "summary.json").read_text())


def test_run_job_trains_on_the_prepared_data_and_partition(tmp_path, job_inputs, blobs, clients):
    metrics, summary = run_job(tmp_path, job_inputs, device=None)
    direct = new_fedavg({**FEDAVG_SPEC, "rounds": 3}, blobs, clients)
    expected = [direct.round(t)["train_loss"] for t in (1, 2, 3)]
    np.testing.assert_allclose(metrics["train_loss"], expected, rtol=1e-6)
    assert metrics["test_acc"].notna().all() and summary["seeds"]["0"]["final"]["round"] == 3


def test_run_job_passes_eval_every_and_the_device_on(tmp_path, job_inputs):
    metrics, _ = run_job(tmp_path, job_inputs, eval_every=2)
    assert metrics["test_acc"].isna().tolist() == [True, False, False]
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError):
            run_job(tmp_path / "gpu", job_inputs, device="cuda")


@pytest.mark.parametrize("every,saved", [(None, [1, 2, 3]), (2, [2, 3])])
def test_run_job_checkpoints_every_checkpoint_every_rounds(tmp_path, job_inputs, monkeypatch, every, saved):
    """The job's process gets `checkpoint_every` from the config (never from its spec)."""
    rounds = saved_rounds(monkeypatch)
    monkeypatch.delenv(EVERY_ENV, raising=False)
    if every is not None:
        hand_over_process_settings({"checkpoint_every": every})
    run_job(tmp_path, job_inputs)
    assert rounds == saved
