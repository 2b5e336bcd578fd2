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
from fedrepro.report.fedal_runs import AXIS_LABEL, NAMES, with_setting
from fedrepro.report.runs import identity, load_metrics, load_summaries

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


def _describe(frame: pd.DataFrame) -> str:
    """The data set and settings the runs used (stated in every caption)."""
    datasets = ", ".join(sorted(frame["dataset"].unique()))
    iters = ", ".join(str(i) for i in sorted(frame["iterations"].unique()))
    return f"\n[ours: {datasets}, {iters} iterations]"


# ---------------------------------------------------------------------------- tables
def table(job) -> None:
    """Rows = methods; columns = the output's axis (alpha, N, |P|) or the methods (Table VIII).

    A cell whose runs diverged or sit at chance prints that status instead of a number; the
    caption carries what the numbers alone would hide (`notes`)."""
    spec = job.spec
    finals = load_summaries(job.input["summaries"])
    if finals.empty:
        raise ValueError(
            f"fedal {spec['name']}: no runs to tabulate; check fedal.outputs.{spec['name']} "
            "(its experiment, methods and alphas)"
        )
    finals = with_setting(finals)
    by_method = spec["axis"] == "method"
    finals["panel"] = "all runs" if by_method else [AXIS_LABEL[spec["axis"]](s) for _, s in finals.iterrows()]
    cells = finals.assign(
        row="Accuracy" if by_method else finals["row"],
        column=finals["row"] if by_method else finals["panel"],
        value=finals["acc"],
    )
    health = [c for c in ("status", "status_reason") if c in finals]
    table = tables.compare(
        cells[["row", "column", "seed", "value", *health]], tables.published(f"fedal_{spec['name']}")
    )
    metrics = _panel_metrics(job.input["metrics"], spec["axis"]) if job.input.get("metrics") else None
    extra = notes(finals, metrics, where=CAPTIONS[spec["name"]].split(":")[0]) + read_notes(job.input["summaries"])
    caption = CAPTIONS[spec["name"]] + _describe(finals) + "".join(f"\n{n}" for n in extra)
    tables.write_table(table, job.output["md"].removesuffix(".md"), caption, spec["scale"], spec["decimals"])


def _panel_metrics(paths: list[str], axis: str) -> pd.DataFrame:
    """Every run's per-round metrics with the table's panel (column label) beside them."""
    frame = load_metrics(paths)
    labels = {
        s: "all runs" if axis == "method" else AXIS_LABEL[axis](parse_setting(s)) for s in frame["setting"].unique()
    }
    frame["panel"] = frame["setting"].map(labels)
    return frame


#: how far from log N the discriminator's loss may sit and still count as "cannot tell the clients apart"
AT_LOG_N = 0.01
#: rounds shown of a discriminator's trajectory in a caption (evenly spaced, the last included)
TRAJECTORY_POINTS = 8


def disc_trajectories(metrics: pd.DataFrame | None, method: str) -> dict[str, list[tuple[int, float]]]:
    """Per panel, the discriminator's loss by round (mean over its tau steps and over seeds), at most
    `TRAJECTORY_POINTS` rounds."""
    if metrics is None or "disc_loss" not in metrics:
        return {}
    runs = metrics[(metrics["method"] == method) & metrics["disc_loss"].notna()]
    out = {}
    for panel, part in runs.groupby("panel", sort=False):
        by_round = part.groupby("round")["disc_loss"].mean()
        keep = np.unique(np.linspace(0, len(by_round) - 1, min(TRAJECTORY_POINTS, len(by_round))).round().astype(int))
        out[panel] = [(int(by_round.index[i]), float(by_round.iloc[i])) for i in keep]
    return out


def _optimizer(runs: pd.DataFrame) -> str:
    """' (SGD, lr 0.0001)': the discriminator's optimiser as the runs report it."""
    if "disc_optimizer" not in runs or runs["disc_optimizer"].isna().all():
        return ""
    names = sorted({str(o).replace("sgd", "SGD").replace("adam", "Adam") for o in runs["disc_optimizer"].dropna()})
    rates = sorted({f"{r:g}" for r in runs["disc_lr"].dropna()})
    return f" ({', '.join(names)}, lr {', '.join(rates)})"


def discriminator_note(finals: pd.DataFrame, metrics: pd.DataFrame | None = None, method: str = "fedal") -> str | None:
    """The discriminator's loss beside log N per panel (Theorem IV.4: log N when the players'
    outputs are indistinguishable), its trajectory by round when the metrics are at hand. Where the
    loss is at log N is a fact about the discriminator; whether the adversarial term changed the
    accuracy is the claim's paired verdict, not this note."""
    if "disc_loss_final" not in finals:
        return None
    runs = finals[(finals["method"] == method) & finals["disc_loss_final"].notna()]
    if runs.empty:
        return None
    paths = disc_trajectories(metrics, method)
    cells, at_log_n = [], True
    for panel, part in runs.groupby("panel", sort=False):
        log_n = part["disc_log_n"].iloc[0]
        at_log_n &= bool(((part["disc_loss_final"] - part["disc_log_n"]).abs() < AT_LOG_N).all())
        path = ", ".join(f"r{r} {v:.3f}" for r, v in paths.get(panel, []))
        cells.append(
            f"{panel}: {part['disc_loss_final'].mean():.4f} (log N = {log_n:.4f})"
            + (f", by round {path}" if path else "")
        )
    text = (
        f"{NAMES[method]} discriminator{_optimizer(runs)} loss at the end (mean over seeds): " + "; ".join(cells) + "."
    )
    if at_log_n:
        text += f" Within {AT_LOG_N} of log N in every run: at the end it cannot tell the players apart."
    return text


def notes(finals: pd.DataFrame, metrics: pd.DataFrame | None = None, where: str = "") -> list[str]:
    """What a reader needs beside the numbers: the budget each row ran at, the seeds, the
    discriminator, the paper's claims on these runs (report.fedal_claims), and where a baseline
    differs from its paper or from the paper's row."""
    from fedrepro.report.fedal_claims import caption_claims

    methods = set(finals["method"])
    out = [n for n in [budget_note(finals), seeds_note(finals), discriminator_note(finals, metrics)] if n]
    out += caption_claims(finals, where)
    out += baseline_notes(finals)
    if "fd" in methods:
        out.append(
            "FD: distillation toward the other clients' per-label mean logits on top of private "
            "cross-entropy; it trains here, while the paper's FD row is near chance (0.12-0.17). "
            "Ours uses KL at E_kd where FD uses a logit MSE."
        )
    if "cfd" in methods:
        out.append("CFD: its soft-label quantisation and delta coding are not modelled (uplink counted unquantised).")
    return out


WORK = ("round", "local_steps_per_round", "pretrain_steps", "local_steps_total")


def budget_note(finals: pd.DataFrame) -> str | None:
    """Each row's local work per client as its runs report it (rounds x private steps per round, +
    steps before round 1), and the rows whose private steps in all differ from FedAL's (or from the
    most common): methods compared at unequal local work are named."""
    if not set(WORK) <= set(finals) or finals[list(WORK)].isna().any(axis=None):
        return None
    work = finals.groupby("row", sort=False)[list(WORK)].max()
    schedules: dict[str, list[str]] = {}
    for row, w in work.iterrows():
        text = f"{int(w['round'])} x {int(w['local_steps_per_round'])}"
        schedules.setdefault(text + (f" + {int(w['pretrain_steps'])}" if w["pretrain_steps"] else ""), []).append(row)
    iterations = ", ".join(str(i) for i in sorted(finals["iterations"].unique()))
    text = (
        f"Budget per client at {iterations} iterations (rounds x private steps per round [+ private steps before "
        "round 1]): " + "; ".join(f"{', '.join(rows)} {s}" for s, rows in schedules.items()) + "."
    )
    totals = work["local_steps_total"]
    reference = float(totals.get(NAMES["fedal"], totals.mode().iloc[0]))
    unequal = [f"{row} {total:g}" for row, total in totals.items() if total != reference]
    if unequal:
        text += f" Not at equal local work ({reference:g} private steps in all): {', '.join(unequal)}."
    return text


def seeds_note(finals: pd.DataFrame) -> str | None:
    """Which cells ran more seeds than the others (means are over each cell's seeds; a claim pairs the
    seeds both sides ran)."""
    cells = finals.groupby(["row", "panel"], sort=False)["seed"].agg(lambda s: tuple(sorted(set(s))))
    if cells.nunique() < 2:
        return None
    common = min(cells, key=len)  # the section's seeds; more_seeds adds to them
    panels: dict[tuple, dict[str, list[str]]] = {}  # seeds -> row -> its panels with those seeds
    for (row, panel), seeds in cells[cells.map(len) > len(common)].items():
        panels.setdefault(seeds, {}).setdefault(row, []).append(panel)
    parts = []
    for seeds, by_row in panels.items():
        rows: dict[tuple, list[str]] = {}
        for row, where in by_row.items():
            rows.setdefault(tuple(where), []).append(row)
        cells_ = "; ".join(f"{', '.join(r)} at {', '.join(w)}" for w, r in rows.items())
        parts.append(f"{cells_}: {len(seeds)} ({_seed_list(seeds)})")
    return (
        f"Seeds: {len(common)} ({_seed_list(common)}) per cell; more (config fedal.more_seeds) for "
        f"{'; '.join(parts)}. Means are over each cell's seeds; a claim pairs the seeds both sides ran."
    )


def _seed_list(seeds: tuple) -> str:
    return (
        f"{seeds[0]}-{seeds[-1]}" if list(seeds) == list(range(seeds[0], seeds[-1] + 1)) else ", ".join(map(str, seeds))
    )


def read_notes(paths: list[str]) -> list[str]:
    """Cells read from a longer run of the same setting (fedrepro.algorithms.fedal.budget): one line per longer run."""
    read = {}
    for path in paths:
        spec = json.loads(Path(path).read_text()).get("spec", {})
        if "read_from" in spec:
            read.setdefault(spec["read_from"], set()).add(NAMES[spec["method"]])
    return [
        f"{', '.join(sorted(methods))} at {parse_setting(longer)['public']} public samples: the first "
        f"iterations of the {parse_setting(longer)['iterations']}-iteration runs of the same setting, read from "
        "them (one round run from their state), not trained again: the same runs, so the same numbers"
        for longer, methods in read.items()
    ]


FEDPROTO_VARIANTS = {
    "public_features": "the FedAL paper's adaptation (variant public_features: features distilled toward the other "
    "clients' average features on the public data; the paper gives no details)",
    "prototypes": "FedProto's own class-prototype exchange (variant prototypes, no public data)",
}


def baseline_notes(finals: pd.DataFrame) -> list[str]:
    """Which FedProto variant ran, FCCL's pretrained teacher, and FCCL's and FCCL+'s local schedule
    (tables and figures)."""
    methods, out = set(finals["method"]), []
    if "fccl" in methods and "pretrain_steps" in finals:
        steps = finals.loc[finals["method"] == "fccl", "pretrain_steps"].dropna()
        if len(steps) and steps.max() > 0:
            out.append(
                f"FCCL: each client pretrains its intra-domain teacher ({int(steps.max())} cross-entropy steps before "
                "round 1, in the budget above) and starts from it, as in the authors' code."
            )
    if methods & {"fccl", "fccl_plus"}:
        out.append(
            "FCCL and FCCL+ run one local schedule, as their authors run both (20 local epochs per public epoch, "
            "1:1 to 75:1 local to collaborative steps per client on their digits): tau collaborative iterations "
            "and tau local steps per round, like the other methods' stages; rows marked '(n local steps)' take n."
        )
    if "fedproto" in methods and "fedproto_variant" in finals:
        variants = finals.loc[finals["method"] == "fedproto", "fedproto_variant"].dropna().unique()
        text = [FEDPROTO_VARIANTS.get(str(v).split(" ")[0], str(v)) + f" [{v}]" for v in variants]
        out.append("FedProto: " + "; ".join(text) + ".")
    return out


# ---------------------------------------------------------------------------- figures
def figure(job) -> None:
    name = job.spec["name"]
    if name == "fig2":
        return class_distribution_figure(job)
    if name == "fig6":
        return variance_figure(job)
    return curve_figure(job)


def _metrics(job) -> pd.DataFrame:
    frame = with_setting(load_metrics(job.input["metrics"]))
    frame["method"] = frame["row"]
    return frame.dropna(subset=["acc"])


def curve_figure(job) -> None:
    """Accuracy against iterations (Figs 7-10) or uplink MB per client (Fig. 11); one panel per alpha."""
    spec = job.spec
    frame = _metrics(job)
    title = TITLES[spec["name"]] + _describe(frame)
    x_kind = spec.get("x", "uplink" if spec["name"] == "fig11" else "iteration")
    if x_kind == "uplink":  # CFD's quantised soft labels are not modelled: its volume is an upper bound
        frame["method"] = frame["method"].replace({NAMES["cfd"]: f"{NAMES['cfd']} (unquantised)"})
    if x_kind == "uplink":
        x = "uplink per client (MB)"
        frame[x] = frame["uplink_mb_per_client"]
    elif x_kind == "simulated_time":
        model = spec["time_model"]
        x = "simulated time (s)"
        frame[x] = (
            frame["iteration"] * model["seconds_per_iteration"]
            + frame["uplink_mb_per_client"] * 8 / model["uplink_mbit_per_s"]
        )
    else:
        x = "iteration"
    frame["accuracy"] = frame["acc"]
    finals = load_summaries(job.input["summaries"])
    frame["method"] = frame["method"].replace(unhealthy_labels(finals))
    panels = sorted(frame["setting"].unique(), key=lambda s: -(parse_setting(s)["alpha"] or 0))
    disc = _disc_by_iteration(job.input["metrics"]) if x == "iteration" else pd.DataFrame()
    fig, axes = figures.new_figure(len(panels))
    for ax, setting in zip(axes, panels):
        figures.lines_with_band(frame[frame["setting"] == setting], x, "accuracy", "method", ax)
        s = parse_setting(setting)
        ax.set_title(f"alpha={s['alpha']:g}" if s["alpha"] is not None else f"N={s['clients']}")
        if not disc.empty:
            _discriminator_axis(ax, disc[disc["setting"] == setting], finals)
        if x_kind == "uplink":
            ax.set_xscale("log")
    figures.title(fig, title)
    for note in figure_notes(finals):
        figures.note(fig, note)
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), spec["scale"])


def unhealthy_labels(finals: pd.DataFrame) -> dict[str, str]:
    """Row label -> the label a curve gets when some of its runs diverged or sit at chance: the figure
    still draws it (the paper's figure has the row), and the legend says it is not a result."""
    if finals.empty or "status" not in finals:
        return {}
    finals, out = with_setting(finals), {}
    for row, part in finals.groupby("row"):
        bad = part[part["status"].fillna("ok") != "ok"]
        if len(bad):
            out[row] = f"{row} ({bad['status'].iloc[0]} in {len(bad)}/{len(part)} runs: not a result)"
    return out


def figure_notes(finals: pd.DataFrame) -> list[str]:
    """A curve figure's budget and baseline notes; for FedDF-AL (Fig. 10) its discriminator and its claim."""
    if finals.empty:
        return []
    finals = with_setting(finals)
    out = [n for n in [budget_note(finals)] if n] + baseline_notes(finals)
    if "feddf_al" in set(finals["method"]):
        from fedrepro.report.fedal_claims import caption_claims

        finals["panel"] = [f"alpha={a:g}" if a == a else "all" for a in finals["alpha"].astype(float)]
        out += [n for n in [discriminator_note(finals, method="feddf_al")] if n]
        tau = " The runs differ in tau too (15 against 10, as in the paper): not the adversarial term alone."
        out += [claim + tau for claim in caption_claims(finals, "Fig. 10")]
    return out


def _disc_by_iteration(paths: list[str]) -> pd.DataFrame:
    """Adversarial runs' discriminator loss per round (mean over seeds), at the iteration the round ends."""
    frame = load_metrics(paths)
    if "disc_loss" not in frame:
        return pd.DataFrame()
    frame = frame[frame["disc_loss"].notna()].copy()
    evals = frame.dropna(subset=["iteration"])
    per_round = (evals["iteration"] / evals["round"]).groupby([evals["method"], evals["setting"]]).first()
    frame["iteration"] = frame["round"] * [per_round[(m, s)] for m, s in zip(frame["method"], frame["setting"])]
    return frame.groupby(["method", "setting", "iteration"], as_index=False)["disc_loss"].mean()


def _discriminator_axis(ax, disc: pd.DataFrame, finals: pd.DataFrame) -> None:
    """The discriminator's loss on a right axis (dashed), with its log N (dotted): where it sits is
    what tells whether the adversarial term had anything to push against."""
    right, values = ax.twinx(), list(disc["disc_loss"])
    for method, part in disc.groupby("method"):
        right.plot(part["iteration"], part["disc_loss"], "--", color="0.3", label=f"{NAMES[method]} D loss")
        log_n = finals.loc[finals["method"] == method, "disc_log_n"].dropna()
        if len(log_n):
            right.axhline(float(log_n.iloc[0]), ls=":", color="0.5", label="log N")
            values.append(float(log_n.iloc[0]))
    # at least +-0.05 around the values, so that a wiggle at log N does not fill the axis
    right.set_ylim(min(values) - 0.05, max(values) + 0.05)
    right.set_ylabel("discriminator loss")
    right.grid(False)
    # one legend, on the twin drawn over the panel, so that no curve runs over it
    handles = [*ax.get_legend().legend_handles, *right.get_legend_handles_labels()[0]]
    labels = [t.get_text() for t in ax.get_legend().get_texts()] + right.get_legend_handles_labels()[1]
    title = ax.get_legend().get_title().get_text()
    ax.get_legend().remove()
    right.legend(handles, labels, title=title)


def variance_figure(job) -> None:
    """sigma^2 per loss component against iterations (log scale)."""
    frame = _metrics(job)
    columns = [c for c in frame.columns if c.startswith("var_")]
    fig, (ax,) = figures.new_figure(width=5.0)
    if columns:
        _variance_lines(frame, columns, ax)
    else:
        ax.text(
            0.5,
            0.5,
            "not computed: fewer than 2 mini-batches per client\n(or no diagnostics in the experiment)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    figures.title(fig, TITLES["fig6"] + _describe(frame))
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), job.spec["scale"])


def _variance_lines(frame, columns: list[str], ax) -> None:
    long = frame.melt(
        id_vars=["seed", "iteration"], value_vars=columns, var_name="component", value_name="variance"
    ).dropna()
    long["component"] = long["component"].str.removeprefix("var_").str.replace("sigma_", "sigma^2_")
    figures.lines_with_band(long, "iteration", "variance", "component", ax)
    ax.set_yscale("log")


def class_distribution_figure(job) -> None:
    """Fig. 2: the mean output distribution on test samples of one class, rows = alpha, one panel per method."""
    spec = job.spec
    cls = int(spec["class"])
    rows = []
    for path in job.input["summaries"]:
        ident = identity(path)
        setting = parse_setting(ident["setting"])
        for per_seed in json.loads(Path(path).read_text())["seeds"].values():
            rows.append(
                {
                    "method": NAMES[ident["method"]],
                    "alpha": setting["alpha"],
                    **{str(k): p for k, p in enumerate(per_seed["class_probs"][cls])},
                }
            )
    frame = pd.DataFrame(rows).groupby(["method", "alpha"]).mean().reset_index()
    methods = [NAMES[m] for m in spec["methods"]]
    fig, axes = figures.new_figure(len(methods), width=4.6)
    import seaborn as sns

    for ax, method in zip(axes, methods):
        part = frame[frame["method"] == method].sort_values("alpha", ascending=False)
        matrix = part.drop(columns=["method", "alpha"]).to_numpy(dtype=float)
        sns.heatmap(
            matrix,
            ax=ax,
            vmin=0,
            vmax=1,
            annot=True,
            fmt=".2f",
            annot_kws={"size": 6},
            cmap="viridis",
            cbar=False,
            yticklabels=[f"alpha={a:g}" for a in part["alpha"]],
        )
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
    figures.title(fig, f"Fig. 4: Dirichlet partitions [ours: {spec['dataset']}]")
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), spec["scale"])
