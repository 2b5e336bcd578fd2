"""What a readable figure is (issue 45), checked on a drawn matplotlib figure and on its saved PNG.

Each check returns a list of problems (empty when the figure passes), so that a failing test names
every text, legend or axis at fault. The data a legend may cover is read here from the artists
themselves (line vertices, markers, error bar ends), not through `fedrepro.report.figures`."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np

COUNT_LABELS = ("round", "communication round", "epoch", "iteration")  # what the issue names: rounds and epochs
EDGE_PX = 3
CORNERS = ("upper right", "upper left", "lower left", "lower right")
TOUCH_PX = 0.5  # a text this far over the figure's edge is still inside it
GAP_PX = 2.0  # two texts closer than this read as one


def drawn_texts(fig) -> list:
    """(text artist, its box in pixels) of every non-empty text drawn when `fig` is drawn."""
    from matplotlib.text import Text

    seen, original = [], Text.draw

    def record(self, renderer):
        original(self, renderer)
        if self.get_visible() and self.get_text().strip():
            seen.append((self, self.get_window_extent(renderer)))

    with patch.object(Text, "draw", record):
        fig.canvas.draw()
    return seen


def _name(text) -> str:
    return repr(text.get_text()[:60])


def texts_outside(fig, texts) -> list[str]:
    frame = fig.bbox
    return [
        f"{_name(t)} at {box.bounds} leaves the figure {frame.bounds}"
        for t, box in texts
        if box.x0 < frame.x0 - TOUCH_PX
        or box.y0 < frame.y0 - TOUCH_PX
        or box.x1 > frame.x1 + TOUCH_PX
        or box.y1 > frame.y1 + TOUCH_PX
    ]


def _overlap(a, b, gap: float = 0.0) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > -gap and min(a.y1, b.y1) - max(a.y0, b.y0) > -gap


def overlapping_texts(texts) -> list[str]:
    return [
        f"{_name(a)} {box_a.bounds} overlaps {_name(b)} {box_b.bounds}"
        for i, (a, box_a) in enumerate(texts)
        for b, box_b in texts[i + 1 :]
        if _overlap(box_a, box_b, GAP_PX)
    ]


def _twins(ax) -> list:
    where = ax.get_position().bounds
    return [other for other in ax.figure.axes if other.get_position().bounds == where]


def _owners(fig) -> dict:
    """Text artist -> the axes it belongs to (its legend's axes for legend texts); figure texts have none."""
    owners = {}
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            owners.update({t: ax for t in [*legend.get_texts(), legend.get_title()]})
    return owners


def texts_over_other_panels(fig, texts) -> list[str]:
    """A panel's texts (titles, ticks, labels, legend) stay off every other panel; figure texts (its
    title, the caption block) off all of them."""
    owners, out = _owners(fig), []
    panels = [ax for ax in fig.axes if ax.get_visible()]
    for text, box in texts:
        owner = owners.get(text, text.axes)
        mine = _twins(owner) if owner is not None else []
        for ax in panels:
            if ax not in mine and _overlap(box, ax.bbox):
                out.append(f"{_name(text)} lies over the panel {ax.get_title()!r}")
    return out


def _along(xy: np.ndarray, per_segment: int = 50) -> np.ndarray:
    """Points along a polyline: each segment cut into `per_segment` pieces."""
    xy = np.asarray(xy, dtype=float)
    if len(xy) < 2:
        return xy
    t = np.linspace(0, 1, per_segment + 1)[:, None, None]
    return (xy[:-1] + t * (xy[1:] - xy[:-1])).reshape(-1, 2)


def _points(ax) -> np.ndarray:
    """Points along every line and error bar of `ax` and its twins, and their markers, in pixels."""
    from matplotlib.collections import LineCollection, PathCollection

    out = [np.empty((0, 2))]
    for panel in _twins(ax):
        out += [_along(line.get_transform().transform(line.get_xydata())) for line in panel.lines if line.get_visible()]
        for artist in panel.collections:
            if isinstance(artist, LineCollection):
                out += [_along(artist.get_transform().transform(s)) for s in artist.get_segments() if len(s)]
            elif isinstance(artist, PathCollection):
                out.append(artist.get_offset_transform().transform(artist.get_offsets()))
    points = np.concatenate(out)
    return points[np.isfinite(points).all(axis=1)]


def legends_over_data(fig) -> list[str]:
    """A legend that covers a data point while a corner of its panel would cover none."""
    renderer, out = fig.canvas.get_renderer(), []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        points = _points(ax)
        covered = legend.get_window_extent(renderer).count_contains(points)
        free = [c for c in CORNERS if not _at_corner(legend, c, renderer).count_contains(points)]
        if covered and free:
            out.append(f"the legend of {ax.get_title()!r} covers {covered} data points; {free} would cover none")
    return out


def _at_corner(legend, corner: str, renderer):
    """The legend's box moved to `corner` of its panel (matplotlib's padding: borderaxespad font sizes)."""
    from matplotlib.transforms import Bbox

    box, panel = legend.get_window_extent(renderer), legend.axes.bbox
    pad = legend.borderaxespad * renderer.points_to_pixels(legend.prop.get_size_in_points())
    x0 = panel.x1 - pad - box.width if "right" in corner else panel.x0 + pad
    y0 = panel.y1 - pad - box.height if "upper" in corner else panel.y0 + pad
    return Bbox.from_bounds(x0, y0, box.width, box.height)


def fractional_count_ticks(fig) -> list[str]:
    """Ticks that are not whole numbers on an axis of rounds, epochs or iterations."""
    out = []
    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if not axis.get_label_text().lower().startswith(COUNT_LABELS):
                continue
            low, high = sorted(limits)
            ticks = [t for t in axis.get_majorticklocs() if low <= t <= high]
            if any(abs(t - round(t)) > 1e-9 for t in ticks):
                out.append(f"{axis.get_label_text()!r} has ticks {ticks}")
    return out


def ink_at_edge(png) -> list[str]:
    """Pixels within EDGE_PX of the PNG's edge that are not the white background."""
    from matplotlib.image import imread

    image = imread(png)[..., :3]
    ink = np.any(image < 1.0, axis=-1)
    ink[EDGE_PX:-EDGE_PX, EDGE_PX:-EDGE_PX] = False
    return [f"{png}: {int(ink.sum())} pixels of ink within {EDGE_PX} px of the edge"] if ink.any() else []


def problems(fig, png) -> list[str]:
    """Every check on a figure as `fedrepro.report.figures.save_figure` left it, and on its PNG."""
    texts = drawn_texts(fig)
    return [
        *texts_outside(fig, texts),
        *overlapping_texts(texts),
        *texts_over_other_panels(fig, texts),
        *legends_over_data(fig),
        *fractional_count_ticks(fig),
        *ink_at_edge(png),
    ]
