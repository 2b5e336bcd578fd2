"""`make mutate` runs the mutants from one warm interpreter (tools/mutate.py `warm_run`): the mutated package
and the tests are imported once, and each mutant runs its covering tests in a child forked from there. On a
toy copy laid out as mutmut leaves it (mutants/, mutmut-stats.json, one .meta file per source file), without
mutmut: its trampolines only read MUTANT_UNDER_TEST at each call, as the toy function does."""

import json
import os
import sys
import textwrap
from pathlib import Path

from tests import limits

ROOT = Path(__file__).resolve().parents[2]
TOY = """
import os
from pathlib import Path

with open(os.environ["TOY_IMPORT_LOG"], "a") as log:  # one line per import of this module
    log.write(f"{os.getpid()}\\n")


def double(x):
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if mutant == "toy.calc.x_double__mutmut_1":
        return 3 * x
    if mutant == "toy.calc.x_double__mutmut_2":
        return x + x
    return 2 * x


def other(x):
    return x
"""
TESTS = """
from toy.calc import double

def test_two():
    assert double(2) == 4

def test_zero():
    assert double(0) == 0
"""
KILLED, SURVIVES, UNTESTED = "toy.calc.x_double__mutmut_1", "toy.calc.x_double__mutmut_2", "toy.calc.x_other__mutmut_1"


def toy_copy(tmp_path: Path) -> Path:
    mutants = tmp_path / "mutants"
    for path, text in {"src/toy/__init__.py": "", "src/toy/calc.py": TOY, "tests/test_calc.py": TESTS}.items():
        (mutants / path).parent.mkdir(parents=True, exist_ok=True)
        (mutants / path).write_text(textwrap.dedent(text))
    tests = ["tests/test_calc.py::test_two", "tests/test_calc.py::test_zero"]
    stats = {
        "tests_by_mangled_function_name": {"toy.calc.x_double": tests},
        "duration_by_test": dict.fromkeys(tests, 0.01),
    }
    (mutants / "mutmut-stats.json").write_text(json.dumps({**stats, "stats_time": 0.1}))
    meta = {"exit_code_by_key": dict.fromkeys([KILLED, SURVIVES, UNTESTED]), "durations_by_key": {}}
    (mutants / "src/toy/calc.py.meta").write_text(json.dumps(meta))
    (mutants / "fedrepro-warm-names.json").write_text(json.dumps([KILLED, SURVIVES, UNTESTED]))
    return mutants


def test_every_mutant_runs_in_a_child_of_one_warm_interpreter(tmp_path):
    mutants, imports = toy_copy(tmp_path), tmp_path / "imports.log"
    command = [sys.executable, str(ROOT / "tools/mutate.py"), "--serve", str(mutants), "--jobs", "2"]
    env = {**os.environ, "TOY_IMPORT_LOG": str(imports), "OMP_NUM_THREADS": "1"}
    result = limits.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    codes = json.loads((mutants / "src/toy/calc.py.meta").read_text())["exit_code_by_key"]
    assert codes == {KILLED: 1, SURVIVES: 0, UNTESTED: 33}  # mutmut's codes: killed, survived, no tests
    assert len(imports.read_text().split()) == 1  # imported once, before the forks; never in a child
    assert f"{KILLED}: exit 1" in result.stdout and "CPU-s" in result.stdout
