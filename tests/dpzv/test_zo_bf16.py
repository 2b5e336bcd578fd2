"""bf16 forwards for DPZV's zeroth-order differences: the gate of the bf16 lever (fedrepro.experiments.levers).

A DPZV client sends the outputs of two forwards at w + lambda u and w - lambda u (algorithms/dpzv/dpzv.py
`client_query`, lambda = 1e-3, Table 3); the server's Delta is their per-sample loss difference / lambda
(eq. 7). With bf16 forwards (torch.autocast, fp32 weights as fp32 master weights, the losses in fp32) the
perturbation of about 1e-3 per weight meets bf16's 8-bit mantissa (relative rounding 2^-9 of each
activation), so the difference can lose most of its digits. Measured here on a small random BERT (the
paper's client, transformers' BertModel, hidden 64) against the same computation in fp32, over 8 directions
and 16 samples.

Threshold 0.10 (relative RMS error of the Deltas): the error then moves each update by at most a tenth of
its size, well inside what one random direction already varies (a single direction's estimate has a
relative spread of order 1), and a tenth is the most a lever that "changes no number" may cost. Above it,
bf16 forwards would change DPZV's numbers and the lever stays off. fp32 itself is checked against float64
with the same directions (the reference must be exact enough to measure against).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedrepro.algorithms.dpzv.zo import Direction
from fedrepro.experiments import levers

pytest.importorskip("transformers")

LAMBDA = 1e-3  # DPZV Table 3
DIRECTIONS, BATCH, TOKENS = 8, 16, 32
BERT = {  # a small bert-base: same layers, tiny widths
    "vocab_size": 200,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
}


@pytest.fixture(scope="module")
def client():
    """A client encoder (models/vfl.py's BERT client, random weights), its tokens (padded tails), and the
    server's per-sample loss of its embedding beside two other clients' fixed ones."""
    from fedrepro.models.vfl import text_client_encoder

    torch.manual_seed(0)
    net = text_client_encoder(embed_dim=16, pad_id=0, bert_config=BERT).eval()
    tokens = torch.randint(1, BERT["vocab_size"], (BATCH, TOKENS))
    tokens[:, -4:] = 0
    head, others, labels = torch.nn.Linear(48, 2), torch.randn(BATCH, 32), torch.randint(0, 2, (BATCH,))

    def losses(h: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return F.cross_entropy(head(torch.cat([h.float(), others], 1)), labels, reduction="none")

    return net, tokens, losses


def deltas(net, tokens, losses, seed: int, bf16: bool) -> torch.Tensor:
    """Per-sample Delta of one direction as `client_query` (the forwards, in bf16 under `bf16`) and
    `server_answer` (the losses, fp32) compute it."""
    u = Direction(list(net.parameters()), seed)

    def forward() -> torch.Tensor:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return net(tokens)

    u.add_(LAMBDA)
    plus = losses(forward())
    u.add_(-2.0 * LAMBDA)
    minus = losses(forward())
    u.add_(LAMBDA)
    return (plus - minus) / LAMBDA


def float64_deltas(net, tokens, losses, seed: int) -> torch.Tensor:
    """The same direction's Deltas in float64 (u read off the fp32 draw)."""
    import copy

    wide = copy.deepcopy(net).double()
    params, u = list(wide.parameters()), [t.double() for t in Direction(list(net.parameters()), seed).tensors()]
    out = []
    with torch.no_grad():
        for sign in (1.0, -2.0):
            torch._foreach_add_(params, u, alpha=sign * LAMBDA)
            out.append(losses(wide(tokens)))
    return (out[0] - out[1]) / LAMBDA


def relative_rms(a: torch.Tensor, reference: torch.Tensor) -> float:
    return float((a - reference).norm() / reference.norm())


def test_bf16_zo_difference_error_decides_the_lever(client):
    net, tokens, losses = client
    fp32 = torch.stack([deltas(net, tokens, losses, s, bf16=False) for s in range(DIRECTIONS)])
    bf16 = torch.stack([deltas(net, tokens, losses, s, bf16=True) for s in range(DIRECTIONS)])
    assert not torch.equal(bf16, fp32), "autocast did not run the forwards in bf16"
    error = relative_rms(bf16, fp32)
    print(f"relative RMS error of the bf16 Deltas against fp32: {error:.3f} (threshold {levers.ZO_BF16_THRESHOLD})")
    assert error == pytest.approx(levers.ZO_BF16_MEASURED, abs=0.03), "the lever table quotes another value"
    # necessary, not sufficient: whole rounds must pass too (tests/dpzv/test_precision.py)
    rounds = max(levers.ZO_BF16_ROUND_MEASURED.values())
    assert levers.ZO_BF16_PASSES == (max(error, rounds) <= levers.ZO_BF16_THRESHOLD)
    gated = next(lever for lever in levers.LEVERS if "zeroth-order" in lever.name)
    if error > levers.ZO_BF16_THRESHOLD:
        assert not gated.applied()


def test_the_fp32_reference_matches_float64(client):
    net, tokens, losses = client
    fp32 = torch.stack([deltas(net, tokens, losses, s, bf16=False) for s in range(2)])
    wide = torch.stack([float64_deltas(net, tokens, losses, s) for s in range(2)]).float()
    assert relative_rms(fp32, wide) < 1e-3
