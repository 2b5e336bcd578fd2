"""What the planner charges for a zeroth-order round is what the code launches: the direction's passes
(zo.norm_launches / add_launches / step_launches), each method's round (client_direction_launches),
counted with fedrepro.experiments.cost.count on the CPU, and fedrepro.plan.dpzv_work built from them."""

import dataclasses
import importlib

import pytest
import torch

from fedrepro import plan
from fedrepro.algorithms.dpzv import dpzv, zo, zoo_vfl
from fedrepro.algorithms.dpzv.zo import Direction, ZOUpdater, add_launches, norm_launches, step_launches
from fedrepro.experiments.cost import DIRECTION, ZO_METHODS, Step, Work, count, count_step, parameter_numels
from tests.dpzv.conftest import tiny_settings


def params_of(layers):
    torch.manual_seed(0)
    params = list(torch.nn.Sequential(*layers).parameters())
    return params, len(zo.bucket_sizes([p.numel() for p in params]))


THREE_BUCKETS = [torch.nn.Linear(7, 5), torch.nn.Linear(5, 3), torch.nn.Linear(3, 7, bias=False)]
ONE_BUCKET = [torch.nn.Linear(7, 5, bias=False)]


@pytest.mark.parametrize("layers", [THREE_BUCKETS, ONE_BUCKET])
@pytest.mark.parametrize("kind", ["sphere", "gaussian"])
def test_each_pass_launches_what_zo_says(layers, kind):
    params, b = params_of(layers)
    assert b == (3 if layers is THREE_BUCKETS else 1)
    u = None

    def build():
        nonlocal u
        u = Direction(params, 3, kind)

    assert count(build).launches == norm_launches(b, kind)
    assert count(lambda: u.add_(1e-3)).launches == add_launches(b, kind)
    answer = torch.tensor(1.0, dtype=torch.float64)  # a server's answer as the round passes it: never read
    for momentum in (0.0, 0.9):
        updater = ZOUpdater(params, lr=0.1, momentum=momentum)
        updater.step(u, answer)  # the first step allocates the momentum buffers (once per run)
        assert count(lambda updater=updater: updater.step(u, answer)).launches == step_launches(b, momentum)


def client_round(algo, m):
    """One client's side of a round (query and apply), the server's answer replaced by a constant (a 0-dim
    float32 tensor, as the server sends it)."""
    client = algo.clients[m]
    ids = client.next_batch()
    payload, direction = algo.client_query(client, ids)
    algo.client_apply(client, direction, torch.tensor(0.5))


@pytest.mark.parametrize("module", [dpzv, zoo_vfl])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_a_client_round_is_two_forwards_and_client_direction_launches(tiny_data, module, momentum):
    algo = module.ALGORITHM(tiny_data, tiny_settings(extra={"zo_momentum": momentum}), seed=0)
    client_round(algo, 0)  # warm: momentum buffers, ZOO-VFL's copy
    client = algo.clients[0]
    x = client.x[algo.ids_tensor(client.next_batch())]
    with torch.no_grad():
        forward = count(lambda: client.model(x)).launches
    numels = [p.numel() for p in client.params]
    buffers = sum(1 for _ in client.model.buffers())
    gather = 1  # client.x[ids]: the batch (one launch the planner leaves out)
    expected = gather + 2 * forward + module.client_direction_launches(numels, buffers, algo.direction, momentum)
    assert count(lambda: client_round(algo, 0)).launches == expected
    assert len(zo.bucket_sizes(numels)) > 1  # the tiny CNN's direction has several buckets


def test_zoo_vfl_copies_the_buffers_when_the_model_has_them():
    assert zoo_vfl.client_direction_launches([4, 4], 1, "sphere", 0.9) == (
        zoo_vfl.client_direction_launches([4, 4], 0, "sphere", 0.9) + 1
    )
    assert dpzv.client_direction_launches([4, 4], 1, "sphere", 0.9) == dpzv.client_direction_launches(
        [4, 4], 0, "sphere", 0.9
    )


def test_bert_base_direction_is_five_buckets_and_resnet18_eight():
    """What the planner counts at paper scale (meta device): bucket counts of the two launch-bound clients."""
    bert = Step.of("vfl_text_encoder", {"pretrained_dir": "x", "embed_dim": 16}, (384,), 32, "forward")
    resnet = Step.of("vfl_resnet18", {"norm": "group", "embed_dim": 16, "in_channels": 3}, (3, 32, 32), 32, "forward")
    (bert_numels, bert_buffers), (resnet_numels, _) = parameter_numels(bert), parameter_numels(resnet)
    assert (len(bert_numels), sum(bert_numels), bert_buffers) == (199, 108_903_952, 2)
    assert len(zo.bucket_sizes(bert_numels)) == 5 and len(zo.bucket_sizes(resnet_numels)) == 8
    # per bucket: the norm's randn and dot, three perturbations' and the step's randn and add; besides: the norm's
    # stack, sum, fill, sqrt and division, two per perturbation's coefficient, Delta's float64 copy, and the
    # step's coefficient (two), buffer decay and parameter update (the coefficients stay on the device)
    assert dpzv.client_direction_launches(bert_numels, bert_buffers, "sphere", 0.9) == 10 * 5 + 5 + 3 * 2 + 1 + 4


class FixedCounts:
    """Every training step costs TRAIN, every forward FORWARD (the planner's counts table stubbed); a
    zeroth-order direction is counted (cost.direction_step)."""

    TRAIN, FORWARD = Work(1e9, 300), Work(3e8, 100)

    def __call__(self, step):
        if step.mode == DIRECTION:
            return count_step(step)
        return self.TRAIN if step.mode == "train" else self.FORWARD


@pytest.fixture(scope="module")
def paper_config():
    return plan.load_config(["config.yaml", "configs/paper.yaml"])


def _run(config, dataset, method):
    from fedrepro.experiments import dpzv as planner

    return next(r for r in planner.runs(config) if (r.dataset, r.method) == (dataset, method))


@pytest.mark.parametrize("method", ["dpzv", "zoo_vfl"])
def test_a_modelnet40_round_charges_the_client_and_head_directions(paper_config, method):
    """ModelNet40 (ResNet-18 clients, `server_update: zo`): two client forwards and the client's direction,
    two head forwards and the head's direction, 3,312 rounds per epoch (the per-client path; the stacked
    one is built from this price in test_stacked_cost.py)."""
    run = _run(paper_config, "modelnet40", method)
    run = dataclasses.replace(run, spec={**run.spec, "stack_clients": False})
    assert run.spec["server_update"] == "zo"
    counts = FixedCounts()
    module = importlib.import_module(ZO_METHODS[method])
    embed, hidden = run.spec["embed_dim"], run.spec["server_hidden"]
    options = {**run.spec["client_kwargs"], "embed_dim": embed, "in_channels": 3}
    numels, buffers = parameter_numels(Step.of("vfl_resnet18", options, (3, 32, 32), 32, "forward"))
    head = Step.of(
        "vfl_server", {"in_features": 12 * embed, "num_classes": 40, "hidden": hidden}, (12 * embed,), 32, "forward"
    )
    head_numels, head_buffers = parameter_numels(head)
    per_round = counts.FORWARD * 4 + Work(
        0,
        module.client_direction_launches(numels, buffers, "sphere", 0.9)
        + module.client_direction_launches(head_numels, head_buffers, "sphere", 0.9),
    )
    rows = int(9843 * 0.9)
    evaluation = counts.FORWARD * (12 * (9843 - rows + 2468) / 32)
    epoch = plan.dpzv_work(paper_config, run, counts)
    assert epoch.launches == pytest.approx((per_round * 3312 + evaluation).launches)


def test_vfl_czofo_clients_are_charged_a_training_step(paper_config):
    """VFL-CZOFO's clients backpropagate the server's estimate (first order): VAFL's work, not a ZO round."""
    counts = FixedCounts()
    czofo = plan.dpzv_work(paper_config, _run(paper_config, "modelnet40", "vfl_czofo"), counts)
    vafl = plan.dpzv_work(paper_config, _run(paper_config, "modelnet40", "vafl"), counts)
    assert czofo == vafl
