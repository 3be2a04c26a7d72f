"""The figures' shared style: the palette, matplotlib settings applied inside each figure
function (``style_context``, so global state never changes) and pyplot-free figure builders.
:mod:`dyckbook.chapters.plotting` and :mod:`dyckbook.chapters.attention_plots` draw with them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = ["ANNOTATE_MAX", "HIDDEN", "MIN_TEXT", "PAGE_WIDTH", "PALETTE", "STYLE", "as_list",
           "new_figure", "new_panel", "style_context"]

#: Okabe-Ito: told apart with any colour-vision deficiency.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
STYLE: dict[str, Any] = {
    "font.size": 9.5, "axes.titlesize": 10, "axes.labelsize": 9.5, "xtick.labelsize": 8.5,
    "ytick.labelsize": 8.5, "legend.fontsize": 8, "figure.titlesize": 11,
    "axes.spines.top": False, "axes.spines.right": False, "grid.color": "0.9",
    "grid.linewidth": 0.6, "image.interpolation": "nearest", "legend.frameon": False,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
}
HIDDEN = "0.85"  # background of cells a model cannot attend to (hatched)
ANNOTATE_MAX = 20  # attention grids of at most this many tokens print their values
PAGE_WIDTH = 7.5  # inches: the book's text column, the width a wide figure is shown at
MIN_TEXT = 6.0  # points: the smallest text a figure prints, measured as shown on the page


@contextlib.contextmanager
def style_context() -> Iterator[None]:
    """Apply ``STYLE`` within a ``with`` block (nothing leaks out)."""
    with matplotlib.rc_context(STYLE):
        yield


def new_figure(nrows: int, ncols: int, size: tuple[float, float], title: str | None = None,
            **kw: Any):
    """A pyplot-free figure with a constrained layout, a 2-D array of axes and ``title``
    (if any) above them all."""
    fig = Figure(figsize=size, layout="constrained")
    if title:
        fig.suptitle(title)
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kw)


def new_panel(size: tuple[float, float], title: str | None = None) -> tuple[Figure, Axes]:
    """A one-panel figure (:func:`new_figure`) and its axes, titled ``title`` if given."""
    fig, axes = new_figure(1, 1, size)
    if title:
        axes[0, 0].set_title(title)
    return fig, axes[0, 0]


def as_list(x: Any) -> list:
    return list(x) if isinstance(x, Sequence) and not isinstance(x, str) else [x]
