"""Every figure the default run writes can be read (issue 45): drawn from small fixed data through its
report function and `figures.save_figure`, it keeps every text inside the figure, no two texts overlap or
touch, no text lies over another panel, a legend covers no data where a corner of its panel is free,
round and epoch axes tick at whole numbers, and the PNG has no ink within 3 pixels of its edge.

The checks themselves are tested on figures broken on purpose (a title too long for its panel, tick
labels too long for their spacing, a legend over the data, half-round ticks, a text at the edge)."""

import pytest

from fedrepro.report import figures

from . import checks
from .draw import DRAWERS


@pytest.fixture
def kept(monkeypatch):
    """The figures `save_figure` wrote, kept open for the checks (closed at the end)."""
    figs = []
    monkeypatch.setattr(figures, "close_figure", figs.append)
    yield figs
    for fig in figs:
        figures._plotting()[0].close(fig)


def test_every_paper_of_the_default_run_has_figures_here():
    assert {paper for paper, _ in DRAWERS} == {"dpzv", "fedal", "fedsc", "steffle", "fedavg"}
    assert len(DRAWERS) >= 19  # the default run's 19 figures at the time of issue 45


@pytest.mark.parametrize("paper, stem", sorted(DRAWERS))
def test_default_figure_is_readable(paper, stem, tmp_path, monkeypatch, kept):
    DRAWERS[(paper, stem)](tmp_path, monkeypatch)
    assert len(kept) == 1, "one figure per drawer"
    pngs = sorted(tmp_path.glob("*.png"))
    assert [p.name for p in pngs] == [f"{stem}.png"] and (tmp_path / f"{stem}.pdf").is_file()
    assert checks.problems(kept[0], pngs[0]) == []


def test_a_curve_whose_runs_sit_at_chance_is_labelled_not_a_result(tmp_path, monkeypatch, kept):
    DRAWERS[("fedal", "fig8")](tmp_path, monkeypatch)
    labels = [t.get_text() for ax in kept[0].axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any(label.startswith("FCCL+ (chance in ") and label.endswith("runs: not a result)") for label in labels)
    assert "FedAL" in labels  # the healthy rows keep their names


# ---------------------------------------------------------------------------------- the checks, broken on purpose
def _saved(tmp_path, kept, draw, scale="quick"):
    fig, axes = figures.new_figure(2)
    draw(fig, axes)
    figures.save_figure(fig, tmp_path / "broken", scale)
    return checks.problems(kept[0], tmp_path / "broken.png")


def _curves(fig, axes):
    for ax in axes:
        for k in range(3):
            ax.plot(range(1, 6), [k + 0.1 * i for i in range(5)], label=f"method {k}")
        ax.set(xlabel="round", ylabel="accuracy", title="digits")
        ax.legend()


def test_a_good_figure_passes(tmp_path, kept):
    assert _saved(tmp_path, kept, _curves) == []


def test_a_title_too_long_for_its_panel_fails_without_wrapping(tmp_path, kept, monkeypatch):
    monkeypatch.setattr(figures, "wrap", lambda text, *a: text)  # the style's wrapping removed

    def long_titles(fig, axes):
        _curves(fig, axes)
        for ax in axes:
            ax.set_title("digits, ε = 1 (PLD 1.03; known batch 6.54), δ = 0.001, SGD server (≠ Alg. 1 l. 7)")

    found = _saved(tmp_path, kept, long_titles)
    assert any("overlaps" in p and "digits, ε = 1" in p for p in found)


def test_tick_labels_too_long_for_their_spacing_fail(tmp_path, kept):
    def stacked_ticks(fig, axes):
        _curves(fig, axes)
        for ax in axes:
            ax.set_xticks(range(1, 6), [f"{e} (PLD {e * 1.02:.3g}; known batch {e * 6.3:.3g})" for e in range(1, 6)])

    assert any("overlaps" in p and "PLD" in p for p in _saved(tmp_path, kept, stacked_ticks))


def test_a_legend_over_the_data_fails_where_a_corner_is_free(tmp_path, kept, monkeypatch):
    monkeypatch.setattr(figures, "place_legend", lambda legend, renderer: legend.set_loc("center") or True)

    def crossed(fig, axes):
        _curves(fig, axes)
        for ax in axes:
            ax.plot([1, 5], [4, 4], color="k")  # through the middle of the panel; its top corners stay free
            ax.set_ylim(0, 8)

    assert any("covers" in p and "would cover none" in p for p in _saved(tmp_path, kept, crossed))


def test_half_rounds_fail(tmp_path, kept, monkeypatch):
    monkeypatch.setattr(figures, "_integer_ticks", lambda fig: None)
    assert any("'round' has ticks" in p for p in _saved(tmp_path, kept, _curves))


def test_a_footer_where_the_old_style_put_it_fails(tmp_path, kept):
    def footer(fig, axes):
        _curves(fig, axes)
        fig.text(0.5, 0.0, "a threat note at the bottom edge, as the figures printed it before", ha="center")

    found = _saved(tmp_path, kept, footer, scale="paper")
    assert any("a threat note" in p and "leaves the figure" in p for p in found)
    assert any("'round'" in p and "overlaps 'a threat note" in p for p in found)


def test_a_canvas_saved_without_its_margin_fails(tmp_path, kept, monkeypatch):
    monkeypatch.setattr(figures, "PAD_INCHES", 0.0)
    assert any("ink within 3 px" in p for p in _saved(tmp_path, kept, _curves))
