"""Mixed precision and channels-last against fp32, on whatever device this runs on.

    .venv/bin/python benchmarks/precision_speed.py [--quick]

FedAvg+SC local training (`FedSC` with sharing off: the SC loss of every FedSC run) of one
client with the paper's CIFAR-10 encoder (Fixup ResNet-20 x8, projector 1024-512, from
configs/paper.yaml) on generated 32x32 RGB images. Each setting of `precision` /
`channels_last` (fedrepro.fl.precision) trains the same client from the same weights; one
timed call is one local epoch (2 views per image, grad clipping, SGD momentum), median of
repeats after a warm-up. ours = seconds per local step in the setting, reference = fp32
NCHW in the same process, ratio = reference / ours (> 1: faster than fp32).

Batch 16 (--quick: 8) and 2 steps on a CPU, where a step of 512 would take minutes; batch 512
on CUDA. The GPU figures are the ones the options are for; this machine has none, so only the
CPU rows exist until a GPU run records them. Writes results/benchmarks/precision_speed.{csv,md}.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from common import row, seconds, write

from fedrepro.algorithms.fedsc.base import SSLData
from fedrepro.algorithms.fedsc.fedsc import FedSC
from fedrepro.fl.device import pick_device

ENCODER = {"name": "fixup_resnet20", "kwargs": {"widen_factor": 8}}
SETTINGS = {
    "bf16": {"precision": "bf16"},
    "channels-last": {"channels_last": True},
    "bf16 + channels-last": {"precision": "bf16", "channels_last": True},
}


def client_data(images: int, device: torch.device) -> SSLData:
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.integers(0, 256, size=(images, 3, 32, 32), dtype=np.uint8), device=device)
    y = torch.as_tensor(rng.integers(0, 10, size=images), device=device)
    return SSLData(x, y, x[:8], y[:8], [torch.arange(images, device=device)], 10, (0.5,) * 3, (0.25,) * 3)


def spec(batch: int, options: dict, encoder: dict = ENCODER) -> dict:
    return {
        "rounds": 1,
        "encoder": encoder,
        "projector": {"hidden": 1024, "out": 512},
        "mu": 4.0,
        "sharing": None,
        "train": {"local_epochs": 1, "batch_size": batch, "lr": 0.03, "grad_clip": 3.0},
        "augment": {"crop_scale": [0.08, 1.0], "flip_p": 0.5},
        **options,
    }


def seconds_per_step(
    data: SSLData, batch: int, options: dict, device: torch.device, repeats: int, encoder: dict = ENCODER
) -> float:
    torch.manual_seed(0)
    algo = FedSC(spec(batch, options, encoder), data, seed=0, device=device)
    weights = algo.global_state()

    def epoch():
        algo.client_update(0, weights, 1, 0.03)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    epoch()  # warm-up (kernel selection, allocator)
    steps = -(-data.x_train.shape[0] // batch)
    return seconds(epoch, repeats) / steps


def run(quick: bool) -> list[dict]:
    torch.set_num_threads(1)
    device = pick_device("auto")
    batch, steps = (512, 4) if device.type == "cuda" else (8 if quick else 16, 2)
    repeats = 1 if quick else 3
    data = client_data(batch * steps, device)
    fp32 = seconds_per_step(data, batch, {}, device, repeats)
    rows = []
    for label, options in SETTINGS.items():
        ours = seconds_per_step(data, batch, options, device, repeats)
        rows.append(
            row(
                "6 precision",
                f"FedSC local step, Fixup ResNet-20x8, batch {batch}, {label} vs fp32 on {device.type}",
                "s/step",
                ours,
                fp32,
                "reference / ours",
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch 8 and one repeat on a CPU")
    print(write(run(parser.parse_args().quick), "precision_speed").to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
