"""FedAL's claims: each ordering the paper states, judged once per distinct comparison.

The paper's Tables IV-IX say FedAL beats each baseline (FedMD-LF, Table VIII: the adversarial term
helps) and Fig. 10 that FedDF-AL beats FedDF. Our tables show these comparisons per panel, and one
comparison (the same two run sets) appears in several tables: FedAL against FedMD at alpha = 1 in
Tables IV, V, VI, VII and IX. The claims table judges each once (`fedrepro.eval.verdict`, paired by
seed) and counts it once (`report.claims.distinct`); the tables' captions give the outcome and refer
to it. Each claim carries
- its smallest effect: the smallest gap the paper's Tables IV-IX report between the two methods
  (`paper_gap`; none for FedDF-AL, which only Fig. 10's curves show), and
- the data's resolution: one test example of one client, 1 / (N n_test) of the mean client accuracy.
"""

from __future__ import annotations

import functools
import math

import pandas as pd

from fedrepro.eval.verdict import TEST_NAME, Verdict, differences, needed_text, paired
from fedrepro.experiments.fedal import parse_setting
from fedrepro.report import claims, tables
from fedrepro.report.fedal_runs import AXIS_LABEL, NAMES, health_of, with_setting
from fedrepro.report.runs import load_summaries

#: (ours, baseline) of each claim, in the claims table's order
CLAIMS = (
    ("fedal", "fedmd"),
    ("fedal", "fedmd_lf"),
    ("fedal", "fedproto"),
    ("fedal", "cfd"),
    ("fedal", "fccl"),
    ("fedal", "fccl_plus"),
    ("fedal", "fd"),
    ("feddf_al", "feddf"),
)
WHERE = {"table4": "Table IV", "table5": "Table V", "table6": "Table VI", "table7": "Table VII"}
WHERE |= {"table8": "Table VIII", "table9": "Table IX", "fig10": "Fig. 10"}
PUBLISHED = ("table4", "table5", "table6", "table7", "table8", "table9")


@functools.cache
def paper_gap(ours: str, other: str) -> tuple[float, str]:
    """The smallest positive accuracy gap (ours - other) the paper's Tables IV-IX report, and where;
    (nan, why) when no table has both methods."""
    gaps = []
    for name in PUBLISHED:
        frame = tables.published(f"fedal_{name}")
        if name == "table8":  # its methods are the columns
            frame = frame.assign(row=frame["column"], column="alpha=2")
        means = {(r, c): m for r, c, m in zip(frame["row"], frame["column"], frame["mean"])}
        for (row, column), mean in means.items():
            theirs = means.get((NAMES[other], column))
            if row == NAMES[ours] and theirs is not None and round(mean - theirs, 4) > 0:
                gaps.append((round(mean - theirs, 4), f"{WHERE[name]}, {column}"))
    if not gaps:
        return math.nan, "the paper reports no number for this pair"
    return min(gaps, key=lambda g: g[0])


def resolution(part: pd.DataFrame) -> float:
    """One test example of one client in mean-client-accuracy units (0 when the runs do not say n_test)."""
    if "n_test" not in part or part["n_test"].isna().all():
        return 0.0
    return 1.0 / float((part["clients"] * part["n_test"]).max())


def _by_seed(part: pd.DataFrame) -> dict[int, float]:
    return {int(s): float(a) for s, a in zip(part["seed"], part["acc"])}


def comparisons(finals: pd.DataFrame, where: str) -> list[dict]:
    """One row per (claim, baseline row, panel) of one table's runs (`finals` with `row`, `panel`,
    `panel_setting`), and per (claim, baseline row) pooled over its panels when there are several."""
    out = []
    for ours, other in CLAIMS:
        gap, source = paper_gap(ours, other)
        mine = finals[finals["method"] == ours]
        for row, theirs in finals[finals["method"] == other].groupby("row", sort=False):
            panels = _panel_rows(f"{NAMES[ours]} > {row}", mine, theirs, gap)
            if len(panels) > 1:
                panels.append(_pooled(panels, gap))
            out += [
                {**p, "where": f"{where} ({p['panel']})", "smallest effect (paper)": f"{gap:g}: {source}"}
                for p in panels
            ]
    return out


def _panel_rows(claim: str, mine: pd.DataFrame, theirs: pd.DataFrame, gap: float) -> list[dict]:
    """`claim` per panel, paired by seed (same partition, architectures and batches)."""
    rows = []
    for panel, part in theirs.groupby("panel", sort=False):
        ours = mine[mine["panel"] == panel]
        if ours.empty:
            continue
        a, b, both = _by_seed(ours), _by_seed(part), pd.concat([ours, part])
        sides = {ours["row"].iloc[0]: health_of(ours), part["row"].iloc[0]: health_of(part)}
        verdict = paired(a, b, sides, smallest_effect=gap, resolution=resolution(both))
        diffs = [a[s] - b[s] for s in sorted(set(a) & set(b))]
        rows.append(_entry(claim, panel, both, verdict, diffs, sides))
    return rows


def _pooled(panels: list[dict], gap: float) -> dict:
    """Every (panel, seed) pair of a claim's panels as one set of differences."""
    diffs, sides = [], {}
    for p in panels:
        diffs += p["diffs"]
        sides.update({f"{name} ({p['panel']})": h for name, h in p["sides"].items()})
    both = pd.concat([p["runs"] for p in panels])
    scale = float(both["acc"].abs().max())
    verdict = differences(diffs, sides, smallest_effect=gap, resolution=resolution(both), scale=scale)
    panel = f"pooled over {', '.join(p['panel'] for p in panels)}"
    return _entry(panels[0]["claim"], panel, both, verdict, diffs, sides)


def _entry(claim: str, panel: str, runs: pd.DataFrame, verdict: Verdict, diffs: list, sides: dict) -> dict:
    """A comparison: what it claims, where, the runs and their per-seed differences, and its key (the
    claim and the settings compared: one table's panel and another's are one comparison if they match)."""
    settings = tuple(sorted(set(runs["panel_setting"])))
    return {
        "claim": claim,
        "panel": panel,
        "comparison": (claim, settings),
        "verdict": verdict,
        "runs": runs,
        "diffs": diffs,
        "sides": sides,
    }


def outcome_text(verdict: Verdict) -> str:
    """'holds', 'inconclusive (needs about 7 seeds)', 'not tested (FCCL+: at chance)', ... for a caption
    that refers to the claims table."""
    if verdict.outcome == "inconclusive":
        return f"inconclusive ({verdict.text().rsplit('; ', 1)[-1]})"
    if not verdict.tested:
        return verdict.label.split(" (mean")[0].removesuffix(")") + ")"
    return verdict.label


def budget_order_notes(rows: list[dict]) -> list[str]:
    """Where a baseline ran at several local budgets (its own and `also_local_steps`) and FedAL's claim
    against it comes out differently: the order depends on that free choice; each budget's verdict."""
    by_method: dict[str, dict[str, Verdict]] = {}
    for row in rows:  # the pooled row when there is one (it comes last), else the single panel
        ours, other = row["claim"].split(" > ")
        by_method.setdefault(f"{ours} > {other.split(' (')[0]}", {})[other] = row["verdict"]
    out = []
    for claim, verdicts in by_method.items():
        if len({v.outcome for v in verdicts.values() if v.tested}) > 1:
            ours, other = claim.split(" > ")
            each = "; ".join(f"{row}: {v.text() if v.tested else outcome_text(v)}" for row, v in verdicts.items())
            out.append(
                f"The order of {ours} and {other} depends on {other}'s local steps per round, a free choice "
                f"(means in the table): {each}."
            )
    return out


def caption_claims(finals: pd.DataFrame, where: str) -> list[str]:
    """One caption line per claim of a table: each panel's outcome (details in the claims table), and
    whether the two methods gave the same accuracy on every seed (e.g. an inert adversarial term)."""
    by_claim: dict[str, list[dict]] = {}
    for row in comparisons(finals, where):
        by_claim.setdefault(row["claim"], []).append(row)
    out = []
    for claim, rows in by_claim.items():
        parts = "; ".join(f"{r['panel']}: {outcome_text(r['verdict'])}" for r in rows)
        text = f"Claim {claim}: {parts} (effects, intervals, the paper's smallest gap: claims table)."
        if all(d == 0 for r in rows for d in r["diffs"]):
            text += f" {claim.replace(' > ', ' and ')} give the same accuracy on every seed."
        out.append(text)
    return out + budget_order_notes([rows[-1] for rows in by_claim.values()])


# ---------------------------------------------------------------------------- the claims table
def table(job) -> None:
    """Every claim of the outputs in the spec, one row per distinct comparison, the counts in the caption."""
    spec = job.spec
    finals = with_setting(load_summaries(job.input["summaries"]))
    rows = []
    for name, output in spec["outputs"].items():
        order = {tuple(r): i for i, r in enumerate(output["runs"])}  # the table's panel order
        part = finals.assign(order=[order.get((m, s)) for m, s in zip(finals["method"], finals["setting"])])
        part = part.dropna(subset=["order"]).sort_values("order", kind="stable")
        if part.empty:
            continue
        axis = output["axis"]
        part["panel"] = "all runs" if axis == "method" else [AXIS_LABEL[axis](s) for _, s in part.iterrows()]
        rows += comparisons(part, WHERE[name])
    kept = claims.distinct(rows, claim="where")
    frame = pd.DataFrame([_table_row(r) for r in kept])
    caption = _caption([r["verdict"] for r in kept], finals)
    tables.write_table(frame, job.output["md"].removesuffix(".md"), caption, spec["scale"], spec["decimals"])


def _table_row(row: dict) -> dict:
    verdict: Verdict = row["verdict"]
    return {
        "claim": row["claim"],
        "runs": describe_runs(row["runs"], row["panel"]),
        "verdict (effect [95 % interval], wins/seeds)": verdict.text(),
        "smallest effect (paper)": row["smallest effect (paper)"],
        "seeds needed": ""
        if verdict.outcome != "inconclusive"
        else needed_text(verdict.needed).removeprefix("needs about "),
        "printed in": "; ".join(filter(None, [row["where"], row["also"]])),
        **{k: v for k, v in verdict.as_row().items() if k not in ("seeds_needed", "smallest_effect")},
    }


def describe_runs(runs: pd.DataFrame, panel: str) -> str:
    """The setting of a comparison's runs: data set, clients, public samples, iterations, and the panel
    (or the panels pooled)."""
    s = parse_setting(runs["setting"].iloc[0])
    where = f"{runs['dataset'].iloc[0]}, N={s['clients']}, |P|={s['public']}, {s['iterations']} iterations"
    if s["alpha"] is not None and not panel.startswith(("alpha", "pooled over alpha")):
        where += f", alpha={s['alpha']:g}"
    return f"{panel} ({where})" if panel != "all runs" else where


def _caption(verdicts: list[Verdict], finals: pd.DataFrame) -> str:
    seeds = finals.groupby(["method", "setting"])["seed"].nunique()
    more = sorted({f"{NAMES[m]}" for (m, _), n in seeds.items() if n > seeds.min()})
    lines = [
        "FedAL claims: each ordering the paper's Tables IV-IX and Fig. 10 state, one row per distinct comparison "
        f"(the same two run sets, however many tables print it). {claims.counts_text(verdicts)}.",
        f"Verdicts: {TEST_NAME}, margin 0, paired by seed; 'no effect at this scale' when the interval lies within "
        "the smallest gap the paper reports for the pair; differences within one test example of one client "
        "(1 / (N n_test)) count as identical (sign test).",
    ]
    if more:
        lines.append(
            f"Seeds: {', '.join(more)} ran {int(seeds.max())} seeds in some settings (config fedal.more_seeds), "
            f"the other runs {int(seeds.min())}; a comparison pairs the seeds both sides ran."
        )
    return "\n".join(lines)
