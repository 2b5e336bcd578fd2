"""Ablations of FedSC on the generated stand-in (issue 33): which part of FedSC's local objective makes
it lose to FedAvg+SC at full participation.

Plans the runs of target `fedsc_standin` from config.yaml (`fedrepro.experiments.fedsc.standin_runs`),
changes one thing of a FedSC run's spec per variant, and runs pretraining and the linear probe with the
pipeline's own job functions (`run_fedsc`, `probe_job`) on the data and partition that a finished
`snakemake fedsc_standin --config results=RESULTS` prepared. Each variant is paired by seed with the
target's FedSC (same eps) and FedAvg+SC runs read from RESULTS, through `fedrepro.eval.verdict.paired`.

Variants (full participation; each changes one key of the spec of the run named in `base`):
* `alpha_fixed`: FedSC eps = inf with alpha held at ALPHA in every round (App. C decays 1 -> 0.2);
* `share_round1_eps6`: FedSC eps = 6 sharing from round 1 (config: after 0.5), sigma recalibrated by
  Prop. 6.6 for the doubled number of shares (the same eps = 6 spent over 20 shares instead of 10);
* `loss_scale1`: FedSC eps = inf with the loss scale 1 (Eq. 80 as printed) instead of the code's 2;
* `mu1`: FedSC eps = inf with the NormClip radius^2 mu = 1 instead of 2 (loss and DP-CalR).

    .venv/bin/python benchmarks/fedsc_ablations.py --results /tmp/r --out /tmp/abl           # all variants
    .venv/bin/python benchmarks/fedsc_ablations.py --results /tmp/r --out /tmp/abl --variants alpha_fixed
    .venv/bin/python benchmarks/fedsc_ablations.py --results /tmp/r --out /tmp/abl --table-only

Writes OUT/<variant>/s<seed>/{summary.json, probe.json, ...} (a finished seed is not re-run) and
OUT/ablations.md / .csv: probe top-1 % per seed, the mean, the paired difference against FedSC and
against FedAvg+SC with its 95 % t interval, the centered embedding rank and the final training loss.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

from fedrepro.config import load_yaml

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 0.6  # about the mean of the 1 -> 0.2 schedule over 20 rounds (0.62)
BASE_INF, BASE_EPS6, FEDAVG_SC = ("fedsc", "full_epsinf"), ("fedsc", "full_eps6_d0.01"), ("fedavg_sc", "full")
VARIANTS = {
    "alpha_fixed": (BASE_INF, lambda s: s.update(alpha={"start": ALPHA, "end": ALPHA})),
    "share_round1_eps6": (BASE_EPS6, lambda s: s.update(sharing={"after": 0.0, "every": 1})),
    "loss_scale1": (BASE_INF, lambda s: s.update(loss_scale=1.0)),
    "mu1": (BASE_INF, lambda s: s.update(mu=1.0)),
}


def planned(config: dict) -> dict:
    from fedrepro.experiments import fedsc as plan

    return {(r.method, r.setting): r for r in plan.standin_runs(config)}


def run_variant(config: dict, runs: dict, name: str, seed: int, results: Path, out: Path) -> None:
    import torch

    from fedrepro.algorithms.fedsc.fedsc import run_fedsc
    from fedrepro.algorithms.fedsc.probing import probe_job
    from fedrepro.experiments import fedsc as plan
    from fedrepro.pipeline import make_job

    torch.set_num_threads(1)
    base_key, change = VARIANTS[name]
    base = runs[base_key]
    spec = copy.deepcopy(base.spec)
    change(spec)
    folder = out / name / f"s{seed}"
    if (folder / "probe.json").exists():
        return
    data = str(results / "data" / base.dataset / "arrays.npz")
    files = {k: str(folder / f) for k, f in (("metrics", "metrics.parquet"), ("summary", "summary.json"))}
    job = make_job(
        spec,
        {**files, "model": str(folder / "model.pt")},
        {"data": data, "partition": str(results / "partitions" / base.dataset / f"{base.partition}.npz")},
        seeds=[seed],
    )
    start = time.process_time()
    run_fedsc(job)
    probe = make_job(
        plan.probe_spec(config, base),
        {"probe": str(folder / "probe.json")},
        {"data": data, "model": str(folder / "model.pt")},
    )
    probe_job(probe)
    (folder / "cpu_seconds.json").write_text(json.dumps({"cpu_seconds": time.process_time() - start}))


def seed_values(folder: Path) -> dict[int, dict]:
    """{seed: probe result + the run's last training loss} of one run folder (one seed file per s<seed>)."""
    import pandas as pd

    values = {}
    for probe_path in sorted(folder.glob("s*/probe.json")):
        probe = json.loads(probe_path.read_text())["seeds"]
        metrics_path = probe_path.parent / "metrics.parquet"
        loss = None
        if metrics_path.exists():
            frame = pd.read_parquet(metrics_path).dropna(subset=["loss"])
            loss = frame.sort_values("round").groupby("seed")["loss"].last().to_dict()
        for seed, res in probe.items():
            values[int(seed)] = {**res, "final_loss": (loss or {}).get(int(seed))}
    return values


def table(results: Path, out: Path, names: list[str]) -> list[dict]:
    from fedrepro.eval.health import Health
    from fedrepro.eval.verdict import paired

    runs_dir = results / "fedsc" / "runs" / "shapes"
    rows_in = {
        "FedAvg+SC": seed_values(runs_dir / FEDAVG_SC[0] / FEDAVG_SC[1]),
        "FedSC eps=inf": seed_values(runs_dir / BASE_INF[0] / BASE_INF[1]),
        "FedSC eps=6": seed_values(runs_dir / BASE_EPS6[0] / BASE_EPS6[1]),
        **{name: seed_values(out / name) for name in names},
    }
    against = {"alpha_fixed": "FedSC eps=inf", "loss_scale1": "FedSC eps=inf", "mu1": "FedSC eps=inf"}
    against["share_round1_eps6"] = "FedSC eps=6"
    rows = []
    for label, values in rows_in.items():
        if not values:
            continue
        acc = {s: 100 * v["final_acc"] for s, v in sorted(values.items())}
        health = {s: Health.from_dict(v) for s, v in values.items()}
        row = {
            "run": label,
            "seeds": " / ".join(f"{a:.1f}" for a in acc.values()),
            "mean": sum(acc.values()) / len(acc),
            "rank_centered": " / ".join(f"{v['embedding_rank_centered']:.1f}" for _, v in sorted(values.items())),
            "final_loss": " / ".join(
                "-" if v["final_loss"] is None else f"{v['final_loss']:.2f}" for _, v in sorted(values.items())
            ),
            "health": ", ".join(sorted({h.status for h in health.values()})),
        }
        for ref, col in ((against.get(label), "vs_fedsc"), ("FedAvg+SC", "vs_fedavg_sc")):
            if ref and ref != label and rows_in.get(ref):
                ref_acc = {s: 100 * v["final_acc"] for s, v in rows_in[ref].items()}
                row[col] = f"{ref}: " + paired(acc, ref_acc).text(1)
        rows.append(row)
    return rows


def write(rows: list[dict], out: Path) -> None:
    import pandas as pd

    frame = pd.DataFrame(rows).fillna("")
    frame.to_csv(out / "ablations.csv", index=False)
    from fedrepro.eval.verdict import TEST_NAME

    caption = (
        "FedSC ablations on the stand-in `shapes` (full participation 10/10, 20 rounds x 5 local epochs): linear-probe "
        f"top-1 % per seed, centered embedding rank and final training loss per seed; differences: {TEST_NAME}, "
        "in points.\n\n"
    )
    (out / "ablations.md").write_text(caption + frame.to_markdown(index=False, floatfmt=".1f") + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", required=True, help="results folder of a finished fedsc_standin run")
    parser.add_argument("--out", required=True)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default: the stand-in's seeds")
    parser.add_argument("--table-only", action="store_true", help="only rebuild the table from finished runs")
    args = parser.parse_args()
    config = load_yaml(ROOT / "config.yaml")
    results, out = Path(args.results), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not args.table_only:
        runs = planned(config)
        for seed in args.seeds or config["fedsc"]["standin"]["seeds"]:
            for name in args.variants:
                start = time.time()
                run_variant(config, runs, name, seed, results, out)
                print(f"{name} seed {seed}: {time.time() - start:.0f} s", flush=True)
    rows = table(results, out, [n for n in VARIANTS if (out / n).exists()])
    write(rows, out)
    print((out / "ablations.md").read_text())


if __name__ == "__main__":
    main()
