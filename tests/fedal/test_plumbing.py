"""What a job spec turns into: each method's `build` and `run_job`, `train_config`,
`adversarial_config`, `load_setting` and `jobs.run` (the settings must reach the method, and
a key left out must give the documented default)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fedrepro.algorithms.fedal import cfd, fccl, fd, fedal, fedavg, feddf, fedproto, jobs, server
from fedrepro.algorithms.fedal.base import TrainConfig
from fedrepro.algorithms.fedal.client import arch_key

from .helpers import POOL, config, make_data

DISC = {"hidden": [8, 6], "lr": 0.25, "optimizer": "sgd", "temperature": 3.5}


def linear_widths(module: torch.nn.Module) -> list[tuple[int, int]]:
    return [(m.in_features, m.out_features) for m in module.modules() if isinstance(m, torch.nn.Linear)]


def test_train_config_reads_every_key_and_defaults_the_optional_ones():
    full = {
        "tau": 3,
        "lr": 0.5,
        "batch_size": 7,
        "kd_temperature": 2.5,
        "lf_temperature": 1.5,
        "kd_target": "all",
        "weights": {"al": 0.25},
        "adam_state": "per_stage",
        "pretrain_iters": 4,
        "assignment": "round_robin",
    }
    cfg = jobs.train_config(full)
    assert (cfg.tau, cfg.lr, cfg.batch_size, cfg.kd_temperature, cfg.lf_temperature) == (3, 0.5, 7, 2.5, 1.5)
    assert (cfg.kd_target, cfg.adam_state, cfg.pretrain_iters, cfg.assignment) == ("all", "per_stage", 4, "round_robin")
    assert cfg.weights == {"kd": 1.0, "al": 0.25, "lf": 1.0}
    minimal = jobs.train_config({"tau": 2, "lr": 0.1, "batch_size": 5})
    assert minimal == TrainConfig(tau=2, lr=0.1, batch_size=5)
    assert (minimal.kd_temperature, minimal.lf_temperature, minimal.pretrain_iters) == (1.0, 1.0, 0)
    assert (minimal.kd_target, minimal.adam_state, minimal.assignment) == ("leave_one_out", "persistent", "random")


def test_adversarial_config_reads_the_discriminator_and_defaults_form_and_order():
    cfg = server.adversarial_config({"discriminator": DISC})
    assert (cfg.hidden, cfg.lr, cfg.optimizer, cfg.temperature) == ((8, 6), 0.25, "sgd", 3.5)
    assert (cfg.form, cfg.update) == ("saturating", "before_grad")
    chosen = server.adversarial_config({"discriminator": {**DISC, "form": "non_saturating", "update": "after_grad"}})
    assert (chosen.form, chosen.update) == ("non_saturating", "after_grad")


def test_fedal_build_passes_the_switches_discriminator_and_diagnostics():
    data = make_data()
    algo = fedal.build(
        data,
        POOL,
        config(),
        0,
        {"method": "fedal", "discriminator": DISC, "diagnostics": {"every_rounds": 2, "batches": 3}},
    )
    assert (algo.use_al, algo.use_lf) == (True, True)
    assert (algo.diag_every, algo.diag_batches) == (2, 3)
    adversary = algo.server.adversary
    assert linear_widths(adversary.disc) == [(4, 8), (8, 6), (6, 3)]
    assert (adversary.opt.lr, adversary.temperature, adversary.form, adversary.update) == (
        0.25,
        3.5,
        "saturating",
        "before_grad",
    )
    assert type(adversary.opt).__name__ == "SGD"
    off = fedal.build(data, POOL, config(), 0, {"method": "fedal", "use_al": False, "use_lf": False})
    assert (off.use_al, off.use_lf, off.server.adversary, off.diag_every) == (False, False, None, 0)
    # the ablations ignore the switches
    lf = fedal.build(data, POOL, config(), 0, {"method": "fedmd_lf", "use_al": True, "discriminator": DISC})
    assert (lf.use_al, lf.use_lf, lf.server.adversary) == (False, True, None)
    md = fedal.build(data, POOL, config(), 0, {"method": "fedmd", "use_lf": True})
    assert (md.use_al, md.use_lf) == (False, False)


def test_feddf_build_turns_on_the_adversary_only_for_feddf_al():
    data = make_data()
    cfg = config(assignment="round_robin")
    plain = feddf.build(data, POOL, cfg, 0, {"method": "feddf"})
    assert (plain.use_al, plain.use_lf, plain.adversary, plain.server_lr) == (False, False, None, cfg.lr)
    al = feddf.build(
        data, POOL, cfg, 0, {"method": "feddf_al", "discriminator": DISC, "use_lf": True, "server_lr": 0.125}
    )
    assert (al.use_al, al.use_lf, al.server_lr) == (True, True, 0.125)
    assert linear_widths(al.adversary.disc)[-1] == (6, 2)  # players = the two architecture groups
    assert (al.adversary.opt.lr, al.adversary.temperature) == (0.25, 3.5)


def test_cfd_build_picks_the_server_architecture_from_the_pool():
    data = make_data()
    default = cfd.build(data, POOL, config(), 0, {"method": "cfd"})
    assert default.server.model.arch == arch_key(POOL[0])
    assert default.server.opt.lr == config().lr and default.server.temperature == config().kd_temperature
    second = cfd.build(
        data, POOL, config(kd_temperature=2.0), 0, {"method": "cfd", "server_model": 1, "server_lr": 0.5}
    )
    assert second.server.model.arch == arch_key(POOL[1])
    assert (second.server.opt.lr, second.server.temperature) == (0.5, 2.0)
    with pytest.raises(ValueError, match="server_model=2"):
        cfd.build(data, POOL, config(), 0, {"method": "cfd", "server_model": 2})


def test_cfd_uses_the_given_assignment():
    algo = cfd.CFD(make_data(), POOL, config(), 0, assignment=[1, 0, 1])
    assert [c.model.arch for c in algo.clients] == [arch_key(POOL[i]) for i in (1, 0, 1)]


def test_fccl_build_defaults_are_the_authors_digits_settings():
    data = make_data()
    plain = fccl.build(data, POOL, config(), 0, {"method": "fccl", "pretrain_iters": 2})
    assert (plain.plus, plain.pretrain_steps, plain.local_steps) == (False, 2, config().tau)
    assert (plain.sim_temperature, plain.sim_weight, plain.nt_temperature) == (0.02, 3.0, 3.0)
    with pytest.raises(KeyError, match="pretrain_iters"):  # no fallback: config's train block always sets it
        fccl.build(data, POOL, config(), 0, {"method": "fccl"})
    plus = fccl.build(
        data,
        POOL,
        config(),
        0,
        {
            "method": "fccl_plus",
            "pretrain_iters": 0,
            "similarity_temperature": 0.5,
            "similarity_weight": 2.0,
            "nt_temperature": 4.0,
            "local_steps": 7,
        },
    )
    assert (plus.plus, plus.intra, plus.pretrain_steps, plus.local_steps) == (True, None, 0, 7)
    assert (plus.sim_temperature, plus.sim_weight, plus.nt_temperature) == (0.5, 2.0, 4.0)


def test_fedproto_fd_fedavg_builds_read_their_keys():
    data = make_data()
    default = fedproto.build(data, POOL, config(), 0, {"method": "fedproto"})
    assert (default.proto_weight, default.variant, default.uses_public) == (1.0, "public_features", True)
    assert default.clients[0].public_x is data.public_x
    proto = fedproto.build(
        data, POOL, config(), 0, {"method": "fedproto", "proto_weight": 0.5, "variant": "prototypes"}
    )
    assert (proto.proto_weight, proto.variant, proto.uses_public) == (0.5, "prototypes", False)
    assert proto.clients[0].public_x is None
    assert proto.server.average == "unweighted"
    spec = {"method": "fedproto", "variant": "prototypes", "prototype_average": "count"}
    assert fedproto.build(data, POOL, config(), 0, spec).server.average == "count"
    assert fd.build(data, POOL, config(), 0, {"method": "fd"}).fd_weight == 1.0
    assert fd.build(data, POOL, config(), 0, {"method": "fd", "fd_weight": 0.3}).fd_weight == 0.3
    avg = fedavg.build(data, POOL[:1], config(), 0, {"method": "fedavg"})
    assert isinstance(avg, fedavg.FedAvg) and avg.num_clients == data.num_clients


@pytest.mark.parametrize("module", [cfd, fccl, fd, fedal, fedavg, feddf, fedproto])
def test_run_job_hands_the_job_and_its_builder_to_jobs_run(module, monkeypatch):
    calls = []
    monkeypatch.setattr(jobs, "run", lambda job, build: calls.append((job, build)))
    job = object()
    module.run_job(job)
    assert calls == [(job, module.build)]


@pytest.fixture
def tiny_job(tmp_path):
    """A prepared tabular set (12 train, 4 test samples) and a horizontal partition with a public set."""
    from fedrepro.data.partition import Partition, save_partition

    rng = np.random.default_rng(0)
    folder = tmp_path / "data/toy"
    folder.mkdir(parents=True)
    np.savez(
        folder / "arrays.npz",
        x_train=rng.normal(size=(12, 3)),
        y_train=np.arange(12) % 2,
        x_test=rng.normal(size=(4, 3)),
        y_test=np.array([0, 1, 1, 0]),
    )
    (folder / "meta.json").write_text(json.dumps({"kind": "tabular", "num_classes": 2}))
    part = Partition(
        "horizontal", clients=[np.array([0, 1, 2, 3]), np.array([4, 5, 6])], public=np.array([8, 9, 10]), meta={}
    )
    save_partition(part, tmp_path / "part.npz")
    x_train = np.load(folder / "arrays.npz")["x_train"]
    return SimpleNamespace(
        input={"data": str(folder / "arrays.npz"), "partition": str(tmp_path / "part.npz")},
        threads=1,
        spec={},
        x_train=x_train,
    )


def test_load_setting_splits_by_the_partition_on_the_requested_device(tiny_job):
    data = jobs.load_setting(tiny_job, torch.device("cpu"))
    assert data.num_classes == 2 and data.num_clients == 2
    torch.testing.assert_close(data.clients_x[1], torch.as_tensor(tiny_job.x_train[[4, 5, 6]], dtype=torch.float32))
    assert data.clients_y[0].tolist() == [0, 1, 0, 1]
    torch.testing.assert_close(data.public_x, torch.as_tensor(tiny_job.x_train[[8, 9, 10]], dtype=torch.float32))
    assert data.test_y.tolist() == [0, 1, 1, 0]
    on_meta = jobs.load_setting(tiny_job, torch.device("meta"))
    assert {t.device.type for t in [*on_meta.clients_x, on_meta.public_x, on_meta.test_x]} == {"meta"}


@pytest.mark.parametrize(
    "spec, rounds, eval_every, checkpoint_every",
    [
        ({"iterations": 12, "tau": 3, "evals": 1}, 4, 4, None),  # checkpoint_every: the loop's (config) value
        ({"iterations": 12, "tau": 3, "evals": 2}, 4, 2, None),
        ({"iterations": 40, "tau": 2, "evals": 10}, 20, 2, None),
        ({"iterations": 5, "tau": 2, "evals": 10, "iteration_unit": "round", "device": "cpu"}, 5, 1, None),
    ],
)
def test_run_turns_the_budget_into_rounds_and_evaluation_points(
    tiny_job, monkeypatch, spec, rounds, eval_every, checkpoint_every
):
    import fedrepro.fl.device as device_module
    import fedrepro.fl.runner as runner

    calls = {}

    def fake_run_seeds(job, build, num_rounds, eval_every, checkpoint_every=None):
        calls.update(algo=build(0), rounds=num_rounds, eval_every=eval_every, checkpoint=checkpoint_every)

    monkeypatch.setattr(runner, "run_seeds", fake_run_seeds)
    asked = []
    monkeypatch.setattr(device_module, "pick_device", lambda name: asked.append(name) or torch.device("cpu"))
    tiny_job.spec = {"lr": 0.1, "batch_size": 2, "pool": [{"name": "mlp", "options": {"in_features": 3}}], **spec}
    seen = {}
    jobs.run(tiny_job, lambda data, pool, cfg, seed, s: seen.update(data=data, pool=pool, cfg=cfg, seed=seed, spec=s))
    assert (calls["rounds"], calls["eval_every"], calls["checkpoint"]) == (rounds, eval_every, checkpoint_every)
    assert seen["cfg"].tau == spec["tau"] and seen["seed"] == 0 and seen["pool"] == tiny_job.spec["pool"]
    assert seen["data"].num_clients == 2
    assert asked == [spec.get("device", "auto")]


def test_an_unknown_discriminator_optimizer_names_its_config_key():
    from fedrepro.algorithms.fedal.server import make_optimizer

    with pytest.raises(ValueError, match=r"discriminator\.optimizer 'rmsprop' is not one of adam, sgd"):
        make_optimizer("rmsprop", [torch.zeros(1, requires_grad=True)], 1e-3)
