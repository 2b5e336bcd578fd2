"""Report of the `fedavg` paper key: accuracy per method of its table and Dirichlet alpha."""

from __future__ import annotations

import pandas as pd

from fedrepro.algorithms import method_table
from fedrepro.report import figures, tables
from fedrepro.report.runs import load_metrics, load_summaries


def _alpha(setting: str) -> str:
    return setting.removeprefix("a")


def _label(method: str) -> str:
    return method_table("fedavg")[method].label


def accuracy_table(job) -> None:
    """Final test accuracy (%) per method and alpha, mean +- std over seeds; no published row here."""
    finals = load_summaries(job.input["summaries"])
    ours = finals.assign(
        row=finals["method"].map(_label),
        column="alpha=" + finals["setting"].map(_alpha),
        value=100 * finals["test_acc"],
    )
    # every method sees the same test set: one chance row, each seed once
    chance = ours.drop_duplicates(["column", "seed"]).assign(
        row="untrained (chance: majority class)",
        value=lambda rows: 100 * rows["chance_acc"],
        status="ok",
        status_reason="",
    )
    table = tables.compare(pd.concat([ours, chance])[["row", "column", "seed", "value", "status", "status_reason"]])
    caption = (
        "Supervised FedAvg on a Dirichlet(alpha) split: final test accuracy (%); a run within 3 "
        "binomial standard errors of chance is printed as 'at chance', a NaN run as 'diverged'"
    )
    tables.write_table(table, job.output["md"].removesuffix(".md"), caption, job.spec["scale"], job.spec["decimals"])


def accuracy_figure(job) -> None:
    """Test accuracy against rounds, one line per alpha (per method and alpha when several methods
    of the table are configured), band = std over seeds."""
    metrics = load_metrics(job.input["metrics"]).dropna(subset=["test_acc"])
    metrics["alpha"] = metrics["setting"].map(_alpha)
    several = metrics["method"].nunique() > 1
    line = "method, alpha" if several else "alpha"
    if several:
        metrics[line] = metrics["method"].map(_label) + ", " + metrics["alpha"]
    metrics["test accuracy (%)"] = 100 * metrics["test_acc"]
    fig, (ax,) = figures.new_figure()
    figures.lines_with_band(metrics, "round", "test accuracy (%)", line, ax)
    ax.set_title("Supervised baselines on a Dirichlet split" if several else "FedAvg on a Dirichlet split")
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), job.spec["scale"])
