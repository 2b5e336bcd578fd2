"""A DPZV server round is ready for CUDA graphs, proven on the CPU (the "CUDA graphs" lever of fedrepro.plan).

* No host sync inside a server round, for DPZV and its three baselines: `aten._local_scalar_dense`, the op every
  host read of a device value goes through, is counted under a dispatch mode (tests/graph_ready.py).
* The records and parameters are bit for bit those of the round that read its values on the host (the code
  before the change: the sphere's scale by math.sqrt of float(||z||^2), Python coefficients into
  `add(alpha=...)`, every statistic by float() each round), rebuilt here by patching those reads back in.
* The round of each method (`exchange_drawn`: client query, server answer and step, client update) compiles
  with torch.compile(fullgraph=True) in one graph and gives eager's numbers. Its randomness is drawn on the host
  before the round, from the same generators in the same order (the directions' bucket draws,
  `zo.draw_buckets`; Delta's noise, `DPZV.server_draws`; the embedding noise, `ZOOVFL.noise_draws` and
  `EmbeddingBaseline.noise_draw`; VFL-CZOFO's perturbations, `VFLCZOFO.server_draws`), and passed in: a seeded
  torch.Generator cannot be traced, and a generator compile handles would draw other numbers.
* Compiling a round whose server trains by backward() needs dynamo's `trace_autograd_ops` (tests/graph_ready.py).
"""

import copy
import math

import numpy as np
import pytest
import torch

from fedrepro.algorithms.dpzv import base
from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.zo import Direction, draw_buckets
from fedrepro.fl import transport
from tests.dpzv.quick_round import digits_data, parameters, quick_algorithm, records
from tests.graph_ready import (
    SyncCounter,
    aot_eager_fullgraph,
    capture_counting,
    compiled,
    compiled_static,
    host_syncs,
    in_child,
)

SETTINGS = {  # (method, shared options changed): the default run's, and the variants' code paths
    "dpzv": ("dpzv", {}),
    "dpzv-zo_server": ("dpzv", {"server_update": "zo"}),
    "dpzv-gaussian-no_momentum": ("dpzv", {"direction": "gaussian", "zo_momentum": 0.0, "server_update": "zo"}),
    "dpzv-dp_head": ("dpzv", {"label_privacy": "dp_head"}),
    "dpzv-stacked": ("dpzv", {"stack_clients": True}),
    "zoo_vfl": ("zoo_vfl", {}),
    "zoo_vfl-zo_server": ("zoo_vfl", {"server_update": "zo"}),
    "vafl": ("vafl", {}),
    "vfl_czofo": ("vfl_czofo", {}),
}


@pytest.fixture(scope="module")
def digits():
    torch.set_num_threads(1)
    return digits_data()


def warm(method: str, data, **extra):
    """A run after its first evaluation block (momentum buffers and ZOO-VFL's twin models exist)."""
    algo = quick_algorithm(method, data, eps=1.0, **extra)
    algo.round(1)
    return algo


def test_the_counter_counts_every_kind_of_host_read():
    t = torch.tensor([0.5, 1.5])
    assert host_syncs(lambda: float(t.sum())) == 1
    assert host_syncs(lambda: t[0].item()) == 1
    assert host_syncs(lambda: bool(t.sum() > 0)) == 1
    assert host_syncs(lambda: t.tolist()) == 1
    assert host_syncs(lambda: t.cpu()) == 1
    assert host_syncs(lambda: np.asarray(t)) == 1
    assert host_syncs(lambda: print(t)) >= 1
    assert host_syncs(lambda: t * 2 + t.sum()) == 0


@pytest.mark.parametrize("setting", SETTINGS)
def test_a_server_round_makes_no_host_sync(digits, setting):
    method, extra = SETTINGS[setting]
    algo = warm(method, digits, **extra)
    with SyncCounter() as counter:
        if algo.stacks:
            algo.run_segment(algo.segment(algo.block_end(2)))
        else:
            algo.one_round()
    assert counter.syncs == 0


def test_the_sync_test_sees_one_float_put_back_into_the_round(digits, monkeypatch):
    """The check above fails when the round reads Delta on the host again (the code before the change)."""
    algo = warm("dpzv", digits)
    monkeypatch.setattr(DPZV, "client_reply", lambda self, client, u, delta: self.client_apply(client, u, float(delta)))
    assert host_syncs(algo.one_round) == 1


def host_read_round(monkeypatch) -> None:
    """The round as it was: the scale and every coefficient read on the host, statistics read every round."""

    def scale(self):
        dots = []
        self._each_bucket(lambda first, stop, z: dots.append(torch.dot(z, z)))
        return math.sqrt(self.dim) / math.sqrt(float(torch.stack(dots).sum(dtype=torch.float64)))

    def alpha(self, coeff):
        return (float(coeff) if isinstance(coeff, torch.Tensor) else coeff) * self.scale

    def means(stats):
        return {key: float(np.mean([float(v) for v in values])) for key, values in stats.items()}

    monkeypatch.setattr(Direction, "_sphere_scale", scale)
    monkeypatch.setattr(Direction, "_alpha", alpha)
    monkeypatch.setattr(base, "block_means", means)


@pytest.mark.parametrize("setting", SETTINGS)
def test_records_are_bit_identical_to_the_host_read_round(digits, setting, monkeypatch):
    method, extra = SETTINGS[setting]
    algo = quick_algorithm(method, digits, eps=1.0, **extra)
    kept = records(algo, 2)
    with monkeypatch.context() as patch:
        host_read_round(patch)
        reference_algo = quick_algorithm(method, digits, eps=1.0, **extra)
        with SyncCounter() as counter:
            reference = records(reference_algo, 2)
    assert counter.syncs > algo.block_end(2)  # the reference read values on the host, round by round
    assert kept == reference  # exact float equality, every key of every row
    for new, old in zip(parameters(algo), parameters(reference_algo), strict=True):
        assert torch.equal(new, old)


def drawn_round(algo) -> tuple:
    """The arguments of the next server round's `exchange_drawn`: client, batch and randomness drawn on the host
    as `exchange` draws them, the directions as their bucket draws."""
    m = algo.next_client()
    client = algo.clients[m]
    ids = algo.ids_tensor(client.next_batch())
    if algo.method in ("vafl", "vfl_czofo"):
        return m, ids, algo.noise_draw(client, ids.shape[0]), algo.server_draws(ids.shape[0])
    u = draw_buckets(client.params, client.new_seed())
    if algo.method == "dpzv":
        drawn = algo.server_draws()
        if "server_u" in drawn:
            drawn["server_u"] = draw_buckets(algo.server.params, drawn["server_u"])
        return m, ids, u, drawn
    noises = algo.noise_draws(client, (ids.shape[0], algo.cfg.embed_dim))
    server_u = draw_buckets(algo.server.params, algo.server.new_seed()) if algo.server_update == "zo" else None
    return m, ids, u, noises, server_u


def state(algo) -> dict[str, torch.Tensor]:
    """Everything a round changes: parameters, momentum buffers, the server's table."""
    out = {f"param{i}": p for i, p in enumerate(parameters(algo))}
    out["table"] = algo.server.table.clone()
    for i, c in enumerate(algo.clients):
        buffers = c.updater.buffers if c.updater else c.optimizer.buffers
        out.update({f"client{i}_buffer{k}": b.clone() for k, b in enumerate(buffers or []) if b is not None})
    return out


DPZV_ROUNDS = {"dpzv": ("dpzv", {}), "dpzv-zo_server": ("dpzv", {"server_update": "zo"})}
BASELINE_ROUNDS = {
    "zoo_vfl": ("zoo_vfl", {}),
    "zoo_vfl-zo_server": ("zoo_vfl", {"server_update": "zo"}),
    "vafl": ("vafl", {}),
    "vfl_czofo": ("vfl_czofo", {}),
}
COMPILED = {**DPZV_ROUNDS, **BASELINE_ROUNDS}  # each method's round: host draws, then a device program


@pytest.mark.parametrize("setting", COMPILED)
def test_a_round_on_bucket_draws_is_the_round_on_seeds(digits, setting):
    """What a compiled round takes as input gives the seeded round's numbers, bit for bit."""
    method, extra = COMPILED[setting]
    algo = warm(method, digits, **extra)
    twin = copy.deepcopy(algo)
    on_draws = twin.exchange_drawn(*drawn_round(twin))
    on_seeds = algo.one_round()
    assert {k: float(v) for k, v in on_draws.items()} == {k: float(v) for k, v in on_seeds.items()}
    for key, value in state(algo).items():
        assert torch.equal(value, state(twin)[key]), key


def assert_the_round_compiles_in_one_graph_and_matches_eager(digits, method: str, extra: dict) -> None:
    algo = warm(method, digits, **extra)
    before = state(algo)
    twin = copy.deepcopy(algo)
    args = drawn_round(algo)
    with aot_eager_fullgraph() as counters:
        got = compiled(twin.exchange_drawn)(*args)
        assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
    want = algo.exchange_drawn(*args)
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-5, atol=1e-7, msg=key)
    after, compiled_after = state(algo), state(twin)
    for key in after:
        torch.testing.assert_close(compiled_after[key], after[key], rtol=1e-5, atol=1e-7, msg=key)
    assert not torch.equal(after["table"], before["table"])  # the round did its work: table and client moved
    assert any(not torch.equal(after[k], before[k]) for k in before if k.startswith("param"))


@pytest.mark.parametrize("setting", DPZV_ROUNDS)
def test_a_dpzv_round_compiles_in_one_graph_and_matches_eager(digits, setting):
    in_child(assert_the_round_compiles_in_one_graph_and_matches_eager, digits, *DPZV_ROUNDS[setting])


@pytest.mark.parametrize("setting", BASELINE_ROUNDS)
def test_a_baseline_round_compiles_in_one_graph_and_matches_eager(digits, setting):
    in_child(assert_the_round_compiles_in_one_graph_and_matches_eager, digits, *BASELINE_ROUNDS[setting])


@pytest.mark.parametrize("host_read", ["tolist", "print"])
def test_a_graph_break_in_the_round_fails_the_fullgraph_compile(digits, monkeypatch, host_read):
    """The check above fails when the round breaks its graph again (a host read of Delta, a print)."""
    algo = warm("dpzv", digits)
    apply = DPZV.client_apply

    def broken(self, client, u, delta):
        print(delta) if host_read == "print" else delta.tolist()
        apply(self, client, u, delta)

    monkeypatch.setattr(DPZV, "client_apply", broken)

    def check():
        with aot_eager_fullgraph(), pytest.raises(torch._dynamo.exc.Unsupported):
            compiled(algo.exchange_drawn)(*drawn_round(algo))

    in_child(check)


# ---------------------------------------------------------------- one capture per run
# A round carries its two messages and `log_sent` logs them on the Wire after its device program (base.serve), so the
# round reads no host counter: a compile of `exchange_drawn` (standing for a CUDA-graph capture, `capture_counting`)
# is made once per client (its own modules and parameters) and replays every later round of that client.
CAPTURE_ROUNDS = 8


def check_one_graph_per_client(data, method: str, extra: dict, logged_inside: bool):
    algo = warm(method, data, **extra)
    step = compiled_static(algo.exchange_drawn)
    clients = set()
    with capture_counting() as counters:
        for _ in range(CAPTURE_ROUNDS):
            args = drawn_round(algo)
            clients.add(args[0])
            step(*args)
            algo.log_sent()
        graphs = counters["stats"]["unique_graphs"]
    assert CAPTURE_ROUNDS > len(clients)
    assert graphs > len(clients) if logged_inside else graphs == len(clients), graphs


@pytest.mark.parametrize("setting", COMPILED)
def test_a_round_is_captured_once_per_client_over_a_run(digits, setting):
    in_child(check_one_graph_per_client, digits, *COMPILED[setting], False)


def test_the_capture_count_sees_the_wire_logged_inside_the_round(digits, monkeypatch):
    """The count above fails when the round logs its messages itself (the Wire's byte counters read inside it)."""
    wire = transport.Wire()

    def logged_carry(payload):  # what `send` did inside the round
        wire.log("client", "server", "embeddings", payload)
        return transport._copy(payload)

    monkeypatch.setattr(transport.Wire, "carry", staticmethod(logged_carry))
    in_child(check_one_graph_per_client, digits, *COMPILED["dpzv"], True)
