"""Book figures: every function returns a matplotlib Figure and never calls ``show()``.

Figures are built with ``matplotlib.figure.Figure`` directly, not through pyplot: they are never
registered with pyplot's figure manager, so nothing leaks across calls (no "too many open
figures"), notebooks do not display them twice (once by the inline backend, once as the cell's
value), and the caller owns the figure outright. Show one with ``display(fig)`` or by making it
the cell's value, save it with ``fig.savefig(path)``. Styling is applied through
``style_context()`` (an ``rc_context``), so no global matplotlib or seaborn state changes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib import colors as mcolors
from matplotlib.figure import Figure
from matplotlib.patches import Arc
from matplotlib.ticker import MaxNLocator

from dyckbook import explain as E

#: rcParams for every dyckbook figure (readable at book width, light grid, no top/right spines).
STYLE: dict[str, Any] = {
    "font.size": 9.5,
    "axes.titlesize": 10.5,
    "axes.labelsize": 9.5,
    "xtick.labelsize": 8.5,
    "ytick.labelsize": 8.5,
    "legend.fontsize": 8.5,
    "figure.titlesize": 12,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "grid.color": "0.88",
    "grid.linewidth": 0.6,
    "figure.dpi": 100,
    "image.interpolation": "nearest",
    "axes.prop_cycle": matplotlib.cycler(
        color=[
            "#0072B2",
            "#E69F00",
            "#009E73",
            "#D55E00",
            "#CC79A7",
            "#56B4E9",
            "#F0E442",
            "#000000",
        ]  # Okabe-Ito: distinguishable with colour-vision deficiency
    ),
}
PROB_CMAP = "viridis"
MINMAX_CMAP = "coolwarm"
MASKED_COLOR = "0.82"
#: Inputs up to this many tokens get their cell values printed on the attention grid.
ANNOTATE_MAX_TOKENS = 20
SPECIAL_LABELS = {E.START: "[start]", E.PAD: "[pad]", E.END: "[end]"}


@contextlib.contextmanager
def style_context() -> Iterator[None]:
    """Temporarily apply ``STYLE`` (nothing leaks out of the ``with`` block)."""
    with matplotlib.rc_context(STYLE):
        yield


def apply_style() -> None:
    """Apply ``STYLE`` globally (opt-in, for notebooks that draw their own figures too)."""
    matplotlib.rcParams.update(STYLE)


def _new_figure(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float], **kw: Any):
    """A pyplot-free figure with a constrained layout and a grid of axes (always 2-D)."""
    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def token_labels(tokens: Any, alphabet: str, length: int | None = None) -> list[str]:
    """Display labels for one row of token ids (``[start]``, brackets, ``[end]``, ``[pad]``).

    Args:
        tokens: int array (pos,) in the tokenizer layout.
        alphabet: the language's alphabet string (bracket id ``3 + i`` is ``alphabet[i]``).
        length: string length; when given, the labels stop at ``[end]`` (pads cropped).
    """
    tok = E._as_numpy(tokens).astype(np.int64).reshape(-1)
    if length is not None:
        tok = tok[: int(length) + 2]
    out = []
    for t in tok.tolist():
        if t in SPECIAL_LABELS:
            out.append(SPECIAL_LABELS[t])
        elif 0 <= t - E.N_SPECIAL < len(alphabet):
            out.append(alphabet[t - E.N_SPECIAL])
        else:
            raise ValueError(f"token id {t} is not in the vocabulary of alphabet {alphabet!r}")
    return out


def _tick_positions(n: int, max_ticks: int = 48) -> np.ndarray:
    step = max(1, math.ceil(n / max_ticks))
    return np.arange(0, n, step)


# --------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------


def plot_attention_grid(
    patterns: Any,
    token_labels: Sequence[str],
    *,
    scale: str = "prob",
    annotate: bool | None = None,
    mask: Any | str | None = None,
    title: str | None = None,
    layer_names: Sequence[str] | None = None,
) -> Figure:
    """Attention heatmaps with layers as rows and heads as columns, one shared colour bar.

    Args:
        patterns: array (layer, head, query, key) for ONE example (e.g. ``patterns[:, b]`` from
            ``explain.attention_patterns``). Pads are cropped to ``len(token_labels)``.
        token_labels: labels of the real tokens, ``[start]`` .. ``[end]`` (see ``token_labels``).
        scale: ``"prob"`` (raw probabilities, 0..1, sequential colour map: the default) or
            ``"minmax"`` (the thesis' per-matrix min-max scaling to [-1, 1] with coolwarm; a
            display option: it exaggerates small differences and hides absolute values).
        annotate: print values in the cells; default only for inputs of at most
            ``ANNOTATE_MAX_TOKENS`` tokens.
        mask: cells a model may not attend to, drawn hatched grey: ``"causal"`` (future keys),
            a bool array (query, key) or (layer, head, query, key) with True = masked, or None.
            A ``numpy.ma.MaskedArray`` pattern keeps its own mask too.
        title: figure title; a default says what is shown.
        layer_names: row labels (default ``layer 0``, ``layer 1``, ...).

    Returns:
        The Figure (axes: one per (layer, head) plus the colour bar).
    """
    if scale not in ("prob", "minmax"):
        raise ValueError(f"scale must be 'prob' or 'minmax', got {scale!r}")
    p = np.ma.asarray(patterns)
    if p.ndim == 2:
        p = p[None, None]
    if p.ndim != 4:
        raise ValueError(f"patterns must be (layer, head, query, key), got shape {p.shape}")
    n = len(token_labels)
    if n < 1 or n > p.shape[-1] or n > p.shape[-2]:
        raise ValueError(f"token_labels has {n} labels, patterns hold {p.shape[-1]} positions")
    p = p[..., :n, :n]  # crop pads
    n_layers, n_heads = p.shape[:2]
    m = np.ma.getmaskarray(p).copy()
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f"mask must be 'causal', an array or None, got {mask!r}")
        m |= np.triu(np.ones((n, n), dtype=bool), k=1)
    elif mask is not None:
        mk = np.asarray(E._as_numpy(mask), dtype=bool)
        mk = mk[..., :n, :n]
        m |= np.broadcast_to(mk, m.shape)
    data = np.ma.MaskedArray(np.ma.getdata(p).astype(np.float64), mask=m)
    if scale == "minmax":
        data = E.minmax_scale(data)
        vmin, vmax, cmap_name = -1.0, 1.0, MINMAX_CMAP
        cbar_label = "attention, min-max scaled per matrix (display only)"
    else:
        vmin, vmax, cmap_name = 0.0, 1.0, PROB_CMAP
        cbar_label = "attention probability"
    if annotate is None:
        annotate = n <= ANNOTATE_MAX_TOKENS
    # masked cells transparent: the hatched axes background shows through
    cmap = matplotlib.colormaps[cmap_name].with_extremes(bad=(0, 0, 0, 0))
    panel = float(np.clip(0.30 * n + 0.9, 2.6, 5.5))
    with style_context():
        fig, axes = _new_figure(
            n_layers,
            n_heads,
            figsize=(panel * n_heads + 1.2, panel * n_layers + 0.5),
        )
        ticks = _tick_positions(n)
        cell_pt = panel * 72 / n  # cell size in points
        tick_fs = float(np.clip(cell_pt * 0.75, 5, 9))
        ann_fs = float(np.clip(cell_pt * 0.34, 4, 8))
        im = None
        for l in range(n_layers):
            for h in range(n_heads):
                ax = axes[l, h]
                ax.patch.set_facecolor(MASKED_COLOR)
                ax.patch.set_hatch("////")
                ax.patch.set_edgecolor("0.6")
                im = ax.imshow(data[l, h], cmap=cmap, vmin=vmin, vmax=vmax, aspect="equal")
                ax.set_xticks(ticks)
                ax.set_yticks(ticks)
                # single brackets stay upright; only [start]/[end] need turning
                for lab in ax.set_xticklabels([token_labels[i] for i in ticks]):
                    lab.set_rotation(90 if len(lab.get_text()) > 2 else 0)
                ax.set_yticklabels([token_labels[i] for i in ticks])
                ax.tick_params(length=0, labelsize=tick_fs)
                for side in ("top", "right", "bottom", "left"):
                    ax.spines[side].set_visible(False)
                name = layer_names[l] if layer_names is not None else f"layer {l}"
                ax.set_title(f"{name}, head {h}")
                if h == 0:
                    ax.set_ylabel("query")
                if l == n_layers - 1:
                    ax.set_xlabel("key")
                if annotate:
                    _annotate_cells(ax, data[l, h], scale, ann_fs)
        fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label=cbar_label)
        if title is None:
            title = (
                "Attention probabilities"
                if scale == "prob"
                else "Attention, min-max scaled to [-1, 1] per matrix"
            ) + " (rows: queries)"
        fig.suptitle(title)
    return fig


def _annotate_cells(ax: Any, vals: np.ma.MaskedArray, scale: str, fontsize: float) -> None:
    """Print each unmasked cell's value (leading zero dropped to fit small cells)."""
    n_q, n_k = vals.shape
    mask = np.ma.getmaskarray(vals)
    for qi in range(n_q):
        for ki in range(n_k):
            if mask[qi, ki]:
                continue
            v = float(vals[qi, ki])
            dark = v < 0.6 if scale == "prob" else abs(v) > 0.55
            txt = f"{v:.2f}".replace("0.", ".", 1)
            t = ax.text(
                ki,
                qi,
                txt,
                ha="center",
                va="center",
                fontsize=fontsize,
                color="white" if dark else "black",
            )
            t.set_in_layout(False)  # hundreds of texts: keep them out of the layout pass


def _summary_of(summary_or_pattern: Any, **kw: Any) -> E.LongInputSummary:
    if isinstance(summary_or_pattern, E.LongInputSummary):
        return summary_or_pattern
    return E.long_input_summary(summary_or_pattern, **kw)


def plot_attention_summary(
    summary: Any,
    *,
    map: str = "max",
    title: str | None = None,
    **summary_kw: Any,
) -> Figure:
    """A readable view of one long attention matrix (hundreds to thousands of tokens).

    Four panels: (a) the downsampled map (block max or mean, log colour scale) where thin
    diagonals such as matching-bracket attention survive; (b) where each query's attention goes,
    by signed log-binned offset ``key - query`` (downsampled queries x offset bins); (c) the mean
    offset profile over queries; (d) normalised entropy per query (1 = uniform) and, when a
    matching was given, the mass on the partner.

    Args:
        summary: a ``LongInputSummary`` or a (query, key) pattern (summarised with
            ``summary_kw`` passed to ``explain.long_input_summary``).
        map: ``"max"`` or ``"mean"`` block aggregation for panel (a).
        title: figure title.

    Returns:
        The Figure (4 axes plus 2 colour bars).
    """
    if map not in ("max", "mean"):
        raise ValueError(f"map must be 'max' or 'mean', got {map!r}")
    s = _summary_of(summary, **summary_kw)
    n = s.n
    block = s.block_max if map == "max" else s.block_mean
    positive = block[block > 0]
    lo = max(float(positive.min()) if positive.size else 1e-6, 1e-6)
    hi = max(float(block.max()), lo * 10)
    nb = len(s.offset_edges) - 1
    # downsample the per-query offset profile to <= 256 rows for display
    rows = np.unique(np.linspace(0, n, min(n, 256) + 1).round().astype(np.int64))
    prof = np.add.reduceat(s.offset_mass, rows[:-1], axis=0) / np.diff(rows)[:, None]
    # what uniform attention over all n keys puts in each offset bin, per query
    q = np.arange(n)[:, None]
    e0, e1 = s.offset_edges[:-1][None, :], s.offset_edges[1:][None, :]
    right = np.clip(np.minimum(n, q + e1) - np.minimum(n, q + e0), 0, None) / n
    left = np.clip(np.maximum(0, q - e0 + 1) - np.maximum(0, q - e1 + 1), 0, None) / n
    uni_q = np.concatenate([left[:, ::-1], np.full((n, 1), 1.0 / n), right], axis=1)
    uni_rows = np.add.reduceat(uni_q, rows[:-1], axis=0) / np.diff(rows)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        lift = np.ma.masked_invalid(np.log10(prof / uni_rows))
    lift = np.ma.masked_where(uni_rows <= 0, lift)
    labels = (
        [f"-{e}" for e in s.offset_edges[:-1][::-1]]
        + ["0"]
        + [f"+{e}" for e in s.offset_edges[:-1]]
    )
    with style_context():
        fig, axes = _new_figure(2, 2, figsize=(11, 8.6))
        ax = axes[0, 0]
        im = ax.imshow(
            block,
            cmap="magma",
            norm=mcolors.LogNorm(vmin=lo, vmax=hi),
            extent=(0, n, n, 0),
            aspect="equal",
        )
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        ax.set_title(f"(a) block {map} of attention ({len(s.block_edges) - 1}² blocks, log)")
        fig.colorbar(im, ax=ax, shrink=0.85, label=f"block {map}")
        ax = axes[0, 1]
        # grey: bins that hold no key for these queries
        cm = matplotlib.colormaps["RdBu_r"].with_extremes(bad=MASKED_COLOR)
        im2 = ax.imshow(
            np.ma.clip(lift, -2, 2),
            cmap=cm,
            aspect="auto",
            vmin=-2,
            vmax=2,
            extent=(-0.5, 2 * nb + 0.5, n, 0),
        )
        step = max(1, (2 * nb + 1) // 13)
        tick_idx = np.arange(0, 2 * nb + 1, step)
        if nb not in tick_idx:
            tick_idx = np.sort(np.r_[tick_idx, nb])
        ax.set_xticks(tick_idx)
        ax.set_xticklabels([labels[i] for i in tick_idx], rotation=90)
        ax.set_xlabel("offset key − query (log bins: bin ±e holds |offset| in [e, 2e))")
        ax.set_ylabel("query position")
        ax.set_title("(b) mass by offset relative to uniform attention")
        cb = fig.colorbar(im2, ax=ax, shrink=0.85, ticks=[-2, -1, 0, 1, 2])
        cb.ax.set_yticklabels(["≤1/100", "1/10", "1 (uniform)", "10×", "≥100×"])
        cb.set_label("mass / uniform mass (log)")
        ax = axes[1, 0]
        mean = s.mean_offset_mass
        x = np.arange(2 * nb + 1)
        ax.bar(
            x, mean, color=["#0072B2" if i < nb else "#000000" if i == nb else "#D55E00" for i in x]
        )
        uniform = uni_q.mean(axis=0)
        ax.step(x, uniform, where="mid", color="0.3", lw=1.2, ls="--", label="uniform attention")
        ax.legend(loc="upper center")
        ax.set_xticks(tick_idx)
        ax.set_xticklabels([labels[i] for i in tick_idx], rotation=90)
        ax.set_xlabel("offset key − query (log bins)")
        ax.set_ylabel("mean attention mass")
        ax.set_title("(c) mean offset profile (blue: earlier keys, orange: later)")
        ax.grid(axis="y")
        ax = axes[1, 1]
        qpos = np.arange(n)
        ax.plot(qpos, s.entropy_norm, lw=0.6, color="0.55", label="entropy / log(#keys)")
        if n >= 64:
            w = max(8, n // 64)
            kern = np.ones(w) / w
            sm = np.convolve(s.entropy_norm, kern, mode="same")
            ax.plot(
                qpos[w:-w], sm[w:-w], lw=1.6, color="#0072B2", label=f"entropy, moving mean ({w})"
            )
        if s.matching_mass is not None:
            ok = ~np.isnan(s.matching_mass)
            ax.scatter(
                qpos[ok],
                s.matching_mass[ok],
                s=4,
                color="#D55E00",
                alpha=0.6,
                label="mass on matching bracket",
                rasterized=True,
            )
        ax.set_ylim(-0.02, 1.05)
        ax.set_xlim(0, n)
        ax.set_xlabel("query position")
        ax.set_ylabel("value (0..1)")
        ax.set_title(
            "(d) per-query entropy" + (" and matching mass" if s.matching_mass is not None else "")
        )
        ax.legend(loc="lower right", framealpha=0.9)
        ax.grid(True)
        fig.suptitle(title or f"Attention summary for a {n}-token input")
    return fig


def plot_matching_attention(
    measures: E.MatchingAttention,
    *,
    role: str = "all",
    min_count: int = 10,
    title: str | None = None,
) -> Figure:
    """Where bracket queries attend, per head: composition bars, and matching mass by distance.

    Args:
        measures: a ``MatchingAttention`` from ``explain.matching_attention``.
        role: ``"all"``, ``"opener"`` or ``"closer"`` for the by-distance and by-depth panels
            (the bars always show openers and closers side by side).
        min_count: distance/depth groups with fewer queries are left out of the line panels
            (their means are noise).
        title: figure title.

    Returns:
        The Figure (3 axes).
    """
    r = measures.role(role)
    L, H = measures.n_layers, measures.n_heads
    cats = [c for c in measures.categories if c != "pad" or np.nanmax(measures.mean["pad"]) > 1e-6]
    colors = dict(
        zip(
            E.KEY_CATEGORIES,
            ["#D55E00", "#000000", "#E69F00", "#56B4E9", "#009E73", "#CC79A7", "0.6"],
        )
    )
    heads = [(l, h) for l in range(L) for h in range(H)]
    with style_context():
        fig, axes = _new_figure(
            1,
            3,
            figsize=(max(12, 1.3 * len(heads) + 8), 4.2),
            width_ratios=[max(1.2, 0.35 * len(heads)), 1, 1],
        )
        ax = axes[0, 0]
        xt, xl = [], []
        width = 0.38
        for i, (l, h) in enumerate(heads):
            for j, rl in enumerate(("opener", "closer")):
                ri = measures.role(rl)
                x = i + (j - 0.5) * (width + 0.04)
                bottom = 0.0
                for c in cats:
                    v = float(np.nan_to_num(measures.mean[c][ri, l, h]))
                    ax.bar(
                        x,
                        v,
                        width,
                        bottom=bottom,
                        color=colors[c],
                        label=c.replace("_", " ") if (i == 0 and j == 0) else None,
                    )
                    bottom += v
                xt.append(x)
                xl.append(f"L{l}H{h}\n{'open' if rl == 'opener' else 'close'}")
        ax.set_xticks(xt)
        ax.set_xticklabels(xl, fontsize=7.5)
        ax.set_ylim(0, 1.0)
        ax.set_ylabel("attention mass (mean over queries)")
        ax.set_title("Where bracket queries attend")
        ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
        for ax, table, key, xlabel in (
            (axes[0, 1], measures.by_distance, "distance", "distance to partner |i − j|"),
            (axes[0, 2], measures.by_depth, "depth", "nesting depth of the pair"),
        ):
            if "edges" in table:
                e = table["edges"]
                x = np.sqrt(e[:-1] * np.maximum(e[1:] - 1, e[:-1]))
            else:
                x = table[key].astype(float)
            for l, h in heads:
                y = table["matching"][r, :, l, h]
                ok = table["count"][r] >= max(1, min_count)
                ax.plot(x[ok], y[ok], marker="o", ms=3, lw=1.3, label=f"L{l}H{h}")
            ax.axhline(
                measures.chance[r], color="0.4", ls="--", lw=1, label="uniform attention (mean)"
            )
            if key == "distance" and x.size and x.max() / max(x.min(), 1) > 20:
                ax.set_xscale("log")
            top = np.nanmax(
                [
                    np.nanmax(
                        np.r_[
                            table["matching"][r][table["count"][r] >= max(1, min_count)].ravel(),
                            0.0,
                        ]
                    ),
                    measures.chance[r],
                ]
            )
            ax.set_ylim(0, min(1.02, max(0.1, 1.15 * float(np.nan_to_num(top)))))
            ax.set_xlabel(xlabel)
            ax.set_ylabel("mass on matching bracket")
            ax.grid(True)
            ax.set_title(f"Matching mass by {key} ({role})")
        axes[0, 2].legend(fontsize=7.5, loc="best", ncol=1 + len(heads) // 8)
        n_all = int(measures.count[0])
        fig.suptitle(title or f"Attention to the matching bracket ({n_all} bracket queries)")
    return fig


def plot_preview_roc(
    scores: Any,
    labels: Any,
    *,
    title: str | None = None,
) -> Figure:
    """ROC of the ``[end]`` self-attention as a membership predictor, per (layer, head).

    Args:
        scores: (batch,) or (layer, batch, head) ``[end]`` self-attention (a ``Preview``'s
            ``scores``); labels: (batch,) 0/1.
        title: figure title.

    Returns:
        The Figure: ROC curves (AUC and max(AUC, 1 - AUC) in the legend) and the score
        distributions by class for the head with the largest max(AUC, 1 - AUC). 2 axes.
    """
    s = E._as_numpy(scores).astype(np.float64)
    if s.ndim == 1:
        s = s[None, :, None]
    pv = E.preview_auc(s, labels)
    y = pv.labels.astype(bool)
    with style_context():
        fig, axes = _new_figure(1, 2, figsize=(10, 4.3))
        ax = axes[0, 0]
        for l in range(s.shape[0]):
            for h in range(s.shape[2]):
                fpr, tpr = E.roc_curve(s[l, :, h], y)
                ax.plot(
                    fpr,
                    tpr,
                    lw=1.5,
                    drawstyle="default",
                    label=f"L{l}H{h}: AUC {pv.auc[l, h]:.3f} (sym {pv.auc_sym[l, h]:.3f})",
                )
        ax.plot([0, 1], [0, 1], color="0.5", ls="--", lw=1, label="chance")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.01)
        ax.set_aspect("equal")
        ax.set_xlabel("false-positive rate")
        ax.set_ylabel("true-positive rate")
        ax.set_title("ROC: [end] self-attention predicts 'member'")
        ax.legend(loc="lower right", fontsize=7.5)
        ax.grid(True)
        l, h = np.unravel_index(int(np.argmax(pv.auc_sym)), pv.auc_sym.shape)
        ax = axes[0, 1]
        v = s[l, :, h]
        bins = np.histogram_bin_edges(v, bins=min(40, max(5, v.size // 10)))
        ax.hist(v[y], bins=bins, alpha=0.6, color="#0072B2", label=f"members (n={int(y.sum())})")
        ax.hist(
            v[~y], bins=bins, alpha=0.6, color="#D55E00", label=f"non-members (n={int((~y).sum())})"
        )
        ax.set_xlabel(f"[end] self-attention, layer {l} head {h}")
        ax.set_ylabel("examples")
        ax.set_title(f"Score by class, best head (sym. AUC {pv.auc_sym[l, h]:.3f})")
        ax.legend()
        fig.suptitle(title or "Does the [end] token's self-attention preview the decision?")
    return fig


# --------------------------------------------------------------------------------------------
# Training and evaluation
# --------------------------------------------------------------------------------------------

_SPLITS = ("train", "val", "test", "ood")


def _history_columns(history: Any) -> dict[str, np.ndarray]:
    """Normalise a history to columns: records, dict of lists, or {split: {metric: list}}."""
    if isinstance(history, Mapping):
        if all(isinstance(v, Mapping) for v in history.values()):
            cols = {
                f"{split}_{m}": np.asarray(v, dtype=float)
                for split, d in history.items()
                for m, v in d.items()
            }
        else:
            cols = {k: np.asarray(v, dtype=float) for k, v in history.items() if np.ndim(v) == 1}
    elif isinstance(history, Sequence) and history and isinstance(history[0], Mapping):
        keys = sorted({k for rec in history for k in rec})
        cols = {
            k: np.array([np.nan if rec.get(k) is None else float(rec[k]) for rec in history])
            for k in keys
            if all(isinstance(rec.get(k), (int, float, type(None))) for rec in history)
        }
    else:
        raise ValueError(
            "history must be a list of per-epoch records or a mapping of columns, "
            f"got {type(history).__name__}"
        )
    return cols


def plot_training_curves(history: Any, *, title: str | None = None) -> Figure:
    """Loss and accuracy per split against epoch.

    Args:
        history: per-epoch records (``[{"epoch": 1, "train_loss": .., "val_accuracy": ..}, ..]``,
            the ``metrics.json`` ``history``), a mapping of columns, or
            ``{split: {"loss": [..], "accuracy": [..]}}``. Columns named ``{split}_loss`` and
            ``{split}_accuracy`` (or ``_acc``) are plotted; ``epoch`` (else ``step``, else
            1..n) is the x axis.
        title: figure title.

    Returns:
        The Figure (2 axes: loss, accuracy).
    """
    cols = _history_columns(history)
    n = max((len(v) for v in cols.values()), default=0)
    if n == 0:
        raise ValueError("history is empty")
    xkey = "epoch" if "epoch" in cols else "step" if "step" in cols else None
    x = cols[xkey] if xkey else np.arange(1, n + 1)
    with style_context():
        fig, axes = _new_figure(1, 2, figsize=(10, 3.8))
        found = {"loss": 0, "accuracy": 0}
        for ax, metric, aliases in (
            (axes[0, 0], "loss", ("loss",)),
            (axes[0, 1], "accuracy", ("accuracy", "acc")),
        ):
            splits = sorted(
                {k.rsplit("_", 1)[0] for k in cols if k.rsplit("_", 1)[-1] in aliases and "_" in k},
                key=lambda s: (_SPLITS.index(s) if s in _SPLITS else 99, s),
            )
            for split in splits:
                key = next(f"{split}_{a}" for a in aliases if f"{split}_{a}" in cols)
                y = cols[key]
                ok = ~np.isnan(y)
                ax.plot(x[ok], y[ok], marker="o" if n <= 30 else None, ms=3, lw=1.5, label=split)
                found[metric] += 1
            ax.set_xlabel(xkey or "epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel(metric)
            ax.set_title(f"{metric.capitalize()} per split")
            ax.grid(True)
            if found[metric]:
                ax.legend()
            if metric == "accuracy":
                ax.set_ylim(-0.02, 1.02)
        if not any(found.values()):
            raise ValueError(
                f"history has no '<split>_loss' or '<split>_accuracy' columns: {sorted(cols)}"
            )
        fig.suptitle(title or "Training curves")
    return fig


def plot_weight_histograms(
    snapshots: Any,
    steps: Any | None = None,
    *,
    bins: int = 60,
    title: str | None = None,
) -> Figure:
    """Histograms of weights over training seen from above (the thesis' figures 4.6/4.7).

    Args:
        snapshots: (n_snapshots, n_values) array, or a mapping name -> such array (one panel
            each, e.g. ``{"classifier.weight": .., "blocks.0.attn.W_Q": ..}``).
        steps: (n_snapshots,) training steps of the snapshots (x axis); default 0..n-1.
        bins: number of value bins.
        title: figure title.

    Returns:
        The Figure (one axis per weight tensor, plus one colour bar each).
    """
    named = dict(snapshots) if isinstance(snapshots, Mapping) else {"weights": snapshots}
    if not named:
        raise ValueError("snapshots is empty")
    with style_context():
        fig, axes = _new_figure(1, len(named), figsize=(4.8 * len(named) + 0.6, 3.9))
        for ax, (name, snap) in zip(axes[0], named.items()):
            arr = E._as_numpy(snap)
            counts, edges = E.weight_histogram_over_time(arr, bins=bins)
            t = np.arange(arr.shape[0]) if steps is None else E._as_numpy(steps).astype(float)
            if t.shape != (arr.shape[0],):
                raise ValueError(f"steps has shape {t.shape}, snapshots have {arr.shape[0]} rows")
            # pcolormesh handles uneven step spacing; edges between consecutive steps
            if t.size > 1:
                mid = (t[1:] + t[:-1]) / 2
                tx = np.r_[t[0] - (mid[0] - t[0]), mid, t[-1] + (t[-1] - mid[-1])]
            else:
                tx = np.array([t[0] - 0.5, t[0] + 0.5])
            frac = counts / counts.sum(axis=0, keepdims=True)
            pos = frac[frac > 0]
            mesh = ax.pcolormesh(
                tx,
                edges,
                np.ma.masked_equal(frac, 0),
                cmap="viridis",
                norm=mcolors.LogNorm(vmin=max(pos.min(), 1e-5), vmax=pos.max()),
                shading="flat",
                rasterized=True,
            )
            ax.set_facecolor("white")
            ax.set_xlabel("training step" if steps is not None else "snapshot")
            ax.set_ylabel("weight value")
            ax.set_title(f"{name} ({arr.shape[1]} values)")
            fig.colorbar(mesh, ax=ax, shrink=0.85, label="fraction of weights (log)")
        fig.suptitle(title or "Weight histograms over training (each column is one histogram)")
    return fig


def _per_length_arrays(run: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(lengths, accuracy, n or None) from the accepted per-length formats."""
    if hasattr(run, "to_dict") and hasattr(run, "columns"):  # a pandas DataFrame
        run = run.to_dict("list")
    if isinstance(run, Mapping) and "length" in run and "accuracy" in run:
        L = np.asarray(run["length"], dtype=float)
        acc = np.asarray(run["accuracy"], dtype=float)
        n = run.get("n", run.get("count"))
        n = None if n is None else np.asarray(n, dtype=float)
    elif isinstance(run, Mapping):
        items = sorted(((int(k), v) for k, v in run.items()), key=lambda kv: kv[0])
        L = np.array([k for k, _ in items], dtype=float)
        if items and isinstance(items[0][1], Mapping):
            acc = np.array(
                [np.nan if v.get("accuracy") is None else v["accuracy"] for _, v in items],
                dtype=float,
            )
            n = np.array([v.get("n", np.nan) for _, v in items], dtype=float)
        else:
            acc = np.array([np.nan if v is None else v for _, v in items], dtype=float)
            n = None
    elif isinstance(run, Sequence) and run and isinstance(run[0], Mapping):
        return _per_length_arrays(
            {
                "length": [r["length"] for r in run],
                "accuracy": [r["accuracy"] for r in run],
                **({"n": [r["n"] for r in run]} if "n" in run[0] else {}),
            }
        )
    else:
        raise ValueError(
            "per_length must map length -> accuracy (or -> {'n', 'accuracy'}), or "
            f"hold 'length' and 'accuracy' columns; got {type(run).__name__}"
        )
    order = np.argsort(L)
    return L[order], acc[order], None if n is None else n[order]


def _is_single_run(obj: Any) -> bool:
    if hasattr(obj, "columns"):
        return True
    if isinstance(obj, Mapping):
        if "length" in obj and "accuracy" in obj:
            return True
        keys = list(obj.keys())
        try:
            [int(k) for k in keys]
        except (TypeError, ValueError):
            return False
        return True
    return (
        isinstance(obj, Sequence)
        and bool(obj)
        and isinstance(obj[0], Mapping)
        and "length" in obj[0]
    )


def plot_accuracy_by_length(
    per_length: Any,
    train_max_length: int | None = None,
    label: str | Sequence[str] | None = None,
    *,
    title: str | None = None,
    show_n: bool = True,
) -> Figure:
    """Accuracy against string length, with the training-length boundary marked.

    Args:
        per_length: one run (``{length: accuracy}``, ``{length: {"n", "accuracy"}}`` as in
            ``evaluate``'s ``per_length``, a mapping with ``length``/``accuracy`` columns, or
            records), or several: a mapping label -> run, or a list of runs with ``label`` a
            list of names.
        train_max_length: longest training length; a vertical line marks it and the region
            beyond is shaded "out of distribution".
        label: name(s) of the run(s) for the legend.
        show_n: draw a 95% Wilson band when counts are available.
        title: figure title.

    Returns:
        The Figure (1 axis).
    """
    if _is_single_run(per_length):
        runs = {(label if isinstance(label, str) else None) or "accuracy": per_length}
    elif isinstance(per_length, Mapping):
        runs = dict(per_length)
    elif isinstance(per_length, Sequence):
        names = (
            list(label)
            if label is not None and not isinstance(label, str)
            else [f"run {i}" for i in range(len(per_length))]
        )
        if len(names) != len(per_length):
            raise ValueError(f"label has {len(names)} names for {len(per_length)} runs")
        runs = dict(zip(names, per_length))
    else:
        raise ValueError(f"per_length has an unsupported type {type(per_length).__name__}")
    with style_context():
        fig, axes = _new_figure(1, 1, figsize=(7.5, 4.0))
        ax = axes[0, 0]
        xmax = 0.0
        for name, run in runs.items():
            L, acc, n = _per_length_arrays(run)
            (line,) = ax.plot(
                L, acc, marker="o" if L.size <= 40 else None, ms=3, lw=1.5, label=name
            )
            if show_n and n is not None and np.all(np.isfinite(n)) and np.all(n > 0):
                z = 1.96
                centre = (acc + z * z / (2 * n)) / (1 + z * z / n)
                half = z * np.sqrt(acc * (1 - acc) / n + z * z / (4 * n * n)) / (1 + z * z / n)
                ax.fill_between(
                    L, centre - half, centre + half, color=line.get_color(), alpha=0.15, lw=0
                )
            xmax = max(xmax, float(np.nanmax(L)) if L.size else 0.0)
        if train_max_length is not None:
            ax.axvline(train_max_length, color="0.25", ls="--", lw=1.2)
            right = max(xmax, train_max_length) * 1.02 + 1
            ax.axvspan(
                train_max_length,
                right,
                color="0.5",
                alpha=0.12,
                lw=0,
                label=f"out of distribution (> {train_max_length})",
            )
            ax.set_xlim(left=min(0, ax.get_xlim()[0]), right=right)
        ax.axhline(0.5, color="0.6", lw=0.8, ls=":")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("string length")
        ax.set_ylabel("accuracy")
        ax.grid(True)
        ax.legend(loc="lower left")
        ax.set_title(
            title
            or "Accuracy by string length"
            + (" (dashed line: longest training length)" if train_max_length is not None else "")
        )
    return fig


def plot_confusion_by_kind(
    per_kind: Mapping[str, Any],
    *,
    confusion: Any | None = None,
    title: str | None = None,
) -> Figure:
    """Accuracy per example kind (positives and each negative kind), with n annotated.

    Args:
        per_kind: kind -> ``{"n", "accuracy"}`` (``evaluate``'s ``per_kind``), ``(accuracy,
            n)`` or an accuracy.
        confusion: optional 2x2 ``[[tn, fp], [fn, tp]]``; adds a confusion heatmap panel.
        title: figure title.

    Returns:
        The Figure (1 axis, or 2 with ``confusion`` plus its colour bar).
    """
    if not per_kind:
        raise ValueError("per_kind is empty")
    kinds, accs, ns = [], [], []
    for k, v in per_kind.items():
        if isinstance(v, Mapping):
            a, n = v.get("accuracy"), v.get("n")
        elif isinstance(v, (tuple, list)):
            a, n = v[0], v[1]
        else:
            a, n = v, None
        kinds.append(str(k))
        accs.append(np.nan if a is None else float(a))
        ns.append(n)
    order = sorted(range(len(kinds)), key=lambda i: (kinds[i] != "positive", accs[i]))
    kinds = [kinds[i] for i in order]
    accs = [accs[i] for i in order]
    ns = [ns[i] for i in order]
    h = 0.38 * len(kinds) + 1.3
    with style_context():
        if confusion is None:
            fig, axes = _new_figure(1, 1, figsize=(7.0, h))
        else:
            fig, axes = _new_figure(1, 2, figsize=(10.5, max(h, 3.4)), width_ratios=[2.2, 1])
        ax = axes[0, 0]
        y = np.arange(len(kinds))
        colors = ["#009E73" if k == "positive" else "#D55E00" for k in kinds]
        ax.barh(y, np.nan_to_num(accs), color=colors, height=0.7)
        for yi, a, n in zip(y, accs, ns):
            txt = ("n/a" if np.isnan(a) else f"{a:.1%}") + ("" if n is None else f"  (n={n})")
            inside = not np.isnan(a) and a > 0.55
            ax.text(
                a - 0.01 if inside else (0 if np.isnan(a) else a) + 0.01,
                yi,
                txt,
                va="center",
                ha="right" if inside else "left",
                fontsize=8,
                color="white" if inside else "black",
            )
        ax.set_yticks(y)
        ax.set_yticklabels([k.replace("_", " ") for k in kinds])
        ax.invert_yaxis()
        ax.set_xlim(0, 1.0)
        ax.axvline(0.5, color="0.6", lw=0.8, ls=":")
        ax.set_xlabel("accuracy")
        ax.set_title("Accuracy by kind (green: members, orange: negative kinds)")
        if confusion is not None:
            _draw_confusion(fig, axes[0, 1], confusion)
        fig.suptitle(title or "Which kinds of strings does the model get right?")
    return fig


def _draw_confusion(
    fig: Figure, ax: Any, confusion: Any, labels: Sequence[str] = ("non-member", "member")
) -> None:
    c = np.asarray(E._as_numpy(confusion), dtype=float)
    if c.shape != (2, 2):
        raise ValueError(f"confusion must be 2x2 [[tn, fp], [fn, tp]], got shape {c.shape}")
    rows = c.sum(1, keepdims=True)
    frac = np.divide(c, rows, out=np.zeros_like(c), where=rows > 0)
    im = ax.imshow(frac, cmap="Blues", vmin=0, vmax=1)
    for i in range(2):
        for j in range(2):
            ax.text(
                j,
                i,
                f"{int(c[i, j])}\n{frac[i, j]:.1%}",
                ha="center",
                va="center",
                color="white" if frac[i, j] > 0.6 else "black",
                fontsize=9,
            )
    ax.set_xticks([0, 1])
    ax.set_xticklabels(labels)
    ax.set_yticks([0, 1])
    ax.set_yticklabels(labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title("Confusion (row-normalised)")
    fig.colorbar(im, ax=ax, shrink=0.8)


def plot_confusion_matrix(
    confusion: Any, *, labels: Sequence[str] = ("non-member", "member"), title: str | None = None
) -> Figure:
    """A 2x2 confusion heatmap ``[[tn, fp], [fn, tp]]`` with counts and row fractions.

    Returns:
        The Figure (1 axis plus the colour bar).
    """
    with style_context():
        fig, axes = _new_figure(1, 1, figsize=(4.2, 3.6))
        _draw_confusion(fig, axes[0, 0], confusion, labels)
        if title:
            fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------------------------
# Figures for the Dyck-languages chapter
# --------------------------------------------------------------------------------------------


def plot_word_counts(
    counts_by_k: Mapping[int, Mapping[int, int]], *, title: str | None = None
) -> Figure:
    """Number of Dyck-k words by length, on a log scale (exact integers of any size).

    Args:
        counts_by_k: ``{k: {length: count}}``; counts may exceed float range (they are plotted
            as log10 then).

    Returns:
        The Figure (1 axis).
    """
    if not counts_by_k:
        raise ValueError("counts_by_k is empty")
    logs = {
        k: sorted((int(n), math.log10(c) if c > 0 else np.nan) for n, c in d.items())
        for k, d in counts_by_k.items()
    }
    top = max(v for d in logs.values() for _, v in d if not np.isnan(v))
    as_log10 = top > 300  # beyond float64: plot exponents on a linear axis
    with style_context():
        fig, axes = _new_figure(1, 1, figsize=(7.0, 4.2))
        ax = axes[0, 0]
        for k in sorted(logs):
            n = np.array([p[0] for p in logs[k]], dtype=float)
            v = np.array([p[1] for p in logs[k]], dtype=float)
            ok = ~np.isnan(v)
            y = v[ok] if as_log10 else 10.0 ** v[ok]
            ax.plot(
                n[ok], y, marker="o" if ok.sum() <= 40 else None, ms=3, lw=1.5, label=f"Dyck-{k}"
            )
        if as_log10:
            ax.set_ylabel("log10(number of words)")
        else:
            ax.set_yscale("log")
            ax.set_ylabel("number of words (log scale)")
        ax.set_xlabel("string length")
        ax.grid(True, which="major")
        ax.legend()
        ax.set_title(title or "How many balanced strings exist of each length")
    return fig


def plot_depth_profile(
    string: str,
    language: Any | None = None,
    *,
    arcs: bool = True,
    title: str | None = None,
) -> Figure:
    """The string's depth as a mountain (Dyck-path) plot with matching pairs as arcs.

    Args:
        string: a bracket string.
        language: a ``Dyck``/``ShuffleDyck`` (its ``alphabet`` is used) or an alphabet string;
            default: the default pairs ``()[]{}<>...``.
        arcs: draw an arc under the axis joining each matched pair (coloured by type);
            unmatched brackets (non-members) are marked in red.
        title: figure title.

    Returns:
        The Figure (1 axis).
    """
    if language is None:
        from dyckbook.languages import DEFAULT_PAIRS

        alphabet = "".join(DEFAULT_PAIRS)
    elif isinstance(language, str):
        alphabet = language
    else:
        alphabet = language.alphabet
    bad = sorted({ch for ch in string if ch not in alphabet})
    if bad:
        raise ValueError(f"string holds characters not in alphabet {alphabet!r}: {bad}")
    n = len(string)
    codes = np.array([[alphabet.index(ch) for ch in string]], dtype=np.int64)
    shuffle = type(language).__name__ == "ShuffleDyck"
    matching, _ = E.bracket_matching(codes, np.array([n]), shuffle=shuffle)
    steps = np.where(codes[0] % 2 == 0, 1, -1)
    depth = np.r_[0, np.cumsum(steps)]
    palette = [
        "#0072B2",
        "#D55E00",
        "#009E73",
        "#CC79A7",
        "#E69F00",
        "#56B4E9",
        "#000000",
        "#F0E442",
    ]
    top = max(int(depth.max()), 1)
    bottom = min(int(depth.min()), 0)
    arc_h = top * 0.45 if arcs else 0
    width = float(np.clip(0.32 * n + 1.5, 6, 16))
    with style_context():
        fig, axes = _new_figure(1, 1, figsize=(width, 3.2 + 0.12 * top))
        ax = axes[0, 0]
        ax.plot(np.arange(n + 1), depth, color="0.2", lw=1.8, marker="o", ms=3, zorder=3)
        ax.fill_between(np.arange(n + 1), depth, 0, color="#56B4E9", alpha=0.15, lw=0)
        ax.axhline(0, color="0.4", lw=0.8)
        if arcs:
            span_max = max((abs(int(j) - i) for i, j in enumerate(matching[0]) if j > i), default=1)
            for i, j in enumerate(matching[0]):
                if j > i:
                    t = int(codes[0, i]) // 2
                    w = float(j - i)
                    hgt = arc_h * (0.25 + 0.75 * w / span_max)
                    ax.add_patch(
                        Arc(
                            ((i + j) / 2 + 0.5, 0),
                            w,
                            2 * hgt,
                            theta1=180,
                            theta2=360,
                            color=palette[t % len(palette)],
                            lw=1.3,
                        )
                    )
        for i in np.nonzero(matching[0] < 0)[0]:  # unmatched brackets, on their step
            ax.plot(
                i + 0.5,
                (depth[i] + depth[i + 1]) / 2,
                marker="x",
                color="red",
                ms=9,
                mew=2.2,
                zorder=4,
            )
        ax.set_xticks(np.arange(n) + 0.5)
        ax.set_xticklabels(
            list(string),
            fontsize=float(np.clip(260 / max(n, 1), 7, 12)),
            fontfamily="DejaVu Sans Mono",
        )
        ax.tick_params(axis="x", length=0)
        ax.set_xlim(-0.3, n + 0.3)
        ax.set_ylim(min(bottom - 0.15, -arc_h - 0.15), top + 0.4)
        ax.set_yticks(np.arange(bottom, top + 1, max(1, (top - bottom) // 8)))
        ax.set_ylabel("depth")
        ax.grid(axis="y")
        ax.spines["bottom"].set_visible(False)
        is_member = bool(np.all(matching[0] >= 0)) and depth[-1] == 0 and depth.min() >= 0
        ax.set_title(
            title
            or (
                f"Depth profile of a {n}-symbol string"
                if is_member
                else f"Depth profile of a non-member ({n} symbols; x = unmatched)"
            )
        )
    return fig
