# Helpers shared by the rule files (paths, seeds, resources, code inputs, targets).
from pathlib import Path

from fedrepro.codedeps import code_inputs
from fedrepro.data.prepare import BUILDERS
from fedrepro.data.sources import raw_files
from fedrepro.experiments import seed_tags

RESULTS = config["results"]
DATA_ROOT = config["data_root"]
ENTRY = "../scripts/entry.py"
CONDA_ENV = "../envs/fedrepro.yaml"
SRC = REPO / "src" / "fedrepro"
# One fingerprint file per entry point (fedrepro.codedeps): the hash of every module it may run and of
# workflow/scripts/entry.py, rewritten only when one of them changes, not after comment, docstring or
# layout edits. They are the record of the code that made the results, so they live with the results:
# a results folder moved, copied (with its file times) or shared by two checkouts is judged by its own record.
CODE = f"{RESULTS}/.fedrepro/code"

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


def code_for(entry):
    """The `code` input of a rule: the one fingerprint file of the code its entry point
    ("module:function", a list of them, or a function of the wildcards returning either,
    like `params.entry`) may run, derived by fedrepro.codedeps from the imports. Every rule that runs the
    package declares it (the Snakefile checks)."""
    if callable(entry):
        return lambda wildcards: code_inputs(entry(wildcards), CODE, SRC)
    return code_inputs(entry, CODE, SRC)


def check_code_inputs(rules):
    """Fail at parse time when a rule runs the package (`params.entry`) without `code` input."""
    missing = [rule.name for rule in rules if "entry" in rule.params.keys() and "code" not in rule.input.keys()]
    if missing:
        raise ValueError(
            f"rule(s) {missing} run fedrepro code but have no code input: "
            "add `code=code_for(<the entry>)` to their input"
        )


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
    """Every run's folder per seed job: the run's own seed tags where it has them, else the paper's."""
    return [run.folder(RESULTS, paper, tag) for run in runs for tag in (run.seeds or seeds_of(paper))]


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
