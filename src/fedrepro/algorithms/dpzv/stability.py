"""Is Algorithm 1's zeroth-order server step stable at a data set's Table 2 step size? (a reduced run)

Algorithm 1 line 7 updates the server head by a zeroth-order step. With Table 2's eta_0 far above the
step bound of the paper's convergence theory (MNIST, CIFAR-10) the head's norm drifts; where eta_0 is
near the bound (ModelNet40, Amazon) it may not. This probe runs DPZV at eps = inf with the ZO server on
generated data of the data set's format: the paper-scale head (M x embed_dim inputs, its hidden width, the
data set's classes), Table 2's learning rates, ZO momentum 0.9 and the batch size, with a small client
model standing in for the paper's (ResNet-18 / BERT would take hours on a CPU; the head's step does not
depend on the client body beyond the embeddings' scale). It prints the head's parameter norm and the
training loss every `every` server rounds.

    python -m fedrepro.algorithms.dpzv.stability --dataset modelnet40 --rounds 3000
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import torch
import yaml

from fedrepro.algorithms.dpzv.base import VFLData, VFLSettings
from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.data.catalog import get as info

SMALL_CLIENT = {
    "image": ("vfl_mnist_cnn", {"pool": [2, 2], "width": 8}),
    "multiview": ("vfl_mnist_cnn", {"pool": [2, 2], "width": 8}),
    "text": (
        "vfl_text_encoder",
        {"vocab_size": 1000, "hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "max_len": 200},
    ),
}


def generated(dataset: str, clients: int, samples: int, seed: int) -> VFLData:
    """Learnable data of the data set's per-client format: class prototypes plus noise (tokens for text)."""
    meta = info(dataset)
    rng = np.random.default_rng(seed)
    y = torch.as_tensor(rng.integers(0, meta.num_classes, size=samples))
    if meta.kind == "text":
        length = max(8, meta.input_shape[0] // clients)
        proto = rng.integers(1, 1000, size=(meta.num_classes, length))
        keep = rng.random((samples, length)) < 0.7
        tokens = np.where(keep, proto[y.numpy()], rng.integers(1, 1000, size=(samples, length)))
        parts = [torch.as_tensor(tokens, dtype=torch.long) for _ in range(clients)]
    else:
        shape = (
            meta.input_shape[1:]
            if meta.kind == "multiview"
            else (meta.input_shape[0], meta.input_shape[1] // 2, meta.input_shape[2] // 2)
        )
        proto = rng.normal(size=(meta.num_classes, *shape))
        parts = [
            torch.as_tensor(proto[y.numpy()] + rng.normal(size=(samples, *shape)), dtype=torch.float32)
            for _ in range(clients)
        ]
    return VFLData(parts, y, parts, y, parts, y, meta.num_classes)


def probe(dataset: str, cfg: dict, rounds: int, every: int, seed: int = 0, samples: int = 2048) -> list[dict]:
    """Head norm and training loss of DPZV's ZO server (eps = inf) every `every` rounds."""
    torch.manual_seed(seed)
    clients = cfg["partition"]["clients"]
    data = generated(dataset, clients, samples, seed)
    client, options = SMALL_CLIENT[info(dataset).kind]
    lr = cfg["lr"]["dpzv"]
    settings = VFLSettings(
        batch_size=cfg["batch_size"],
        epochs=max(1, math.ceil(rounds / (clients * (samples // cfg["batch_size"])))),
        client_model=client,
        client_kwargs=options,
        embed_dim=cfg["model"]["embed_dim"],
        server_hidden=cfg["model"]["server_hidden"],
        lr_server=lr["server"],
        lr_client=lr["client"],
        extra={"server_update": "zo", "zo_momentum": 0.9},
    )
    algo = DPZV(data, settings, seed=seed)
    trace, losses = [], []
    for t in range(1, rounds + 1):
        m = algo.next_client()
        losses.append(float(algo.exchange(m, algo.clients[m].next_batch())["train_loss"]))
        if t % every == 0 or t == 1:
            norm = math.sqrt(sum(float(p.detach().pow(2).sum()) for p in algo.server.params))
            trace.append({"round": t, "head_norm": norm, "train_loss": float(np.mean(losses))})
            losses = []
    return trace


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/paper.yaml")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--lr-server", type=float, help="override Table 2's server step (a control)")
    args = parser.parse_args(argv)
    cfg = yaml.safe_load(Path(args.config).read_text())["dpzv"]["datasets"][args.dataset]
    if args.lr_server is not None:
        cfg["lr"]["dpzv"]["server"] = args.lr_server
    print(f"{args.dataset}: ZO server, lr_server {cfg['lr']['dpzv']['server']:g}, batch {cfg['batch_size']}")
    for row in probe(args.dataset, cfg, args.rounds, args.every):
        print(f"round {row['round']:6d}  head norm {row['head_norm']:.4g}  train loss {row['train_loss']:.4f}")


if __name__ == "__main__":
    main()
