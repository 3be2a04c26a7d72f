"""Every figure of the book: arrays and records in, a ``matplotlib.figure.Figure`` out. The
attention figures live in :mod:`dyckbook.attention_plots` and are re-exported here, so a
notebook imports ``plotting`` alone; the shared style is :mod:`dyckbook.figure_style`.

Figures are built from ``Figure`` directly, never through pyplot: nothing is registered with
pyplot's figure manager, so nothing leaks between calls and notebooks do not draw a figure
twice. Show one by making it a cell's value, save it with ``fig.savefig(path)``. The style is
applied inside each function (``style_context``), so global matplotlib state never changes.
The takeaway of a figure belongs to the caller's caption.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Arc
from matplotlib.ticker import FormatStrFormatter, ScalarFormatter

from dyckbook.attention_plots import (
    plot_attention_grid,
    plot_attention_summary,
    plot_cross_attention,
    plot_matching,
    plot_preview_roc,
)
from dyckbook.blocks import POS_ENCODINGS
from dyckbook.dataset import MEMBER, Dataset
from dyckbook.evaluate import Score, wilson
from dyckbook.figure_style import (
    HIDDEN,
    PALETTE,
    STYLE,
    as_list,
    new_figure,
    new_panel,
    style_context,
)
from dyckbook.hardness import BINS
from dyckbook.intervals import interval
from dyckbook.languages import Dyck
from dyckbook.model import MASKS, READOUTS
from dyckbook.probes import PROBE_TARGETS, ProbeResult, prefix_targets

__all__ = [
    "PALETTE", "STYLE", "plot_ablation", "plot_accuracy_by_length", "plot_attention_grid",
    "plot_attention_summary", "plot_cross_attention", "plot_depth_profile", "plot_grid",
    "plot_kinds", "plot_matching", "plot_padding", "plot_preview_roc", "plot_probes",
    "plot_seeds", "plot_training_curves", "plot_word_counts", "style_context",
]


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
        fig, axes = new_figure(1, 1 + validated, (4.6 * (1 + validated), 3.5), title)
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
        fig, axes = new_figure(len(panels), 1, (7.0, 3.8 * len(panels)), sharex=True)
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
        fig, ax = new_panel((10.0, 3.8), title)
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
        fig, ax = new_panel((6.5, 0.5 * len(configs) + 1.4), title)
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
        fig, axes = new_figure(len(ks), len(layers), (2.2 * len(layers) * max(1, len(readouts)) / 3
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
    runs = as_list(results)
    targets = [t for t in PROBE_TARGETS if any(t in r for r in runs)]
    units = {"regression": "held-out R²", "classification": "held-out accuracy"}
    names = {"depth": "depth after the symbol", "balanced": "prefix balanced so far",
             "membership": "membership, at the readout"}
    with style_context():
        fig, axes = new_figure(1, len(targets), (4.0 * len(targets), 3.6), title)
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
        fig, axes = new_figure(1, 1, (max(4.8, 1.1 * n_heads + 2.4), 0.7 * n_layers + 1.4))
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
        fig, ax = new_panel((6.5, 3.8), title)
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
        fig, ax = new_panel((float(np.clip(0.3 * n + 1.5, 6, 16)), 3.0 + 0.1 * top),
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


# --- why the length study's models break (dyckbook.length_break) ---
def plot_padding(tasks: Mapping[str, Sequence[Mapping[str, Any]]], pads: Sequence[int],
                 core_length: int, train_max_length: int | None = None) -> Figure:
    """The padded-core intervention (``dyckbook.length_break``): negatives rejected (left) and
    members kept (right) against the string's length, a colour per configuration, solid for
    padding after the core (the dip stays), dashed for padding before it (the dip moves); each
    seed faint, their mean marked."""
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
