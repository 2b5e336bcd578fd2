"""Benchmark 3: speed (rounds/s) and peak memory (x model size) of DPZV, ZOO-VFL, VFL-CZOFO and VAFL.

    .venv/bin/python benchmarks/dpzv_speed.py [--quick]

Every method of config.yaml's `dpzv.methods` runs on every client model below; the
zeroth-order methods with a ZO momentum (DPZV, ZOO-VFL) run at 0.9 and at 0, as Figure 6's
job does. Models: the quick digits CNN (`dpzv.datasets.digits`, batch 64) and Figure 6's
ResNet-18 with group norm on the multi-view data (`dpzv.figures.fig6`, batch 8); without
--quick also Figure 6's BERT-shaped text encoder. The algorithm objects are built as the
pipeline builds them: settings from `fedrepro.experiments.dpzv.memory_spec` and
`fedrepro.algorithms.dpzv.jobs.settings_for` (eps = inf, no noise), data prepared by
`fedrepro.data.prepare` in a temporary folder, split by the vertical partition and cut to a
few samples; the embedding table starts at zeros (no forward fill: it costs set-up time and
changes nothing in a round). Client 0 is the active client. Two rows per method and model:

* rounds/s: server rounds (`exchange`) per second, median of repeated blocks, measured after
  the memory pass plus one warm-up round, with the live-tensor tracker off. reference = VAFL's
  rounds/s on the same model in the same process; ratio = ours / reference, the speed relative
  to first-order VAFL. The paper states no speed target.
* x model size: peak training memory as a multiple of the client model's parameter bytes, from
  `fedrepro.algorithms.dpzv.memory.measure_rounds` on the fresh object (live CPU tensor bytes,
  or the CUDA allocator on a GPU). ours = parameter bytes + peak extra bytes, reference =
  parameter bytes. Targets (paper Figure 6 and Appendix F), only for the large
  models the paper's claim is about (for the ~3k-parameter digits CNN, activations dominate):
  DPZV without ZO momentum ~1 (< 1.5); DPZV with ZO momentum ~2 (< 2.5: one momentum buffer);
  VAFL > 2; ZOO-VFL above DPZV at the same ZO momentum; VFL-CZOFO above DPZV at ZO momentum 0.9.

Writes results/benchmarks/dpzv_speed.{csv,md}.
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import tempfile
from pathlib import Path

import torch
import yaml
from common import row, seconds, write

ROOT = Path(__file__).resolve().parents[1]
BENCHMARK = "3 zeroth-order rounds (DPZV)"
MODEL_LABELS = {"vfl_mnist_cnn": "digits CNN", "vfl_resnet18": "ResNet-18 GN", "vfl_text_encoder": "text encoder"}
# data set -> (training samples kept, claims of Figure 6 apply); timing: (rounds per block, blocks)
CASES = {"digits": (256, False), "synthetic_multiview": (16, True), "synthetic_text": (16, True)}
QUICK = {"datasets": ("digits", "synthetic_multiview"), "timing": {"digits": (20, 3), "default": (4, 3)}}
FULL = {"datasets": tuple(CASES), "timing": {"digits": (50, 5), "default": (8, 5)}}
DPZV_REFERENCE_MOMENTUM = 0.9  # VFL-CZOFO is compared with DPZV at Table 3's ZO momentum


def load_config(datasets: tuple[str, ...]) -> dict:
    """config.yaml with Figure 6's data sets replaced by `datasets` (Figure 6's overrides kept)."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    fig6 = config["dpzv"]["figures"]["fig6"]
    known = {item["dataset"]: item for item in fig6["datasets"]}
    fig6["datasets"] = [copy.deepcopy(known.get(d, {"dataset": d})) for d in datasets]
    return config


def vfl_data(config: dict, dataset: str, folder: Path, device: torch.device):
    """The pipeline's data path: prepare, vertical partition, build_vfl_data; first n samples."""
    from fedrepro.algorithms.dpzv.jobs import vfl_data_from
    from fedrepro.algorithms.dpzv.memory import _subset
    from fedrepro.data.arrays import load_prepared
    from fedrepro.data.partition import make_partition
    from fedrepro.data.prepare import prepare_dataset

    prepared = load_prepared(
        prepare_dataset(dataset, folder / dataset, folder / "raw", config["datasets"].get(dataset) or {})
    )
    split = config["dpzv"]["datasets"][dataset]["partition"]
    part = make_partition("vertical", {"x_train": prepared.x_train}, split=split["split"], clients=split["clients"])
    data = vfl_data_from(prepared, part, config["dpzv"]["shared"], device)
    return _subset(data, CASES[dataset][0])


def client0_rounds(algorithm, rounds: int) -> None:
    client = algorithm.clients[0]
    for _ in range(rounds):
        algorithm.exchange(0, client.next_batch())
    if algorithm.device.type == "cuda":
        torch.cuda.synchronize(algorithm.device)


def measure_entry(entry: dict, data, device: torch.device, memory_rounds: int, timing: tuple[int, int]) -> dict:
    """Memory pass on a fresh object (tracker on), then timed blocks on the same object (tracker off)."""
    from fedrepro.algorithms.dpzv.jobs import settings_for
    from fedrepro.algorithms.dpzv.memory import algorithm_class, measure_rounds
    from fedrepro.fl.seeding import seed_everything

    settings = settings_for({**entry["options"], "table_init": "zeros"}, {"eps": "inf"})
    seed_everything(0)
    algorithm = algorithm_class(entry["method"])(data, settings, 0, device)
    memory = measure_rounds(algorithm, memory_rounds)
    client0_rounds(algorithm, 1)  # warm-up outside the tracker
    rounds, blocks = timing
    block = functools.partial(client0_rounds, algorithm, rounds)
    speed = rounds / seconds(block, repeats=blocks)
    del algorithm, block
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        **memory,
        "rounds_per_s": speed,
        "method": entry["method"],
        "label": entry["label"],
        "momentum": entry["options"].get("zo_momentum"),
    }


def memory_target(record: dict, dpzv: dict) -> tuple[str, bool]:
    """Figure 6's claim for one method, given DPZV's ratio per ZO momentum on the same model."""
    method, momentum, ratio = record["method"], record["momentum"], record["ratio"]
    if method == "dpzv":
        limit = 1.5 if momentum == 0 else 2.5
        return f"~{1 if momentum == 0 else 2} (< {limit:g})", ratio < limit
    if method == "vafl":
        return "> 2", ratio > 2
    ref = DPZV_REFERENCE_MOMENTUM if momentum is None else momentum
    return f"> DPZV at ZO momentum {ref:g} ({dpzv[ref]:.3g})", ratio > dpzv[ref]


def model_rows(model: str, records: list[dict], claims: bool) -> list[dict]:
    vafl = next(r["rounds_per_s"] for r in records if r["method"] == "vafl")
    dpzv = {r["momentum"]: r["ratio"] for r in records if r["method"] == "dpzv"}
    rows = []
    for r in records:
        case = f"{r['label']} / {model}"
        rows.append(row(BENCHMARK, case, "rounds/s", r["rounds_per_s"], vafl, "ours / reference"))
        target, met = memory_target(r, dpzv) if claims else ("", None)
        ours = r["model_bytes"] + r["peak_extra_bytes"]
        rows.append(
            row(
                BENCHMARK,
                case,
                f"x model size ({r['measure']})",
                ours,
                r["model_bytes"],
                "ours / reference",
                target,
                met,
            )
        )
    return rows


def run(quick: bool) -> list[dict]:
    from fedrepro.experiments.dpzv import memory_spec
    from fedrepro.fl.device import pick_device

    plan = QUICK if quick else FULL
    torch.set_num_threads(1)
    config = load_config(plan["datasets"])
    device = pick_device(config.get("device", "auto"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="dpzv_speed_") as tmp:
        for dataset in plan["datasets"]:
            spec = memory_spec(config, dataset)
            data = vfl_data(config, dataset, Path(tmp), device)
            timing = plan["timing"].get(dataset, plan["timing"]["default"])
            records = [measure_entry(e, data, device, int(spec["rounds"]), timing) for e in spec["entries"]]
            model = MODEL_LABELS.get(spec["entries"][0]["options"]["client_model"], dataset)
            rows += model_rows(model, records, CASES[dataset][1])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="digits CNN and ResNet-18 only, fewer rounds")
    args = parser.parse_args()
    table = write(run(args.quick), "dpzv_speed")
    print(table.to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
