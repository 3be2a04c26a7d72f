"""The thesis' claims, the rule that judges each, and the verdicts its evidence gives.

The rules are data, declared here before any result is read, registered with the recipes of the
runs that feed them (``registry``) and printed in the book as they are. Every claim is judged
per language. Every rule reads one or two pieces of evidence, each a list of per-seed
measurements (every seed trained, failed ones included) summarised by its mean and a 95%
interval over seeds (``intervals.METHOD``, whose coverage the tests check by simulation). A rule
says *reproduced* when the interval clears one bar, *refuted* when it clears the opposite bar,
and *qualified* in between; :func:`sensitivity` says how far one seed would have to move to
change the label.

Where a rule needs "the best configuration", it is chosen without the seed it is scored on:
for every seed, the configuration with the best mean over the other seeds is selected and that
seed's own measurement is kept (:func:`held_out_best`); the evidence names the choice.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dyckbook.data.protocol import REGIMES
from dyckbook.experiment.intervals import interval, intervals

__all__ = ["CHANCE", "LABELS", "MEASURE_BOUNDS", "NOT_TESTABLE", "RULES", "UNREGISTERED",
           "Evidence", "Rule", "Verdict", "beyond_table", "gather", "trains_on",
           "held_out_best", "sensitivity", "verdicts"]

LABELS = ("reproduced", "qualified", "refuted")
#: the label of a rule whose evidence cannot test the claim: a stack-free rule does as well on
#: the same test distribution, or the models never learned within their training lengths (a
#: rule that can say so lists it in ``Rule.labels``)
NOT_TESTABLE = "not testable"
UNREGISTERED = "not judged"  # the label of a claim whose run's recipe is not the registered one
CHANCE = 0.6  # "about 50%": an interval below this bar is a model at chance on a balanced set
#: the range a measure's values can take where it is not [0, 1] (accuracies, shares, attention,
#: AUC): a drop of accuracy is a difference, the head's movement a relative norm. An interval
#: is clipped to it; the explainability chapter's tables use the same bounds, so a measure's
#: interval is the same on every page.
MEASURE_BOUNDS = {"head_reset_drop": (-1.0, 1.0), "head_movement": (0.0, math.inf)}
_INTERVALS: dict[tuple, tuple[float, float]] = {}  # (values, bounds) -> interval, computed once


@dataclass(frozen=True)
class Evidence:
    """Per-seed measurements of one quantity, with their mean and 95% interval.

    Attributes:
        name: what is measured (``causal k3``, ...).
        values: one per seed, every seed trained (failed ones included).
        n_strings: test strings behind each value (0 when not a test accuracy).
        test: the test set read (``hard``, ``stack``; "" when not a test accuracy).
        chosen: per seed, the configuration held out as best (empty when there is no choice).
        bounds: the range a value can take (the interval is clipped to it).
        n_failed: how many of the seeds broke a failure rule of ``run`` (counted in ``values``).
        reference: a single reference number shown beside a verdict (a ceiling), not seeds.
    """

    name: str
    values: tuple[float, ...]
    n_strings: int = 0
    test: str = ""
    chosen: tuple[str, ...] = ()
    bounds: tuple[float, float] = (0.0, 1.0)
    n_failed: int = 0
    reference: bool = False

    @property
    def n_seeds(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.values)) if self.values else math.nan

    @property
    def interval(self) -> tuple[float, float]:
        key = (self.values, self.bounds)
        if key not in _INTERVALS:
            _INTERVALS[key] = interval(self.values, bounds=self.bounds)
        return _INTERVALS[key]

    def best(self) -> str:
        """The configuration chosen most often, and how often (``""`` when none was chosen)."""
        if not self.chosen:
            return ""
        name, times = Counter(self.chosen).most_common(1)[0]
        n = len(self.chosen)
        return f"{name} ({times} of {n} seed{'s' * (n != 1)})"


@dataclass(frozen=True)
class Rule:
    """One claim of the thesis, for one language, and how its evidence is judged.

    Attributes:
        claim: short key.
        statement: the thesis' claim, in its words' sense.
        needs: the evidence names the rule reads.
        evidence: what is measured, in words.
        reproduced_if / refuted_if: the bars, in words (the book prints these).
        judge: evidence -> label, implementing exactly those bars.
        run: the run of ``notebooks/experiments.yml`` that measures the evidence (its recipe is
            registered in ``notebooks/registrations.yml``).
        shows: evidence printed beside the verdict but not judged (the stack set's, a floor).
        labels: the labels the rule can give (:data:`LABELS`, and :data:`NOT_TESTABLE` where
            its evidence can fail to test the claim).
    """

    claim: str
    statement: str
    needs: tuple[str, ...]
    evidence: str
    reproduced_if: str
    refuted_if: str
    judge: Callable[[Mapping[str, Evidence]], str]
    run: str
    shows: tuple[str, ...] = ()
    labels: tuple[str, ...] = LABELS
    not_testable_if: str = ""

    def text(self) -> dict[str, Any]:
        """Everything a reader is told about the rule (what its registration digests; a rule
        that cannot say "not testable" is digested as before that label existed)."""
        out = {"claim": self.claim, "statement": self.statement, "needs": list(self.needs),
               "evidence": self.evidence, "reproduced_if": self.reproduced_if,
               "refuted_if": self.refuted_if, "run": self.run, "shows": list(self.shows)}
        if self.not_testable_if:
            out["not_testable_if"] = self.not_testable_if
        return out


def _bars(x: Evidence, reproduced: Callable[[float, float], bool],
          refuted: Callable[[float, float], bool]) -> str:
    lo, hi = x.interval
    if refuted(lo, hi):
        return "refuted"
    return "reproduced" if reproduced(lo, hi) else "qualified"


def _causal(e: Mapping[str, Evidence], k: int) -> str:
    lo, hi = e[f"causal_k{k}"].interval
    if hi < CHANCE:
        return "reproduced"
    return "refuted" if lo >= max(CHANCE, e[f"counter_floor_k{k}"].mean) else "qualified"


def _layers(e: Mapping[str, Evidence], k: int) -> str:
    one, two = e[f"one_layer_k{k}"].interval, e[f"two_layers_k{k}"].interval
    if max(one[1], two[1]) < e[f"shortcut_layers_k{k}"].mean:
        return NOT_TESTABLE  # neither depth beats a rule without a stack on the same strings
    if one[0] >= 0.99:
        return "refuted"
    return "reproduced" if one[1] < 0.99 and two[0] >= 0.99 else "qualified"


def _lengths(e: Mapping[str, Evidence], k: int) -> str:
    beyond, within = e[f"beyond_lengths_k{k}"].interval, e[f"within_lengths_k{k}"].interval
    if beyond[0] >= 0.95:
        return "refuted"
    return "reproduced" if beyond[1] < 0.90 and within[0] >= 0.95 else "qualified"


def _learnable(e: Mapping[str, Evidence]) -> str:
    if e["test_kind_k3"].mean > 0:
        return NOT_TESTABLE  # trained on negatives built as the test's: proves less
    label = _bars(e["recipe_best_k3"], lambda lo, hi: lo >= 0.99, lambda lo, hi: hi < 0.90)
    if label != "refuted" and e["recipe_best_k3"].interval[0] <= e["shortcut_k3"].mean:
        return NOT_TESTABLE  # not above a rule without a stack on the same strings
    return label


def _beyond(e: Mapping[str, Evidence], m: int) -> str:
    beyond, within = e[f"lengths_{m}x_k3"].interval, e["lengths_1x_k3"].interval
    if e[f"adversary_{m}x_k3"].mean >= 0.90 or within[0] < 0.95:
        return NOT_TESTABLE
    if beyond[0] >= 0.95:
        return "refuted"
    return "reproduced" if beyond[1] < 0.90 else "qualified"


def _beyond_rule(m: int) -> Rule:
    return Rule(
        f"lengths_{m}x_k3",
        f"Models generalise only to lengths seen in training (the thesis' claim 4), asked of "
        f"the Dyck-3 recipe that learns (language-model loss, mean readout) with positions that "
        f"can extend, at {m}x the training lengths (issue 63).",
        (f"lengths_{m}x_k3", "lengths_1x_k3", f"adversary_{m}x_k3"),
        f"`lengths_{m}x_k3`: per seed, the lower of the stack-set (W = ceil(n/3)) and spread-set "
        f"(W = ceil(n/6)) accuracies at {m}x N (lengths {m // 2 * 48 + 2}-{m * 48}, N = 48) of "
        f"the held-out best Transformer configuration of the study, chosen by that measure "
        f"(every seed; trained on hard negatives only, lengths 4-48, validated on hard "
        f"negatives only). `lengths_1x_k3`: the same configuration and seeds at lengths 30-48. "
        f"`adversary_{m}x_k3`: the strongest stack-free rule's lower accuracy over the two sets "
        f"at {m}x N, the higher of its two fits: on the models' own training strings, and on "
        f"each test distribution itself (`adversary.attack_regime`).",
        "beyond below 0.90 while within is within [0.95, 1]", "beyond within [0.95, 1]",
        lambda e, m=m: _beyond(e, m), run="beyond-lengths",
        labels=(*LABELS, NOT_TESTABLE),
        not_testable_if="the adversary reaches 0.90 on both sets, or within's interval reaches "
                        "below 0.95 (the models did not learn within their lengths)")


def _attention(e: Mapping[str, Evidence], k: int) -> str:
    if e[f"learned_share_k{k}"].mean == 0:
        return NOT_TESTABLE  # no model of the language learned: nothing to explain
    return _bars(e[f"partner_attention_k{k}"], lambda lo, hi: lo >= 0.5,
                 lambda lo, hi: hi < 0.25)


def _attention_rule(k: int) -> Rule:
    return Rule(
        f"attention_k{k}", f"Attention patterns align with the bracket structure (Dyck-{k}).",
        (f"partner_attention_k{k}", f"learned_share_k{k}", f"uniform_partner_k{k}"),
        f"`partner_attention_k{k}`: attention the best head (held out) puts on a closer's "
        f"partner, at closers where neither the previous symbol nor the most recent opener of "
        f"the same type is the partner (for Dyck-1 the two coincide: the nearest opener is the "
        f"partner exactly when it is the previous symbol), over the Dyck-{k} models that learned "
        f"(hard-test accuracy >= 0.95); where none did, over every Dyck-{k} model, shown and not "
        f"judged. `learned_share_k{k}`: the share of the Dyck-{k} models that learned. "
        f"`uniform_partner_k{k}`: what a head attending uniformly to the visible keys puts on "
        f"the partner at the same closers (the baseline that differs from both heuristics).",
        "interval within [0.5, 1]", "interval below 0.25", lambda e, k=k: _attention(e, k),
        run="explainability", labels=(*LABELS, NOT_TESTABLE),
        not_testable_if=f"no Dyck-{k} model learned (issue 64: the pooled rule kept Dyck-1's "
                        f"models only)")


def _bidirectional(k: int) -> Rule:
    return Rule(
        f"bidirectional_k{k}",
        f"Bidirectional masking gives perfect accuracy on Dyck-{k} (experiment {k}).",
        (f"bidirectional_k{k}",),
        f"`bidirectional_k{k}`: hard-test accuracy of the thesis' bidirectional model (no "
        f"positional encoding, [start] readout) trained on sound data, every seed. Such a model "
        f"is blind to order: the best it can reach is the order-blind ceiling of the test set "
        f"(`order_blind_k{k}`, shown).",
        "interval within [0.99, 1]", "interval below 0.90",
        lambda e: _bars(e[f"bidirectional_k{k}"], lambda lo, hi: lo >= 0.99,
                        lambda lo, hi: hi < 0.9),
        run=f"dyck{k}", shows=(f"order_blind_k{k}",))


def _causal_rule(k: int) -> Rule:
    return Rule(
        f"causal_k{k}",
        f"Causal masking cannot be trained on Dyck-{k}: about 50% "
        f"({'experiment 2' if k == 1 else 'experiments 4 and 5'}).",
        (f"causal_k{k}", f"counter_floor_k{k}"),
        f"`causal_k{k}`: hard-test accuracy of the held-out best causal configuration of the "
        f"grid with an [end] or mean readout (trainable: above chance); `counter_floor_k{k}`: "
        f"the same test strings scored by counters without a stack (`counter`, per type; under "
        f"k = 1, where the running count is the stack, the order-blind `counts` rule). "
        f"`causal_stack_k{k}` (shown): the same on the stack set (solved: within [0.95, 1]).",
        f"interval below {CHANCE} (chance)",
        f"interval above {CHANCE} and above the counter floor's mean (it trains at least as far "
        f"as counting)",
        lambda e: _causal(e, k), run="ablation-grid", shows=(f"causal_stack_k{k}",))


def _layers_rule(k: int) -> Rule:
    return Rule(
        f"layers_k{k}", f"Two layers are needed (Dyck-{k}).",
        (f"one_layer_k{k}", f"two_layers_k{k}", f"shortcut_layers_k{k}"),
        f"`one_layer_k{k}`, `two_layers_k{k}`: held-out accuracy, on the grid's stack test set, "
        f"of the best 1-layer and the best 2-layer configuration of the grid. "
        f"`shortcut_layers_k{k}`: the strongest stack-free rule (the old shortcuts and the "
        f"adversary's), the higher of two fits: on the chosen 2-layer seeds' training strings, "
        f"scored on their stack test strings and averaged over those seeds; and on the stack "
        f"test distribution itself (the Dyck chapter's adversary table, pooled).",
        "1 layer's interval below 0.99 and 2 layers' within [0.99, 1]",
        "1 layer's interval within [0.99, 1]", lambda e: _layers(e, k), run="ablation-grid",
        labels=(*LABELS, NOT_TESTABLE),
        not_testable_if="both depths' intervals lie below the strongest stack-free rule (issue "
                        "64: a depth that no rule without a stack is beaten by says nothing "
                        "about depth)")


def _lengths_rule(k: int) -> Rule:
    return Rule(
        f"lengths_k{k}",
        f"Models generalise only to lengths seen in training (experiment 6; Dyck-{k}).",
        (f"beyond_lengths_k{k}", f"within_lengths_k{k}"),
        f"`beyond_lengths_k{k}`, `within_lengths_k{k}`: hard-test accuracy of the length "
        f"study's best configuration (held out, chosen by its accuracy beyond) beyond and within "
        f"the training lengths. `stack_lengths_k{k}` (shown): the same configuration on the "
        f"study's stack set (long-range negatives, all of them longer than any training string).",
        "beyond below 0.90 while within is within [0.95, 1]", "beyond within [0.95, 1]",
        lambda e: _lengths(e, k), run="generalisation", shows=(f"stack_lengths_k{k}",))


RULES: tuple[Rule, ...] = (
    _bidirectional(1), _bidirectional(3), _causal_rule(1), _causal_rule(3),
    _layers_rule(1), _layers_rule(3), _lengths_rule(1), _lengths_rule(3),
    _attention_rule(1), _attention_rule(3),
    Rule("preview", "The [end] token's attention to itself previews the decision.",
         ("preview_auc",),
         "`preview_auc`: ROC AUC of the [end] token's self-attention in the last layer as a "
         "score for membership, on the hard test set; the models that learned, pooled.",
         "interval within [0.9, 1]", "interval below 0.6",
         lambda e: _bars(e["preview_auc"], lambda lo, hi: lo >= 0.9, lambda lo, hi: hi < 0.6),
         run="explainability"),
    Rule("learnable_k3", "A small Transformer can learn to recognise Dyck-3 (the book's "
         "question, not the thesis' claim: a registered recipe, issue 52), trained on no "
         "negative of the test set's kind (issue 64).",
         ("recipe_best_k3", "test_kind_k3", "shortcut_k3"),
         "`recipe_best_k3`: stack-test accuracy of the held-out best of the learning study's "
         "registered Transformer recipes that train on no stack negatives (every seed); where "
         "every recipe does (the grid's mix holds a quarter of them, built as the test set's), "
         "the held-out best of them all. `test_kind_k3`: the share of the chosen seeds whose "
         "recipe trains on stack negatives. `shortcut_k3`: the strongest stack-free rule, the "
         "higher of two fits: on the chosen seeds' own training strings, scored on their stack "
         "test strings and averaged over those seeds; and on the stack test distribution "
         "itself (the Dyck chapter's adversary table, pooled).",
         "interval within [0.99, 1]", "interval below 0.90", _learnable, run="learning-dyck3",
         labels=(*LABELS, NOT_TESTABLE),
         not_testable_if="the chosen recipe trains on negatives of the test set's kind (it is "
                         "reported on this row, not judged: issue 64), or the interval's lower "
                         "end does not clear the strongest stack-free rule"),
    _beyond_rule(2), _beyond_rule(4),
    Rule("static_head", "The final layer's weights barely move during training.",
         ("head_reset_drop",),
         "`head_reset_drop`: hard-test accuracy lost when the trained classifier head is put "
         "back to its initial weights (the rest of the model kept); the models that learned, "
         "pooled.",
         "interval below 0.02", "interval within [0.10, 1]",
         lambda e: _bars(e["head_reset_drop"], lambda lo, hi: hi < 0.02,
                         lambda lo, hi: lo >= 0.10), run="explainability"),
)
RULE_OF = {r.claim: r for r in RULES}


@dataclass(frozen=True)
class Verdict:
    """A rule applied to its evidence: the label, the evidence judged and the evidence shown."""

    rule: Rule
    label: str
    evidence: tuple[Evidence, ...]
    shown: tuple[Evidence, ...] = ()
    note: str = ""  # why a claim is not judged (its recipe), else ""


def verdicts(evidence: Mapping[str, Evidence],
             unregistered: Mapping[str, str] | None = None) -> list[Verdict]:
    """Judge every claim whose evidence is present.

    Args:
        evidence: ``{name: Evidence}``; names are those the rules read (see ``RULES``).
        unregistered: ``{claim: why}`` for claims whose run's recipe is not the registered one
            (``registry.check``): those get the label :data:`UNREGISTERED`, never a verdict.

    Returns:
        One :class:`Verdict` per rule whose evidence is all present, in ``RULES`` order.
    """
    out = []
    for rule in RULES:
        if all(name in evidence and evidence[name].values for name in rule.needs):
            why = (unregistered or {}).get(rule.claim, "")
            label = UNREGISTERED if why else rule.judge(evidence)
            out.append(Verdict(rule, label, tuple(evidence[name] for name in rule.needs),
                               tuple(evidence[n] for n in rule.shows if n in evidence), why))
    return out


def sensitivity(rule: Rule, evidence: Mapping[str, Evidence],
                step: float = 0.001) -> tuple[str, int, float, str] | None:
    """The smallest change of one seed's value that changes the rule's label.

    Every value of every piece of evidence the rule reads is moved, alone, over its bounds on a
    grid of ``step``; the move nearest the seed's own value that gives another label wins.

    Returns:
        ``(evidence name, seed index, value it would need, label it would give)``, or None if no
        single seed can change the label.
    """
    base = rule.judge(evidence)
    best: tuple[float, tuple[str, int, float, str]] | None = None
    for name in rule.needs:
        e = evidence[name]
        if e.reference:  # a reference number, not a seed: no seed of it can move
            continue
        lo_b, hi_b = e.bounds
        grid = np.round(np.arange(lo_b, hi_b + step / 2, step), 10)
        for i, v in enumerate(e.values):
            order = grid[np.argsort(np.abs(grid - v), kind="stable")]
            for start in range(0, order.size, 64):  # nearest moves first, 64 at a time
                chunk = order[start:start + 64]
                if best is not None and abs(chunk[0] - v) >= best[0]:
                    break
                rows = np.tile(np.asarray(e.values, dtype=np.float64), (chunk.size, 1))
                rows[:, i] = chunk
                low, high = intervals(rows, bounds=e.bounds)
                for j, x in enumerate(chunk):
                    values = tuple(rows[j].tolist())
                    _INTERVALS[values, e.bounds] = (float(low[j]), float(high[j]))
                    label = rule.judge({**evidence, name: replace(e, values=values)})
                    if label != base:
                        if best is None or abs(x - v) < best[0]:
                            best = (abs(x - v), (name, i, float(x), label))
                        break
                else:
                    continue
                break
    return best[1] if best else None


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


# ------------------------------------------------------------------------------ evidence
def _cell(record: Any) -> tuple[int, int, str, str, str]:
    m, d = record.config["model"], record.config["data"]
    return d["k"], m["n_layers"], m["mask"], m["pos_encoding"], m["readout"]


def _name(record: Any) -> str:
    k, layers, mask, pe, readout = _cell(record)
    return f"k{k}-L{layers}-{mask}-{pe}-{readout}"


def _best(name: str, records: Sequence[Any], keep: Callable[[tuple], bool], test: str,
          floor: str | None = None) -> tuple[Evidence, Evidence | None] | None:
    """Held-out best configuration among the records whose cell passes ``keep``, on ``test``;
    with ``floor``, that baseline's accuracy on the chosen records' test sets too."""
    table: dict[str, dict[int, float]] = {}
    by_key: dict[tuple[str, int], Any] = {}
    for r in records:
        if keep(_cell(r)) and test in r.scores:
            seed = int(r.config["seed"])
            table.setdefault(_name(r), {})[seed] = r.accuracy(test)
            by_key[_name(r), seed] = r
    values, chosen = held_out_best(table)
    if not values:
        return None
    seeds = sorted(set.intersection(*(set(v) for v in table.values())))
    picked = [by_key[c, s] for c, s in zip(chosen, seeds)]
    e = Evidence(name, tuple(values), int(np.mean([r.scores[test].n for r in picked])), test,
                 tuple(chosen), n_failed=sum(r.status != "ok" for r in picked))
    if floor is None:
        return e, None
    floors = [r.baselines.get(test, {}).get(floor) for r in picked]
    if any(f is None for f in floors):
        return e, None
    return e, Evidence(f"{floor} floor k{_cell(picked[0])[0]}",
                       tuple(f.accuracy for f in floors), e.n_strings, test)


def _shortcut(name: str, records: Sequence[Any], k: int, chosen: Evidence | None,
              test: str, distribution: float | None = None) -> Evidence | None:
    """The strongest stack-free rule on the chosen configuration's seeds (``chosen.chosen``,
    the held-out choice per seed): per seed, the best of the rules fitted on that record's
    training strings and scored on its ``test`` strings; one reference value, their mean, or
    ``distribution`` (the strongest rule fitted on the test distribution itself) if higher."""
    if chosen is None or not chosen.chosen:
        return None
    seeds = sorted({int(r.config["seed"]) for r in records if _cell(r)[0] == k})
    by_key = {(_name(r), int(r.config["seed"])): r for r in records if _cell(r)[0] == k}
    best = []
    for config, seed in zip(chosen.chosen, seeds):
        r = by_key.get((config, seed))
        rules = r.baselines.get(test, {}) if r is not None else {}
        if not rules:
            return None
        best.append(max(s.accuracy for s in rules.values()))
    value = max(float(np.mean(best)), distribution if distribution is not None else -1.0)
    return Evidence(name, (value,), chosen.n_strings, test, reference=True)


def trains_on(record: Any, regime: str) -> bool:
    """Whether ``record``'s training negatives include ``regime``'s (the grid's ``mix`` holds
    every one of ``protocol.REGIMES``)."""
    negatives = record.config["data"].get("train_negatives", "mix")
    return negatives == regime or (negatives == "mix" and regime in REGIMES)


def _recipe_best(records: Sequence[Any], distribution: float | None = None
                 ) -> tuple[Evidence | None, Evidence | None, Evidence | None]:
    """The held-out best recipe's stack-set accuracy, seed by seed, among the recipes that
    train on no stack negatives (all of them where none does not); the share of the chosen
    seeds whose recipe does; and the strongest stack-free rule, the higher of its fit on the
    chosen seeds' own strings (their mean) and ``distribution`` (its fit on the test
    distribution itself)."""
    unseen = [r for r in records if not trains_on(r, "stack")]
    table: dict[str, dict[int, float]] = {}
    by_key = {}
    for r in unseen or records:
        table.setdefault(r.label, {})[int(r.config["seed"])] = r.accuracy("stack")
        by_key[r.label, int(r.config["seed"])] = r
    values, chosen = held_out_best(table)
    if not values:
        return None, None, None
    seeds = sorted(set.intersection(*(set(v) for v in table.values())))
    picked = [by_key[c, s] for c, s in zip(chosen, seeds)]
    n = int(np.mean([r.scores["stack"].n for r in picked]))
    best = Evidence("best recipe k3", tuple(values), n, "stack", tuple(chosen),
                    n_failed=sum(r.status != "ok" for r in picked))
    seen = Evidence("chosen seeds trained on the test's kind k3",
                    (float(np.mean([trains_on(r, "stack") for r in picked])),), n, "stack",
                    reference=True)
    rules = [max((s.accuracy for s in r.baselines.get("stack", {}).values()), default=None)
             for r in picked]
    if any(v is None for v in rules):
        return best, seen, None
    value = max(float(np.mean(rules)), distribution if distribution is not None else -1.0)
    return best, seen, Evidence("strongest stack-free rule k3", (value,), n, "stack",
                                reference=True)


def _length_pair(k: int, group: Sequence[Any]) -> tuple[Evidence, ...] | None:
    """Accuracy beyond and within the training lengths of the held-out best configuration
    (chosen by its accuracy beyond), seed by seed; and its stack-set accuracy where it has one."""
    beyond: dict[str, dict[int, float]] = {}
    within: dict[str, dict[int, float]] = {}
    stack: dict[tuple[str, int], float] = {}
    failed: dict[tuple[str, int], bool] = {}
    for r in group:
        if "stack" in r.scores:
            stack[r.label, int(r.config["seed"])] = r.accuracy("stack")
        name, seed, score = r.label, int(r.config["seed"]), r.scores["hard"]
        top = int(r.config["data"]["max_length"])
        beyond.setdefault(name, {})[seed] = score.accuracy_between(top + 1, 10**9)
        within.setdefault(name, {})[seed] = score.accuracy_between(0, top)
        failed[name, seed] = r.status != "ok"
    values, chosen = held_out_best(beyond)
    if not values:
        return None
    seeds = sorted(set.intersection(*(set(v) for v in beyond.values())))
    inside = tuple(within[c][s] for c, s in zip(chosen, seeds))
    n_failed = sum(failed[c, s] for c, s in zip(chosen, seeds))
    out = (Evidence(f"beyond lengths k{k}", tuple(values), 0, "hard", tuple(chosen),
                    n_failed=n_failed),
           Evidence(f"within lengths k{k}", inside, 0, "hard", tuple(chosen), n_failed=n_failed))
    if all((c, s) in stack for c, s in zip(chosen, seeds)):
        out += (Evidence(f"stack set k{k}", tuple(stack[c, s] for c, s in zip(chosen, seeds)),
                         0, "stack", tuple(chosen), n_failed=n_failed),)
    return out


#: the long-range sets whose weaker accuracy is the beyond-lengths rules' measure
BEYOND_SETS = ("stack", "spread")


def beyond_table(groups: Mapping[str, Sequence[Any]], lo: int, hi: int
                 ) -> dict[str, dict[int, float]]:
    """``{label: {seed: accuracy}}``: per record, the lower of its :data:`BEYOND_SETS` scores
    (those it holds) over its test strings of lengths ``[lo, hi]``."""
    return {label: {int(r.seed): min(r.scores[s].accuracy_between(lo, hi)
                                     for s in BEYOND_SETS if s in r.scores)
                    for r in group}
            for label, group in groups.items()}


def _beyond_evidence(records: Sequence[Any], adversary: Mapping[str, float]
            ) -> dict[str, Evidence]:
    """The beyond-lengths rules' evidence from the study's Dyck-3 Transformer records (every
    seed) and the adversary's level at each multiple (``{"2×": accuracy}``)."""
    groups: dict[str, list[Any]] = {}
    for r in records:
        if r.config["model"].get("kind") == "classifier" and int(r.config["data"]["k"]) == 3:
            groups.setdefault(r.label, []).append(r)
    if not groups:
        return {}
    data = next(iter(groups.values()))[0].config["data"]
    n, first = int(data["max_length"]), int(data.get("test_min_length") or 0)
    out = {}
    within = beyond_table(groups, first, n)
    for m in (2, 4):
        values, chosen = held_out_best(beyond_table(groups, (m // 2) * n + 2, m * n))
        if not values:
            continue
        seeds = sorted(set.intersection(*(set(v) for v in within.values())))
        out[f"lengths_{m}x_k3"] = Evidence(f"beyond {m}x k3", tuple(values), test="stack+spread",
                                           chosen=tuple(chosen))
        out.setdefault("lengths_1x_k3", Evidence(  # the 2x choice of each seed, within
            "within k3", tuple(within[c][s] for c, s in zip(chosen, seeds)),
            test="stack+spread", chosen=tuple(chosen)))
        if f"{m}×" in adversary and not math.isnan(adversary[f"{m}×"]):
            out[f"adversary_{m}x_k3"] = Evidence(f"adversary {m}x k3",
                                                 (float(adversary[f"{m}×"]),), reference=True)
    return out


def gather(experiments: Sequence[Any] = (), grid: Sequence[Any] = (),
           lengths: Sequence[Any] = (), explain: Mapping[str, Any] | None = None,
           test: str = "stack", ceilings: Mapping[int, float] | None = None,
           learning: Sequence[Any] = (), beyond: Sequence[Any] = (),
           beyond_adversary: Mapping[str, float] | None = None,
           oracle: Mapping[int, float] | None = None) -> dict[str, Evidence]:
    """The evidence of every rule, from the records of the runs that measured it.

    ``test`` names the grid's test set the layers claims read: ``stack``, the verdict-bearing
    set, or ``hard`` (for the comparison the chapter prints). The causal claims read the hard
    set (is the model trainable?) and show the ``stack`` set (is it solved?). The thesis'
    experiments and the length study have no ``stack`` set within their lengths and read
    ``hard``. Every seed counts, failed ones included.

    Args:
        experiments: records of the sound reruns of the thesis' experiments (labels
            ``exp. 1: bidirectional ...`` and ``exp. 3: bidirectional ...``).
        grid: records of the ablation grid.
        lengths: records of the length study (labels ``Dyck-<k> <configuration>``; its
            recurrent references are not Transformers and are left out).
        explain: the explainability page's ``evidence.json`` (per-model measurements of the
            models that learned: ``preview_auc``, ``head_reset_drop``; and ``by_k``, each
            language's, for the attention claims).
        ceilings: ``{k: order-blind ceiling of the sound reruns' hard test set}`` (shown).
        learning: records of the Dyck-3 learning study (labels: the recipes; its recurrent
            references are left out). It reads its ``stack`` set whatever ``test`` says.
        oracle: ``{k: the strongest stack-free rule's accuracy on the grid's stack test
            distribution, fitted on it}`` (the Dyck chapter's ``oracle.json``, pooled): the
            layers claims' shortcut is the higher of it and the rules fitted on training strings.
        beyond: records of the study beyond the training lengths (its Dyck-3 Transformers;
            the references and the Dyck-1 control are left out), and ``beyond_adversary`` its
            adversary's level per multiple (``{"2×": accuracy}``, the study's
            ``adversary.json``). It reads its stack and spread sets whatever ``test`` says.

    Returns:
        ``{name: Evidence}`` for every piece of evidence the records support.
    """
    out: dict[str, Evidence | None] = {}
    for k, e in ((1, 1), (3, 3)):
        group = [r for r in experiments if r.label.startswith(f"exp. {e}: bidirectional")]
        if group:
            out[f"bidirectional_k{k}"] = Evidence(
                f"bidirectional k{k}", tuple(r.accuracy("hard") for r in group),
                int(np.mean([r.scores["hard"].n for r in group])), "hard",
                n_failed=sum(r.status != "ok" for r in group))
        if ceilings and k in ceilings:
            out[f"order_blind_k{k}"] = Evidence(f"order-blind ceiling k{k}", (ceilings[k],),
                                                test="hard", reference=True)
    for k in sorted({_cell(r)[0] for r in grid}):
        causal = lambda c, k=k: c[0] == k and c[2] == "causal" and c[4] != "start"
        found = _best(f"causal k{k}", grid, causal, "hard", "counter" if k > 1 else "counts")
        if found:
            out[f"causal_k{k}"], out[f"counter_floor_k{k}"] = found
        stack = _best(f"causal on stack k{k}", grid, causal, "stack")
        out[f"causal_stack_k{k}"] = stack[0] if stack else None
        for layers, name in ((1, "one_layer"), (2, "two_layers")):
            found = _best(f"{name.replace('_', ' ')} k{k}", grid,
                          lambda c, k=k, n=layers: c[0] == k and c[1] == n, test)
            out[f"{name}_k{k}"] = found[0] if found else None
        out[f"shortcut_layers_k{k}"] = _shortcut(f"strongest stack-free rule k{k}", grid, k,
                                                 out.get(f"two_layers_k{k}"), test,
                                                 (oracle or {}).get(k) if test == "stack" else None)
    for k in sorted({int(r.config["data"]["k"]) for r in lengths}):
        found = _length_pair(k, [r for r in lengths if r.label.startswith(f"Dyck-{k} ")
                                 and r.config["model"].get("kind") == "classifier"])
        if found:
            out[f"beyond_lengths_k{k}"], out[f"within_lengths_k{k}"] = found[:2]
            out[f"stack_lengths_k{k}"] = found[2] if len(found) > 2 else None
    recipes = [r for r in learning if r.config["model"].get("kind") == "classifier"
               and "stack" in r.scores]
    if recipes:
        out["recipe_best_k3"], out["test_kind_k3"], out["shortcut_k3"] = _recipe_best(
            recipes, (oracle or {}).get(3))
    out.update({name: e for name, e in _beyond_evidence(beyond, beyond_adversary or {}).items()
                if not any(math.isnan(v) for v in e.values)})  # a bin without such strings
    for k, group in sorted((explain or {}).get("by_k", {}).items()):
        chosen = group if group.get("learned") else group.get("all", {})
        if chosen.get("partner_attention"):
            out[f"partner_attention_k{k}"] = Evidence(
                f"partner attention k{k}", tuple(float(v) for v in chosen["partner_attention"]))
            out[f"learned_share_k{k}"] = Evidence(
                f"models that learned k{k}", (group["learned"] / group["models"],),
                reference=True)
            out[f"uniform_partner_k{k}"] = Evidence(
                f"uniform attention on the partner k{k}",
                (float(np.mean(chosen["uniform_hard"])),), reference=True)
    for name in ("preview_auc", "head_reset_drop"):
        if explain and explain.get(name):
            out[name] = Evidence(name.replace("_", " "), tuple(float(v) for v in explain[name]),
                                 bounds=MEASURE_BOUNDS.get(name, (0.0, 1.0)))
    return {k: v for k, v in out.items() if v is not None}

