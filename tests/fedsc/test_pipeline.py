"""Planner and a tiny end-to-end job (pretrain -> probe -> tables) without Snakemake."""

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from fedrepro.algorithms.fedsc import METHODS
from fedrepro.experiments import fedsc as plan
from fedrepro.experiments import index
from fedrepro.pipeline import make_job
from tests.fedsc.helpers import tiny_spec, write_prepared_digits

ROOT = Path(__file__).resolve().parents[2]


def _config():
    """The default run's config (config.yaml: FedSC at quick scale on digits), on CPU."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config.update(results="results", device="cpu", checkpoint_every=1)
    return config


def test_planner_runs_settings_and_dedup():
    config = _config()
    runs = plan.runs(config)
    index(runs)  # no duplicate keys
    keys = {r.key for r in runs}
    assert ("digits", "centralized_sc", "central") in keys
    assert ("digits", "fedx", "partial") in keys
    assert ("digits", "fedsc", "partial_eps8_d0.0001") in keys
    fedsc = {r.setting: r for r in runs if r.method == "fedsc"}
    assert fedsc["full_epsinf"].spec["sharing"] == {"after": 0.0, "every": 1}
    assert fedsc["partial_eps3_d0.01"].spec["participation"] == 2
    # specs hold only what the method reads
    byol = next(r for r in runs if r.method == "fedavg_byol")
    assert "mu" not in byol.spec and "byol" in byol.spec and "sharing" not in byol.spec
    assert "fedx" not in byol.spec
    # two levels with the same explicit sigma and schedule share one run reporting both deltas
    shared = copy.deepcopy(config)
    levels = shared["fedsc"]["datasets"]["digits"]["privacy"]
    levels[1]["sigma"] = levels[4]["sigma"] = 0.01  # (6, 1e-2) and (8, 1e-4)
    levels[4]["sharing"] = levels[1]["sharing"]
    settings = plan.fedsc_settings(shared["fedsc"]["datasets"]["digits"])
    assert settings[("partial", 8, 1e-4)] == settings[("partial", 6, 1e-2)] == "partial_eps6_d0.01"
    run = index(plan.runs(shared))[("digits", "fedsc", "partial_eps6_d0.01")]
    assert run.spec["privacy"]["deltas"] == [1e-2, 1e-4]
    assert ("digits", "fedsc", "partial_eps8_d0.0001") not in index(plan.runs(shared))


def test_planner_cells_and_checks():
    config = _config()
    t2 = plan.table2_cells(config)
    assert {c["column"] for c in t2} == {"digits 10/10", "digits 2/10"}
    assert {c["row"] for c in t2} == {row.label for row in METHODS.values()} | {
        plan.RANDOM_ROW
    }  # + the untrained reference row
    t5 = plan.dp_table_cells(config, "table5")
    assert {c["row"] for c in t5} == {"FedAvg+SC", "ε=3", "ε=8", "ε=∞", plan.RANDOM_ROW}
    assert {c["column"] for c in t5} == {"digits 2/10"}
    assert {c["row"] for c in t5 if c.get("private")} == {"ε=3", "ε=8"}
    claims = plan.claims(config)
    names = {(c["claim"], c["column"]) for c in claims}
    assert ("FedSC (ε=∞) > FedAvg+SC (Table 2)", "digits 10/10") in names
    assert ("FedSC (ε=8, δ=0.0001) > FedAvg+SC (Table 5)", "digits 2/10") in names
    assert ("FedSC (ε=3, δ=0.01) > FedAvg+SC (Table 3)", "digits 2/10") in names
    assert ("FedX > untrained encoder (Table 2)", "digits 2/10") in names
    assert len(names) == len(claims)
    for c in claims:  # each side is one run (each seed batch once), never two runs or one file twice
        for side in ("a", "b"):
            assert len({x["path"].rsplit("/", 2)[0] for x in c[side]}) == 1
            assert len(c[side]) == len({x["path"] for x in c[side]}) == (2 if c.get("more_seeds") else 1)
    assert all(c["path"].endswith("probe.json") for c in t5)
    assert plan.check(config) == []
    bad = copy.deepcopy(config)
    bad["fedsc"]["tables"]["table3"]["eps"] = [5]
    assert any("no privacy level eps=5" in e for e in plan.check(bad))


def _prepare(tmp_path):
    from fedrepro.data.partition import make_partition, save_partition

    data = write_prepared_digits(tmp_path)
    save_partition(make_partition("classes", {"y_train": np.load(data)["y_train"]}, clients=5), tmp_path / "part.npz")
    return data, tmp_path / "part.npz"


def test_end_to_end_job_probe_and_tables(tmp_path):
    from fedrepro.registry import resolve
    from fedrepro.report import fedsc as report

    data, part = _prepare(tmp_path)
    spec = tiny_spec(
        rounds=2,
        sharing={"after": 0.0, "every": 1},
        device="cpu",
        knn={"k": 5, "every": 2},
        privacy={"eps": 3, "delta": 1e-2, "sigma": None, "deltas": [1e-2]},
    )
    run_dir = tmp_path / "results" / "fedsc" / "runs" / "digits" / "fedsc" / "full_eps3" / "s0_1"
    out = {
        k: str(run_dir / f)
        for k, f in (("metrics", "metrics.parquet"), ("summary", "summary.json"), ("model", "model.pt"))
    }
    job = make_job(spec, out, {"data": str(data), "partition": str(part)}, seeds=[0, 1])
    resolve(METHODS["fedsc"].entry)(job)
    metrics = pd.read_parquet(out["metrics"])
    assert sorted(metrics["seed"].unique()) == [0, 1]
    assert list(metrics.loc[metrics["knn_acc"].notna(), "round"]) == [2, 2]  # the kNN monitor every knn.every rounds
    summary = json.loads(Path(out["summary"]).read_text())
    eps_rows = summary["seeds"]["0"]["privacy"]["epsilons"]
    assert {r["T_j"] for r in eps_rows} == {2} and len(eps_rows) == 5

    probe_out = str(run_dir / "probe.json")
    pjob = make_job(
        {
            "encoder": spec["encoder"],
            "projector": spec["projector"],
            "probe": {"epochs": 3, "batch_size": 32},
            "device": "cpu",
        },
        {"probe": probe_out},
        {"data": str(data), "model": out["model"]},
    )
    resolve("fedrepro.algorithms.fedsc.probing:probe_job")(pjob)
    probe = json.loads(Path(probe_out).read_text())
    assert set(probe["seeds"]) == {"0", "1"} and 0 <= probe["seeds"]["0"]["final_acc"] <= 1
    assert len(probe["seeds"]["0"]["curve"]) == 3  # probe.epochs

    cells = [{"path": probe_out, "row": "FedSC (Proposed)", "column": "digits 5/5"}]
    tjob = make_job(
        {"table": "table2", "cells": cells, "scale": "quick", "decimals": 2},
        {k: str(tmp_path / f"t2.{k}") for k in ("md", "csv", "tex")},
    )
    report.probe_table(tjob)
    text = (tmp_path / "t2.md").read_text()
    assert "NOT the paper's setting" in text and "91.78" in text
    pcells = [{"path": out["summary"], "row": "full_eps3", "column": "digits"}]
    privacy = report.privacy_frame(pcells)
    assert privacy["eps_sqrt2_max"].iloc[0] == pytest.approx(3.0, rel=1e-6)
    assert 0 < privacy["eps_pld_max"].iloc[0] <= privacy["eps_accountant_max"].iloc[0]  # PLD: tight, below RDP
    fcells = [{"path": out["metrics"], "row": "FedSC", "column": "digits"}]
    fjob = make_job(
        {"cells": fcells, "scale": "quick"}, {"png": str(tmp_path / "f2.png"), "pdf": str(tmp_path / "f2.pdf")}
    )
    report.figure2(fjob)
    assert (tmp_path / "f2.png").stat().st_size > 0


def test_resume_from_checkpoint_gives_same_numbers(tmp_path, monkeypatch):
    """A job killed after some rounds resumes bit-exactly (through fedrepro.fl.runner)."""
    from fedrepro.algorithms.fedsc.byol import run_fedavg_byol as fedavg_byol
    from fedrepro.fl import loop

    data, part = _prepare(tmp_path)
    spec = tiny_spec(rounds=3, device="cpu", sharing=None, byol={"ema": 0.99}, method="fedavg_byol")
    spec.pop("sharing")

    def job_at(name):
        d = tmp_path / name / "fedsc" / "runs" / "digits" / "fedavg_byol" / "full" / "s0"
        out = {
            k: str(d / f)
            for k, f in (("metrics", "metrics.parquet"), ("summary", "summary.json"), ("model", "model.pt"))
        }
        return make_job(spec, out, {"data": str(data), "partition": str(part)}, seeds=[0]), out

    full_job, full_out = job_at("a")
    fedavg_byol(full_job)
    crash_job, crash_out = job_at("b")
    original = loop.run_rounds

    def crash_after_two(algorithm, num_rounds, *args, **kwargs):
        original(algorithm, 2, *args, **kwargs)
        raise RuntimeError("killed")

    with monkeypatch.context() as patch:
        patch.setattr("fedrepro.fl.runner.run_rounds", crash_after_two)
        with pytest.raises(RuntimeError, match="killed"):
            fedavg_byol(crash_job)
    fedavg_byol(crash_job)
    a, b = pd.read_parquet(full_out["metrics"]), pd.read_parquet(crash_out["metrics"])
    pd.testing.assert_frame_equal(a, b)


def test_standin_plans_its_own_runs_and_the_claims_of_tables_2_and_3():
    """Target fedsc_standin: each stand-in's runs (its seeds, rounds, local epochs, augmentation) beside the
    default run's, and the claims FedSC (eps = inf and each private level) against FedAvg+SC and against
    the untrained encoder in both participations, on every stand-in."""
    config = _config()
    standin = config["fedsc"]["standin"]
    assert standin["datasets"] == ["shapes", "textures"]
    runs = [r for r in plan.standin_runs(config) if r.key not in {a.key for a in plan.ablation_runs(config)}]
    assert not {r.key for r in runs} & {r.key for r in plan.runs(config)}
    per_dataset = {
        ("fedsc", "full_epsinf"),
        ("fedsc", "partial_epsinf"),
        ("fedsc", "full_eps6_d0.01"),
        ("fedsc", "partial_eps6_d0.01"),
        ("fedavg_sc", "full"),
        ("fedavg_sc", "partial"),
        ("centralized_sc", "central"),
    }
    assert {(r.dataset, r.method, r.setting) for r in runs} == {
        (d, *k) for d in standin["datasets"] for k in per_dataset
    }
    for run in runs:
        assert run.spec["rounds"] == standin["rounds"] and run.spec["train"]["local_epochs"] == standin["local_epochs"]
        assert run.spec["augment"] == config["fedsc"]["datasets"][run.dataset]["augment"]
        assert run.spec["knn"]["every"] == standin["rounds"]  # no Figure 2: the monitor at the last round only
        assert run.spec.get("dpcalr", {"passes": 5})["passes"] == 5  # the authors' compCOV(epoch_cov=5)
    claims = plan.standin_claims(config)
    names = {(c["claim"], c["column"]) for c in claims}
    for column in ("shapes 10/10", "shapes 2/10", "textures 10/10", "textures 2/10"):
        assert ("FedSC (ε=∞) > FedAvg+SC (Table 2)", column) in names
        assert ("FedSC (Proposed) > untrained encoder (Table 2)", column) in names
        assert ("FedAvg + SC > untrained encoder (Table 2)", column) in names
        assert ("FedSC (ε=6, δ=0.01) > FedAvg+SC (Table 3)", column) in names
        assert ("FedSC (ε=6, δ=0.01) > untrained encoder (Table 3)", column) in names
    assert ("Centralized SC > untrained encoder (Table 2)", "textures 10/10") in names
    assert len(claims) == len(names) == 22
    seeds = {f"s{s}" for s in standin["seeds"]}
    per_job = standin["more_seeds"]["seeds_per_job"]
    for c in claims:
        extra = c.get("more_seeds", [])
        more = {"s" + "_".join(str(s) for s in extra[i : i + per_job]) for i in range(0, len(extra), per_job)}
        for side in "ab":  # every seed of the stand-in, paired, and the extra seeds on both sides if named
            assert {x["path"].split("/")[-2] for x in c[side]} == seeds | more
        assert c["dataset"] == c["column"].split(" ")[0] and c["kind"] in plan_kinds()
    assert plan.check(config) == []


def test_standin_more_seeds_name_stand_in_claims_and_leave_the_default_run_alone():
    """`standin.more_seeds` gives its seeds to the stand-in claims it names (Table 3's private-vs-untrained
    rows included), on both sides; the default run's claims keep `fedsc.more_seeds`; a claim the stand-ins
    do not make is an error naming `fedsc.standin.more_seeds`."""
    config = _config()
    config["fedsc"]["standin"]["more_seeds"] = {
        "seeds": [7, 8],
        "claims": [
            {
                "claim": "FedSC (ε=6, δ=0.01) > untrained encoder (Table 3)",
                "dataset": "textures",
                "participation": "full",
            }
        ],
    }
    assert plan.check(config) == []
    named = [c for c in plan.standin_claims(config) if c.get("more_seeds")]
    assert [(c["claim"], c["column"]) for c in named] == [
        ("FedSC (ε=6, δ=0.01) > untrained encoder (Table 3)", "textures 10/10")
    ]
    assert [c["path"].split("/")[-2] for c in named[0]["b"]] == ["s0", "s1", "s2", "s7_8"]
    assert {tuple(c.get("more_seeds", [])) for c in plan.claims(config) if c.get("more_seeds")} == {
        tuple(config["fedsc"]["more_seeds"]["seeds"])
    }
    config["fedsc"]["standin"]["more_seeds"]["claims"][0]["dataset"] = "digits"
    assert any(e.startswith("fedsc.standin.more_seeds.claims: no claim") for e in plan.check(config))


def test_a_more_seeds_claim_with_its_own_seeds_gets_them_in_jobs_of_seeds_per_job():
    """A claim entry's `seeds` replace `more_seeds.seeds` for that claim alone, split into jobs of
    `seeds_per_job` on both sides; the other named claims keep the shared seeds in one job."""
    config = _config()
    claim = {"claim": "FedSC (ε=∞) > FedAvg+SC (Table 2)", "dataset": "shapes", "participation": "full"}
    other = {"claim": "FedAvg + SC > untrained encoder (Table 2)", "dataset": "shapes", "participation": "full"}
    config["fedsc"]["standin"]["more_seeds"] = {
        "seeds": [3, 4],
        "seeds_per_job": 2,
        "claims": [{**claim, "seeds": [3, 4, 5, 6, 7]}, other],
    }
    assert plan.check(config) == []
    named = {c["claim"]: c for c in plan.standin_claims(config) if c.get("more_seeds") and "10/10" in c["column"]}
    own = named[claim["claim"]]
    assert own["more_seeds"] == [3, 4, 5, 6, 7]
    for side in "ab":
        assert [c["path"].split("/")[-2] for c in own[side]] == ["s0", "s1", "s2", "s3_4", "s5_6", "s7"]
    assert [c["path"].split("/")[-2] for c in named[other["claim"]]["a"]] == ["s0", "s1", "s2", "s3_4"]


def plan_kinds():
    return {plan.PROPOSED_VS_NO_SHARING, plan.PRIVATE_VS_NO_SHARING, plan.VS_UNTRAINED}


def test_ablations_change_one_setting_of_the_run_they_name_on_every_standin():
    """Target fedsc_ablations: each variant is its base run's spec with only its change (dpcalr merged one
    level deep); sharing from round 1 recalibrates sigma for its shares (sigma null), and the table pairs
    each variant with its base run and with FedAvg+SC."""
    config = _config()
    runs = index(plan.standin_runs(config))
    variants = config["fedsc"]["standin"]["ablations"]
    for dataset in ("shapes", "textures"):
        for name, variant in variants.items():
            base = runs[(dataset, "fedsc", "full_epsinf" if variant["eps"] == "inf" else "full_eps6_d0.01")]
            run = runs[(dataset, "fedsc", f"{base.setting}_{name}")]
            changed = {k for k in run.spec.keys() | base.spec.keys() if run.spec.get(k) != base.spec.get(k)}
            assert changed == set(variant["change"]), name
    assert runs[("shapes", "fedsc", "full_epsinf_passes1")].spec["dpcalr"] == {
        **runs[("shapes", "fedsc", "full_epsinf")].spec["dpcalr"],
        "passes": 1,
    }
    shared = runs[("shapes", "fedsc", "full_eps6_d0.01_share_round1")].spec
    assert shared["sharing"] == {"after": 0.0, "every": 1} and shared["privacy"]["sigma"] is None
    cells = plan.ablation_cells(config)
    rows = {(c["column"], c["row"]): c.get("against") for c in cells}
    assert rows[("textures 10/10", "FedSC ε=∞, alpha_fixed")] == "FedSC ε=∞"
    assert rows[("shapes 10/10", "FedSC ε=6, share_round1")] == "FedSC ε=6"
    assert ("shapes 10/10", "FedAvg+SC") in rows and ("textures 10/10", "FedSC ε=∞") in rows
    tags = ("s0", "s1", "s2", "s3_4_5_6")  # the stand-in's seeds and ablations_more_seeds' batch
    assert {c["path"] for c in cells} <= {
        f"results/fedsc/runs/{d}/{m}/{s}/{t}/probe.json" for d, m, s in runs for t in tags
    }
    bad = copy.deepcopy(config)
    bad["fedsc"]["standin"]["ablations"]["passes1"]["eps"] = 5
    assert any("fedsc.standin.ablations.passes1" in e and "eps=5" in e for e in plan.check(bad))


def test_ablations_more_seeds_go_to_the_variant_its_run_and_fedavg_sc_on_that_stand_in():
    """`standin.ablations_more_seeds` adds its seed batch to the named variant, the run it changes and
    FedAvg+SC on that stand-in only; a variant that is not an ablation there, or a seed the stand-in already
    runs, is an error naming the key."""
    config = _config()
    config["fedsc"]["standin"]["ablations_more_seeds"] = {
        "seeds": [7, 8],
        "variants": [{"variant": "mu1", "dataset": "textures"}],
    }
    assert plan.check(config) == []
    extra = sorted(c["path"] for c in plan.ablation_cells(config) if "/s7_8/" in c["path"])
    assert extra == [
        f"results/fedsc/runs/textures/{run}/s7_8/probe.json"
        for run in ("fedavg_sc/full", "fedsc/full_epsinf", "fedsc/full_epsinf_mu1")
    ]
    plain = {c["path"] for c in plan.ablation_cells(config) if "/s7_8/" not in c["path"]}
    config["fedsc"]["standin"]["ablations_more_seeds"] = None
    assert plain == {c["path"] for c in plan.ablation_cells(config)}
    config["fedsc"]["standin"]["ablations_more_seeds"] = {
        "seeds": [2, 9],
        "variants": [{"variant": "mu2", "dataset": "shapes"}],
    }
    errors = plan.check(config)
    assert any("fedsc.standin.ablations_more_seeds.variants: no ablation 'mu2' on 'shapes'" in e for e in errors)
    assert any("fedsc.standin.ablations_more_seeds.seeds: [2]" in e for e in errors)


def test_more_seeds_go_to_both_sides_of_the_claims_they_name():
    """Issue 44: `more_seeds` adds its seed batch on both sides (paired) of the named claims only, and a claim
    that is not in the table is an error naming the key."""
    config = _config()
    config["fedsc"]["more_seeds"] = {
        "seeds": [3, 4],
        "claims": [
            {"claim": "FedSC (ε=12, δ=0.01) > FedAvg+SC (Table 4)", "dataset": "digits", "participation": "partial"}
        ],
    }
    assert plan.check(config) == []
    claims = plan.claims(config)
    named = [c for c in claims if c.get("more_seeds")]
    assert [(c["claim"], c["column"]) for c in named] == [("FedSC (ε=12, δ=0.01) > FedAvg+SC (Table 4)", "digits 2/10")]
    for side, setting in (("a", "fedsc/partial_eps12_d0.01"), ("b", "fedavg_sc/partial")):
        assert [c["path"] for c in named[0][side]] == [
            f"results/fedsc/runs/digits/{setting}/{tag}/probe.json" for tag in ("s0_1_2", "s3_4")
        ]
    assert all(len(c["a"]) == 1 for c in claims if not c.get("more_seeds"))
    config["fedsc"]["more_seeds"]["claims"][0]["claim"] = "FedSC (ε=12, δ=0.01) > FedX (Table 4)"
    assert any(
        "fedsc.more_seeds.claims: no claim 'FedSC (ε=12, δ=0.01) > FedX (Table 4)' on digits at partial" in e
        and "'FedSC (ε=12, δ=0.01) > FedAvg+SC (Table 4)'" in e
        for e in plan.check(config)
    )
    config["fedsc"]["more_seeds"] = {"seeds": [2], "claims": []}
    assert any("fedsc.more_seeds.seeds: [2]" in e for e in plan.check(config))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s["standin"].update(eps=[5]), "no privacy level eps=5"),
        (lambda s: s["standin"].update(methods=["fedsc", "fedavg_sc", "nope"]), "'nope' has no block"),
        (lambda s: s["standin"].update(datasets=["shapes", "cifar10"]), "'cifar10' has no entry"),
        (lambda s: s["run_datasets"].append("textures"), "also in fedsc.run_datasets"),
    ],
)
def test_standin_errors_name_the_key(change, message):
    config = _config()
    change(config["fedsc"])
    assert any(message in e and "fedsc." in e for e in plan.check(config)), plan.check(config)


def test_the_standin_budget_names_rounds_epochs_batch_and_learning_rate_and_says_when_methods_differ():
    config = _config()
    standin = config["fedsc"]["standin"]
    text = plan.standin_budget(config)
    assert f"{standin['rounds']} rounds x {standin['local_epochs']} local epochs" in text
    assert "batch 64, SGD lr 0.03 (cosine), gradient clip 3;" in text
    config["fedsc"]["methods"]["fedavg_sc"] = {**config["fedsc"]["methods"]["fedavg_sc"], "lr": 0.1}
    assert "(per method: fedsc.methods)" in plan.standin_budget(config)
