"""FedSC claims and ablation tables: paired verdicts over seeds on the probe accuracies.

* `claims_table`: each ordering of the paper's Tables 2-5 (planned by `fedrepro.experiments.fedsc.claims`)
  judged by `fedrepro.eval.verdict.paired` on the per-seed linear-probe accuracies, with the data's
  resolution (one test image), the claim's smallest effect (the paper's smallest reported difference of its
  kind) and the seeds an inconclusive row would need. Rows whose per-seed accuracies are the same on both
  sides (the same run sets, or runs that came out identical) are one comparison (`report.claims.distinct`).
  On the stand-ins (more than one data set) each claim also gets one row over all of them: it holds for the
  project only where it holds on every data set, and the row says on which it holds otherwise.
* `ablation_table`: each variant of a stand-in FedSC run against the run it changes and against FedAvg+SC.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fedrepro.eval import verdict
from fedrepro.eval.health import Health, cell_status
from fedrepro.experiments.fedsc import PRIVATE_VS_NO_SHARING, PROPOSED, PROPOSED_VS_NO_SHARING
from fedrepro.report import tables
from fedrepro.report.claims import counts_text, distinct
from fedrepro.report.fedsc import probe_frame

VERDICT_TEXT = "verdict (effect [95 % interval], wins/seeds)"


def _published_gaps(table: str, a_rows, b_row: str) -> list[tuple[float, str]]:
    """(a - b, where) for every column of a published FedSC table and every row `a_rows` accepts."""
    frame = tables.published(f"fedsc_{table}")
    means = frame.set_index(["row", "column"])["mean"]
    out = []
    for (row, col), value in means.items():
        if a_rows(row) and (b_row, col) in means:
            gap = float(value) - float(means[(b_row, col)])
            out.append((gap, f"Table {table[-1]}, {col}, {row}: {value:.2f} - {means[(b_row, col)]:.2f}"))
    return out


def smallest_effect(kind: str) -> tuple[float, str]:
    """The smallest difference that matters for a claim of `kind`, in points: the smallest gap of that kind
    the paper reports, and where it reports it (nan where the paper reports none)."""
    if kind == PROPOSED_VS_NO_SHARING:
        gaps = _published_gaps("table2", lambda r: r == "FedSC (Proposed)", "FedAvg + SC")
    elif kind == PRIVATE_VS_NO_SHARING:
        private = lambda r: r.startswith("ε=") and r != "ε=∞"  # noqa: E731
        gaps = [g for t in ("table3", "table4", "table5") for g in _published_gaps(t, private, "FedAvg+SC")]
    else:
        return math.nan, "none: the paper reports no untrained encoder"
    gap, where = min(gaps)
    return round(gap, 2), f"the paper's smallest such gap ({where})"


def _side(cells: list[dict], counted: frozenset[str] = frozenset()) -> tuple[dict[int, float], Health]:
    """Per-seed accuracies and health of one side. A collapse of a FedSC run (any epsilon: the runs that
    share correlation matrices) on a data set in `counted` is its shared term's doing (the stand-in's
    diagnosis), so it is the method's result: healthy, with the collapse in its reason."""
    frame = probe_frame(cells)
    seeds = [Health(s, r) for s, r in zip(frame["status"], frame["status_reason"].fillna(""))]
    health = cell_status(seeds)
    if counted and health.status == "collapsed" and cells[0]["dataset"] in counted and _shares(cells[0]):
        health = Health("ok", f"{health.reason}, counted as FedSC's result (its shared term's collapse)")
    return dict(zip(frame["seed"], frame["value"])), health


def _shares(cell: dict) -> bool:
    """A FedSC run (`.../runs/<dataset>/fedsc/<setting>/<seeds>/probe.json`)."""
    return cell["path"].split("/")[-4] == PROPOSED


def _per_seed(values: dict[int, float]) -> str:
    return " / ".join(f"{v:.1f}" for _, v in sorted(values.items()))


def resolutions(meta_paths: list[str]) -> dict[str, float]:
    """Data set -> one test image in points of accuracy (100 / n_test), from the prepared meta.json files."""
    out = {}
    for path in meta_paths:
        meta = json.loads(Path(path).read_text())
        out[meta["name"]] = 100.0 / int(meta["n_test"])
    return out


def judge(claim: dict, resolution: float, counted: frozenset[str] = frozenset()) -> tuple[verdict.Verdict, dict, dict]:
    """The paired verdict of one claim, and both sides' per-seed accuracies (%)."""
    (a, health_a), (b, health_b) = _side(claim["a"], counted), _side(claim["b"], counted)
    effect, _ = smallest_effect(claim["kind"])
    sides = {claim["a_name"]: health_a, claim["b_name"]: health_b}
    return verdict.paired(a, b, sides, smallest_effect=effect, resolution=resolution), a, b


def claims_frame(
    claims: list[dict], resolution: dict[str, float], counted: frozenset[str] = frozenset()
) -> tuple[pd.DataFrame, list[dict]]:
    """One row per distinct comparison (claim, column, both sides per seed, the verdict, the claims that
    restate it in 'also'), and every claim's row; FedSC's collapses on the data sets `counted` are results."""
    rows = []
    for claim in claims:
        found, a, b = judge(claim, resolution[claim["dataset"]], counted)
        effect, source = smallest_effect(claim["kind"])
        rows.append(
            {
                "claim": claim["claim"],
                "column": claim["column"],
                "comparison": (claim["column"], tuple(sorted(a.items())), tuple(sorted(b.items()))),
                "smallest effect (points)": effect,
                "smallest effect from": source,
                "A per seed (%)": _per_seed(a),
                "B per seed (%)": _per_seed(b),
                "A mean (%)": round(float(np.mean(list(a.values()))), 2),
                "B mean (%)": round(float(np.mean(list(b.values()))), 2),
                **found.as_row(),
                VERDICT_TEXT: found.text(decimals=2),
                "more seeds": ", ".join(str(s) for s in claim.get("more_seeds", [])),
            }
        )
    frame = pd.DataFrame(distinct(rows)).drop(columns=["comparison"])
    return frame, rows


def across(rows: list[dict], datasets: list[str]) -> pd.DataFrame:
    """Per claim and participation, one row over every data set: 'holds' only where it holds on all of
    them; otherwise the outcome on each (which hold, which do not)."""
    if len(datasets) < 2 or not rows:
        return pd.DataFrame()
    frame = pd.DataFrame(rows)
    frame = frame.assign(dataset=frame["column"].str.split(" ").str[0], clients=frame["column"].str.split(" ").str[-1])
    out = []
    for (claim, clients), group in frame.groupby(["claim", "clients"], sort=False):
        outcomes = {d: verdict.Verdict(v).outcome for d, v in zip(group["dataset"], group["verdict"])}
        if set(outcomes) != set(datasets):
            continue
        label = _joint_label(outcomes)
        out.append({"claim": claim, "column": f"{' + '.join(datasets)} {clients}", "verdict": label})
    return pd.DataFrame(out)


def _joint_label(outcomes: dict[str, str]) -> str:
    """'holds on both', 'does not hold on both', 'no effect on both', or where it holds and the others."""
    values = set(outcomes.values())
    if len(values) == 1:
        return f"{values.pop()} on every stand-in"
    held = [d for d, o in outcomes.items() if o == verdict.HOLDS]
    rest = "; ".join(f"{d}: {o}" for d, o in outcomes.items() if o != verdict.HOLDS)
    return f"holds on {', '.join(held)} only ({rest})" if held else f"holds on none ({rest})"


def claims_table(job) -> None:
    counted = frozenset(job.spec.get("collapse_counted", []))
    frame, rows = claims_frame(job.spec["claims"], resolutions(job.input["meta"]), counted)
    datasets = list(dict.fromkeys(c["dataset"] for c in job.spec["claims"]))
    joint = across(rows, datasets)
    caption = (
        f"{job.spec.get('title', 'FedSC claims at this scale')}: each ordering of the paper's tables, tested on "
        f"our runs by the {verdict.TEST_NAME} of A - B (percentage points of linear-probe accuracy): 'holds' / "
        "'does not hold' when the whole interval lies above / below 0, 'no effect at this scale' when it lies "
        "within the claim's smallest effect (the paper's smallest reported gap of that kind, beside each claim), "
        "'inconclusive' otherwise (with the seeds the observed effect and spread would need); differences equal "
        "within one test image go to the sign test (6 seeds at 95 %); a comparison with a collapsed, diverged or "
        f"chance-level side is 'not tested'{_counted_text(counted)}. One row per distinct comparison: claims whose per-seed accuracies "
        f"are the same on both sides are one row (column 'also'). {counts_text(frame['verdict'])}"
    )
    more = _more_seeds_text(job.spec["claims"])
    if more:
        caption += (
            ". Rows given more seeds on both sides, paired (at the tables' seeds, the observed effect and spread "
            f"would have decided them with these seeds): {more}"
        )
    if not joint.empty:
        caption += (
            f". Over the {len(datasets)} stand-ins (rows '{' + '.join(datasets)}'): a claim holds for the project "
            f"only where it holds on every one; {counts_text(joint['verdict'].map(_joint_outcome))}"
        )
    if frame["claim"].str.contains("ε=[0-9]").any():
        from fedrepro.privacy import fedsc as fedsc_privacy

        caption += f". {fedsc_privacy.THREAT_NOTE}"
    healths = side_healths(job.spec["claims"], counted)
    untested = [f"{side}: {h.reason}" for side, h in healths.items() if not h.ok]
    if untested:
        caption += ". Sides not tested: " + "; ".join(untested)
    kept = [f"{side}: {h.reason}" for side, h in healths.items() if h.ok and h.reason]
    if kept:
        caption += ". Sides that collapsed and are judged: " + "; ".join(kept)
    if job.spec.get("note"):
        caption += ". " + job.spec["note"]
    out = pd.concat([frame, joint], ignore_index=True) if not joint.empty else frame
    tables.write_table(out, job.output["md"].removesuffix(".md"), caption, job.spec["scale"], job.spec["decimals"])


def _counted_text(counted: frozenset[str]) -> str:
    if not counted:
        return ""
    return (
        f", except a collapse of FedSC (any ε) on {', '.join(sorted(counted))}: there its shared term collapses "
        "the encoder (the note below), which is FedSC's result, judged on its accuracies"
    )


def _more_seeds_text(claims: list[dict]) -> str:
    """'seeds [..]: claim @ column; ...' per list of extra seeds, for the claims that got some."""
    by_seeds: dict[tuple, list[str]] = {}
    for c in claims:
        if c.get("more_seeds"):
            by_seeds.setdefault(tuple(c["more_seeds"]), []).append(f"{c['claim']} @ {c['column']}")
    return "; ".join(
        f"seeds {_seed_range(seeds)}: {'; '.join(sorted(set(names)))}" for seeds, names in by_seeds.items()
    )


def _seed_range(seeds: tuple) -> str:
    """'3-69' for a run of consecutive seeds, else the list."""
    if list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(str(s) for s in seeds)


def side_healths(claims: list[dict], counted: frozenset[str] = frozenset()) -> dict[str, Health]:
    """'<side> at <column>' -> its health over the most seeds any claim gives it: a degenerate encoder
    (collapsed, diverged, at chance) makes its comparisons 'not tested', unless `_side` counts it."""
    sides: dict[tuple[str, str], list[dict]] = {}
    for claim in claims:
        for side in ("a", "b"):
            key = (claim[f"{side}_name"], claim["column"])
            if len(claim[side]) > len(sides.get(key, [])):
                sides[key] = claim[side]
    named = {name: f"FedSC {name}" if name.startswith("ε=") else name for name, _ in sides}  # Tables 3-5's rows
    return {f"{named[name]} at {column}": _side(cells, counted)[1] for (name, column), cells in sides.items()}


def _joint_outcome(label: str) -> str:
    """The outcome a joint label counts as: holds / does not hold / no effect only when every stand-in
    agrees, otherwise inconclusive."""
    for outcome in (verdict.HOLDS, verdict.FAILS, verdict.NO_EFFECT, "not tested"):
        if label == f"{outcome} on every stand-in":
            return outcome
    return "inconclusive"


def ablation_frame(
    cells: list[dict], resolution: dict[str, float], counted: frozenset[str] = frozenset()
) -> pd.DataFrame:
    """Per stand-in and row (FedAvg+SC, each FedSC run an ablation changes, each variant): the per-seed
    probe accuracies, their mean, and the paired verdicts against the run it changes and against FedAvg+SC
    (FedSC's collapses on the data sets `counted` judged as its results)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for cell in cells:
        groups.setdefault((cell["column"], cell["row"]), []).append(cell)
    values = {key: _side(group, counted) for key, group in groups.items()}
    out = []
    for (col, row), group in groups.items():
        first, (mine, health) = group[0], values[(col, row)]
        quantum = resolution[first["dataset"]]
        entry = {
            "column": col,
            "run": row,
            "change": json.dumps(first.get("change", {}), sort_keys=True) if "change" in first else "",
            "per seed (%)": _per_seed(mine),
            "mean (%)": round(float(np.mean(list(mine.values()))), 2),
            "health": f"{health.status}: {health.reason}" if health.reason else health.status,
        }
        for label, ref in (("vs the run it changes", first.get("against")), ("vs FedAvg+SC", "FedAvg+SC")):
            if ref is None or ref == row or (col, ref) not in values:
                entry[label] = ""
                continue
            theirs, their_health = values[(col, ref)]
            judged = verdict.paired(mine, theirs, {row: health, ref: their_health}, resolution=quantum)
            entry[label] = f"{ref}: {judged.text(decimals=2)}"
        out.append(entry)
    return pd.DataFrame(out)


def ablation_table(job) -> None:
    counted = frozenset(job.spec.get("collapse_counted", []))
    frame = ablation_frame(job.spec["cells"], resolutions(job.input["meta"]), counted)
    caption = (
        "FedSC ablations on the generated stand-ins (full participation, the stand-ins' rounds and local epochs): "
        "each variant changes one setting (column 'change') of the FedSC run named in its label; linear-probe "
        f"top-1 % per seed and the {verdict.TEST_NAME} of the difference in points, against the run it changes "
        "and against FedAvg+SC (differences equal within one test image go to the sign test; an inconclusive "
        "verdict names the seeds the observed effect and spread would need); column 'health': a row whose "
        "encoder collapsed or diverged (fedrepro.eval.health) is not tested against another, its accuracies "
        f"printed as measured{_counted_text(counted)}"
    )
    if job.spec.get("note"):
        caption += ". " + job.spec["note"]
    tables.write_table(frame, job.output["md"].removesuffix(".md"), caption, job.spec["scale"], job.spec["decimals"])
