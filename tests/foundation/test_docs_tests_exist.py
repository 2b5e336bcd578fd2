"""Every test that docs/testing.md names exists: a reader following the table to the test of a
mechanism finds it (`file.py::test_name` or `file.py::test_prefix_*`, the file found by its name under tests/, or a bare
`file.py`)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"`((?:tests/)?[\w/]*?(test_\w+\.py))(?:::(test_\w+\*?))?")


def _named_tests():
    text = (REPO / "docs" / "testing.md").read_text()
    return sorted({m.groups(default="") for m in NAMED.finditer(text)})


def _missing(path, filename, test):
    files = [REPO / path] if "/" in path else sorted((REPO / "tests").rglob(filename))
    files = [f for f in files if f.is_file()]
    if not files:
        return f"{path}: no such test file"
    name = rf"{test[:-1]}\w*" if test.endswith("*") else test  # `test_x_*`: every test named test_x_...
    if test and not any(re.search(rf"^\s*def {name}\(", f.read_text(), re.M) for f in files):
        return f"{path}::{test}: no such test in {', '.join(str(f.relative_to(REPO)) for f in files)}"
    return None


def test_docs_name_tests_that_exist():
    named = _named_tests()
    assert len(named) > 50  # the table is read, not skipped
    assert [m for m in (_missing(*n) for n in named) if m] == []
