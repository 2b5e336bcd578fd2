"""Every figure the default run writes, drawn from small fixed data through its report function.

Each drawer builds what its figure function reads (the frame its loader returns, or the few small
files it opens) for exactly the runs the default config's planner gives that figure, with seeded
curves shaped like a default run's (rising accuracies, epsilons near their labels, known-batch
bounds several times larger), and draws it into `folder`; nothing trains. `DRAWERS` maps
(paper, figure file stem) to its drawer."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from fedrepro.config import load_yaml
from fedrepro.pipeline import make_job

ROOT = Path(__file__).resolve().parents[2]


def default_config() -> dict:
    return load_yaml(ROOT / "config.yaml")


def _job(folder: Path, stem: str, spec: dict, **inputs):
    png = folder / f"{stem}.png"
    return make_job(spec, {"png": str(png), "pdf": str(png.with_suffix(".pdf"))}, inputs)


def _rising(rng, steps, start: float, end: float, noise: float = 0.02) -> np.ndarray:
    """A saturating learning curve over `steps` (1-D), from about `start` to about `end`."""
    t = (np.asarray(steps, dtype=float) - np.min(steps)) / max(np.ptp(steps), 1)
    return start + (end - start) * (1 - np.exp(-3 * t)) + rng.normal(0, noise, len(t))


# ----------------------------------------------------------------------------------- FedAvg, FedSC
def fedavg_accuracy(folder, monkeypatch, config):
    from fedrepro.experiments import fedavg as plan
    from fedrepro.report import fedavg as report

    rng, rows = np.random.default_rng(0), []
    for i, run in enumerate(plan.runs(config)):
        rounds = np.arange(1, run.spec["rounds"] + 1)
        for seed in config["fedavg"]["seeds"]:
            acc = np.clip(_rising(rng, rounds, 0.3 + 0.05 * i, 0.93 + 0.02 * i), 0, 1)
            rows += [
                {
                    "dataset": run.dataset,
                    "method": run.method,
                    "setting": run.setting,
                    "seed": seed,
                    "round": r,
                    "test_acc": a,
                }
                for r, a in zip(rounds, acc)
            ]
    monkeypatch.setattr(report, "load_metrics", lambda paths: pd.DataFrame(rows))
    spec = {"scale": config["scale"], "decimals": 2}
    report.accuracy_figure(_job(folder, "accuracy", spec, metrics=[]))


def fedsc_figure2(folder, monkeypatch, config):
    from fedrepro.experiments import fedsc as plan
    from fedrepro.report import fedsc as report

    rng, cells = np.random.default_rng(1), []
    rounds = np.arange(1, config["fedsc"]["rounds"] + 1)
    for i, cell in enumerate(plan.figure2_cells(config)):
        path = folder / f"cell{i}.parquet"
        seeds = config["fedsc"]["seeds"]
        frame = pd.DataFrame(
            [
                {"round": r, "seed": s, "knn_acc": a}
                for s in seeds
                for r, a in zip(rounds, _rising(rng, rounds, 0.76, 0.745 - 0.003 * i, 0.004))
            ]
        )
        frame.to_parquet(path)
        cells.append({**cell, "path": str(path)})
    spec = {"scale": config["scale"], "decimals": 2, "cells": cells}
    report.figure2(_job(folder, "figure2", spec, metrics=[c["path"] for c in cells]))


# ----------------------------------------------------------------------------------- FedAL
ADVERSARIAL = {"fedal", "feddf_al"}


def _health(method: str, seed: int) -> dict:
    """FCCL+'s seed 1 at chance (as at quick scale), so that its legend label is drawn and checked too."""
    if method == "fccl_plus" and seed == 1:
        return {"status": "chance", "status_reason": "at chance (mean client accuracy 0.11 <= 0.10 + 0.04)"}
    return {"status": "ok", "status_reason": ""}


def _fedal_rows(rng, run, seeds, offset: float):
    """(metrics rows, summary rows) of one FedAL run: accuracy every evaluation, the discriminator's
    loss every round for the adversarial methods, the variances for a diagnostics run."""
    from fedrepro.experiments.fedal import parse_setting

    setting = parse_setting(run.setting)
    iterations, tau = setting["iterations"], int(run.spec.get("tau", 1))
    rounds = max(1, iterations // tau)
    evals = set(np.unique(np.linspace(0, rounds, run.spec.get("evals", 5) + 1)[1:].round().astype(int)))
    log_n = math.log(setting["clients"] if run.method == "fedal" else 2)
    metrics, finals = [], []
    for seed in seeds:
        acc = _rising(rng, np.arange(1, rounds + 1), 0.25 + offset, 0.8 - offset, 0.03)
        for r in range(1, rounds + 1):
            row = {"dataset": run.dataset, "method": run.method, "setting": run.setting, "seed": seed, "round": r}
            row["iteration"] = r * tau if r in evals else np.nan
            row["acc"] = acc[r - 1] if r in evals else np.nan
            row["uplink_mb_per_client"] = r * tau * (0.0012 if run.method in ("fedavg", "fedproto") else 0.0061 / tau)
            if run.method in ADVERSARIAL:
                row["disc_loss"] = log_n + rng.normal(0, 0.01)
            if run.spec.get("diagnostics"):
                row.update({f"var_sigma_{k}": 10.0**-p * r for p, k in enumerate(["l", "k", "rl", "rg", "u", "n"])})
            metrics.append(row)
        pretrain = int(run.spec.get("pretrain_iters", 0))
        final = {
            **{k: metrics[-1][k] for k in ("dataset", "method", "setting", "seed")},
            **{"acc": acc[-1], "round": rounds, "iterations_done": iterations},
            **_health(run.method, seed),
            **{"local_steps_per_round": tau, "pretrain_steps": pretrain, "local_steps_total": rounds * tau + pretrain},
        }
        if run.method in ADVERSARIAL:
            final.update(disc_loss_final=log_n + rng.normal(0, 0.002), disc_log_n=log_n)
        if run.method == "fedproto":
            final["fedproto_variant"] = run.spec.get("variant", "public_features")
        finals.append(final)
    return metrics, finals


def fedal_curves(folder, monkeypatch, config, name):
    from fedrepro.experiments import fedal as plan
    from fedrepro.report import fedal as report

    rng, metrics, finals = np.random.default_rng(2), [], []
    for i, run in enumerate(plan.output_runs(config, name)):
        m, f = _fedal_rows(rng, run, config["fedal"]["seeds"], 0.04 * (i % 6))
        metrics += m
        finals += f
    monkeypatch.setattr(report, "load_metrics", lambda paths: pd.DataFrame(metrics))
    monkeypatch.setattr(report, "load_summaries", lambda paths: pd.DataFrame(finals))
    report.figure(_job(folder, name, plan.report_spec(config, name), metrics=[], summaries=[]))


def fedal_fig2(folder, monkeypatch, config):
    """Fig. 2 reads each run's summary.json (the class distributions): written under folder/fedal/runs."""
    from fedrepro.experiments import fedal as plan
    from fedrepro.report import fedal as report

    rng, paths = np.random.default_rng(3), []
    for run in plan.output_runs(config, "fig2"):
        path = folder / "fedal" / "runs" / run.dataset / run.method / run.setting / "s0_1" / "summary.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        seeds = {str(s): {"class_probs": rng.dirichlet(np.ones(10) * 3, size=10).tolist()} for s in (0, 1)}
        path.write_text(json.dumps({"seeds": seeds}))
        paths.append(str(path))
    report.figure(_job(folder, "fig2", plan.report_spec(config, "fig2"), summaries=paths))


def fedal_fig4(folder, monkeypatch, config):
    """Fig. 4 reads the prepared labels and the Dirichlet partitions: both stood in for here."""
    from fedrepro.data import arrays, partition
    from fedrepro.experiments import fedal as plan
    from fedrepro.report import fedal as report

    rng = np.random.default_rng(4)
    labels = rng.integers(0, 10, 1500)
    spec = plan.report_spec(config, "fig4")

    def dirichlet(path):
        alpha = float(re.search(r"-a([0-9.]+)-", Path(path).name).group(1))
        shares = rng.dirichlet(np.ones(spec["clients"]) * alpha, size=10)
        owner = np.array([rng.choice(spec["clients"], p=shares[y]) for y in labels])
        return SimpleNamespace(clients=[np.flatnonzero(owner == c) for c in range(spec["clients"])])

    monkeypatch.setattr(arrays, "load_prepared", lambda folder: SimpleNamespace(y_train=labels))
    monkeypatch.setattr(partition, "load_partition", dirichlet)
    parts = [f"partitions/{dataset}/{tag}.npz" for dataset, tag in plan.fig4_partitions(config)]
    job = _job(folder, "fig4", spec, data=["prepared/digits/x.npy"] * len(parts), partitions=parts)
    report.partition_figure(job)


# ----------------------------------------------------------------------------------- DPZV
def _variants(setting: str):
    """(eps, clip, calibration) of each variant of a DPZV run's setting ("eps1-C10+eps1-C10-sound+epsinf-Cinf",
    baselines "eps1+...")."""
    for tag in setting.split("+"):
        eps, clip, calibration = re.fullmatch(r"eps([^-]+)(?:-C([^-]+))?(?:-(\w+))?", tag).groups()
        yield float(eps), float(clip) if clip else np.nan, calibration or "paper"


def _dpzv_runs(config):
    from fedrepro.experiments import dpzv as plan

    return plan.figure_runs(config, plan.runs(config))


def _dpzv_accuracy(method: str, eps: float, clip: float) -> float:
    """Final accuracy shaped like the default run: DPZV learns at every eps, the baselines only at large eps."""
    if method == "dpzv":
        return 0.9 if clip <= 50 or math.isinf(clip) else 0.1
    return 0.1 if eps < 5 else (0.3 if eps < 50 else 0.85)


def dpzv_metrics(config) -> pd.DataFrame:
    from fedrepro.report import dpzv as report

    rng, rows, seen = np.random.default_rng(5), [], set()
    for name in ("fig2", "fig4", "fig5"):
        for run in _dpzv_runs(config)[name]:
            if (run.dataset, run.method, run.setting) in seen:
                continue
            seen.add((run.dataset, run.method, run.setting))
            epochs = np.arange(1, run.spec["epochs"] + 1)
            for eps, clip, calibration in _variants(run.setting):
                for seed in config["dpzv"]["seeds"]:
                    acc = np.clip(_rising(rng, epochs, 0.1, _dpzv_accuracy(run.method, eps, clip)), 0, 1)
                    loss = 2.3 * (1 - acc) + 0.1
                    rows += [
                        {"dataset": run.dataset, "method": run.method, "eps": eps, "clip": clip, "seed": seed}
                        | {"calibration": calibration, "epoch": e, "server_round": 72 * e, "test_acc": a}
                        | {"test_loss": lo}
                        for e, a, lo in zip(epochs, acc, loss)
                    ]
    keys = ["dataset", "method", "eps", "clip", "calibration", "seed", "epoch"]
    return report._labelled(pd.DataFrame(rows).drop_duplicates(keys))


def dpzv_best(config) -> pd.DataFrame:
    from fedrepro.report import dpzv as report

    rng, rows = np.random.default_rng(6), []
    for run in _dpzv_runs(config)["fig3"]:
        for eps, clip, calibration in _variants(run.setting):
            for seed in config["dpzv"]["seeds"]:
                rows.append(
                    {"dataset": run.dataset, "method": run.method, "eps": eps, "clip": clip, "seed": seed}
                    | {"calibration": calibration, "status": "ok", "status_reason": ""}
                    | {"best_test_acc": _dpzv_accuracy(run.method, eps, clip) - 0.1 * (calibration != "paper")}
                    | {"eps_pld": eps * rng.uniform(1.0, 1.06), "eps_known_pooled": eps * rng.uniform(4, 7)}
                )
    best = report._labelled(
        pd.DataFrame(rows).drop_duplicates(["dataset", "method", "eps", "clip", "calibration", "seed"])
    )
    best["best_test_acc"] += np.random.default_rng(7).normal(0, 0.02, len(best))
    return best


def dpzv_figure(folder, monkeypatch, config, job_name):
    from fedrepro.experiments import dpzv as plan
    from fedrepro.report import dpzv as report

    monkeypatch.setattr(report, "_metrics", lambda paths: dpzv_metrics(config))
    monkeypatch.setattr(report, "load_best", lambda paths: dpzv_best(config))
    tables = []
    for i, dataset in enumerate(plan.memory_datasets(config)):
        path = folder / f"{dataset}.csv"
        pd.DataFrame(
            {
                "method": ["dpzv", "dpzv", "vafl", "zoo_vfl", "zoo_vfl", "vfl_czofo"],
                "zo_momentum": [0.9, 0.0, None, 0.9, 0.0, None],
                "measure": "live_tensor_bytes",
                "ratio": np.array([2.2, 1.2, 3.2, 3.2, 2.2, 3.2]) + i,
            }
        ).to_csv(path, index=False)
        tables.append(str(path))
    stem = {job: stem for stem, job in plan.FIGURE_JOBS.items()}[job_name]
    job = _job(folder, stem, plan.report_spec(config, job_name), metrics=[], summaries=[], tables=tables)
    getattr(report, job_name)(job)


# ----------------------------------------------------------------------------------- SteFFLe
def steffle_points(config) -> pd.DataFrame:
    """Final points of every SteFFLe method the figures show, on both data sets and fairness notions:
    error rises and violation falls with lambda; private methods at every label of the figures."""
    from fedrepro.algorithms.steffle import METHODS

    section = config["steffle"]
    labels = sorted({float(e) for fig in section["figures"].values() for e in fig.get("epsilons", [])} | {1.0, 3.0})
    rng, rows = np.random.default_rng(8), []
    for dataset in ("adult", "credit", "retired_adult"):
        for fairness in ("dp", "eo"):
            for k, method in enumerate(section["methods"]):
                traits = METHODS[method].traits
                silos = [(1, 0.0)] if "central" in traits else [(1, 0.0), (3, 0.0), (3, 0.75)]
                epsilons = labels if "private" in traits else [math.inf]
                lambdas = section["lambdas"] if "fair" in traits else [0.0]
                for (n, h), eps, lam, seed in (
                    (s, e, lam, seed) for s in silos for e in epsilons for lam in lambdas for seed in section["seeds"]
                ):
                    noise = 0.2 / math.sqrt(eps) if "private" in traits else 0.02
                    rows.append(
                        {
                            "dataset": dataset,
                            "fairness": fairness,
                            "method": method,
                            "setting": f"{fairness}_N{n}_h{h:g}",
                        }
                        | {"num_silos": n, "h": h, "eps": str(eps), "eps_value": eps, "lam": lam, "seed": seed}
                        | {"error": 0.16 + 0.01 * lam + 0.002 * k + rng.normal(0, 0.01 * noise)}
                        | {"dp_violation": 0.2 * math.exp(-lam) * (1 + rng.normal(0, noise)) + 0.01 * k}
                        | {"eo_violation": 0.25 * math.exp(-lam) * (1 + rng.normal(0, noise)) + 0.01 * k}
                        | {"realised_eps": eps * (0.94 + 0.03 * k), "sound_eps": eps * (1 if "ling" in method else 7.5)}
                    )
    return pd.DataFrame(rows)


def steffle_figure(folder, monkeypatch, config, name):
    from fedrepro.experiments import steffle as plan
    from fedrepro.report import steffle as report

    monkeypatch.setattr(report, "load_points", lambda paths: steffle_points(config))
    report.figure(_job(folder, name, plan.figure_spec(config, name), metrics=[], summaries=[]))


def _drawers(config) -> dict:
    from fedrepro.experiments import dpzv as dpzv_plan
    from fedrepro.experiments import fedal as fedal_plan
    from fedrepro.experiments import steffle as steffle_plan

    def bind(draw, *args):
        return lambda folder, monkeypatch: draw(folder, monkeypatch, config, *args)

    drawers = {("fedavg", "accuracy"): bind(fedavg_accuracy), ("fedsc", "figure2"): bind(fedsc_figure2)}
    drawers[("fedal", "fig2")] = bind(fedal_fig2)
    drawers[("fedal", "fig4")] = bind(fedal_fig4)
    drawers |= {("fedal", n): bind(fedal_curves, n) for n in fedal_plan.FIGURES if n not in ("fig2", "fig4")}
    drawers |= {("dpzv", stem): bind(dpzv_figure, job) for stem, job in dpzv_plan.FIGURE_JOBS.items()}
    drawers |= {("steffle", n): bind(steffle_figure, n) for n in steffle_plan.figures(config)}
    return drawers


DRAWERS = _drawers(default_config())
