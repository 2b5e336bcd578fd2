"""The server discriminator of FedAL (paper eqs. (7)-(9)).

h: R^K -> R^N reads a temperature-E_d softmax output p_n(x) and returns N logits,
"which client produced this probability vector". U_n = log softmax(h(p_n))_n (7);
the server maximises the client mean of U_n (8), i.e. minimises the mean
cross-entropy with the client index as label; clients minimise their own U_n
(the saturating minimax form of (7) and (13), kept as written).

Sec. VI-A: "two fully-connected layers with 32 and 265 neurons"; here that is
read as hidden widths 32 and 256 (265 taken as a typo) with ReLU, plus an output
layer to N: Linear(K, 32) - ReLU - Linear(32, 256) - ReLU - Linear(256, N).
The widths are the config key `discriminator.hidden`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from fedrepro.algorithms.fedal.kd import tempered_softmax


class Discriminator(nn.Module):
    """MLP over probability vectors with one output logit per client."""

    def __init__(self, num_classes: int, num_players: int, hidden: Sequence[int] = (32, 256)):
        super().__init__()
        if num_players < 2:
            raise ValueError(f"the discriminator needs at least 2 players, got {num_players}")
        layers, width = [], num_classes
        for h in hidden:
            layers += [nn.Linear(width, int(h)), nn.ReLU()]
            width = int(h)
        layers.append(nn.Linear(width, num_players))
        self.net = nn.Sequential(*layers)
        self.num_players = num_players

    def forward(self, probs: torch.Tensor) -> torch.Tensor:
        return self.net(probs)


def payoffs(disc: nn.Module, probs: torch.Tensor) -> torch.Tensor:
    """U_n(x) for a stack of client outputs `probs` (N, B, K) -> (N, B).

    Row n is log softmax(h(p_n(x)))_n: the log-probability the discriminator gives
    to the true producer of p_n(x).
    """
    n_players, batch, k = probs.shape
    log_post = torch.log_softmax(disc(probs.reshape(n_players * batch, k)), dim=-1)
    log_post = log_post.reshape(n_players, batch, n_players)
    idx = torch.arange(n_players, device=probs.device)
    return log_post[idx, :, idx]


def discriminator_loss(disc: nn.Module, probs: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of "which client": -(1/N) sum_n mean_x U_n, the negated (8)."""
    return -payoffs(disc, probs).mean()


FORMS = ("saturating", "non_saturating")


def payoff_grads(
    disc: nn.Module, logits: torch.Tensor, temperature: float, form: str = "saturating"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample gradient of the clients' adversarial term w.r.t. their logits (N, B, K).

    `saturating` (the paper, (7)): the term is U_n = log D_n(p_n). `non_saturating`
    (not from the paper): -log(1 - D_n(p_n)), same minimiser, no
    vanishing gradient when D is sure. Returns (grads, the term per sample (N, B)).
    Only the logits receive gradient; the discriminator is left untouched.
    """
    if form not in FORMS:
        raise ValueError(f"discriminator form {form!r} is not one of {', '.join(FORMS)}")
    f = logits.detach().clone().requires_grad_(True)
    u = payoffs(disc, tempered_softmax(f, temperature))
    if form == "non_saturating":
        u = -torch.log1p(-u.exp().clamp(max=1 - 1e-6))
    # U_n depends only on f_n, so the gradient of the sum w.r.t. f splits per client
    (grads,) = torch.autograd.grad(u.sum(), f)
    return grads, u.detach()
