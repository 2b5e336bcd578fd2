# FedAL: training runs, Tables IV-IX and Figures 2, 4, 6-11 (planner: fedrepro.experiments.fedal).
from fedrepro.algorithms import methods
from fedrepro.experiments import fedal as fedal_plan
from fedrepro.experiments import index

FEDAL_RUNS = fedal_plan.runs(config)
FEDAL = index(FEDAL_RUNS)
FEDAL_OUT = f"{RESULTS}/fedal"
FEDAL_RUN = "{dataset}/{method}/{setting}/{seeds}"
FEDAL_TABLES = "|".join(fedal_plan.TABLES)
FEDAL_RUN_FIGURES = "|".join(name for name in fedal_plan.FIGURES if name != "fig4")
FEDAL_INPUTS = {
    name: fedal_plan.run_folders(config, RESULTS, fedal_plan.output_runs(config, name))
    for name in fedal_plan.OUTPUTS
    if name != "fig4"
}
FEDAL_CLAIMS = fedal_plan.run_folders(config, RESULTS, fedal_plan.claims_runs(config))
FEDAL_FIG4 = fedal_plan.fig4_partitions(config)


rule fedal_train:
    input:
        data=lambda w: prepared(w.dataset),
        partition=lambda w: partition_file(w.dataset, planned_run(FEDAL, w).partition),
        longer=lambda w: fedal_plan.longer_input(RESULTS, planned_run(FEDAL, w), w.seeds),
        code=code_for(lambda w: [fedal_plan.job_entry(planned_run(FEDAL, w)), methods("fedal")[w.method]]),
    output:
        metrics=f"{FEDAL_OUT}/runs/{FEDAL_RUN}/metrics.parquet",
        summary=f"{FEDAL_OUT}/runs/{FEDAL_RUN}/summary.json",
    log:
        f"{RESULTS}/logs/fedal/{FEDAL_RUN}.log",
    conda:
        CONDA_ENV
    threads: config["resources"]["train"]["threads"]
    resources:
        **train_resources(),
    params:
        entry=lambda w: fedal_plan.job_entry(planned_run(FEDAL, w)),
        spec=lambda w: planned_run(FEDAL, w).spec,
    script:
        ENTRY


rule fedal_table:
    input:
        summaries=lambda w: [f"{folder}/summary.json" for folder in FEDAL_INPUTS[w.name]],
        metrics=lambda w: [f"{folder}/metrics.parquet" for folder in FEDAL_INPUTS[w.name]],
        code=code_for("fedrepro.report.fedal:table"),
    output:
        md=f"{FEDAL_OUT}/tables/{{name}}.md",
        csv=report(f"{FEDAL_OUT}/tables/{{name}}.csv", caption="../report/fedal_table.rst", category="FedAL"),
        tex=f"{FEDAL_OUT}/tables/{{name}}.tex",
    log:
        f"{RESULTS}/logs/fedal/{{name}}.log",
    wildcard_constraints:
        name=FEDAL_TABLES,
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.fedal:table",
        spec=lambda w: fedal_plan.report_spec(config, w.name),
    script:
        ENTRY


rule fedal_claims:
    input:
        summaries=[f"{folder}/summary.json" for folder in FEDAL_CLAIMS],
        code=code_for("fedrepro.report.fedal_claims:table"),
    output:
        md=f"{FEDAL_OUT}/tables/claims.md",
        csv=report(f"{FEDAL_OUT}/tables/claims.csv", caption="../report/fedal_claims.rst", category="FedAL"),
        tex=f"{FEDAL_OUT}/tables/claims.tex",
    log:
        f"{RESULTS}/logs/fedal/claims.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.fedal_claims:table",
        spec=fedal_plan.claims_spec(config),
    script:
        ENTRY


rule fedal_run_figure:
    input:
        metrics=lambda w: [f"{folder}/metrics.parquet" for folder in FEDAL_INPUTS[w.name]],
        summaries=lambda w: [f"{folder}/summary.json" for folder in FEDAL_INPUTS[w.name]],
        code=code_for("fedrepro.report.fedal:figure"),
    output:
        png=report(f"{FEDAL_OUT}/figures/{{name}}.png", caption="../report/fedal.rst", category="FedAL"),
        pdf=f"{FEDAL_OUT}/figures/{{name}}.pdf",
    log:
        f"{RESULTS}/logs/fedal/{{name}}.log",
    wildcard_constraints:
        name=FEDAL_RUN_FIGURES,
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.fedal:figure",
        spec=lambda w: fedal_plan.report_spec(config, w.name),
    script:
        ENTRY


rule fedal_fig4:
    input:
        data=[prepared(dataset) for dataset, _ in FEDAL_FIG4],
        partitions=[partition_file(dataset, tag) for dataset, tag in FEDAL_FIG4],
        code=code_for("fedrepro.report.fedal:partition_figure"),
    output:
        png=report(f"{FEDAL_OUT}/figures/fig4.png", caption="../report/fedal.rst", category="FedAL"),
        pdf=f"{FEDAL_OUT}/figures/fig4.pdf",
    log:
        f"{RESULTS}/logs/fedal/fig4.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.fedal:partition_figure",
        spec=fedal_plan.report_spec(config, "fig4"),
    script:
        ENTRY


PAPER_TARGETS["fedal"] = [
    *[f"{FEDAL_OUT}/tables/{name}.{ext}" for name in fedal_plan.TABLES for ext in ("md", "csv", "tex")],
    *rules.fedal_claims.output,
    *[f"{FEDAL_OUT}/figures/{name}.{ext}" for name in fedal_plan.FIGURES for ext in ("png", "pdf")],
]


# one target rule per table and figure (`snakemake fedal_table7`); fig4's is fedal_fig4_target
# because fedal_fig4 is the rule that draws it; fedal_claims draws the claims table and is its target
FEDAL_TARGETS = {
    **{name: f"{FEDAL_OUT}/tables/{name}.md" for name in fedal_plan.TABLES},
    **{name: f"{FEDAL_OUT}/figures/{name}.png" for name in fedal_plan.FIGURES},
}

for _output, _target in FEDAL_TARGETS.items():

    rule:
        name:
            "fedal_fig4_target" if _output == "fig4" else f"fedal_{_output}"
        input:
            _target,
        localrule: True


localrules:
    fedal,


rule fedal:
    input:
        PAPER_TARGETS["fedal"],
