"""Every figure of the book: arrays and records in, a ``matplotlib.figure.Figure`` out.

Figures are built from ``Figure`` directly, never through pyplot: nothing is registered with
pyplot's figure manager, so nothing leaks between calls and notebooks do not draw a figure
twice. Show one by making it a cell's value, save it with ``fig.savefig(path)``. The style is
applied inside each function (``style_context``), so global matplotlib state never changes.
The takeaway of a figure belongs to the caller's caption.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
import seaborn as sns
from matplotlib import colors as mcolors
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Arc, Rectangle
from matplotlib.ticker import FormatStrFormatter, MaxNLocator, ScalarFormatter

from dyckbook import explain
from dyckbook.blocks import POS_ENCODINGS
from dyckbook.dataset import MEMBER, Dataset
from dyckbook.evaluate import Score, wilson
from dyckbook.hardness import BINS
from dyckbook.intervals import interval
from dyckbook.languages import Dyck
from dyckbook.model import MASKS, READOUTS
from dyckbook.probes import PROBE_TARGETS, ProbeResult, prefix_targets

__all__ = [
    "PALETTE", "STYLE", "plot_ablation", "plot_accuracy_by_length", "plot_attention_grid",
    "plot_attention_summary", "plot_cross_attention", "plot_depth_profile", "plot_grid",
    "plot_kinds", "plot_matching", "plot_preview_roc", "plot_probes", "plot_seeds",
    "plot_training_curves", "plot_word_counts", "style_context",
]

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


@contextlib.contextmanager
def style_context() -> Iterator[None]:
    """Apply ``STYLE`` within a ``with`` block (nothing leaks out)."""
    with matplotlib.rc_context(STYLE):
        yield


def _figure(nrows: int, ncols: int, size: tuple[float, float], title: str | None = None,
            **kw: Any):
    """A pyplot-free figure with a constrained layout, a 2-D array of axes and ``title``
    (if any) above them all."""
    fig = Figure(figsize=size, layout="constrained")
    if title:
        fig.suptitle(title)
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kw)


def _panel(size: tuple[float, float], title: str | None = None) -> tuple[Figure, Axes]:
    """A one-panel figure (:func:`_figure`) and its axes, titled ``title`` if given."""
    fig, axes = _figure(1, 1, size)
    if title:
        axes[0, 0].set_title(title)
    return fig, axes[0, 0]


def _as_list(x: Any) -> list:
    return list(x) if isinstance(x, Sequence) and not isinstance(x, str) else [x]


# --- attention ---
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
    with style_context():
        fig, axes = _figure(n_layers, n_heads, (panel * n_heads + 1.0, panel * n_layers + 0.6),
                            title)
        for (l, h), ax in np.ndenumerate(axes):
            ax.patch.set(facecolor=HIDDEN, hatch="////", edgecolor="0.65")
            marked = [] if marks is None else np.flatnonzero(np.asarray(marks)[:n] >= 0)
            image = _heat_panel(ax, data[l, h], labels, labels, (step, step),
                                float(np.clip(panel * 72 / n * 0.7, 5, 9)), f"layer {l}, head {h}",
                                ((marks[q], q) for q in marked if not hidden[q, marks[q]]),
                                cmap=cmap, vmin=vmin, vmax=1.0)
            if n <= ANNOTATE_MAX:
                _annotate(ax, data[l, h], panel * 72 / n * 0.33, scale == "minmax")
        axes[-1, 0].set_xlabel("key")
        for ax in axes[:, 0]:
            ax.set_ylabel("query")
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label=label)
    return fig


def _annotate(ax: Axes, values: np.ma.MaskedArray, size: float, minmax: bool) -> None:
    """Print every visible cell's value (leading zero dropped so it fits)."""
    for (q, k), v in np.ndenumerate(values.filled(np.nan)):
        if not np.isnan(v):
            dark = abs(v) > 0.5 if minmax else v < 0.6  # where the colour map is dark
            text = ax.text(k, q, f"{v:.1f}" if minmax else f"{v:.2f}".replace("0.", ".", 1),
                           ha="center", va="center", fontsize=float(np.clip(size, 4, 8)),
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
        fig, axes = _figure(2, 2, (10.5, 8.0), title or f"One head on a {s.n - 2}-symbol string")
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
        fig, axes = _figure(1, len(items), (max(3.6, 0.9 * n_heads + 2) * len(items) + 2.4, 4.0),
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
        fig, axes = _figure(1, 1 + len(items), (3.9 * (1 + len(items)), 3.8), title)
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


# --- training and evaluation ---
def plot_training_curves(history: Sequence[Mapping[str, Any]] | Mapping[str, Sequence],
                         title: str | None = None) -> Figure:
    """Training loss and validation accuracy against the optimiser step.

    Args:
        history: a run's history (``RunRecord.history``: dicts with ``step``, ``train_loss``
            and, when validated, ``val_accuracy``) or ``{label: history}``, a line each
            (e.g. one per seed).

    Returns:
        A Figure with the loss panel and, when any history has validation, the accuracy panel.
    """
    items = dict(history) if isinstance(history, Mapping) else {"": history}
    if not items or not all(items.values()):
        raise ValueError(f"history must hold at least one record per run, got {history!r:.80}")
    validated = any("val_accuracy" in h[0] for h in items.values())
    with style_context():
        fig, axes = _figure(1, 1 + validated, (4.6 * (1 + validated), 3.5), title)
        for i, (label, h) in enumerate(items.items()):
            step = [r["step"] for r in h]
            color = PALETTE[i % len(PALETTE)]
            axes[0, 0].plot(step, [r["train_loss"] for r in h], color=color, label=label or None)
            if validated and "val_accuracy" in h[0]:
                axes[0, 1].plot(step, [r["val_accuracy"] for r in h], color=color, marker="o",
                                ms=2.5, label=label or None)
        axes[0, 0].set(xlabel="step", ylabel="cross-entropy (log scale)", yscale="log",
                       title="Training loss")
        axes[0, 0].yaxis.set_major_formatter(ScalarFormatter())
        axes[0, 0].yaxis.set_minor_formatter(FormatStrFormatter("%.2g"))
        if validated:
            axes[0, 1].set(xlabel="step", ylabel="validation accuracy", ylim=(0.4, 1.01),
                           title="Validation accuracy")
        if len(items) > 1:
            axes[0, -1].legend(loc="lower right" if validated else "upper right")
    return fig


def _cells(table: Score | Mapping[int, Sequence[int]], by: str) -> tuple[np.ndarray, ...]:
    """(keys, n, correct) sorted by key, from a Score's table or ``{key: [n, correct]}``."""
    if isinstance(table, Score):
        table = table.per_length if by == "length" else table.per_depth
    keys = np.array(sorted(table), dtype=np.int64)
    n, correct = (np.array([table[k][i] for k in keys], dtype=np.int64) for i in (0, 1))
    return keys, n, correct


def pooled_strata(keys: np.ndarray, n: np.ndarray, correct: np.ndarray, min_strings: int,
                  split: float | None = None) -> tuple[np.ndarray, ...]:
    """Adjacent lengths pooled until every stratum holds >= ``min_strings`` strings (a short
    remainder joins the stratum before it); no stratum crosses ``split``. Returns (position:
    the strata's mean length weighted by strings, n, correct)."""
    sides = [keys <= split, keys > split] if split is not None else [keys == keys]
    groups: list[list[int]] = []
    for side in sides:
        first = len(groups)
        for i in np.flatnonzero(side):
            if len(groups) > first and n[groups[-1]].sum() < min_strings:
                groups[-1].append(i)
            else:
                groups.append([i])
        if len(groups) - first > 1 and n[groups[-1]].sum() < min_strings:
            groups[-2].extend(groups.pop())
    pos = np.array([np.average(keys[g], weights=np.maximum(n[g], 1)) for g in groups])
    return pos, np.array([n[g].sum() for g in groups]), np.array([correct[g].sum()
                                                                  for g in groups])


def plot_accuracy_by_length(series: Mapping[str, Score | Mapping[int, Sequence[int]]],
                            train_max_length: int | None = None, *, by: str = "length",
                            title: str | None = None, measure: str = "accuracy",
                            chance: float | None = 0.5, min_strings: int = 100,
                            xlabel: str | None = None) -> Figure:
    """Accuracy against string length (or maximum depth), with 95% Wilson bands, and the
    longest training length marked and the region beyond it shaded. Adjacent lengths are
    pooled until each point rests on >= ``min_strings`` strings (:func:`pooled_strata`).

    Args:
        series: ``{label: Score or {length: [n, correct]}}``, a line each.
        train_max_length: the longest (or deepest) training string, or None.
        by: ``length`` (``Score.per_length``) or ``depth`` (``Score.per_depth``).
        measure: the y label (e.g. ``exact match`` for completions, by prefix length).
        chance: a dotted line at this accuracy (None: none, e.g. for exact match).
        xlabel: the x axis' label (default: string length, or maximum nesting depth).

    Returns:
        A Figure with one panel.
    """
    return plot_length_panels({title or "": series}, train_max_length, by=by, measure=measure,
                              chance=chance, min_strings=min_strings, xlabel=xlabel)


def plot_length_panels(panels: Mapping[str, Mapping[str, Score | Mapping[int, Sequence[int]]]],
                       train_max_length: int | None = None, *, by: str = "length",
                       measure: str = "accuracy", chance: float | None = 0.5,
                       min_strings: int = 100, xlabel: str | None = None) -> Figure:
    """:func:`plot_accuracy_by_length` with a panel per ``{title: series}`` of ``panels``, one
    above the other on a shared length axis (e.g. one panel per language)."""
    if by not in ("length", "depth"):
        raise ValueError(f"by must be 'length' or 'depth', got {by!r}")
    if not panels:
        raise ValueError("panels must hold at least one {title: series}, got none")
    with style_context():
        fig, axes = _figure(len(panels), 1, (7.0, 3.8 * len(panels)), sharex=True)
        for ax, (title, series) in zip(axes[:, 0], panels.items()):
            if title:
                ax.set_title(title)
            _length_lines(ax, series, train_max_length, by, measure, chance, min_strings)
        for ax in axes[:, 0]:
            ax.tick_params(labelbottom=True)
        axes[-1, 0].set_xlabel(xlabel or ("string length" if by == "length"
                                          else "maximum nesting depth"))
    return fig


def _length_lines(ax: Axes, series: Mapping[str, Any], train_max_length: int | None, by: str,
                  measure: str, chance: float | None, min_strings: int) -> None:
    right = 0
    for i, (label, table) in enumerate(series.items()):
        keys, n, correct = _cells(table, by)
        keep = n > 0
        keys, n, correct = pooled_strata(keys[keep], n[keep], correct[keep], min_strings,
                                         train_max_length)
        band = np.array([wilson(int(c), int(m)) for c, m in zip(correct, n)]).reshape(-1, 2)
        color = PALETTE[i % len(PALETTE)]
        ax.plot(keys, correct / n, marker="o", ms=3, color=color, label=label)
        ax.fill_between(keys, band[:, 0], band[:, 1], color=color, alpha=0.18, lw=0)
        right = max(right, int(keys.max(initial=0)))
    if train_max_length is not None:
        edge = train_max_length + 0.5
        ax.axvline(edge, color="0.25", ls="--", lw=1.2)
        ax.axvspan(edge, max(right, edge) + 1, color="0.5", alpha=0.1, lw=0,
                   label=f"{'longer' if by == 'length' else 'deeper'} than training "
                         f"(> {train_max_length})")
    if chance is not None:
        ax.axhline(chance, color="0.6", lw=0.8, ls=":")
    ax.set(ylim=(-0.02, 1.02), ylabel=f"{measure} (95% Wilson band, >= {min_strings} "
                                      f"strings a point)")
    ax.grid(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))


def plot_kinds(model_scores: Score | Sequence[Score],
               baseline_scores: Mapping[str, Score | Sequence[Score]],
               title: str | None = None) -> Figure:
    """Balanced accuracy per negative kind and per hardness bin: the model's seeds beside
    baselines.

    Each kind and each bin (``hardness.BINS``: rejected by counters, by an exact window of at
    most 4, 6, 8 symbols, or by none of these) is scored against the members of the same
    lengths, so 0.5 is chance; the members' own accuracy is the first row. A baseline that
    reaches the model on a row shows that those strings need no more than its view of them.

    Args:
        model_scores: the model's Score of every seed on one test set.
        baseline_scores: ``{baseline: Score or one Score per seed}`` on the same set.

    Returns:
        A Figure with one panel: members, then a row per kind, then a row per bin present.
    """
    model_scores = _as_list(model_scores)
    baselines = {name: _as_list(s) for name, s in baseline_scores.items()}
    kinds = sorted({k for s in model_scores for k in s.per_kind if k != MEMBER})
    bins = [b for b in BINS if any(s.per_bin.get(b, [0])[0] for s in model_scores)]
    labels = ["members"] + [k.replace("_", " ") for k in kinds] + [f"bin {b}" for b in bins]

    def values(s: Score) -> list[float]:
        return ([s.accuracy_of("per_kind", MEMBER)] + [s.balanced(kind=k) for k in kinds]
                + [s.balanced(bin=b) for b in bins])

    markers = "sD^vP<>X"
    colors = [PALETTE[i] for i in (1, 2, 3, 4, 7)] + ["0.5"]  # never the model's blue
    with style_context():
        fig, ax = _panel((7.0, 0.42 * len(labels) + 1.6), title)
        rows = np.arange(len(labels))
        for j, (name, scores) in enumerate(baselines.items()):
            acc = np.nanmean([values(s) for s in scores], axis=0)
            ax.scatter(acc, rows, marker=markers[j % len(markers)], s=42, facecolor="none",
                       edgecolor=colors[j % len(colors)], lw=1.4, label=name, zorder=3)
        acc = np.array([values(s) for s in model_scores])
        jitter = np.linspace(-0.15, 0.15, len(model_scores)) if len(model_scores) > 1 else [0.0]
        for seed_acc, dy in zip(acc, jitter):
            ax.scatter(seed_acc, rows + dy, s=14, color=PALETTE[0], alpha=0.7, zorder=4,
                       label="model (one dot per seed)" if dy == jitter[0] else None)
        ax.scatter(np.nanmean(acc, 0), rows, marker="|", s=260, lw=2.2, color=PALETTE[0],
                   label="model, mean of seeds", zorder=5)
        ax.axvline(0.5, color="0.6", lw=0.8, ls=":")
        for edge in (0.5, 0.5 + len(kinds)):
            ax.axhline(edge, color="0.8", lw=0.8)
        ax.set_yticks(rows, labels)
        ax.invert_yaxis()
        ax.set(xlim=(-0.02, 1.02),
               xlabel="accuracy of the members; balanced accuracy of a kind or bin")
        ax.grid(True, axis="x")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def plot_oracle(tables: Mapping[str, Mapping[str, Mapping[str, float]]], bar: float,
                title: str | None = None) -> Figure:
    """The oracle (``baselines.attack``): every stack-free rule's balanced accuracy on a fresh
    sample of each test set, a bar per set rising from one half, the bar the long-range sets
    must stay under dotted.

    Args:
        tables: ``{set: {rule: {"all": balanced accuracy, ...}}}``; a rule a set lacks (a
            recogniser of that language) leaves a gap.
        bar: the long-range sets' bar (``baselines.ORACLE_BAR``).

    Returns:
        A Figure with one panel, the rules along the x axis.
    """
    rules = list(dict.fromkeys(rule for table in tables.values() for rule in table))
    colours = [PALETTE[i] for i in (3, 1, 5, 0, 2, 4, 7)]
    with style_context():
        fig, ax = _panel((10.0, 3.8), title)
        x, width = np.arange(len(rules)), 0.8 / max(len(tables), 1)
        for i, (label, table) in enumerate(tables.items()):
            acc = np.array([table[r]["all"] if r in table else np.nan for r in rules])
            ax.bar(x + (i - (len(tables) - 1) / 2) * width, acc - 0.5, width, bottom=0.5,
                   label=label, color=colours[i % len(colours)])
        ax.axhline(0.5, color="0.2", lw=1)
        ax.axhline(bar, color="0.4", lw=1, ls=":",
                   label=f"bar of the long-range sets ({100 * bar:.0f}%)")
        ax.set_xticks(x, rules, rotation=35, ha="right")
        ax.set(ylabel="balanced accuracy (fresh sample)", ylim=(0.4, 1.02))
        ax.legend(ncols=3, fontsize=8, loc="upper left")
    return fig


def plot_seeds(rows: Sequence[Mapping[str, Any]], value: str = "accuracy",
               title: str | None = None) -> Figure:
    """Per-seed results of several configurations: a dot per seed, the mean with its 95%
    interval over every seed (``intervals.METHOD``); failed seeds are grey crosses, counted in
    the mean.

    Args:
        rows: one dict per seed with ``config`` (its label), ``value``'s key and optionally
            ``status`` (``ok`` | ``failed``, as in ``RunRecord``).
        value: the key plotted, e.g. ``accuracy``.

    Returns:
        A Figure with one panel, a row per configuration in order of appearance.
    """
    configs = list(dict.fromkeys(r["config"] for r in rows))
    ok = [r for r in rows if r.get("status", "ok") == "ok"]
    failed = [r for r in rows if r.get("status", "ok") != "ok"]
    with style_context():
        fig, ax = _panel((6.5, 0.5 * len(configs) + 1.4), title)
        if ok:
            sns.stripplot(x=[r[value] for r in ok], y=[r["config"] for r in ok], order=configs,
                          orient="h", ax=ax, color=PALETTE[0], alpha=0.6, size=4, jitter=0.15,
                          label="seed")
        else:  # nothing trained: the failed seeds below are the whole figure
            ax.set_yticks(range(len(configs)), configs)
            ax.set_ylim(max(len(configs), 1) - 0.5, -0.5)
        if failed:
            ax.scatter([r[value] for r in failed], [configs.index(r["config"]) for r in failed],
                       marker="x", color="0.5", s=20, label="failed seed")
        for i, config in enumerate(configs):
            values = [r[value] for r in rows if r["config"] == config]
            if values:
                lo, hi = interval(values, bounds=(min(0.0, *values), max(1.0, *values)))
                mean = float(np.mean(values))
                ax.errorbar(mean, i, xerr=[[mean - lo], [hi - mean]], fmt="D", ms=5, capsize=3,
                            color=PALETTE[3], label="mean, 95% interval" if i == 0 else None,
                            zorder=5)
        ax.set(xlabel=value.replace("_", " "), ylabel="")
        ax.grid(True, axis="x")
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        ax.legend(unique.values(), unique.keys(), loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def plot_grid(rows: Sequence[Mapping[str, Any]], value: str = "solved_share",
              title: str | None = None) -> Figure:
    """The ablation grid as annotated heatmaps: a panel per (k, layers), rows = mask and
    positional encoding, columns = readout; empty cells were not run.

    Args:
        rows: one dict per cell (``grid.summarise``): ``k``, ``n_layers``, ``mask``,
            ``pos_encoding``, ``readout``, ``value``, ``seeds`` and ``failed`` and, for
            ``solved_share``, ``solved`` (annotated as solved / all seeds).
        value: ``solved_share`` (share of seeds that solved the language) or ``accuracy``
            (mean test accuracy over all seeds, failed ones included).

    Returns:
        A Figure with k x layers panels and a colour bar.
    """
    if value not in ("solved_share", "accuracy"):
        raise ValueError(f"value must be 'solved_share' or 'accuracy', got {value!r}")
    ks = sorted({r["k"] for r in rows})
    layers = sorted({r["n_layers"] for r in rows})
    lines = sorted({(r["mask"], r["pos_encoding"]) for r in rows},
                   key=lambda m_pe: (MASKS.index(m_pe[0]), POS_ENCODINGS.index(m_pe[1])))
    readouts = sorted({r["readout"] for r in rows}, key=READOUTS.index)
    vmin = 0.0 if value == "solved_share" else 0.5
    with style_context():
        fig, axes = _figure(len(ks), len(layers), (2.2 * len(layers) * max(1, len(readouts)) / 3
                                                   + 2.6, 0.32 * len(lines) * len(ks) + 1.2),
                            sharex=True, sharey=True, title=title)
        for (i, k), (j, n_layers) in ((a, b) for a in enumerate(ks) for b in enumerate(layers)):
            grid = np.full((len(lines), len(readouts)), np.nan)
            text = np.full(grid.shape, "", dtype=object)
            for r in rows:
                if (r["k"], r["n_layers"]) == (k, n_layers):
                    cell = lines.index((r["mask"], r["pos_encoding"])), readouts.index(r["readout"])
                    grid[cell] = r[value]
                    text[cell] = ("all failed" if r["seeds"] == r["failed"] else
                                  f"{r['solved']}/{r['seeds']}"
                                  if value == "solved_share" else f"{r[value]:.2f}")
            ax = axes[i, j]
            ax.set_facecolor(HIDDEN)
            sns.heatmap(grid, ax=ax, vmin=vmin, vmax=1.0, cmap="viridis", annot=text, fmt="",
                        annot_kws={"fontsize": 7}, cbar=False, linewidths=0.5,
                        linecolor="white", xticklabels=readouts,
                        yticklabels=[f"{m}, {pe}" for m, pe in lines])
            for r, c in zip(*np.nonzero(text == "all failed")):  # NaN: seaborn leaves it blank
                ax.text(c + 0.5, r + 0.5, "all failed", ha="center", va="center", fontsize=7)
            ax.set_title(f"Dyck-{k}, {n_layers} layer{'s' * (n_layers > 1)}")
            ax.tick_params(length=0)
            ax.set(xlabel="readout" if i == len(ks) - 1 else "", ylabel="")
        fig.colorbar(axes[0, 0].collections[0], ax=axes.ravel().tolist(), shrink=0.8,
                     label=value.replace("_", " "))
    return fig


# --- mechanism: probes and ablations ---
def _hook_name(hook: str) -> str:
    """``blocks.0.hook_resid_pre`` -> ``embed``, ``blocks.1.hook_resid_mid`` -> ``L1 attn``."""
    if hook == "blocks.0.hook_resid_pre":
        return "embed"
    parts = hook.split(".")
    names = {"hook_resid_mid": "attn", "hook_resid_post": "mlp"}
    return f"L{parts[1]} {names[parts[2]]}" if len(parts) == 3 and parts[2] in names else hook


def plot_probes(results: Mapping[str, Mapping[str, ProbeResult]]
                | Sequence[Mapping[str, Mapping[str, ProbeResult]]],
                title: str | None = None) -> Figure:
    """Held-out score of linear probes along the residual stream, a panel per target.

    Args:
        results: ``probes.probe_all``'s ``{target: {hook: ProbeResult}}``, or one per seed
            (dots per seed, a line through their mean; dashed: the trivial predictor).

    Returns:
        A Figure with one panel per target present.
    """
    runs = _as_list(results)
    targets = [t for t in PROBE_TARGETS if any(t in r for r in runs)]
    units = {"regression": "held-out R²", "classification": "held-out accuracy"}
    names = {"depth": "depth after the symbol", "balanced": "prefix balanced so far",
             "membership": "membership, at the readout"}
    with style_context():
        fig, axes = _figure(1, len(targets), (4.0 * len(targets), 3.6), title)
        for ax, target in zip(axes[0], targets):
            hooks = list(next(r[target] for r in runs if target in r))
            x = np.arange(len(hooks))
            score = np.array([[r[target][h].test_score for h in hooks]
                              for r in runs if target in r])
            base = np.array([[r[target][h].baseline for h in hooks] for r in runs if target in r])
            for row in score:
                ax.scatter(x, row, s=10, color=PALETTE[0], alpha=0.5)
            ax.plot(x, score.mean(0), color=PALETTE[0], marker="o", ms=4, label="probe")
            ax.plot(x, base.mean(0), color="0.4", ls="--", label="mean / majority")
            ax.set_xticks(x, [_hook_name(h) for h in hooks], rotation=30, ha="right",
                          rotation_mode="anchor")
            ax.set(ylim=(min(-0.05, float(np.nanmin(score)) - 0.05), 1.05),
                   ylabel=units[PROBE_TARGETS[target][1]], title=names[target])
            ax.grid(True, axis="y")
        fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside upper right", ncols=2)
    return fig


def plot_ablation(drops: np.ndarray | Sequence[np.ndarray], title: str | None = None) -> Figure:
    """Accuracy drop when each head is removed (``probes.head_ablation_effects``), mean over
    seeds, as an annotated layer x head heatmap (red: the model needs the head).

    Args:
        drops: (layer, head), or one per seed.

    Returns:
        A Figure with the heatmap and its colour bar.
    """
    stack = np.asarray(drops, dtype=np.float64)
    stack = stack[None] if stack.ndim == 2 else stack
    if stack.ndim != 3:
        raise ValueError(f"drops must be (layer, head) or (seed, layer, head), got {stack.shape}")
    mean = stack.mean(0)
    limit = max(0.05, float(np.abs(mean).max()))
    n_layers, n_heads = mean.shape
    with style_context():
        fig, axes = _figure(1, 1, (max(4.8, 1.1 * n_heads + 2.4), 0.7 * n_layers + 1.4))
        text = [[f"{m:+.3f}" + (f"\n±{s:.3f}" if len(stack) > 1 else "") for m, s in zip(*r)]
                for r in zip(mean, stack.std(0))]
        sns.heatmap(mean, ax=axes[0, 0], cmap="RdBu_r", vmin=-limit, vmax=limit, annot=text,
                    fmt="", annot_kws={"fontsize": 8}, linewidths=0.5, linecolor="white",
                    xticklabels=[f"head {h}" for h in range(n_heads)],
                    yticklabels=[f"layer {l}" for l in range(n_layers)],
                    cbar_kws={"label": "accuracy drop"})
        axes[0, 0].tick_params(length=0, rotation=0)
        fig.suptitle(title or ("Accuracy drop per removed head"
                               + (f"\n(mean ± sd of {len(stack)} seeds)" if len(stack) > 1
                                  else "")))
    return fig


# --- the Dyck-languages chapter ---
def plot_word_counts(counts_by_k: Mapping[int, Mapping[int, int]],
                     title: str | None = None) -> Figure:
    """Number of Dyck-k words of every length, log scale (integers of any size).

    Args:
        counts_by_k: ``{k: {length: count}}``, e.g. from ``Dyck(k).count``.

    Returns:
        A Figure with one panel.
    """
    if not counts_by_k:
        raise ValueError("counts_by_k must hold at least one k, got none")
    # log10 of Python ints: exact for counts far beyond float range
    logs = {k: sorted((n, math.log10(c)) for n, c in d.items() if c > 0)
            for k, d in counts_by_k.items()}
    exponent = max(v for d in logs.values() for _, v in d) > 300  # beyond float64
    with style_context():
        fig, ax = _panel((6.5, 3.8), title)
        for k in sorted(logs):
            n, v = np.array(logs[k]).T
            ax.plot(n, v if exponent else 10.0 ** v, marker="o" if n.size <= 40 else None,
                    ms=3, label=f"Dyck-{k}")
        ax.set(xlabel="string length", ylabel="log10(number of words)" if exponent
               else "number of words (log scale)", yscale="linear" if exponent else "log")
        ax.grid(True)
        ax.legend()
    return fig


def plot_depth_profile(string: str, language: Dyck, title: str | None = None) -> Figure:
    """A string's height after every symbol as a mountain, each matched pair as an arc below
    (coloured by type); in a non-member, a red cross marks the first symbol after which no
    completion is a member.

    Returns:
        A Figure with one panel.
    """
    one = Dataset.from_strings(language, [string])
    n = len(string)
    height = np.r_[0, language.heights(one.codes, one.lengths)[0]].astype(int)
    partner = language.matching(one.codes, one.lengths)[0]
    _, balanced = prefix_targets(one)
    top, bottom = max(int(height.max()), 1), min(int(height.min()), 0)
    arc = 0.45 * top if (partner >= 0).any() else 0.0
    with style_context():
        fig, ax = _panel((float(np.clip(0.3 * n + 1.5, 6, 16)), 3.0 + 0.1 * top),
                         title or (f"A {n}-symbol member of {language.name}" if one.labels[0]
                                   else f"A non-member of {language.name}"))
        ax.plot(np.arange(n + 1), height, color="0.2", marker="o", ms=3, zorder=3)
        ax.fill_between(np.arange(n + 1), height, 0, color=PALETTE[5], alpha=0.15, lw=0)
        ax.axhline(0, color="0.4", lw=0.8)
        widest = max(int((partner - np.arange(n)).max(initial=1)), 1)
        for i in np.flatnonzero(partner > np.arange(n)):
            width = float(partner[i] - i)
            ax.add_patch(Arc(((i + partner[i]) / 2 + 0.5, 0), width,
                             2 * arc * (0.25 + 0.75 * width / widest), theta1=180, theta2=360,
                             color=PALETTE[(one.codes[0, i] >> 1) % len(PALETTE)], lw=1.3))
        if not balanced.all():
            i = int(np.argmin(balanced[0]))
            ax.plot(i + 0.5, (height[i] + height[i + 1]) / 2, marker="x", color="red", ms=9,
                    mew=2.2, zorder=4)
        ax.set_xticks(np.arange(n) + 0.5, list(string), fontfamily="DejaVu Sans Mono",
                      fontsize=float(np.clip(260 / max(n, 1), 7, 12)))
        ax.tick_params(axis="x", length=0)
        ax.set(xlim=(-0.3, n + 0.3), ylim=(min(bottom, -arc) - 0.2, top + 0.4), ylabel="height",
               yticks=np.arange(bottom, top + 1, max(1, (top - bottom) // 6)))
        ax.spines["bottom"].set_visible(False)
    return fig


# --- completion (the encoder-decoder) ---
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
        fig, axes = _figure(n_layers, n_heads, (width * n_heads + 1.0, height * n_layers + 0.6),
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
