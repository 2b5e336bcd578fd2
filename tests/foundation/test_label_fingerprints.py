"""A method-table label changes no number (issue 31): the table's fingerprint leaves its labels out and
the pseudo-module `<table>.__labels__` holds them, in the closure of the entries that read `.label`
(the reports) only, so a label edit re-runs the reports and no training (fedrepro.codedeps)."""

import dataclasses
from pathlib import Path

from fedrepro import codedeps
from fedrepro.algorithms import Method
from tests.foundation.test_codedeps import package_copy

TABLE = """
from fedrepro.algorithms import Method

def _row(module, label, traits):
    return Method(f"fedrepro.algorithms.p.{module}:run_job", label, frozenset(traits))

METHODS = {
    "a": _row("train", "@a", {"x"}),
    "b": Method(entry="fedrepro.algorithms.p.train:run_job", label="@b", traits=frozenset({"y"})),
    "c": Method("fedrepro.algorithms.p.train:run_job", "@c"),
}
"""


def tree(tmp_path, a="A", b="B", c="C", trait="x"):
    return package_copy(
        tmp_path,
        {
            "pipeline.py": "",
            "registry.py": "",
            "algorithms/__init__.py": """
            PAPERS: dict[str, str] = {"p": "fedrepro.algorithms.p"}
            class Method: ...
            def method_table(paper): ...
        """,
            "algorithms/p/__init__.py": TABLE.replace("@a", a)
            .replace("@b", b)
            .replace("@c", c)
            .replace('"x"', repr(trait)),
            "algorithms/p/train.py": "def run_job(job): ...\n",
            "report/__init__.py": "",
            "report/p.py": """
            from fedrepro.algorithms import method_table
            def table(job):
                return [row.label for row in method_table("p").values()]
        """,
        },
    )


def hashes(src):
    codedeps.paper_packages.cache_clear()
    return codedeps.code_hash("fedrepro.algorithms.p", src), codedeps.code_hash("fedrepro.algorithms.p.__labels__", src)


def test_a_label_edit_changes_the_labels_fingerprint_and_not_the_tables(tmp_path):
    table, labels = hashes(tree(tmp_path / "0"))
    for n, edit in enumerate([{"a": "A2"}, {"b": "B2"}, {"c": "C2"}], start=1):
        edited_table, edited_labels = hashes(tree(tmp_path / str(n), **edit))
        assert edited_table == table and edited_labels != labels, edit
    assert hashes(tree(tmp_path / "trait", trait="z"))[0] != table  # a trait is behaviour


def test_only_entries_that_read_labels_depend_on_them(tmp_path):
    src = tree(tmp_path)
    codedeps.paper_packages.cache_clear()
    assert "fedrepro.algorithms.p.__labels__" in codedeps.closure("fedrepro.report.p:table", src)
    assert "fedrepro.algorithms.p.__labels__" not in codedeps.closure("fedrepro.algorithms.p.train:run_job", src)
    assert codedeps.module_file("fedrepro.algorithms.p.__labels__", src) == src / "algorithms/p/__init__.py"
    assert codedeps.module_file("fedrepro.report.__labels__", src) is None


def test_the_labels_position_is_methods_own():
    fields = [field.name for field in dataclasses.fields(Method)]
    assert fields.index("label") == codedeps.METHOD_LABEL_POSITION


def test_every_papers_labels_are_found_in_its_table():
    from fedrepro.algorithms import PAPERS, method_table

    for paper, package in PAPERS.items():
        tree = codedeps.ast.parse(codedeps.module_file(package).read_text())
        found = {node.value for node in codedeps._label_nodes(tree)}
        assert found == {row.label for row in method_table(paper).values()}, paper


def test_a_labels_fingerprint_is_not_stale_code(tmp_path):
    """The job's own check of its code (fedrepro.pipeline.stale_code) reads the pseudo-module too."""
    from fedrepro.pipeline import Job, stale_code

    path = Path(codedeps.code_inputs("fedrepro.report.fedal:table", tmp_path))
    assert "fedrepro.algorithms.fedal.__labels__" in codedeps.read_fingerprint(path)
    job = Job(spec={}, output={}, input={"code": str(path)})
    assert stale_code(job) == []
    path.write_text(
        path.read_text().replace("fedrepro.algorithms.fedal.__labels__ ", "fedrepro.algorithms.fedal.__labels__ 0")
    )
    assert stale_code(job) == ["fedrepro.algorithms.fedal.__labels__"]
