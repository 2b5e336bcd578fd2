"""FCCL and FCCL+ with each architecture's clients stacked into one program (issue 30) give the
per-client loop's numbers: parameters, BatchNorm running statistics (the clients' and the frozen
intra-domain teachers'), Adam state, streams, the wire and every metric, in float64."""

from __future__ import annotations

import pytest
import torch

from fedrepro.algorithms.fedal.fccl import FCCL, build
from fedrepro.fl.loop import run_rounds

from .helpers import config
from .test_batched import ASSIGNMENT, POOL, _images, _same_runs, assert_resumes_exactly, assert_same

pytestmark = pytest.mark.usefixtures("float64")

METHODS = {"fccl": False, "fccl_plus": True}


def _run(method: str, batched: bool, rounds: int = 2):
    torch.manual_seed(0)
    algo = FCCL(
        _images(),
        POOL,
        config(tau=2, batch_size=6, record_messages=True),
        0,
        plus=METHODS[method],
        pretrain_iters=3,
        local_steps=3,  # not tau: the local stage's own step count
        assignment=ASSIGNMENT,
        batched=batched,
    )
    return algo, run_rounds(algo, rounds)


@pytest.mark.parametrize("method", METHODS)
def test_batched_clients_match_the_per_client_loop(method):
    assert torch.get_default_dtype() is torch.float64
    reference, batched = _run(method, batched=False), _run(method, batched=True)
    _same_runs(reference, batched)
    assert ("similarity" in reference[0].wire.kinds("server")) is METHODS[method]  # FCCL+'s second upload


def test_the_intra_teachers_pretrain_alike_and_their_statistics_move_per_client():
    """The batched pretraining gives the per-client teachers; their training-mode forwards in the local
    stage move each teacher's own BatchNorm statistics (saved in the checkpoint state)."""
    (ref, _), (bat, _) = _run("fccl", False, rounds=0), _run("fccl", True, rounds=0)
    assert_same([m.state_dict() for m in ref.intra], [m.state_dict() for m in bat.intra], "pretrained")
    before = [m.state_dict()["body.features.1.bn1.running_mean"].clone() for m in bat.intra]
    bat.round(1)
    after = [m.state_dict()["body.features.1.bn1.running_mean"] for m in bat.intra]
    assert all(not torch.equal(a, b) for a, b in zip(before, after))


def test_a_batched_run_resumes_from_its_checkpoint_state():
    assert_resumes_exactly(lambda rounds: _run("fccl", batched=True, rounds=rounds)[0])


@pytest.mark.parametrize(("spec", "expected"), [({}, False), ({"batched": True}, True), ({"batched": False}, False)])
@pytest.mark.parametrize("method", METHODS)
def test_the_spec_flag_picks_the_path(method, spec, expected):
    """Default: batched on a GPU only (these tensors are on the CPU)."""
    algo = build(_images(), POOL, config(), 0, {"method": method, "pretrain_iters": 1, **spec})
    assert algo.batched is expected and bool(algo._groups) is expected


@pytest.mark.parametrize("batched", [False, True])
def test_fccl_clients_start_from_their_pretrained_teacher_pretrained_once(batched):
    """The authors' FCCL loads the pretrained intra-domain teacher into each client's model; the
    pipeline's spec key `pretrain_iters` also reaches TrainConfig, which must not pretrain the
    clients a second time (same streams and models as without it)."""

    def build_with(train_pretrain: int) -> FCCL:
        torch.manual_seed(0)
        cfg = config(tau=2, batch_size=6, pretrain_iters=train_pretrain)
        return FCCL(_images(), POOL, cfg, 0, pretrain_iters=3, assignment=ASSIGNMENT, batched=batched)

    pipeline, plain = build_with(3), build_with(0)
    for client, teacher in zip(pipeline.clients, pipeline.intra):
        assert_same(client.model.state_dict(), teacher.state_dict(), client.name)
    assert_same(pipeline.state_dict(), plain.state_dict())
