"""Code inputs derived from imports (fedrepro.codedeps), compared by content."""

import json
import re
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from fedrepro import codedeps
from fedrepro.algorithms import PAPERS, methods
from tests import limits

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "fedrepro"


def rule_entries() -> list[str]:
    """Every entry point a rule names: every "fedrepro.module:function" string of the rule files
    and every method of every paper (the training rules' entry lambdas)."""
    entries = set()
    for path in (ROOT / "workflow" / "rules").glob("*.smk"):
        entries.update(re.findall(r'"(fedrepro\.[\w.]+:\w+)"', path.read_text()))
    for paper in PAPERS:
        entries.update(methods(paper).values())
    from fedrepro.data.prepare import BUILDERS

    entries.update(BUILDERS.values())  # the prepare rule's second code entry
    return sorted(entries)


def package_copy(tmp_path: Path, files: dict[str, str]) -> Path:
    src = tmp_path / "fedrepro"
    for name, text in {"__init__.py": "", **files}.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(textwrap.dedent(text))
    return src


def test_closure_follows_imports_lazy_imports_packages_and_registry_strings(tmp_path):
    src = package_copy(
        tmp_path,
        {
            "pipeline.py": "",
            "registry.py": "",
            "a/__init__.py": "",
            "a/entry.py": """
            from fedrepro.b import helper
            from . import sibling
            def run(job):
                import fedrepro.c.lazy
                return "fedrepro.d.model:build"
        """,
            "a/sibling.py": "",
            "b/__init__.py": "",
            "b/helper.py": "",
            "c/__init__.py": "",
            "c/lazy.py": "import fedrepro.c.deeper\n",
            "c/deeper.py": "",
            "d/__init__.py": "",
            "d/model.py": "",
            "e/__init__.py": "",
            "e/unrelated.py": "",
        },
    )
    found = set(codedeps.closure("fedrepro.a.entry:run", src))
    assert found == {
        "fedrepro",
        "fedrepro.pipeline",
        "fedrepro.registry",
        "fedrepro.a",
        "fedrepro.a.entry",
        "fedrepro.a.sibling",
        "fedrepro.b",
        "fedrepro.b.helper",
        "fedrepro.c",
        "fedrepro.c.lazy",
        "fedrepro.c.deeper",
        "fedrepro.d",
        "fedrepro.d.model",
    }


def test_reading_a_papers_method_table_depends_on_that_table_only(tmp_path):
    """`method_table(paper)` imports the paper's package by name, which no import statement shows."""
    src = package_copy(
        tmp_path,
        {
            "pipeline.py": "",
            "registry.py": "",
            "algorithms/__init__.py": """
            PAPERS: dict[str, str] = {"p": "fedrepro.algorithms.p", "q": "fedrepro.algorithms.q"}
            def method_table(paper): ...
        """,
            "algorithms/p/__init__.py": "",
            "algorithms/q/__init__.py": "",
            "report/__init__.py": "",
            "report/p.py": """
            from fedrepro.algorithms import method_table
            PAPER = "p"
            def table(job):
                return method_table(PAPER)
        """,
            "report/q.py": """
            from fedrepro import algorithms
            def table(job):
                return algorithms.method_table("q")
        """,
        },
    )

    def tables(entry):
        return {m for m in codedeps.closure(entry, src) if m.startswith("fedrepro.algorithms.")}

    assert tables("fedrepro.report.p:table") == {"fedrepro.algorithms.p"}
    assert tables("fedrepro.report.q:table") == {"fedrepro.algorithms.q"}


def test_code_hash_ignores_comments_docstrings_and_layout_but_not_code(tmp_path):
    src = package_copy(
        tmp_path,
        {
            "m.py": '''
        """Module docstring."""
        def f(x):
            """Docstring."""
            return x * 2  # a comment
    '''
        },
    )
    before = codedeps.code_hash("fedrepro.m", src)
    (src / "m.py").write_text('"""Another docstring."""\n# new comment\n\ndef f( x ):\n    return (x *\n 2)\n')
    assert codedeps.code_hash("fedrepro.m", src) == before
    (src / "m.py").write_text("def f(x):\n    return x * 3\n")
    assert codedeps.code_hash("fedrepro.m", src) != before


def fresh_inputs(entry, out, src):
    """`code_inputs` as a new parse of the workflow computes it (the parse's caches emptied)."""
    codedeps.write_fingerprint.cache_clear()
    codedeps.closure.cache_clear()
    codedeps.module_uses.cache_clear()
    return Path(codedeps.code_inputs(entry, out, src))


def test_fingerprint_file_is_rewritten_only_when_the_code_changes(tmp_path):
    src = package_copy(tmp_path, {"pipeline.py": "", "registry.py": "", "m.py": "X = 1\n"})
    out = tmp_path / "code"
    path = fresh_inputs("fedrepro.m:X", out, src)
    assert codedeps.read_fingerprint(path)["fedrepro.m"] == codedeps.code_hash("fedrepro.m", src)
    stamp = path.stat().st_mtime_ns
    (src / "m.py").write_text("X = 1  # comment\n")
    assert fresh_inputs("fedrepro.m:X", out, src) == path and path.stat().st_mtime_ns == stamp
    (src / "m.py").write_text("X = 2\n")
    fresh_inputs("fedrepro.m:X", out, src)
    assert path.stat().st_mtime_ns != stamp
    assert codedeps.read_fingerprint(path)["fedrepro.m"] == codedeps.code_hash("fedrepro.m", src)


def test_one_fingerprint_file_per_entry_lists_its_modules_and_changes_with_them_only(tmp_path):
    """A job has one code input: its entry's file, one line per module of the entry's closure (and
    per workflow script); an edit rewrites the files of the entries that run the module, no other."""
    src = package_copy(
        tmp_path,
        {"pipeline.py": "", "registry.py": "", "a.py": "import fedrepro.shared\n", "b.py": "", "shared.py": "Y = 1\n"},
    )
    out = tmp_path / "code"
    a, b = fresh_inputs("fedrepro.a:run", out, src), fresh_inputs("fedrepro.b:run", out, src)
    assert a != b and sorted(p.name for p in out.iterdir()) == sorted([a.name, b.name])
    assert set(codedeps.read_fingerprint(a)) == set(codedeps.closure("fedrepro.a:run", src))
    assert "fedrepro.shared" not in codedeps.read_fingerprint(b)
    stamps = a.stat().st_mtime_ns, b.stat().st_mtime_ns
    (src / "shared.py").write_text("Y = 2\n")
    fresh_inputs("fedrepro.a:run", out, src), fresh_inputs("fedrepro.b:run", out, src)
    assert a.stat().st_mtime_ns != stamps[0] and b.stat().st_mtime_ns == stamps[1]
    both = fresh_inputs(["fedrepro.b:run", "fedrepro.a:run"], out, src)  # an entry and a function of its spec
    assert set(codedeps.read_fingerprint(both)) == set(codedeps.read_fingerprint(a)) | {"fedrepro.b"}


def test_the_entry_script_is_fingerprinted_by_its_code(tmp_path):
    """workflow/scripts/entry.py (codedeps.SCRIPTS) is part of every entry's file: an edit of its code
    rewrites the file, a comment does not."""
    src = package_copy(tmp_path / "checkout" / "src", {"pipeline.py": "", "registry.py": "", "m.py": ""})
    script = tmp_path / "checkout" / "workflow" / "scripts" / "entry.py"
    script.parent.mkdir(parents=True)
    script.write_text("run(snakemake)\n")
    out = tmp_path / "code"
    path = fresh_inputs("fedrepro.m:run", out, src)
    assert codedeps.read_fingerprint(path)["workflow/scripts/entry.py"] == codedeps.script_hash(script)
    stamp = path.stat().st_mtime_ns
    script.write_text("# a comment\nrun(snakemake)\n")
    assert fresh_inputs("fedrepro.m:run", out, src).stat().st_mtime_ns == stamp
    script.write_text("import torch\ntorch.set_default_dtype(torch.float64)\nrun(snakemake)\n")
    assert fresh_inputs("fedrepro.m:run", out, src).stat().st_mtime_ns != stamp


def test_the_workflow_lists_its_own_entry_script():
    assert set(codedeps.scripts()) == set(codedeps.SCRIPTS)
    assert codedeps.scripts()["workflow/scripts/entry.py"] == ROOT / "workflow" / "scripts" / "entry.py"


def test_published_tables_are_part_of_the_report_fingerprint(tmp_path):
    src = tmp_path / "fedrepro"
    shutil.copytree(SRC / "report", src / "report", ignore=shutil.ignore_patterns("__pycache__"))
    before = codedeps.code_hash("fedrepro.report.tables", src)
    table = next((src / "report" / "published").glob("*.csv"))
    table.write_text(table.read_text() + "x,y,1,0\n")
    assert codedeps.code_hash("fedrepro.report.tables", src) != before


def test_steffle_training_runs_on_the_shared_loop_but_not_on_the_seed_runner():
    """SteFFLe checkpoints through fl.loop like every paper, but trains its seeds as one grid, so
    an edit of fl.runner (the other papers' seed loop) must not re-run its jobs."""
    for entry in methods("steffle").values():
        closure = codedeps.closure(entry)
        assert "fedrepro.fl.loop" in closure and "fedrepro.fl.runner" not in closure
        assert "fedrepro.privacy.steffle" in closure


def test_seeding_tabular_and_stacked_edits_reach_only_their_callers():
    """Issue 41's re-run scope: SteFFLe seeds no global generator (fl.seeding), FedAL's reports read no
    tabular data and run no stacked DPZV queries, and only the synthetic tabular builder of the generated
    sets reads tables; the callers keep them."""
    for entry in methods("steffle").values():
        assert "fedrepro.fl.seeding" not in codedeps.closure(entry)
    assert "fedrepro.fl.seeding" in codedeps.closure("fedrepro.fl.runner:run_seeds")
    for entry in ("table", "figure", "partition_figure"):
        closure = codedeps.closure(f"fedrepro.report.fedal:{entry}")
        assert "fedrepro.data.tabular" not in closure and "fedrepro.algorithms.dpzv.stacked" not in closure
    for builder in ("synthetic_multiview", "synthetic_text"):
        assert "fedrepro.data.tabular" not in codedeps.closure(f"fedrepro.data.generated:{builder}")
    assert "fedrepro.data.tabular" in codedeps.closure("fedrepro.data.generated:synthetic_tabular")
    assert "fedrepro.algorithms.dpzv.stacked" in codedeps.closure(methods("dpzv")["dpzv"])


def test_fedsc_pretraining_does_not_depend_on_the_linear_probe():
    for entry in methods("fedsc").values():
        closure = codedeps.closure(entry)
        assert "fedrepro.eval.probe" not in closure and "fedrepro.algorithms.fedsc.probing" not in closure
    assert "fedrepro.eval.probe" in codedeps.closure("fedrepro.algorithms.fedsc.probing:probe_job")


RECORDER = """
import json, sys
from fedrepro.codedeps import closure
from fedrepro.registry import resolve
extra = {}
for entry in json.loads(sys.argv[1]):
    before = set(sys.modules)
    resolve(entry)
    new = {m for m in set(sys.modules) - before if m == "fedrepro" or m.startswith("fedrepro.")}
    missing = sorted(new - set(closure(entry)))
    if missing:
        extra[entry] = missing
print(json.dumps(extra))
"""


def test_every_rule_entry_imports_only_declared_modules():
    """Import recorder: each rule's entry is imported (in one fresh process, one after the
    other); every fedrepro module that appears while importing it must be in its closure.
    What a job imports while it runs is checked by the pipeline itself (run_snakemake_job
    compares sys.modules with the job's code inputs; tests/cluster/test_reruns.py runs it)."""
    entries = rule_entries()
    assert len(entries) > 30
    result = limits.run(
        [sys.executable, "-c", RECORDER, json.dumps(entries)], capture_output=True, text=True, timeout=300, check=True
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {}


def test_an_entry_without_module_is_named():
    with pytest.raises(ValueError, match="fedrepro.nope"):
        codedeps.closure("fedrepro.nope:run")
