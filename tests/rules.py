"""The workflow's rules as text, for tests that check which rules exist or what they declare."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rule_bodies() -> dict[str, str]:
    """Rule name -> its text, over every rule file; rules indented under an `if` (fedsc.smk's stand-in
    rules under `if FEDSC_STANDIN:`) count too."""
    bodies = {}
    for path in sorted((ROOT / "workflow/rules").glob("*.smk")):
        parts = re.split(r"^[ \t]*rule (\w+):$", path.read_text(), flags=re.MULTILINE)
        bodies.update(zip(parts[1::2], parts[2::2]))
    return bodies
