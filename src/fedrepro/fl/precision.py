"""Mixed precision, channels-last convolutions and torch.compile for training on a GPU.

Config keys `precision` (fp32 | bf16), `channels_last` and `compile` (true | false), beside `device`:

* `bf16` runs the networks' forward passes in local training under `torch.autocast` with
  bfloat16. Parameters, gradients, optimiser state and the losses stay fp32 (outputs are cast
  back before any loss), and so does everything a paper's privacy or evaluation numbers rest
  on: DP-CalR's correlation matrices and noise, clipping, zeroth-order differences, the kNN
  monitor and the linear probe. fp16 is not offered: it needs loss scaling, while bf16 has
  the exponent range of fp32.
* `channels_last` stores convolution weights and image batches as NHWC, the layout of
  cuDNN's tensor-core kernels.

`compile: true` runs those forward passes under `torch.compile` (graphs built once per job; the
backward of the compiled forward is compiled too). FedAvg's batched path (one vmap over clients)
stays eager: compiling it needs the whole vmap(grad) program compiled (fl/batched.py). On the
development CPU compile gave a FedSC step no speed-up after minutes of compiling
(docs/benchmarks.md, issue 20); the GPU gain is unmeasured here.

All default off: the papers' numbers were produced in fp32, and no run here has checked
that bf16 reproduces them. benchmarks/precision_speed.py measures the speed on whatever
device it runs on (docs/benchmarks.md: on the 2-core development CPU, bf16 made a FedSC step
1.9x faster, channels-last 0.97x). FedSC and FedAvg honour them; the DPZV family honours `precision`
only, for its clients' training forwards (algorithms/dpzv/base.py `client_embed`; the first-order
baselines' backward follows its forward; the server's losses and differences stay fp32); SteFFLe
(logistic regression) never uses them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from fedrepro.options import TRAINING_DEFAULTS

PRECISIONS = ("fp32", "bf16")


# torch.compile's backend for `compile: true`: inductor generates fused kernels (C++ on a CPU, Triton
# on a GPU). Tests swap in "aot_eager" (the same traced graphs, no code generation) to stay fast.
COMPILE_BACKEND = "inductor"


def _fp32(model, x: torch.Tensor) -> torch.Tensor:
    return model(x)


def _bf16(model, x: torch.Tensor) -> torch.Tensor:
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        out = model(x)
    return out.float()


RUNNERS = {"fp32": _fp32, "bf16": _bf16}


@functools.cache
def compiled(name: str, backend: str):
    """RUNNERS[name] under torch.compile, one per process: each model instance of an architecture
    reuses its graph (parameters are graph inputs), so a job compiles once (plus once per new input
    shape, e.g. a smaller last batch). Importing torch._dynamo here, not at module import, keeps
    its start-up cost off every job that leaves compile off."""
    return torch.compile(RUNNERS[name], backend=backend)


@dataclass(frozen=True)
class Precision:
    name: str = "fp32"
    channels_last: bool = False
    compile: bool = False

    @classmethod
    def from_spec(cls, spec: dict) -> Precision:
        name = spec.get("precision", TRAINING_DEFAULTS["precision"])
        if name not in PRECISIONS:
            raise ValueError(f"config key 'precision': {name!r} is not allowed (allowed: {', '.join(PRECISIONS)})")
        return cls(
            name,
            bool(spec.get("channels_last", TRAINING_DEFAULTS["channels_last"])),
            bool(spec.get("compile", TRAINING_DEFAULTS.get("compile", False))),
        )

    def prepare(self, model: nn.Module) -> nn.Module:
        """The model with NHWC convolution weights when channels_last is on (in place)."""
        return model.to(memory_format=torch.channels_last) if self.channels_last else model

    def forward(self, model, x: torch.Tensor) -> torch.Tensor:
        """`model(x)` in this precision and layout, compiled when `compile` is on; the output is fp32."""
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        # inside torch.func transforms (FedAvg's batched vmap(grad) path) dynamo cannot trace a
        # compiled function and would fall back to eager after a failed attempt: go eager directly
        eager = not self.compile or torch._C._functorch.is_functorch_wrapped_tensor(x)
        run = RUNNERS[self.name] if eager else compiled(self.name, COMPILE_BACKEND)
        return run(model, x)
