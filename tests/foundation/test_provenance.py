"""A job runs only with the code it was planned with: code edited after Snakemake parsed the
workflow (or fingerprinted by another checkout sharing the results folder) fails the job before it
computes anything, instead of recording a result under code that did not make it."""

from pathlib import Path

import pytest

from fedrepro.codedeps import code_inputs
from fedrepro.pipeline import make_job, run_job, stale_code

ENTRY = "fedrepro.registry:resolve"


def planned_job(tmp_path):
    code = code_inputs(ENTRY, tmp_path / "code")
    return make_job({}, {"out": str(tmp_path / "out.txt")}, {"code": code}, log=str(tmp_path / "job.log")), code


def test_code_as_planned_is_not_stale(tmp_path):
    job, _ = planned_job(tmp_path)
    assert stale_code(job) == []


def test_a_module_edited_after_planning_fails_the_job_naming_it(tmp_path):
    job, code = planned_job(tmp_path)
    fingerprint = next(Path(p) for p in code if Path(p).name == "fedrepro.registry.sha256")
    fingerprint.write_text("0" * 64 + "\n")  # what the planning parse saw differs from what runs now
    assert stale_code(job) == ["fedrepro.registry"]
    with pytest.raises(RuntimeError, match="the code of fedrepro.registry changed after Snakemake planned"):
        run_job(job, ENTRY)
    assert "changed after Snakemake planned" in Path(job.log).read_text()
