"""A job runs only with the code it was planned with: code edited after Snakemake parsed the
workflow (or fingerprinted by another checkout sharing the results folder) fails the job before it
computes anything, instead of recording a result under code that did not make it; code that changes while
it runs (a parse rewriting its fingerprint, an edited module it imports) fails it at its end, without
outputs, so that Snakemake plans it again."""

import shutil
import sys
from pathlib import Path

import pytest

from fedrepro import codedeps
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


def parse_by_another_checkout(job):
    """The job writes its output while another checkout's parse rewrites the shared fingerprint file."""
    Path(job.output["out"]).write_text("numbers of the code this job started with")
    code = job.input["code"]
    planned(code, "fedrepro.registry", "0" * 64)


def test_a_fingerprint_rewritten_while_the_job_runs_fails_it_and_removes_its_outputs(tmp_path):
    """Snakemake would take the finished job's outputs as made by the code of the later parse (the output is
    newer than the rewritten fingerprint): the job fails at its end, without outputs, so Snakemake plans it
    again."""
    job, code = planned_job(tmp_path)
    with pytest.raises(RuntimeError, match=r"code of .*\.code changed while this job ran"):
        run_job(job, f"{__name__}:parse_by_another_checkout")
    assert not Path(job.output["out"]).exists()
    assert "changed while this job ran" in Path(job.log).read_text()


def writes_its_output(job):
    Path(job.output["out"]).write_text("done")


def test_a_job_whose_code_stayed_keeps_its_outputs(tmp_path):
    job, _ = planned_job(tmp_path)
    run_job(job, f"{__name__}:writes_its_output")
    assert Path(job.output["out"]).read_text() == "done"
    assert job.code is not None and job.code.planned() == read_fingerprint(job.input["code"])


def test_a_module_edited_while_the_job_runs_fails_it(tmp_path, monkeypatch):
    """A module the job imported whose code changed after the job started (one imported inside a function
    runs the edited code) fails the job at its end; a comment edit does not."""
    src = tmp_path / "src" / "fedrepro"
    shutil.copytree(Path(codedeps.__file__).parent, src, ignore=shutil.ignore_patterns("__pycache__"))
    code = code_inputs(ENTRY, tmp_path / "code", src)
    monkeypatch.setattr("fedrepro.pipeline.module_file", lambda name: codedeps.module_file(name, src))
    monkeypatch.setattr("fedrepro.pipeline.code_hash", lambda name: codedeps.code_hash(name, src))
    job = make_job({}, {"out": str(tmp_path / "out.txt")}, {"code": code}, log=str(tmp_path / "job.log"))
    registry = src / "registry.py"

    def edit(addition):
        def entry(job):
            registry.write_text(registry.read_text() + addition)
            writes_its_output(job)

        return entry

    monkeypatch.setattr(sys.modules[__name__], "edits", edit("\n# a comment\n"), raising=False)
    run_job(job, f"{__name__}:edits")
    assert Path(job.output["out"]).exists()
    monkeypatch.setattr(sys.modules[__name__], "edits", edit("\nEDITED = 1\n"))
    job = make_job({}, {"out": str(tmp_path / "out.txt")}, {"code": code}, log=str(tmp_path / "job.log"))
    planned(code, "fedrepro.registry", codedeps.code_hash("fedrepro.registry", src))
    with pytest.raises(RuntimeError, match="fedrepro.registry changed while this job ran"):
        run_job(job, f"{__name__}:edits")
    assert not Path(job.output["out"]).exists()
