"""The book's figures, shared by its pages: arrays and records in, a ``matplotlib.figure.Figure``
out. The attention figures live in :mod:`dyckbook.chapters.attention_plots` and are re-exported
here; the shared style is :mod:`dyckbook.chapters.figure_style`. A figure one page alone draws
lives in that page's chapter module (``chapters.ablation_grid.plot_grid``), built the same way.

Figures are built from ``Figure`` directly, never through pyplot: nothing is registered with
pyplot's figure manager, so nothing leaks between calls and notebooks do not draw a figure
twice. Show one by making it a cell's value, save it with ``fig.savefig(path)``. The style is
applied inside each function (``style_context``), so global matplotlib state never changes.
The takeaway of a figure belongs to the caller's caption.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from dyckbook.chapters.attention_plots import (
    plot_attention_grid,
    plot_attention_summary,
    plot_cross_attention,
    plot_matching,
    plot_preview_roc,
)
from dyckbook.chapters.figure_style import (
    PALETTE,
    STYLE,
    as_list,
    new_figure,
    new_panel,
    style_context,
)
from dyckbook.data.dataset import MEMBER
from dyckbook.data.hardness import BINS
from dyckbook.experiment.evaluate import Score, wilson
from dyckbook.experiment.intervals import interval

__all__ = [
    "PALETTE", "STYLE", "plot_accuracy_by_length", "plot_attention_grid",
    "plot_attention_summary", "plot_cross_attention", "plot_kinds", "plot_length_panels",
    "plot_matching", "plot_padding", "plot_preview_roc", "plot_seeds", "pooled_strata",
    "style_context",
]


# --- training and evaluation ---


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
                       min_strings: int = 100, xlabel: str | None = None,
                       columns: int = 1) -> Figure:
    """:func:`plot_accuracy_by_length` with a panel per ``{title: series}`` of ``panels``, in
    ``columns`` columns filled row by row on a shared length axis (e.g. one panel per
    language)."""
    if by not in ("length", "depth"):
        raise ValueError(f"by must be 'length' or 'depth', got {by!r}")
    if not panels:
        raise ValueError("panels must hold at least one {title: series}, got none")
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        raise ValueError(f"columns must be an int >= 1, got {columns!r}")
    columns = min(columns, len(panels))
    rows = -(-len(panels) // columns)
    with style_context():
        fig, axes = new_figure(rows, columns, (7.0 if columns == 1 else 5.2 * columns,
                                               3.8 * rows), sharex=True)
        flat = list(axes.ravel())
        for ax, (title, series) in zip(flat, panels.items()):
            if title:
                ax.set_title(title)
            _length_lines(ax, series, train_max_length, by, measure, chance, min_strings)
        for ax in flat[len(panels):]:
            ax.set_visible(False)
        for ax in flat:
            ax.tick_params(labelbottom=True)
        for ax in axes[-1]:
            ax.set_xlabel(xlabel or ("string length" if by == "length"
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
    model_scores = as_list(model_scores)
    baselines = {name: as_list(s) for name, s in baseline_scores.items()}
    kinds = sorted({k for s in model_scores for k in s.per_kind if k != MEMBER})
    bins = [b for b in BINS if any(s.per_bin.get(b, [0])[0] for s in model_scores)]
    labels = ["members"] + [k.replace("_", " ") for k in kinds] + [f"bin {b}" for b in bins]

    def values(s: Score) -> list[float]:
        return ([s.accuracy_of("per_kind", MEMBER)] + [s.balanced(kind=k) for k in kinds]
                + [s.balanced(bin=b) for b in bins])

    markers = "sD^vP<>X"
    colors = [PALETTE[i] for i in (1, 2, 3, 4, 7)] + ["0.5"]  # never the model's blue
    with style_context():
        fig, ax = new_panel((7.0, 0.42 * len(labels) + 1.6), title)
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
        fig, ax = new_panel((6.5, 0.5 * len(configs) + 1.4), title)
        if ok:  # seaborn jitters with numpy's global generator: seeded here, then restored,
            state = np.random.get_state()  # so that a rerun draws the same figure
            np.random.seed(0)
            try:
                sns.stripplot(x=[r[value] for r in ok], y=[r["config"] for r in ok],
                              order=configs, orient="h", ax=ax, color=PALETTE[0], alpha=0.6,
                              size=4, jitter=0.15, label="seed")
            finally:
                np.random.set_state(state)
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


def plot_padding(tasks: Mapping[str, Sequence[Mapping[str, Any]]], pads: Sequence[int],
                 core_length: int, train_max_length: int | None = None) -> Figure:
    """The padded-core intervention (``chapters.references_objectives``): negatives rejected
    (left) and members kept (right) against the string's length, a colour per configuration,
    solid for padding after the core (the dip stays), dashed for padding before it (the dip
    moves); each seed faint, their mean marked."""
    if not tasks or any(not per_seed for per_seed in tasks.values()):
        raise ValueError("tasks must map at least one configuration to its seeds' results")
    x = [core_length + m for m in pads]
    with style_context():
        fig, axes = new_figure(1, 2, (9.5, 4.4), sharey=True)
        for ax, who, title in zip(axes[0], ("negatives", "members"),
                                  ("negatives rejected", "members kept")):
            for i, (label, per_seed) in enumerate(tasks.items()):
                color = PALETTE[i % len(PALETTE)]
                for side, style in (("after", "-"), ("before", "--")):
                    values = np.array([[t["scores"][f"{who} {side}"][str(m)] for m in pads]
                                       for t in per_seed])
                    for seed_values in values:
                        ax.plot(x, seed_values, style, color=color, alpha=0.25, lw=0.8)
                    ax.plot(x, values.mean(0), style, color=color, marker="o", ms=3,
                            label=f"{label}, padded {side}")
            if train_max_length:
                ax.axvline(train_max_length, color="0.5", lw=0.8, ls=":")
            ax.set(title=title, xlabel="string length", ylim=(-0.03, 1.03))
        axes[0, 0].set_ylabel("share of the strings (seeds faint, mean marked)")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=7.5)
    return fig


#: a verdict's colour in the headline figure (Okabe-Ito, as PALETTE)
VERDICT_COLOURS = {"reproduced": PALETTE[2], "qualified": PALETTE[1], "refuted": PALETTE[3],
                   "not testable": "0.55"}


def plot_headline(rows: Sequence[Mapping[str, Any]], wrap: int = 58) -> Figure:
    """Every judged claim as a row (``re_examining_thesis.headline_rows``): our measure's mean
    and 95% interval coloured by the verdict, the thesis' Table 5.2 value (open circle) where
    one answers the claim, and the strongest stack-free rule or floor on the same strings
    (black bar) where the rule has one. Each row's words (the claim, its verdict, the measure)
    stand above it, so the figure stays narrow enough to read on a phone."""
    if not rows:
        raise ValueError("rows must hold at least one judged claim")
    lines = [textwrap.wrap(f"{r['title']}: {r['label']} ({r['name']})", wrap) for r in rows]
    step = [0.55 + 0.17 * len(text) for text in lines]  # inches per row: words, then the bar
    height = sum(step) + 1.3
    with style_context():
        fig, ax = new_panel((5.4, height))
        y, seen = 0.0, set()
        for r, text, h in zip(rows, lines, step):
            y += h
            colour = VERDICT_COLOURS.get(r["label"], "0.3")
            ax.text(-0.02, y - 0.22, "\n".join(text), fontsize=8.5, va="bottom", ha="left",
                    transform=ax.transData)
            ax.errorbar(r["mean"], y, xerr=[[r["mean"] - r["low"]], [r["high"] - r["mean"]]],
                        fmt="D", ms=6, capsize=3, color=colour, zorder=5,
                        label=r["label"] if r["label"] not in seen else None)
            seen.add(r["label"])
            if r.get("rule") is not None:
                ax.plot([r["rule"]], [y], marker="|", ms=14, mew=2.2, color="black", zorder=4,
                        label="stack-free rule, floor or ceiling, same strings"
                        if "rule" not in seen else None)
                seen.add("rule")
            if r.get("thesis") is not None:
                ax.plot([r["thesis"]], [y], marker="o", ms=8, mfc="none", mew=1.5,
                        color="black", zorder=6,
                        label="thesis (Table 5.2)" if "thesis" not in seen else None)
                seen.add("thesis")
        ax.set_ylim(y + 0.3, 0.0)
        ax.set_yticks([])
        ax.set_xlim(-0.02, 1.02)
        ax.set(xlabel="accuracy (or the claim's measure), mean and 95% interval", ylabel="")
        ax.grid(True, axis="x")
        ax.spines["left"].set_visible(False)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.7 / height), ncol=2,
                  frameon=False, fontsize=8)
    return fig
