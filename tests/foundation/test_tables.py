"""Paper-style tables: published beside ours, order kept, all three formats written."""

import numpy as np
import pandas as pd
import pytest

from fedrepro.report import tables

PUBLISHED = pd.DataFrame(
    {
        "row": ["FedSC", "FedSC", "FedAvg"],
        "column": ["N=20", "N=100", "N=20"],
        "mean": [80.0, 70.0, 75.0],
        "std": [0.5, 0.4, np.nan],
    }
)


def ours():
    return pd.DataFrame(
        {
            "row": ["FedAvg", "FedAvg", "FedSC", "FedSC", "FedSC", "FedSC", "Extra"],
            "column": ["N=20", "N=20", "N=20", "N=20", "N=100", "N=100", "N=20"],
            "seed": [0, 1, 0, 1, 0, 1, 0],
            "value": [74.0, 76.0, 79.0, 81.0, 69.0, 69.0, 50.0],
        }
    )


def test_compare_puts_mean_std_over_seeds_beside_published_with_difference():
    table = tables.compare(ours(), PUBLISHED)
    fedsc20 = table[(table.row == "FedSC") & (table.column == "N=20")].iloc[0]
    assert fedsc20.published_mean == 80.0 and fedsc20.ours_mean == 80.0
    assert fedsc20.ours_std == pytest.approx(np.std([79.0, 81.0], ddof=1))
    assert fedsc20.seeds == 2 and fedsc20.difference == 0.0
    extra = table[table.row == "Extra"].iloc[0]
    assert np.isnan(extra.published_mean) and np.isnan(extra.ours_std)  # one seed: no std


def test_published_order_is_kept_not_lexical():
    table = tables.compare(ours(), PUBLISHED)
    assert list(dict.fromkeys(table.row)) == ["FedSC", "FedAvg", "Extra"]
    assert list(dict.fromkeys(table.column)) == ["N=20", "N=100"]
    layout = tables.wide(table)
    assert list(layout.columns[1:4]) == ["N=20 (published)", "N=20 (ours)", "N=20 (diff)"]
    assert layout.loc[0, "N=20 (ours)"] == "80.00 ± 1.41"


def test_write_table_writes_csv_markdown_latex_with_scale_note(tmp_path):
    tables.write_table(tables.compare(ours(), PUBLISHED), tmp_path / "t", "Caption here", "quick")
    assert pd.read_csv(tmp_path / "t.csv").shape[0] == 4
    markdown = (tmp_path / "t.md").read_text()
    assert "Caption here" in markdown and "NOT the paper's setting" in markdown and "| FedSC" in markdown
    assert "\\begin{tabular}" in (tmp_path / "t.tex").read_text()


def test_report_modules_load_plotting_only_when_a_figure_is_drawn():
    """Table-only report jobs skip the ~2 s seaborn/matplotlib import (a fresh process: pytest already has them)."""
    import subprocess
    import sys

    code = (
        "import sys; import fedrepro.report.fedavg, fedrepro.report.fedsc, fedrepro.report.dpzv, "
        "fedrepro.report.fedal, fedrepro.report.steffle, fedrepro.report.index\n"
        "print(sorted(m for m in ('seaborn', 'matplotlib', 'torch') if m in sys.modules))\n"
        "from fedrepro.report import figures; figures.new_figure()\n"
        "print('seaborn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]" and out[1] == "True"


def test_index_links_every_paper_target_and_the_cross_paper_audit(tmp_path):
    from fedrepro.pipeline import make_job
    from fedrepro.report.index import write_index

    targets = [
        f"{tmp_path}/fedsc/tables/table2.md",
        f"{tmp_path}/fedsc/tables/table2.csv",
        f"{tmp_path}/dpzv/figures/fig3.png",
        f"{tmp_path}/privacy/audit.md",
    ]
    job = make_job(
        {"scale": "quick", "papers": ["fedsc", "dpzv"]},
        {"index": str(tmp_path / "index.md")},
        input={"targets": targets},
        log=str(tmp_path / "index.log"),
        threads=1,
        wildcards={},
    )
    write_index(job)
    text = (tmp_path / "index.md").read_text()
    assert "- [table2](fedsc/tables/table2.md)" in text and "table2.csv" not in text
    assert "- ![fig3](dpzv/figures/fig3.png)" in text
    assert text.index("## across papers") < text.index("- [audit](privacy/audit.md)")
