"""Gradient-variance diagnostics of FedAL (paper Fig. 6, Assumption V.7).

sigma^2 = E || grad(full) - g(mini-batch) ||^2 for each loss component of one
client (client 0) and for the discriminator:
  sigma_l  CE on local batches           sigma_rl  r_loc on local batches
  sigma_k  KD to the leave-one-out avg   sigma_u   U_n (through the discriminator)
  sigma_rg r_glo on public batches       sigma_n   the discriminator's gradient of the mean payoff

The paper does not say how Fig. 6's "real" gradient is computed; here it is the
mean of the per-batch gradients over `batches` disjoint mini-batches of size B (all of the data when
there are fewer), so sigma^2 = mean_b ||g_b||^2 - ||mean_b g_b||^2. The
anchors are those of the round that just ended. This is a simulation-side
measurement, outside the protocol (it reads models and the discriminator
directly and sends nothing over the wire).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from fedrepro.algorithms.fedal.discriminator import payoffs
from fedrepro.algorithms.fedal.kd import kl_to_logits, leave_one_out, less_forgetting, tempered_softmax


def gradient_variance(
    loss_of: Callable[[torch.Tensor], torch.Tensor], params: Sequence[torch.Tensor], chunks: Sequence[torch.Tensor]
) -> float:
    """mean_b ||g_b||^2 - ||mean_b g_b||^2 over the per-chunk gradients g_b of `loss_of(chunk)`."""
    if len(chunks) < 2:
        return float("nan")
    total, sq = None, 0.0
    for chunk in chunks:
        grads = torch.autograd.grad(loss_of(chunk), list(params), allow_unused=True)
        flat = torch.cat(
            [(g if g is not None else torch.zeros_like(p)).reshape(-1).double() for g, p in zip(grads, params)]
        )
        total = flat if total is None else total + flat
        sq += float(flat @ flat)
    mean = total / len(chunks)
    return max(0.0, sq / len(chunks) - float(mean @ mean))


def chunks_of(n: int, batch: int, limit: int, seed: int) -> list[torch.Tensor]:
    """Up to `limit` disjoint index batches of size `batch` from a seeded permutation of range(n)."""
    order = np.random.default_rng(seed).permutation(n)
    count = min(limit, n // batch)
    return [torch.as_tensor(order[i * batch : (i + 1) * batch]) for i in range(count)]


def fedal_variances(algo, anchors: dict, batches: int, seed: int) -> dict[str, float]:
    """The six sigma^2 of Fig. 6 for client 0 of a FedAL run (`algo` is a fedal.FedAL)."""
    client, b = algo.clients[0], algo.cfg.batch_size
    model, params = client.model, [p for p in client.model.parameters()]
    local = chunks_of(len(client.y), b, batches, seed)
    public = chunks_of(len(client.public_x), b, batches, seed + 1)
    x, y, px = client.x, client.y, client.public_x
    dev = lambda i: i.to(x.device)  # noqa: E731

    def others_target(idx):
        with torch.no_grad():
            logits = torch.stack([c.model(px[dev(idx)]) for c in algo.clients])
        return leave_one_out(logits.mean(0), logits[0], algo.num_clients), logits

    out = {
        "sigma_l": gradient_variance(
            lambda i: torch.nn.functional.cross_entropy(model(x[dev(i)]), y[dev(i)]), params, local
        ),
        "sigma_k": gradient_variance(lambda i: kl_to_logits(others_target(i)[0], model(px[dev(i)])), params, public),
    }
    if anchors.get("loc") is not None:
        out["sigma_rl"] = gradient_variance(
            lambda i: less_forgetting(anchors["loc"](x[dev(i)]), model(x[dev(i)])), params, local
        )
    if anchors.get("glo") is not None:
        out["sigma_rg"] = gradient_variance(
            lambda i: less_forgetting(anchors["glo"](px[dev(i)]), model(px[dev(i)])), params, public
        )
    adversary = algo.server.adversary
    if adversary is not None:
        disc, temp = adversary.disc, adversary.temperature

        def u_own(i):
            f = model(px[dev(i)])
            _, logits = others_target(i)
            probs = tempered_softmax(torch.cat([f[None], logits[1:]]), temp)
            return payoffs(disc, probs)[0].mean()

        def u_all(i):
            _, logits = others_target(i)
            return payoffs(disc, tempered_softmax(logits, temp)).mean()

        out["sigma_u"] = gradient_variance(u_own, params, public)
        out["sigma_n"] = gradient_variance(u_all, list(disc.parameters()), public)
    # a component with fewer than 2 mini-batches has no variance: left out, not logged as NaN
    # (a NaN column would read as a diverged run)
    return {f"var_{k}": v for k, v in out.items() if not np.isnan(v)}
