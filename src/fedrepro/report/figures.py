"""Figures through seaborn, saved as PNG and PDF, in the one house style every paper's figures use.

`save_figure` lays a figure out before it writes it:
- constrained layout; each panel's title and axis labels wrapped to the panel's size, the figure's
  title to the figure's width;
- one caption block under the axes: the paragraphs given with `note` (what an epsilon protects and
  against whom, budgets, claims) and the scale note, wrapped to the figure's width; the figure grows by
  the block's height, so it overlaps nothing;
- each legend in a corner of its panel where it covers no data (lines, markers, error bars; a shaded
  band only where no corner is free of it); a legend that is the same in every panel drawn once; one
  with no free corner beside its panel;
- integer ticks on axes that count (rounds, epochs, iterations);
- written with bbox_inches="tight" and padding, so the canvas holds every artist with a margin.

seaborn and matplotlib are imported on first use: they cost about 2 s per process,
and the table-only report jobs of the pipeline never draw.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedrepro.report.tables import SCALE_NOTE, write_together

DPI = 150
PAD_INCHES = 0.1  # white margin around the saved canvas (15 px at DPI)
GAP_INCHES = 0.06  # between the caption block and the figure's edge, and above it
TITLE_SIZE = 10
CAPTION = {"fontsize": 7.5, "color": "0.25", "gid": "caption"}
# an axis whose label starts with one of these counts things and gets integer ticks only
COUNT_LABELS = ("round", "communication round", "epoch", "iteration", "client", "class")
CORNERS = ("upper right", "upper left", "lower left", "lower right")
LEGEND_MARGIN_PX = 2.0  # data this close to a legend's frame counts as covered
LAYOUT_PASSES = 3  # wrapping and legends change the layout, which changes the room for them


def _plotting():
    """(pyplot, seaborn), with the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    return plt, sns


def new_figure(panels: int = 1, width: float = 4.2, height: float = 3.2, rows: int = 1):
    """A figure of `panels` axes (each `width` x `height` inches) on `rows` rows (row-major), in the
    house seaborn theme, with constrained layout."""
    plt, sns = _plotting()
    sns.set_theme(style="whitegrid", context="paper")
    cols = -(-panels // rows)
    fig, axes = plt.subplots(
        rows, cols, figsize=(width * cols, height * rows), squeeze=False, layout="constrained", dpi=DPI
    )
    return fig, list(axes.ravel())


def lines_with_band(data, x: str, y: str, hue: str, ax, **kwargs) -> None:
    """Mean over seeds as a line, +- one standard deviation as a band."""
    _, sns = _plotting()
    sns.lineplot(data=data, x=x, y=y, hue=hue, errorbar="sd", ax=ax, **kwargs)


def title(fig, text: str) -> None:
    """The figure's title over all its panels (wrapped to the figure's width when saved)."""
    fig.suptitle(text, fontsize=TITLE_SIZE)


def note(fig, text: str) -> None:
    """Add `text` as a paragraph of the figure's caption block (under the axes, wrapped when saved)."""
    caption = caption_of(fig)
    caption.set_text("\n".join(p for p in (caption.get_text(), text) if p))


def caption_of(fig):
    """The figure's caption block (a figure text), created empty on first use."""
    for text in fig.texts:
        if text.get_gid() == CAPTION["gid"]:
            return text
    return fig.text(0, 0, "", ha="left", va="bottom", **CAPTION)


def save_figure(fig, stem: str | Path, scale: str) -> None:
    """Lay `fig` out in the house style (`finish`), write stem.png and stem.pdf, and close it."""
    stem = Path(stem)
    try:
        finish(fig, scale)
        save = {"dpi": DPI, "bbox_inches": "tight", "pad_inches": PAD_INCHES}
        # all or none: a failure leaves the previous png and pdf
        write_together({stem.with_suffix(s): lambda tmp: fig.savefig(tmp, **save) for s in (".png", ".pdf")})
    finally:
        close_figure(fig)


def close_figure(fig) -> None:
    plt, _ = _plotting()
    plt.close(fig)


def finish(fig, scale: str) -> None:
    """The house layout (module docstring): the scale note in the caption, texts wrapped, legends placed."""
    if scale != "paper":
        note(fig, SCALE_NOTE.get(scale, scale).split(".")[0] + ": not the paper's setting.")
    renderer = fig.canvas.get_renderer()
    raw = {text: text.get_text() for text, _ in _wrapped_texts(fig)}
    width, height = fig.get_size_inches()
    _integer_ticks(fig)
    merge_same_legends(fig, renderer)
    for _ in range(LAYOUT_PASSES):
        fig.canvas.draw()
        _thin_x_ticks(fig, renderer)
        for text, room in _wrapped_texts(fig):
            text.set_text(wrap(raw[text], text.get_fontproperties(), room, renderer))
        _place_caption(fig, renderer, height)
        fig.canvas.draw()
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        beside = [legend for legend in legends if not place_legend(legend, renderer)]
        # the figure grows by a legend beside its panel, so that the panels keep their size
        extra = max((legend.get_window_extent(renderer).width / fig.dpi + GAP_INCHES for legend in beside), default=0)
        fig.set_size_inches(width + extra, fig.get_size_inches()[1])


# ---------------------------------------------------------------------------------- wrapped texts
def _wrapped_texts(fig) -> list:
    """(text, width in pixels it may take) of the figure title, the caption and every panel's title and
    axis labels (a y label runs along the panel's height)."""
    margin = 2 * GAP_INCHES * fig.dpi
    out = [(caption_of(fig), fig.bbox.width - margin)]
    if getattr(fig, "_suptitle", None) is not None:
        out.append((fig._suptitle, fig.bbox.width - margin))
    for ax in fig.axes:
        if ax.get_visible():
            box = ax.get_window_extent()
            out += [(ax.title, box.width), (ax.xaxis.label, box.width), (ax.yaxis.label, box.height)]
    return [(text, width) for text, width in out if text.get_text()]


def wrap(text: str, prop, width: float, renderer) -> str:
    """`text` with each line broken at spaces into lines at most `width` pixels wide in font `prop`
    (a single word wider than that stays whole); line breaks already in it are kept."""
    lines = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            longer = f"{line} {word}" if line else word
            if line and renderer.get_text_width_height_descent(longer, prop, ismath=False)[0] > width:
                lines.append(line)
                line = word
            else:
                line = longer
        lines.append(line)
    return "\n".join(lines)


def _place_caption(fig, renderer, height: float) -> None:
    """Grow the figure by the caption block's height (`height`: the figure's own) and keep the axes and
    their labels above it."""
    caption = caption_of(fig)
    if not caption.get_text():
        return
    block = caption.get_window_extent(renderer).height / fig.dpi + 2 * GAP_INCHES
    width = fig.get_size_inches()[0]
    fig.set_size_inches(width, height + block)
    bottom = block / (height + block)
    fig.get_layout_engine().set(rect=(0, bottom, 1, 1 - bottom))
    caption.set_position((GAP_INCHES / width, GAP_INCHES / (height + block)))


def _integer_ticks(fig) -> None:
    """Integer ticks on every automatically ticked axis that counts (COUNT_LABELS)."""
    from matplotlib.ticker import AutoLocator, MaxNLocator

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            counts = axis.get_label_text().lower().startswith(COUNT_LABELS)
            if counts and type(axis.get_major_locator()) is AutoLocator:
                axis.set_major_locator(MaxNLocator(nbins="auto", steps=[1, 2, 5, 10], integer=True))


def _thin_x_ticks(fig, renderer) -> None:
    """Fewer ticks on an automatically ticked x axis whose labels come closer than one label height."""
    from matplotlib.ticker import MaxNLocator

    for ax in fig.axes:
        axis = ax.xaxis
        if not ax.get_visible() or not isinstance(axis.get_major_locator(), MaxNLocator):
            continue
        low, high = sorted(axis.get_view_interval())
        ticks = zip(axis.get_major_ticks(), axis.get_majorticklocs())
        boxes = [t.label1.get_window_extent(renderer) for t, at in ticks if low <= at <= high and t.label1.get_text()]
        if len(boxes) < 2:
            continue
        room = max(b.width for b in boxes) + max(b.height for b in boxes)
        spacing = min(abs(b.x0 - a.x0) for a, b in zip(boxes, boxes[1:]))
        if spacing < room:
            axis.get_major_locator().set_params(nbins=max(1, int((len(boxes) - 1) * spacing / room)))


# ---------------------------------------------------------------------------------- legends
def legend_entries(legend) -> tuple:
    return legend.get_title().get_text(), tuple(t.get_text() for t in legend.get_texts())


def shared_legend(axes, rename: dict | None = None) -> None:
    """One legend for all `axes`, with each label drawn in them once (in the order first drawn; shown as
    `rename` maps it), in the top right panel (placed when saved: in a free corner, else beside the
    panel); the panels' own legends removed."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault((rename or {}).get(label, label), handle)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    shown = [ax for ax in axes if ax.get_visible()]
    if entries and shown:
        top_right(shown).legend(list(entries.values()), list(entries))


def top_right(axes):
    """The panel of `axes` furthest right, the top one among those."""
    return max(axes, key=lambda ax: (round(ax.get_position().x0, 3), ax.get_position().y1))


def merge_same_legends(fig, renderer) -> None:
    """Legends that are the same in every panel (title and entries) drawn once: in the first panel with a
    free corner, else in the top right panel."""
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    if len(legends) < 2 or len({legend_entries(legend) for legend in legends}) > 1:
        return
    fig.canvas.draw()
    keep = next((legend for legend in legends if free_corner(legend, renderer)), None)
    keep = keep or top_right([legend.axes for legend in legends]).get_legend()
    for legend in legends:
        if legend is not keep:
            legend.remove()


def place_legend(legend, renderer) -> bool:
    """`legend` in the first corner of its panel where it covers no data (True), else beside the panel."""
    from matplotlib.transforms import ScaledTranslation

    corner = free_corner(legend, renderer)
    if corner is None:  # right of the panel's own right-hand labels (a twin's y axis)
        ax = legend.axes
        right = max(a.get_tightbbox(renderer, bbox_extra_artists=[]).x1 for a in twins(ax))
        shift = (right - ax.bbox.x1) / ax.figure.dpi + GAP_INCHES
        legend.set_bbox_to_anchor(
            (1.0, 1.0), transform=ax.transAxes + ScaledTranslation(shift, 0, ax.figure.dpi_scale_trans)
        )
        legend.set_loc("upper left")
        return False
    legend.set_bbox_to_anchor(None)
    legend.set_loc(corner)
    return True


def free_corner(legend, renderer) -> str | None:
    """The first corner (CORNERS) where `legend` covers no line, marker or error bar of its panel (or of
    a twin drawn over it); among those, one that covers no shaded band or bar where there is one."""
    points, regions = data_of(legend.axes)
    free = []
    for order, corner in enumerate(CORNERS):
        box = corner_box(legend, corner, renderer).padded(LEGEND_MARGIN_PX)
        if not box.count_contains(points):
            free.append((_covers_region(box, regions), order, corner))
    return min(free)[2] if free else None


def corner_box(legend, corner: str, renderer):
    """Where `legend` would lie (pixels) at `corner` of its panel, as matplotlib anchors it there."""
    from matplotlib.transforms import Bbox

    width, height = legend.get_window_extent(renderer).size
    pad = legend.borderaxespad * renderer.points_to_pixels(legend.prop.get_size_in_points())
    panel = legend.axes.bbox
    x0 = panel.x1 - pad - width if "right" in corner else panel.x0 + pad
    y0 = panel.y1 - pad - height if "upper" in corner else panel.y0 + pad
    return Bbox.from_bounds(x0, y0, width, height)


def twins(ax) -> list:
    """`ax` and every axes drawn at its position (twinx, twiny)."""
    where = ax.get_position().bounds
    return [other for other in ax.figure.axes if other.get_position().bounds == where]


def data_of(ax):
    """(points, regions) in pixels of the data drawn in `ax` and its twins: every line sampled every
    2 pixels, markers, error bars; regions are shaded bands and bars as (path, transform)."""
    from matplotlib.collections import LineCollection, PathCollection, PolyCollection

    points, regions = [np.empty((0, 2))], []
    for panel in twins(ax):
        for line in panel.lines:
            if line.get_visible():
                points.append(dense(line.get_transform().transform(line.get_xydata())))
        for artist in panel.collections:
            if not artist.get_visible():
                continue
            if isinstance(artist, LineCollection):
                points += [dense(artist.get_transform().transform(s)) for s in artist.get_segments() if len(s)]
            elif isinstance(artist, PathCollection):
                points.append(artist.get_offset_transform().transform(artist.get_offsets()))
            elif isinstance(artist, PolyCollection):
                regions += [(path, artist.get_transform()) for path in artist.get_paths()]
        regions += [(patch.get_path(), patch.get_transform()) for patch in panel.patches if patch.get_visible()]
    points = np.concatenate([p for p in points if len(p)] or [np.empty((0, 2))])
    return points[np.isfinite(points).all(axis=1)], regions


def dense(xy: np.ndarray, step: float = 2.0) -> np.ndarray:
    """A polyline's points with points added along each segment at most `step` pixels apart."""
    xy = np.asarray(xy, dtype=float)
    out = [xy]
    for a, b in zip(xy[:-1], xy[1:]):
        if np.isfinite(a).all() and np.isfinite(b).all():
            n = int(np.hypot(*(b - a)) // step)
            if n > 0:
                out.append(a + np.outer(np.arange(1, n + 1) / (n + 1), b - a))
    return np.concatenate(out)


def _covers_region(box, regions) -> bool:
    grid = np.stack(np.meshgrid(np.linspace(box.x0, box.x1, 7), np.linspace(box.y0, box.y1, 5)), -1).reshape(-1, 2)
    return any(path.contains_points(grid, transform).any() for path, transform in regions)
