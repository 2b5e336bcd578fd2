"""Zeroth-order estimation: direction sampler, two-point estimator, in-place perturbation.

Notation: `zo_lambda` is the ZO smoothing parameter (DPZV's lambda = 1e-3,
Table 3); the Gaussian-DP level mu is called `gdp_mu` elsewhere (MeZO and the
VFL-CZOFO code call the smoothing parameter mu, hence the explicit names).

Directions (eqs. 3 and 12): by default u is uniform on the sphere of radius
sqrt(d) (the paper's u ~ Uniform(sqrt(d) S^{d-1}); ||u||^2 = d, E[u u^T] = I),
built as u = sqrt(d) z / ||z|| with z ~ N(0, I). `direction="gaussian"` uses
u = z (MeZO's choice; the same estimator in expectation).

MeZO-style in place (Section 3: "we adopt the MeZO methodology"): a
`Direction` stores only a seed and one scalar scale. Every use regenerates z
tensor by tensor from the seed, so perturbing, restoring and updating the
parameters never allocates more than one parameter-tensor-sized temporary, and
no second copy of the model exists.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

DIRECTIONS = ("sphere", "gaussian")
FD_DENOMINATORS = ("lambda", "2lambda")


def check_direction(kind: str) -> str:
    if kind not in DIRECTIONS:
        raise ValueError(f"direction {kind!r} is not one of {', '.join(DIRECTIONS)}")
    return kind


def fd_divisor(zo_lambda: float, fd_denominator: str) -> float:
    """Divisor of the loss difference: lambda (DPZV eq. 7, default) or 2 lambda (eqs. 3, 12).

    The paper is inconsistent here: eq. (7) divides by lambda, which is exactly twice the central-difference
    directional derivative of eqs. (3)/(12); the factor can be absorbed into the
    learning rate and C (C=10 with /lambda equals C=5 with /2lambda).
    """
    if fd_denominator not in FD_DENOMINATORS:
        raise ValueError(f"fd_denominator {fd_denominator!r} is not one of {', '.join(FD_DENOMINATORS)}")
    if not zo_lambda > 0:
        raise ValueError(f"zo_lambda must be > 0, got {zo_lambda}")
    return zo_lambda if fd_denominator == "lambda" else 2.0 * zo_lambda


# ---------------------------------------------------------------- flat vectors (tests, theory)


def sample_sphere(n: int, d: int, generator: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    """n directions uniform on the sphere of radius sqrt(d) in R^d (rows)."""
    z = torch.randn(n, d, generator=generator, dtype=dtype)
    return math.sqrt(d) * z / torch.linalg.vector_norm(z, dim=1, keepdim=True)


def two_point_estimate(
    f: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    u: torch.Tensor,
    zo_lambda: float,
    fd_denominator: str = "2lambda",
) -> torch.Tensor:
    """g = [f(x + lambda u) - f(x - lambda u)] / divisor * u for each row u (eq. 3 with 2 lambda).

    `f` maps a batch of points (rows) to a vector of values; `u` is (n, d).
    """
    divisor = fd_divisor(zo_lambda, fd_denominator)
    diff = f(x + zo_lambda * u) - f(x - zo_lambda * u)
    return (diff / divisor).unsqueeze(1) * u


# ---------------------------------------------------------------- in-place parameter directions


def num_params(params: Sequence[torch.Tensor]) -> int:
    return sum(p.numel() for p in params)


class Direction:
    """A random direction over a list of parameter tensors, kept as a seed.

    `z(i)` regenerates the Gaussian draw of tensor i; the direction is
    u_i = scale * z_i, with scale = sqrt(d)/||z|| (sphere) or 1 (gaussian).
    The generator is re-seeded at every pass, so the same seed always gives
    bit-identical tensors (eq. 9 updates along the same u the client perturbed with).
    """

    def __init__(self, params: Sequence[torch.Tensor], seed: int, kind: str = "sphere"):
        self.params = list(params)
        self.seed = int(seed)
        self.kind = check_direction(kind)
        self.dim = num_params(self.params)
        self.scale = 1.0 if kind == "gaussian" else math.sqrt(self.dim) / math.sqrt(self._squared_norm())

    def _draws(self):
        device = self.params[0].device
        gen = torch.Generator(device=device)
        gen.manual_seed(self.seed)
        for p in self.params:
            yield p, torch.randn(p.shape, generator=gen, dtype=p.dtype, device=device)

    def _squared_norm(self) -> float:
        total = 0.0
        for _, z in self._draws():
            flat = z.reshape(-1)
            total += float(torch.dot(flat, flat))
        return total

    def tensors(self) -> list[torch.Tensor]:
        """u as a list of tensors (allocates a full copy: tests and diagnostics only)."""
        return [self.scale * z for _, z in self._draws()]

    @torch.no_grad()
    def add_(self, coeff: float) -> None:
        """In place: theta += coeff * u."""
        alpha = coeff * self.scale
        for p, z in self._draws():
            p.add_(z, alpha=alpha)

    @torch.no_grad()
    def momentum_step_(self, buffers: Sequence[torch.Tensor], grad_coeff: float, momentum: float, lr: float) -> None:
        """Heavy-ball SGD with gradient grad_coeff * u: b = m b + g; theta -= lr b (torch.optim.SGD form)."""
        alpha = grad_coeff * self.scale
        for (p, z), buf in zip(self._draws(), buffers):
            buf.mul_(momentum).add_(z, alpha=alpha)
            p.add_(buf, alpha=-lr)


class ZOUpdater:
    """SGD (optionally with momentum) along ZO directions: theta -= lr * g with g = coeff * u.

    `zo_momentum` 0.9 follows Table 3 (which does not say which optimiser its momentum
    belongs to) but needs one parameter-sized buffer; 0.0 keeps the update fully in place
    (MeZO memory, Appendix F's "memory ~ model size").
    """

    def __init__(self, params: Sequence[torch.Tensor], lr: float, momentum: float = 0.0):
        if not lr >= 0:
            raise ValueError(f"learning rate must be >= 0, got {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"zo_momentum must be in [0, 1), got {momentum}")
        self.params = list(params)
        self.lr = float(lr)
        self.momentum = float(momentum)
        self.buffers = None  # allocated at the first step, like torch.optim.SGD's momentum buffers

    def step(self, direction: Direction, grad_coeff: float) -> None:
        if self.momentum == 0.0:
            direction.add_(-self.lr * grad_coeff)
            return
        if self.buffers is None:
            self.buffers = [torch.zeros_like(p) for p in self.params]
        direction.momentum_step_(self.buffers, grad_coeff, self.momentum, self.lr)

    def state_dict(self) -> dict:
        return {"buffers": None if self.buffers is None else [b.clone() for b in self.buffers]}

    def load_state_dict(self, state: dict) -> None:
        saved = state["buffers"]
        self.buffers = None if saved is None else [b.clone().to(p.device) for b, p in zip(saved, self.params)]
