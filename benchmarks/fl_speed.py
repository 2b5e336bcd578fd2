"""Speed of the shared FL code against bare PyTorch, measured in one process so machine noise cancels.

    .venv/bin/python benchmarks/fl_speed.py [--quick]

1. Round overhead: seconds per FedAvg round of `fedrepro.fl.loop.run_rounds` driving
   `FedAvg` against a bare PyTorch loop (copy the model, torch.optim.SGD, average the
   state dicts) doing the same local steps on the same data: 10 and 100 clients, the
   small CNN, digits. Two rows each: the per-client loop (`batched: false`, the same
   maths as the bare loop: ratio = framework overhead, target <= 1.10) and the default
   batched path (ratio < 1 = faster than the bare loop). Both sides are warmed up, then
   their rounds alternate (each going first every other time), and the medians are compared.
2. Many small clients: client updates per second, a sequential per-client loop against
   the batched `torch.func` program (`fedrepro.fl.batched.local_sgd`), for logistic
   regression, an MLP and LeNet-5 (digits upsampled to 28x28), 100 and 1000 clients;
   ratio = speed-up, target >= 5 at 100 clients of a small model.
3. FedAL clients of one architecture (issue 30): seconds per FedAL iteration (one local and one
   global step of every client, tau = 2 so that half the steps run the frozen LF anchor's forward,
   AL on), the batched path (`fedrepro.fl.batched.Stack`, the default) against the per-client loop
   (`batched: false`), at 4, 16 and 64 clients, for the LEAF CNN (celeba_cnn pool, 3x84x84, 2
   classes) and the SVHN WRN pool (wrn10_1, wrn10_2, wrn16_1; 3x32x32, 10 classes) on random
   images (speed does not depend on the pixels); ratio = speed-up. `--fedal-only` runs this part alone;
   `--fedal-method fedproto` times FedProto (public features) instead (LEAF CNN pool: one feature width);
   `fccl`, `fccl_plus` time FCCL and FCCL+ (local_steps = tau).

One torch thread (the pipeline's jobs run one per core). Writes results/benchmarks/fl_speed.{csv,md}.
"""

from __future__ import annotations

import argparse
import copy
import functools
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from common import row, write
from sklearn.datasets import load_digits

from fedrepro.algorithms.fedal.base import FedData, TrainConfig
from fedrepro.algorithms.fedal.fccl import FCCL
from fedrepro.algorithms.fedal.fedal import FedAL
from fedrepro.algorithms.fedal.fedproto import FedProto
from fedrepro.algorithms.fedavg.fedavg import FedAvg
from fedrepro.data.tensors import TensorData
from fedrepro.fl import batched
from fedrepro.fl.loop import run_rounds
from fedrepro.models import build_model

STEPS, BATCH, LR = 10, 16, 0.05
CNN = ("small_cnn", {"in_channels": 1, "num_classes": 10})
MODELS = {
    "logistic regression": ("logreg", {"in_features": 64, "num_classes": 10}, 8),
    "MLP 64": ("mlp", {"in_features": 64, "num_classes": 10, "hidden": [64]}, 8),
    "LeNet-5": ("lenet5", {"in_channels": 1, "num_classes": 10, "input_size": 28}, 28),
}


def digits_tensors(side: int = 8) -> TensorData:
    x, y = load_digits(return_X_y=True)
    x = torch.as_tensor((x / 16.0 - 0.3) / 0.4, dtype=torch.float32).reshape(-1, 1, 8, 8)
    if side != 8:
        x = F.interpolate(x, size=(side, side), mode="bilinear", align_corners=False)
    y = torch.as_tensor(y, dtype=torch.long)
    return TensorData(x[:1400], y[:1400], x[1400:], y[1400:], 10)


def client_split(n: int, clients: int, seed: int = 0) -> list[np.ndarray]:
    return np.array_split(np.random.default_rng(seed).permutation(n), clients)


class BareFedAvg:
    """What a researcher would write without a framework: copy, train, average."""

    def __init__(self, data: TensorData, clients: list[np.ndarray]):
        self.data, self.clients = data, clients
        self.model = build_model(CNN[0], **CNN[1])
        self.rng = np.random.default_rng(0)

    def round(self) -> None:
        states, sizes = [], []
        for client in self.clients:
            local = copy.deepcopy(self.model)
            optimiser = torch.optim.SGD(local.parameters(), lr=LR)
            for _ in range(STEPS):
                index = torch.as_tensor(self.rng.choice(client, BATCH))
                loss = F.cross_entropy(local(self.data.x_train[index]), self.data.y_train[index])
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
            states.append(local.state_dict())
            sizes.append(len(client))
        weights = torch.tensor(sizes, dtype=torch.float32) / sum(sizes)
        self.model.load_state_dict({k: sum(w * s[k] for w, s in zip(weights, states)) for k in states[0]})


def fedrepro_fedavg(data: TensorData, clients: list[np.ndarray], batched_clients: bool) -> FedAvg:
    spec = {
        "model": CNN[0],
        "model_options": CNN[1],
        "local_steps": STEPS,
        "batch_size": BATCH,
        "lr": LR,
        "participation": 1.0,
        "batched": batched_clients,
    }
    algorithm = FedAvg(spec, data, clients, 0, torch.device("cpu"))
    algorithm.evaluate = lambda t: {}  # the bare loop does not evaluate either
    return algorithm


def round_overhead(data: TensorData, clients_count: int, rounds: int, batched_clients: bool) -> dict:
    clients = client_split(len(data.y_train), clients_count)
    ours, bare = fedrepro_fedavg(data, clients, batched_clients), BareFedAvg(data, clients)
    run_rounds(ours, 1, desc="warm-up")
    bare.round()
    times = {"ours": [], "bare": []}
    sides = {"ours": lambda: ours.round(1), "bare": bare.round}
    for r in range(rounds):  # alternate the sides, and which goes first, so that load drifts hit both
        for side in ("ours", "bare") if r % 2 == 0 else ("bare", "ours"):
            start = time.perf_counter()
            sides[side]()
            times[side].append(time.perf_counter() - start)
    ours_times, bare_times = times["ours"], times["bare"]
    path = "batched" if batched_clients else "per-client loop"
    target = "" if batched_clients else "<= 1.10"
    ratio = statistics.median(ours_times) / statistics.median(bare_times)
    return row(
        "1 round overhead",
        f"FedAvg {path}, small CNN, {clients_count} clients",
        "s/round",
        statistics.median(ours_times),
        statistics.median(bare_times),
        "ours / reference",
        target,
        None if batched_clients else ratio <= 1.10,
    )


def sequential_updates(model, x, y, index) -> None:
    for k in range(index.shape[1]):
        local = copy.deepcopy(model)
        optimiser = torch.optim.SGD(local.parameters(), lr=LR)
        for step in range(STEPS):
            loss = F.cross_entropy(local(x[index[step, k]]), y[index[step, k]])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()


def batched_updates(model, x, y, index) -> None:
    params = batched.broadcast(batched.parameters_of(model), index.shape[1])
    batched.local_sgd(batched.cross_entropy_loss(model), params, lambda s: (x[index[s]], y[index[s]]), STEPS, LR)


def many_clients(label: str, clients_count: int) -> dict:
    name, options, side = MODELS[label]
    data = digits_tensors(side)
    model = build_model(name, **options)
    clients = client_split(len(data.y_train), clients_count)
    index = torch.stack(
        [torch.as_tensor(np.random.default_rng(s).choice(c, (STEPS, BATCH))) for s, c in enumerate(clients)], dim=1
    )  # (steps, clients, batch)
    x, y = data.x_train, data.y_train
    sample = index[:, :2]
    sequential_updates(model, x, y, sample)  # warm-up both paths
    batched_updates(model, x, y, sample)
    start = time.perf_counter()
    sequential_updates(model, x, y, index)
    sequential = time.perf_counter() - start
    start = time.perf_counter()
    batched_updates(model, x, y, index)
    vectorised = time.perf_counter() - start
    small = clients_count == 100 and label != "LeNet-5"
    speedup = sequential / vectorised
    return row(
        "2 many small clients",
        f"{label}, {clients_count} clients x {STEPS} steps",
        "client updates/s",
        clients_count / vectorised,
        clients_count / sequential,
        "ours / reference",
        ">= 5" if small else "",
        speedup >= 5 if small else None,
    )


FEDAL_POOLS = {  # label: (pool, image shape, classes): configs/paper.yaml's pools
    "LEAF CNN (celeba_cnn)": ([{"name": "leaf_cnn", "options": {"in_channels": 3}}], (3, 84, 84), 2),
    "WRN pool (svhn_wrn)": (
        [{"name": f"wrn{d}_{k}", "options": {"in_channels": 3}} for d, k in ((10, 1), (10, 2), (16, 1))],
        (3, 32, 32),
        10,
    ),
}
FEDAL_TAU, FEDAL_BATCH = 2, 32
FEDAL_METHODS = {  # --fedal-method: the paper-scale settings' kind of run (FedProto: its public-feature variant)
    "fedal": FedAL,
    "fedproto": FedProto,  # needs one feature dimension: the LEAF CNN pool
    # FCCL's teachers pretrain before the timed rounds (one step here); local_steps = tau
    "fccl": functools.partial(FCCL, pretrain_iters=1),
    "fccl_plus": functools.partial(FCCL, plus=True),
}


def fedal_seconds(label: str, clients: int, batched_clients: bool, rounds: int, method: str = "fedal") -> float:
    """Median seconds per iteration of `method` (a round / tau) after one warm-up round."""
    pool, shape, classes = FEDAL_POOLS[label]
    gen = torch.Generator().manual_seed(0)

    def images(n):
        return torch.randn(n, *shape, generator=gen), torch.randint(0, classes, (n,), generator=gen)

    xs, ys = zip(*(images(2 * FEDAL_BATCH) for _ in range(clients)))
    data = FedData(list(xs), list(ys), images(4 * FEDAL_BATCH)[0], *images(8), classes)
    cfg = TrainConfig(tau=FEDAL_TAU, batch_size=FEDAL_BATCH, assignment="round_robin")
    algo = FEDAL_METHODS[method](data, pool, cfg, seed=0, batched=batched_clients)
    algo.round(1)
    times = []
    for t in range(rounds):
        start = time.perf_counter()
        algo.round(t + 2)
        times.append((time.perf_counter() - start) / FEDAL_TAU)
    return statistics.median(times)


def fedal_clients(label: str, clients: int, rounds: int, method: str = "fedal") -> dict:
    batched_s = fedal_seconds(label, clients, True, rounds, method)
    loop_s = fedal_seconds(label, clients, False, rounds, method)
    print(
        f"{method}, {label}, {clients} clients: batched {batched_s:.3f} s, per-client loop {loop_s:.3f} s", flush=True
    )
    return row(
        "3 FedAL clients stacked" if method == "fedal" else f"3 {method} clients stacked",
        f"{label}, {clients} clients",
        "s/iteration",
        batched_s,
        loop_s,
        "reference / ours",
    )


def run_fedal(quick: bool, pools=tuple(FEDAL_POOLS), counts=(4, 16, 64), method: str = "fedal") -> list[dict]:
    torch.set_num_threads(1)
    return [fedal_clients(label, n, 1 if quick else 3, method) for label in pools for n in counts]


def run(quick: bool) -> list[dict]:
    torch.set_num_threads(1)
    data = digits_tensors()
    rounds = {10: 4 if quick else 16, 100: 2 if quick else 8}
    rows = [round_overhead(data, n, rounds[n], b) for b in (False, True) for n in (10, 100)]
    counts = (100,) if quick else (100, 1000)
    rows += [many_clients(label, n) for label in MODELS for n in counts]
    return rows + run_fedal(quick)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, 100 clients only")
    parser.add_argument("--fedal-only", action="store_true", help="only part 3 (FedAL clients stacked)")
    parser.add_argument("--fedal-pools", nargs="+", choices=["leaf", "wrn"], default=["leaf", "wrn"])
    parser.add_argument("--fedal-clients", nargs="+", type=int, default=[4, 16, 64])
    parser.add_argument("--fedal-method", choices=sorted(FEDAL_METHODS), default="fedal", help="with --fedal-only")
    args = parser.parse_args()
    pools = [label for label in FEDAL_POOLS if any(p in label.lower() for p in args.fedal_pools)]
    method = args.fedal_method
    rows = run_fedal(args.quick, pools, args.fedal_clients, method) if args.fedal_only else run(args.quick)
    name = ("fl_speed_fedal" if method == "fedal" else f"fl_speed_{method}") if args.fedal_only else "fl_speed"
    print(write(rows, name).to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
