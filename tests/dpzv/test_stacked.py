"""DPZV and its baselines with each segment's client queries stacked (`stack_clients`, algorithms/dpzv/stacked.py)
give the per-client loop's numbers: metrics, client and server weights, optimiser and momentum state, every
generator (so every noise draw), the table and the wire's messages, in float64 on tiny models."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from fedrepro.algorithms.dpzv.base import VFLData, build_vfl_data
from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.vafl import VAFL
from fedrepro.algorithms.dpzv.vfl_czofo import VFLCZOFO
from fedrepro.algorithms.dpzv.zoo_vfl import ZOOVFL
from fedrepro.data.partition import vertical_partition
from fedrepro.fl.loop import run_rounds

from .conftest import tiny_images, tiny_settings

METHODS = {"dpzv": DPZV, "zoo_vfl": ZOOVFL, "vafl": VAFL, "vfl_czofo": VFLCZOFO}
# client rates at which the tiny runs train rather than diverge (a diverging run amplifies every last bit)
LR_CLIENT = {"dpzv": 1e-3, "zoo_vfl": 1e-5, "vafl": 1e-3, "vfl_czofo": 1e-6}
LR_SERVER = {"zoo_vfl": 0.005}  # ZOO-VFL's head on noisy pairs (sigma_h 19 at eps 2)
TIGHT = 1e-9  # float64: vmap's batched kernels differ from the per-client ones in the last bits only


pytestmark = pytest.mark.usefixtures("float64")


def _double(data: VFLData) -> VFLData:
    def cast(xs):
        return [x if x.dtype == torch.long else x.double() for x in xs]

    return dataclasses.replace(data, train=cast(data.train), val=cast(data.val), test=cast(data.test))


def _images(clients=4) -> VFLData:
    """Digit-like 1x8x8 images in `clients` row strips (the MNIST setting's shape, tiny)."""
    x_tr, y_tr, x_te, y_te = tiny_images(n_train=48)  # 36 after the holdout: 16 server rounds an epoch
    p = vertical_partition((1, 8, 8), "rows", clients)
    return _double(build_vfl_data(x_tr, y_tr, x_te, y_te, p.features, p.feature_shapes, 3, "image", val_fraction=0.25))


def _views(clients=3, n=12) -> VFLData:
    """ModelNet40-shaped: one 1x4x4 view per client (the paper's 12 views of 3x32x32, tiny)."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, size=(n, clients, 1, 4, 4)).astype(np.uint8)
    y = rng.integers(0, 3, size=n)
    p = vertical_partition((clients, 1, 4, 4), "views", clients)
    return _double(build_vfl_data(x[:8], y[:8], x[8:], y[8:], p.features, p.feature_shapes, 3, "multiview", val="test"))


def _tokens(clients=3, n=40) -> VFLData:
    rng = np.random.default_rng(2)
    x = rng.integers(1, 30, size=(n, 4 * clients))
    x[::3, -2:] = 0  # some padding
    y = rng.integers(0, 2, size=n)
    p = vertical_partition((4 * clients,), "tokens", clients)
    return build_vfl_data(x[:32], y[:32], x[32:], y[32:], p.features, p.feature_shapes, 2, "text", val="test")


RESNET = {"client_model": "vfl_resnet18", "client_kwargs": {"norm": "group"}, "embed_dim": 4, "batch_size": 2}
TEXT = {"client_model": "vfl_text_encoder", "embed_dim": 4, "batch_size": 4}
TEXT_KW = {"vocab_size": 30, "hidden": 8, "layers": 2, "heads": 2, "intermediate": 16, "max_len": 8}


def _run(cls, data, stack: bool, blocks=2, **kw):
    extra = {"stack_clients": stack, **kw.pop("extra", {})}
    kw.setdefault("lr_client", LR_CLIENT[cls.method])
    kw.setdefault("lr_server", LR_SERVER.get(cls.method, 0.05))
    settings = tiny_settings(epochs=1, evals_per_epoch=blocks, extra=extra, **kw)
    algo = cls(data, settings, seed=5)
    assert (algo.stacks is not None) is stack
    return algo, run_rounds(algo, blocks)


def assert_close(a, b, where="state"):
    """Nested dicts/lists equal, tensors and floats within TIGHT of their own scale (max(1, max |a|)): a ZO
    coefficient L'-L over lambda is of order 1e3 on a ResNet, so an absolute tolerance (fedal's assert_same)
    is the wrong measure; a query after another client's update or a dropped loss term moves values by far more."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_close(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor) and a.is_floating_point():
        assert a.dtype == b.dtype and a.shape == b.shape, where
        if a.numel():
            assert float((a - b).abs().max()) <= TIGHT * max(1.0, float(a.abs().max())), where
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where  # generator states, ids
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=TIGHT, abs=TIGHT, nan_ok=True), where
    else:
        assert a == b, where


def assert_same_runs(reference, stacked):
    (ref, rows_ref), (bat, rows_bat) = reference, stacked
    assert list(rows_ref.columns) == list(rows_bat.columns)
    assert_close(rows_ref.to_dict("list"), rows_bat.to_dict("list"), "metrics")
    assert_close(ref.state_dict(), bat.state_dict())  # models, optimisers, momentum, generators, table, wire
    assert ref.wire.messages == bat.wire.messages
    assert ref.server_round == bat.server_round == ref.total_rounds
    assert np.isfinite(rows_ref["train_loss"]).all() and rows_ref["train_loss"].max() < 10  # no divergence


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("eps", [math.inf, 2.0])
def test_stacked_queries_match_the_per_client_loop(method, eps):
    data = _images()
    kw = {"eps": eps, "extra": {"embed_clip": 0.1}}  # the baselines' clip binds (embedding norms ~0.3)
    assert_same_runs(_run(METHODS[method], data, False, **kw), _run(METHODS[method], data, True, **kw))


@pytest.mark.parametrize("method", ["dpzv", "zoo_vfl"])
def test_stacked_zo_server_and_options(method):
    """Algorithm 1's ZO server (its own direction from the server's generator) between the stacked queries;
    DPZV's secret subsample (the server's draws) and ZOO-VFL's independent noise pair."""
    extra = {"server_update": "zo", "batch": "secret_subsample", "zoo_noise": "independent", "direction": "gaussian"}
    kw = {"eps": 1.0, "extra": extra}
    data = _images()
    assert_same_runs(_run(METHODS[method], data, False, **kw), _run(METHODS[method], data, True, **kw))


@pytest.mark.parametrize("method", ["dpzv", "vafl"])  # forward-only and autograd stacks; the others: test above
def test_stacked_resnet18_group_norm(method):
    """The ModelNet40 client (ResNet-18, GroupNorm) on one tiny view per client: one segment of distinct clients
    run stacked leaves the state of the per-client loop's rounds (a whole run of an 11M-parameter model in
    float64 would take minutes)."""
    data = _views()
    kw = {"eps": 2.0, **RESNET, "lr_client": LR_CLIENT[method] / 1000}  # d = 11M: ZO steps need a small rate
    settings = tiny_settings(epochs=1, extra={"stack_clients": True}, **kw)
    stacked = METHODS[method](data, settings, seed=5)
    reference = METHODS[method](
        data, dataclasses.replace(settings, extra={**settings.extra, "stack_clients": False}), seed=5
    )
    turns = stacked.segment(stacked.total_rounds)
    while len(turns) < 2:  # a segment of at least two clients
        stacked.run_segment(turns), reference.one_round()
        turns = stacked.segment(stacked.total_rounds)
    rows = stacked.run_segment(turns)
    assert_close([reference.one_round() for _ in turns], rows, "stats")
    assert stacked.pending == reference.next_client()  # the repeat that ended the segment, drawn in order
    assert_close(reference.state_dict(), stacked.state_dict())
    assert reference.wire.messages == stacked.wire.messages


@pytest.mark.parametrize("method", ["dpzv", "vafl"])
def test_stacked_text_encoder(method):
    """The offline text encoder (a 2-layer post-norm transformer with a padding mask) stacks."""
    data = _tokens()
    kw = {"eps": 2.0, **TEXT, "client_kwargs": TEXT_KW}
    assert_same_runs(_run(METHODS[method], data, False, **kw), _run(METHODS[method], data, True, **kw))


def test_hugging_face_bert_is_not_stacked():
    """transformers' BERT branches on its padding mask (vmap refuses): auto leaves it per client, true is an error."""
    pytest.importorskip("transformers")
    bert = {"vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2}
    bert |= {"intermediate_size": 16, "max_position_embeddings": 16}
    settings = dict(TEXT, client_kwargs={"bert_config": bert, "cls_token_id": 1})
    with pytest.raises(ValueError, match="stack_clients: true needs client models that run under"):
        _run(DPZV, _tokens(), True, **settings)
    algo = DPZV(_tokens(), tiny_settings(**settings, extra={"stack_clients": None}), seed=0)
    assert algo.stacks is None


def test_stack_clients_rejects_a_non_boolean():
    with pytest.raises(ValueError, match="stack_clients must be true, false or null"):
        DPZV(_images(), tiny_settings(extra={"stack_clients": "yes"}), seed=0)


def test_auto_stacks_on_a_gpu_only():
    """Default (no key): off on the CPU, so the CPU's default runs keep their numbers."""
    assert DPZV(_images(), tiny_settings(), seed=0).stacks is None


@pytest.mark.parametrize("schedule", ["random", "permutation"])
def test_segments_are_runs_of_distinct_clients_in_schedule_order(schedule):
    """The segments, concatenated, are the per-client loop's schedule and batches; none holds a client twice;
    each ends before a repeated client or at the block's end (no draw past it)."""
    data = _images()
    ref = DPZV(data, tiny_settings(schedule=schedule, extra={"stack_clients": False}), seed=5)
    bat = DPZV(data, tiny_settings(schedule=schedule, extra={"stack_clients": True}), seed=5)
    end = bat.block_end(1)
    served = []
    while len(served) < end:
        turns = bat.segment(end)
        clients = [m for m, _ in turns]
        assert len(set(clients)) == len(clients)
        assert len(served) + len(turns) == end or bat.pending in clients
        bat.server_round += len(turns)
        served += turns
    assert bat.pending is None and len(served) == end
    for m, ids in served:
        want = ref.next_client()
        assert m == want
        np.testing.assert_array_equal(ids, ref.clients[want].next_batch())


def test_a_stacked_run_resumes_from_its_checkpoint_state():
    """A checkpoint between blocks holds no half-drawn segment (`pending` is None at a block's end)."""
    data = _images()
    whole, _ = _run(ZOOVFL, data, True, eps=2.0)
    first = ZOOVFL(data, whole.cfg, seed=5)
    run_rounds(first, 1)
    assert first.pending is None
    resumed = ZOOVFL(data, whole.cfg, seed=5)
    resumed.load_state_dict(first.state_dict())
    resumed.round(2)
    resumed.evaluate(2)
    assert_close(whole.state_dict(), resumed.state_dict())
