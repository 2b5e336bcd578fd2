"""FedProto (both variants), FD, FedAvg, FedDF and FedDF-AL with each architecture's clients stacked into
one program (issue 30) give the per-client loop's numbers: metrics, parameters, BatchNorm running
statistics, Adam state, data streams, the server's state and the wire, in float64 (test_batched's
fixture and tolerance). FedAvg and FedDF send every client its weights before any client uploads, so
their messages are compared as the same set per round."""

from __future__ import annotations

import pytest
import torch

from fedrepro.algorithms.fedal.fd import FD
from fedrepro.algorithms.fedal.fedavg import FedAvg
from fedrepro.algorithms.fedal.feddf import FedDF
from fedrepro.algorithms.fedal.fedproto import FedProto
from fedrepro.algorithms.fedal.server import AdversarialConfig
from fedrepro.fl.loop import run_rounds

from .helpers import config
from .test_batched import ASSIGNMENT, POOL, _images, _same_runs, assert_resumes_exactly

pytestmark = pytest.mark.usefixtures("float64")

SAME_DIM_POOL = [  # FedProto needs one feature dimension: two BatchNorm networks with 64-d features
    {"name": "wrn10_1", "options": {"in_channels": 3}},
    {"name": "wrn16_1", "options": {"in_channels": 3}},
]
ONE_ARCH = [0] * len(ASSIGNMENT)


def _build(method: str, batched: bool):
    cfg = config(tau=2, batch_size=6, record_messages=True)
    if method == "fedproto":
        return FedProto(_images(), SAME_DIM_POOL, cfg, 0, 0.5, assignment=ASSIGNMENT, batched=batched)
    if method == "fedproto_prototypes":  # 16 labels, 1 step of 4 samples a round: labels unseen before
        cfg = config(tau=1, batch_size=4, record_messages=True)
        variant = {"variant": "prototypes", "prototype_average": "count"}
        return FedProto(_images(k=16), SAME_DIM_POOL, cfg, 0, 0.5, **variant, assignment=ASSIGNMENT, batched=batched)
    if method == "fd":
        cfg = config(tau=1, batch_size=3, record_messages=True, kd_temperature=2.0)
        return FD(_images(k=8), POOL, cfg, 0, fd_weight=0.7, assignment=ASSIGNMENT, batched=batched)
    if method == "fedavg":
        return FedAvg(_images(), POOL[:1], cfg, 0, assignment=ONE_ARCH, batched=batched)
    adversarial = AdversarialConfig(hidden=(8,))
    al = method == "feddf_al_lf"
    return FedDF(_images(), POOL, cfg, 0, al, al, adversarial, 2e-3, ASSIGNMENT, batched)


def _run(method: str, batched: bool, rounds: int = 3):
    torch.manual_seed(0)
    algo = _build(method, batched)
    return algo, run_rounds(algo, rounds)


ORDERED = ["fedproto", "fedproto_prototypes", "fd"]
DOWNLINKS_FIRST = ["fedavg", "feddf", "feddf_al_lf"]


@pytest.mark.parametrize("method", ORDERED + DOWNLINKS_FIRST)
def test_batched_clients_match_the_per_client_loop(method):
    reference, batched = _run(method, batched=False), _run(method, batched=True)
    if method in DOWNLINKS_FIRST:
        for algo, _ in (reference, batched):
            algo.wire.messages.sort(key=str)
    _same_runs(reference, batched)


def test_the_prototype_runs_exercise_partly_known_labels():
    """After round 1 some labels have a global prototype and some do not, so the later rounds' regulariser
    covers part of a batch's rows: the equality test above checks the batched mask, not only all-or-nothing."""
    algo, rows = _run("fedproto_prototypes", batched=True, rounds=1)
    assert not bool(algo.known.all()) and bool(algo.known.any())
    assert rows["proto_mse"].isna().all()  # nothing known in round 1


@pytest.mark.parametrize("method", ["fedproto_prototypes", "fedavg", "fd"])
def test_a_batched_run_resumes_from_its_checkpoint_state(method):
    assert_resumes_exactly(lambda rounds: _run(method, batched=True, rounds=rounds)[0])


@pytest.mark.parametrize("method", ["fedproto", "fd", "fedavg", "feddf", "feddf_al"])
@pytest.mark.parametrize(("spec", "expected"), [({}, False), ({"batched": True}, True), ({"batched": False}, False)])
def test_the_spec_flag_picks_the_path(method, spec, expected):
    """Default: batched on a GPU only (these tensors are on the CPU)."""
    from fedrepro.algorithms.fedal import fd, fedavg, feddf, fedproto

    module = {"fedproto": fedproto, "fd": fd, "fedavg": fedavg, "feddf": feddf, "feddf_al": feddf}[method]
    pool = SAME_DIM_POOL if method == "fedproto" else POOL[:1] if method == "fedavg" else POOL
    discriminator = {"hidden": [8], "lr": 1e-3, "optimizer": "adam", "temperature": 2.0}
    algo = module.build(_images(), pool, config(), 0, {"method": method, "discriminator": discriminator, **spec})
    assert algo.batched is expected and bool(algo._groups) is expected
