"""The summary page (notebook 90): the thesis' Table 5.2 beside its pipeline rerun and the
sound reruns, one row per experiment."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from dyckbook.chapters.page import pct, plural
from dyckbook.data.presets import THESIS_RESULTS, thesis_experiment, thesis_result
from dyckbook.data.thesis import thesis_is_dyck_word, thesis_samples


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


# ------------------------------------------------------------------ experiment 6, explained
def _negative_cells(record: Any, test: str = "thesis") -> tuple[dict[int, tuple[int, int]], int,
                                                                 int]:
    """A record's ``test`` set read from its cells: ``{length: (strings, correct)}`` of its
    negatives (the thesis' negatives are a function of their length: one distinct string per
    length), and its members' count and how many it got wrong."""
    negatives: dict[int, tuple[int, int]] = {}
    members = wrong = 0
    for key, (n, correct) in record.scores[test].cells.items():
        kind, _, length = key.split("|")
        if kind == "member":
            members, wrong = members + n, wrong + n - correct
        else:
            seen = negatives.get(int(length), (0, 0))
            negatives[int(length)] = (seen[0] + n, seen[1] + correct)
    return negatives, members, wrong


def thesis_test_negatives(experiment: int = 6) -> dict[str, Any]:
    """The distinct non-members of an experiment's own test set and of its training data, as
    the thesis' generator made them (``data.thesis.thesis_samples``, regenerated): ``{"test":
    {length: copies}, "train": {length: copies}, "n_test": strings, "one_string": whether every
    negative of both sets is the beginning of one and the same string}``."""
    e = thesis_experiment(experiment)
    if e.test_data is None:
        raise ValueError(f"experiment must be one with a test set of its own (6), got {experiment}")

    def negatives(d: Any) -> Counter:
        strings = thesis_samples(d.n, d.k, d.min_length, d.max_length, d.balanced,
                                 generator=d.generator)
        return Counter(s for s in strings if not thesis_is_dyck_word(s, d.k))

    test, train = negatives(e.test_data), negatives(e.data)
    every = sorted(set(test) | set(train), key=len)
    return {"test": {len(s): n for s, n in sorted(test.items(), key=lambda x: len(x[0]))},
            "train": {len(s): n for s, n in sorted(train.items(), key=lambda x: len(x[0]))},
            "n_test": e.test_data.n,
            "one_string": all(b.startswith(a) for a, b in zip(every, every[1:]))}


def accepted_explanations(accuracy: float, n: int, copies: int, members: int,
                          limit: int = 3) -> list[tuple[int, int]]:
    """``(distinct negatives accepted, members missed)`` pairs that give ``accuracy`` (a
    fraction, as printed to 4 decimals) on ``n`` strings whose negatives come in equal
    ``copies``: the score moves in steps of ``copies / n``. The ``limit`` pairs with the fewest
    members missed."""
    out = []
    for accepted in range(n // copies + 1):
        missed = round((1 - accuracy) * n) - accepted * copies
        if 0 <= missed <= members:
            out.append((accepted, missed))
    return sorted(out, key=lambda x: x[1])[:limit]


def experiment6_sentences(literal: Sequence[Any]) -> str:
    """Why the thesis reports 74.98% on experiment 6's test set and its rerun pipeline gives
    another number: both count a handful of distinct negatives, thousands of times over."""
    facts = thesis_test_negatives(6)
    test, train = facts["test"], facts["train"]
    n, reported = facts["n_test"], thesis_result(6).test_acc / 100
    copies = sorted(set(test.values()))
    members = n - sum(test.values())
    text = (f"**Why experiment 6 does not reproduce.** Its training data hold "
            f"{plural(len(train), 'distinct negative')} "
            f"({', '.join(f'{c:,} copies of one string of length {L}' for L, c in train.items())})"
            f" and its own test set of {n:,} strings holds {len(test)} "
            f"(lengths {', '.join(map(str, test))}), each "
            f"{'repeated ' + format(copies[0], ',') + ' times' if len(copies) == 1 else 'repeated'}"
            f". ")
    if facts["one_string"] and len(train) == 1:
        (trained,) = train
        longer = sum(L > trained for L in test)
        text += (f"Every one of them is the beginning of one and the same random string (the "
                 f"generator re-seeds itself before each): {longer} of the test's negatives "
                 f"begin with the whole training negative, the other {len(test) - longer} are "
                 f"beginnings of it. ")
    if len(copies) == 1:
        step = copies[0] / n
        found = accepted_explanations(reported, n, copies[0], members)
        first, *others = found
        alternatives = ", or ".join(f"{a} and {m:,}" for a, m in others)
        text += (f"Each distinct negative is {pct(step, 2)} of the score, so the score moves "
                 f"in steps of {pct(step, 2)}: the reported {pct(reported, 2)} is what a model "
                 f"gets that accepts {first[0]} of them and misses {first[1]:,} of "
                 f"{members:,} members" + (f" (or {alternatives})" if others else "") + ". ")
    lit = [r for r in literal if r.label == "experiment 6" and "thesis" in r.scores]
    if lit:
        record = min(lit, key=lambda r: int(r.config["seed"]))
        negs, members_r, wrong = _negative_cells(record)
        total = sum(c for c, _ in negs.values()) + members_r
        rejected = sum(ok == c for c, ok in negs.values())
        big = sorted(negs.items(), key=lambda x: -x[1][0])
        counts = ", ".join(f"{c:,}" for _, (c, _) in big)
        text += (f"The rerun of its pipeline here reads a test set of {total:,} strings (its "
                 f"recipe departs from Table 5.1 as the table says), which holds "
                 f"{len(negs)} distinct negatives ({counts} copies); its model rejects "
                 f"{rejected} of them and misses {wrong:,} of {members_r:,} members: "
                 f"{pct(record.accuracy('thesis'), 2)}. ")
    text += ("Both numbers say which of a few strings a model rejects, not how it handles "
             "lengths it never saw; the sound rerun of experiment 6 "
             "({doc}`/book/pages/03_ood_lengths/ood`) asks that on fresh strings.")
    return text
