"""Figures of attention: a model's patterns as heat maps (one string, or summarised over long
inputs), matching scores, the preview's ROC curves, and the encoder-decoder's cross-attention.
Arrays in, a ``matplotlib.figure.Figure`` out, as in :mod:`dyckbook.chapters.plotting`, which
re-exports every function here (notebooks import ``plotting`` alone)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib import colors as mcolors
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from dyckbook.chapters.figure_style import (
    ANNOTATE_MAX,
    HIDDEN,
    MIN_TEXT,
    PAGE_WIDTH,
    PALETTE,
    new_figure,
    style_context,
)
from dyckbook.interp import explain

#: the token labels' size on the page, in points (issue 65: they were about 6 px)
TICK_POINTS = 8.0

__all__ = ["TICK_POINTS", "plot_attention_grid", "plot_attention_summary", "plot_cross_attention",
           "plot_matching", "plot_preview_roc"]


def _heat_panel(ax: Axes, values: np.ndarray, xlabels: Sequence[str], ylabels: Sequence[str],
                steps: tuple[int, int], fontsize: float, title: str,
                outlines: Iterator[tuple[int, int]], **imshow: Any):
    """One attention panel: the image, token tick labels (brackets upright), no spines, the
    title, and an outline around each (key, query) cell of ``outlines``; returns the image."""
    image = ax.imshow(values, **imshow)
    ax.set_xticks(np.arange(0, len(xlabels), steps[0]), list(xlabels)[::steps[0]])
    for text in ax.get_xticklabels():
        text.set_rotation(90 if len(text.get_text()) > 1 else 0)
    ax.set_yticks(np.arange(0, len(ylabels), steps[1]), list(ylabels)[::steps[1]])
    ax.tick_params(length=0, labelsize=fontsize)
    ax.spines[:].set_visible(False)
    ax.set_title(title)
    for x, y in outlines:
        ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, edgecolor=PALETTE[3], lw=1.6))
    return image


def plot_attention_grid(patterns: np.ndarray, string: str, mask: str = "bidirectional", *,
                        scale: str = "prob", marks: np.ndarray | None = None,
                        title: str | None = None) -> Figure:
    """Attention of one string: layers as rows, heads as columns, one colour bar.

    Rows of a panel are queries, columns keys, both labelled with the tokens; pads are
    cropped, keys the mask hides are hatched grey. Values are raw probabilities (0..1) by
    default; ``scale="minmax"`` shows the thesis' per-matrix [-1, 1] scaling instead.

    Args:
        patterns: (layer, head, query, key) of one string, e.g. ``attention_patterns(model,
            dataset)[:, i]``.
        string: the string (its length crops the pads).
        mask: the model's mask (``bidirectional`` or ``causal``).
        scale: ``prob`` or ``minmax``.
        marks: (query,) a key to outline in every row (-1: none; hidden keys are not
            outlined), e.g. every bracket's partner (``partner_positions(dataset)[i]``).
        title: the figure title.

    Returns:
        A Figure with layer x head panels and a colour bar.
    """
    if scale not in ("prob", "minmax"):
        raise ValueError(f"scale must be 'prob' or 'minmax', got {scale!r}")
    p = np.asarray(patterns, dtype=np.float64)
    n = len(string) + 2
    if p.ndim != 4 or min(p.shape[2:]) < n:
        raise ValueError(f"patterns must be (layer, head, query, key) with at least {n} "
                         f"positions, got shape {p.shape}")
    hidden = ~explain.visible_keys(np.array([len(string)]), n, mask)[0]
    data = np.ma.MaskedArray(p[..., :n, :n], mask=np.broadcast_to(hidden, p[..., :n, :n].shape))
    vmin, cmap, label = 0.0, "viridis", "attention probability"
    if scale == "minmax":
        data, vmin, cmap = explain.minmax_scale(data), -1.0, "coolwarm"
        label = "attention, min-max scaled to [-1, 1] per panel"
    cmap = matplotlib.colormaps[cmap].with_extremes(bad=(0, 0, 0, 0))  # hidden: see-through
    labels = ["[start]", *string, "[end]"]
    step = max(1, math.ceil(n / 40))  # at most ~40 tick labels a side
    n_layers, n_heads = p.shape[:2]
    panel = float(np.clip(0.28 * n + 1.0, 2.6, 5.2))
    # the values (".25" and a margin: 2.6 times the font size) as large as a cell allows at
    # the width the page shows the figure; printed only where that is legible (the colour bar
    # carries them otherwise)
    shown = min(1.0, PAGE_WIDTH / (panel * n_heads + 1.0))
    size = min(9.0, panel * 72 / n * shown / 2.6)
    # token labels at TICK_POINTS as the page shows them (the figure is scaled by `shown`),
    # every step-th token where they would otherwise overlap
    tick = TICK_POINTS / shown
    step = max(step, math.ceil(n * tick * 1.6 / (panel * 72)))  # the axes: ~0.8 of a panel
    with style_context():
        fig, axes = new_figure(n_layers, n_heads, (panel * n_heads + 1.0, panel * n_layers + 0.6),
                            title)
        for (l, h), ax in np.ndenumerate(axes):
            ax.patch.set(facecolor=HIDDEN, hatch="////", edgecolor="0.65")
            marked = [] if marks is None else np.flatnonzero(np.asarray(marks)[:n] >= 0)
            image = _heat_panel(ax, data[l, h], labels, labels, (step, step), tick,
                                f"layer {l}, head {h}",
                                ((marks[q], q) for q in marked if not hidden[q, marks[q]]),
                                cmap=cmap, vmin=vmin, vmax=1.0)
            if n <= ANNOTATE_MAX and size >= MIN_TEXT:
                _annotate(ax, data[l, h], size / shown, scale == "minmax")
        axes[-1, 0].set_xlabel("key")
        for ax in axes[:, 0]:
            ax.set_ylabel("query")
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label=label)
    return fig


def _annotate(ax: Axes, values: np.ma.MaskedArray, size: float, minmax: bool) -> None:
    """Print every visible cell's value, at most three characters: the leading zero dropped,
    1 (and -1) without decimals."""
    for (q, k), v in np.ndenumerate(values.filled(np.nan)):
        if not np.isnan(v):
            dark = abs(v) > 0.5 if minmax else v < 0.6  # where the colour map is dark
            shown = f"{v:.1f}" if minmax else f"{v:.2f}"
            shown = shown[:-2 if minmax else -3] if abs(v) >= (0.95 if minmax else 0.995) else shown
            text = ax.text(k, q, shown.replace("0.", ".", 1), ha="center", va="center",
                           fontsize=size,
                           color="white" if dark else "black")
            text.set_in_layout(False)  # hundreds of texts: keep them out of the layout pass


def plot_attention_summary(summary: explain.LongInputSummary, title: str | None = None) -> Figure:
    """One head on one long string (hundreds to thousands of tokens), in four panels.

    (a) the pattern downsampled by block maximum (log colours), where thin diagonals such as
    partner attention survive; (b) mean mass by signed offset key - query in log2 bins, beside
    uniform attention; (c) every closer's mass on its partner along the string, beside
    uniform attention; (d) the same by nesting level.

    Returns:
        A Figure with 4 panels and a colour bar.
    """
    s = summary
    nb = len(s.offset_edges) - 1
    positive = s.block_max[s.block_max > 0]
    low = max(float(positive.min()) if positive.size else 1e-6, 1e-6)
    with style_context():
        fig, axes = new_figure(2, 2, (10.5, 8.0), title or f"One head on a {s.n - 2}-symbol string")
        ax = axes[0, 0]
        image = ax.imshow(s.block_max, cmap="magma", extent=(0, s.n, s.n, 0),
                          norm=mcolors.LogNorm(low, max(float(s.block_max.max()), low * 10)))
        fig.colorbar(image, ax=ax, shrink=0.85, label="largest weight in the block")
        ax.set(xlabel="key position", ylabel="query position",
               title=f"(a) pattern, {len(s.block_edges) - 1}² blocks (block maximum)")
        ax = axes[0, 1]
        x = np.arange(2 * nb + 1)
        ax.bar(x, s.offset_mass, color=[PALETTE[0]] * nb + ["0.2"] + [PALETTE[3]] * nb,
               label="this head")
        ax.step(x, s.uniform_mass, where="mid", color="0.4", ls="--", label="uniform attention")
        names = [f"-{e}" for e in s.offset_edges[:-1][::-1]] + ["0"] + [
            f"+{e}" for e in s.offset_edges[:-1]]
        ticks = np.unique(np.r_[np.arange(0, 2 * nb + 1, max(1, (2 * nb + 1) // 12)), nb])
        ax.set_xticks(ticks, [names[i] for i in ticks], rotation=90)
        ax.set(xlabel="offset key − query (bin ±e: |offset| in [e, 2e))",
               ylabel="mean attention mass", title="(b) where attention goes, by offset")
        ax.legend()
        ax = axes[1, 0]
        q = np.flatnonzero(~np.isnan(s.partner_mass))
        ax.scatter(q, s.partner_mass[q], s=5, color=PALETTE[3], rasterized=True,
                   label="mass on the partner")
        ax.plot(np.arange(s.n), 1.0 / s.visible, color="0.4", ls="--", label="uniform attention")
        # log scale: at thousands of tokens uniform attention gives each key ~1e-3
        floor = 0.5 * min(1.0 / s.n, float(np.nanmin(s.partner_mass, initial=1.0)))
        ax.set(xlabel="closer position", ylabel="attention on the partner", yscale="log",
               ylim=(max(floor, 1e-6), 1.5), title="(c) closers' attention on their partner")
        ax.legend(loc="upper right")
        ax = axes[1, 1]
        level = np.arange(1, len(s.partner_by_level) + 1)
        ax.plot(level, s.partner_by_level, marker="o", ms=3, color=PALETTE[3])
        ax.set(xlabel="nesting level of the pair (1 = outermost)", yscale="log",
               ylim=(max(floor, 1e-6), 1.5), ylabel="mean attention on the partner",
               title="(d) by nesting level")
    return fig


def plot_matching(scores: explain.MatchingScores | Mapping[str, explain.MatchingScores],
                  title: str | None = None) -> Figure:
    """Per head: does a closer attend to its partner where no cheap heuristic finds it?

    Bars per head: mean attention of closers on their partner (all closers), on the partner
    at the closers where both heuristics miss ("hard"), on the previous token and on the most
    recent opener of the same type; lines: uniform attention over all and over hard closers.
    A head that only looks structured has a tall "all" bar and a "hard" bar near the line.

    Args:
        scores: one ``explain.MatchingScores`` or ``{label: MatchingScores}`` (a panel each).

    Returns:
        A Figure with one panel per entry.
    """
    items = dict(scores) if isinstance(scores, Mapping) else {"": scores}
    bars = (("partner", "partner (all closers)", PALETTE[0]),
            ("partner_hard", "partner (heuristics miss)", PALETTE[3]),
            ("previous", "previous token", "0.6"),
            ("recent_opener", "recent same-type opener", PALETTE[5]))
    n_heads = max(s.partner.size for s in items.values())
    with style_context():
        fig, axes = new_figure(1, len(items), (max(3.6, 0.9 * n_heads + 2) * len(items) + 2.4, 4.0),
                            sharey=True, title=title)  # + 2.4 inches for the legend
        for ax, (label, s) in zip(axes[0], items.items()):
            heads = np.arange(s.partner.size)
            for j, (field, name, color) in enumerate(bars):
                ax.bar(heads + (j - 1.5) * 0.2, getattr(s, field).ravel(), 0.19, color=color,
                       label=name)
            ax.axhline(s.uniform, color="0.3", ls=":", lw=1, label="uniform (all closers)")
            ax.axhline(s.uniform_hard, color="0.3", ls="--", lw=1, label="uniform (hard)")
            ax.set_xticks(heads, [f"L{l}H{h}" for l, h in np.ndindex(s.partner.shape)])
            ax.set_ylim(0, 1)
            ax.set_title(f"{label + ': ' if label else ''}{s.n_closers} closers, "
                         f"{s.n_hard / s.n_closers:.0%} hard\nright: previous "
                         f"{s.previous_share:.0%}, recent opener {s.recent_share:.0%}")
        axes[0, 0].set_ylabel("mean attention of closers")
        axes[0, -1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def plot_preview_roc(scores: Mapping[str, tuple[np.ndarray, np.ndarray]],
                     title: str | None = None) -> Figure:
    """The ``[end]`` token's self-attention as a membership score: ROC curves, and its
    distribution by class for every model.

    Args:
        scores: ``{label: (scores (batch,) from explain.preview_scores, labels (batch,) 0/1)}``.

    Returns:
        A Figure with the ROC panel and one histogram panel per model.
    """
    items = {name: np.asarray(s) for name, (s, _) in scores.items()}
    truth = {name: np.asarray(y).astype(bool) for name, (_, y) in scores.items()}
    with style_context():
        fig, axes = new_figure(1, 1 + len(items), (3.9 * (1 + len(items)), 3.8), title)
        ax = axes[0, 0]
        for name, s in items.items():
            fpr, tpr = explain.roc_curve(s, truth[name])
            ax.plot(fpr, tpr, lw=1.5, label=f"{name}: AUC {explain.roc_auc(s, truth[name]):.2f}")
        ax.plot([0, 1], [0, 1], color="0.5", ls="--", lw=1, label="no information")
        ax.set(xlim=(0, 1), ylim=(0, 1.01), aspect="equal", xlabel="false-positive rate",
               ylabel="true-positive rate", title="ROC: score = [end] self-attention")
        ax.legend(loc="lower right")
        for ax, (name, s) in zip(axes[0, 1:], items.items()):
            s, y = np.asarray(s, dtype=np.float64), truth[name]
            bins = np.histogram_bin_edges(s, bins=min(40, max(5, s.size // 10)))
            for cls, color, what in ((y, PALETTE[0], "members"), (~y, PALETTE[3], "non-members")):
                ax.hist(s[cls], bins=bins, alpha=0.6, color=color, label=f"{what} ({cls.sum()})")
            ax.set(xlabel="[end] self-attention, last layer", ylabel="strings", title=name)
            ax.xaxis.set_major_locator(MaxNLocator(5))
            ax.legend()
    return fig


def plot_cross_attention(patterns: np.ndarray, prefix: str, output: str,
                         partners: Sequence[int], *, title: str | None = None) -> Figure:
    """Cross-attention of one completion: decoder step x source position, a panel per layer
    (rows) and head (columns), one colour bar; the opener each emitted closer closes outlined.

    Args:
        patterns: (layer, head, target pos, source pos) of one example, e.g. the stacked
            ``blocks.{l}.cross_attn.hook_pattern`` of ``run_with_cache`` (pads are cropped).
        prefix: the prefix (the source is ``<bos> prefix <eos>``).
        output: the decoder's output, one character per step (``"$"`` may stand for ``<eos>``).
        partners: (steps,) prefix position of the opener each step closes (-1: none, e.g.
            ``<eos>``), e.g. ``completion.open_positions(...)[i]``.
        title: the figure title.

    Returns:
        A Figure with layer x head panels and a colour bar.
    """
    p = np.asarray(patterns, dtype=np.float64)
    n_src, n_out = len(prefix) + 2, len(output)
    if p.ndim != 4 or p.shape[2] < n_out or p.shape[3] < n_src:
        raise ValueError(f"patterns must be (layer, head, target, source) with at least "
                         f"({n_out}, {n_src}) positions, got shape {p.shape}")
    if len(partners) != n_out:
        raise ValueError(f"partners must hold one position per output step ({n_out}), "
                         f"got {len(partners)}")
    src_labels = ["<bos>", *prefix, "<eos>"]
    out_labels = ["<eos>" if c == "$" else c for c in output]
    n_layers, n_heads = p.shape[:2]
    width = float(np.clip(0.16 * n_src + 1.2, 3.0, 9.0))
    height = float(np.clip(0.22 * n_out + 1.0, 1.6, 5.0))
    step = max(1, math.ceil(n_src / 60))  # at most ~60 source labels
    with style_context():
        fig, axes = new_figure(n_layers, n_heads, (width * n_heads + 1.0, height * n_layers + 0.6),
                            title)
        for (l, h), ax in np.ndenumerate(axes):
            image = _heat_panel(
                ax, p[l, h, :n_out, :n_src], src_labels, out_labels, (step, 1),
                float(np.clip(width * 72 / n_src * 0.6, 5, 9)), f"layer {l}, head {h}",
                ((partner + 1, j) for j, partner in enumerate(partners) if partner >= 0),
                cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        fig.supxlabel("source position (the opener each closer closes outlined)")
        fig.supylabel("decoder step (emitted token)")
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8,
                     label="cross-attention probability")
    return fig
