"""The shared asynchronous VFL loop: schedule, loaders, rounds, evaluation, settings and resume."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from fedrepro.algorithms.dpzv.base import Client, VFLAlgorithm, VFLSettings, build_vfl_data, embedding_input_scale
from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.vafl import VAFL
from fedrepro.algorithms.dpzv.vfl_czofo import VFLCZOFO
from fedrepro.data.partition import vertical_partition
from fedrepro.fl.loop import Checkpoint, run_rounds
from tests.dpzv.conftest import tiny_images, tiny_settings

SGD_SERVER = {"server_update": "sgd"}


# ------------------------------------------------------------------------------------ schedule


def test_permutation_schedule_gives_every_client_one_pass_per_epoch_in_random_order(tiny_data):
    """VFL-CZOFO's schedule: within each epoch every client is active exactly floor(D/B) times."""
    algo = DPZV(tiny_data, tiny_settings(schedule="permutation", extra=SGD_SERVER), seed=0)
    per_epoch = algo.rounds_per_epoch
    picks = [algo.next_client() for _ in range(3 * per_epoch)]
    epochs = [picks[i * per_epoch : (i + 1) * per_epoch] for i in range(3)]
    for epoch in epochs:
        assert np.bincount(epoch, minlength=2).tolist() == [algo.batches_per_pass] * 2
    assert epochs[0] != sorted(epochs[0]) and epochs[0] != sorted(epochs[0], reverse=True)
    assert epochs[0] != epochs[1]


def test_random_schedule_draws_clients_by_their_weights(tiny_data):
    """Algorithm 1: each server round activates client m with probability q_m (uniform by default)."""
    n = 4000
    uniform = DPZV(tiny_data, tiny_settings(extra=SGD_SERVER), seed=0)
    share = np.mean([uniform.next_client() for _ in range(n)])
    assert share == pytest.approx(0.5, abs=4 * math.sqrt(0.25 / n))
    weighted = DPZV(tiny_data, tiny_settings(client_weights=[1, 3], extra=SGD_SERVER), seed=0)
    assert weighted.weights.tolist() == [0.25, 0.75]
    share = np.mean([weighted.next_client() for _ in range(n)])
    assert share == pytest.approx(0.75, abs=4 * math.sqrt(0.75 * 0.25 / n))


@pytest.mark.parametrize("weights", [[1.0], [1.0, 0.0], [1.0, -1.0], [1, 1, 1]])
def test_client_weights_must_be_one_positive_number_per_client(weights, tiny_data):
    with pytest.raises(ValueError, match="client_weights"):
        DPZV(tiny_data, tiny_settings(client_weights=weights, extra=SGD_SERVER), seed=0)


def test_client_loader_walks_an_epoch_wise_permutation_with_drop_last():
    x = torch.zeros(9, 1)
    client = Client(0, torch.nn.Linear(1, 1), x, batch_size=3, seed=0)
    first = np.concatenate([client.next_batch() for _ in range(3)])
    assert sorted(first.tolist()) == list(range(9))  # one pass: every sample once
    second = np.concatenate([client.next_batch() for _ in range(3)])
    assert sorted(second.tolist()) == list(range(9)) and not np.array_equal(first, second)
    short = Client(0, torch.nn.Linear(1, 1), torch.zeros(7, 1), batch_size=3, seed=0)
    batches = [short.next_batch() for _ in range(3)]
    assert len(set(np.concatenate(batches[:2]).tolist())) == 6  # the 7th sample is dropped, not wrapped
    assert all(len(b) == 3 for b in batches)


# ------------------------------------------------------------------------------------ rounds


def test_round_runs_its_share_of_server_rounds_and_reports_it(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(epochs=2, evals_per_epoch=3, extra=SGD_SERVER), seed=0)
    assert algo.rounds_per_epoch == 2 * (tiny_data.num_train // 8) and algo.num_blocks == 6
    seen = []
    exchange = algo.exchange
    algo.exchange = lambda m, ids: seen.append(m) or exchange(m, ids)
    losses = []
    answer = algo.server_answer

    def spy(m, msg):
        reply, stats = answer(m, msg)
        losses.append(stats["train_loss"])
        return reply, stats

    algo.server_answer = spy
    for t in (1, 2):
        start = len(seen)
        row = algo.round(t)
        expected_rounds = (t * algo.total_rounds) // 6
        assert row["server_round"] == expected_rounds == len(seen)
        assert row["epoch"] == expected_rounds / algo.rounds_per_epoch
        assert row["train_loss"] == pytest.approx(np.mean(losses[start:]))
        up = sum(msg.nbytes for msg in algo.wire.messages if msg.receiver == "server")
        down = sum(msg.nbytes for msg in algo.wire.messages if msg.receiver != "server")
        assert (row["bytes_up"], row["bytes_down"]) == (up, down)
    sent_in = [msg.round for msg in algo.wire.messages]  # each message is stamped with its server round
    assert sent_in == [r for r in range(1, len(seen) + 1) for _ in range(2)]


def test_batch_larger_than_the_training_set_is_rejected(tiny_data):
    with pytest.raises(ValueError, match="batch_size"):
        DPZV(tiny_data, tiny_settings(batch_size=tiny_data.num_train + 1, extra=SGD_SERVER), seed=0)
    DPZV(tiny_data, tiny_settings(batch_size=tiny_data.num_train, extra=SGD_SERVER), seed=0)


def test_table_starts_at_zeros_or_with_every_clients_uploaded_initial_embeddings(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(table_init="forward", eval_batch=5, extra=SGD_SERVER), seed=0)
    with torch.no_grad():
        for client in algo.clients:
            assert torch.allclose(algo.server.table[:, client.index], client.model(client.x), atol=1e-6)
    uploads = [m for m in algo.wire.messages if m.kind == "initial_embeddings"]
    assert [m.sender for m in uploads] == [c.name for c in algo.clients]
    assert sum(m.numel for m in uploads) == algo.server.table.numel()
    zeros = DPZV(tiny_data, tiny_settings(extra=SGD_SERVER), seed=0)  # the default
    assert not zeros.server.table.any() and not zeros.wire.messages


def test_server_inputs_replace_one_slot_without_touching_the_table(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(extra=SGD_SERVER), seed=0)
    algo.server.input_scale = 0.5
    table = algo.server.table.clone()
    ids = torch.tensor([3, 1])
    h = torch.ones(2, 4)
    rows = algo.server.inputs(ids, 1, h).reshape(2, 2, 4)
    assert torch.equal(rows[:, 0], 0.5 * table[ids, 0]) and torch.equal(rows[:, 1], 0.5 * h)
    assert torch.equal(algo.server.table, table)


# ------------------------------------------------------------------------------------ evaluation


def reference_accuracy(algo, xs, y):
    with torch.no_grad():
        emb = torch.cat([c.model(x) for c, x in zip(algo.clients, xs)], dim=1)
        logits = algo.server.head(algo.server.input_scale * emb)
    return float((logits.argmax(1) == y).float().mean()), float(F.cross_entropy(logits, y))


def test_evaluation_uses_fresh_embeddings_and_keeps_the_best_validation_model(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(eval_batch=5, extra=SGD_SERVER), seed=0)
    out = algo.evaluate(0)
    for split, xs, y in (("val", tiny_data.val, tiny_data.y_val), ("test", tiny_data.test, tiny_data.y_test)):
        acc, loss = reference_accuracy(algo, xs, y)
        assert out[f"{split}_acc"] == pytest.approx(acc) and out[f"{split}_loss"] == pytest.approx(loss, rel=1e-5)
    assert algo.best == {
        "val_acc": out["val_acc"],
        "test_acc": out["test_acc"],
        "test_loss": out["test_loss"],
        "round": 0,
        "epoch": 0.0,
    }
    algo.server_round = algo.rounds_per_epoch // 2
    algo.evaluate(1)  # the same validation accuracy is no improvement
    assert algo.best["round"] == 0
    algo.best["val_acc"] = out["val_acc"] + 0.01
    algo.evaluate(2)  # worse than the best so far
    assert algo.best["round"] == 0
    algo.best["val_acc"] = out["val_acc"] - 0.01
    algo.evaluate(3)
    assert algo.best["round"] == 3 and algo.best["epoch"] == 0.5


def test_validation_on_the_test_set_reports_the_test_numbers(tiny_data):
    x_tr, y_tr, x_te, y_te = tiny_images()

    p = vertical_partition((1, 8, 8), "rows", 2)
    data = build_vfl_data(x_tr, y_tr, x_te, y_te, p.features, p.feature_shapes, 3, "image", val="test")
    data.val = data.test  # the same tensors: evaluated once
    algo = DPZV(data, tiny_settings(extra=SGD_SERVER), seed=0)
    out = algo.evaluate(0)
    assert (out["val_acc"], out["val_loss"]) == (out["test_acc"], out["test_loss"])


def test_summary_counts_parameters_and_the_run(tiny_data):
    algo = DPZV(tiny_data, tiny_settings(extra=SGD_SERVER), seed=0)
    algo.evaluate(0)
    summary = algo.summary()
    assert summary["client_params"] == [sum(p.numel() for p in c.model.parameters()) for c in algo.clients]
    assert summary["server_params"] == sum(p.numel() for p in algo.server.head.parameters())
    assert summary["rounds_per_epoch"] == algo.rounds_per_epoch and summary["best"] == algo.best
    assert summary["best"]["test_acc"] == algo.best["test_acc"]


# ------------------------------------------------------------------------------------ settings and data


@pytest.mark.parametrize(
    "bad",
    [
        {"batch_size": 0},
        {"epochs": 0},
        {"evals_per_epoch": 0},
        {"embed_dim": 0},
        {"server_hidden": 0},
        {"momentum": 1.0},
        {"momentum": -0.1},
        {"delta": 0.0},
        {"delta": 1.0},
        {"schedule": "round_robin"},
        {"table_init": "random"},
    ],
)
def test_settings_reject_values_outside_their_range_and_name_the_key(bad):
    with pytest.raises(ValueError, match=rf"^{next(iter(bad))} "):
        VFLSettings(**bad)


def test_settings_accept_the_edges_of_their_ranges():
    VFLSettings(
        batch_size=1,
        epochs=1,
        evals_per_epoch=1,
        embed_dim=1,
        server_hidden=1,
        momentum=0.0,
        delta=1e-9,
        schedule="permutation",
        table_init="zeros",
    )


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1])
def test_holdout_fraction_must_lie_strictly_between_0_and_1(fraction):
    x_tr, y_tr, x_te, y_te = tiny_images()

    p = vertical_partition((1, 8, 8), "rows", 2)
    with pytest.raises(ValueError, match="val_fraction"):
        build_vfl_data(x_tr, y_tr, x_te, y_te, p.features, p.feature_shapes, 3, "image", val_fraction=fraction)


def test_several_views_of_a_client_are_stacked_as_channels():
    """A multiview client slice (views, c, h, w) reaches its model as (views * c, h, w)."""
    from fedrepro.algorithms.dpzv.base import _client_view

    x = np.arange(3 * 2 * 2 * 4 * 4).reshape(3, 2, 2, 4, 4)
    piece = _client_view(x, np.arange(2 * 2 * 4 * 4), (2, 2, 4, 4))
    assert piece.shape == (3, 4, 4, 4) and np.array_equal(piece, x.reshape(3, 4, 4, 4))


def test_holdout_is_a_seeded_disjoint_split_of_the_training_set():
    x_tr, y_tr, x_te, y_te = tiny_images()

    p = vertical_partition((1, 8, 8), "rows", 2)
    x_tr = np.arange(96 * 64).reshape(96, 1, 8, 8) % 251  # rows told apart by their pixels
    x_tr = x_tr.astype(np.uint8)
    data = build_vfl_data(
        x_tr, y_tr, x_te, y_te, p.features, p.feature_shapes, 3, "text", val_fraction=0.25, split_seed=4
    )
    order = np.random.default_rng(4).permutation(96)
    val_idx, train_idx = np.sort(order[:24]), np.sort(order[24:])
    assert data.train[0].dtype == torch.long  # text: token ids
    assert torch.equal(data.y_val, torch.as_tensor(y_tr[val_idx])) and torch.equal(
        data.y_train, torch.as_tensor(y_tr[train_idx])
    )
    assert torch.equal(data.val[1], torch.as_tensor(x_tr[val_idx][:, :, 4:].astype(np.int64)))


def test_embedding_input_scale_is_the_closed_form():
    assert embedding_input_scale(2.0, 0.0, 16) == 1.0
    for sigma in (1.0, 0.5, 3.0):
        assert embedding_input_scale(2.0, sigma, 16) == pytest.approx(1 / math.sqrt(1 + 16 * sigma**2 / 4))


def test_vfl_algorithm_runs_on_the_cpu_by_default(tiny_data):
    class Bare(VFLAlgorithm):
        pass

    algo = Bare(tiny_data, tiny_settings(), seed=0)
    assert algo.device == torch.device("cpu") and algo.ids_tensor(np.arange(3)).device.type == "cpu"


# ------------------------------------------------------------------------------------ resume


@pytest.mark.parametrize("cls", [VAFL, VFLCZOFO])
def test_first_order_checkpoint_resume_is_bit_exact(cls, tiny_data, tmp_path):
    """The clients' and server's SGD momentum buffers travel in the checkpoint."""
    settings = tiny_settings(epochs=2, eps=1.0, lr_server=0.05, lr_client=0.05)
    straight = run_rounds(cls(tiny_data, settings, seed=3), 2)
    ckpt = Checkpoint(tmp_path / "c.pt")
    run_rounds(cls(tiny_data, settings, seed=3), 1, ckpt)
    torch.manual_seed(123)
    resumed = run_rounds(cls(tiny_data, settings, seed=3), 2, ckpt)
    pd.testing.assert_frame_equal(resumed, straight)


# ------------------------------------------------------------------------------------ random streams


def test_every_party_draws_from_its_own_random_stream(tiny_data):
    """Clients, server and schedule each own a generator: no two produce the same draws."""
    algo = DPZV(tiny_data, tiny_settings(extra=SGD_SERVER), seed=0)
    numpy_streams = [c.rng for c in algo.clients] + [algo.server.rng, algo.schedule_rng]
    windows = []
    for stream in numpy_streams:  # the next 1000 raw words of each stream: no word in two streams
        twin = np.random.default_rng()
        twin.bit_generator.state = stream.bit_generator.state
        windows.append(set(twin.bit_generator.random_raw(1000).tolist()))
    assert sum(len(w) for w in windows) == len(set().union(*windows))
    torch_streams = [c.noise for c in algo.clients] + [algo.server.noise]
    draws = []
    for stream in torch_streams:
        twin = torch.Generator()
        twin.set_state(stream.get_state())
        draws.append(float(torch.randn((), generator=twin)))
    assert len(set(draws)) == len(draws)


def test_image_clients_take_the_channels_of_their_slice():
    """A client's first layer reads as many channels as its slice has (3 for colour images)."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(40, 3, 8, 8)).astype(np.uint8)
    y = rng.integers(0, 3, size=40)
    p = vertical_partition((3, 8, 8), "rows", 2)
    data = build_vfl_data(x[:32], y[:32], x[32:], y[32:], p.features, p.feature_shapes, 3, "image")
    algo = DPZV(data, tiny_settings(extra=SGD_SERVER), seed=0)
    first = next(m for m in algo.clients[0].model.modules() if isinstance(m, torch.nn.Conv2d))
    assert first.in_channels == 3
    assert algo.clients[0].model(data.train[0][:2]).shape == (2, 4)
