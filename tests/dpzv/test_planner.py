"""DPZV planner: runs, per-method specs, figure inputs, report params, config checks (pure Python)."""

import copy
from pathlib import Path

import pytest
import yaml

from fedrepro.algorithms import method_table
from fedrepro.experiments import dpzv as plan
from fedrepro.plan import load_config

ROOT = Path(__file__).resolve().parents[2]
TABLE = method_table("dpzv")


@pytest.fixture()
def config():
    """config.yaml as Snakemake reads it (quick scale)."""
    return yaml.safe_load((ROOT / "config.yaml").read_text())


@pytest.fixture(scope="module")
def paper_config():
    """config.yaml with configs/paper.yaml merged in, as Snakemake merges them (paper scale)."""
    return load_config([str(ROOT / "config.yaml"), str(ROOT / "configs/paper.yaml")])


def test_every_figure_variant_is_planned(config):
    runs = plan.runs(config)
    digits_dpzv = [r for r in runs if r.dataset == "digits" and r.method == "dpzv"]
    variants = {(v["eps"], v["clip"]) for r in digits_dpzv for v in r.spec["variants"]}
    assert ("inf", "inf") in variants and ("inf", 10) in variants  # Figure 4
    assert {(1.0, c) for c in (10, 50, 100, 500)} <= variants  # Figure 5
    assert {(e, 10) for e in (0.1, 0.5, 1.0, 5.0, 10.0)} <= variants  # Figure 3
    vafl = [v for r in runs if r.dataset == "digits" and r.method == "vafl" for v in r.spec["variants"]]
    assert all("clip" not in v for v in vafl) and len(vafl) == 6


def test_spec_holds_only_the_methods_keys(config):
    runs = {(r.dataset, r.method): r for r in plan.runs(config)}
    assert "clip_mode" in runs[("digits", "dpzv")].spec and "clip_mode" not in runs[("digits", "vafl")].spec
    assert "zoo_pair_release" in runs[("digits", "zoo_vfl")].spec
    assert "zoo_pair_release" not in runs[("digits", "vfl_czofo")].spec
    changed = copy.deepcopy(config)
    changed["dpzv"]["shared"]["zoo_pair_release"] = "separate"
    before = {r.key: r.spec for r in plan.runs(config)}
    after = {r.key: r.spec for r in plan.runs(changed)}
    differs = {key[1] for key in before if before[key] != after[key]}
    assert differs == {"zoo_vfl"}


def test_variants_per_job_splits_runs(config):
    config["dpzv"]["variants_per_job"] = 1
    runs = plan.runs(config)
    assert all(len(r.spec["variants"]) == 1 for r in runs)
    assert len({r.key for r in runs}) == len(runs)
    assert any(r.setting == "epsinf-Cinf" for r in runs)


def test_figure_inputs(config):
    config["dpzv"]["figures"]["fig3"] = ["digits", "synthetic_text"]
    runs = plan.runs(config)
    figs = plan.figure_runs(config, runs)
    assert {r.method for r in figs["fig4"]} == {"dpzv"}
    assert {r.dataset for r in figs["fig2"]} == {"digits", "synthetic_multiview"}
    assert {r.dataset for r in figs["fig3"]} == {"digits", "synthetic_text"}
    assert {r.method for r in figs["fig3"]} == set(config["dpzv"]["methods"])


def test_paper_scale_runs_one_variant_per_job_on_the_papers_data(paper_config):
    runs = plan.runs(paper_config)
    assert all(len(r.spec["variants"]) == 1 for r in runs)
    assert {r.dataset for r in runs} == {"mnist", "cifar10", "modelnet40", "amazon_polarity"}
    fig2 = plan.figure_runs(paper_config, runs)["fig2"]
    assert {(r.dataset, r.spec["variants"][0]["eps"]) for r in fig2} == {
        ("mnist", 1.0),
        ("cifar10", 1.0),
        ("modelnet40", 10.0),
    }
    mnist = next(r for r in runs if r.dataset == "mnist" and r.method == "vfl_czofo")
    assert mnist.spec["lr_client"] == 1e-7 and mnist.spec["epochs"] == 100  # Table 2, Section 7


def test_method_table_gives_the_spec_keys_and_the_labels(config):
    """A run's spec holds the shared keys of its own table row only; Figure 6's labels are the table's."""
    shared = config["dpzv"]["shared"]
    for name, row in TABLE.items():
        spec = plan.method_spec(config, "digits", name)
        table_keys = {k for k in shared if k in row.config_keys or k in plan.COMMON_KEYS}
        if spec.get("server_update") == "zo":
            table_keys.discard("momentum")
        assert {k for k in spec if k in shared} == table_keys, name
    entries = plan.memory_spec(config, "synthetic_text")["entries"]
    assert all(set(e) == {"method", "options"} for e in entries)  # no label: a label edit re-measures nothing
    assert {e["method"] for e in entries} <= set(TABLE)


def test_schema_allows_exactly_the_table(config):
    schema = yaml.safe_load((ROOT / "workflow/schemas/dpzv.schema.yaml").read_text())
    assert schema["properties"]["methods"]["items"]["enum"] == list(TABLE)
    rates = schema["properties"]["datasets"]["additionalProperties"]["properties"]["lr"]["properties"]
    assert set(rates) == {*TABLE, "default"}  # default: the rates of a method without its own entry
    known = set(schema["properties"]["shared"]["properties"])
    for name, row in TABLE.items():
        assert set(row.config_keys) <= known, name
    assert config["dpzv"]["methods"] == list(TABLE)  # config.yaml runs every method, in the table's order


def test_report_params_hold_only_each_jobs_own_options(config):
    """One figure's option re-runs that figure (and the claims that read it), not the other figures."""
    before = copy.deepcopy({job: plan.report_spec(config, job) for job in plan.REPORT_JOBS})
    config["dpzv"]["figures"]["fig5"]["clips"] = [10, 50]
    after = copy.deepcopy({job: plan.report_spec(config, job) for job in plan.REPORT_JOBS})
    assert {job for job in before if before[job] != after[job]} == {"figure5", "claims"}
    config["report"]["decimals"] = 3
    changed = {job for job in after if after[job] != plan.report_spec(config, job)}
    assert changed == {"table3", "table6", "claims"}
    assert set(plan.FIGURE_JOBS) == {
        "fig2_accuracy_curves",
        "fig3_privacy_tradeoff",
        "fig4_clipping",
        "fig5_clip_threshold",
        "fig6_memory",
    }


def test_report_inputs_name_what_each_function_reads():
    inputs = plan.report_inputs("figure2", ["runs/a"], ["memory/x.csv"])
    assert inputs == {"metrics": ["runs/a/metrics.parquet"], "summaries": ["runs/a/summary.json"]}
    assert plan.report_inputs("table6", [], ["memory/x.csv"]) == {"tables": ["memory/x.csv"]}
    assert plan.report_inputs("claims", ["runs/a"], ["m.csv"])["memory"] == ["m.csv"]


def test_memory_spec_has_both_zo_momentum_settings(config):
    spec = plan.memory_spec(config, "synthetic_multiview")
    bars = [(e["method"], e["options"].get("zo_momentum")) for e in spec["entries"]]
    assert ("dpzv", 0) in bars and ("dpzv", 0.9) in bars and ("vafl", None) in bars
    assert all(e["options"]["client_model"] == "vfl_resnet18" for e in spec["entries"])


def test_check_reports_missing_learning_rates_and_datasets(config):
    assert plan.check(config) == []
    del config["dpzv"]["datasets"]["digits"]["lr"]["vafl"]
    config["dpzv"]["figures"]["fig3"].append("mnist")
    errors = plan.check(config)
    assert any("digits.lr lacks vafl" in e for e in errors)
    assert any("'mnist'" in e for e in errors)


# ------------------------------------------------------------------------------------ issues 39 and 44


def test_the_sound_row_runs_beside_the_papers_at_its_labels(config):
    """dpzv.sound: digits DPZV at eps 1 and 10 with dp_head and the secret subsample, named -sound, beside the
    paper's variants of the same job; the baselines and the other data sets get none."""
    runs = plan.runs(config)
    sound = [v for r in runs for v in r.spec["variants"] if v.get("calibration") == "sound"]
    assert sorted(v["eps"] for v in sound) == [1.0, 10.0]
    assert all(v["label_privacy"] == "dp_head" and v["batch"] == "secret_subsample" and v["clip"] == 10 for v in sound)
    digits = next(r for r in runs if r.key[:2] == ("digits", "dpzv"))
    assert "eps1-C10-sound" in digits.setting.split("+") and "eps1-C10" in digits.setting.split("+")
    assert not any(v.get("calibration") for r in runs if r.key[:2] != ("digits", "dpzv") for v in r.spec["variants"])


def test_more_seeds_run_only_the_chosen_cells_and_merge_at_paper_scale(config, paper_config):
    config["dpzv"]["more_seeds"] = [{"dataset": "digits", "methods": ["dpzv", "vafl"], "eps": ["inf"], "seeds": [3, 4]}]
    extra = {r.key: r for r in plan.runs(config) if r.seeds}
    assert set(extra) == {("digits", "dpzv", "epsinf-C10"), ("digits", "vafl", "epsinf")}  # C = the shared clip
    assert all(r.seeds == ("s3_4",) for r in extra.values())
    assert len(plan.runs(config)) == len({r.key for r in plan.runs(config)})
    paper = copy.deepcopy(paper_config)
    paper["dpzv"]["more_seeds"] = [{"dataset": "mnist", "methods": ["vafl"], "eps": ["inf"], "seeds": [3]}]
    merged = [r for r in plan.runs(paper) if r.seeds]
    assert [(r.key, r.seeds) for r in merged] == [(("mnist", "vafl", "epsinf"), ("s0", "s1", "s2", "s3"))]
    assert len(plan.runs(paper)) == len(plan.runs(paper_config))  # the same jobs, one more seed job


def test_the_paper_scale_captions_read_each_data_sets_clip_and_the_amazon_subsample(paper_config):
    """Issue 39: the Figure 3 table prints C_h as each data set's runs read it (shared with its overrides), and
    says that paper-scale Amazon is a 100,000 / 10,000 subsample of the 3.6 M / 0.4 M set."""
    from fedrepro.report.dpzv import baseline_note, subsample_note

    spec = plan.report_spec(paper_config, "table3")
    read = {d: plan.method_spec(paper_config, d, "vafl")["embed_clip"] for d in paper_config["dpzv"]["figures"]["fig3"]}
    assert spec["embed_clips"] == read == {"mnist": 1.0, "cifar10": 1.5, "modelnet40": 15, "amazon_polarity": 10}
    note = baseline_note(spec)
    assert "C_h = 1 (mnist), 1.5 (cifar10), 15 (modelnet40), 10 (amazon_polarity)" in note and "0.5" not in note
    assert spec["subsamples"] == {
        "amazon_polarity": {"n_train": 100_000, "n_test": 10_000, "full_train": 3_600_000, "full_test": 400_000}
    }
    assert "amazon_polarity: a uniform 100,000 / 10,000 subsample of the published 3,600,000 / 400,000" in (
        subsample_note(spec)
    )
    assert plan.report_spec(paper_config, "claims")["subsamples"] == spec["subsamples"]  # the privacy caption
