"""Beyond the training lengths (notebook 13_beyond_lengths): the Dyck-3 recipe that learned,
with positions that can extend, trained on lengths up to N and tested at 1×, 2× and 4× N on the
hard, stack, spread and deep sets, beside recurrent references, a Dyck-1 control and the
adversary of stack-free rules fitted both ways.

A configuration is a language, a depth and a position (``Dyck-3 L2 rope``); every one shares the
recipe of the ``recipe`` parameter (``key:value ...``, the fields of the grid's recipe,
:class:`~dyckbook.chapters.ablation_grid.GridSpec`, or of a run's configuration), with a causal
mask and the mean readout. Training sees hard negatives only (``train_negatives: hard``) and
validates on hard negatives only (``val_negatives: hard``), so no model ever sees, or is
selected on, the long-range kinds of its tests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dyckbook.chapters.ablation_grid import Cell
from dyckbook.chapters.learning_dyck3 import parse_recipes
from dyckbook.chapters.page import pct, span
from dyckbook.experiment.intervals import interval
from dyckbook.experiment.run import RunConfig
from dyckbook.experiment.train import TrainConfig
from dyckbook.nn.recurrent import RecurrentConfig

__all__ = ["LONG_SETS", "SOLVED", "Study", "binned", "bins", "configuration_rows",
           "extends_values", "reference_configs", "seed_table", "study", "strongest",
           "table_rows"]

#: the long-range sets whose weaker score is the verdict's measure
LONG_SETS = ("stack", "spread")
#: a seed "holds" a set in a length bin at this accuracy or more
SOLVED = 0.95


@dataclass(frozen=True)
class Study:
    """The study's configurations, ``{label: RunConfig}``: ``models`` (every language, depth
    and position), ``references`` (the recurrent networks on the first Dyck-k data), and the
    length ``bins`` ``{"2×": (lo, hi)}`` of every multiple of N."""

    models: dict[str, RunConfig]
    references: dict[str, RunConfig]
    bins: dict[str, tuple[int, int]]


def bins(max_length: int, test_min_length: int, multiples: Sequence[int]
         ) -> dict[str, tuple[int, int]]:
    """``{"1×": (test_min_length, N), "2×": (N + 2, 2N), "4×": (2N + 2, 4N)}``: multiple m
    holds the even lengths above the previous multiple's up to m·N (1×: from the shortest
    test length)."""
    out, previous = {}, None
    for m in sorted(int(x) for x in multiples):
        if m < 1:
            raise ValueError(f"multiples must be ints >= 1, got {m}")
        lo = test_min_length if previous is None else previous * max_length + 2
        out[f"{m}×"] = (lo, m * max_length)
        previous = m
    return out


def _cells(k: int, layers: Sequence[int], positions: Sequence[str]) -> list[tuple[str, Cell]]:
    return [(f"Dyck-{k} L{n} {p}", Cell(k, n, "causal", p, "mean"))
            for n in layers for p in positions]


def study(recipe: str, ks: Sequence[int], layers: Sequence[int], positions: Sequence[str],
          deep_layers: Sequence[int], deep_positions: Sequence[str],
          control_layers: Sequence[int], control_positions: Sequence[str], max_length: int,
          test_min_length: int, multiples: Sequence[int], test_sets: Sequence[str],
          n_test: int, references: str) -> Study:
    """Every configuration of the study. The first of ``ks`` is the language under study
    (``layers`` x ``positions``, then ``deep_layers`` x ``deep_positions``, the deeper models
    with fewer positions for the budget); each further one is a control (``control_layers`` x
    ``control_positions``). Every configuration trains on lengths up to ``max_length`` (N) and
    is tested from ``test_min_length`` to the largest multiple of N, its context that long."""
    spans = bins(max_length, test_min_length, multiples)
    longest = max(hi for _, hi in spans.values())
    models: dict[str, RunConfig] = {}
    for i, k in enumerate(int(x) for x in ks):
        chosen = _cells(k, layers, positions) + _cells(k, deep_layers, deep_positions) \
            if i == 0 else _cells(k, control_layers, control_positions)
        for label, cell in chosen:
            text = f"{label.replace(' ', '_')}@{cell.name} {recipe}"
            config = parse_recipes(text)[0].config()
            sets = tuple(s for s in test_sets if k > 1 or s != "spread")
            models[label] = config.override(
                max_length=max_length, test_min_length=test_min_length,
                test_max_length=longest, n_ctx=longest, test_sets=sets, n_test=n_test,
                train_negatives="hard", val_negatives="hard")
    first = next(iter(models.values()))
    return Study(models, reference_configs(first, references), spans)


def configuration_rows(chosen: Study) -> list[dict[str, str]]:
    """One row per configuration: its language, depth, position, training and test lengths,
    test sets, and the model's size."""
    rows = []
    for label, c in {**chosen.models, **chosen.references}.items():
        m, d = c.model, c.data
        rows.append({"configuration": label,
                     "model": (f"{m.n_layers} layers, width {m.d_model}, "
                               f"{m.pos_encoding} positions" if hasattr(m, "n_layers")
                               else f"{m.cell} cell, hidden {m.d_hidden}"),
                     "trained on": f"lengths {d.min_length}-{d.max_length}, {d.train_negatives} "
                                   f"negatives, {d.n_train:,} strings, up to "
                                   f"{c.train.max_steps:,} steps",
                     "tested on": f"{', '.join(d.test_sets)}: lengths {d.test_min_length}-"
                                  f"{d.test_max_length}"})
    return rows


def reference_configs(config: RunConfig, cells: str) -> dict[str, RunConfig]:
    """The recurrent references (``cells``: ``stack``, ``lstm``, comma-separated; ``none``) on
    ``config``'s data, at its budget, learning rate and schedule, reading strings as long as
    its tests."""
    out = {}
    for cell in (c.strip() for c in cells.split(",") if c.strip() not in ("", "none")):
        name = "stack RNN" if cell == "stack" else cell.upper()
        t = config.train
        out[f"Dyck-{config.data.k} {name}"] = RunConfig(
            data=config.data, model=RecurrentConfig(k=config.data.k, n_ctx=config.model.n_ctx,
                                                    cell=cell),
            train=TrainConfig(max_steps=t.max_steps, lr=t.lr, batch_size=32,
                              warmup_steps=t.warmup_steps, schedule="cosine", grad_clip=1.0,
                              eval_every=t.eval_every, target_accuracy=t.target_accuracy),
            seed=0, baselines=())
    return out


def binned(score: Any, lo: int, hi: int) -> float:
    """Accuracy of a :class:`~dyckbook.experiment.evaluate.Score` over its lengths in
    ``[lo, hi]`` (nan where it has none)."""
    n = correct = 0
    for length, (m, c) in score.per_length.items():
        if lo <= int(length) <= hi:
            n, correct = n + m, correct + c
    return correct / n if n else math.nan


def extends_values(group: Sequence[Any], lo: int, hi: int) -> list[float]:
    """Per seed, the lower of the long-range sets' accuracies (:data:`LONG_SETS` that the
    records hold) at lengths ``[lo, hi]``: the verdict's measure."""
    return [min(binned(r.scores[s], lo, hi) for s in LONG_SETS if s in r.scores)
            for r in group]


def strongest(scores: Mapping[str, Mapping[str, float]]) -> tuple[str, float]:
    """The rule with the highest lower score over the sets: ``scores`` is ``{set: {rule:
    accuracy}}``; a rule must be scored on every set. Returns ``(rule, its lower score)``."""
    sets = list(scores.values())
    common = set.intersection(*(set(s) for s in sets)) if sets else set()
    if not common:
        return "", math.nan
    best = max(sorted(common), key=lambda r: min(s[r] for s in sets))
    return best, min(s[best] for s in sets)


def own_adversary(group: Sequence[Any], sets: Sequence[str], lo: int, hi: int
                  ) -> dict[str, dict[str, float]]:
    """``{set: {rule: accuracy}}``, every rule fitted on a model's own training strings and
    scored on its test strings of lengths ``[lo, hi]``, averaged over the group's seeds."""
    out: dict[str, dict[str, float]] = {}
    for s in sets:
        rules = set.intersection(*(set(r.baselines.get(s, {})) for r in group)) if group else set()
        values = {rule: float(np.nanmean([binned(r.baselines[s][rule], lo, hi) for r in group]))
                  for rule in sorted(rules)}
        out[s] = {rule: v for rule, v in values.items() if not math.isnan(v)}
    return out


def seed_table(groups: Mapping[str, Sequence[Any]], test: str,
               spans: Mapping[str, tuple[int, int]]) -> dict[str, dict[str, list[float]]]:
    """``{label: {multiple: [per-seed accuracy]}}`` on one test set."""
    return {label: {m: [binned(r.scores[test], lo, hi) if test in r.scores else math.nan
                        for r in group] for m, (lo, hi) in spans.items()}
            for label, group in groups.items()}


def table_rows(groups: Mapping[str, Sequence[Any]], tests: Sequence[str],
               spans: Mapping[str, tuple[int, int]]) -> list[dict[str, str]]:
    """One row per configuration and test set: every multiple's mean accuracy over seeds, its
    95% interval and the seeds at :data:`SOLVED` or more (the literature's form)."""
    rows = []
    for test in tests:
        table = seed_table(groups, test, spans)
        for label, by_m in table.items():
            if all(math.isnan(v) for vs in by_m.values() for v in vs):
                continue
            row = {"configuration": label, "set": test, "seeds": str(len(groups[label]))}
            for m, values in by_m.items():
                values = [v for v in values if not math.isnan(v)]
                if not values:
                    row[m] = "—"
                    continue
                lo, hi = interval(values)
                held = sum(v >= SOLVED for v in values)
                row[m] = f"{pct(float(np.mean(values)))} {span(lo, hi)}; {held}/{len(values)}"
            rows.append(row)
    return rows
