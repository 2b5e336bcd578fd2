"""The planner's "with levers" column (fedrepro.experiments.levers) and the CPU tests its levers cite.

Two of the levers' own tests live here: FedSC's bf16 + channels-last local update within tolerance of fp32,
and a BERT client's forward compiling with fullgraph=True (no graph break, so no host sync inside it: what
CUDA graphs need of DPZV's Amazon rounds besides the round code, tests/dpzv/test_graph_ready.py).
"""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest
import torch

from fedrepro import plan
from fedrepro.experiments import levers
from fedrepro.experiments.cost import Constants, Step, Work
from fedrepro.fl import seeding
from tests.fedsc.conftest import tiny_digits  # noqa: F401 (fixture)
from tests.fedsc.helpers import tiny_spec

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------ the levers' own CPU tests
def test_fedsc_bf16_channels_last_update_within_tolerance_of_fp32(tiny_digits):  # noqa: F811
    """One client's local update (SC loss, SGD) with `precision: bf16` and `channels_last` against fp32 from
    the same weights and seed. Tolerance: bf16 keeps 8 mantissa bits (2^-9 relative per rounding), so a few
    tenths of a percent of the update per step; 2 % of the update's norm and 1 % of the loss leave a margin
    and are far inside the seed spread the quick-scale check found (docs/benchmarks.md, "Precision")."""
    from fedrepro.algorithms.fedsc.fedsc import FedSC

    updates = {}
    for name, keys in (("fp32", {}), ("bf16", {"precision": "bf16", "channels_last": True})):
        seeding.seed_everything(0)
        algo = FedSC(tiny_spec(**keys), tiny_digits, seed=0)
        weights = algo.global_state()
        new, loss = algo.client_update(0, weights, 1, 0.03)
        step = {k: new[k].float() - weights[k].float() for k in weights if weights[k].is_floating_point()}
        updates[name] = (step, loss)
    (fp32, loss32), (bf16, loss16) = updates["fp32"], updates["bf16"]
    error = sum((bf16[k] - fp32[k]).square().sum() for k in fp32).sqrt()
    size = sum(fp32[k].square().sum() for k in fp32).sqrt()
    assert 0 < error, "bf16 was not applied"
    assert error / size < 0.02
    assert float(loss16) == pytest.approx(float(loss32), rel=0.01)  # the losses stay on the device


def test_bert_client_forward_compiles_fullgraph_equal_to_eager():
    """transformers' BERT (the Amazon client, models/vfl.py) traces as one graph: its attention-mask code
    reads no tensor value under dynamo, so a captured round has no host sync inside the forward."""
    pytest.importorskip("transformers")
    from fedrepro.models.vfl import text_client_encoder

    torch.manual_seed(0)
    config = {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
    net = text_client_encoder(embed_dim=8, pad_id=0, bert_config={**config, "intermediate_size": 64}).eval()
    tokens = torch.randint(1, 100, (4, 16))
    tokens[:, -3:] = 0
    torch._dynamo.reset()
    compiled = torch.compile(net, fullgraph=True, backend="eager")  # a graph break raises
    with torch.no_grad():
        torch.testing.assert_close(compiled(tokens), net(tokens), rtol=0, atol=0)


# ------------------------------------------------------------------------------ the model of a lever
FLOPS_LEVER = levers.Lever("x", "p", None, "flops", 2.0, "s", ())
GRAPHS_LEVER = levers.Lever("y", "p", ("m",), "launches", 0.01, "s", ())


def test_lever_seconds_by_closed_form():
    work = Work(10.0, 100.0, autocast_flops=4.0, graphed_launches=60.0)
    constants = Constants(1.0, 0.1)
    assert levers.lever_seconds(constants, work, []) == pytest.approx(10 + 10)
    # 4 FLOPs at half time, 6 at full; 60 launches at 0.01, 40 at 0.1
    assert levers.lever_seconds(constants, work, [FLOPS_LEVER, GRAPHS_LEVER]) == pytest.approx(2 + 6 + 0.6 + 4)
    assert levers.ratio(constants, work, "p", "m", [FLOPS_LEVER, GRAPHS_LEVER]) == pytest.approx(12.6 / 20)
    assert levers.ratio(constants, work, "p", "other", [GRAPHS_LEVER]) == 1.0  # not a run it covers
    assert levers.ratio(constants, work, "q", "m", [FLOPS_LEVER]) == 1.0
    with pytest.raises(ValueError, match="two precision levers"):
        levers.lever_seconds(constants, work, [FLOPS_LEVER, FLOPS_LEVER])


def test_work_carries_its_marks_through_sums_and_scales():
    a, b = Work(3.0, 5.0).autocast(), Work(7.0, 11.0).graphed()
    assert (a + b) * 2 == Work(20.0, 32.0, autocast_flops=6.0, graphed_launches=22.0)
    assert (a + b * -1).autocast_flops == 3.0 and (a + b * -1).graphed_launches == -11.0


def test_a_lever_is_applied_only_with_its_tests_in_the_checkout_and_its_gate_passed(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_one():\n    pass\n")
    lever = dataclasses.replace(FLOPS_LEVER, evidence=("tests/test_a.py::test_one", "tests/test_b.py"))
    assert lever.missing_evidence(tmp_path) == ["tests/test_b.py"] and not lever.applied(tmp_path)
    (tmp_path / "tests" / "test_b.py").write_text("")
    assert lever.applied(tmp_path) and levers.active([lever], tmp_path) == [lever]
    renamed = dataclasses.replace(lever, evidence=("tests/test_a.py::test_two",))
    assert not renamed.applied(tmp_path)
    assert not dataclasses.replace(lever, gate=False).applied(tmp_path)


def test_every_lever_cites_a_source_and_its_tests_name_real_files_once_merged():
    for lever in levers.LEVERS:
        assert lever.source and lever.evidence and lever.value > 0, lever.name
        assert all(e.startswith("tests/") and e.split("::")[0].endswith(".py") for e in lever.evidence)
    mine = ("test_levers.py", "test_zo_bf16", "test_precision")
    own = [e for lever in levers.LEVERS for e in lever.evidence if any(name in e for name in mine)]
    assert own and not [e for e in own if _missing(e)]  # this checkout's own evidence is all here


def _missing(entry: str) -> list[str]:
    return dataclasses.replace(FLOPS_LEVER, evidence=(entry,)).missing_evidence(REPO)


# ------------------------------------------------------------------------------ the marks in the planner
@pytest.fixture(scope="module")
def paper():
    config = plan.load_config([str(REPO / "config.yaml"), str(REPO / "configs" / "paper.yaml")])
    return config, plan.load_default_counts()


def _run(config: dict, paper_name: str, dataset: str, method: str):
    import importlib

    module = importlib.import_module(f"fedrepro.experiments.{paper_name}")
    return next(r for r in module.runs(config) if (r.dataset, r.method) == (dataset, method))


def _encoder_step(spec: dict, counts, images: int, kind: str, optimizer: str = "adam"):
    """The counted work of one CIFAR-10 step of a FedSC run's encoder and projector on `images` images."""
    encoder, head = spec["encoder"], (spec["projector"]["hidden"], spec["projector"]["out"])
    options = {**encoder.get("kwargs", {}), "num_classes": 0}
    shape = plan.DATASETS["cifar10"].input_shape
    return counts(Step.of(encoder["name"], options, shape, images, kind, optimizer, head))


def test_a_fedsc_round_marks_its_training_steps_and_not_dp_calr_or_the_knn_monitor(paper):
    """bf16 and CUDA graphs (tests/fedsc/test_graph_ready.py) both apply to the local steps only: DP-CalR's
    and the kNN monitor's forwards and the linear probe stay fp32 and eager."""
    config, counts = paper
    run = _run(config, "fedsc", "cifar10", "fedsc")
    work, probe_epoch = plan.fedsc_work(config, run, counts)
    spec, batch = run.spec, int(run.spec["train"]["batch_size"])
    step = _encoder_step(spec, counts, 2 * batch, "train", "sgd")
    samples = plan._n_train(config, "cifar10")  # full participation
    assert work.autocast_flops == pytest.approx(step.flops * spec["train"]["local_epochs"] * samples / batch)
    assert work.flops > work.autocast_flops  # DP-CalR's and the monitor's forwards stay fp32
    steps = spec["train"]["local_epochs"] * samples / batch
    assert work.graphed_launches == pytest.approx(step.launches * steps)
    assert work.launches > work.graphed_launches and probe_epoch.graphed_launches == 0


def test_a_fedx_round_graphs_its_frozen_forwards_inside_the_step(paper):
    """FedX's frozen global network forwards the step's three views inside the step: graph-ready with it."""
    config, counts = paper
    run = _run(config, "fedsc", "cifar10", "fedx")
    fedx, _ = plan.fedsc_work(config, run, counts)
    spec, batch = run.spec, int(run.spec["train"]["batch_size"])
    step = _encoder_step(spec, counts, 3 * batch, "train", "sgd")
    frozen = _encoder_step(spec, counts, batch, "forward")
    assert spec["participation"] == "full"
    steps = spec["train"]["local_epochs"] * plan._n_train(config, "cifar10") / batch
    assert fedx.graphed_launches == pytest.approx((step.launches + 3 * frozen.launches) * steps)


def test_a_dpzv_epoch_graphs_its_rounds_not_its_evaluations(paper):
    config, counts = paper
    run = _run(config, "dpzv", "mnist", "dpzv")
    work = plan.dpzv_work(config, run, counts)
    no_evals = plan.dpzv_work(config, dataclasses.replace(run, spec={**run.spec, "evals_per_epoch": 0}), counts)
    assert no_evals.graphed_launches == no_evals.launches > 0
    assert work.graphed_launches == pytest.approx(no_evals.launches) and work.launches > work.graphed_launches
    assert work.autocast_flops == 0  # no BERT: nothing for bf16 forwards
    bert = plan.dpzv_work(config, _run(config, "dpzv", "amazon_polarity", "dpzv"), counts)
    assert 0 < bert.autocast_flops < bert.flops  # its perturbed forwards; the evaluation and the head stay


def test_a_stacked_fedal_iteration_graphs_its_stacked_steps_only(paper):
    config, counts = paper
    run = _run(config, "fedal", "cifar10", "fedal")
    clients = plan._fedal_clients(run.setting)
    stacked = plan.fedal_work(config, run, counts, clients)
    alone = plan.fedal_work(config, dataclasses.replace(run, spec={**run.spec, "batched": False}), counts, clients)
    assert 0 < stacked.graphed_launches < stacked.launches  # evaluation and pretraining stay per client
    assert alone.graphed_launches == 0


def test_fedal_family_launches_are_marked_graph_ready_on_proven_methods_only(paper):
    """A stacked FedAL-family run's step launches are marked graph-ready exactly when a FedAL graph lever whose
    tests are in the checkout covers its method (tests/fedal/test_graph_ready.py, test_baselines_graph_ready.py):
    dropping a proven method's mark, or marking FedProto's own variant (its record selects rows on the host) or
    a method no lever covers, fails."""
    config, counts = paper
    graph_levers = [lv for lv in levers.active() if lv.paper == "fedal" and lv.kind == "launches"]
    proven = {m for lv in graph_levers for m in lv.methods}
    family = {"fedal", "fedmd_lf", "fedmd", "fccl", "fccl_plus", "cfd", "fedproto", "fd", "fedavg", "feddf", "feddf_al"}
    assert proven == plan.FEDAL_GRAPH_READY == family
    seen = set()
    for run in importlib.import_module("fedrepro.experiments.fedal").runs(config):
        if (run.method, run.dataset) in seen:
            continue
        seen.add((run.method, run.dataset))
        stacked = {**run.spec, "batched": True}
        work = plan.fedal_work(config, dataclasses.replace(run, spec=stacked), counts, plan._fedal_clients(run.setting))
        marked = run.method in proven and stacked.get("variant", "public_features") == "public_features"
        assert (work.graphed_launches > 0) is marked, run.method
        if marked:
            assert work.graphed_launches < work.launches  # evaluation stays eager
    assert family <= {m for m, _ in seen}  # every method checked on the paper's runs
    own = _run(config, "fedal", next(d for m, d in seen if m == "fedproto"), "fedproto")
    own = dataclasses.replace(own, spec={**own.spec, "batched": True, "variant": "prototypes"})
    assert plan.fedal_work(config, own, counts, plan._fedal_clients(own.setting)).graphed_launches == 0


def test_the_planner_prices_the_lever_column_by_each_units_ratio(paper, monkeypatch):
    config, counts = paper
    today, constants = plan.plan_and_constants(config, counts=counts)
    in_checkout = levers.active()  # the levers whose tests this checkout holds
    for job in (j for per in today.values() for j in per["all runs"]):
        assert job.lever_ratio == pytest.approx(levers.ratio(constants, job.work, job.paper, job.key[1], in_checkout))
    monkeypatch.setattr(levers.Lever, "missing_evidence", lambda self, repo=levers.REPO: [])
    planned, same = plan.plan_and_constants(config, counts=counts)
    assert same == constants
    hours = {p: sum(j.gpu_hours for j in per["all runs"]) for p, per in planned.items()}
    assert hours == {p: sum(j.gpu_hours for j in per["all runs"]) for p, per in today.items()}  # today unchanged
    applied = levers.active()
    for per in planned.values():
        for job in per["all runs"]:
            expected = levers.ratio(constants, job.work, job.paper, job.key[1], applied)
            assert job.lever_hours == pytest.approx(job.gpu_hours * expected)
            if job.paper == "fedal" and job.key[1] not in plan.FEDAL_GRAPH_READY:
                assert job.lever_ratio == 1.0  # only the proven stacked steps are graph-ready
    for paper_name in ("fedsc", "dpzv", "fedal"):
        assert sum(j.lever_hours for j in planned[paper_name]["all runs"]) < hours[paper_name]
    text = plan.report(planned, plan.load_costs(), constants)
    assert "with levers (GPU-h)" in text and "| yes |" in text and "400-hour goal" in text and "saves alone" in text


def test_a_first_order_bert_epoch_marks_its_clients_training_not_the_server_or_the_evaluation(paper):
    """VAFL and VFL-CZOFO on Amazon: each round's client step (the BERT's forward, backward and SGD step) runs
    under `precision: bf16`; the server's head and the evaluation forwards stay fp32. Without BERT, none."""
    from fedrepro.data.partition import vertical_partition

    config, counts = paper
    for method in ("vafl", "vfl_czofo"):
        run = _run(config, "dpzv", "amazon_polarity", method)
        spec, info = run.spec, plan.DATASETS["amazon_polarity"]
        partition = config["dpzv"]["datasets"]["amazon_polarity"]["partition"]
        shapes = vertical_partition(info.input_shape, partition["split"], partition["clients"]).feature_shapes
        holdout = float(spec.get("val_fraction", 0.0)) if spec.get("val") == "holdout" else 0.0
        rounds = int(plan._n_train(config, "amazon_polarity") * (1 - holdout)) // int(spec["batch_size"])
        options = {**spec.get("client_kwargs", {}), "embed_dim": int(spec["embed_dim"])}
        steps = [
            Step.of(spec["client_model"], options, tuple(s), int(spec["batch_size"]), "train", "sgd") for s in shapes
        ]
        work = plan.dpzv_work(config, run, counts)
        assert work.autocast_flops == pytest.approx(sum(counts(step).flops for step in steps) * rounds)
        assert work.flops > work.autocast_flops  # the server's head and the evaluation
        mnist = _run(config, "dpzv", "mnist", method)  # per client, as a BERT runs (the stacked path drops marks)
        alone = dataclasses.replace(mnist, spec={**mnist.spec, "stack_clients": False})
        assert plan.dpzv_work(config, alone, counts).autocast_flops == 0
