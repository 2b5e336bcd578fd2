# Cross-paper report: an index of every table and figure that was built.


rule index:
    input:
        targets=all_targets(),
        code=code_for("fedrepro.report.index:write_index"),
    output:
        index=f"{RESULTS}/index.md",
    log:
        f"{RESULTS}/logs/index.log",
    localrule: True
    conda:
        CONDA_ENV
    params:
        entry="fedrepro.report.index:write_index",
        spec={"scale": config["scale"], "papers": PAPERS, "results": RESULTS},
    script:
        ENTRY
