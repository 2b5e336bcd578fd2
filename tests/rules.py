"""The workflow's rules, for tests that check which rules exist or what they declare."""

import json
import re
import sys
from pathlib import Path

from tests import limits

ROOT = Path(__file__).resolve().parents[1]

# Run in a process of its own: the Snakemake API changes the working folder and sets up its logger. Snakemake
# has no public call that returns the parsed rules (`--list-rules` prints names only), so this reads the
# Workflow object the API builds (`WorkflowApi._workflow`, Snakemake 9: pyproject.toml pins <10).
_LIST_RULES = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, Quietness, ResourceSettings
root, configfiles, config = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
    workflow = api.workflow(
        ResourceSettings(),
        ConfigSettings(config=config, configfiles=[Path(root, f) for f in configfiles]),
        snakefile=Path(root, "workflow", "Snakefile"),
        workdir=Path(root),
    )
    rules = {rule.name: sorted(rule.params.keys()) for rule in workflow._workflow.rules}
print("RULES " + json.dumps(rules))
"""


def workflow_rules(configfiles: list[str], config: dict[str, str]) -> dict[str, list[str]]:
    """Rule name -> the names of its params, for every rule the workflow defines under these config files
    (relative to the repository) and overrides, as Snakemake parsed them: rules generated in a loop
    (`rule: name: f"fedsc_{_table}"`) and rules under an `if` count as Snakemake sees them."""
    run = limits.run(
        [sys.executable, "-c", _LIST_RULES, str(ROOT), json.dumps(configfiles), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    listed = re.search(r"^RULES (.*)$", run.stdout, re.M)
    assert run.returncode == 0 and listed, f"listing the workflow's rules failed:\n{(run.stdout + run.stderr)[-3000:]}"
    return json.loads(listed.group(1))
