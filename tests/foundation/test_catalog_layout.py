"""The Snakemake workflow catalog's layout: the Snakefile at workflow/Snakefile (where the catalog and
Snakemake look from the root), and the privacy audit's table among the report's results."""

import json
import re
import sys

from tests import limits
from tests.rules import ROOT

_REPORTED = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.io import is_flagged
from snakemake.settings.types import ConfigSettings, OutputSettings, Quietness, ResourceSettings
root = sys.argv[1]
with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
    workflow = api.workflow(
        ResourceSettings(), ConfigSettings(), snakefile=Path(root, "workflow", "Snakefile"), workdir=Path(root)
    )
    reported = {r.name: [str(f) for f in r.output if is_flagged(f, "report")] for r in workflow._workflow.rules}
print("REPORTED " + json.dumps(reported))
"""


def test_the_snakefile_is_where_the_catalog_looks():
    assert (ROOT / "workflow" / "Snakefile").is_file()
    assert not (ROOT / "Snakefile").exists()  # the catalog reads workflow/Snakefile whenever workflow/ exists


def test_the_audit_table_is_in_the_html_report():
    run = limits.run([sys.executable, "-c", _REPORTED, str(ROOT)], capture_output=True, text=True, timeout=300)
    listed = re.search(r"^REPORTED (.*)$", run.stdout, re.M)
    assert run.returncode == 0 and listed, (run.stdout + run.stderr)[-3000:]
    reported = json.loads(listed.group(1))
    assert [path for path in reported["audit"] if path.endswith("privacy/audit.csv")]
    assert [path for path in reported["audit_full"] if path.endswith("privacy/audit_full.csv")]
