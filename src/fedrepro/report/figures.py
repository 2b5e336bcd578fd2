"""Figures through seaborn, saved as PNG and PDF.

seaborn and matplotlib are imported on first use: they cost about 2 s per process,
and the table-only report jobs of the pipeline never draw.
"""

from __future__ import annotations

from pathlib import Path

from fedrepro.report.tables import SCALE_NOTE, write_together


def _plotting():
    """(pyplot, seaborn), with the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    return plt, sns


def new_figure(panels: int = 1, width: float = 4.2, height: float = 3.2, rows: int = 1):
    """A figure of `panels` axes on `rows` rows (row-major), in the house seaborn theme."""
    plt, sns = _plotting()
    sns.set_theme(style="whitegrid", context="paper")
    cols = -(-panels // rows)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    return fig, list(axes.ravel())


def lines_with_band(data, x: str, y: str, hue: str, ax, **kwargs) -> None:
    """Mean over seeds as a line, +- one standard deviation as a band."""
    _, sns = _plotting()
    sns.lineplot(data=data, x=x, y=y, hue=hue, errorbar="sd", ax=ax, **kwargs)


def save_figure(fig, stem: str | Path, scale: str) -> None:
    """Write stem.png and stem.pdf, stamping the scale under the figure."""
    stem = Path(stem)
    if scale != "paper":
        fig.text(
            0.5,
            0.0,
            SCALE_NOTE.get(scale, scale).split(".")[0] + ": not the paper's setting.",
            ha="center",
            va="bottom",
            fontsize=7,
            color="dimgray",
        )
    fig.tight_layout(rect=(0, 0.04 if scale != "paper" else 0, 1, 1))
    try:  # all or none: a failure leaves the previous png and pdf
        write_together({stem.with_suffix(s): lambda tmp: fig.savefig(tmp, dpi=150) for s in (".png", ".pdf")})
    finally:
        plt, _ = _plotting()
        plt.close(fig)
