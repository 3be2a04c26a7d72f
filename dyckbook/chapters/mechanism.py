"""The page of mechanism across seeds (notebook 08, and the attention chapter): the models an
explainability run saved, and which head each needs and which head matches brackets."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import seaborn as sns
from matplotlib.figure import Figure

from dyckbook.chapters.figure_style import PALETTE, as_list, new_figure, style_context
from dyckbook.chapters.page import pct
from dyckbook.data.protocol import make_splits
from dyckbook.experiment import checkpoint, results
from dyckbook.experiment.run import RunConfig
from dyckbook.interp.probes import PROBE_TARGETS, ProbeResult


def load_models(folder: str) -> dict[str, list[tuple[Any, Any]]]:
    """The models an explainability run saved, each with its (regenerated) hard test set:
    ``{label: [(model, test set) per seed]}``."""
    path = results.resolve(folder)
    out: dict[str, list[tuple[Any, Any]]] = {}
    for record in results.read_records(path / "records.jsonl"):
        model = checkpoint.load_model(path / f"model_{record.label}_s{record.seed}.pt")
        config = RunConfig.from_dict(record.config)
        out.setdefault(record.label, []).append(
            (model, make_splits(config.data, record.seed).tests["hard"]))
    return out


def head_rows(drops: Mapping[str, Sequence[Any]],
              partner: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Per model and seed: the head that matters most and the head that matches most."""
    out = []
    for label in drops:
        for seed, (d, p) in enumerate(zip(drops[label], partner[label])):
            d, p = np.asarray(d), np.nan_to_num(np.asarray(p), nan=-1.0)
            top, match = np.unravel_index(d.argmax(), d.shape), np.unravel_index(p.argmax(),
                                                                                   p.shape)
            out.append({"model": label, "seed": seed,
                        "most needed head": f"L{top[0]}H{top[1]} ({pct(d[top])} lost)",
                        "most matching head": f"L{match[0]}H{match[1]} ({p[match]:.2f} on the "
                                              f"partner, {pct(d[match])} lost without it)"})
    return out


def head_sentence(drops: Mapping[str, Sequence[Any]], partner: Mapping[str, Sequence[Any]]) -> str:
    """How often the head that matches brackets best is also the one the model needs most."""
    rows = head_rows(drops, partner)
    same = sum(r["most needed head"].split()[0] == r["most matching head"].split()[0]
               for r in rows)
    return (f"In {same} of {len(rows)} models the head that attends most to the matching bracket "
            f"(where no heuristic explains it) is also the head whose removal costs the most "
            f"accuracy.")


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
