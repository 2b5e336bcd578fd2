"""FedSC report: Tables 2-5 (linear probe), Table 6 (noise calibration re-accounted),
the realised privacy of every private run, and Figure 2 (kNN accuracy per round).

Each rule passes `cells`: the files to read and the (row, column) of the paper
table they fill (built by `fedrepro.experiments.fedsc`). Accuracies are stored
as fractions and shown in % like the paper.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fedrepro.eval.health import Health, worst
from fedrepro.report import figures, tables

CAPTIONS = {
    "table2": "FedSC Table 2: linear-probe top-1 accuracy (%) of federated SSL methods",
    # {delta}: the table's own delta (fedsc.tables.<table>.delta), written once in the config
    "table3": "FedSC Table 3: FedSC under DP ({delta}), linear-probe accuracy (%)",
    "table4": "FedSC Table 4: FedSC under DP ({delta}, CIFAR100 budgets), linear-probe accuracy (%)",
    "table5": "FedSC Table 5: FedSC under DP ({delta}), partial participation, linear-probe accuracy (%)",
    "standin": (
        "FedSC Tables 2-3 on the generated stand-ins (shapes: fedrepro.data.shapes, 10 mirror-symmetric grey "
        "shapes, 16x16; textures: fedrepro.data.textures, 10 textures, 16x16; one class per client over 10 "
        "clients): linear-probe accuracy (%) of FedAvg+SC, FedSC at each ε and at ε = ∞ (Table 2's FedSC row) and "
        "the untrained encoder, and Centralized SC (one client holding every image); the paper has no numbers for "
        "these data sets"
    ),
}
PUBLISHED = ("table2", "table3", "table4", "table5")  # tables with a reference in report/published


def _seed_health(probe_result: dict, summary: dict | None, seed: str) -> Health:
    """A seed's health: the probe's (collapsed / chance) and the pretraining run's (diverged)."""
    run = Health.from_dict(summary["seeds"].get(seed, {})) if summary else Health()
    return worst(Health.from_dict(probe_result), run)


def probe_frame(cells: list[dict]) -> pd.DataFrame:
    """row, column, seed, value (final-epoch probe accuracy in %), effective rank and health per seed.

    A degenerate seed (diverged pretraining, collapsed features, probe at chance) keeps its value
    here; `tables.compare` prints its status instead of a number.
    """
    rows = []
    for cell in cells:
        path = Path(cell["path"])
        probe = json.loads(path.read_text())
        summary_path = path.with_name("summary.json")
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
        for seed, result in probe["seeds"].items():
            health = _seed_health(result, summary, seed)
            rows.append(
                {
                    "row": cell["row"],
                    "column": cell["column"],
                    "seed": int(seed),
                    "value": 100 * result["final_acc"],
                    "effective_rank": result.get("effective_rank", math.nan),
                    **health.as_dict(),
                }
            )
    return pd.DataFrame(rows, columns=["row", "column", "seed", "value", "effective_rank", "status", "status_reason"])


def realised_epsilon(summary_path: str | Path, delta: float) -> float:
    """The largest tight (PLD) epsilon at `delta` over the clients and seeds of one FedSC run,
    recomputed from what the run did (sigma, mu, T_j shares, |D_j|) with the library accountant."""
    from fedrepro.privacy import fedsc as fedsc_privacy

    summary = json.loads(Path(summary_path).read_text())
    worst_eps = 0.0
    for per_seed in summary["seeds"].values():
        priv = per_seed["privacy"]
        for t_j, n_j in zip(priv["shares"], per_seed["client_sizes"]):
            if t_j == 0:
                continue
            if priv["sigma"] == 0:
                return math.inf
            mech = fedsc_privacy.fedsc_mechanism(float(priv["sigma"]), float(priv["mu"]), int(n_j), int(t_j))
            worst_eps = max(worst_eps, mech.epsilon(float(delta), "pld"))
    return worst_eps


def realised_labels(cells: list[dict], delta: float) -> dict[str, str]:
    """Row label -> label with the realised tight epsilon of each column beside it (FedSC Tables 3-5:
    'eps=3' is the calibration target; under partial participation the code's sigma * p realises more)."""
    found: dict[str, dict[str, float]] = {}
    for cell in cells:
        if not cell.get("private"):
            continue
        summary = Path(cell["path"]).with_name("summary.json")
        eps = realised_epsilon(summary, delta)
        per_column = found.setdefault(cell["row"], {})
        per_column[cell["column"]] = max(per_column.get(cell["column"], 0.0), eps)
    return {
        row: f"{row} [realised PLD ε: " + "; ".join(f"{c} {e:.2f}" for c, e in cols.items()) + "]"
        for row, cols in found.items()
    }


def probe_table(job) -> None:
    name = job.spec["table"]
    ours = probe_frame(job.spec["cells"])
    reference = tables.published(f"fedsc_{name}") if name in PUBLISHED else None
    table = tables.compare(ours[["row", "column", "seed", "value", "status", "status_reason"]], reference)
    ranks = ours.groupby(["row", "column"])["effective_rank"].mean()
    table.insert(
        table.columns.get_loc("seeds") + 1,
        "effective_rank",
        [ranks.get((r, c), math.nan) for r, c in zip(table["row"], table["column"])],
    )
    delta = job.spec.get("delta")
    caption = CAPTIONS[name].format(delta=f"δ = {_delta_label(float(delta))}" if delta is not None else "")
    if delta is not None:
        from fedrepro.privacy import fedsc as fedsc_privacy

        labels = realised_labels(job.spec["cells"], float(delta))
        table["row"] = table["row"].map(lambda r: labels.get(r, r))
        caption += (
            f". Beside each ε label: the realised tight (PLD) ε at δ = {_delta_label(float(delta))} "
            f"of our run, the largest over clients and seeds. {fedsc_privacy.THREAT_NOTE}"
        )
    caption += rule_note(job.spec["cells"])
    if job.spec.get("note"):
        caption += ". " + job.spec["note"]
    tables.write_table(table, job.output["md"].removesuffix(".md"), caption, job.spec["scale"], job.spec["decimals"])


def rule_note(cells: list[dict]) -> str:
    """The rule each baseline row ran (its run summary's `rule`) beside the rule of the published row."""
    rules = {}
    for cell in cells:
        summary = Path(cell["path"]).with_name("summary.json")
        if summary.exists():
            rules.update((s["rule"], None) for s in json.loads(summary.read_text())["seeds"].values() if "rule" in s)
    if not rules:
        return ""
    return (
        ". Our rows: " + "; ".join(rules) + ". The published FedU, FedEMA and FedX rows come from the FedSC "
        "authors' implementations (FedU: whole-model keep-or-replace; FedEMA: 1 - mu on the local model, "
        "lambda 0.2; FedX: tau2 0.01)"
    )


def _delta_label(delta: float) -> str:
    exponent = math.log10(delta)
    return f"1e{int(round(exponent))}" if abs(exponent - round(exponent)) < 1e-9 else f"{delta:g}"


def table6_frame(rows: list[dict]) -> pd.DataFrame:
    """Each Table 6 configuration re-accounted: Prop. 6.6 with sensitivity mu/|D_j| (paper)
    and sqrt(2) mu/|D_j|, its numeric min over alpha, and the library accountant (RDP, PLD)."""
    from fedrepro.privacy import fedsc as priv

    out = []
    for r in rows:
        t, mu, sigma, n, delta = int(r["shares"]), float(r["mu"]), float(r["sigma"]), int(r["n"]), float(r["delta"])
        mech = priv.fedsc_mechanism(sigma, mu, n, t)
        out.append(
            {
                "setting": f"{r['dataset']} ε={r['eps']:g} δ={_delta_label(delta)}",
                "mu": mu,
                "sigma": sigma,
                "sharing": r.get("schedule", ""),
                "T_j": t,
                "|D_j|": n,
                "target ε": float(r["eps"]),
                "ε Prop. 6.6 (μ/|D|)": priv.epsilon(t, mu, sigma, n, delta, priv.PAPER_SENS_FACTOR),
                "ε Prop. 6.6 (√2μ/|D|)": priv.epsilon(t, mu, sigma, n, delta, priv.RIGOROUS_SENS_FACTOR),
                "ε numeric min (√2)": priv.epsilon_numeric(t, mu, sigma, n, delta, priv.RIGOROUS_SENS_FACTOR),
                "ε accountant RDP (√2)": mech.epsilon(delta, "rdp"),
                "ε accountant PLD (√2)": mech.epsilon(delta, "pld"),
                **against_server(),
            }
        )
    return pd.DataFrame(out)


def against_server() -> dict:
    """The columns that say what holds against the server: no finite epsilon (the weights cross in clear)."""
    from fedrepro.privacy import fedsc as fedsc_privacy

    return {"ε against the server": fedsc_privacy.SERVER_EPSILON, "why": fedsc_privacy.SERVER_REASON}


def table6(job) -> None:
    from fedrepro.privacy import fedsc as fedsc_privacy

    frame = table6_frame(job.spec["rows"])
    eps_columns = [c for c in frame.columns if c.startswith("ε") and c != "ε against the server"]
    frame[eps_columns] = frame[eps_columns].round(3)
    caption = (
        "FedSC Table 6 re-accounted: epsilon of each published noise configuration (full participation) "
        "under the paper's formula, the sqrt(2) sensitivity and the dp-accounting library "
        "(pure computation; independent of the experiment scale), each for the matrices alone, and against the "
        f"server: ∞. {fedsc_privacy.THREAT_NOTE}"
    )
    tables.write_table(frame, job.output["md"].removesuffix(".md"), caption, "paper", job.spec["decimals"])


def privacy_frame(cells: list[dict]) -> pd.DataFrame:
    """Per private run and delta: sigma, realised T_j range and the largest epsilon over clients and seeds."""
    rows = []
    for cell in cells:
        summary = json.loads(Path(cell["path"]).read_text())
        eps = summary["spec"]["privacy"].get("eps")
        for seed, per_seed in summary["seeds"].items():
            for e in per_seed["privacy"]["epsilons"]:
                rows.append({"dataset": cell["column"], "run": cell["row"], "label ε": eps, "seed": int(seed), **e})
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    grouped = frame.groupby(["dataset", "run", "label ε", "delta"], sort=False)
    tight = (
        {"eps_pld_max": ("eps_pld", "max")} if "eps_pld" in frame else {}
    )  # summaries before PLD was recorded lack it
    from fedrepro.privacy.fedsc import MATRICES_ONLY

    server = against_server()
    return (
        grouped.agg(
            sigma=("sigma", "first"),
            T_j_min=("T_j", "min"),
            T_j_max=("T_j", "max"),
            n_j_min=("n_j", "min"),
            eps_paper_max=("eps_paper", "max"),
            eps_sqrt2_max=("eps_sqrt2", "max"),
            eps_accountant_max=("eps_accountant", "max"),
            **tight,
        )
        .reset_index()
        .assign(adversary=MATRICES_ONLY, eps_vs_server=server["ε against the server"], why=server["why"])
    )


def privacy_table(job) -> None:
    from fedrepro.privacy import fedsc as fedsc_privacy

    frame = privacy_frame(job.spec["cells"]).round(4)
    caption = (
        "FedSC realised privacy: per private run, the number of matrix shares T_j per client and the "
        "largest epsilon over clients and seeds (paper formula, sqrt(2) sensitivity, library accountant: "
        "RDP, and PLD, the tight value of what the run did), each against the adversary of column adversary "
        "(the matrices alone); eps_vs_server: what holds against the server, ∞ (column why). "
        "Under partial participation sigma is scaled by the participation ratio (the authors' code), so the "
        f"realised epsilon can exceed the label. {fedsc_privacy.THREAT_NOTE}"
    )
    tables.write_table(frame, job.output["md"].removesuffix(".md"), caption, job.spec["scale"], job.spec["decimals"])


def figure2(job) -> None:
    """kNN accuracy (%) of the global model per round: FedSC vs FedAvg+SC, one panel per dataset."""
    frames = []
    for cell in job.spec["cells"]:
        frame = pd.read_parquet(cell["path"]).dropna(subset=["knn_acc"])
        frames.append(frame.assign(method=cell["row"], panel=cell["column"]))
    data = pd.concat(frames, ignore_index=True)
    data["kNN accuracy (%)"] = 100 * data["knn_acc"]
    panels = list(dict.fromkeys(data["panel"]))
    fig, axes = figures.new_figure(len(panels))
    for ax, panel in zip(axes, panels):
        figures.lines_with_band(data[data["panel"] == panel], "round", "kNN accuracy (%)", "method", ax)
        ax.set_title(panel)
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), job.spec["scale"])


def samples_figure(job) -> None:
    """`per_class` training images of every class of a prepared image data set, one column per class."""
    from fedrepro.data.arrays import load_prepared

    prepared = load_prepared(Path(job.input["data"]).parent)
    per_class, labels = int(job.spec["per_class"]), prepared.y_train
    classes = int(prepared.meta.get("num_classes", labels.max() + 1))
    names = prepared.meta.get("class_names") or [str(c) for c in range(classes)]
    fig, axes = figures.new_figure(per_class * classes, width=1.0, height=1.05, rows=per_class)
    for c in range(classes):
        for r, i in enumerate(np.flatnonzero(labels == c)[:per_class]):
            ax = axes[r * classes + c]
            image = prepared.x_train[i].transpose(1, 2, 0)
            ax.imshow(image if image.shape[2] == 3 else image[:, :, 0], cmap="gray", vmin=0, vmax=255)
            ax.set_title(names[c] if r == 0 else "", fontsize=7)
    for ax in axes:
        ax.axis("off")
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), job.spec["scale"])
