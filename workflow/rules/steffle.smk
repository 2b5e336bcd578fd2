# SteFFLe (private and fair FL): training families, Figures 1-5 and the tables.
from fedrepro.experiments import steffle as steffle_plan

STEFFLE_OUT = f"{RESULTS}/steffle"
STEFFLE_FIGURES = steffle_plan.figures(config)
STEFFLE_FIGURE_RUNS = steffle_plan.figure_runs(config)
STEFFLE_REPORT = steffle_plan.report_spec(config)
STEFFLE_ALL = run_folders("steffle", steffle_plan.main_runs(config))
STEFFLE_REFCODE = run_folders("steffle", steffle_plan.refcode_runs(config))
STEFFLE_GROUPS = steffle_plan.train_groups(config)


# One training job per data set and silo split (steffle.train_jobs: split) or per run (family); each run
# of a job keeps its own folder and cell store (fedrepro.algorithms.steffle.jobs.run_group).
for _group, _runs in STEFFLE_GROUPS.items():

    rule:
        name:
            f"steffle_train_{_group}"
        input:
            **{key: code_for(entry) for key, entry in steffle_plan.code_entries(_runs).items()},
            code=code_for(sorted(set(steffle_plan.code_entries(_runs).values()))),
            data=prepared(_runs[0].dataset),
            partition=partition_file(_runs[0].dataset, _runs[0].partition) if _runs[0].partition else [],
        output:
            **steffle_plan.train_outputs(_runs, RESULTS),
        log:
            f"{RESULTS}/logs/steffle/train/{_group}/{{seeds}}.log",
        conda:
            CONDA_ENV
        threads: config["resources"]["train"]["threads"]
        resources:
            **train_resources(),
        params:
            entry="fedrepro.algorithms.steffle.jobs:run_group",
            spec=steffle_plan.group_spec(_runs),
        script:
            ENTRY


rule steffle_figure:
    input:
        metrics=lambda w: [
            f"{folder}/metrics.parquet"
            for folder in run_folders("steffle", steffle_plan.runs_of_figure(STEFFLE_FIGURE_RUNS, w.figure))
        ],
        summaries=lambda w: [
            f"{folder}/summary.json"
            for folder in run_folders("steffle", steffle_plan.runs_of_figure(STEFFLE_FIGURE_RUNS, w.figure))
        ],
        code=code_for("fedrepro.report.steffle:figure"),
    output:
        png=report(f"{STEFFLE_OUT}/figures/{{figure}}.png", caption="../report/steffle.rst", category="SteFFLe"),
        pdf=f"{STEFFLE_OUT}/figures/{{figure}}.pdf",
    log:
        f"{RESULTS}/logs/steffle/{{figure}}.log",
    wildcard_constraints:
        figure="fig[1-5]",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.steffle:figure",
        spec=lambda w: steffle_plan.figure_spec(config, w.figure),
    script:
        ENTRY


rule steffle_tables:
    input:
        metrics=[f"{folder}/metrics.parquet" for folder in STEFFLE_ALL],
        summaries=[f"{folder}/summary.json" for folder in STEFFLE_ALL],
        code=code_for("fedrepro.report.steffle:tables"),
    output:
        **{
            f"{name}_{ext}": (
                report(
                    f"{STEFFLE_OUT}/tables/{name}.{ext}", caption="../report/steffle_tables.rst", category="SteFFLe"
                )
                if ext == "csv"
                else f"{STEFFLE_OUT}/tables/{name}.{ext}"
            )
            for name in steffle_plan.TABLES
            for ext in ("csv", "md", "tex")
        },
    log:
        f"{RESULTS}/logs/steffle/tables.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.steffle:tables",
        spec=STEFFLE_REPORT,
    script:
        ENTRY


rule steffle_refcode_table:
    input:
        metrics=[f"{folder}/metrics.parquet" for folder in STEFFLE_REFCODE],
        summaries=[f"{folder}/summary.json" for folder in STEFFLE_REFCODE],
        code=code_for("fedrepro.report.steffle:refcode"),
    output:
        **{ext: f"{STEFFLE_OUT}/tables/refcode.{ext}" for ext in ("csv", "md", "tex")},
    log:
        f"{RESULTS}/logs/steffle/refcode.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.steffle:refcode",
        spec=STEFFLE_REPORT,
    script:
        ENTRY


# The authors' grid under compat_refcode (config steffle.refcode_grid); not part of the default run.
rule steffle_refcode:
    input:
        f"{STEFFLE_OUT}/tables/refcode.md",
    localrule: True


PAPER_TARGETS["steffle"] = [
    *[f"{STEFFLE_OUT}/figures/{name}.{ext}" for name in STEFFLE_FIGURES for ext in ("png", "pdf")],
    *rules.steffle_tables.output,
]


rule steffle:
    input:
        PAPER_TARGETS["steffle"],
    localrule: True


# one target rule per figure and table (`snakemake steffle_fig2`, `snakemake steffle_headline`)
STEFFLE_TARGETS = {
    **{name: f"{STEFFLE_OUT}/figures/{name}.png" for name in steffle_plan.FIGURES},
    **{name: f"{STEFFLE_OUT}/tables/{name}.md" for name in steffle_plan.TABLES},
}

for _name, _target in STEFFLE_TARGETS.items():

    rule:
        name:
            f"steffle_{_name}"
        input:
            _target,
        localrule: True
