# Helpers shared by the rule files (paths, seeds, resources, code inputs, targets).
from pathlib import Path

from fedrepro.data.sources import raw_files
from fedrepro.experiments import seed_tags

RESULTS = config["results"]
DATA_ROOT = config["data_root"]
ENTRY = "../scripts/entry.py"
CONDA_ENV = "../envs/fedrepro.yaml"
SRC = Path(workflow.basedir) / "src" / "fedrepro"
# Code every training job runs; each paper's rules add their own modules to it.
SHARED_CODE = ["fl", "pipeline.py", "registry.py", "data/tensors.py", "data/arrays.py", "data/partition.py",
               "models/__init__.py", "models/small.py", "eval/classify.py", "privacy/mechanisms.py",
               "privacy/accountant.py"]

# Each paper's rule file registers the outputs its named target builds.
PAPER_TARGETS = {}


def all_targets():
    return [target for paper in PAPERS for target in PAPER_TARGETS.get(paper, [])]


def seeds_of(paper):
    return seed_tags(config[paper])


def prepared(dataset):
    return f"{RESULTS}/data/{dataset}/arrays.npz"


def partition_file(dataset, tag):
    return f"{RESULTS}/partitions/{dataset}/{tag}.npz"


def code_files(*parts):
    """Source files a job's results depend on: the shared core plus `parts`
    (for example "algorithms/fedsc"), so editing a paper's code re-runs only its jobs."""
    files = []
    for part in [*SHARED_CODE, *parts]:
        path = SRC / part
        files += sorted(map(str, path.rglob("*.py"))) if path.is_dir() else [str(path)]
    return files


def planned_run(runs_by_key, wildcards):
    """The planner's Run for a job's (dataset, method, setting) wildcards."""
    return runs_by_key[(wildcards.dataset, wildcards.method, wildcards.setting)]


def raw_inputs(wildcards):
    """The download marker for data sets with raw files; nothing for generated or shipped ones."""
    shipped = config["datasets"].get(wildcards.dataset, {}).get("source") == "shipped"
    if shipped or not raw_files(wildcards.dataset):
        return []
    return f"{DATA_ROOT}/{wildcards.dataset}/.complete"


def run_folders(paper, runs):
    return [run.folder(RESULTS, paper, tag) for run in runs for tag in seeds_of(paper)]


def train_resources(kind="train"):
    """Resources of a job family; GPU jobs go to the GPU partition on SLURM."""
    res = config["resources"][kind]
    gpus = res.get("gpu", 0)
    partition = config["cluster"]["gpu_partition" if gpus else "cpu_partition"]
    resources = dict(gpu=gpus, mem_mb=res["mem_mb"], runtime=res["runtime"], slurm_partition=partition)
    if gpus and config["cluster"].get("gpu_model"):
        resources["gpu_model"] = config["cluster"]["gpu_model"]
    return resources


def cpu_resources():
    return train_resources("cpu")
