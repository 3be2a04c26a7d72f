"""The thesis' claims, the rule that judges each, and the verdicts its evidence gives.

The rules are data, declared here before any result is read, and printed in the book as they
are. Every rule reads one or two pieces of evidence, each a list of per-seed measurements
summarised by its mean and a 95% percentile-bootstrap interval over seeds (always within the
range of the measurements, hence within [0, 1] for accuracies). A rule says *reproduced* when
the interval clears one bar, *refuted* when it clears the opposite bar, and *qualified* in
between; labels move monotonically with the evidence.

Where a rule needs "the best configuration", it is chosen without the seed it is scored on:
for every seed, the configuration with the best mean over the other seeds is selected and that
seed's own measurement is kept (:func:`held_out_best`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LABELS", "RULES", "Evidence", "Rule", "Verdict", "bootstrap", "held_out_best",
           "verdicts"]

LABELS = ("reproduced", "qualified", "refuted")
_N_BOOT = 10_000


@dataclass(frozen=True)
class Evidence:
    """Per-seed measurements of one quantity, with their mean and 95% bootstrap interval."""

    name: str
    values: tuple[float, ...]
    n_strings: int = 0  # test strings behind each value (0 when not a test accuracy)

    @property
    def n_seeds(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values)) if self.values else math.nan

    @property
    def interval(self) -> tuple[float, float]:
        return bootstrap(self.values)


def bootstrap(values: Sequence[float], level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of ``values`` (10,000 resamples, fixed seed).

    Returns ``(nan, nan)`` for no values; a single value gives a zero-width interval.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return math.nan, math.nan
    if np.isnan(x).any():
        raise ValueError(f"values must not hold NaN, got {x.tolist()}")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(_N_BOOT, x.size))].mean(axis=1)
    tail = (1.0 - level) / 2
    # clipped to the values' range: a mean of equal values can round past them (3 x 0.99 gives
    # 0.98999...), which would move a label at a bar
    low, high = np.clip(np.quantile(means, [tail, 1 - tail]), x.min(), x.max())
    return float(low), float(high)


def held_out_best(table: Mapping[str, Mapping[int, float]]) -> tuple[list[float], list[str]]:
    """Leave-one-seed-out selection of the best configuration.

    Args:
        table: ``{configuration: {seed: measurement}}``; higher is better.

    Returns:
        ``(values, chosen)``: for every seed present in all configurations, the measurement of
        the configuration whose mean over the *other* seeds is highest, and its name.
    """
    if not table:
        return [], []
    seeds = sorted(set.intersection(*(set(v) for v in table.values())))
    values, chosen = [], []
    for seed in seeds:
        def others(name: str, seed: int = seed) -> float:
            rest = [v for s, v in table[name].items() if s != seed and s in seeds]
            return float(np.mean(rest)) if rest else -math.inf

        best = max(sorted(table), key=others)
        values.append(float(table[best][seed]))
        chosen.append(best)
    return values, chosen


@dataclass(frozen=True)
class Rule:
    """One claim of the thesis and how its evidence is judged.

    Attributes:
        claim: short key.
        statement: the thesis' claim, in its words' sense.
        needs: the evidence names the rule reads.
        evidence: what is measured, in words.
        reproduced_if / refuted_if: the bars, in words (the book prints these).
        judge: evidence -> label, implementing exactly those bars.
    """

    claim: str
    statement: str
    needs: tuple[str, ...]
    evidence: str
    reproduced_if: str
    refuted_if: str
    judge: Callable[[Mapping[str, Evidence]], str]


def _bars(x: Evidence, reproduced: Callable[[float, float], bool],
          refuted: Callable[[float, float], bool]) -> str:
    lo, hi = x.interval
    if refuted(lo, hi):
        return "refuted"
    return "reproduced" if reproduced(lo, hi) else "qualified"


def _layers(e: Mapping[str, Evidence], k: int) -> str:
    one, two = e[f"one_layer_k{k}"].interval, e[f"two_layers_k{k}"].interval
    if one[0] >= 0.99:
        return "refuted"
    return "reproduced" if one[1] < 0.99 and two[0] >= 0.99 else "qualified"


def _lengths(e: Mapping[str, Evidence]) -> str:
    beyond, within = e["beyond_lengths"].interval, e["within_lengths"].interval
    if beyond[0] >= 0.95:
        return "refuted"
    return "reproduced" if beyond[1] < 0.90 and within[0] >= 0.95 else "qualified"


RULES: tuple[Rule, ...] = (
    Rule("bidirectional", "Bidirectional masking gives perfect accuracy (experiments 1 and 3).",
         ("bidirectional",),
         "`bidirectional`: hard-test accuracy of the thesis' bidirectional model (no positional "
         "encoding, [start] readout) trained on sound data; the lower of Dyck-1 and Dyck-3.",
         "interval within [0.99, 1]", "interval below 0.90",
         lambda e: _bars(e["bidirectional"], lambda lo, hi: lo >= 0.99, lambda lo, hi: hi < 0.9)),
    Rule("causal", "Causal masking cannot be trained: about 50% (experiments 2, 4, 5).",
         ("causal_best",),
         "`causal_best`: held-out accuracy, on the grid's stack test set, of the best causal "
         "configuration with an [end] or mean readout; the higher of Dyck-1 and Dyck-3 (the "
         "claim is that no causal model trains, so one language where one does speaks against "
         "it; the lower would read a language nothing learns as support for a claim about "
         "the causal mask).",
         "interval below 0.60", "interval within [0.95, 1]",
         lambda e: _bars(e["causal_best"], lambda lo, hi: hi < 0.6, lambda lo, hi: lo >= 0.95)),
    Rule("layers_k1", "Two layers are needed (Dyck-1).",
         ("one_layer_k1", "two_layers_k1"),
         "`one_layer_k1`, `two_layers_k1`: held-out accuracy, on the grid's stack test set, of "
         "the best 1-layer and best 2-layer configuration of the grid.",
         "1 layer's interval below 0.99 and 2 layers' within [0.99, 1]",
         "1 layer's interval within [0.99, 1]", lambda e: _layers(e, 1)),
    Rule("layers_k3", "Two layers are needed (Dyck-3).",
         ("one_layer_k3", "two_layers_k3"),
         "`one_layer_k3`, `two_layers_k3`: as for Dyck-1.",
         "1 layer's interval below 0.99 and 2 layers' within [0.99, 1]",
         "1 layer's interval within [0.99, 1]", lambda e: _layers(e, 3)),
    Rule("lengths", "Models generalise only to lengths seen in training (experiment 6).",
         ("beyond_lengths", "within_lengths"),
         "`beyond_lengths`, `within_lengths`: hard-test accuracy of the best configuration "
         "(held out) of the length study beyond and within the training lengths; the language "
         "with the higher accuracy beyond (the claim is that no model generalises, so one "
         "language where one does speaks against it).",
         "beyond below 0.90 while within is within [0.95, 1]", "beyond within [0.95, 1]",
         _lengths),
    Rule("attention", "Attention patterns align with the bracket structure.",
         ("partner_attention",),
         "`partner_attention`: attention the best head (held out) puts on a closer's partner, "
         "at closers where neither the previous symbol nor the most recent opener of the same "
         "type is the partner.",
         "interval within [0.5, 1]", "interval below 0.25",
         lambda e: _bars(e["partner_attention"], lambda lo, hi: lo >= 0.5,
                         lambda lo, hi: hi < 0.25)),
    Rule("preview", "The [end] token's attention to itself previews the decision.",
         ("preview_auc",),
         "`preview_auc`: ROC AUC of the [end] token's self-attention in the last layer as a "
         "score for membership, on the hard test set.",
         "interval within [0.9, 1]", "interval below 0.6",
         lambda e: _bars(e["preview_auc"], lambda lo, hi: lo >= 0.9, lambda lo, hi: hi < 0.6)),
    Rule("static_head", "The final layer's weights barely move during training.",
         ("head_reset_drop",),
         "`head_reset_drop`: hard-test accuracy lost when the trained classifier head is put "
         "back to its initial weights (the rest of the model kept).",
         "interval below 0.02", "interval within [0.10, 1]",
         lambda e: _bars(e["head_reset_drop"], lambda lo, hi: hi < 0.02,
                         lambda lo, hi: lo >= 0.10)),
)


@dataclass(frozen=True)
class Verdict:
    """A rule applied to its evidence."""

    rule: Rule
    label: str
    evidence: tuple[Evidence, ...]


def verdicts(evidence: Mapping[str, Evidence]) -> list[Verdict]:
    """Judge every claim whose evidence is present.

    Args:
        evidence: ``{name: Evidence}``; names are those the rules read (see ``RULES``).

    Returns:
        One :class:`Verdict` per rule whose evidence is all present, in ``RULES`` order.
    """
    out = []
    for rule in RULES:
        if all(name in evidence and evidence[name].values for name in rule.needs):
            out.append(Verdict(rule, rule.judge(evidence),
                               tuple(evidence[name] for name in rule.needs)))
    return out


# ------------------------------------------------------------------------------ evidence
def _higher(*candidates: Evidence | None) -> Evidence | None:
    """The candidate with the higher mean ("the higher of Dyck-1 and Dyck-3")."""
    present = [c for c in candidates if c is not None and c.values]
    return max(present, key=lambda e: e.mean) if present else None


def _lower(*candidates: Evidence | None) -> Evidence | None:
    """The candidate with the lower mean ("the lower of Dyck-1 and Dyck-3")."""
    present = [c for c in candidates if c is not None and c.values]
    return min(present, key=lambda e: e.mean) if present else None


def _cell(record: Any) -> tuple[int, int, str, str, str]:
    m, d = record.config["model"], record.config["data"]
    return d["k"], m["n_layers"], m["mask"], m["pos_encoding"], m["readout"]


def _best(name: str, records: Sequence[Any], keep: Callable[[tuple], bool],
          value: Callable[[Any], float], test: str = "hard") -> Evidence | None:
    """Held-out best configuration among the records whose cell passes ``keep``."""
    table: dict[str, dict[int, float]] = {}
    for r in records:
        if keep(_cell(r)):
            table.setdefault("-".join(map(str, _cell(r))), {})[int(r.config["seed"])] = value(r)
    values, _ = held_out_best(table)
    n = [r.scores[test].n for r in records if keep(_cell(r))]
    return Evidence(name, tuple(values), int(np.mean(n)) if n else 0) if values else None


def _length_pair(k: int, group: Sequence[Any]) -> tuple[Evidence, Evidence] | None:
    """Accuracy beyond and within the training lengths of the held-out best configuration
    (chosen by its accuracy beyond), seed by seed."""
    beyond: dict[str, dict[int, float]] = {}
    within: dict[str, dict[int, float]] = {}
    for r in group:
        name, seed, score = r.label, int(r.config["seed"]), r.scores["hard"]
        top = int(r.config["data"]["max_length"])
        beyond.setdefault(name, {})[seed] = score.accuracy_between(top + 1, 10**9)
        within.setdefault(name, {})[seed] = score.accuracy_between(0, top)
    values, chosen = held_out_best(beyond)
    if not values:
        return None
    seeds = sorted(set.intersection(*(set(v) for v in beyond.values())))
    inside = tuple(within[c][s] for c, s in zip(chosen, seeds))
    return (Evidence(f"beyond_lengths k{k}", tuple(values)),
            Evidence(f"within_lengths k{k}", inside))


def gather(experiments: Sequence[Any] = (), grid: Sequence[Any] = (),
           lengths: Sequence[Any] = (), explain: Mapping[str, Sequence[float]] | None = None,
           test: str = "hard") -> dict[str, Evidence]:
    """The evidence of every rule, from the records of the runs that measured it.

    ``test`` names the grid's test set the grid's evidence reads (``causal_best`` and the
    layers): ``stack``, the verdict-bearing set, or ``hard`` (the sets a window of four symbols
    cannot reject, which counters and wider windows mostly can). The thesis' experiments and
    the length study have no ``stack`` set within their lengths and always read ``hard``.

    Args:
        experiments: records of the sound reruns of the thesis' experiments (labels
            ``exp. 1: bidirectional ...`` and ``exp. 3: bidirectional ...``).
        grid: records of the ablation grid.
        lengths: records of the length study (labels ``Dyck-<k> <mask>-<pe>-<readout>``).
        explain: the explainability page's per-model measurements (``partner_attention``,
            ``preview_auc``, ``head_reset_drop``).

    Returns:
        ``{name: Evidence}`` for every piece of evidence the records support.
    """
    out: dict[str, Evidence | None] = {}
    hard = lambda r: r.accuracy("hard")
    bidirectional = [Evidence(f"bidirectional k{k}", tuple(
        hard(r) for r in experiments if r.label.startswith(f"exp. {e}: bidirectional")
        and r.status == "ok")) for k, e in ((1, 1), (3, 3))]
    out["bidirectional"] = _lower(*bidirectional)
    grid = [r for r in grid if test in r.scores]

    def chosen(r: Any) -> float:
        return r.accuracy(test)

    ks = sorted({_cell(r)[0] for r in grid})
    out["causal_best"] = _higher(*(_best(f"causal_best k{k}", grid, lambda c, k=k: c[0] == k
                                        and c[2] == "causal" and c[4] != "start", chosen, test)
                                  for k in ks))
    for k in ks:
        for layers, name in ((1, f"one_layer_k{k}"), (2, f"two_layers_k{k}")):
            out[name] = _best(name, grid, lambda c, k=k, n=layers: c[0] == k and c[1] == n,
                              chosen, test)
    pairs = [_length_pair(k, [r for r in lengths if r.label.startswith(f"Dyck-{k} ")])
             for k in sorted({int(r.config["data"]["k"]) for r in lengths})]
    pairs = [p for p in pairs if p is not None]
    if pairs:
        out["beyond_lengths"], out["within_lengths"] = max(pairs, key=lambda p: p[0].mean)
    for name in ("partner_attention", "preview_auc", "head_reset_drop"):
        if explain and explain.get(name):
            out[name] = Evidence(name, tuple(float(v) for v in explain[name]))
    return {k: v for k, v in out.items() if v is not None}
