# fedrepro: one pipeline for FedSC, DPZV, FedAL and SteFFLe (see README.md).
import os

from snakemake.utils import min_version

# the major version pyproject.toml pins; `workflow.config_settings` below is Snakemake's 8+ API
min_version("9.0")

from fedrepro.bytecode import cache_byte_code

# Byte code compiled once and read by every job (and by this process's later imports), whatever
# PYTHONDONTWRITEBYTECODE says: a job's imports take half the CPU time (fedrepro.bytecode).
cache_byte_code()

from fedrepro.config import check_config, check_config_files, coerce_overrides, enabled_papers
from fedrepro.experiments.fit import shared_cache
from fedrepro.plan import print_duration_warnings

# config.yaml beside this file is the base; a working folder of its own (`-d .test`, the workflow
# catalog's test configuration) may hold a config.yaml of overrides, read after it
BASE_CONFIG = f"{workflow.basedir}/config.yaml"
LOCAL_CONFIG = (
    ["config.yaml"] if os.path.exists("config.yaml") and not os.path.samefile("config.yaml", BASE_CONFIG) else []
)
check_config_files([BASE_CONFIG, *LOCAL_CONFIG, *workflow.config_settings.configfiles])


configfile: BASE_CONFIG


if LOCAL_CONFIG:

    configfile: "config.yaml"


coerce_overrides(config, workflow.config_settings.config)


report: "workflow/report/workflow.rst"


check_config(config, f"{workflow.basedir}/workflow/schemas", fit_cache=shared_cache())
print_duration_warnings(config)
PAPERS = enabled_papers(config)


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"


if "fedavg" in PAPERS:

    include: "workflow/rules/fedavg.smk"


if "fedsc" in PAPERS:

    include: "workflow/rules/fedsc.smk"


if "dpzv" in PAPERS:

    include: "workflow/rules/dpzv.smk"


if "fedal" in PAPERS:

    include: "workflow/rules/fedal.smk"


if "steffle" in PAPERS:

    include: "workflow/rules/steffle.smk"


include: "workflow/rules/audit.smk"
include: "workflow/rules/report.smk"


check_code_inputs(workflow.rules)


rule all:
    default_target: True
    input:
        rules.index.output,
