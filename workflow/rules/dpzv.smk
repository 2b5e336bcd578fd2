# DPZV (zeroth-order vertical FL with scalar DP): training runs, peak memory, Figures 2-6, claims table.
from fedrepro.algorithms import methods as dpzv_methods
from fedrepro.experiments import dpzv as dpzv_plan
from fedrepro.experiments import index as dpzv_index

DPZV_RUNS = dpzv_plan.runs(config)
DPZV = dpzv_index(DPZV_RUNS)
DPZV_FIGURE_RUNS = dpzv_plan.figure_runs(config, DPZV_RUNS)
DPZV_OUT = f"{RESULTS}/dpzv"
DPZV_RUN = "{dataset}/{method}/{setting}/{seeds}"
DPZV_MEMORY = dpzv_plan.memory_datasets(config)
DPZV_MEMORY_TABLES = expand(f"{DPZV_OUT}/memory/{{dataset}}.csv", dataset=DPZV_MEMORY)


DPZV_REPORT_INPUTS = {
    job: dpzv_plan.report_inputs(job, run_folders("dpzv", DPZV_FIGURE_RUNS.get(reads["runs"], [])), DPZV_MEMORY_TABLES)
    for job, reads in dpzv_plan.REPORT_JOBS.items()
}


rule dpzv_train:
    input:
        data=lambda w: prepared(w.dataset),
        partition=lambda w: partition_file(w.dataset, planned_run(DPZV, w).partition),
        # the staged checkpoint of a pre-trained client encoder (pretrained_dir), none otherwise
        pretrained=lambda w: pretrained.markers(planned_run(DPZV, w).spec),
        code=code_for(lambda w: dpzv_methods("dpzv")[w.method]),
    output:
        metrics=f"{DPZV_OUT}/runs/{DPZV_RUN}/metrics.parquet",
        summary=f"{DPZV_OUT}/runs/{DPZV_RUN}/summary.json",
    log:
        f"{RESULTS}/logs/dpzv/{DPZV_RUN}.log",
    wildcard_constraints:
        dataset="[^/]+",
        method="[^/]+",
        setting="[^/]+",
        seeds="s[0-9_]+",
    conda:
        CONDA_ENV
    threads: config["resources"]["train"]["threads"]
    resources:
        **train_resources(),
    params:
        entry=lambda w: dpzv_methods("dpzv")[w.method],
        spec=lambda w: planned_run(DPZV, w).spec,
    script:
        ENTRY


rule dpzv_memory:
    input:
        data=lambda w: prepared(w.dataset),
        partition=lambda w: partition_file(w.dataset, dpzv_plan.partition_tag(config["dpzv"]["datasets"][w.dataset])),
        pretrained=lambda w: pretrained.markers(dpzv_plan.memory_spec(config, w.dataset)),
        code=code_for("fedrepro.algorithms.dpzv.memory:memory_job"),
    output:
        table=f"{DPZV_OUT}/memory/{{dataset}}.csv",
        json=f"{DPZV_OUT}/memory/{{dataset}}.json",
    log:
        f"{RESULTS}/logs/dpzv/memory_{{dataset}}.log",
    conda:
        CONDA_ENV
    threads: config["resources"]["train"]["threads"]
    resources:
        **train_resources(),
    params:
        entry="fedrepro.algorithms.dpzv.memory:memory_job",
        spec=lambda w: dpzv_plan.memory_spec(config, w.dataset),
    script:
        ENTRY


rule dpzv_figure:
    input:
        unpack(lambda w: DPZV_REPORT_INPUTS[dpzv_plan.FIGURE_JOBS[w.figure]]),
        code=code_for(lambda w: f"fedrepro.report.dpzv:{dpzv_plan.FIGURE_JOBS[w.figure]}"),
    output:
        png=report(f"{DPZV_OUT}/figures/{{figure}}.png", caption="../report/dpzv.rst", category="DPZV"),
        pdf=f"{DPZV_OUT}/figures/{{figure}}.pdf",
    log:
        f"{RESULTS}/logs/dpzv/{{figure}}.log",
    wildcard_constraints:
        figure="|".join(dpzv_plan.FIGURE_JOBS),
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry=lambda w: f"fedrepro.report.dpzv:{dpzv_plan.FIGURE_JOBS[w.figure]}",
        spec=lambda w: dpzv_plan.report_spec(config, dpzv_plan.FIGURE_JOBS[w.figure]),
    script:
        ENTRY


rule dpzv_table:
    input:
        unpack(lambda w: DPZV_REPORT_INPUTS[dpzv_plan.TABLE_JOBS[w.table]]),
        code=code_for(lambda w: f"fedrepro.report.dpzv:{dpzv_plan.TABLE_JOBS[w.table]}"),
    output:
        md=f"{DPZV_OUT}/tables/{{table}}.md",
        csv=report(f"{DPZV_OUT}/tables/{{table}}.csv", caption="../report/dpzv_table.rst", category="DPZV"),
        tex=f"{DPZV_OUT}/tables/{{table}}.tex",
    log:
        f"{RESULTS}/logs/dpzv/table_{{table}}.log",
    wildcard_constraints:
        table="|".join(dpzv_plan.TABLE_JOBS),
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry=lambda w: f"fedrepro.report.dpzv:{dpzv_plan.TABLE_JOBS[w.table]}",
        spec=lambda w: dpzv_plan.report_spec(config, dpzv_plan.TABLE_JOBS[w.table]),
    script:
        ENTRY


rule dpzv_claims:
    input:
        **DPZV_REPORT_INPUTS["claims"],
        code=code_for("fedrepro.report.dpzv:claims"),
    output:
        md=f"{DPZV_OUT}/tables/claims.md",
        csv=report(f"{DPZV_OUT}/tables/claims.csv", caption="../report/dpzv_claims.rst", category="DPZV"),
        tex=f"{DPZV_OUT}/tables/claims.tex",
        privacy_md=f"{DPZV_OUT}/tables/privacy.md",
        privacy_csv=report(f"{DPZV_OUT}/tables/privacy.csv", caption="../report/dpzv_privacy.rst", category="DPZV"),
        privacy_tex=f"{DPZV_OUT}/tables/privacy.tex",
    log:
        f"{RESULTS}/logs/dpzv/claims.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.dpzv:claims",
        spec=dpzv_plan.report_spec(config, "claims"),
    script:
        ENTRY


PAPER_TARGETS["dpzv"] = [
    *[f"{DPZV_OUT}/figures/{stem}.{ext}" for stem in dpzv_plan.FIGURE_JOBS for ext in ("png", "pdf")],
    *[f"{DPZV_OUT}/tables/{stem}.{ext}" for stem in dpzv_plan.TABLE_JOBS for ext in ("md", "csv", "tex")],
    *rules.dpzv_claims.output,
]


rule dpzv:
    input:
        PAPER_TARGETS["dpzv"],
    localrule: True
