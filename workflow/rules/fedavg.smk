# Supervised FedAvg through the whole chain: the foundation's worked example.
from fedrepro.algorithms import methods
from fedrepro.experiments import fedavg as fedavg_plan
from fedrepro.experiments import index

FEDAVG_RUNS = fedavg_plan.runs(config)
FEDAVG = index(FEDAVG_RUNS)
FEDAVG_OUT = f"{RESULTS}/fedavg"
FEDAVG_RUN = "{dataset}/{method}/{setting}/{seeds}"


rule fedavg_train:
    input:
        data=lambda w: prepared(w.dataset),
        partition=lambda w: partition_file(w.dataset, planned_run(FEDAVG, w).partition),
        code=code_for(lambda w: methods("fedavg")[w.method]),
    output:
        metrics=f"{FEDAVG_OUT}/runs/{FEDAVG_RUN}/metrics.parquet",
        summary=f"{FEDAVG_OUT}/runs/{FEDAVG_RUN}/summary.json",
    log:
        f"{RESULTS}/logs/fedavg/{FEDAVG_RUN}.log",
    conda:
        CONDA_ENV
    threads: config["resources"]["train"]["threads"]
    resources:
        **train_resources(),
    params:
        entry=lambda w: methods("fedavg")[w.method],
        spec=lambda w: planned_run(FEDAVG, w).spec,
    script:
        ENTRY


FEDAVG_FOLDERS = run_folders("fedavg", FEDAVG_RUNS)
FEDAVG_REPORT = {"scale": config["scale"], "decimals": config["report"]["decimals"]}


rule fedavg_accuracy_table:
    input:
        summaries=[f"{folder}/summary.json" for folder in FEDAVG_FOLDERS],
        code=code_for("fedrepro.report.fedavg:accuracy_table"),
    output:
        md=f"{FEDAVG_OUT}/tables/accuracy.md",
        csv=report(f"{FEDAVG_OUT}/tables/accuracy.csv", caption="../report/fedavg_table.rst", category="FedAvg"),
        tex=f"{FEDAVG_OUT}/tables/accuracy.tex",
    log:
        f"{RESULTS}/logs/fedavg/accuracy_table.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.fedavg:accuracy_table",
        spec=FEDAVG_REPORT,
    script:
        ENTRY


rule fedavg_accuracy_figure:
    input:
        metrics=[f"{folder}/metrics.parquet" for folder in FEDAVG_FOLDERS],
        code=code_for("fedrepro.report.fedavg:accuracy_figure"),
    output:
        png=report(f"{FEDAVG_OUT}/figures/accuracy.png", caption="../report/fedavg_accuracy.rst", category="FedAvg"),
        pdf=f"{FEDAVG_OUT}/figures/accuracy.pdf",
    log:
        f"{RESULTS}/logs/fedavg/accuracy_figure.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.report.fedavg:accuracy_figure",
        spec=FEDAVG_REPORT,
    script:
        ENTRY


PAPER_TARGETS["fedavg"] = [
    *rules.fedavg_accuracy_table.output,
    *rules.fedavg_accuracy_figure.output,
]


rule fedavg:
    input:
        PAPER_TARGETS["fedavg"],
    localrule: True
