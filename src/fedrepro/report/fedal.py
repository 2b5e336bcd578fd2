"""FedAL's tables (IV-IX) and figures (2, 4, 6-11), ours beside the published values.

Accuracy is the mean over clients of each client model's test accuracy, as a
fraction (the paper's unit); tables show mean +- std over seeds. Every output
carries the scale note (quick numbers are not the paper's setting).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from fedrepro.algorithms import method_table
from fedrepro.eval.health import Health, cell_status
from fedrepro.eval.verdict import TEST_NAME, Verdict, differences, paired
from fedrepro.experiments.fedal import PAPER, parse_setting
from fedrepro.report import figures, tables
from fedrepro.report.runs import identity, load_metrics, load_summaries

NAMES = {name: row.label for name, row in method_table(PAPER).items()}
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
AXIS_LABEL = {
    "alpha": lambda s: f"alpha={s['alpha']:g}",
    "clients": lambda s: f"N={s['clients']}",
    "public": lambda s: f"|P|={s['public']}",
}


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
    finals = _with_setting(finals)
    finals["row"] = finals["method"].map(NAMES)
    if spec["axis"] == "method":
        finals["column"], finals["row"] = finals["row"], "Accuracy"
    else:
        finals["column"] = [AXIS_LABEL[spec["axis"]](s) for _, s in finals.iterrows()]
    finals["value"] = finals["acc"]
    published = tables.published(f"fedal_{spec['name']}")
    health = [c for c in ("status", "status_reason") if c in finals]
    table = tables.compare(finals[["row", "column", "seed", "value", *health]], published)
    finals["panel"] = "all runs" if spec["axis"] == "method" else finals["column"]
    metrics = _panel_metrics(job.input["metrics"], spec["axis"]) if job.input.get("metrics") else None
    extra = notes(finals, spec, metrics) + read_notes(job.input["summaries"])
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
    text = f"{NAMES[method]} discriminator loss at the end (mean over seeds): " + "; ".join(cells) + "."
    if at_log_n:
        text += f" Within {AT_LOG_N} of log N in every run: at the end it cannot tell the players apart."
    return text


CLAIMS = (("fedmd_lf", "the adversarial term helps (FedAL > FedMD-LF, Table VIII)"), ("fedmd", "FedAL beats FedMD"))


def _health(part: pd.DataFrame) -> Health:
    if "status" not in part:
        return Health()
    return cell_status(
        [
            Health(s, r)
            for s, r in zip(
                part["status"].fillna("ok"), part.get("status_reason", pd.Series("", index=part.index)).fillna("")
            )
        ]
    )


def _by_seed(part: pd.DataFrame) -> dict[int, float]:
    return {int(s): float(a) for s, a in zip(part["seed"], part["acc"])}


def claim_verdicts(finals: pd.DataFrame, other: str, ours: str = "fedal") -> list[tuple[str, Verdict]]:
    """(panel, verdict) of "ours > other" per panel, paired by seed (same partition, architectures and
    batches), then pooled over the panels (pairs = panel x seed) when there are several."""
    out, diffs, pooled_sides = [], [], {}
    for panel, part in finals.groupby("panel", sort=False):
        mine, theirs = part[part["method"] == ours], part[part["method"] == other]
        if mine.empty or theirs.empty:
            continue
        sides = {NAMES[ours]: _health(mine), NAMES[other]: _health(theirs)}
        a, b = _by_seed(mine), _by_seed(theirs)
        out.append((panel, paired(a, b, sides)))
        diffs += [a[s] - b[s] for s in sorted(set(a) & set(b))]
        pooled_sides.update({f"{name} ({panel})": h for name, h in sides.items()})
    if len(out) > 1:
        out.append((f"pooled over the {len(out)} panels", differences(diffs, pooled_sides)))
    return out


def claim_notes(finals: pd.DataFrame) -> list[str]:
    """The paper's FedAL claims, one verdict (`fedrepro.eval.verdict`) per panel and pooled. The
    adversarial term is called inert only when removing it changes no seed's accuracy."""
    out = []
    for other, claim in CLAIMS:
        verdicts = claim_verdicts(finals, other)
        if not verdicts:
            continue
        text = f"Claim, {claim}: " + "; ".join(f"{panel}: {v.text()}" for panel, v in verdicts) + "."
        # no spread and no effect: every seed's accuracy is the same with and without the term
        if other == "fedmd_lf" and all(v.tested and v.effect == 0 and not v.low < v.high for _, v in verdicts):
            text += " Removing the adversarial term changes no seed's accuracy: it is inert here."
        out.append(text)
    return out


def notes(finals: pd.DataFrame, spec: dict, metrics: pd.DataFrame | None = None) -> list[str]:
    """What a reader needs beside the numbers: the discriminator, the paper's FedAL claims, and
    where a baseline differs from its paper or from the paper's row."""
    methods = set(finals["method"])
    claims = claim_notes(finals)
    out = [n for n in [discriminator_note(finals, metrics)] if n] + claims
    if claims:
        out.append(f"Verdicts: {TEST_NAME}, margin 0; pooled = every (panel, seed) pair.")
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
    """Which FedProto variant ran, and FCCL's pretraining outside the budget (tables and figures)."""
    methods, out = set(finals["method"]), []
    if "fccl" in methods and "pretrain_steps" in finals:
        steps = finals.loc[finals["method"] == "fccl", "pretrain_steps"].dropna()
        if len(steps) and steps.max() > 0:
            out.append(
                f"FCCL is not at the others' budget: each client also takes {int(steps.max())} cross-entropy steps "
                "pretraining its intra-domain teacher before the iteration budget starts (not counted in it), "
                "and starts from that teacher, as in the authors' code."
            )
    for method in ("fccl", "fccl_plus") if {"local_steps", "tau"} <= set(finals) else ():
        runs = finals[finals["method"] == method]
        longer = runs[runs["local_steps"] > runs["tau"]]
        if len(longer):
            out.append(
                f"{NAMES[method]} takes {int(longer['local_steps'].max())} local steps per round of "
                f"{int(longer['tau'].max())} collaborative iterations (its authors run 20 local epochs per "
                "public epoch); the other methods take tau local steps per tau iterations."
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
    frame = _with_setting(load_metrics(job.input["metrics"]))
    frame["method"] = frame["method"].map(NAMES)
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
    panels = sorted(frame["setting"].unique(), key=lambda s: -(parse_setting(s)["alpha"] or 0))
    width = 60 * len(panels)
    title += "".join(f"\n{line}" for note in figure_notes(finals) for line in textwrap.wrap(note, width))
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
    fig.suptitle(title, fontsize=8)
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), spec["scale"])


def figure_notes(finals: pd.DataFrame) -> list[str]:
    """A curve figure's baseline notes; for FedDF-AL (Fig. 10) its discriminator and its claim."""
    if finals.empty:
        return []
    out = baseline_notes(finals)
    if "feddf_al" in set(finals["method"]):
        finals = _with_setting(finals)
        finals["panel"] = [f"alpha={a:g}" if a == a else "all" for a in finals["alpha"].astype(float)]
        out += [n for n in [discriminator_note(finals, method="feddf_al")] if n]
        verdicts = claim_verdicts(finals, "feddf", ours="feddf_al")
        if verdicts:
            out.append(
                "Claim, FedDF-AL > FedDF: "
                + "; ".join(f"{p}: {v.text()}" for p, v in verdicts)
                + " (the runs differ in tau too, 15 against 10 as in the paper: not the adversarial term alone)."
            )
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
    right.legend(loc="upper left", fontsize=6)


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
    fig.suptitle(TITLES["fig6"] + _describe(frame), fontsize=8)
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
    fig.suptitle(f"Fig. 4: Dirichlet partitions [ours: {spec['dataset']}]", fontsize=8)
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), spec["scale"])
