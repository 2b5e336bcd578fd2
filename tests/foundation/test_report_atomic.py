"""A report job that fails while writing leaves the previous table or figure whole (issue 31)."""

import pandas as pd
import pytest

from fedrepro.report.figures import new_figure, save_figure
from fedrepro.report.tables import write_table, write_together


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_table_that_fails_to_write_leaves_the_old_files(tmp_path, monkeypatch):
    stem = tmp_path / "tables" / "accuracy"
    write_table(pd.DataFrame({"row": ["a"], "value": [0.5]}), stem, "Old.", "quick")
    before = _files(stem.parent)
    assert set(before) == {"accuracy.csv", "accuracy.md", "accuracy.tex"}

    def broken(self, *args, **kwargs):  # the last of the three files fails (a full disk, a bug)
        raise OSError("no space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_latex", broken)
    with pytest.raises(OSError):
        write_table(pd.DataFrame({"row": ["b"], "value": [0.9]}), stem, "New.", "quick")
    assert _files(stem.parent) == before  # csv and md not replaced either; no temporary left


def test_files_written_together_are_renamed_only_when_all_are_written(tmp_path):
    (tmp_path / "a.txt").write_text("old a")
    (tmp_path / "b.txt").write_text("old b")

    def fail(tmp):
        tmp.write_text("half")
        raise RuntimeError("failed mid-write")

    with pytest.raises(RuntimeError):
        write_together({tmp_path / "a.txt": lambda tmp: tmp.write_text("new a"), tmp_path / "b.txt": fail})
    assert _files(tmp_path) == {"a.txt": b"old a", "b.txt": b"old b"}
    write_together(
        {tmp_path / "a.txt": lambda t: t.write_text("new a"), tmp_path / "b.txt": lambda t: t.write_text("b")}
    )
    assert _files(tmp_path) == {"a.txt": b"new a", "b.txt": b"b"}


def test_a_figure_that_fails_to_save_leaves_the_old_png_and_pdf(tmp_path):
    stem = tmp_path / "figures" / "accuracy"
    fig, axes = new_figure()
    axes[0].plot([0, 1], [0, 1])
    save_figure(fig, stem, "quick")
    before = _files(stem.parent)
    assert set(before) == {"accuracy.png", "accuracy.pdf"}

    fig, axes = new_figure()
    axes[0].plot([0, 1], [1, 0])
    original = fig.savefig

    def pdf_fails(path, **kwargs):
        if str(path).endswith(".pdf"):
            raise ValueError("cannot draw this glyph")
        original(path, **kwargs)

    fig.savefig = pdf_fails
    with pytest.raises(ValueError):
        save_figure(fig, stem, "quick")
    assert _files(stem.parent) == before
