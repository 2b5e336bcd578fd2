"""Unit tests of fedrepro.fl's building blocks, each against an independent computation.

Averaging against float64 numpy, batched local SGD against a per-client autograd loop, client
sampling against numpy's own draw, the wire's byte counts against numel * element size, the round
loop and the seed runner with a tiny fake algorithm (no model training, so they are fast, which
also keeps mutation testing of fl/ cheap).
"""

import json
import random

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedrepro import store
from fedrepro.fl import batched, loop, runner, seeding
from fedrepro.fl.aggregate import normalised, weighted_average
from fedrepro.fl.device import pick_device
from fedrepro.fl.loop import Checkpoint, parse_minutes, run_rounds
from fedrepro.fl.optim import SGD
from fedrepro.fl.precision import Precision
from fedrepro.fl.runner import _last_values, read_summary, run_health, run_seeds
from fedrepro.fl.sampling import clients_per_round, sample_clients
from fedrepro.fl.transport import Message, Wire
from fedrepro.pipeline import make_job

# ------------------------------------------------------------------------------------ aggregate


def test_normalised_weights_uniform_and_proportional():
    uniform = normalised(None, 4)
    assert uniform.dtype == torch.float64 and uniform.tolist() == [0.25] * 4
    assert normalised([0.5, 0.5], 2).tolist() == [0.5, 0.5]
    assert normalised([1, 3], 2).dtype == torch.float64
    np.testing.assert_allclose(normalised([2.0, 6.0, 0.0], 3).numpy(), [0.25, 0.75, 0.0])


@pytest.mark.parametrize("weights", [[1.0, 2.0], [1.0, -0.5, 2.0], [0.0, 0.0, 0.0]])
def test_normalised_rejects_wrong_count_negative_or_zero_sum(weights):
    with pytest.raises(ValueError):
        normalised(weights, 3)


def test_weighted_average_of_state_dicts_matches_float64_numpy():
    rng = np.random.default_rng(0)
    dicts = [
        {
            "w": torch.tensor(rng.standard_normal((2, 3)), dtype=torch.float32),
            "count": torch.tensor(c, dtype=torch.long),
        }
        for c in (1, 2, 6)
    ]
    weights = [1.0, 2.0, 1.0]
    out = weighted_average(dicts, weights)
    expected = sum(w * d["w"].double().numpy() for w, d in zip(weights, dicts)) / sum(weights)
    assert out["w"].dtype == torch.float32 and set(out) == {"w", "count"}
    np.testing.assert_allclose(out["w"].numpy(), expected, rtol=1e-6)
    assert out["count"].dtype == torch.long and out["count"].item() == 2  # (1 + 4 + 6) / 4 = 2.75 -> 2


def test_weighted_average_of_tensors_and_of_a_single_client():
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 6.0])
    assert weighted_average([a, b]).tolist() == [2.0, 4.0]
    assert weighted_average([a, b], [3.0, 1.0]).tolist() == [1.5, 3.0]
    assert weighted_average([{"w": a}])["w"].tolist() == [1.0, 2.0]


# ------------------------------------------------------------------------------------ batched


def linear_params(count: int, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {"weight": torch.randn(count, 3, 2, generator=gen), "bias": torch.randn(count, 3, generator=gen)}


def test_broadcast_repeats_independent_copies():
    params = {"w": torch.tensor([[1.0, 2.0]])}
    out = batched.broadcast(params, 3)
    assert out["w"].shape == (3, 1, 2) and torch.equal(out["w"][2], params["w"])
    out["w"][0, 0, 0] = 9.0
    assert out["w"][1, 0, 0] == 1.0 and params["w"][0, 0] == 1.0


def test_cross_entropy_loss_uses_the_given_parameters():
    model = nn.Linear(2, 3)
    loss = batched.cross_entropy_loss(model)
    params = {name: p[0] for name, p in linear_params(1).items()}
    x, y = torch.randn(5, 2), torch.tensor([0, 1, 2, 0, 1])
    expected = F.cross_entropy(x @ params["weight"].T + params["bias"], y)
    torch.testing.assert_close(loss(params, x, y), expected)


def reference_local_sgd(params, xs, ys, steps, lr, momentum, weight_decay):
    """One client at a time in float64: autograd gradient, weight decay, heavy-ball momentum."""
    out, mean_losses = {"weight": [], "bias": []}, []
    for c in range(params["weight"].shape[0]):
        w, b = params["weight"][c].double(), params["bias"][c].double()
        velocity, losses = None, []
        for s in range(steps):
            w_, b_ = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
            loss = F.cross_entropy(xs[s][c].double() @ w_.T + b_, ys[s][c])
            gw, gb = torch.autograd.grad(loss, [w_, b_])
            g = [gw + weight_decay * w, gb + weight_decay * b]
            velocity = g if velocity is None else [momentum * v + d for v, d in zip(velocity, g)]
            step = velocity if momentum else g
            w, b = w - lr * step[0], b - lr * step[1]
            losses.append(loss.item())
        out["weight"].append(w)
        out["bias"].append(b)
        mean_losses.append(np.mean(losses))
    return {k: torch.stack(v).float() for k, v in out.items()}, mean_losses


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 0.1)])
def test_local_sgd_matches_a_per_client_autograd_loop(momentum, weight_decay):
    clients, steps = 2, 3
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(clients, 4, 2, generator=gen) for _ in range(steps)]
    ys = [torch.randint(0, 3, (clients, 4), generator=gen) for _ in range(steps)]
    start = linear_params(clients)
    expected, expected_loss = reference_local_sgd(start, xs, ys, steps, 0.5, momentum, weight_decay)
    loss = batched.cross_entropy_loss(nn.Linear(2, 3))
    params, mean_loss = batched.local_sgd(
        loss, {k: v.clone() for k, v in start.items()}, lambda s: (xs[s], ys[s]), steps, 0.5, momentum, weight_decay
    )
    for name in expected:
        torch.testing.assert_close(params[name], expected[name], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mean_loss.numpy(), expected_loss, rtol=1e-5)


def test_local_sgd_with_no_steps_returns_the_start_and_zero_loss():
    start = linear_params(2)
    params, mean_loss = batched.local_sgd(
        batched.cross_entropy_loss(nn.Linear(2, 3)), dict(start), lambda s: None, 0, 0.5
    )
    assert torch.equal(params["weight"], start["weight"]) and mean_loss.tolist() == [0.0, 0.0]


def test_sgd_state_round_trip_keeps_buffers_not_started_yet():
    used, unused = torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)
    optimiser = SGD([used, unused], lr=0.1, momentum=0.9)
    used.grad = torch.tensor([1.0, 2.0])
    optimiser.step()  # `unused` has no gradient: its momentum buffer stays zero (b = 0.9 * 0 + d at its first step)
    restored = SGD([used, unused], lr=0.1, momentum=0.9)
    restored.load_state_dict(optimiser.state_dict())
    assert torch.equal(restored.buffers[1], torch.zeros(3)) and torch.equal(
        restored.buffers[0], torch.tensor([1.0, 2.0])
    )
    restored.load_state_dict({"buffers": [torch.tensor([3.0, 4.0]), None]})  # a checkpoint from before the zeros
    assert torch.equal(restored.buffers[1], torch.zeros(3))


# ------------------------------------------------------------------------------------ device, precision


def test_pick_device():
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device() == pick_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError):
        pick_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError):
            pick_device("cuda")


def test_precision_from_spec():
    assert Precision.from_spec({}) == Precision("fp32", False)
    assert Precision.from_spec({"precision": "bf16", "channels_last": 1}) == Precision("bf16", True)
    with pytest.raises(ValueError):
        Precision.from_spec({"precision": "fp16"})


class Recorder(nn.Module):
    """Returns its input (as float) and remembers the layout it was given."""

    def forward(self, x):
        self.channels_last = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
        self.dtype_inside = (x @ torch.ones(x.shape[-1], 1)).dtype if x.dim() == 2 else None
        return x


def test_precision_forward_layout_and_dtype():
    image, flat = torch.randn(2, 3, 4, 4), torch.randn(2, 3)
    model = Recorder()
    assert torch.equal(Precision("fp32", True).forward(model, image), image) and model.channels_last
    Precision("fp32", False).forward(model, image)
    assert not model.channels_last
    out = Precision("bf16", True).forward(model, flat)
    assert model.dtype_inside == torch.bfloat16 and out.dtype == torch.float32 and torch.equal(out, flat)
    Precision("fp32", False).forward(model, flat)
    assert model.dtype_inside == torch.float32


# ------------------------------------------------------------------------------------ sampling, seeding


def test_sample_clients_is_numpys_draw_without_replacement_sorted():
    chosen = sample_clients(np.random.default_rng(5), 10, 4)
    assert chosen.tolist() == sorted(np.random.default_rng(5).choice(10, size=4, replace=False).tolist())
    assert len(sample_clients(np.random.default_rng(0), 10, 1)) == 1
    with pytest.raises(ValueError):
        sample_clients(np.random.default_rng(0), 10, 0)


def test_sampling_everyone_draws_nothing_from_the_generator():
    rng = np.random.default_rng(3)
    assert sample_clients(rng, 4, 4).tolist() == [0, 1, 2, 3]
    assert sample_clients(rng, 4, 9).tolist() == [0, 1, 2, 3]
    assert rng.random() == np.random.default_rng(3).random()


def test_clients_per_round():
    assert clients_per_round(10, 1.0) == 10
    assert clients_per_round(10, 0.25) == 2  # round(2.5) = 2
    assert clients_per_round(10, 0.01) == 1  # at least `minimum`
    assert clients_per_round(10, 0.01, minimum=3) == 3
    assert clients_per_round(2, 0.5, minimum=5) == 2  # never more than there are
    for fraction in (0.0, 1.5):
        with pytest.raises(ValueError):
            clients_per_round(10, fraction)


def draws():
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_seed_everything_seeds_python_numpy_and_torch():
    seeding.seed_everything(2**32 + 7)  # numpy needs the seed reduced modulo 2**32
    big = draws()
    seeding.seed_everything(7)
    small = draws()
    assert big[1] == small[1] and big[0] != small[0]
    assert small[2] == float(torch.rand(1, generator=torch.Generator().manual_seed(7)))
    seeding.seed_everything(1)
    one = draws()
    seeding.seed_everything(65)
    assert draws()[1] != one[1]


def test_rng_state_round_trip_and_component_generators():
    seeding.seed_everything(3)
    state = loop.rng_state()
    first = draws()
    loop.set_rng_state(state)
    assert draws() == first
    assert torch.equal(
        torch.rand(3, generator=seeding.generator(4)), torch.rand(3, generator=torch.Generator().manual_seed(4))
    )
    assert seeding.generator(4).device == torch.device("cpu")


# ------------------------------------------------------------------------------------ transport


def test_wire_records_sizes_directions_and_hands_over_copies():
    wire = Wire()
    assert wire.round == 0
    weights = {"w": torch.zeros(2, 3), "b": [torch.zeros(4, dtype=torch.float64), 1.5], "n": (3,)}
    received = wire.send("client0", "server", "weights", weights)
    wire.round = 2
    wire.send("server", "client1", "model", torch.ones(5, dtype=torch.int8))
    assert wire.messages == [
        Message(0, "client0", "server", "weights", 6 + 4 + 1 + 1, 24 + 32 + 8 + 8),
        Message(2, "server", "client1", "model", 5, 5),
    ]
    assert wire.bytes_by_direction == {"up": 72, "down": 5}
    assert wire.kinds("server") == {"weights"} and wire.kinds("client1") == {"model"}
    assert isinstance(received["b"], list) and isinstance(received["n"], tuple) and received["b"][1] == 1.5
    received["w"] += 1
    received["b"][0] += 1
    assert weights["w"].sum() == 0 and weights["b"][0].sum() == 0


def test_unrecorded_wire_counts_bytes_and_restores_its_counters():
    wire = Wire(record=False)
    wire.send("client0", "server", "x", torch.zeros(3))
    assert wire.messages == [] and wire.bytes_by_direction == {"up": 12, "down": 0}
    wire.round = 4
    other = Wire()
    other.load_state_dict(wire.state_dict())
    assert other.round == 4 and other.bytes_by_direction == {"up": 12, "down": 0}
    with pytest.raises(TypeError):
        wire.send("a", "b", "text", "not a tensor")


# ------------------------------------------------------------------------------------ loop, runner


class Counter:
    """A federated algorithm without a model: its state is a count of rounds and a random draw."""

    def __init__(self, summary=None):
        self.rounds, self.evaluated, self.draw, self._summary = [], [], 0.0, summary

    def round(self, t):
        self.rounds.append(t)
        self.draw = float(torch.rand(1))
        return {"loss": 1.0 / t, "draw": self.draw}

    def evaluate(self, t):
        self.evaluated.append(t)
        return {"acc": t / 10}

    def state_dict(self):
        return {"rounds": list(self.rounds)}

    def load_state_dict(self, state):
        self.rounds = list(state["rounds"])


class CounterWithSummary(Counter):
    def summary(self):
        return self._summary


def test_run_rounds_evaluates_every_k_rounds_and_the_last():
    algo = Counter()
    metrics = run_rounds(algo, 5, eval_every=2)
    assert algo.rounds == [1, 2, 3, 4, 5] and algo.evaluated == [2, 4, 5]
    assert metrics["round"].tolist() == [1, 2, 3, 4, 5]
    assert metrics["acc"].isna().tolist() == [True, False, True, False, False]
    assert run_rounds(Counter(), 2)["acc"].tolist() == [0.1, 0.2]


def test_run_rounds_resumes_from_the_checkpoint_with_state_and_random_streams(tmp_path):
    seeding.seed_everything(0)
    whole = run_rounds(Counter(), 4)
    seeding.seed_everything(0)
    checkpoint = Checkpoint(tmp_path / "deep" / "folder" / "run.pt")
    run_rounds(Counter(), 2, checkpoint)
    torch.rand(5)  # the process moved on before it was killed
    resumed = Counter()
    metrics = run_rounds(resumed, 4, Checkpoint(checkpoint.path))
    assert resumed.rounds == [1, 2, 3, 4]
    pd.testing.assert_frame_equal(metrics, whole)


def seed_job(tmp_path, seeds=(0, 1)):
    return make_job(
        {"method": "counter"},
        {"metrics": str(tmp_path / "run/metrics.parquet"), "summary": str(tmp_path / "run/summary.json")},
        seeds=list(seeds),
    )


def test_run_seeds_outputs_summaries_and_health(tmp_path):
    job = seed_job(tmp_path)

    def build(seed):
        return CounterWithSummary(
            {
                "extra": np.float32(0.5),
                "status": "chance",
                "status_reason": "at chance",
            }
        )

    metrics = run_seeds(job, build, num_rounds=3, eval_every=2)
    assert metrics.index.tolist() == list(range(6)) and metrics["seed"].tolist() == [0, 0, 0, 1, 1, 1]
    assert metrics["acc"].isna().tolist() == [True, False, False] * 2
    assert pq.read_schema(job.output["metrics"]).pandas_metadata["index_columns"] == []
    text = (tmp_path / "run/summary.json").read_text()
    summary = json.loads(text)
    assert text == json.dumps(summary, indent=2) and read_summary(job.output["summary"]) == summary
    seed0 = summary["seeds"]["0"]
    assert seed0["final"] == {
        "round": 3,
        "loss": pytest.approx(1 / 3),
        "draw": pytest.approx(seed0["final"]["draw"]),
        "acc": pytest.approx(0.3),
    }
    assert seed0["extra"] == 0.5 and seed0["status"] == "chance" and seed0["status_reason"] == "at chance"
    for seed in (0, 1):
        entry = seed_entry(job, seed)
        assert pq.read_schema(entry / "metrics.parquet").pandas_metadata["index_columns"] == []
        assert (entry / "summary.json").read_text().startswith("{\n  ")
    assert (tmp_path / "run/.checkpoint/seed0.pt").exists()


def seed_entry(job, seed):
    store, slot, state = runner.seed_slot(job, seed)
    return store.entry(slot, state)


def test_a_seed_with_only_its_metrics_file_is_recomputed(tmp_path):
    job = seed_job(tmp_path, seeds=[0])
    run_seeds(job, lambda seed: Counter(), num_rounds=2)
    (seed_entry(job, 0) / "summary.json").unlink()
    (tmp_path / "run/.checkpoint/seed0.pt").unlink()
    calls = []
    run_seeds(job, lambda seed: calls.append(seed) or Counter(), num_rounds=2)
    assert calls == [0]


def test_run_health_takes_the_worst_of_the_metrics_and_the_summary():
    finite = pd.DataFrame({"round": [1, 2], "loss": [1.0, 0.5]})
    assert run_health(finite, {}).ok
    assert run_health(finite, {"status": "chance", "status_reason": "x"}).status == "chance"
    nan = finite.assign(seed=[0, 0], loss=[1.0, np.inf])
    assert run_health(nan, {"status": "chance"}).status == "diverged"


def test_last_values_are_the_last_non_missing_python_values():
    frame = pd.DataFrame({"seed": [3, 3], "round": [1, 2], "acc": [0.5, np.nan], "name": ["a", "b"]})
    values = _last_values(frame)
    assert values == {"round": 2, "acc": 0.5, "name": "b"}
    assert type(values["round"]) is int and type(values["acc"]) is float


@pytest.mark.parametrize("value", [None, "", "None", "null", "NULL", 0])
def test_checkpoint_minutes_spelled_as_nothing_mean_by_rounds_only(value):
    assert parse_minutes(value) is None


def test_run_seeds_passes_checkpoint_every_on(tmp_path, monkeypatch):
    saved = []
    original = Checkpoint.save
    monkeypatch.setattr(
        Checkpoint, "save", lambda self, algo, done, rows: saved.append(done) or original(self, algo, done, rows)
    )
    run_seeds(seed_job(tmp_path, seeds=[0]), lambda seed: Counter(), num_rounds=3, checkpoint_every=2)
    assert saved == [2, 3]


def test_finished_checkpoint_is_copied_where_hard_links_fail(tmp_path, monkeypatch):
    def no_links(source, target):
        raise OSError("cross-device link")

    monkeypatch.setattr(store.os, "link", no_links)
    source, target = tmp_path / "a.pt", tmp_path / "new" / "folder" / "b.pt"
    source.write_bytes(b"checkpoint")
    store.share(source, target)
    assert target.read_bytes() == b"checkpoint"
