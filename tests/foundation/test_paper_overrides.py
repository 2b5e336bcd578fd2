"""configs/paper.yaml holds only overrides: no entry repeats the value config.yaml already gives it.

Snakemake merges the two files key by key (mappings merge, everything else replaces), so an entry equal to
the quick value changes nothing and is a second copy of one fact. `repeated_entries` finds them; run this
file to list them (`python -m pytest tests/foundation/test_paper_overrides.py`).
"""

import json

from fedrepro.config import load_yaml, merge_configs
from tests.foundation.test_config import ROOT


def _same(a, b) -> bool:
    """Equal as the merged config sees them: 1 and 1.0 (or True) differ, as they do in a job's spec."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def repeated_entries(base: dict, override: dict, path: str = "") -> list[str]:
    """Dotted keys of `override` whose removal leaves merge_configs(base, override) unchanged."""
    found = []
    for key, value in override.items():
        here = f"{path}.{key}" if path else str(key)
        if key not in base:
            continue
        if isinstance(value, dict) and isinstance(base[key], dict):
            inner = repeated_entries(base[key], value, here)
            whole = inner == [f"{here}.{k}" for k in value]  # every entry repeated (or {}): name the key itself
            found += [here] if whole else inner
        elif _same(value, base[key]):
            found.append(here)
    return found


def test_repeated_entries_finds_what_the_merge_ignores():
    base = {"a": 1, "b": {"c": [1, 2], "d": 0.5, "e": {"f": 1}}, "g": {"h": 1}, "i": 1.0, "j": {"k": {"l": 1, "m": 2}}}
    override = {"a": 1, "b": {"c": [1, 2], "d": 0.25, "e": {"f": 1}}, "g": {}, "i": 1, "j": {"k": {"l": 1}}, "n": 3}
    assert repeated_entries(base, override) == ["a", "b.c", "b.e", "g", "j"]
    base["j"]["o"], override["j"]["o"] = {"p": 1}, {"p": 2}  # j.k's one entry no longer stands for all of j
    assert repeated_entries(base, override) == ["a", "b.c", "b.e", "g", "j.k"]
    for key in ("a", "g"):  # removing what it names leaves the merge unchanged
        smaller = {k: v for k, v in override.items() if k != key}
        assert _same(merge_configs(base, smaller), merge_configs(base, override))


def test_paper_yaml_repeats_no_quick_value():
    base, paper = load_yaml(ROOT / "config.yaml"), load_yaml(ROOT / "configs" / "paper.yaml")
    repeated = repeated_entries(base, paper)
    assert repeated == [], f"configs/paper.yaml repeats config.yaml's value at: {', '.join(repeated)}"
