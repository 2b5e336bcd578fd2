"""Small parts of the DPZV family: variant cells of the jobs, ZO directions and updater, memory tracker."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from fedrepro.algorithms.dpzv.jobs import (
    _json_default,
    cell_slot,
    cell_state,
    cell_store,
    load_cell,
    save_cell,
    variant_tag,
)
from fedrepro.algorithms.dpzv.memory import LiveTensorTracker, param_bytes
from fedrepro.algorithms.dpzv.zo import Direction, ZOUpdater, bucket_sizes, num_params
from fedrepro.pipeline import Job
from fedrepro.store import Store

# ------------------------------------------------------------------------------------ variant cells


def job(method="dpzv", setting="a", seeds="s0_1", spec=None, tmp="/tmp/x"):
    out = f"{tmp}/dpzv/runs/tiny/{method}/{setting}/{seeds}/summary.json"
    return Job(spec=spec or {"lr": 1}, output={"summary": out}, input={}, seeds=[0, 1])


def test_variant_tags_name_eps_and_clip():
    assert variant_tag({"eps": 1.0, "clip": 10}) == "eps1-C10"
    assert variant_tag({"eps": "inf", "clip": "inf"}) == "epsinf-Cinf"
    assert variant_tag({"eps": 0.5}) == "eps0.5"


def cell_folder(j, tag):
    return cell_store(j).root / cell_slot(j, tag)


def test_cells_are_shared_by_the_settings_of_one_method_and_seed_list_only():
    here = cell_folder(job(), "eps1")
    assert cell_folder(job(setting="b"), "eps1") == here
    assert cell_folder(job(method="vafl"), "eps1") != here
    assert cell_folder(job(seeds="s2"), "eps1") != here
    assert cell_folder(job(), "eps2") != here
    assert here.parts[-5:] == ("tiny", "dpzv", "_cells", "eps1", "s0_1")


def test_cell_stamp_depends_on_the_variant_and_settings_not_on_the_variant_list():
    base = {"lr": 1, "variants": [{"eps": 1}]}
    stamp = cell_state(job(spec=base), {"eps": 1})
    assert cell_state(job(spec={**base, "variants": [{"eps": 1}, {"eps": 2}]}), {"eps": 1}) == stamp
    assert cell_state(job(spec=base), {"eps": 2}) != stamp
    assert cell_state(job(spec={**base, "lr": 2}), {"eps": 1}) != stamp


def test_cell_stamp_depends_on_the_input_files(tmp_path):
    """A changed data file (or code file: both are inputs) must not reuse a finished cell."""
    data = tmp_path / "arrays.npz"
    data.write_bytes(b"first")
    spec = {"lr": 1, "variants": [{"eps": 1}]}
    with_input = Job(spec=spec, output={"summary": str(tmp_path / "s.json")}, input={"data": str(data)}, seeds=[0])
    stamp = cell_state(with_input, {"eps": 1})
    data.write_bytes(b"second")
    assert cell_state(with_input, {"eps": 1}) != stamp


def test_a_cell_keeps_numpy_scalars_as_numbers(tmp_path):
    store = Store(tmp_path)
    save_cell(store, "cell", "stamp", pd.DataFrame({"seed": [0]}), {"0": {"acc": np.float32(0.25)}})
    assert load_cell(store, "cell", "stamp")[1] == {"0": {"acc": 0.25}}


def test_a_cell_is_read_back_only_under_its_own_stamp(tmp_path):
    metrics = pd.DataFrame({"seed": [0, 0], "test_acc": [0.5, 0.75]})
    seeds = {"0": {"best": {"test_acc": 0.75}, "eps": math.inf}}
    store = Store(tmp_path)
    assert load_cell(store, "cell", "stamp") is None  # nothing written yet
    save_cell(store, "cell", "stamp", metrics, seeds)
    frame, read = load_cell(store, "cell", "stamp")
    pd.testing.assert_frame_equal(frame, metrics)
    assert read["0"]["best"] == {"test_acc": 0.75} and math.isinf(read["0"]["eps"])
    assert load_cell(store, "cell", "other") is None
    (store.entry("cell", "stamp") / "summary.json").unlink()
    assert load_cell(store, "cell", "stamp") is None


def test_json_writes_numpy_and_torch_scalars_as_numbers():
    assert _json_default(np.float32(0.5)) == 0.5 and isinstance(_json_default(np.float32(0.5)), float)
    assert _json_default(torch.tensor(2.0)) == 2.0


# ------------------------------------------------------------------------------------ ZO parts


def params_of(seed=0):
    torch.manual_seed(seed)
    return list(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)).parameters())


@pytest.mark.parametrize("kind", ["sphere", "gaussian"])
def test_direction_is_the_seeded_gaussian_draw_scaled_to_its_kind(kind):
    params = params_of()
    generator = torch.Generator().manual_seed(77)
    d = num_params(params)
    assert d == 3 * 4 + 4 + 4 * 2 + 2 and bucket_sizes([p.numel() for p in params]) == [1, 2, 1]
    draws = [torch.randn(n, generator=generator) for n in (12, 4 + 8, 2)]  # one per bucket
    z = [draws[0].view(4, 3), *draws[1].split([4, 8]), draws[2]]
    z = [t.view(p.shape) for t, p in zip(z, params)]
    norm = math.sqrt(sum(float((t.double() ** 2).sum()) for t in z))
    scale = 1.0 if kind == "gaussian" else math.sqrt(d) / norm
    u = Direction(params, 77, kind)
    assert u.dim == d and u.scale == pytest.approx(scale, rel=1e-6)
    for a, b in zip(u.tensors(), z):
        assert torch.allclose(a, scale * b, rtol=1e-6, atol=0)
    before = [p.detach().clone() for p in params]
    u.add_(0.25)
    for p, b, t in zip(params, before, z):
        assert torch.allclose(p, b + 0.25 * scale * t, rtol=1e-6, atol=1e-7)


def test_updater_rejects_a_negative_learning_rate_and_momentum_outside_0_1():
    params = params_of()
    ZOUpdater(params, lr=0.0, momentum=0.0)
    with pytest.raises(ValueError, match="learning rate"):
        ZOUpdater(params, lr=-0.1)
    with pytest.raises(ValueError, match="zo_momentum"):
        ZOUpdater(params, lr=0.1, momentum=-0.1)


def test_plain_zo_step_is_minus_lr_times_coefficient_times_u():
    params = params_of()
    before = [p.detach().clone() for p in params]
    u = Direction(params, 5)
    ZOUpdater(params, lr=0.1).step(u, 2.0)
    for p, b, t in zip(params, before, u.tensors()):
        assert torch.allclose(p, b - 0.2 * t, rtol=1e-6, atol=1e-7)


def test_updater_state_round_trips_as_a_copy():
    params = params_of()
    updater = ZOUpdater(params, lr=0.1, momentum=0.9)
    updater.step(Direction(params, 1), 1.0)
    state = updater.state_dict()
    assert all(torch.equal(a, b) and a is not b for a, b in zip(state["buffers"], updater.buffers))
    twin = ZOUpdater(params_of(1), lr=0.1, momentum=0.9)
    twin.load_state_dict(state)
    for saved in state["buffers"]:
        saved.add_(1.0)  # the loaded buffers do not follow later changes of the saved ones
    assert all(torch.equal(a, b) for a, b in zip(twin.buffers, updater.buffers))
    twin.load_state_dict({"buffers": None})
    assert twin.buffers is None


# ------------------------------------------------------------------------------------ memory tracker


def test_param_bytes_counts_every_parameter():
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2).double())
    assert param_bytes(net) == (12 + 4) * 4 + (8 + 2) * 8


def test_tracker_counts_new_storages_not_views_and_releases_dead_ones():
    base = torch.zeros(1000)
    with LiveTensorTracker() as tracker:
        a = base + 1  # 4000 new bytes
        view = a[:10]  # a view: no new storage
        assert tracker.live == 4000
        b = a * 2
        assert tracker.live == tracker.peak == 8000
        del a, b
        c = view + 0  # sweeps the dead storage of b (a's lives on through the view)
        assert tracker.live == 4000 + 40 and tracker.peak == 8000
    del c, view
