"""FedAL's tables (IV-IX) and figures (2, 4, 6-11), ours beside the published values.

Accuracy is the mean over clients of each client model's test accuracy, as a
fraction (the paper's unit); tables show mean +- std over seeds. Every output
carries the scale note (quick numbers are not the paper's setting).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from fedrepro.experiments.fedal import parse_setting
from fedrepro.report import figures, tables
from fedrepro.report.runs import identity, load_metrics, load_summaries

NAMES = {"fedal": "FedAL", "fedmd_lf": "FedMD-LF", "fedmd": "FedMD", "fedproto": "FedProto", "cfd": "CFD",
         "fccl": "FCCL", "fccl_plus": "FCCL+", "fd": "FD", "fedavg": "FedAvg", "feddf": "FedDF",
         "feddf_al": "FedDF-AL"}
CAPTIONS = {
    "table4": "Table IV: accuracy on CelebA (LEAF split) for N clients",
    "table5": "Table V: accuracy on CINIC-10 under Dirichlet(alpha)",
    "table6": "Table VI: FD against FedMD and FedAL on SVHN",
    "table7": "Table VII: FD against FedProto, FedMD and FedAL on CIFAR-10",
    "table8": "Table VIII: loss-component ablation (SVHN, alpha = 2)",
    "table9": "Table IX: size of the public data set (SVHN)",
}
TITLES = {
    "fig6": "Fig. 6: stochastic-gradient variances (client 0)",
    "fig7": "Fig. 7: homogeneous clients (paper: MNIST, LeNet-5)",
    "fig8": "Fig. 8: black-box clients (paper: SVHN)",
    "fig9": "Fig. 9: black-box clients (paper: CIFAR-10)",
    "fig10": "Fig. 10: shareable models, FedDF vs FedDF-AL (paper: SVHN)",
    "fig11": "Fig. 11: accuracy vs uplink volume (paper: SVHN, WRN-10-1)",
}
AXIS_LABEL = {"alpha": lambda s: f"alpha={s['alpha']:g}", "clients": lambda s: f"N={s['clients']}",
              "public": lambda s: f"|P|={s['public']}"}


def _with_setting(frame: pd.DataFrame) -> pd.DataFrame:
    parsed = pd.DataFrame([parse_setting(s) for s in frame["setting"]], index=frame.index)
    return pd.concat([frame.drop(columns=[c for c in parsed if c in frame]), parsed], axis=1)


def _describe(frame: pd.DataFrame) -> str:
    """The data set and settings the runs used (stated in every caption)."""
    datasets = ", ".join(sorted(frame["dataset"].unique()))
    iters = ", ".join(str(i) for i in sorted(frame["iterations"].unique()))
    return f"\n[ours: {datasets}, {iters} iterations]"


# ---------------------------------------------------------------------------- tables
def table(job) -> None:
    """Rows = methods; columns = the output's axis (alpha, N, |P|) or the methods (Table VIII)."""
    spec = job.spec
    finals = _with_setting(load_summaries(job.input["summaries"]))
    finals["row"] = finals["method"].map(NAMES)
    if spec["axis"] == "method":
        finals["column"], finals["row"] = finals["row"], "Accuracy"
    else:
        finals["column"] = [AXIS_LABEL[spec["axis"]](s) for _, s in finals.iterrows()]
    finals["value"] = finals["acc"]
    published = tables.published(f"fedal_{spec['name']}")
    table = tables.compare(finals[["row", "column", "seed", "value"]], published)
    tables.write_table(table, job.output["md"].removesuffix(".md"), CAPTIONS[spec["name"]] + _describe(finals),
                       spec["scale"], spec["decimals"])


# ---------------------------------------------------------------------------- figures
def figure(job) -> None:
    name = job.spec["name"]
    if name == "fig2":
        return class_distribution_figure(job)
    if name == "fig6":
        return variance_figure(job)
    return curve_figure(job)


def _metrics(job) -> pd.DataFrame:
    frame = _with_setting(load_metrics(job.input["metrics"]))
    frame["method"] = frame["method"].map(NAMES)
    return frame.dropna(subset=["acc"])


def curve_figure(job) -> None:
    """Accuracy against iterations (Figs 7-10) or uplink MB per client (Fig. 11); one panel per alpha."""
    spec = job.spec
    frame = _metrics(job)
    title = TITLES[spec["name"]] + _describe(frame)
    x_kind = spec.get("x", "uplink" if spec["name"] == "fig11" else "iteration")
    if x_kind == "uplink":
        x = "uplink per client (MB)"
        frame[x] = frame["uplink_mb_per_client"]
    elif x_kind == "simulated_time":
        model = spec["time_model"]
        x = "simulated time (s)"
        frame[x] = (frame["iteration"] * model["seconds_per_iteration"]
                    + frame["uplink_mb_per_client"] * 8 / model["uplink_mbit_per_s"])
    else:
        x = "iteration"
    frame["accuracy"] = frame["acc"]
    panels = sorted(frame["setting"].unique(), key=lambda s: -(parse_setting(s)["alpha"] or 0))
    fig, axes = figures.new_figure(len(panels))
    for ax, setting in zip(axes, panels):
        figures.lines_with_band(frame[frame["setting"] == setting], x, "accuracy", "method", ax)
        s = parse_setting(setting)
        ax.set_title(f"alpha={s['alpha']:g}" if s["alpha"] is not None else f"N={s['clients']}")
        if x_kind == "uplink":
            ax.set_xscale("log")
    fig.suptitle(title, fontsize=8)
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), spec["scale"])


def variance_figure(job) -> None:
    """sigma^2 per loss component against iterations (log scale)."""
    frame = _metrics(job)
    columns = [c for c in frame.columns if c.startswith("var_")]
    if not columns:
        raise ValueError("fig6: the runs logged no gradient variances; set diagnostics in the experiment")
    long = frame.melt(id_vars=["seed", "iteration"], value_vars=columns, var_name="component",
                      value_name="variance").dropna()
    long["component"] = long["component"].str.removeprefix("var_").str.replace("sigma_", "sigma^2_")
    fig, (ax,) = figures.new_figure(width=5.0)
    figures.lines_with_band(long, "iteration", "variance", "component", ax)
    ax.set_yscale("log")
    fig.suptitle(TITLES["fig6"] + _describe(frame), fontsize=8)
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), job.spec["scale"])


def class_distribution_figure(job) -> None:
    """Fig. 2: the mean output distribution on test samples of one class, rows = alpha, one panel per method."""
    spec = job.spec
    cls = int(spec["class"])
    rows = []
    for path in job.input["summaries"]:
        ident = identity(path)
        setting = parse_setting(ident["setting"])
        for per_seed in json.loads(Path(path).read_text())["seeds"].values():
            rows.append({"method": NAMES[ident["method"]], "alpha": setting["alpha"],
                         **{str(k): p for k, p in enumerate(per_seed["class_probs"][cls])}})
    frame = pd.DataFrame(rows).groupby(["method", "alpha"]).mean().reset_index()
    methods = [NAMES[m] for m in spec["methods"]]
    fig, axes = figures.new_figure(len(methods), width=4.6)
    import seaborn as sns

    for ax, method in zip(axes, methods):
        part = frame[frame["method"] == method].sort_values("alpha", ascending=False)
        matrix = part.drop(columns=["method", "alpha"]).to_numpy(dtype=float)
        sns.heatmap(matrix, ax=ax, vmin=0, vmax=1, annot=True, fmt=".2f", annot_kws={"size": 6},
                    cmap="viridis", cbar=False,
                    yticklabels=[f"alpha={a:g}" for a in part["alpha"]])
        ax.set_xlabel("predicted class")
        ax.set_title(f"{method}: mean output on test class {cls}")
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), spec["scale"])


def partition_figure(job) -> None:
    """Fig. 4: samples per (client, class) as bubbles, one panel per alpha."""
    from fedrepro.data.arrays import load_prepared
    from fedrepro.data.partition import load_partition

    spec = job.spec
    labels = load_prepared(Path(job.input["data"][0]).parent).y_train
    k = int(labels.max()) + 1
    fig, axes = figures.new_figure(len(job.input["partitions"]))
    for ax, path, alpha in zip(axes, job.input["partitions"], spec["alphas"]):
        part = load_partition(path)
        counts = np.stack([np.bincount(labels[idx], minlength=k) for idx in part.clients])
        clients, classes = np.nonzero(counts >= 0)
        ax.scatter(clients, classes, s=300 * counts[clients, classes] / counts.max(), alpha=0.6)
        ax.set_xlabel("client")
        ax.set_ylabel("class")
        ax.set_xticks(range(len(part.clients)))
        ax.set_yticks(range(k))
        ax.set_title(f"alpha={alpha:g}")
    fig.suptitle(f"Fig. 4: Dirichlet partitions [ours: {spec['dataset']}]", fontsize=8)
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), spec["scale"])
