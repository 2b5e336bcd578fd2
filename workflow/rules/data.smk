# Data stage: raw files (download or pre-staged), prepared arrays, partitions.
localrules:
    download,


rule download:
    input:
        code=code_for("fedrepro.data.jobs:download_job"),
    output:
        marker=f"{DATA_ROOT}/{{dataset}}/.complete",
    log:
        f"{RESULTS}/logs/download/{{dataset}}.log",
    conda:
        CONDA_ENV
    params:
        entry="fedrepro.data.jobs:download_job",
        spec=lambda w: {"dataset": w.dataset, "data_root": DATA_ROOT},
    script:
        ENTRY


rule prepare:
    input:
        raw_inputs,
        # the job runs the shared preparation and its own data set's builder, nothing else
        code=code_for(lambda w: ["fedrepro.data.jobs:prepare_job", BUILDERS[w.dataset]]),
    output:
        arrays=f"{RESULTS}/data/{{dataset}}/arrays.npz",
        meta=f"{RESULTS}/data/{{dataset}}/meta.json",
    log:
        f"{RESULTS}/logs/prepare/{{dataset}}.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.data.jobs:prepare_job",
        spec=lambda w: {
            "data_root": DATA_ROOT,
            "options": config["datasets"].get(w.dataset, {}),
            "builder": BUILDERS[w.dataset],
        },
    script:
        ENTRY


rule partition:
    input:
        arrays=f"{RESULTS}/data/{{dataset}}/arrays.npz",
        code=code_for("fedrepro.data.partition:partition_job"),
    output:
        partition=f"{RESULTS}/partitions/{{dataset}}/{{tag}}.npz",
    log:
        f"{RESULTS}/logs/partition/{{dataset}}/{{tag}}.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry="fedrepro.data.partition:partition_job",
    script:
        ENTRY
