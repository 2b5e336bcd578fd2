"""Speed of the shared FL code against bare PyTorch, measured in one process so machine noise cancels.

    .venv/bin/python benchmarks/fl_speed.py [--repeats 3]

1. Round overhead: seconds per FedAvg round of `fedrepro.fl.loop.run_rounds` driving
   `FedAvg` (per-client loop, the same maths as the bare loop) against a bare PyTorch loop
   doing the same local steps on the same data (10 and 100 clients, small CNN, digits).
2. Many small clients: client updates per second, sequential per-client loop against the
   batched `torch.func` program (`fedrepro.fl.batched.local_sgd`), for logistic regression,
   an MLP and a LeNet-size CNN, 100 and 1000 clients.

Writes results/benchmarks/fl_speed.{csv,md}.
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits

from fedrepro.algorithms.baselines.fedavg import FedAvg
from fedrepro.data.tensors import TensorData
from fedrepro.fl import batched
from fedrepro.fl.loop import run_rounds
from fedrepro.models import build_model

ROOT = Path(__file__).resolve().parents[1]
STEPS, BATCH, LR = 10, 16, 0.05


def digits_tensors() -> TensorData:
    x, y = load_digits(return_X_y=True)
    x = torch.as_tensor((x / 16.0 - 0.3) / 0.4, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.as_tensor(y, dtype=torch.long)
    return TensorData(x[:1400], y[:1400], x[1400:], y[1400:], 10)


def client_split(n: int, clients: int, seed: int = 0) -> list[np.ndarray]:
    return np.array_split(np.random.default_rng(seed).permutation(n), clients)


def bare_round(model, data, clients, batches):
    """What a researcher would write without a framework: copy, train, average."""
    states, sizes = [], []
    for client, steps in zip(clients, batches):
        local = copy.deepcopy(model)
        optimiser = torch.optim.SGD(local.parameters(), lr=LR)
        for index in steps:
            loss = F.cross_entropy(local(data.x_train[index]), data.y_train[index])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        states.append(local.state_dict())
        sizes.append(len(client))
    weights = torch.tensor(sizes, dtype=torch.float32) / sum(sizes)
    model.load_state_dict({k: sum(w * s[k] for w, s in zip(weights, states)) for k in states[0]})


def round_overhead(data: TensorData, clients_count: int, rounds: int) -> dict:
    spec = {"model": "small_cnn", "model_options": {"in_channels": 1, "num_classes": 10},
            "rounds": rounds, "local_steps": STEPS, "batch_size": BATCH, "lr": LR,
            "participation": 1.0, "batched": False}
    clients = client_split(len(data.y_train), clients_count)
    torch.manual_seed(0)
    algo = FedAvg(spec, data, clients, 0, torch.device("cpu"))
    algo.evaluate = lambda t: {}  # both sides skip evaluation
    start = time.perf_counter()
    run_rounds(algo, rounds, desc="fedrepro")
    ours = (time.perf_counter() - start) / rounds

    torch.manual_seed(0)
    model = build_model("small_cnn", in_channels=1, num_classes=10)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(rounds):
        batches = [[torch.as_tensor(rng.choice(c, BATCH)) for _ in range(STEPS)] for c in clients]
        bare_round(model, data, clients, batches)
    bare = (time.perf_counter() - start) / rounds
    return {"benchmark": "round overhead", "model": "small_cnn", "clients": clients_count,
            "ours_s": ours, "reference_s": bare, "ratio": ours / bare,
            "note": "s/round, fedrepro FedAvg loop vs bare PyTorch loop (ratio 1 = no overhead)"}


MODELS = {
    "logreg": ("logreg", {"in_features": 64, "num_classes": 10}),
    "mlp": ("mlp", {"in_features": 64, "num_classes": 10, "hidden": [64]}),
    "cnn": ("small_cnn", {"in_channels": 1, "num_classes": 10}),
}


def many_clients(data: TensorData, label: str, clients_count: int) -> dict:
    name, options = MODELS[label]
    model = build_model(name, **options)
    clients = client_split(len(data.y_train), clients_count)
    index = torch.stack([torch.as_tensor(np.random.default_rng(s).choice(c, (STEPS, BATCH)))
                         for s, c in enumerate(clients)], dim=1)  # (steps, clients, batch)
    x, y = data.x_train, data.y_train
    if label != "cnn":
        x = x.reshape(len(x), -1)

    start = time.perf_counter()
    for k in range(clients_count):
        local = copy.deepcopy(model)
        optimiser = torch.optim.SGD(local.parameters(), lr=LR)
        for step in range(STEPS):
            loss = F.cross_entropy(local(x[index[step, k]]), y[index[step, k]])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    sequential = time.perf_counter() - start

    start = time.perf_counter()
    params = batched.broadcast(batched.parameters_of(model), clients_count)
    batched.local_sgd(batched.cross_entropy_loss(model), params,
                      lambda s: (x[index[s]], y[index[s]]), STEPS, LR)
    vectorised = time.perf_counter() - start
    return {"benchmark": "many clients", "model": label, "clients": clients_count,
            "ours_s": vectorised, "reference_s": sequential, "ratio": sequential / vectorised,
            "note": f"client updates/s batched {clients_count / vectorised:.0f} vs sequential "
                    f"{clients_count / sequential:.0f} (ratio = speed-up)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    options = parser.parse_args()
    torch.set_num_threads(options.threads)
    data = digits_tensors()
    rows = []
    for _ in range(options.repeats):
        rows += [round_overhead(data, 10, 5), round_overhead(data, 100, 2)]
        rows += [many_clients(data, m, n) for m in MODELS for n in (100, 1000)]
    table = pd.DataFrame(rows).groupby(["benchmark", "model", "clients"], sort=False).median(numeric_only=True)
    table = table.reset_index()
    out = ROOT / "results" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "fl_speed.csv", index=False)
    (out / "fl_speed.md").write_text(table.to_markdown(index=False, floatfmt=".4g") + "\n")
    print(table.to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
