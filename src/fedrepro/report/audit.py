"""results/privacy/audit.{csv,md}: empirical lower bounds on epsilon, each against the epsilon of its adversary.

One row per audited mechanism (`fedrepro.audit` runs them): runs per world (and how many
the bound uses), the label the run carries and the adversary that label assumes, the epsilon against
the audit's own adversary, the lower bound with its confidence, the audit's power and the verdict.

Like with like: the lower bound is only ever compared with the epsilon of the adversary the attacker
models (`eps_adversary`). A label computed for another adversary (a Poisson-amplified epsilon, when the
attacker knows the batch) is printed, never refuted or confirmed by this attacker. Where no finite
epsilon holds against the attacker (a leak), the bound is compared with what the leak-free variant
reaches against the same attacker (`eps_reference`): only a bound above it shows the leak. Where a finite but
larger bound holds for the leak (DPZV's VAFL and VFL-CZOFO: the client's model trained on its raw features), that
bound is `eps_adversary` and the verdict tests both.

Power: the largest noise under-scaling sigma * k that an audit of this size refutes with the configured
probability, for a Gaussian canary of the GDP mu this canary attained (`privacy.audit.largest_detected_scaling`);
k = 0 means it detects no under-scaling in the tried range. Beside it, the same for a canary at the full
sensitivity (the GDP mu of the leak-free epsilon where a row has one, else of the adversary's): the best any
canary can do at this number of runs, so that
a row whose full canary detects sigma/2 and whose own does not is limited by its canary, not by its size.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from fedrepro.privacy import audit as stats

COLUMNS = [
    "mechanism",
    "variant",
    "adversary",
    "runs_per_world",
    "runs_in_bound",
    "delta",
    "eps_claimed",
    "claimed_for",
    "eps_adversary",
    "eps_reference",
    "eps_lower_bound",
    "confidence",
    "eps_point",
    "mu_attained",
    "detects_scaling",
    "detects_scaling_full_canary",
    "unit",
    "sigma",
    "verdict",
    "note",
    "seconds",
]


def verdict(lower: float, eps_adversary: float, eps_reference: float, scaling: float) -> str:
    """What the lower bound says about the epsilon of the attacker's adversary (never about another's)."""
    if math.isfinite(eps_adversary):
        if lower > eps_adversary:
            return f"refuted: lower bound {lower:.2f} > {eps_adversary:.2f} against this adversary"
        power = f"detects sigma x {scaling:g} with the set power" if scaling > 0 else "no power at this n"
        text = f"not refuted at this n: {lower:.2f} <= {eps_adversary:.2f}"
        if not math.isfinite(eps_reference):
            return f"{text} ({power})"
        # a leak-free bound against the same adversary, below the sound one (the power is for it: the canary's)
        shown = "leak shown" if lower > eps_reference else "no evidence of the leak"
        sign = ">" if lower > eps_reference else "<="
        return f"{text}; {shown}: {lower:.2f} {sign} {eps_reference:.2f}, the leak-free bound ({power})"
    if math.isfinite(eps_reference):
        if lower > eps_reference:
            return (
                f"leak shown: lower bound {lower:.2f} > {eps_reference:.2f}, the leak-free bound against this adversary"
            )
        return f"no evidence of the leak at this n: {lower:.2f} <= {eps_reference:.2f}, the leak-free bound"
    return f"no finite epsilon holds against this adversary; lower bound {lower:.2f}"


def audit_row(result, confidence: float, power: dict) -> dict:
    from fedrepro.privacy.dpzv import mu_from_eps_delta

    bound = stats.epsilon_lower_bound(result.out, result.inn, result.delta, confidence)
    # the power is for the bound the canary is built to test: the leak-free one where the row has it
    target = result.eps_reference if math.isfinite(result.eps_reference) else result.eps_adversary

    def detects(mu):
        return stats.largest_detected_scaling(
            mu, target, result.delta, len(result.out), confidence, float(power["probability"]), int(power["trials"])
        )

    if math.isinf(result.mu_attained):  # a release in clear: no noise to under-scale, every scaling is caught
        scaling = full = max(stats.SCALINGS)
    else:
        scaling = detects(result.mu_attained)
        # the adversary's epsilon is that of k Gaussians (exact GDP): its mu is the full canary's
        full = detects(mu_from_eps_delta(target, result.delta)) if math.isfinite(target) else 0.0
    return {
        "mechanism": result.mechanism,
        "variant": result.variant,
        "adversary": result.adversary,
        "runs_per_world": len(result.out),
        "runs_in_bound": bound.n_out,
        "delta": result.delta,
        "eps_claimed": result.eps_claimed,
        "claimed_for": result.claimed_for,
        "eps_adversary": result.eps_adversary,
        "eps_reference": result.eps_reference,
        "eps_lower_bound": bound.eps_lower,
        "confidence": confidence,
        "eps_point": bound.eps_point,
        "mu_attained": result.mu_attained,
        "detects_scaling": scaling,
        "detects_scaling_full_canary": full,
        "unit": result.unit,
        "sigma": result.sigma,
        "verdict": verdict(bound.eps_lower, result.eps_adversary, result.eps_reference, scaling),
        "note": result.note,
        "seconds": result.seconds,
    }


def power_limit(own: float, full: float, target: float = 0.5, in_clear: bool = False) -> str:
    """Why a row does or does not detect sigma x `target`: its size or its canary."""
    if in_clear:
        return "a release in clear (mu infinite): the lower bound is the most these runs can show"
    if own >= target:
        return f"detects sigma x {target:g}"
    if full >= target:
        return (
            f"canary-limited: a canary at the full sensitivity would detect sigma x {full:g} at this n, this one "
            f"sigma x {own:g}"
        )
    reach = f"only sigma x {full:g}" if full > 0 else "no under-scaling down to sigma x 0.05"
    return (
        f"size-limited: even a canary at the full sensitivity detects {reach} at this n, so no canary detects "
        f"sigma x {target:g} without more runs"
    )


def _fmt(value) -> str:
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.3g}"
    return str(value)


SHOWN = [
    "mechanism",
    "variant",
    "runs_per_world",
    "eps_claimed",
    "eps_adversary",
    "eps_reference",
    "eps_lower_bound",
    "mu_attained",
    "detects_scaling",
    "detects_scaling_full_canary",
    "verdict",
]


def write_markdown(table: pd.DataFrame, path: Path, level: str, power: dict) -> None:
    confidence = table["confidence"].iloc[0] if len(table) else math.nan
    lines = [
        f"# Empirical privacy audit ({level})",
        "",
        "Canary audit: runs of each mechanism without and with one canary, a likelihood-ratio score per run, "
        "the threshold chosen on half of the runs and a Clopper-Pearson bound on the other half (confidence "
        f"{confidence:g}). `eps_lower_bound` holds with that confidence. Every attacker knows the schedule, so "
        "`eps_adversary` is the epsilon against that attacker (no subsampling amplification; inf: no finite "
        "bound holds) and the verdict compares the bound with it only. `eps_claimed` is the label the run "
        "carries, for the adversary named below; where that adversary is not the attacker's, it is printed, "
        "not tested. `eps_reference`: for a leaking mechanism, what the leak-free variant reaches against the "
        "same attacker. `mu_attained`: the canary's GDP mu over every release the attacker scores, measured by the "
        "noiseless replay (inf: a release in clear, which no noise touches). `detects_scaling` "
        f"k: the smallest noise under-scaling (sigma x k, largest k) this audit refutes with probability "
        f"{power['probability']:g} (0: none down to sigma x 0.05); `detects_scaling_full_canary`: the same for a "
        "canary at the full sensitivity (the mu of `eps_reference` where a row has one, else of `eps_adversary`: the "
        "bound its canary is built to test), the most any canary detects at this number "
        "of runs: where it reaches 0.5 and `detects_scaling` does not, the canary is the limit, not the size.",
        "",
        "| " + " | ".join(SHOWN) + " |",
        "|" + "---|" * len(SHOWN),
    ]
    for _, row in table.iterrows():
        lines.append("| " + " | ".join(_fmt(row[c]) for c in SHOWN) + " |")
    lines += ["", "Adversaries and notes:", ""]
    for _, row in table.iterrows():
        lines.append(
            f"- {row['mechanism']}, {row['variant']}: privacy unit = {row['unit']}; attacker = {row['adversary']}; "
            "eps_claimed "
            f"{_fmt(row['eps_claimed'])} is for {row['claimed_for']}. {row['note']}. Power: "
            f"{power_limit(row['detects_scaling'], row['detects_scaling_full_canary'], in_clear=math.isinf(row['mu_attained']))}"
            f". ({row['seconds']:.0f} s)"
        )
    if level == "quick":
        lines += ["", "Quick run: few runs per world, so the bounds are weak; `make audit` runs the full audit."]
    path.write_text("\n".join(lines) + "\n")


def write(results: list, spec: dict, csv: str, md: str) -> pd.DataFrame:
    """The audit table of `results` (`audit.common.Audited`) as csv and markdown."""
    table = pd.DataFrame([audit_row(r, spec["confidence"], spec["power"]) for r in results], columns=COLUMNS)
    Path(csv).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(csv, index=False)
    write_markdown(table, Path(md), spec["level"], spec["power"])
    return table


def write_audit(job) -> None:
    """Pipeline entry (rules `audit` and `audit_full`): run the audit (fedrepro.audit.job.audits) and
    write its table as csv and md."""
    import logging

    import torch

    from fedrepro.audit.job import audits

    torch.set_num_threads(1)
    # the RDP accountant warns for every order it drops while DPZV builds its privacy record
    logging.getLogger("absl").setLevel(logging.ERROR)
    write(audits(job.spec), job.spec, job.output["csv"], job.output["md"])
