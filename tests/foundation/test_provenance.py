"""A job runs only with the code it was planned with: code edited after Snakemake parsed the
workflow (or fingerprinted by another checkout sharing the results folder) fails the job before it
computes anything, instead of recording a result under code that did not make it."""

from pathlib import Path

import pytest

from fedrepro.codedeps import code_inputs, read_fingerprint, script_hash
from fedrepro.pipeline import make_job, run_job, stale_code

ENTRY = "fedrepro.registry:resolve"


def planned_job(tmp_path):
    code = code_inputs(ENTRY, tmp_path / "code")
    return make_job({}, {"out": str(tmp_path / "out.txt")}, {"code": code}, log=str(tmp_path / "job.log")), code


def planned(code: str, name: str, value: str) -> None:
    """Make the fingerprint file `code` say that `name` was planned with hash `value`."""
    lines = {**read_fingerprint(code), name: value}
    Path(code).write_text("".join(f"{key} {hash_}\n" for key, hash_ in lines.items()))


def test_code_as_planned_is_not_stale(tmp_path):
    job, _ = planned_job(tmp_path)
    assert stale_code(job) == []


def test_a_module_edited_after_planning_fails_the_job_naming_it(tmp_path):
    job, code = planned_job(tmp_path)
    planned(code, "fedrepro.registry", "0" * 64)  # what the planning parse saw differs from what runs now
    assert stale_code(job) == ["fedrepro.registry"]
    with pytest.raises(RuntimeError, match="the code of fedrepro.registry changed after Snakemake planned"):
        run_job(job, ENTRY)
    assert "changed after Snakemake planned" in Path(job.log).read_text()


def test_an_edited_entry_script_fails_the_job_that_runs_it(tmp_path):
    """The workflow script a job runs (job.script, workflow/scripts/entry.py) is checked like a module."""
    script = tmp_path / "workflow" / "scripts" / "entry.py"
    script.parent.mkdir(parents=True)
    script.write_text("run(snakemake)\n")
    job, code = planned_job(tmp_path)
    planned(code, "workflow/scripts/entry.py", script_hash(script))
    job.script = str(script)
    assert stale_code(job) == []
    script.write_text("import torch\ntorch.set_default_dtype(torch.float64)\nrun(snakemake)\n")
    assert stale_code(job) == ["workflow/scripts/entry.py"]
