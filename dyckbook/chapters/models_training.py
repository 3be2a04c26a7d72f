"""The page on models and training (book/models_training): its training curves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, ScalarFormatter

from dyckbook.chapters.figure_style import PALETTE, new_figure, style_context


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
