"""DPZV report: Figures 2-6, the Figure 3 accuracy table, the privacy table and the claims table.

The paper has no numeric result tables; the only numbers its text quotes are
bounds for CIFAR-10 at eps = 0.1 (DPZV "over 90%", ZOO-VFL and VFL-CZOFO "below
30%"), kept in `published/dpzv_quoted.csv`. The claims table checks the paper's
qualitative claims (Section 7 and the captions of Figures 2-6) on our runs and
says which ones our scale can test. Accuracy is the test accuracy at the best-validation evaluation.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fedrepro.algorithms import method_table
from fedrepro.eval.health import Health, cell_status
from fedrepro.eval.verdict import FAILS, HOLDS, TEST_NAME, Verdict, chance_under_dp, needed_text, paired
from fedrepro.privacy.dpzv import (
    ADVERSARY_COLUMNS,
    CLIENT_MODEL_LEAK,
    KNOWN_BATCH,
    THREAT_MODELS,
    THREAT_NOTE,
    THREAT_SHORT,
)
from fedrepro.report import figures, tables
from fedrepro.report.claims import counts_text, distinct
from fedrepro.report.runs import identity, load_metrics

METHODS = method_table("dpzv")
LABELS = {name: row.label for name, row in METHODS.items()}
# DPZV's sound calibration (`dpzv.sound`: dp_head + secret subsample), a row of its own beside the paper's
SOUND_LABEL = "DPZV sound (DP head + secret subsample)"
# Figure legends name what each method's epsilon protects and against whom (issue 39: a nominal epsilon is
# each method's own adversary and unit; privacy.dpzv.THREAT_MODELS)
LEGEND = {
    **{label: f"{label} (ε: features vs server)" for label in LABELS.values()},
    "DPZV": "DPZV (ε: labels vs clients, batch secret, head fixed)",
    SOUND_LABEL: "DPZV sound (ε: labels vs clients)",
}
# one colour per row label in every panel (a panel without the sound row keeps the others' colours)
PALETTE = dict(zip([*LABELS.values(), SOUND_LABEL], ["tab:blue", "tab:green", "tab:red", "tab:purple", "tab:orange"]))
PRIVACY_FIELDS = (
    "eps_vs_server",
    "eps_vs_clients",
    "eps_pld",
    "eps_known_pooled",
    "eps_known_one_client",
    "eps_sent_one_client",
    "client_rounds",
    "batch_size",
    "eps_pld_sound",
    "uses_pooled",
    "uses_one_client",
    "sigma",
    "noise_multiplier",
    "gdp_mu",
    "mu_clt",
    "eps_clt",
    "eps_library",
    "releases",
)
# The paper's flaw, reproduced (Algorithm 1): the server head is trained on the raw labels without
# noise, and it enters every later Delta, so a label's influence is not bounded by 2C/B per round.
LABEL_LEAK = (
    "DPZV's epsilons bound the Delta messages only for a fixed server head: the head is trained on "
    "the raw labels without noise and enters every later Delta, so none of them bounds what the "
    "clients receive about the labels (the paper's guarantee does not cover its own Algorithm 1)"
)
PROTECTS = THREAT_NOTE


def threat_footnote(fig) -> None:
    """Under a figure that shows an epsilon: what it protects and against whom (privacy.dpzv.THREAT_SHORT)."""
    figures.note(fig, THREAT_SHORT)


def server_note(spec: dict) -> str:
    """Which server update produced the numbers, per data set (issue 28: the SGD server deviates from
    Algorithm 1 line 7, a zeroth-order server step; VAFL and VFL-CZOFO train their head by SGD by definition)."""
    updates = spec.get("server_updates") or {}
    sgd = [d for d, u in updates.items() if u == "sgd"]
    zo = [d for d, u in updates.items() if u == "zo"]
    parts = []
    if sgd:
        parts.append(
            f"server head by SGD (momentum 0.9) for all four methods on {', '.join(sgd)}: a deviation from "
            "Algorithm 1 line 7 (a zeroth-order server step), whose ZO server drifts at Table 2's step sizes"
        )
    if zo:
        parts.append(f"Algorithm 1's zeroth-order server step (DPZV, ZOO-VFL) on {', '.join(zo)}")
    return "; ".join(parts) or "server update: see dpzv.shared.server_update"


def server_tag(spec: dict, dataset: str) -> str:
    """Short form for a figure title."""
    update = (spec.get("server_updates") or {}).get(dataset)
    return {"sgd": "SGD server (≠ Alg. 1 l. 7)", "zo": "ZO server (Alg. 1)"}.get(update, "")


SAMPLING = (
    "every accountant assumes Poisson subsampling at q = B/D; the runs use shuffled fixed-size "
    "batches, which that guarantee does not cover"
)


def eps_label(eps: float) -> str:
    return "∞" if math.isinf(eps) else f"{eps:g}"


def realised_pld(best: pd.DataFrame) -> dict:
    """(dataset, eps) -> the largest tight PLD epsilon any run at that nominal eps realised."""
    rows = best[np.isfinite(best["eps"])]
    return {key: float(group["eps_pld"].max()) for key, group in rows.groupby(["dataset", "eps"])}


def eps_with_pld(eps: float, pld: float | None) -> str:
    """ "1 (PLD 1.04)": the nominal eps beside the tight epsilon of what the runs did."""
    if math.isinf(eps) or pld is None or not math.isfinite(pld):
        return eps_label(eps)
    return f"{eps:g} (PLD {pld:.3g})"


def known_pooled(best: pd.DataFrame) -> dict:
    """(dataset, eps) -> DPZV's largest known-batch epsilon against the pooled clients at that nominal eps."""
    if "eps_known_pooled" not in best:
        return {}
    rows = best[(best["method"] == "dpzv") & np.isfinite(best["eps"])]
    return {key: float(group["eps_known_pooled"].max()) for key, group in rows.groupby(["dataset", "eps"])}


def _cell_health(frame: pd.DataFrame) -> Health:
    """Health of a table cell (all seeds of the rows in `frame`)."""
    return cell_status([Health(s, r) for s, r in zip(frame["status"], frame["status_reason"])])


def load_best(paths: list[str]) -> pd.DataFrame:
    """One row per (run, variant, seed): best-validation test accuracy and the privacy record."""
    rows = []
    for path in paths:
        summary = json.loads(Path(path).read_text())
        for tag, variant in summary["variants"].items():
            for seed, per_seed in variant["seeds"].items():
                best, priv = per_seed.get("best", {}), per_seed.get("privacy", {})
                health = Health.from_dict(per_seed)
                rows.append(
                    {
                        **identity(path),
                        "variant": tag,
                        "eps": float(variant["eps"]),
                        "clip": float(variant["clip"]),
                        "calibration": variant.get("calibration", "paper"),
                        "num_test": per_seed.get("num_test", np.nan),
                        "seed": int(seed),
                        "status": health.status,
                        "status_reason": health.reason,
                        "best_test_acc": best.get("test_acc", np.nan),
                        "best_val_acc": best.get("val_acc", np.nan),
                        "best_epoch": best.get("epoch", np.nan),
                        "final_test_acc": per_seed.get("final", {}).get("test_acc", np.nan),
                        **{k: priv.get(k, np.nan) for k in PRIVACY_FIELDS},
                    }
                )
    return _labelled(pd.DataFrame(rows))


def calibration_of(frame: pd.DataFrame) -> pd.Series:
    """Each row's calibration: `paper`, or `sound` (rows from before the column are the paper's)."""
    if "calibration" not in frame:
        return pd.Series("paper", index=frame.index)
    return frame["calibration"].fillna("paper")


def _labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """`label` per row: the method's, or SOUND_LABEL for DPZV's sound calibration (runs from before it: paper)."""
    frame = frame.assign(calibration=calibration_of(frame))
    return frame.assign(label=frame["method"].map(LABELS).where(frame["calibration"] == "paper", SOUND_LABEL))


def _select(frame: pd.DataFrame, dataset: str, eps=None, clip=None, calibration: str | None = "paper") -> pd.DataFrame:
    """Rows of `dataset` (at `eps`); DPZV rows only at clip `clip` (its default C) and of `calibration` (the
    paper's by default; None: every calibration)."""
    out = frame[frame["dataset"] == dataset]
    if eps is not None:
        out = out[out["eps"] == float(eps)]
    if clip is not None:
        out = out[(out["method"] != "dpzv") | (out["clip"] == float(clip))]
    if calibration is not None:
        out = out[calibration_of(out) == calibration]
    return out


def _metrics(paths) -> pd.DataFrame:
    return _labelled(load_metrics(paths)).dropna(subset=["test_acc"])


def _legend(axes) -> None:
    """One legend for the panels, whose entries name each method's adversary and unit (`LEGEND`)."""
    figures.shared_legend(axes, LEGEND)


def figure2(job) -> None:
    """Test accuracy against epochs, one panel per data set at its eps (paper: MNIST/CIFAR eps 1, ModelNet40 10)."""
    spec = job.spec
    panels = spec["figures"]["fig2"]
    frame = _metrics(job.input["metrics"])
    best = load_best(job.input["summaries"]) if "summaries" in job.input else None
    fig, axes = figures.new_figure(len(panels))
    bounds = []
    for ax, (dataset, eps) in zip(axes, panels.items()):
        data = _select(frame, dataset, eps, spec["clip"]).assign(acc=lambda d: 100 * d["test_acc"])
        figures.lines_with_band(data, "epoch", "acc", "label", ax, palette=PALETTE)
        pld = realised_pld(best).get((dataset, float(eps))) if best is not None else None
        known = known_pooled(best).get((dataset, float(eps))) if best is not None else None
        if known is not None and math.isfinite(known):
            bounds.append(f"{dataset} at ε = {eps_label(float(eps))}: {known:.3g}")
        ax.set(
            title=f"{dataset}, ε = {eps_with_pld(float(eps), pld)}, δ = {spec['delta']:g}\n{server_tag(spec, dataset)}",
            xlabel="epoch",
            ylabel="test accuracy (%)",
        )
    _legend(axes)
    threat_footnote(fig)
    if bounds:
        figures.note(fig, f"DPZV's known-batch ε (labels vs the pooled clients): {'; '.join(bounds)}.")
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), spec["scale"])


def figure3(job) -> None:
    """Best-validation test accuracy against eps per data set and method."""
    spec = job.spec
    best = load_best(job.input["summaries"])
    datasets = spec["figures"]["fig3"]
    fig, axes = figures.new_figure(len(datasets), width=5.0, height=3.8)
    for ax, dataset in zip(axes, datasets):
        data = _select(best, dataset, clip=spec["clip"], calibration=None)  # the sound row beside the paper's
        diverged = data["status"] == "diverged"  # never drawn as a number; chance-level runs are (at chance)
        data = data[~diverged]
        order = sorted(data["eps"].unique())
        data = data.assign(
            position=data["eps"].map({e: i for i, e in enumerate(order)}), acc=100 * data["best_test_acc"]
        )
        figures.lines_with_band(data, "position", "acc", "label", ax, marker="o", palette=PALETTE)
        paper_rows = data[calibration_of(data) == "paper"]
        pld, known = realised_pld(paper_rows), known_pooled(paper_rows)
        ax.set_xticks(range(len(order)), [eps_with_pld(e, pld.get((dataset, e))).replace(" (", "\n(") for e in order])
        _known_batch_axis(ax, [known.get((dataset, e)) for e in order])
        dropped = f"; {int(diverged.sum())} diverged seed runs omitted" if diverged.any() else ""
        ax.set(
            title=f"{dataset}, δ = {spec['delta']:g}{dropped}\n{server_tag(spec, dataset)}",
            xlabel="nominal ε (PLD: the paper's accounting, Poisson B/D)",
            ylabel="test accuracy (%)",
        )
    _legend(axes)
    threat_footnote(fig)
    figures.note(
        fig, "Each ε is against its method's own adversary (legend); against common adversaries: privacy table."
    )
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), spec["scale"])


def _known_batch_axis(ax, known: list) -> None:
    """DPZV's known-batch epsilon at each tick of `ax` on a secondary axis above it ("-" where none)."""
    top = ax.secondary_xaxis("top")
    top.set_xticks(range(len(known)), [f"{k:.3g}" if k is not None and math.isfinite(k) else "-" for k in known])
    top.set_xlabel("DPZV's known-batch ε (labels vs the pooled clients)")


def table3(job) -> None:
    """Figure 3 as a table, beside the bounds the paper's text quotes."""
    spec = job.spec
    best = load_best(job.input["summaries"])
    datasets = spec["figures"]["fig3"]
    rows = best[best["dataset"].isin(datasets) & ((best["method"] != "dpzv") | (best["clip"] == float(spec["clip"])))]
    ours = pd.DataFrame(
        {
            "row": rows["label"],
            "column": rows["dataset"] + " eps=" + rows["eps"].map(eps_label),
            "seed": rows["seed"],
            "value": 100 * rows["best_test_acc"],
            "status": rows["status"],
            "status_reason": rows["status_reason"],
        }
    )
    table = tables.compare(ours, tables.published("dpzv_quoted"))
    pld = realised_pld(rows[calibration_of(rows) == "paper"])
    names = {f"{d} eps={eps_label(e)}": f"{d} eps={eps_with_pld(e, p)}" for (d, e), p in pld.items()}
    table["column"] = table["column"].map(lambda c: names.get(c, c))
    caption = (
        "Figure 3 as a table: best-validation test accuracy (%) per eps (delta = "
        f"{spec['delta']:g}); beside each nominal eps the tight PLD epsilon the runs realised. A run at "
        "chance or diverged shows its status, not a number. The paper prints no numbers; 'published' "
        "holds the only values its text quotes, which are bounds (CIFAR-10, eps = 0.1: DPZV over 90%, "
        f"ZOO-VFL and VFL-CZOFO below 30%). Each ε is the paper's accounting (Poisson at q = B/D); {KNOWN_BATCH} "
        f"(privacy table). {ADVERSARIES} What each ε protects: {PROTECTS}. Caveats: {LABEL_LEAK}; {SAMPLING}. "
        f"{server_note(spec).capitalize()}. {baseline_note(spec)}{subsample_note(spec)} DPZV's best-validation "
        "accuracy at small eps can come from an early epoch: the noise's random walk then takes it to chance (the "
        f"metrics keep every epoch). {soundness_cost(best)}{more_seeds_note(rows)}"
    )
    tables.write_table(table, job.output["md"].removesuffix(".md"), caption, spec["scale"], spec["decimals"])


# Issue 39: a nominal epsilon is each method's own adversary and unit; the privacy table scores both adversaries
ADVERSARIES = (
    "Adversaries: DPZV's ε bounds a record's label against the clients, the baselines' ε a client's feature slice "
    "against the server (legend), so no DPZV/baseline pair at equal nominal ε has equal finite ε against one "
    "adversary: against the server DPZV is ∞ (h+ and h- cross in clear), against the clients every baseline is ∞ "
    f"(its answers carry the labels in clear); privacy table: {', '.join(ADVERSARY_COLUMNS)}."
)


def baseline_note(spec: dict) -> str:
    """The baselines' mechanism with the clip C_h each data set's runs read (`embed_clips`)."""
    clips = ", ".join(f"{c:g} ({d})" for d, c in (spec.get("embed_clips") or {}).items() if c is not None)
    return (
        f"Baselines (VAFL's mechanism): each embedding clipped to C_h = {clips or '?'} (about twice the initial "
        "embeddings' norm, so the clip binds) plus N(0, sigma_h^2) per coordinate; the server rescales the noisy "
        "embeddings by the public 1/sqrt(1 + e sigma_h^2/C_h^2); VAFL and VFL-CZOFO clients backpropagate through "
        "their own clip; ZOO-VFL adds one noise draw to both of its embeddings; the server's table starts at zeros "
        "(no embedding before its first noisy upload)."
    )


def subsample_note(spec: dict) -> str:
    """Data sets that are a subsample of their published set (`subsamples`): D sets q = B/D and sigma."""
    parts = [
        f"{d}: a uniform {s['n_train']:,} / {s['n_test']:,} subsample of the published {s['full_train']:,} / "
        f"{s['full_test']:,} train / test records"
        for d, s in (spec.get("subsamples") or {}).items()
    ]
    return f" Data: {'; '.join(parts)} (D sets q = B/D and so sigma)." if parts else ""


def _resolution(rows: pd.DataFrame) -> float:
    """One test example as a fraction of accuracy (0 where the runs did not record the test size)."""
    n = rows["num_test"].dropna() if "num_test" in rows else pd.Series(dtype=float)
    return 1.0 / float(n.max()) if len(n) else 0.0


def soundness_cost(best: pd.DataFrame) -> str:
    """One sentence: what DPZV's sound calibration costs in accuracy at each of its labels, paired over seeds with
    the paper's row at the same label and C."""
    sound = best[calibration_of(best) == "sound"]
    parts = []
    for (dataset, eps, clip), rows in sound.groupby(["dataset", "eps", "clip"]):
        paper, ours = _per_seed(_seeds(best, dataset, "dpzv", eps, clip)), _per_seed(rows)
        verdict = paired(paper, ours, resolution=_resolution(rows))
        health = _cell_health(rows)
        status = "" if health.ok else f", {health.reason}"
        parts.append(
            f"{dataset} ε = {eps:g}: {100 * _mean(ours):.1f} %{status} against the paper's row's "
            f"{100 * _mean(paper):.1f} % (paper's row minus sound, fraction: {verdict.text(3)})"
        )
    if not parts:
        return ""
    return (
        "What soundness costs: the sound row (the head by DP-SGD and the server's secret subsample, so that its ε "
        "holds against the clients, who know the batch ids, labels included; the paper's row's ε against them is ∞) "
        f"reaches {'; '.join(parts)}."
    )


def more_seeds_note(rows: pd.DataFrame) -> str:
    """Which cells ran more seeds than the others (`dpzv.more_seeds`: comparisons a few more seeds decide)."""
    counts = rows.groupby(["dataset", "label", "eps", "clip"], dropna=False)["seed"].nunique()
    usual = int(counts.mode().iloc[0]) if len(counts) else 0
    more = [
        f"{d} {lb} ε = {eps_label(e)}{'' if pd.isna(c) else f' C = {eps_label(c)}'} ({n})"
        for (d, lb, e, c), n in counts.items()
        if n > usual
    ]
    return f" Cells with more seeds than {usual}: {', '.join(more)}." if more else ""


def figure4(job) -> None:
    """DPZV at eps = inf: test loss against server rounds with clipping (C) and without."""
    spec = job.spec
    frame = _metrics(job.input["metrics"])
    frame = frame[(frame["method"] == "dpzv") & np.isinf(frame["eps"]) & (calibration_of(frame) == "paper")]
    frame = frame.assign(
        clipping=np.where(np.isinf(frame["clip"]), "no clipping", "clip C = " + frame["clip"].map(lambda c: f"{c:g}"))
    )
    datasets = spec["figures"]["fig4"]["datasets"]
    fig, axes = figures.new_figure(len(datasets))
    for ax, dataset in zip(axes, datasets):
        figures.lines_with_band(frame[frame["dataset"] == dataset], "server_round", "test_loss", "clipping", ax)
        ax.set(
            title=f"{dataset}: DPZV, non-private (ε = ∞)\n{server_tag(spec, dataset)}",
            xlabel="communication rounds",
            ylabel="test loss",
        )
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), spec["scale"])


def figure5(job) -> None:
    """DPZV at the figure's eps: test accuracy against epochs, one line per clip threshold C."""
    spec = job.spec
    fig5 = spec["figures"]["fig5"]
    frame = _metrics(job.input["metrics"])
    frame = frame[
        (frame["method"] == "dpzv")
        & (calibration_of(frame) == "paper")
        & (frame["eps"] == float(fig5["eps"]))
        & frame["clip"].isin([float(c) for c in fig5["clips"]])
    ]
    frame = frame.assign(C=frame["clip"].map(lambda c: f"C = {c:g}"), acc=100 * frame["test_acc"])
    fig, axes = figures.new_figure(len(fig5["datasets"]))
    for ax, dataset in zip(axes, fig5["datasets"]):
        figures.lines_with_band(frame[frame["dataset"] == dataset], "epoch", "acc", "C", ax)
        ax.set(
            title=f"{dataset}: DPZV, ε = {eps_label(float(fig5['eps']))} (paper's accounting)\n{server_tag(spec, dataset)}",
            xlabel="epoch",
            ylabel="test accuracy (%)",
        )
    threat_footnote(fig)
    figures.note(fig, "DPZV's known-batch ε at these runs: privacy table.")
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), spec["scale"])


def load_memory(paths: list[str]) -> pd.DataFrame:
    """The memory jobs' rows, each with its label (`memory_label`)."""
    frames = [pd.read_csv(p).assign(dataset=Path(p).stem) for p in paths]
    if not frames:
        return pd.DataFrame(columns=["dataset", "method", "label", "ratio", "measure"])
    memory = pd.concat(frames, ignore_index=True)
    momenta = memory["zo_momentum"] if "zo_momentum" in memory else [None] * len(memory)
    return memory.assign(label=[memory_label(m, z) for m, z in zip(memory["method"], momenta)])


def memory_label(method: str, zo_momentum: float | None) -> str:
    """A Figure 6 bar: the method's label, with its ZO momentum where the measure set one."""
    if zo_momentum is None or pd.isna(zo_momentum):
        return LABELS[method]
    return f"{LABELS[method]} (ZO momentum {float(zo_momentum):g})"


def figure6(job) -> None:
    """Peak training memory normalised by the client model's parameter bytes (bars)."""
    spec = job.spec
    memory = load_memory(job.input["tables"])
    datasets = list(dict.fromkeys(memory["dataset"]))
    fig, axes = figures.new_figure(max(1, len(datasets)), width=5.0)
    for ax, dataset in zip(axes, datasets):
        data = memory[memory["dataset"] == dataset]
        ax.barh(data["label"], data["ratio"], color="tab:blue")
        ax.axvline(1.0, color="gray", lw=0.8, ls="--")
        measure = ", ".join(sorted(set(data["measure"])))
        ax.set(title=f"{dataset} ({measure})", xlabel="peak memory / model size")
    figures.save_figure(fig, job.output["png"].removesuffix(".png"), spec["scale"])


def table6(job) -> None:
    """Figure 6 as a table: peak memory over the client model's parameter bytes, and how it was measured."""
    spec = job.spec
    memory = load_memory(job.input["tables"])
    columns = [
        "dataset",
        "label",
        "measure",
        "model_bytes",
        "peak_extra_bytes",
        "ratio",
        "reserved_ratio",
        "warmup_rounds",
    ]
    table = memory[[c for c in columns if c in memory]]
    measures = set(memory["measure"])
    how = (
        "CUDA allocator peaks (allocated: torch.cuda.max_memory_allocated; reserved: max_memory_reserved)"
        if measures == {"cuda_allocator"}
        else "CPU live-tensor bytes (no GPU here, so no reserved column; the paper measures GPU memory with the "
        "CUDA allocator)"
    )
    caption = (
        f"Figure 6: peak training memory / client model size, measured as {how}, after "
        "warm-up round(s) whose lasting state (momentum buffers, gradients) still counts. ZO methods "
        "appear with ZO momentum 0.9 (what the accuracy runs use) and 0 (MeZO's in-place update)"
    )
    tables.write_table(table, job.output["md"].removesuffix(".md"), caption, spec["scale"], spec["decimals"])


# ------------------------------------------------------------------------------------------ claims


def _seeds(best: pd.DataFrame, dataset: str, method: str, eps: float, clip) -> pd.DataFrame:
    rows = _select(best, dataset, eps, clip)
    return rows[rows["method"] == method]


def _per_seed(rows: pd.DataFrame, column: str = "best_test_acc") -> dict[int, float]:
    return {int(seed): float(value) for seed, value in zip(rows["seed"], rows[column])}


def _side(best: pd.DataFrame, dataset: str, method: str, eps: float, clip, noiseless_clip=None) -> Health:
    """Health of one (data set, method, eps) cell; at finite eps, chance under the method's own DP noise is a
    result when the same method trains at eps = inf (`verdict.chance_under_dp`; at `noiseless_clip` where
    the cell's own C has no eps = inf run, as in Figure 5's sweep, whose large C only scales the noise)."""
    rows = _seeds(best, dataset, method, eps, clip)
    if rows.empty:
        return Health("chance", "no run")
    health = _cell_health(rows)
    if math.isfinite(eps):
        noiseless = _seeds(best, dataset, method, math.inf, clip)
        if noiseless.empty and noiseless_clip is not None:
            noiseless = _seeds(best, dataset, method, math.inf, noiseless_clip)
        if not noiseless.empty:
            health = chance_under_dp(health, _cell_health(noiseless))
    return health


def _mean(values: dict[int, float]) -> float:
    return float(np.mean(list(values.values()))) if values else math.nan


def compared_with_dpzv(methods: list[str]) -> list[str]:
    """The methods DPZV's accuracy claims compare against, in the claims' order: the other
    zeroth-order methods, then the first-order ones (Figure 2's caption), each in table order."""
    others = [m for m in METHODS if m in methods and m != "dpzv"]
    return [m for m in others if "zeroth_order" in METHODS[m].traits] + [
        m for m in others if "zeroth_order" not in METHODS[m].traits
    ]


def _analytic(label: str, note: str) -> Verdict:
    """A claim decided by a computation, not by seeds (a privacy bound, a deterministic byte count)."""
    return Verdict(label, note=note)


def _privacy_verdicts(best: pd.DataFrame) -> list[tuple[str, Verdict, str]]:
    """The paper's privacy claims against what the code sends (issue 27): the label channel and the batch ids."""
    dpzv = best[(best["method"] == "dpzv") & np.isfinite(best["eps"]) & np.isfinite(best["clip"])]
    dpzv = dpzv[calibration_of(dpzv) == "paper"]
    out = [
        (
            "DPZV's privacy guarantee covers what the clients receive (labels, Algorithm 1)",
            _analytic(FAILS, "analytic: the head trained on raw labels enters every later Delta"),
            LABEL_LEAK,
        )
    ]
    if not dpzv.empty and "eps_known_pooled" in dpzv:
        first = dpzv.sort_values("eps").groupby(["dataset", "eps"]).first().reset_index()
        evidence = "; ".join(
            f"{d} ε = {e:g}: paper PLD {p:.3g}, known batch {k:.3g} (pooled clients) / {o:.3g} (one client)"
            for d, e, p, k, o in zip(
                first["dataset"],
                first["eps"],
                first["eps_pld"],
                first["eps_known_pooled"],
                first["eps_known_one_client"],
            )
        )
        out.append(
            (
                "DPZV's ε (Poisson amplification at q = B/D) holds against the clients, who see the batch ids",
                _analytic(FAILS, "analytic: exact GDP over the K rounds a sample is used, sqrt(K)/s"),
                f"{KNOWN_BATCH}: {evidence}",
            )
        )
    return out


# The smallest effect of each claim, from the paper's own reported differences (Section 7): the only numbers
# its text quotes are the CIFAR-10 bounds at eps = 0.1 (`published/dpzv_quoted.csv`: DPZV over 90 %, ZOO-VFL and
# VFL-CZOFO below 30 %), a gap of at least 60 points for those two comparisons at that eps; every other claim
# rests on figures without numbers, so it carries none (no "no effect" outcome).
def quoted_gaps() -> dict[tuple[str, float], float]:
    """(baseline label, eps) -> the smallest DPZV-minus-baseline gap the paper's text quotes (fraction)."""
    quoted = tables.published("dpzv_quoted")
    eps = quoted["column"].str.extract(r"eps=([0-9.]+)")[0].astype(float)
    dpzv = dict(zip(eps[quoted["row"] == "DPZV"], quoted.loc[quoted["row"] == "DPZV", "mean"]))
    return {
        (row, e): (dpzv[e] - value) / 100.0
        for row, e, value in zip(quoted["row"], eps, quoted["mean"])
        if row != "DPZV" and e in dpzv
    }


def smallest_effect(method: str, eps: float) -> float:
    return quoted_gaps().get((LABELS[method], float(eps)), math.nan)


def _cell_key(best: pd.DataFrame, dataset: str, method: str, eps: float, clip, health: Health) -> tuple:
    """What one side of a comparison is, for `report.claims.distinct`: its run set, or "chance" for a side at
    chance under its own DP noise (every such side is the majority-class predictor: comparisons against them
    restate one finding)."""
    if health.reason == "at chance under its DP noise":
        return (dataset, "chance")
    return (dataset, method, float(eps), float(clip) if method == "dpzv" else None)


def _add(rows: list, claim: str, verdict: Verdict, evidence: str, comparison=None, equal_eps: str = "") -> None:
    row = {"claim": claim, **verdict.as_row(), "evidence": evidence, "comparison": comparison}
    if verdict.outcome == "inconclusive":
        row["verdict"] = f"{verdict.label}; {needed_text(verdict.needed)}"
    rows.append({**row, "equal_eps": equal_eps})


def _accuracy_claims(best: pd.DataFrame, dataset: str, spec: dict, rows: list) -> None:
    """Figure 2-3's orderings on one data set: DPZV above each baseline at each eps, and each method's
    accuracy falling from eps = inf to the smallest eps."""
    clip, pld, resolution = spec["clip"], realised_pld(best), _resolution(best[best["dataset"] == dataset])
    grid = sorted(_select(best, dataset, clip=clip)["eps"].unique())
    cells = {(m, e): _per_seed(_seeds(best, dataset, m, e, clip)) for m in spec["methods"] for e in grid}
    side = {(m, e): _side(best, dataset, m, e, clip) for m in spec["methods"] for e in grid}

    def key(m, e):
        return _cell_key(best, dataset, m, e, clip, side[(m, e)])

    for e in grid if "dpzv" in spec["methods"] else []:
        for m in compared_with_dpzv(spec["methods"]):
            a, b = cells[("dpzv", e)], cells[(m, e)]
            sides = {"DPZV": side[("dpzv", e)], LABELS[m]: side[(m, e)]}
            verdict = paired(a, b, sides, smallest_effect=smallest_effect(m, e), resolution=resolution)
            basis = "same adversary (non-private)" if math.isinf(e) else "nominal: adversaries differ"
            evidence = f"DPZV {100 * _mean(a):.1f} vs {LABELS[m]} {100 * _mean(b):.1f}"
            claim = f"{dataset}, ε = {eps_with_pld(e, pld.get((dataset, e)))}: DPZV above {LABELS[m]}"
            _add(rows, claim, verdict, evidence, ("accuracy", key("dpzv", e), key(m, e)), basis)
    if len(grid) < 2:
        return
    top, low = grid[-1], grid[0]
    for m in spec["methods"]:
        # eps = inf must have trained; at the smallest eps chance under the noise is the fall itself
        sides = {f"ε = {eps_label(top)}": side[(m, top)], f"ε = {eps_label(low)}": side[(m, low)]}
        _add(
            rows,
            f"{dataset}: {LABELS[m]} accuracy falls as ε falls (ε = {eps_label(top)} above ε = {low:g})",
            paired(cells[(m, top)], cells[(m, low)], sides, resolution=resolution),
            ", ".join(f"ε={eps_label(e)}: {100 * _mean(cells[(m, e)]):.1f}" for e in grid),
            ("accuracy", key(m, top), key(m, low)),
            "same adversary",
        )


def _clipping_claim(best: pd.DataFrame, metrics: pd.DataFrame, dataset: str, rows: list) -> None:
    """Figure 4: DPZV's test loss (mean over training) at eps = inf with clipping below that without."""
    data = metrics[(metrics["dataset"] == dataset) & (metrics["method"] == "dpzv") & np.isinf(metrics["eps"])]
    data = data[calibration_of(data) == "paper"]
    loss = {
        unclipped: {int(s): float(v) for s, v in group.groupby("seed")["test_loss"].mean().items()}
        for unclipped, group in data.groupby(np.isinf(data["clip"]))
    }
    sides = {}
    for unclipped, name in ((False, "with C"), (True, "no clipping")):
        cell = _select(best, dataset, math.inf)
        cell = cell[(cell["method"] == "dpzv") & (np.isinf(cell["clip"]) == unclipped)]
        sides[name] = _cell_health(cell) if len(cell) else Health("chance", "no run")
    with_c, without = loss.get(False, {}), loss.get(True, {})
    _add(
        rows,
        f"{dataset}: clipping lowers DPZV's test loss at ε = ∞ (Fig. 4; mean over training)",
        paired(without, with_c, sides),
        f"with C: {_mean(with_c):.3f}, without: {_mean(without):.3f}",
        ("test loss", dataset, "dpzv", "inf", "no clip", "clip"),
        "same adversary (non-private)",
    )


def _threshold_claim(best: pd.DataFrame, dataset: str, spec: dict, rows: list) -> None:
    """Figure 5: DPZV at the figure's eps, smallest C above largest C."""
    fig5 = spec["figures"]["fig5"]
    eps = float(fig5["eps"])
    cells = {c: _per_seed(_seeds(best, dataset, "dpzv", eps, c)) for c in fig5["clips"]}
    low, high = min(cells), max(cells)
    sides = {c: _side(best, dataset, "dpzv", eps, c, noiseless_clip=spec["clip"]) for c in (low, high)}
    _add(
        rows,
        f"{dataset}: small C above large C (Fig. 5; DPZV, ε = {fig5['eps']}, C = {low:g} vs {high:g})",
        paired(cells[low], cells[high], {f"C={c:g}": h for c, h in sides.items()}, resolution=_resolution(best)),
        ", ".join(f"C={c:g}: {100 * _mean(a):.1f}" for c, a in cells.items()),
        ("accuracy", *(_cell_key(best, dataset, "dpzv", eps, c, sides[c]) for c in (low, high))),
        "same adversary",
    )


def _memory_claims(memory: pd.DataFrame, rows: list) -> None:
    for dataset in dict.fromkeys(memory["dataset"]):
        data = memory[memory["dataset"] == dataset].set_index("label")["ratio"]
        dpzv = data[[lb for lb in data.index if lb.startswith("DPZV")]].min()
        others = data[[lb for lb in data.index if not lb.startswith("DPZV")]]
        holds = dpzv <= others.min() and data.get("VAFL", np.nan) > 2
        _add(
            rows,
            f"{dataset}: DPZV has the lowest peak memory; VAFL above 2x the model",
            _analytic(HOLDS if holds else FAILS, "deterministic byte count of one run (no seeds)"),
            ", ".join(f"{lb} {r:.2f}x" for lb, r in data.items()),
            ("memory", dataset),
        )


def _claim_rows(best: pd.DataFrame, metrics: pd.DataFrame, memory: pd.DataFrame, spec: dict) -> list[dict]:
    """Every seed-based claim is one `fedrepro.eval.verdict.paired` verdict over the seeds both sides ran, each
    with the comparison it makes (`report.claims.distinct`), its smallest effect and the test set's resolution."""
    rows: list[dict] = []
    for dataset in spec["figures"].get("fig3", []):
        _accuracy_claims(best, dataset, spec, rows)
    for dataset in spec["figures"].get("fig4", {}).get("datasets", []):
        _clipping_claim(best, metrics, dataset, rows)
    for dataset in spec["figures"].get("fig5", {}).get("datasets", []):
        _threshold_claim(best, dataset, spec, rows)
    _memory_claims(memory, rows)
    for claim, verdict, evidence in _privacy_verdicts(best):
        _add(rows, claim, verdict, evidence, ("privacy", claim))
    return rows


CLAIM_COLUMNS = [
    "claim",
    "smallest_effect",
    "verdict",
    "effect",
    "ci_low",
    "ci_high",
    "wins",
    "seeds",
    "seeds_needed",
    "equal_eps",
    "note",
    "evidence",
    "also",
]


def claims(job) -> None:
    """The paper's qualitative claims (Section 7) checked on our runs, one row per distinct comparison, and the
    privacy table."""
    spec = job.spec
    best = load_best(job.input["summaries"])
    metrics = load_metrics(job.input["metrics"])
    memory = load_memory(job.input["memory"])
    rows = distinct(_claim_rows(best, metrics, memory, spec))
    table = pd.DataFrame(rows, columns=CLAIM_COLUMNS)
    gaps = "; ".join(f"DPZV vs {lb} at ε = {e:g}: {g:g}" for (lb, e), g in quoted_gaps().items())
    caption = (
        f"The paper's qualitative claims (no numeric tables exist) against our runs, one row per distinct "
        f"comparison ({counts_text(r['verdict'] for r in rows)}; restatements of a row's comparison in `also`: "
        "a side at chance under its own DP noise is the majority-class predictor, so every comparison with one "
        "is the same). Accuracy = best-validation test accuracy; effect = mean paired difference over seeds "
        f"(fraction), with its {TEST_NAME}; 'holds' / 'does not hold' only when the interval excludes 0, differences "
        "equal within one test example go to the sign test; 'inconclusive' rows say how many seeds the observed "
        "effect and spread would need. smallest_effect: the smallest difference that matters, from the paper's own "
        f"reported differences ({gaps}: the CIFAR-10 bounds its text quotes); blank where it quotes none (figures "
        "only), so no 'no effect at this scale' outcome there. 'not tested' names the side that diverged or sat at "
        "chance without DP noise; a side at chance under its own DP noise while the same method trains at ε = ∞ is "
        "a result. Each ε shows the paper's accounting (Poisson at q = B/D, its tight PLD value); equal_eps says "
        f"whether a comparison's ε are of one adversary: {ADVERSARIES} What the ε protects: {PROTECTS}. "
        f"{KNOWN_BATCH} (privacy table: eps_known_*). {server_note(spec).capitalize()}.{more_seeds_note(best)}"
    )
    tables.write_table(table, job.output["md"].removesuffix(".md"), caption, spec["scale"], spec["decimals"])
    privacy = privacy_table(best)
    caption = (
        "Every private run's epsilon, each against the adversary it names, with the run's accuracy (%, mean over "
        "seeds). Same adversary and unit for every method (issue 39): eps_vs_server = "
        f"{ADVERSARY_COLUMNS['eps_vs_server']}; eps_vs_clients = {ADVERSARY_COLUMNS['eps_vs_clients']} (inf: a "
        "noise-free function of one record reaches that adversary: DPZV's h+ and h- reach the server in clear, "
        "its raw-label head enters every Delta; the baselines' answers reach their clients in clear). Paper's "
        "accounting (labelled so): sigma from the paper's GDP calibration (eq. 11, Theorem 6.1; baselines: clipped "
        "embeddings), noise multiplier sigma/sensitivity, the paper's mu, the CLT mu of the subsampled composition "
        "with its eps, the library's RDP eps and the tight PLD eps (eps_pld) of the same Poisson-subsampled "
        f"composition. Known batch: {KNOWN_BATCH}; uses_* = K (DPZV: pooled clients / one client; baselines: the "
        "server, whole row / one client's slice). eps_pld_sound = DPZV's label channel (inf for the raw-label "
        "head; under label_privacy: dp_head Delta and the head's DP-SGD jointly, multiplier s/sqrt(5)). "
        f"{soundness_cost(best)} Evaluation is the harness's measurement, off the wire: the trained clients' "
        "embeddings of the validation and test records reach the head outside every epsilon (a deployment that "
        "sent them to the server would send a noise-free function of the trained client models, which VAFL and "
        f"VFL-CZOFO train on their raw features). What each ε protects: {PROTECTS}. Sampling: {SAMPLING}. Label "
        f"leak: {LABEL_LEAK}. {SENT_NOTE}{subsample_note(spec)}"
    )
    tables.write_table(privacy, job.output["privacy_md"].removesuffix(".md"), caption, spec["scale"], spec["decimals"])


# The baselines' column for what their code sends (issue 27, the audit's baseline rows), one sentence each
SENT_NOTE = (
    "eps_sent_one_client = the bound for what the baselines' code sends, one client's slice against the server "
    "(eps_known_* assume a fixed client model), over the busiest client's K'_m = client_rounds rounds (a record "
    "used in its first round), mu = sqrt(batch_size K'_m)/noise_multiplier: "
    + "; ".join(f"{LABELS[m]}: {CLIENT_MODEL_LEAK[m]}" for m in CLIENT_MODEL_LEAK)
)


def privacy_table(best: pd.DataFrame) -> pd.DataFrame:
    """One row per private (data set, method, calibration, eps, C): each common adversary's epsilon, the paper's
    accounting beside the known-batch bound, the accuracy, and the adversary and data each epsilon protects
    (`fedrepro.privacy.dpzv.THREAT_MODELS`)."""
    fields = [f for f in PRIVACY_FIELDS if f in best]
    private = best[np.isfinite(best["eps"])]
    private = private.assign(accuracy=100 * private["best_test_acc"], calibration=calibration_of(private))
    keys = ["dataset", "method", "label", "calibration", "eps", "clip"]
    grouped = private.groupby(keys, dropna=False)
    table = grouped[fields].max().join(grouped["accuracy"].mean()).join(grouped["seed"].nunique().rename("seeds"))
    table = table.reset_index()  # max: the busiest seed's K, the bound that holds for every seed
    threat = [
        THREAT_MODELS["dpzv_secret_subsample" if c == "sound" else m]
        for m, c in zip(table["method"], calibration_of(table))
    ]
    table["adversary"] = [t.adversary for t in threat]
    table["protects"] = [t.protects.split(";")[0] for t in threat]
    return table.drop(columns="method")
