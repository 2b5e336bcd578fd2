# fedrepro: one pipeline for FedSC, DPZV, FedAL and SteFFLe (see README.md).
from snakemake.utils import min_version

# the major version pyproject.toml pins; `workflow.config_settings` below is Snakemake's 8+ API
min_version("9.0")

from fedrepro.config import check_config, check_config_files, coerce_overrides, enabled_papers

check_config_files(["config.yaml", *workflow.config_settings.configfiles])


configfile: "config.yaml"


coerce_overrides(config, workflow.config_settings.config)


report: "workflow/report/workflow.rst"


check_config(config, f"{workflow.basedir}/workflow/schemas", fit_cache=".snakemake/fedrepro_fit.json")
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
