"""The explainability page (notebook 05): each model's attention measures, pooled over the
models that learned, and said in words."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch import nn

from dyckbook.chapters.page import mean_interval, pct
from dyckbook.claims.verdicts import MEASURE_BOUNDS
from dyckbook.data.dataset import Dataset
from dyckbook.experiment.evaluate import predict
from dyckbook.interp.explain import (
    attention_patterns,
    head_movement,
    head_reset_accuracy,
    matching_scores,
    preview_auc,
)

EXPLAIN_EVIDENCE = ("partner_attention", "preview_auc", "head_reset_drop", "previous_share",
                    "recent_share", "uniform_hard")


def measure_rows(measures: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Per configuration: every measure of ``explain.model_measures``, mean [95% interval]."""
    names = ("accuracy", "partner_attention", "uniform_hard", "previous_share", "recent_share",
             "preview_auc", "head_reset_drop", "head_movement")
    out = []
    for label, per_seed in measures.items():
        row = {"model": label, "seeds": len(per_seed)}
        for name in names:
            values = [m[name] for m in per_seed if math.isfinite(m[name])]
            row[name.replace("_", " ")] = mean_interval(values, False, bounds_of(name)) \
                if values else "n/a"
        out.append(row)
    return out


def bounds_of(measure: str) -> tuple[float, float]:
    """The range ``measure``'s values can take (``explain.MEASURE_BOUNDS``; else [0, 1])."""
    return MEASURE_BOUNDS.get(measure, (0.0, 1.0))


LEARNED_BAR = 0.95  # hard-test accuracy from which a model's mechanism is evidence


def explain_evidence(measures: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """The verdict-bearing measures of the models that learned (hard-test accuracy >=
    :data:`LEARNED_BAR`), all k and seeds pooled; those of the others under ``not_learned``
    (a model that never learned has nothing to explain: its head-reset drop is ~0); and under
    ``by_k`` each language's (its label's k): how many models, how many learned, the measures
    of those that learned and (``all``) of every model."""
    models = [m for per_seed in measures.values() for m in per_seed]
    learned = [m for m in models if m["accuracy"] >= LEARNED_BAR]
    rest = [m for m in models if m["accuracy"] < LEARNED_BAR]

    def pooled(group: Sequence[Mapping[str, Any]]) -> dict[str, list]:
        return {name: [m[name] for m in group if math.isfinite(m[name])]
                for name in EXPLAIN_EVIDENCE}

    by_k = {}
    for label, per_seed in measures.items():  # labels "Dyck-1", "Dyck-3": one language each
        k = label.split("-")[1].split()[0] if label.startswith("Dyck-") else label
        group = by_k.setdefault(k, {"models": [], "learned": []})
        group["models"] += list(per_seed)
        group["learned"] += [m for m in per_seed if m["accuracy"] >= LEARNED_BAR]
    return {**pooled(learned), "models": len(models), "learned": len(learned),
            "learned_bar": LEARNED_BAR, "not_learned": pooled(rest),
            "by_k": {k: {"models": len(g["models"]), "learned": len(g["learned"]),
                         "all": pooled(g["models"]), **pooled(g["learned"])}
                     for k, g in by_k.items()}}


def explain_sentences(evidence: Mapping[str, Any]) -> str:
    """The three measures in words, each with its mean and 95% interval over the models that
    learned, and how many did not."""
    def said(name: str) -> str:
        values = evidence.get(name, [])
        if not values:
            return "not measured"
        return f"{mean_interval(values, False, bounds_of(name))} over {len(values)} models"

    head = ""
    if "models" in evidence:
        head = (f"{evidence['learned']} of {evidence['models']} models learned (hard-test "
                f"accuracy at least {pct(evidence['learned_bar'], 0)}); the measures below pool "
                f"those, the others are in the table. ")
    return head + (f"Attention of the best head on the partner where no heuristic finds it: "
            f"{said('partner_attention')}. ROC AUC of the `[end]` self-attention as a "
            f"membership score: {said('preview_auc')}. Hard-test accuracy lost when the head "
            f"is reset to its initial weights: {said('head_reset_drop')}.")


def model_measures(model: nn.Module, dataset: Dataset) -> dict[str, Any]:
    """What the thesis read from attention, measured on one trained single model.

    ``partner_attention``: attention on the partner at the closers both heuristics miss, for the
    head that does it best on one half of the strings, measured on the other half (so the head
    is not chosen on the strings it is scored on); ``best_head`` that (layer, head);
    ``previous_share`` / ``recent_share`` / ``uniform_hard``: the bars a head must clear;
    ``preview_auc``; ``head_reset_drop``: accuracy lost when the head goes back to its initial
    weights; ``head_movement``; ``accuracy``.
    """
    mask = model.config.mask
    halves = [np.arange(len(dataset)) % 2 == i for i in (0, 1)]
    scores = [matching_scores(attention_patterns(model, dataset.subset(h)), dataset.subset(h),
                              mask) for h in halves]
    pick = np.nan_to_num(scores[0].partner_hard, nan=-1.0)
    layer, head = np.unravel_index(int(np.argmax(pick)), pick.shape)
    accuracy = float((predict(model, dataset) == dataset.labels).mean())
    return {"partner_attention": float(scores[1].partner_hard[layer, head]),
            "best_head": [int(layer), int(head)],
            "previous_share": scores[1].previous_share, "recent_share": scores[1].recent_share,
            "uniform_hard": scores[1].uniform_hard, "preview_auc": preview_auc(model, dataset),
            "head_reset_drop": accuracy - head_reset_accuracy(model, dataset),
            "head_movement": head_movement(model), "accuracy": accuracy}
