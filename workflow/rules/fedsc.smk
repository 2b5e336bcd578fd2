# FedSC (Jing et al., ICML 2024): federated SSL pretraining, linear probe, Tables 2-6, Figure 2.
from fedrepro.algorithms import methods
from fedrepro.experiments import fedsc as fedsc_plan
from fedrepro.experiments import index

FEDSC_PROBE_ENTRY = "fedrepro.algorithms.fedsc.probing:probe_job"
FEDSC_RANDOM_PROBE_ENTRY = "fedrepro.algorithms.fedsc.probing:random_probe_job"  # untrained encoder (reference row)
FEDSC_RUNS = fedsc_plan.runs(config) + fedsc_plan.standin_runs(
    config
)  # stand-in runs: targets fedsc_standin, fedsc_ablations
FEDSC = index(FEDSC_RUNS)
FEDSC_PREFIX_ENTRY = "fedrepro.algorithms.fedsc.fedsc:run_prefix"
FEDSC_PREFIXES, FEDSC_STARTS = fedsc_plan.prefixes(FEDSC_RUNS)  # the rounds before sharing, run once
FEDSC_OUT = f"{RESULTS}/fedsc"
FEDSC_RUN = "{dataset}/{method}/{setting}/{seeds}"
FEDSC_REPORT = {
    "scale": config["scale"],
    "decimals": config["report"]["decimals"],
    "note": config["fedsc"].get("report_note", ""),
}
FEDSC_PROBE_TABLES = ("table2", "table3", "table4", "table5")
FEDSC_CELLS = {
    "table2": fedsc_plan.table2_cells(config),
    **{name: fedsc_plan.dp_table_cells(config, name) for name in FEDSC_PROBE_TABLES[1:]},
    "privacy": fedsc_plan.privacy_cells(config),
    "figure2": fedsc_plan.figure2_cells(config),
}
FEDSC_CLAIMS = fedsc_plan.claims(config)
FEDSC_STANDIN = fedsc_plan.standin_config(config)
FEDSC_STANDIN_BUDGET = fedsc_plan.standin_budget(config) if FEDSC_STANDIN else ""
FEDSC_STANDIN_CLAIMS = fedsc_plan.standin_claims(config)
FEDSC_STANDIN_CELLS = fedsc_plan.standin_table_cells(config)
FEDSC_STANDIN_DATASETS = fedsc_plan.standin_datasets(config)
FEDSC_ABLATION_CELLS = fedsc_plan.ablation_cells(config)
FEDSC_CLAIMS_ENTRY = "fedrepro.report.fedsc_claims:claims_table"
FEDSC_METHODS = "|".join(methods("fedsc"))


rule fedsc_pretrain:
    input:
        data=lambda w: prepared(w.dataset),
        partition=lambda w: partition_file(w.dataset, planned_run(FEDSC, w).partition),
        prefix=lambda w: fedsc_plan.prefix_input(
            RESULTS, w.dataset, FEDSC_STARTS.get((w.dataset, w.method, w.setting)), w.seeds
        ),
        code=code_for(lambda w: methods("fedsc")[w.method]),
    output:
        metrics=f"{FEDSC_OUT}/runs/{FEDSC_RUN}/metrics.parquet",
        summary=f"{FEDSC_OUT}/runs/{FEDSC_RUN}/summary.json",
        model=f"{FEDSC_OUT}/runs/{FEDSC_RUN}/model.pt",
    log:
        f"{RESULTS}/logs/fedsc/{FEDSC_RUN}.log",
    wildcard_constraints:
        method=FEDSC_METHODS,
    conda:
        CONDA_ENV
    threads: config["resources"]["train"]["threads"]
    resources:
        **train_resources(),
    params:
        entry=lambda w: methods("fedsc")[w.method],
        spec=lambda w: planned_run(FEDSC, w).spec,
    script:
        ENTRY


# The rounds a setting's private runs and its FedAvg+SC run share before their first sharing round
# (fedrepro.algorithms.fedsc.prefix): each runs once here and those runs resume from its state.
rule fedsc_prefix:
    input:
        data=lambda w: prepared(w.dataset),
        partition=lambda w: partition_file(w.dataset, FEDSC_PREFIXES[(w.dataset, w.setting)].partition),
        prefix=lambda w: fedsc_plan.prefix_input(
            RESULTS, w.dataset, FEDSC_PREFIXES[(w.dataset, w.setting)].start, w.seeds
        ),
        code=code_for(FEDSC_PREFIX_ENTRY),
    output:
        metrics=f"{FEDSC_OUT}/prefixes/{{dataset}}/{{setting}}/{{seeds}}/metrics.parquet",
        summary=f"{FEDSC_OUT}/prefixes/{{dataset}}/{{setting}}/{{seeds}}/summary.json",
        prefix=f"{FEDSC_OUT}/prefixes/{{dataset}}/{{setting}}/{{seeds}}/prefix.pt",
    log:
        f"{RESULTS}/logs/fedsc/prefixes/{{dataset}}/{{setting}}/{{seeds}}.log",
    conda:
        CONDA_ENV
    threads: config["resources"]["train"]["threads"]
    resources:
        **train_resources(),
    params:
        entry=FEDSC_PREFIX_ENTRY,
        spec=lambda w: FEDSC_PREFIXES[(w.dataset, w.setting)].spec,
    script:
        ENTRY


rule fedsc_probe:
    input:
        data=lambda w: prepared(w.dataset),
        model=f"{FEDSC_OUT}/runs/{FEDSC_RUN}/model.pt",
        code=code_for(FEDSC_PROBE_ENTRY),
    output:
        probe=f"{FEDSC_OUT}/runs/{FEDSC_RUN}/probe.json",
    log:
        f"{RESULTS}/logs/fedsc/{FEDSC_RUN}.probe.log",
    wildcard_constraints:
        method=FEDSC_METHODS,
    conda:
        CONDA_ENV
    threads: config["resources"]["train"]["threads"]
    resources:
        **train_resources(),
    params:
        entry=FEDSC_PROBE_ENTRY,
        spec=lambda w: fedsc_plan.probe_spec(config, planned_run(FEDSC, w)),
    script:
        ENTRY


rule fedsc_random_probe:
    input:
        data=lambda w: prepared(w.dataset),
        code=code_for(FEDSC_RANDOM_PROBE_ENTRY),
    output:
        probe=f"{FEDSC_OUT}/runs/{{dataset}}/random_encoder/untrained/{{seeds}}/probe.json",
    log:
        f"{RESULTS}/logs/fedsc/{{dataset}}/random_encoder/untrained/{{seeds}}.probe.log",
    conda:
        CONDA_ENV
    threads: config["resources"]["train"]["threads"]
    resources:
        **train_resources(),
    params:
        entry=FEDSC_RANDOM_PROBE_ENTRY,
        spec=lambda w: fedsc_plan.random_probe_spec(config, w.dataset),
    script:
        ENTRY


rule fedsc_claims:
    input:
        probes=sorted({c["path"] for c in fedsc_plan.claim_cells(FEDSC_CLAIMS)}),
        summaries=fedsc_plan.summary_inputs(fedsc_plan.claim_cells(FEDSC_CLAIMS)),
        meta=fedsc_plan.meta_files(RESULTS, fedsc_plan.enabled_datasets(config["fedsc"])),
        code=code_for(FEDSC_CLAIMS_ENTRY),
    output:
        md=f"{FEDSC_OUT}/tables/claims.md",
        csv=report(f"{FEDSC_OUT}/tables/claims.csv", caption="../report/fedsc_claims.rst", category="FedSC"),
        tex=f"{FEDSC_OUT}/tables/claims.tex",
    log:
        f"{RESULTS}/logs/fedsc/claims.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry=FEDSC_CLAIMS_ENTRY,
        spec={**FEDSC_REPORT, "claims": FEDSC_CLAIMS},
    script:
        ENTRY


# Tables 2-5, the linear-probe tables: one rule each (`snakemake fedsc_table3`), generated here. Table 2 is
# non-private (no delta); Tables 3-5 carry their delta.
for _table in FEDSC_PROBE_TABLES:

    rule:
        name:
            f"fedsc_{_table}"
        input:
            probes=[cell["path"] for cell in FEDSC_CELLS[_table]],
            summaries=fedsc_plan.summary_inputs(FEDSC_CELLS[_table]),
            code=code_for("fedrepro.report.fedsc:probe_table"),
        output:
            md=f"{FEDSC_OUT}/tables/{_table}.md",
            csv=report(f"{FEDSC_OUT}/tables/{_table}.csv", caption="../report/fedsc_probe_table.rst", category="FedSC"),
            tex=f"{FEDSC_OUT}/tables/{_table}.tex",
        log:
            f"{RESULTS}/logs/fedsc/{_table}.log",
        conda:
            CONDA_ENV
        resources:
            **cpu_resources(),
        params:
            entry="fedrepro.report.fedsc:probe_table",
            spec={
                **FEDSC_REPORT,
                "table": _table,
                "cells": FEDSC_CELLS[_table],
                **({} if _table == "table2" else {"delta": config["fedsc"]["tables"][_table]["delta"]}),
            },
        script:
            ENTRY


rule fedsc_table6:
    input:
        code=code_for("fedrepro.report.fedsc:table6"),
    output:
        md=f"{FEDSC_OUT}/tables/table6.md",
        csv=report(f"{FEDSC_OUT}/tables/table6.csv", caption="../report/fedsc_table6.rst", category="FedSC"),
        tex=f"{FEDSC_OUT}/tables/table6.tex",
    log:
        f"{RESULTS}/logs/fedsc/table6.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.fedsc:table6",
        spec={**FEDSC_REPORT, "rows": config["fedsc"]["table6"]},
    script:
        ENTRY


rule fedsc_privacy:
    input:
        summaries=[cell["path"] for cell in FEDSC_CELLS["privacy"]],
        code=code_for("fedrepro.report.fedsc:privacy_table"),
    output:
        md=f"{FEDSC_OUT}/tables/privacy_realised.md",
        csv=report(f"{FEDSC_OUT}/tables/privacy_realised.csv", caption="../report/fedsc_privacy.rst", category="FedSC"),
        tex=f"{FEDSC_OUT}/tables/privacy_realised.tex",
    log:
        f"{RESULTS}/logs/fedsc/privacy_realised.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.fedsc:privacy_table",
        spec={**FEDSC_REPORT, "cells": FEDSC_CELLS["privacy"]},
    script:
        ENTRY


rule fedsc_figure2:
    input:
        metrics=[cell["path"] for cell in FEDSC_CELLS["figure2"]],
        code=code_for("fedrepro.report.fedsc:figure2"),
    output:
        png=report(f"{FEDSC_OUT}/figures/figure2.png", caption="../report/fedsc.rst", category="FedSC"),
        pdf=f"{FEDSC_OUT}/figures/figure2.pdf",
    log:
        f"{RESULTS}/logs/fedsc/figure2.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.fedsc:figure2",
        spec={**FEDSC_REPORT, "cells": FEDSC_CELLS["figure2"]},
    script:
        ENTRY


if FEDSC_STANDIN:

    rule fedsc_standin_table:
        input:
            probes=[cell["path"] for cell in FEDSC_STANDIN_CELLS],
            summaries=fedsc_plan.summary_inputs(FEDSC_STANDIN_CELLS),
            code=code_for("fedrepro.report.fedsc:probe_table"),
        output:
            md=f"{FEDSC_OUT}/tables/standin_probe.md",
            csv=f"{FEDSC_OUT}/tables/standin_probe.csv",
            tex=f"{FEDSC_OUT}/tables/standin_probe.tex",
        log:
            f"{RESULTS}/logs/fedsc/standin_probe.log",
        conda:
            CONDA_ENV
        resources:
            **cpu_resources(),
        params:
            entry="fedrepro.report.fedsc:probe_table",
            spec={
                **FEDSC_REPORT,
                "note": FEDSC_STANDIN_BUDGET,
                "table": "standin",
                "cells": FEDSC_STANDIN_CELLS,
                "delta": config["fedsc"]["standin"]["delta"],
            },
        script:
            ENTRY

    rule fedsc_standin_claims:
        input:
            probes=sorted({c["path"] for c in fedsc_plan.claim_cells(FEDSC_STANDIN_CLAIMS)}),
            summaries=fedsc_plan.summary_inputs(fedsc_plan.claim_cells(FEDSC_STANDIN_CLAIMS)),
            meta=fedsc_plan.meta_files(RESULTS, FEDSC_STANDIN_DATASETS),
            code=code_for(FEDSC_CLAIMS_ENTRY),
        output:
            md=f"{FEDSC_OUT}/tables/standin_claims.md",
            csv=f"{FEDSC_OUT}/tables/standin_claims.csv",
            tex=f"{FEDSC_OUT}/tables/standin_claims.tex",
        log:
            f"{RESULTS}/logs/fedsc/standin_claims.log",
        conda:
            CONDA_ENV
        resources:
            **cpu_resources(),
        params:
            entry=FEDSC_CLAIMS_ENTRY,
            spec={
                **FEDSC_REPORT,
                "note": ". ".join(filter(None, [FEDSC_STANDIN_BUDGET, config["fedsc"]["standin"].get("note", "")])),
                "collapse_counted": config["fedsc"]["standin"].get("collapse_counted", []),
                "title": f"FedSC claims on the generated stand-ins {', '.join(FEDSC_STANDIN_DATASETS)}",
                "claims": FEDSC_STANDIN_CLAIMS,
            },
        script:
            ENTRY

    rule fedsc_standin_samples:
        input:
            data=lambda w: prepared(w.dataset),
            code=code_for("fedrepro.report.fedsc:samples_figure"),
        output:
            png=report(
                f"{FEDSC_OUT}/figures/standin_samples_{{dataset}}.png", caption="../report/fedsc.rst", category="FedSC"
            ),
            pdf=f"{FEDSC_OUT}/figures/standin_samples_{{dataset}}.pdf",
        log:
            f"{RESULTS}/logs/fedsc/standin_samples_{{dataset}}.log",
        wildcard_constraints:
            dataset="|".join(FEDSC_STANDIN_DATASETS),
        conda:
            CONDA_ENV
        resources:
            **cpu_resources(),
        params:
            entry="fedrepro.report.fedsc:samples_figure",
            spec={**FEDSC_REPORT, "per_class": 4},
        script:
            ENTRY

    rule fedsc_standin:
        input:
            rules.fedsc_standin_table.output,
            rules.fedsc_standin_claims.output,
            expand(rules.fedsc_standin_samples.output, dataset=FEDSC_STANDIN_DATASETS),
        localrule: True

    # The ablations of fedsc.standin.ablations on every stand-in (not in the default run).
    rule fedsc_ablations_table:
        input:
            probes=[cell["path"] for cell in FEDSC_ABLATION_CELLS],
            summaries=fedsc_plan.summary_inputs(FEDSC_ABLATION_CELLS),
            meta=fedsc_plan.meta_files(RESULTS, FEDSC_STANDIN_DATASETS),
            code=code_for("fedrepro.report.fedsc_claims:ablation_table"),
        output:
            md=f"{FEDSC_OUT}/tables/ablations.md",
            csv=f"{FEDSC_OUT}/tables/ablations.csv",
            tex=f"{FEDSC_OUT}/tables/ablations.tex",
        log:
            f"{RESULTS}/logs/fedsc/ablations.log",
        conda:
            CONDA_ENV
        resources:
            **cpu_resources(),
        params:
            entry="fedrepro.report.fedsc_claims:ablation_table",
            spec={
                **FEDSC_REPORT,
                "note": FEDSC_STANDIN_BUDGET,
                "cells": FEDSC_ABLATION_CELLS,
                "collapse_counted": config["fedsc"]["standin"].get("collapse_counted", []),
            },
        script:
            ENTRY

    rule fedsc_ablations:
        input:
            rules.fedsc_ablations_table.output,
        localrule: True


PAPER_TARGETS["fedsc"] = [
    *[output for name in FEDSC_PROBE_TABLES for output in getattr(rules, f"fedsc_{name}").output],
    *rules.fedsc_table6.output,
    *rules.fedsc_privacy.output,
    *rules.fedsc_claims.output,
    *rules.fedsc_figure2.output,
]


rule fedsc:
    input:
        PAPER_TARGETS["fedsc"],
    localrule: True
