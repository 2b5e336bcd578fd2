"""FedAL's planner, one job end to end (make_job, tmp_path) and the report builders."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedrepro.algorithms import method_table
from fedrepro.experiments import fedal as plan

ROOT = Path(__file__).resolve().parents[2]


def quick_config() -> dict:
    """The default run's keys a FedAL plan reads (config.yaml), on the CPU."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    return {**{key: config[key] for key in ("scale", "checkpoint_every", "report", "fedal")}, "device": "cpu"}


def test_quick_plan_covers_every_method_and_alpha():
    config = quick_config()
    runs = plan.runs(config)
    assert {r.method for r in runs} == set(plan.METHODS)
    blackbox = plan.experiment_runs(config, "blackbox")
    assert {plan.parse_setting(r.setting)["alpha"] for r in blackbox} == {5.0, 2.0, 1.0}
    assert len({r.key for r in runs}) == len(runs)
    assert plan.check(config) == []


def test_run_spec_holds_only_what_the_job_reads():
    config = quick_config()
    by_method = {r.method: r.spec for r in plan.experiment_runs(config, "blackbox")}
    assert "discriminator" in by_method["fedal"] and "discriminator" in by_method["feddf_al"]
    assert "discriminator" not in by_method["fedmd"]
    assert "proto_weight" in by_method["fedproto"] and "proto_weight" not in by_method["fedal"]
    # changing one method's setting changes only that method's specs
    changed = copy.deepcopy(config)
    changed["fedal"]["methods"]["fd"]["fd_weight"] = 2.0
    before = {r.key: r.spec for r in plan.runs(config)}
    after = {r.key: r.spec for r in plan.runs(changed)}
    differ = {key[1] for key in before if before[key] != after[key]}
    assert differ == {"fd"}


def test_setting_tags_round_trip_and_outputs_filter():
    config = quick_config()
    for run in plan.runs(config):
        s = plan.parse_setting(run.setting)
        assert s["clients"] == 4 and s["iterations"] == 30
    table8 = plan.output_runs(config, "table8")
    assert {r.method for r in table8} == {"fedmd", "fedmd_lf", "fedal"}
    assert {plan.parse_setting(r.setting)["alpha"] for r in table8} == {2.0}
    with pytest.raises(ValueError, match="setting tag"):
        plan.parse_setting("nonsense")


def test_check_names_the_offending_keys():
    config = quick_config()
    config["fedal"]["experiments"]["homogeneous"]["pool"] = "digits_het"
    config["fedal"]["experiments"]["blackbox"]["iterations"] = [10, 20]
    config["fedal"]["outputs"]["fig8"]["experiment"] = "nope"
    errors = "\n".join(plan.check(config))
    assert "fedal.experiments.homogeneous.methods': fedavg needs a one-architecture pool" in errors
    assert "fedal.experiments.blackbox.iterations'" in errors
    assert "fedal.outputs.fig8.experiment'" in errors


def test_check_rejects_a_budget_below_tau_before_any_job():
    config = quick_config()
    experiment = next(iter(config["fedal"]["experiments"].values()))
    experiment["iterations"] = 2
    taus = {m: config["fedal"]["methods"][m].get("tau", 1) for m in experiment["methods"]}
    errors = "\n".join(plan.check(config))
    for method, tau in taus.items():
        named = f"fedal.methods.{method}.tau = {tau}" in errors
        assert named == (tau > 2), method


@pytest.fixture(scope="module")
def digits_setting(tmp_path_factory):
    """Prepared digits and one Dirichlet partition with a public set, written like the pipeline does."""
    from fedrepro.data.partition import make_partition, save_partition
    from fedrepro.data.prepare import prepare_dataset

    root = tmp_path_factory.mktemp("fedal")
    prepare_dataset("digits", root / "data/digits", root / "raw", {})
    arrays = dict(np.load(root / "data/digits/arrays.npz"))
    part = root / "partitions/digits/dirichlet-a1-c3-p100-s0.npz"
    save_partition(make_partition("dirichlet", arrays, alpha=1.0, clients=3, public=100, seed=0), part)
    return root, part


def _spec(method: str, **extra) -> dict:
    config = quick_config()
    section = config["fedal"]
    spec = {
        **section["train"],
        **section["methods"][method],
        "method": method,
        "pool": section["pools"]["digits_hom" if method == "fedavg" else "digits_het"],
        "iterations": 10,
        "device": "cpu",
        "checkpoint_every": 1,
        "evals": 2,
    }
    if "adversarial" in method_table("fedal")[method].traits:
        spec["discriminator"] = section["discriminator"]
    spec.update(extra)
    return spec


def _run(root, part, method, spec, seeds=(0,)):
    from fedrepro.algorithms import method_entry
    from fedrepro.pipeline import make_job

    folder = root / f"fedal/runs/digits/{method}/digits_het-a1-c3-p100-i10/s{'_'.join(map(str, seeds))}"
    job = make_job(
        spec,
        {"metrics": str(folder / "metrics.parquet"), "summary": str(folder / "summary.json")},
        {"data": str(root / "data/digits/arrays.npz"), "partition": str(part)},
        seeds=list(seeds),
    )
    method_entry("fedal", method)(job)
    return folder


def test_fig6_variances_with_fewer_than_two_batches_are_left_out_not_a_divergence(digits_setting):
    """One mini-batch per client has no sample variance: no var_ column, and the run stays ok
    (a NaN column would mark it diverged)."""
    import pandas as pd

    root, part = digits_setting
    spec = _spec("fedal", diagnostics={"every_rounds": 1, "batches": 3}, batch_size=100_000)
    folder = _run(root, part, "fedal", spec)
    metrics = pd.read_parquet(folder / "metrics.parquet")
    assert not [c for c in metrics.columns if c.startswith("var_")]
    assert json.loads((folder / "summary.json").read_text())["seeds"]["0"]["status"] == "ok"


def test_fedal_job_end_to_end_and_report(digits_setting, tmp_path):
    import pandas as pd

    from fedrepro.pipeline import make_job
    from fedrepro.report import fedal as report

    root, part = digits_setting
    spec = _spec("fedal", diagnostics={"every_rounds": 1, "batches": 3})
    folder = _run(root, part, "fedal", spec, seeds=(0, 1))
    metrics = pd.read_parquet(folder / "metrics.parquet")
    assert set(metrics["seed"]) == {0, 1}
    assert metrics["iteration"].dropna().max() == 10
    assert {"var_sigma_u", "var_sigma_n", "var_sigma_rg"} <= set(metrics.columns)
    summary = json.loads((folder / "summary.json").read_text())
    per_seed = summary["seeds"]["0"]
    assert len(per_seed["architectures"]) == 3 and len(per_seed["class_probs"]) == 10
    assert 0.0 <= per_seed["final"]["acc"] <= 1.0
    # a finished job reruns from its per-seed results without training again
    _run(root, part, "fedal", spec, seeds=(0, 1))

    fedmd = _run(root, part, "fedmd", _spec("fedmd"), seeds=(0, 1))
    summaries = [str(folder / "summary.json"), str(fedmd / "summary.json")]
    out = tmp_path / "tables/table6.md"
    job = make_job(
        {"name": "table6", "axis": "alpha", "methods": ["fedmd", "fedal"], "scale": "quick", "decimals": 2},
        {"md": str(out)},
        {"summaries": summaries},
    )
    report.table(job)
    text = out.read_text()
    assert "FedAL" in text and "0.78" in text and "alpha=1" in text  # published value beside ours
    for name, extra in [("fig8", {}), ("fig2", {"class": 3}), ("fig6", {})]:
        png = tmp_path / f"figures/{name}.png"
        metrics_in = [str(folder / "metrics.parquet")] + ([] if name == "fig6" else [str(fedmd / "metrics.parquet")])
        job = make_job(
            {"name": name, "methods": ["fedmd", "fedal"], "scale": "quick", **extra},
            {"png": str(png), "pdf": str(png.with_suffix(".pdf"))},
            {"metrics": metrics_in, "summaries": summaries},
        )
        report.figure(job)
        assert png.stat().st_size > 1000


def test_fedavg_job_and_partition_figure(digits_setting, tmp_path):
    from fedrepro.pipeline import make_job
    from fedrepro.report import fedal as report

    root, part = digits_setting
    folder = _run(root, part, "fedavg", _spec("fedavg"))
    final = json.loads((folder / "summary.json").read_text())["seeds"]["0"]["final"]
    assert final["uplink_mb_per_client"] > 0
    png = tmp_path / "fig4.png"
    job = make_job(
        {"name": "fig4", "dataset": "digits", "alphas": [1.0], "scale": "quick"},
        {"png": str(png), "pdf": str(tmp_path / "fig4.pdf")},
        {"data": [str(root / "data/digits/arrays.npz")], "partitions": [str(part)]},
    )
    report.partition_figure(job)
    assert png.stat().st_size > 1000


def test_schema_accepts_the_quick_section_and_names_bad_keys():
    from fedrepro.config import ConfigError, check_config

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config = {k: v for k, v in config.items() if k not in ("fedavg", "fedsc", "dpzv", "steffle")}
    config["papers"] = ["fedal"]
    config["fedal"] = quick_config()["fedal"]
    config.setdefault("datasets", {})["digits"] = {}
    check_config(config, ROOT / "workflow/schemas")
    bad = copy.deepcopy(config)
    bad["fedal"]["discriminator"]["optimizer"] = "rmsprop"
    bad["fedal"]["experiments"]["blackbox"]["methods"] = ["fedal", "fedx"]
    with pytest.raises(ConfigError) as err:
        check_config(bad, ROOT / "workflow/schemas")
    assert "fedal.discriminator.optimizer" in str(err.value)
    assert "fedal.experiments.blackbox.methods[1]" in str(err.value)


def test_paper_scale_merge_plans_every_output_and_table4_over_celeba():
    """config.yaml + configs/paper.yaml merged as Snakemake merges them (issue: the quick file's
    table4 alpha filter survived the merge and Table IV planned no run)."""
    from fedrepro.plan import load_config

    config = load_config([str(ROOT / "config.yaml"), str(ROOT / "configs/paper.yaml")])
    assert plan.check(config) == []
    for name in plan.TABLES + plan.CURVES + ("fig2", "fig6"):
        assert plan.output_runs(config, name), name
    table4 = plan.output_runs(config, "table4")
    assert {r.dataset for r in table4} == {"celeba"}
    assert {plan.parse_setting(r.setting)["clients"] for r in table4} == {20, 50, 100}
    assert len(table4) * len(config["fedal"]["seeds"]) == 54  # 6 methods x 3 N x 3 seeds, one seed per job
    assert config["fedal"]["discriminator"]["lr"] == 1e-4  # the paper's, not the quick file's
    bad = copy.deepcopy(config)
    bad["fedal"]["outputs"]["table4"]["alphas"] = [1]
    assert any("fedal.outputs.table4.alphas" in e and "natural partition" in e for e in plan.check(bad))


def test_paper_scale_discriminator_is_the_papers_sgd_and_the_caption_says_so():
    """Sec. IV-E: the server updates the discriminator "according to SGD" at eta_d = 1e-4 (Sec. VI-A):
    the merged paper config's adversarial runs build an SGD discriminator, their summary reports it,
    and the caption names it (the quick scale keeps Adam)."""
    import pandas as pd
    import torch

    from fedrepro.algorithms.fedal.fedal import build
    from fedrepro.algorithms.fedal.jobs import train_config
    from fedrepro.fl.optim import SGD
    from fedrepro.plan import load_config
    from fedrepro.report.fedal import discriminator_note

    from .helpers import POOL, make_data

    config = load_config([str(ROOT / "config.yaml"), str(ROOT / "configs/paper.yaml")])
    adversarial = [r for r in plan.runs(config) if "discriminator" in r.spec and r.dataset != "digits"]
    assert adversarial and {
        (r.spec["discriminator"]["optimizer"], r.spec["discriminator"]["lr"]) for r in adversarial
    } == {("sgd", 1e-4)}
    assert quick_config()["fedal"]["discriminator"]["optimizer"] == "adam"
    spec = {**adversarial[0].spec, "pool": POOL, "iterations": 2, "device": "cpu", "batched": False}
    torch.manual_seed(0)
    algo = build(make_data(), POOL, train_config(spec), 0, spec)
    assert isinstance(algo.server.adversary.opt, SGD)
    algo.round(1)
    summary = algo.summary()
    assert (summary["disc_optimizer"], summary["disc_lr"]) == ("sgd", 1e-4)
    frame = pd.DataFrame([{**summary, "method": "fedal", "panel": "alpha=1"}])
    assert "FedAL discriminator (SGD, lr 0.0001) loss" in discriminator_note(frame)


def test_discriminator_note_gives_the_loss_beside_log_n_and_its_trajectory():
    import math

    import pandas as pd

    from fedrepro.report.fedal import discriminator_note

    log4 = math.log(4)
    frame = pd.DataFrame(
        {
            "method": ["fedal", "fedal", "fedmd"],
            "panel": ["alpha=1", "alpha=1", "alpha=1"],
            "disc_loss_final": [log4 + 1e-4, log4 - 2e-4, float("nan")],
            "disc_log_n": [log4, log4, float("nan")],
        }
    )
    note = discriminator_note(frame)
    assert "1.3863" in note and "cannot tell the players apart" in note and "inert" not in note
    metrics = pd.DataFrame(
        {
            "method": ["fedal"] * 6 + ["fedmd"] * 3,
            "panel": ["alpha=1"] * 9,
            "round": [1, 2, 3] * 3,
            "disc_loss": [1.38, 1.2, 1.0, 1.36, 1.1, 0.9, float("nan"), float("nan"), float("nan")],
        }
    )
    assert "by round r1 1.370, r2 1.150, r3 0.950" in discriminator_note(frame, metrics)  # means over seeds
    frame.loc[0, "disc_loss_final"] = log4 - 0.2  # one run where the discriminator learned something
    assert "cannot tell" not in discriminator_note(frame)
    assert discriminator_note(frame.drop(columns=["disc_loss_final"])) is None


def test_chance_level_runs_are_named_in_the_summary():
    import torch

    from fedrepro.algorithms.fedal.fedal import FedAL

    from .helpers import POOL, config, make_data

    torch.manual_seed(0)
    algo = FedAL(make_data(), POOL, config(), 0)
    untrained = algo.summary()
    assert untrained["status"] == "chance" and "at chance" in untrained["status_reason"]
    assert untrained["disc_loss_final"] != untrained["disc_loss_final"]  # NaN before any step
    for t in range(1, 9):
        algo.round(t)
    trained = algo.summary()
    assert trained["status"] == "ok" and abs(trained["disc_loss_final"] - trained["disc_log_n"]) < 1.0


def test_table4_builds_from_celeba_runs_without_alpha(tmp_path):
    """Table IV's runs have a natural split (no alpha in the setting); the table keys on N."""
    from fedrepro.pipeline import make_job
    from fedrepro.report import fedal as report

    summaries = []
    for method, acc in [("fedmd", 0.6), ("fedal", 0.65)]:
        for n in (20, 50, 100):
            folder = tmp_path / f"fedal/runs/celeba/{method}/celeba_cnn-n-c{n}-p1000-i10000/s0"
            folder.mkdir(parents=True)
            seed = {"final": {"acc": acc, "iteration": 10000}, "status": "ok", "status_reason": ""}
            if method == "fedal":
                seed.update(disc_loss_final=math.log(n) - 0.2, disc_log_n=math.log(n))
            (folder / "summary.json").write_text(json.dumps({"seeds": {"0": seed}}))
            summaries.append(str(folder / "summary.json"))
    out = tmp_path / "tables/table4.md"
    job = make_job(
        {
            "name": "table4",
            "axis": "clients",
            "methods": ["fedmd", "fedal"],
            "scale": "paper",
            "decimals": 2,
            "experiment": "celeba",
        },
        {"md": str(out)},
        {"summaries": summaries},
    )
    report.table(job)
    text = out.read_text()
    assert "N=20" in text and "N=100" in text and "0.65" in text and "Claim FedAL > FedMD: N=20: " in text
    empty = make_job(
        {"name": "table4", "axis": "clients", "methods": ["fedal"], "scale": "paper", "decimals": 2},
        {"md": str(out)},
        {"summaries": []},
    )
    with pytest.raises(ValueError, match="fedal.outputs.table4"):
        report.table(empty)


def test_table8_tests_the_adversarial_claim_even_with_the_discriminator_at_log_n(tmp_path):
    """Table VIII's caption gives the discriminator's final loss and trajectory beside log N, and the
    adversarial claim (FedAL > FedMD-LF) gets its paired verdict whatever the discriminator did."""
    import pandas as pd

    from fedrepro.eval.verdict import paired
    from fedrepro.pipeline import make_job
    from fedrepro.report import fedal as report
    from fedrepro.report.fedal_claims import outcome_text

    log4, summaries, metrics = math.log(4), [], []
    accs = {"fedmd": [0.6, 0.61, 0.59], "fedmd_lf": [0.62, 0.64, 0.60], "fedal": [0.65, 0.66, 0.62]}
    for method, acc in accs.items():
        folder = tmp_path / f"fedal/runs/digits/{method}/digits_het-a2-c4-p200-i30/s0_1_2"
        folder.mkdir(parents=True)
        seeds = {}
        for s in (0, 1, 2):
            seeds[str(s)] = {"final": {"acc": acc[s], "iteration": 30}, "status": "ok", "status_reason": ""}
            if method == "fedal":
                seeds[str(s)].update(disc_loss_final=log4 - 0.002, disc_log_n=log4)
        (folder / "summary.json").write_text(json.dumps({"seeds": seeds}))
        rounds = pd.DataFrame({"round": [1, 2] * 3, "seed": [0, 0, 1, 1, 2, 2]})
        if method == "fedal":
            rounds["disc_loss"] = [1.386, 1.3, 1.386, 1.3, 1.386, 1.3]
        rounds.to_parquet(folder / "metrics.parquet")
        summaries.append(str(folder / "summary.json"))
        metrics.append(str(folder / "metrics.parquet"))
    out = tmp_path / "tables/table8.md"
    spec = {"name": "table8", "axis": "method", "methods": list(accs), "scale": "quick", "decimals": 2}
    report.table(make_job(spec, {"md": str(out)}, {"summaries": summaries, "metrics": metrics}))
    text = out.read_text()
    adversarial = next(line for line in text.splitlines() if "FedAL > FedMD-LF" in line)
    verdict = paired(accs["fedal"], accs["fedmd_lf"], smallest_effect=0.012)  # Table VIII: 0.744 - 0.732
    assert f"all runs: {outcome_text(verdict)}" in adversarial and "claims table" in adversarial
    assert "not tested" not in adversarial
    assert f"{log4 - 0.002:.4f}" in text and "by round r1 1.386, r2 1.300" in text


def test_fig10_notes_give_feddf_als_discriminator_and_its_paired_claim(tmp_path):
    import pandas as pd

    from fedrepro.eval.verdict import paired
    from fedrepro.report.fedal import _disc_by_iteration, figure_notes
    from fedrepro.report.fedal_claims import outcome_text

    accs = {"feddf": [0.60, 0.50, 0.55], "feddf_al": [0.62, 0.53, 0.56]}
    rows = [
        {
            "method": m,
            "setting": "digits_het-a2-c4-p200-i30",
            "seed": s,
            "acc": a,
            "disc_loss_final": 0.69,
            "disc_log_n": math.log(2),
        }
        for m, values in accs.items()
        for s, a in enumerate(values)
    ]
    notes = figure_notes(pd.DataFrame(rows))
    assert any("FedDF-AL discriminator loss" in n and "alpha=2: 0.6900 (log N = 0.6931)" in n for n in notes)
    claim = next(n for n in notes if n.startswith("Claim FedDF-AL > FedDF"))
    assert f"alpha=2: {outcome_text(paired(accs['feddf_al'], accs['feddf']))}" in claim and "tau" in claim
    folder = tmp_path / "fedal/runs/digits/feddf_al/digits_het-a2-c4-p200-i30/s0_1"
    folder.mkdir(parents=True)
    metrics = pd.DataFrame(
        {
            "round": [1, 2, 1, 2],
            "seed": [0, 0, 1, 1],
            "disc_loss": [0.70, 0.68, 0.72, 0.66],
            "iteration": [float("nan"), 30, float("nan"), 30],  # evaluated at round 2 only: 15 per round
        }
    )
    metrics.to_parquet(folder / "metrics.parquet")
    disc = _disc_by_iteration([str(folder / "metrics.parquet")])
    assert disc["iteration"].tolist() == [15, 30] and disc["disc_loss"].round(6).tolist() == [0.71, 0.67]


def test_notes_give_each_rows_budget_its_seeds_and_which_variants_ran():
    import pandas as pd

    from fedrepro.report.fedal import baseline_notes, budget_note, seeds_note, with_setting

    work = {"round": 6, "local_steps_per_round": 5, "pretrain_steps": 0, "local_steps_total": 30}
    rows = [
        {"method": "fedal", "setting": "digits_het-a1-c4-p200-i30", **work},
        {"method": "fedmd", "setting": "digits_het-a1-c4-p200-i30", **work, "round": 30, "local_steps_per_round": 1},
        {
            "method": "fccl",
            "setting": "digits_het-a1-c4-p200-i30",
            **work,
            "pretrain_steps": 30,
            "local_steps_total": 60,
        },
        {"method": "fccl_plus", "setting": "digits_het-a1-c4-p200-i30-l30", **work, "local_steps_per_round": 30},
        {"method": "fedproto", "setting": "digits_het-a1-c4-p200-i30", **work, "fedproto_variant": "public_features"},
    ]
    rows[3]["local_steps_total"] = 180
    frame = with_setting(pd.DataFrame([{**r, "seed": s} for r in rows for s in range(4)]))
    frame["panel"] = "alpha=1"
    budget = budget_note(frame)
    assert "FedAL, FedProto 6 x 5; FedMD 30 x 1; FCCL 6 x 5 + 30; FCCL+ (30 local steps) 6 x 30." in budget
    assert budget.endswith("Not at equal local work (30 private steps in all): FCCL 60, FCCL+ (30 local steps) 180.")
    notes = " ".join(baseline_notes(frame))
    assert "30 cross-entropy steps before round 1" in notes and "[public_features]" in notes
    assert "FCCL and FCCL+ run one local schedule" in notes
    assert seeds_note(frame) is None
    more = pd.concat([frame, frame[frame["method"] == "fedal"].iloc[:1].assign(seed=5)])
    assert "FedAL at alpha=1: 5 (0, 1, 2, 3, 5)" in seeds_note(more)
    most = pd.concat(
        [frame] + [frame[frame["method"] == m].iloc[:1].assign(seed=5) for m in ("fedal", "fedmd", "fccl")]
    )
    assert seeds_note(most).startswith(
        "Seeds: 4 (0-3) per cell; more (config fedal.more_seeds) for FedAL, FedMD, FCCL at"
    )
