# Empirical privacy audit (fedrepro.report.audit): canary-based lower bounds on epsilon for
# FedSC's DP-CalR release and DPZV's label channel, against the claimed epsilons.
# `audit` (small n) is part of the default run; `audit_full` (make audit) is the tight version.
from fedrepro.report.audit import SETTINGS as AUDIT_SETTINGS

AUDIT_ENTRY = "fedrepro.report.audit:write_audit"


rule audit:
    input:
        code=code_for(AUDIT_ENTRY),
    output:
        csv=f"{RESULTS}/privacy/audit.csv",
        md=f"{RESULTS}/privacy/audit.md",
    log:
        f"{RESULTS}/logs/privacy/audit.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry=AUDIT_ENTRY,
        spec={"level": "quick", "settings": AUDIT_SETTINGS["quick"]},
    script:
        ENTRY


rule audit_full:
    input:
        code=code_for(AUDIT_ENTRY),
    output:
        csv=f"{RESULTS}/privacy/audit_full.csv",
        md=f"{RESULTS}/privacy/audit_full.md",
    log:
        f"{RESULTS}/logs/privacy/audit_full.log",
    conda:
        CONDA_ENV
    resources:
        **{**cpu_resources(), "runtime": 180},  # minutes: the full audit takes tens of CPU-minutes
    params:
        entry=AUDIT_ENTRY,
        spec={"level": "full", "settings": AUDIT_SETTINGS["full"]},
    script:
        ENTRY


# The quick audit is part of the default run whenever one of the audited papers is enabled.
for _paper in ("fedsc", "dpzv"):
    if _paper in PAPERS:
        PAPER_TARGETS[_paper] = [*PAPER_TARGETS.get(_paper, []), *rules.audit.output]
        break
