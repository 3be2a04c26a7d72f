"""The summary page (notebook 90): the thesis' Table 5.2 beside its pipeline rerun and the
sound reruns, one row per experiment."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from dyckbook.chapters.page import pct, plural
from dyckbook.data.presets import THESIS_RESULTS, thesis_experiment


def _seeds_text(records: Sequence[Any], test: str = "hard") -> str:
    """Mean accuracy over every seed, and how many failed and why."""
    if not records:
        return "not run"
    acc = [r.accuracy(test) for r in records]
    failed = sorted({r.failure for r in records if r.status != "ok"})
    text = f"{pct(sum(acc) / len(acc))}, {plural(len(records), 'seed')}"
    if failed:
        n = sum(r.status != "ok" for r in records)
        text += f" ({n} failed: {', '.join(failed)})"
    return text


def recipe_departure(experiment: int, record: Any) -> str:
    """How a rerun of the thesis' pipeline departs from Table 5.1 and the notebook's data
    (epochs, learning rate, strings), or ``"Table 5.1"`` when it does not."""
    e = thesis_experiment(experiment)
    train = record.config["train"]
    parts = []
    if train["epochs"] != e.epochs:
        parts.append(f"{train['epochs']} of {e.epochs} epochs")
    if not math.isclose(train["lr"], e.lr):
        parts.append(f"lr {train['lr']:g} (Table 5.1: {e.lr:g})")
    strings = int(record.config["data"]["n_train"])
    if strings < e.data.n:
        parts.append(f"{strings:,} of {e.data.n:,} strings")
    return "; ".join(parts) or "Table 5.1"


def sound_column(label: str) -> tuple[int, str] | None:
    """Which experiment a sound rerun's label answers and how it reads the string: ``(n,
    "start")`` for the thesis' model (``exp. 1: bidirectional, [start]``), ``(n, "end")`` for a
    model read at ``[end]`` (``exp. 2 read at [end]``, ``exp. 7 width, causal, [end]``); None
    for a label of no experiment."""
    found = re.match(r"exp\. (\d+)(?=[:\s])", label)
    if found is None:
        return None
    return int(found.group(1)), "end" if "[end]" in label else "start"


def table52_rows(literal: Sequence[Any], sound: Sequence[Any]) -> list[dict[str, Any]]:
    """Table 5.2 beside the rerun of its pipeline (with how its recipe departs from Table
    5.1) and the sound reruns, one row per experiment."""
    rows = []
    for n, reported in THESIS_RESULTS.items():
        lit = [r for r in literal if r.label == f"experiment {n}"]
        rows.append({
            "exp.": n, "Table 5.2": pct(reported.test_acc / 100, 2),
            "its pipeline: thesis split": pct(lit[0].accuracy("thesis"), 2) if lit
            else "not run",
            "its pipeline: hard": pct(lit[0].accuracy("hard")) if lit else "not run",
            "recipe vs Table 5.1": recipe_departure(n, lit[0]) if lit else "not run",
            "sound: thesis' model": _seeds_text([r for r in sound
                                                  if sound_column(r.label) == (n, "start")]),
            "sound: read at [end]": _seeds_text([r for r in sound
                                                 if sound_column(r.label) == (n, "end")]),
            "strongest shortcut, same strings": _strongest_text(
                [r for r in sound if (sound_column(r.label) or (0,))[0] == n]),
        })
    return rows


def end_readout_sentence(sound: Sequence[Any], test: str = "hard") -> str:
    """The sound reruns read at ``[end]``, each beside the strongest shortcut on the same test
    strings: which of them clear it (a model that does not has not shown it learned)."""
    parts, cleared = [], 0
    for n in sorted({c[0] for r in sound if (c := sound_column(r.label)) and c[1] == "end"}):
        group = [r for r in sound if sound_column(r.label) == (n, "end")]
        model = sum(r.accuracy(test) for r in group) / len(group)
        means: dict[str, list[float]] = {}
        for r in group:
            for name, score in r.baselines.get(test, {}).items():
                means.setdefault(name, []).append(score.accuracy)
        if not means:
            continue
        rule, values = max(means.items(), key=lambda kv: sum(kv[1]) / len(kv[1]))
        bar = sum(values) / len(values)
        cleared += model > bar
        parts.append(f"experiment {n} {pct(model)} against `{rule}` {pct(bar)}")
    if not parts:
        return "No sound rerun reads at `[end]`."
    verdict = ("none clears it" if not cleared else
               f"{cleared} of {len(parts)} clear{'s' * (cleared == 1)} it")
    return (f"Read at `[end]`, the causal models train (their output depends on the input), "
            f"but beside the strongest shortcut on the same {test} strings {verdict}: "
            + "; ".join(parts) + ".")


def _strongest_text(records: Sequence[Any], test: str = "hard") -> str:
    """The stack-free shortcut with the best mean accuracy over the records' test sets."""
    means: dict[str, list[float]] = {}
    for r in records:
        for name, s in r.baselines.get(test, {}).items():
            means.setdefault(name, []).append(s.accuracy)
    if not means:
        return "not run"
    name, values = max(means.items(), key=lambda kv: sum(kv[1]) / len(kv[1]))
    return f"{name} {pct(sum(values) / len(values))}"
