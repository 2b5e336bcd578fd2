"""FedAL, FedMD-LF, FedMD and CFD with each architecture's clients stacked into one program (issue 30)
give the per-client loop's numbers: parameters, BatchNorm running statistics, Adam state, the
discriminator, the wire and every metric, in float64 so the tolerance is tight."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedrepro.algorithms.fedal.base import FedData, architecture_groups
from fedrepro.algorithms.fedal.cfd import CFD
from fedrepro.algorithms.fedal.fedal import FedAL
from fedrepro.algorithms.fedal.server import AdversarialConfig
from fedrepro.fl.loop import run_rounds

from .helpers import config

torch.set_num_threads(1)
POOL = [  # two architectures with BatchNorm: running statistics must stay per client
    {"name": "wrn10_1", "options": {"in_channels": 3}},
    {"name": "wrn10_2", "options": {"in_channels": 3}},
]
ASSIGNMENT = [0, 1, 0, 0, 1]  # groups of 3 and 2 clients
SWITCHES = {"fedal": (True, True), "fedmd_lf": (False, True), "fedmd": (False, False)}


pytestmark = pytest.mark.usefixtures("float64")


def _images(num_clients=5, k=4, public=24, seed=0) -> FedData:
    gen = torch.Generator().manual_seed(seed)

    def draw(n):
        return torch.randn(n, 3, 8, 8, generator=gen), torch.randint(0, k, (n,), generator=gen)

    xs, ys = zip(*(draw(10 + 3 * n) for n in range(num_clients)))  # unequal sizes: epochs end at different steps
    px, _ = draw(public)
    tx, ty = draw(20)
    return FedData(list(xs), list(ys), px, tx, ty, k)


def _run(method: str, batched: bool, rounds: int = 2, diagnostics: bool = False, **cfg):
    torch.manual_seed(0)
    if method == "cfd":
        algo = CFD(
            _images(),
            POOL,
            config(tau=2, batch_size=6, record_messages=True, **cfg),
            0,
            POOL[1],
            None,
            ASSIGNMENT,
            batched,
        )
        return algo, run_rounds(algo, rounds)
    use_al, use_lf = SWITCHES[method]
    algo = FedAL(
        _images(),
        POOL,
        config(tau=2, batch_size=6, record_messages=True, **cfg),
        seed=0,
        use_al=use_al,
        use_lf=use_lf,
        adversarial=AdversarialConfig(hidden=(8,)),
        assignment=ASSIGNMENT,
        batched=batched,
    )
    if diagnostics:
        algo.enable_diagnostics(every_rounds=1, batches=2)
    return algo, run_rounds(algo, rounds)


def assert_same(a, b, where="state"):
    """Nested dicts/lists of tensors and numbers equal within float64 tolerance (Adam's normalised
    step turns last-bit differences of near-zero gradients into up to ~2e-9 parameter ones; a
    shared statistic or a dropped loss term moves parameters by ~1e-3)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=lambda m: f"{where}: {m}")
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-7, abs=1e-9, nan_ok=True), where
    else:
        assert a == b, where


def _same_runs(reference, batched):
    (algo_ref, rows_ref), (algo_bat, rows_bat) = reference, batched
    assert list(rows_ref.columns) == list(rows_bat.columns)
    assert_same(rows_ref.to_dict("list"), rows_bat.to_dict("list"), "metrics")
    assert_same(algo_ref.state_dict(), algo_bat.state_dict())  # models (BN buffers), Adams, streams, wire, D
    assert algo_ref.wire.messages == algo_bat.wire.messages


@pytest.mark.parametrize("method", [*SWITCHES, "cfd"])
def test_batched_clients_match_the_per_client_loop(method):
    _same_runs(_run(method, batched=False), _run(method, batched=True))


def test_batched_clients_match_with_per_stage_adam_and_diagnostics():
    """A fresh Adam per stage resets the stacked state; Fig. 6's variances read client 0's anchors."""
    ref = _run("fedal", batched=False, diagnostics=True, adam_state="per_stage")
    _same_runs(ref, _run("fedal", batched=True, diagnostics=True, adam_state="per_stage"))
    assert "var_sigma_rg" in ref[1].columns


def test_batched_clients_match_without_sharing_the_first_anchor(monkeypatch):
    """The anchors' own (frozen, stacked) forward, run at every step when the first is not shared."""
    monkeypatch.setattr(FedAL, "share_first_anchor", False)
    _same_runs(_run("fedmd_lf", batched=False), _run("fedmd_lf", batched=True))


def assert_resumes_exactly(run) -> None:
    """`run(rounds)`: a batched run after `rounds` rounds. Resumed after round 1 from its checkpoint state, it
    ends round 2 in the state of the run done in one go (evaluated too: FedAvg's evaluation writes the
    global weights into client 0's model)."""
    whole, first, resumed = run(2), run(1), run(0)
    resumed.load_state_dict(first.state_dict())
    resumed.round(2)
    resumed.evaluate(2)
    assert_same(whole.state_dict(), resumed.state_dict())


def test_a_batched_run_resumes_from_its_checkpoint_state():
    assert_resumes_exactly(lambda rounds: _run("fedal", batched=True, rounds=rounds)[0])


def test_running_statistics_are_per_client():
    """Each client's BatchNorm running mean moved by its own batches (not a shared statistic)."""
    algo, _ = _run("fedmd", batched=True, rounds=1)
    stats = [dict(c.model.named_buffers())["body.features.1.bn1.running_mean"] for c in algo.clients]
    group = architecture_groups(ASSIGNMENT)[0]
    assert not torch.allclose(stats[group[0]], stats[group[1]])


def test_architecture_groups():
    assert architecture_groups([2, 0, 2, 1]) == [[1], [3], [0, 2]]


@pytest.mark.parametrize(("spec", "expected"), [({}, False), ({"batched": True}, True), ({"batched": False}, False)])
def test_the_spec_flag_picks_the_path(spec, expected):
    """Default: batched on a GPU only (these tensors are on the CPU)."""
    from fedrepro.algorithms.fedal.fedal import build

    algo = build(_images(), POOL, config(), 0, {"method": "fedmd", **spec})
    assert algo.batched is expected and bool(algo._groups) is expected
