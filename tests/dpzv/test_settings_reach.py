"""Settings that must reach the place they act on: devices, accountant, checkpoints, threads, directions."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedrepro.algorithms.dpzv.base import Server, build_vfl_data
from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.jobs import load_cell, run_vfl_job, save_cell
from fedrepro.algorithms.dpzv.vafl import VAFL
from fedrepro.algorithms.dpzv.zo import Direction
from fedrepro.algorithms.dpzv.zoo_vfl import ZOOVFL
from fedrepro.data.partition import vertical_partition
from fedrepro.store import Store
from tests.dpzv.conftest import tiny_images, tiny_settings
from tests.dpzv.test_job_entry import job_for
from tests.dpzv.test_jobs import prepared  # noqa: F401  (fixture: tiny prepared arrays and partition)


def test_a_tiny_holdout_keeps_one_validation_sample():
    """10 % of 4 samples rounds to 0: the holdout still keeps one (and only one) sample."""
    x_tr, y_tr, x_te, y_te = tiny_images(n_train=4, n_test=4)
    p = vertical_partition((1, 8, 8), "rows", 2)
    data = build_vfl_data(x_tr, y_tr, x_te, y_te, p.features, p.feature_shapes, 3, "image")
    assert (data.y_val.shape[0], data.num_train) == (1, 3)


def test_server_table_lives_on_the_labels_device_whatever_the_default_device():
    head = torch.nn.Linear(8, 3)
    y = torch.tensor([0, 1, 2])
    with torch.device("meta"):
        server = Server(head, y, num_clients=2, embed_dim=4, seed=0)
    assert server.table.device == y.device and server.table.shape == (3, 2, 4)


def test_dpzv_zo_server_step_follows_the_configured_direction(tiny_data):
    """direction: gaussian also drives the server's own ZO step (u0 = z, not z rescaled to the sphere)."""
    lr = 0.1
    algo = DPZV(
        tiny_data,
        tiny_settings(
            lr_server=lr, extra={"server_update": "zo", "zo_momentum": 0.0, "zo_lambda": 1e-4, "direction": "gaussian"}
        ),
        seed=0,
    )
    algo.server.head.double()
    algo.server.table = algo.server.table.double()
    seeds = []
    new_seed = algo.server.new_seed
    algo.server.new_seed = lambda: seeds.append(new_seed()) or seeds[-1]
    ids = torch.as_tensor(algo.clients[0].next_batch())
    before = [p.detach().clone() for p in algo.server.params]
    grad = torch.autograd.grad(algo.server.losses(ids).mean(), algo.server.params)
    algo.server_step(ids)
    u0 = Direction(algo.server.params, seeds[0], "gaussian").tensors()
    slope = sum(float((g * u).sum()) for g, u in zip(grad, u0))
    norm = math.sqrt(sum(float((g * g).sum()) for g in grad))
    assert abs(slope) > 0.05 * norm
    for p, b, u in zip(algo.server.params, before, u0):
        assert torch.allclose(p, b - lr * slope * u, rtol=0, atol=1e-4 * lr * norm)


@pytest.mark.parametrize(
    "cls, noise", [(DPZV, "shared"), (VAFL, "shared"), (ZOOVFL, "shared"), (ZOOVFL, "independent")]
)
def test_every_method_records_the_library_accountant_it_was_given(cls, noise, tiny_data):
    extra = {"server_update": "sgd", "embed_clip": 1.0, "zoo_noise": noise}
    record = cls(tiny_data, tiny_settings(eps=1.0, library_accountant="pld", extra=extra), seed=0).privacy()
    assert record["library_method"] == "pld" and math.isfinite(record["eps_library"])


@pytest.mark.parametrize("cls", [DPZV, VAFL, ZOOVFL])
def test_every_privacy_record_names_the_mechanism_it_accounts_for(cls, tiny_data):
    record = cls(tiny_data, tiny_settings(eps=1.0, extra={"server_update": "sgd"}), seed=0).privacy()
    assert isinstance(record["mechanism"], str) and "Gaussian" in record["mechanism"]


def test_zoo_vfl_records_its_clip_and_steps_an_sgd_server_with_the_shared_momentum(tiny_data):
    algo = ZOOVFL(tiny_data, tiny_settings(momentum=0.6, extra={"server_update": "sgd", "embed_clip": 0.7}), seed=0)
    assert algo.privacy()["embed_clip"] == 0.7
    assert (algo.server.optimizer.lr, algo.server.optimizer.momentum) == (algo.cfg.lr_server, 0.6)


def test_job_hands_checkpoint_every_to_the_loop_and_uses_its_threads(prepared, tmp_path, monkeypatch):  # noqa: F811
    """The job's `checkpoint_every` (from the config, never the spec: fedrepro.options.EVERY_ENV) reaches
    the loop's Checkpoint."""
    from fedrepro.fl.loop import Checkpoint
    from fedrepro.options import EVERY_ENV

    asked = []
    real = Checkpoint.save
    monkeypatch.setattr(Checkpoint, "save", lambda self, *a: asked.append(self.every) or real(self, *a))
    monkeypatch.setenv(EVERY_ENV, "3")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        job = job_for(prepared, tmp_path, epochs=1, evals_per_epoch=1)
        job.threads = 1
        run_vfl_job(job, DPZV)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert set(asked) == {3}


def test_a_half_rewritten_cell_does_not_count_as_finished(tmp_path, monkeypatch):
    """save_cell drops the entry's state before it writes anything: a crash in between leaves no state."""
    import fedrepro.store

    store = Store(tmp_path)
    metrics = pd.DataFrame({"seed": [0], "test_acc": [0.5]})
    save_cell(store, "cell", "stamp", metrics, {"0": {}})
    assert load_cell(store, "cell", "stamp") is not None

    def crash(path, write):
        raise OSError("disk full")

    monkeypatch.setattr(fedrepro.store, "atomic_write", crash)
    with pytest.raises(OSError):
        save_cell(store, "cell", "stamp", metrics, {"0": {}})
    assert load_cell(store, "cell", "stamp") is None
    folder = store.entry("cell", "stamp")
    assert json.loads((folder / "summary.json").read_text()) == {"seeds": {"0": {}}}
    assert np.isfinite(pd.read_parquet(folder / "metrics.parquet")["test_acc"]).all()


def test_labels_are_class_indices_on_the_asked_device():
    """uint8 labels (as prepared arrays store them) become int64 class indices for cross_entropy."""
    x_tr, y_tr, x_te, y_te = tiny_images()
    p = vertical_partition((1, 8, 8), "rows", 2)
    with torch.device("meta"):
        data = build_vfl_data(
            x_tr,
            y_tr.astype(np.uint8),
            x_te,
            y_te.astype(np.uint8),
            p.features,
            p.feature_shapes,
            3,
            "image",
            device="cpu",
        )
    for y in (data.y_train, data.y_val, data.y_test):
        assert y.dtype == torch.long and y.device.type == "cpu"


def test_server_inputs_are_the_raw_table_by_default():
    head = torch.nn.Linear(8, 3)
    server = Server(head, torch.tensor([0, 1, 2]), num_clients=2, embed_dim=4, seed=0)
    server.table.normal_()
    ids = torch.tensor([2, 0])
    assert torch.equal(server.inputs(ids), server.table[ids].reshape(2, 8))


def test_invalid_server_update_names_its_key(tiny_data):
    with pytest.raises(ValueError, match="^server_update "):
        DPZV(tiny_data, tiny_settings(extra={"server_update": "adam"}), seed=0)


def test_zoo_vfl_shared_noise_is_one_release_of_h_like_vafl(tiny_data):
    """`shared`: the draw covers h alone, one embedding per round, so sigma is VAFL's at the same settings."""
    options = {"embed_clip": 1.0, "server_update": "sgd"}
    zoo = ZOOVFL(tiny_data, tiny_settings(eps=1.0, extra=options), seed=0)
    vafl = VAFL(tiny_data, tiny_settings(eps=1.0, extra=options), seed=0)
    assert zoo.noise["sigma"] == vafl.noise["sigma"] > 0


def test_a_job_killed_while_writing_its_outputs_keeps_the_previous_ones(prepared, tmp_path, monkeypatch):  # noqa: F811
    """Issue 31: the final metrics and summary are written atomically: a write that dies half-way (a kill, a
    full disk) leaves the previous files whole, never half a file that the report would read."""
    job = job_for(prepared, tmp_path, epochs=1, evals_per_epoch=1)
    run_vfl_job(job, DPZV)
    summary, metrics = (job.out(k).read_bytes() for k in ("summary", "metrics"))
    final = {job.out("summary").name, job.out("metrics").name}

    def half_written(write):
        def dying(self, target, *args, **kwargs):
            if isinstance(target, str | Path) and Path(target).name.startswith(tuple(final | {".summary", ".metrics"})):
                Path(target).write_bytes(b"{ half")
                raise OSError("killed mid-write")
            return write(self, target, *args, **kwargs)

        return dying

    monkeypatch.setattr(pd.DataFrame, "to_parquet", half_written(pd.DataFrame.to_parquet))
    with pytest.raises(OSError):
        run_vfl_job(job, DPZV)  # the variant comes from its cell; only the job's outputs are written
    monkeypatch.undo()
    real_write_text = Path.write_text
    monkeypatch.setattr(
        Path, "write_text", lambda self, text, *a, **k: half_written(lambda p, t: real_write_text(p, text))(self, self)
    )
    with pytest.raises(OSError):
        run_vfl_job(job, DPZV)
    monkeypatch.undo()
    assert job.out("summary").read_bytes() == summary and job.out("metrics").read_bytes() == metrics
    assert sorted(p.name for p in job.out("summary").parent.iterdir() if p.is_file()) == sorted(final)
