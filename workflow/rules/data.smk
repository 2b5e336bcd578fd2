# Data stage: raw files (download or pre-staged), pre-trained checkpoint folders, prepared arrays, partitions.
import re

from fedrepro.data import pretrained

# Checkpoint folders (a BERT tokenizer_dir, a pretrained_dir) that the enabled papers read; "(?!)" matches nothing.
PRETRAINED_FOLDERS = pretrained.staged_folders(config, PAPERS)


localrules:
    download,
    stage_pretrained,


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


# Downloads the pinned bert-base-uncased, or checks a pre-staged folder (config key pretrained_source).
rule stage_pretrained:
    input:
        code=code_for("fedrepro.data.pretrained:stage_job"),
    output:
        marker=f"{{folder}}/{pretrained.MARKER}",
    log:
        # beside the marker: a folder may be absolute, which a path under results/logs/ cannot hold
        "{folder}/.staged.log",
    wildcard_constraints:
        folder="|".join(re.escape(folder) for folder in PRETRAINED_FOLDERS) or "(?!)",
    conda:
        CONDA_ENV
    params:
        entry="fedrepro.data.pretrained:stage_job",
        spec=lambda w: {"folder": w.folder, "source": config.get("pretrained_source", "pinned")},
    script:
        ENTRY


rule prepare:
    input:
        raw_inputs,
        # a BERT tokenizer's folder, staged (only with tokenizer: bert)
        pretrained=lambda w: pretrained.dataset_markers(config, w.dataset),
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
