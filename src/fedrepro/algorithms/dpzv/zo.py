"""Zeroth-order estimation: direction sampler, two-point estimator, in-place perturbation.

Notation: `zo_lambda` is the ZO smoothing parameter (DPZV's lambda = 1e-3,
Table 3); the Gaussian-DP level mu is called `gdp_mu` elsewhere (MeZO and the
VFL-CZOFO code call the smoothing parameter mu, hence the explicit names).

Directions (eqs. 3 and 12): by default u is uniform on the sphere of radius
sqrt(d) (the paper's u ~ Uniform(sqrt(d) S^{d-1}); ||u||^2 = d, E[u u^T] = I),
built as u = sqrt(d) z / ||z|| with z ~ N(0, I). `direction="gaussian"` uses
u = z (MeZO's choice; the same estimator in expectation).

MeZO-style in place (Section 3: "we adopt the MeZO methodology"): a
`Direction` stores only a seed and one scalar scale, and every use regenerates z
from the seed. z is drawn in flat buckets: consecutive parameter tensors are
grouped into buckets of at most as many elements as the largest parameter tensor
(`bucket_sizes`), one `torch.randn` per bucket, applied to the bucket's tensors by
one foreach op over views of it. So a pass over BERT-base's 199 tensors is 5 draws
and 5 foreach ops instead of 199 of each (kernel launches bound DPZV's rounds on a
GPU).
No host sync: the sphere's scale sqrt(d)/||z|| and every coefficient that depends on data
(the server's Delta) stay 0-dim tensors on the device, computed in float64 as Python computed
them before, and z is added by `addcmul` with the coefficient cast to the parameters' dtype, which
rounds once as `add(alpha=...)` with a Python alpha does (bit for bit; tests/dpzv/test_graph_ready.py).
A direction can also be given its bucket draws (`draws`, from `draw_buckets`) instead of a seed: a
compiled round takes them as inputs, since torch.compile cannot trace a seeded torch.Generator.
Memory: one bucket is alive at a time (freed before the next is drawn), so the
only temporary is at most the largest parameter tensor, as when z was drawn tensor
by tensor; no second copy of the model exists. (A fixed floor on the bucket size,
say 65,536 elements, would make a small model's temporary as large as the model:
a 2-layer width-64 transformer measured 1.87x its size instead of < 1.6x.)
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


def bucket_sizes(numels: Sequence[int]) -> list[int]:
    """How many consecutive tensors each bucket holds: tensors are added in order while the bucket's
    elements stay within the largest tensor's (the MeZO temporary's bound, module docstring)."""
    bound = max(numels, default=0)
    sizes, total = [], 0
    for n in numels:
        if sizes and total + n <= bound:
            sizes[-1] += 1
            total += n
        else:
            sizes.append(1)
            total = n
    return sizes


# Kernel launches of each pass over a direction of `buckets` buckets (fedrepro.plan prices a round from
# these; tests/dpzv/test_zo_cost.py counts the code below against them).
def norm_launches(buckets: int, kind: str) -> int:
    """The sphere's scale at construction: randn and dot per bucket, stack and sum of the dots, then sqrt(d)
    (a fill), the square root and the division."""
    return 0 if kind == "gaussian" else 2 * buckets + 5


def add_launches(buckets: int, kind: str = "sphere") -> int:
    """`Direction.add_` with a Python coefficient: times the sphere's scale and the cast (none for a gaussian
    direction), then randn and one foreach add per bucket."""
    return (0 if kind == "gaussian" else 2) + 2 * buckets


def step_launches(buckets: int, momentum: float) -> int:
    """`ZOUpdater.step` with a float64 0-dim tensor coefficient (the server's answer, `as_float64`): z's
    multiplier (times -lr without momentum, times the scale, the cast), then randn and one foreach add per
    bucket; with momentum, the foreach mul of the buffers before and their foreach add to the parameters."""
    return 2 * buckets + (3 if momentum == 0.0 else 4)


class Direction:
    """A random direction over a list of parameter tensors, kept as a seed.

    z is one Gaussian draw per bucket (`bucket_sizes`), viewed as the bucket's tensors; the direction
    is u = scale * z, with scale = sqrt(d)/||z|| (sphere) or 1 (gaussian). The generator is
    re-seeded at every pass, so the same seed always gives bit-identical tensors (eq. 9 updates along
    the same u the client perturbed with).
    """

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        seed: int | None,
        kind: str = "sphere",
        draws: Sequence[torch.Tensor] | None = None,
    ):
        self.params = list(params)
        if len({(p.dtype, p.device) for p in self.params}) > 1:
            raise ValueError("Direction: every parameter tensor must have the same dtype and device")
        if (seed is None) == (draws is None):
            raise ValueError("Direction: give either a seed or its bucket draws (draw_buckets)")
        self.seed = None if seed is None else int(seed)
        self.draws = None if draws is None else list(draws)
        self.kind = check_direction(kind)
        self.dim = num_params(self.params)
        self.buckets = []  # (first, stop) tensor indices of each bucket
        for size in bucket_sizes([p.numel() for p in self.params]):
            first = self.buckets[-1][1] if self.buckets else 0
            self.buckets.append((first, first + size))
        self.scale = 1.0 if kind == "gaussian" else self._sphere_scale()

    def _each_bucket(self, fn: Callable[[int, int, torch.Tensor], object]) -> None:
        """fn(first, stop, z) for each bucket in order, z the flat draw of params[first:stop]. The draw is an
        argument of fn only, so it is freed before the next is drawn (one bucket alive at a time)."""
        if self.draws is not None:
            for (first, stop), z in zip(self.buckets, self.draws):
                fn(first, stop, z)
            return
        p0 = self.params[0]
        gen = torch.Generator(device=p0.device)
        gen.manual_seed(self.seed)
        for first, stop in self.buckets:
            fn(first, stop, torch.randn(self._elements(first, stop), generator=gen, dtype=p0.dtype, device=p0.device))

    def _elements(self, first: int, stop: int) -> int:
        return num_params(self.params[first:stop])

    def _shaped(self, first: int, stop: int, z: torch.Tensor) -> list[torch.Tensor]:
        """Views of a bucket's flat draw shaped like its tensors (no copy, no kernel)."""
        group = self.params[first:stop]
        return [v.view(p.shape) for v, p in zip(z.split([p.numel() for p in group]), group)]

    def _sphere_scale(self) -> torch.Tensor:
        """sqrt(d) / ||z|| in float64 on the device: the IEEE operations of math.sqrt(d) / math.sqrt(||z||^2),
        without reading ||z|| on the host."""
        dots = []
        self._each_bucket(lambda first, stop, z: dots.append(torch.dot(z, z)))
        squared = torch.stack(dots).sum(dtype=torch.float64)
        return torch.full_like(squared, math.sqrt(self.dim)).div_(squared.sqrt_())

    def _alpha(self, coeff: float | torch.Tensor) -> float | torch.Tensor:
        """z's multiplier coeff * scale as the kernels read it: a number when both are numbers, else a 0-dim
        tensor of the parameters' dtype, the float64 product cast as a kernel casts a Python alpha."""
        if not isinstance(coeff, torch.Tensor) and not isinstance(self.scale, torch.Tensor):
            return coeff * self.scale
        return (as_float64(coeff) * self.scale).to(self.params[0].dtype)

    def tensors(self) -> list[torch.Tensor]:
        """u as a list of tensors (allocates a full copy: tests and diagnostics only)."""
        out = []
        self._each_bucket(lambda first, stop, z: out.extend(self.scale * v for v in self._shaped(first, stop, z)))
        return out

    def add_(self, coeff: float | torch.Tensor) -> None:
        """In place: theta += coeff * u."""
        alpha = self._alpha(coeff)
        with torch.no_grad():  # a block, not the decorator: dynamo traces it in a Direction built in the graph
            self._each_bucket(
                lambda first, stop, z: add_scaled_(self.params[first:stop], self._shaped(first, stop, z), alpha)
            )

    def momentum_step_(
        self, buffers: Sequence[torch.Tensor], grad_coeff: float | torch.Tensor, momentum: float, lr: float
    ) -> None:
        """Heavy-ball SGD with gradient grad_coeff * u: b = m b + g; theta -= lr b (torch.optim.SGD form)."""
        buffers = list(buffers)
        alpha = self._alpha(grad_coeff)
        with torch.no_grad():
            torch._foreach_mul_(buffers, momentum)
            self._each_bucket(
                lambda first, stop, z: add_scaled_(buffers[first:stop], self._shaped(first, stop, z), alpha)
            )
            torch._foreach_add_(self.params, buffers, alpha=-lr)


def as_float64(x: float | torch.Tensor) -> float | torch.Tensor:
    """A tensor in float64 (a float32 value exactly, as float() read it before); a number unchanged."""
    return x.to(torch.float64) if isinstance(x, torch.Tensor) else x


def add_scaled_(targets: list[torch.Tensor], z: list[torch.Tensor], alpha: float | torch.Tensor) -> None:
    """targets += alpha * z. A 0-dim tensor alpha goes through addcmul, whose CPU kernel rounds once, as the
    add kernel does with a Python alpha: the same bits (tests/dpzv/test_graph_ready.py), with no host sync.
    On a GPU the foreach op takes its per-tensor route for a 0-dim operand: one launch per tensor."""
    if isinstance(alpha, torch.Tensor):
        torch._foreach_addcmul_(targets, z, [alpha] * len(targets))
    else:
        torch._foreach_add_(targets, z, alpha=alpha)


def direction_from(params: Sequence[torch.Tensor], source, kind: str) -> Direction:
    """The direction of a seed (an int) or of its bucket draws (a list of tensors, `draw_buckets`)."""
    if isinstance(source, int):
        return Direction(params, source, kind)
    return Direction(params, None, kind, draws=source)


def draw_buckets(params: Sequence[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """The bucket draws of the direction of `seed` (a full copy of z): what a compiled round takes as input
    (`Direction(params, None, kind, draws)`), the same numbers as the seed's regeneration."""
    out = []
    Direction(params, seed, "gaussian")._each_bucket(lambda first, stop, z: out.append(z))
    return out


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

    def step(self, direction: Direction, grad_coeff: float | torch.Tensor) -> None:
        """A tensor grad_coeff (the server's answer) is never read on the host (`Direction._alpha`)."""
        if self.momentum == 0.0:
            direction.add_(-self.lr * as_float64(grad_coeff))
            return
        if self.buffers is None:
            self.buffers = [torch.zeros_like(p) for p in self.params]
        direction.momentum_step_(self.buffers, grad_coeff, self.momentum, self.lr)

    def state_dict(self) -> dict:
        return {"buffers": None if self.buffers is None else [b.clone() for b in self.buffers]}

    def load_state_dict(self, state: dict) -> None:
        saved = state["buffers"]
        self.buffers = None if saved is None else [b.clone().to(p.device) for b, p in zip(saved, self.params)]
