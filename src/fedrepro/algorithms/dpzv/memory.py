"""Peak training memory of each VFL method, normalised by the client model's size (Figure 6).

ratio = (client parameter bytes + peak extra bytes during training rounds) / client parameter bytes,
where "extra" is the client optimiser's state (its momentum buffers, made with the optimiser) plus
everything the rounds allocate beyond what existed before the first round (data, embedding table
and models are allocated before): gradients, lazily made state (ZO momentum), activations,
perturbation temporaries and model copies. DPZV without ZO momentum should be
close to 1; first-order VAFL above 2 (Appendix F, Figure 6).

Two measures, labelled in every record:
* `cuda_allocator` (GPU): torch.cuda.reset_peak_memory_stats / max_memory_allocated
  (the paper's Figure 6 compares GPU memory).
* `live_tensor_bytes` (CPU): a TorchDispatchMode that counts the bytes of every
  new tensor storage an op allocates and releases them when the tensor dies;
  its peak is the CPU counterpart of the allocator's peak (tracemalloc and RSS
  do not see torch's CPU allocations reliably). It is an approximation: views
  are not double-counted; storages kept alive only by a view are released when
  their first tensor dies.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveTensorTracker(TorchDispatchMode):
    """Counts bytes of CPU tensor storages allocated inside the mode and their running peak.

    Storages are followed with weak references (`StorageWeakRef`), so a storage
    counts as long as any tensor (a Parameter wrapping a clone, a view) keeps it.
    Expired storages are swept before every op.
    """

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._tracked: dict[int, tuple[StorageWeakRef, int]] = {}

    def _sweep(self) -> None:
        for key in [k for k, (ref, _) in self._tracked.items() if ref.expired()]:
            self.live -= self._tracked.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._sweep()
        out = func(*args, **(kwargs or {}))
        if all(r.alias_info is None for r in func._schema.returns):
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                    storage = t.untyped_storage()
                    key = storage.data_ptr()
                    if key == 0 or key in self._tracked:
                        continue
                    self._tracked[key] = (StorageWeakRef(storage), storage.nbytes())
                    self.live += storage.nbytes()
        self.peak = max(self.peak, self.live)
        return out


def param_bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def optimizer_state_bytes(client) -> int:
    """Bytes of a client's first-order optimiser state (SGD's momentum buffers, zeros from its construction);
    0 for a zeroth-order client (its ZO momentum appears in the rounds and is counted there)."""
    optimizer = getattr(client, "optimizer", None)
    return sum(b.numel() * b.element_size() for b in optimizer.buffers) if optimizer is not None else 0


def measure_rounds(algorithm, rounds: int, warmup: int = 1) -> dict:
    """Run `warmup` then `rounds` server rounds of `algorithm` (client 0 active); the peak extra bytes
    of the measured rounds over what existed before the warm-up.

    The warm-up round lets lazy state (momentum buffers, gradients, cuDNN workspaces, the CUDA
    caching allocator's first blocks) appear before the peak is taken: cold, the first round's
    one-off allocations showed DPZV at 2.02x on an H200 against 1.25x warm. Persistent state made
    in the warm-up still counts (it is alive during the measured rounds). On CUDA the allocator's
    reserved peak (what the process holds from the driver) is reported beside the allocated one.
    """
    client = algorithm.clients[0]
    model_bytes = param_bytes(client.model)
    state_bytes = optimizer_state_bytes(client)  # training memory that exists before the first round
    device = algorithm.device

    def run(n):
        for _ in range(n):
            ids = client.next_batch()
            algorithm.exchange(0, ids)

    reserved = float("nan")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        base_reserved = torch.cuda.memory_reserved(device)
        run(warmup)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        run(rounds)
        torch.cuda.synchronize(device)
        extra, measure = torch.cuda.max_memory_allocated(device) - base, "cuda_allocator"
        reserved = torch.cuda.max_memory_reserved(device) - base_reserved
    else:
        with LiveTensorTracker() as tracker:
            run(warmup)
            tracker.peak = tracker.live  # what the warm-up left alive counts; its transient peak does not
            run(rounds)
        extra, measure = tracker.peak, "live_tensor_bytes"
    extra, reserved = extra + state_bytes, reserved + state_bytes
    return {
        "measure": measure,
        "model_bytes": model_bytes,
        "peak_extra_bytes": int(extra),
        "ratio": (model_bytes + extra) / model_bytes,
        "warmup_rounds": int(warmup),
        "peak_reserved_extra_bytes": reserved,
        "reserved_ratio": (model_bytes + reserved) / model_bytes,
    }


def memory_job(job) -> None:
    """Pipeline entry (Figure 6): peak memory of every method in `spec["methods"]` on one data set."""
    import json

    import pandas as pd

    from fedrepro.algorithms.dpzv.jobs import load_job_data, settings_for
    from fedrepro.atomic import atomic_write, atomic_write_text
    from fedrepro.fl.device import pick_device
    from fedrepro.fl.seeding import seed_everything

    spec = job.spec
    torch.set_num_threads(max(1, int(job.threads)))
    device = pick_device(spec.get("device", "auto"))
    full = load_job_data(job, device)
    warmup = int(spec.get("warmup_rounds", 1))
    rows = []
    for entry in spec["entries"]:
        cls = algorithm_class(entry["method"])
        settings = settings_for({**spec["settings"], **entry.get("options", {})}, {"eps": spec.get("eps", "inf")})
        # at least one batch per warm-up and measured round (client 0 walks its own loader)
        need = settings.batch_size * (int(spec["rounds"]) + warmup)
        data = _subset(full, max(int(spec["num_samples"]), need))
        seed_everything(0)
        algorithm = cls(data, settings, 0, device)
        record = measure_rounds(algorithm, int(spec["rounds"]), warmup)
        rows.append(
            {
                "method": entry["method"],
                "zo_momentum": float(entry.get("options", {}).get("zo_momentum", "nan")),  # NaN: none set
                **record,
                "device": str(device),
                "rounds": int(spec["rounds"]),
                "batch_size": settings.batch_size,
            }
        )
        del algorithm
        if device.type == "cuda":
            torch.cuda.empty_cache()
    atomic_write(job.out("table"), lambda tmp: pd.DataFrame(rows).to_csv(tmp, index=False))
    atomic_write_text(job.out("json"), json.dumps({"spec": spec, "rows": rows}, indent=2, default=float))


def algorithm_class(method: str):
    """The algorithm class of `method`: the `ALGORITHM` of the module its method-table entry names."""
    from fedrepro.algorithms import methods
    from fedrepro.registry import resolve

    return resolve(methods("dpzv")[method].split(":")[0] + ":ALGORITHM")


def _subset(data, n: int):
    """The first n training samples (memory runs need only a few batches; the table scales with n)."""
    from fedrepro.algorithms.dpzv.base import VFLData

    n = min(n, data.num_train)
    keep = np.arange(n)
    return VFLData(
        [x[keep] for x in data.train],
        data.y_train[keep],
        data.val,
        data.y_val,
        data.test,
        data.y_test,
        data.num_classes,
    )
