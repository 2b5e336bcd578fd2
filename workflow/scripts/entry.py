# The one script every rule runs: hand the job to the package (see fedrepro.pipeline).
from fedrepro.pipeline import run_snakemake_job

run_snakemake_job(snakemake)  # noqa: F821 (injected by Snakemake)
