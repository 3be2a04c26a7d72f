"""The page of mechanism by intervention (notebook 11): its models, hypotheses and patching
effects as rows and sentences (the patching itself is ``dyckbook.interp.patching``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dyckbook.experiment.intervals import interval


def _mean_text(values: Sequence[float], low: float, high: float) -> str:
    mean = float(np.mean(values)) if len(values) else math.nan
    if len(values) < 2 or not (math.isfinite(low) and math.isfinite(high)):
        return f"{mean:.2f}"
    return f"{mean:.2f} [{low:.2f}, {high:.2f}]"


def model_rows(runs: dict[str, Sequence[object]]) -> list[dict[str, object]]:
    """Per trained configuration (``book.run_all``'s result): its models' stack-set accuracy,
    mean with its 95% interval, and how many reached 99%."""
    rows = []
    for label, group in runs.items():
        acc = [r.record.scores["stack"].accuracy for r in group]
        low, high = interval(acc)
        rows.append({"models": label, "seeds": len(acc),
                     "stack-set accuracy": _mean_text(acc, low, high),
                     "solved (>= 99%)": f"{sum(a >= 0.99 for a in acc)}/{len(acc)}"})
    return rows


def hypothesis_rows(tested: dict[str, list[dict[str, object]]]) -> list[dict[str, object]]:
    """One display row per (models, hypothesis) of :func:`judge_hypotheses`' results."""
    rows = []
    for models, results in tested.items():
        for r in results:
            row = {"models": models, "hypothesis": r["hypothesis"],
                   "components": r["components"],
                   "separating the pairs": f"{r['models separating the pairs']} of "
                                           f"{len(r['per model, patched in'])}"}
            for label in ("patched in", "kept by scrubbing"):
                values = [0.0 if math.isnan(v) else v for v in r[f"per model, {label}"]]
                row[f"loss recovered, {label}"] = _mean_text(values, *r[f"interval, {label}"])
            row["verdict"] = r["verdict"]
            rows.append(row)
    return rows


def hypothesis_sentences(tested: dict[str, list[dict[str, object]]]) -> str:
    """The verdicts in words, one line per hypothesis."""
    lines = []
    for models, results in tested.items():
        for r in results:
            gaps = sum(math.isnan(v) for v in r["per model, patched in"])
            note = (f" ({gaps} of {len(r['per model, patched in'])} models do not separate the "
                    f"pairs: they count as 0)" if gaps else "")
            lines.append(f"- {models}: *{r['hypothesis']}* is **{r['verdict']}**: patching its "
                         f"components recovers {r['loss recovered, patched in']:.2f} of the "
                         f"loss, scrubbing the rest keeps "
                         f"{r['loss recovered, kept by scrubbing']:.2f}{note}.")
    return "\n".join(lines)


def per_model_rows(names: Sequence[str], accuracies: Sequence[float],
                   results: Sequence[dict[str, object]],
                   effects: dict[str, list[float]]) -> list[dict[str, object]]:
    """One row per model of a group: its stack-set accuracy, each hypothesis' loss recovered
    patched in / kept by scrubbing (:func:`judge_hypotheses`' results; "does not separate the
    pairs" where it was not scored) and each component's alone (:func:`component_effects`).
    The pooled means can hide models whose circuits differ; this shows them one by one."""
    n = len(names)
    columns = [*(r["per model, patched in"] for r in results),
               *(r["per model, kept by scrubbing"] for r in results), *effects.values()]
    if len(accuracies) != n or any(len(c) != n for c in columns):
        raise ValueError(f"per_model_rows: {n} names but accuracies, hypotheses or effects "
                         f"for another number of models")
    rows = []
    for i, name in enumerate(names):
        row: dict[str, object] = {"model": name, "stack-set accuracy": f"{accuracies[i]:.4f}"}
        for r in results:
            patched, kept = r["per model, patched in"][i], r["per model, kept by scrubbing"][i]
            short = str(r["hypothesis"]).split(",")[0]
            row[f"{short}: patched in / kept"] = (
                "does not separate the pairs" if math.isnan(patched)
                else f"{patched:.2f} / {kept:.2f}")
            if "per model, components" in r:  # a ChosenHeads hypothesis: which heads
                heads = [x for x in str(r["per model, components"][i] or "–").split(", ")
                         if "MLP" not in x]
                row[f"{short}: heads chosen"] = ", ".join(heads)
        for component, values in effects.items():
            row[component] = "–" if math.isnan(values[i]) else f"{values[i]:.2f}"
        rows.append(row)
    return rows


def effect_rows(effects: dict[str, dict[str, list[float]]]) -> list[dict[str, object]]:
    """``{language: component_effects(...)}`` as rows: one per component, a column per
    language (mean over its models with the 95% interval)."""
    names = list(dict.fromkeys(n for table in effects.values() for n in table))
    rows = []
    for name in names:
        row: dict[str, object] = {"component": name}
        for language, table in effects.items():
            if name not in table:  # e.g. a second head of a one-head construction
                row[language] = "no such component"
                continue
            values = [v for v in table[name] if not math.isnan(v)]
            low, high = interval(values, bounds=(-math.inf, math.inf))
            row[language] = (_mean_text(values, low, high) if values
                             else "no model separates the pairs")
        rows.append(row)
    return rows
