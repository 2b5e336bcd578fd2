"""Pipeline entries of the data stage (see workflow/rules/data.smk)."""

from __future__ import annotations

from pathlib import Path

from fedrepro.data import sources
from fedrepro.data.prepared import prepare_with
from fedrepro.registry import resolve


def download_job(job) -> None:
    """Fetch (pre-staged copy or download, checksums verified), then write the marker."""
    fetched = sources.fetch(job.spec["dataset"], job.spec["data_root"])
    job.out("marker").write_text("\n".join(str(getattr(f, "path", f)) for f in fetched) + "\n")


def prepare_job(job) -> None:
    """Prepare one data set with its own builder (`spec["builder"]`, from
    fedrepro.data.prepare.BUILDERS): the job runs, and depends on, that module only."""
    out_dir = Path(job.output["arrays"]).parent
    prepare_with(resolve(job.spec["builder"]), job.wildcards["dataset"], out_dir, job.spec["data_root"],
                 job.spec["options"])
