"""The accuracy cost of the sound variants at quick scale (issue 27): DPZV as printed against DPZV whose
label guarantee holds against the clients, at the same nominal eps, on the quick config's digits runs.

Rows (all DPZV with the quick digits settings of config.yaml, SGD server):
  paper            Algorithm 1: public batch, raw-label head, Poisson accounting at B/D
  dp_head          public batch, head by DP-SGD, the same (Poisson) calibration
  known_batch      dp_head, noise calibrated to the known batch (batch: secret_subsample, secret_rate 1)
  secret_subsample dp_head, the server keeps each sent id with probability p, calibrated at p
The last two are (eps, delta)-DP for the labels against the pooled clients, who see the batch ids.

    python benchmarks/dpzv_batch_cost.py --data <prepared digits dir> --partition <partition.npz>
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
import yaml

from fedrepro.algorithms.dpzv.dpzv import DPZV
from fedrepro.algorithms.dpzv.jobs import settings_for, vfl_data_from
from fedrepro.experiments.dpzv import method_spec

ROWS = {
    "paper": {},
    "dp_head": {"label_privacy": "dp_head"},
    "known_batch": {"label_privacy": "dp_head", "batch": "secret_subsample", "secret_rate": 1.0},
    "secret_subsample": {"label_privacy": "dp_head", "batch": "secret_subsample"},
}


def run(data, spec: dict, eps: float, seed: int) -> tuple[float, dict]:
    """Best-validation test accuracy and privacy record of one DPZV run."""
    settings = settings_for(spec, {"eps": eps})
    algo = DPZV(data, settings, seed=seed)
    for t in range(1, settings.epochs * settings.evals_per_epoch + 1):
        algo.round(t)
        algo.evaluate(t)
    return float(algo.best["test_acc"]), algo.privacy()


def main(argv=None) -> None:
    from fedrepro.data.arrays import load_prepared
    from fedrepro.data.partition import load_partition

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="config.yaml")
    parser.add_argument("--data", required=True, help="prepared digits folder (arrays.npz, meta.json)")
    parser.add_argument("--partition", required=True)
    parser.add_argument("--eps", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    config = yaml.safe_load(Path(args.config).read_text())
    base = method_spec(config, "digits", "dpzv")
    data = vfl_data_from(load_prepared(args.data), load_partition(args.partition), base, "cpu")
    for name in args.rows:
        spec = {**base, **ROWS[name]}
        accs, records = zip(*(run(data, spec, args.eps, seed) for seed in args.seeds))
        rec = records[0]
        print(
            f"{name:17s} acc {100 * np.mean(accs):.1f} ({', '.join(f'{100 * a:.1f}' for a in accs)})  "
            f"z {rec['noise_multiplier']:.3g}  eps paper/PLD {rec['eps_pld']:.3g}  "
            f"known batch pooled {rec.get('eps_known_pooled', float('nan')):.3g} / one client "
            f"{rec.get('eps_known_one_client', float('nan')):.3g}  label channel {rec['eps_pld_sound']:.3g}",
            flush=True,
        )


if __name__ == "__main__":
    main()
