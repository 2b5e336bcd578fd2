# The one script every rule runs: hand the job to the package (see fedrepro.pipeline). Its own code is
# part of every job's code fingerprint (fedrepro.codedeps.SCRIPTS); Snakemake sets __file__ to this file.
from fedrepro.pipeline import run_snakemake_job

run_snakemake_job(snakemake, __file__)  # noqa: F821 (injected by Snakemake)
