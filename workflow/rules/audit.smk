# Empirical privacy audit (fedrepro.audit): canary runs of the classes of every private mechanism
# (FedSC, DPZV paper / frozen head / dp_head and its baselines VAFL, ZOO-VFL, VFL-CZOFO, SteFFLe, DP-FERMI, Tran,
# Ling), a Clopper-Pearson lower bound on epsilon against the epsilon of the attacker's adversary, and power.
# `audit` (config audit.runs.quick) is part of the default run; `audit_full` (make audit) uses audit.runs.full.
AUDIT_ENTRY = "fedrepro.report.audit:write_audit"
# each level's spec: the audit block with that level's runs per world only
AUDIT_SPECS = {
    level: {**{k: v for k, v in config["audit"].items() if k != "runs"}, "level": level, "runs": runs}
    for level, runs in config["audit"]["runs"].items()
}


rule audit:
    input:
        code=code_for(AUDIT_ENTRY),
    output:
        csv=report(f"{RESULTS}/privacy/audit.csv", caption="../report/audit.rst", category="Privacy audit"),
        md=f"{RESULTS}/privacy/audit.md",
    log:
        f"{RESULTS}/logs/privacy/audit.log",
    conda:
        CONDA_ENV
    resources:
        **cpu_resources(),
    params:
        entry=AUDIT_ENTRY,
        spec=AUDIT_SPECS["quick"],
    script:
        ENTRY


rule audit_full:
    input:
        code=code_for(AUDIT_ENTRY),
    output:
        csv=report(f"{RESULTS}/privacy/audit_full.csv", caption="../report/audit.rst", category="Privacy audit"),
        md=f"{RESULTS}/privacy/audit_full.md",
    log:
        f"{RESULTS}/logs/privacy/audit_full.log",
    conda:
        CONDA_ENV
    resources:
        **{**cpu_resources(), "runtime": 240},  # minutes: the full audit takes tens of CPU-minutes
    params:
        entry=AUDIT_ENTRY,
        spec=AUDIT_SPECS["full"],
    script:
        ENTRY


# The quick audit is part of the default run whenever one of the audited papers is enabled.
for _paper in ("fedsc", "dpzv", "steffle"):
    if _paper in PAPERS:
        PAPER_TARGETS[_paper] = [*PAPER_TARGETS.get(_paper, []), *rules.audit.output]
        break
