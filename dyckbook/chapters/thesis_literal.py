"""The page of the thesis' pipeline rerun literally (notebook 00): a row per experiment, why
the constant ones score what they score, and how far the thesis' attention figures are from the
forward pass."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dyckbook.chapters.page import pct
from dyckbook.data.presets import thesis_experiment, thesis_result


def literal_row(n: int, result: Any) -> dict[str, Any]:
    """A row of the literal reproduction: what ran, the thesis' number, ours, the shortcut."""
    record, e = result.record, thesis_experiment(n)
    train = result.splits.train
    return {"exp.": n, "epochs": f"{record.config['train']['epochs']} of {e.epochs}",
            "lr": f"{record.config['train']['lr']:g}",
            "Table 5.2": pct(thesis_result(n).test_acc / 100, 2),
            "ours": pct(record.accuracy("thesis"), 2),
            "first symbol": pct(record.baselines["thesis"]["first_symbol"].accuracy, 2),
            "distinct non-members": len(train.subset(train.labels == 0).unique()),
            "hard": pct(record.accuracy("hard")), "random": pct(record.accuracy("random")),
            "training": record.failure or "ok"}


def constant_sentences(records: Mapping[int, Any], test: str = "thesis") -> str:
    """For every experiment whose output did not depend on its input: which class it always
    answers and why that gives its accuracy (the class's share of the test split)."""
    out = []
    for n, record in records.items():
        if record.failure != "constant":
            continue
        score = record.scores[test]
        members, hit = score.per_kind.get("member", [0, 0])
        answer, count = ("member", members) if hit == members else ("non-member",
                                                                     score.n - members)
        out.append(f"Experiment {n}'s output is the same for every input (margin spread "
                   f"{record.margin_std:.1e}): it answers \"{answer}\" every time, {count} of the "
                   f"{score.n} strings of the thesis' test split are {answer}s, so it scores "
                   f"{pct(score.accuracy, 2)} "
                   f"(Table 5.2: {pct(thesis_result(n).test_acc / 100, 2)}).")
    return " ".join(out) or "Every experiment's output depends on its input."


def pattern_gap_sentence(real: Any, thesis_way: Any) -> str:
    """How far the thesis' attention extraction is from the real patterns, layer by layer
    (both (layer, head, query, key) of one string)."""
    gaps = np.abs(np.asarray(real) - np.asarray(thesis_way)).reshape(len(real), -1).max(axis=1)
    parts = [f"layer {layer}: {gap:.2g}" for layer, gap in enumerate(gaps)]
    return ("Largest difference in attention probability between the thesis' extraction and "
            f"the forward pass, by layer: {'; '.join(parts)}.")
