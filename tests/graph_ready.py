"""Shared checks of "ready for CUDA graphs": host syncs counted under a dispatch mode, and a fullgraph compile.

A host read of one device value (`.item()`, `float(t)`, `bool(t)`, data-dependent branching on a tensor) goes
through `aten._local_scalar_dense`, so counting that op counts them, on the CPU as on a GPU. Copies of a whole
tensor to the host (`.tolist()`, `.numpy()`, `.cpu()`) and printing one (`repr`, `format`) dispatch no such op
on the CPU (the data is already there) but wait for the device on a GPU: `SyncCounter` counts calls of those
methods as well.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import traceback

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

HOST_COPIES = ("tolist", "numpy", "cpu", "__repr__", "__format__")


class SyncCounter(TorchDispatchMode):
    """Counts host syncs while active: `aten._local_scalar_dense` calls and calls of `HOST_COPIES`."""

    def __init__(self):
        super().__init__()
        self.syncs = 0
        self.saved = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.syncs += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        for name in HOST_COPIES:
            self.saved[name] = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._counting(self.saved[name]))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, method in self.saved.items():
            setattr(torch.Tensor, name, method)
        return super().__exit__(*exc)

    def _counting(self, method):
        def counted(tensor, *args, **kwargs):
            self.syncs += 1
            return method(tensor, *args, **kwargs)

        return counted


def host_syncs(fn, *args, **kwargs) -> int:
    """How many host syncs `fn(*args, **kwargs)` makes."""
    with SyncCounter() as counter:
        fn(*args, **kwargs)
    return counter.syncs


@contextlib.contextmanager
def aot_eager_fullgraph():
    """A clean dynamo state whose graph counters read this block's compiles only; `Tensor.backward()` traced
    into the graph (dynamo's trace_autograd_ops) rather than breaking it."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(trace_autograd_ops=True):
        yield counters
    torch._dynamo.reset()


def compiled(fn):
    return torch.compile(fn, backend="aot_eager", fullgraph=True)


@contextlib.contextmanager
def capture_counting():
    """`aot_eager_fullgraph` whose compiles stand for CUDA-graph captures: static shapes, and a Python float
    that a step reads is a constant of its graph (`specialize_float`), as a captured kernel's arguments are;
    so a value that changes between calls without living in a tensor compiles a new graph, which the
    yielded counters show (counters["stats"]["unique_graphs"])."""
    import torch._dynamo

    with aot_eager_fullgraph() as counters, torch._dynamo.config.patch(specialize_float=True, cache_size_limit=64):
        yield counters


def compiled_static(fn):
    """`fn` compiled in one graph per distinct input shape (dynamic=False), as a CUDA graph is captured."""
    return torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=False)


def in_child(check, *args) -> None:
    """Run check(*args) in a forked child and fail with its traceback if it fails. A traced round leaves dynamo
    state that torch._dynamo.reset() does not clear (torch 2.14): a later compile in the same process of a
    module met in the round (the VFL client, a `server` attribute) failed with a stale attribute error."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def run():
        try:
            check(*args)
            send.send(None)
        except BaseException:
            send.send(traceback.format_exc())

    child = context.Process(target=run)
    child.start()
    error = receive.recv() if receive.poll(600) else "no answer from the child in 600 s"
    child.join(10)
    if error:
        pytest.fail(error)
