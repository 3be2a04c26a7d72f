"""Tests for dyckbook.verdicts: every rule's three labels, monotonicity, the bootstrap interval,
the held-out choice of the best configuration."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dyckbook.verdicts import LABELS, RULES, Evidence, bootstrap, held_out_best, verdicts

# +1: higher values support the claim; -1: lower values do
DIRECTION = {"bidirectional": 1, "causal_best": -1, "one_layer_k1": -1, "two_layers_k1": 1,
             "one_layer_k3": -1, "two_layers_k3": 1, "beyond_lengths": -1, "within_lengths": 1,
             "partner_attention": 1, "preview_auc": 1, "head_reset_drop": -1}
RANK = {"refuted": 0, "qualified": 1, "reproduced": 2}

# per rule and label: evidence values (5 seeds each) that give that label
CASES = {
    "bidirectional": {"reproduced": {"bidirectional": 1.0},
                      "qualified": {"bidirectional": 0.95},
                      "refuted": {"bidirectional": 0.85}},
    "causal": {"reproduced": {"causal_best": 0.5}, "qualified": {"causal_best": 0.8},
               "refuted": {"causal_best": 0.97}},
    "layers_k1": {"reproduced": {"one_layer_k1": 0.9, "two_layers_k1": 1.0},
                  "qualified": {"one_layer_k1": 0.9, "two_layers_k1": 0.95},
                  "refuted": {"one_layer_k1": 0.995, "two_layers_k1": 1.0}},
    "layers_k3": {"reproduced": {"one_layer_k3": 0.7, "two_layers_k3": 1.0},
                  "qualified": {"one_layer_k3": 0.7, "two_layers_k3": 0.7},
                  "refuted": {"one_layer_k3": 1.0, "two_layers_k3": 0.5}},
    "lengths": {"reproduced": {"beyond_lengths": 0.6, "within_lengths": 1.0},
                "qualified": {"beyond_lengths": 0.6, "within_lengths": 0.9},
                "refuted": {"beyond_lengths": 0.96, "within_lengths": 1.0}},
    "attention": {"reproduced": {"partner_attention": 0.6},
                  "qualified": {"partner_attention": 0.3},
                  "refuted": {"partner_attention": 0.2}},
    "preview": {"reproduced": {"preview_auc": 0.95}, "qualified": {"preview_auc": 0.7},
                "refuted": {"preview_auc": 0.55}},
    "static_head": {"reproduced": {"head_reset_drop": 0.01},
                    "qualified": {"head_reset_drop": 0.05},
                    "refuted": {"head_reset_drop": 0.2}},
}


def _evidence(means, spread=0.0):
    """Five seeds around each mean (``spread`` apart), clipped to [0, 1]."""
    offsets = spread * np.array([-2, -1, 0, 1, 2])
    return {name: Evidence(name, tuple(np.clip(m + offsets, 0, 1).tolist()))
            for name, m in means.items()}


def test_every_rule_is_covered_and_reads_known_evidence():
    assert set(CASES) == {r.claim for r in RULES}
    assert {name for r in RULES for name in r.needs} == set(DIRECTION)
    assert LABELS == ("reproduced", "qualified", "refuted")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.claim)
@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("spread", [0.0, 0.002])
def test_each_rule_gives_each_label(rule, label, spread):
    evidence = _evidence(CASES[rule.claim][label], spread)
    assert rule.judge(evidence) == label
    (verdict,) = verdicts(evidence)
    assert verdict.rule is rule and verdict.label == label
    assert [e.name for e in verdict.evidence] == list(rule.needs)


def test_values_exactly_at_a_bar_count_as_clearing_it():
    # three seeds at 0.99: the bootstrap interval must not round below the bar
    rule = RULES[0]
    assert rule.judge({"bidirectional": Evidence("bidirectional", (0.99,) * 3)}) == "reproduced"
    for n in range(1, 12):
        for value in (0.99, 0.95, 0.9, 0.6, 0.5, 0.25, 0.1, 0.02):
            assert bootstrap([value] * n) == (value, value)


values_strategy = st.lists(st.floats(0, 1), min_size=1, max_size=6)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.claim)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_labels_move_monotonically_with_the_evidence(rule, data):
    base = {name: data.draw(values_strategy, label=name) for name in rule.needs}
    raised_name = data.draw(st.sampled_from(rule.needs), label="raised")
    steps = data.draw(st.lists(st.floats(0, 1), min_size=len(base[raised_name]),
                               max_size=len(base[raised_name])), label="steps")
    raised = dict(base)
    raised[raised_name] = [min(1.0, v + d) for v, d in zip(base[raised_name], steps)]

    def label(values):
        return RANK[rule.judge({n: Evidence(n, tuple(v)) for n, v in values.items()})]

    before, after = label(base), label(raised)
    if DIRECTION[raised_name] > 0:
        assert after >= before
    else:
        assert after <= before
    if len(rule.needs) == 1:  # raising every value of a one-evidence rule
        everything = {n: [min(1.0, v + 0.5) for v in vs] for n, vs in base.items()}
        assert (label(everything) - before) * DIRECTION[rule.needs[0]] >= 0


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_bootstrap_within_the_values_and_deterministic(values):
    lo, hi = bootstrap(values)
    assert min(values) <= lo <= hi <= max(values)
    assert bootstrap(values) == (lo, hi)
    narrow = bootstrap(values, level=0.5)
    assert lo <= narrow[0] <= narrow[1] <= hi


def test_bootstrap_edges():
    assert all(math.isnan(v) for v in bootstrap([]))
    assert bootstrap([0.3]) == (0.3, 0.3)
    values = [0.1, 0.25, 0.4, 0.8, 0.95, 0.33]
    assert bootstrap(values, seed=1) != bootstrap(values, seed=2)
    lo, hi = bootstrap([0.0, 1.0] * 10)
    assert 0.25 < lo < 0.5 < hi < 0.75
    with pytest.raises(ValueError, match="must not hold NaN"):
        bootstrap([0.5, math.nan])
    e = Evidence("x", (0.2, 0.4), n_strings=10)
    assert (e.n_seeds, e.mean, e.interval) == (2, pytest.approx(0.3), bootstrap([0.2, 0.4]))
    assert math.isnan(Evidence("x", ()).mean)


def _brute_force(table):
    seeds = sorted(set.intersection(*(set(v) for v in table.values())))
    values, chosen = [], []
    for seed in seeds:
        best, best_mean = None, -math.inf
        for name in sorted(table):
            rest = [table[name][s] for s in seeds if s != seed]
            mean = sum(rest) / len(rest) if rest else -math.inf
            if best is None or mean > best_mean:
                best, best_mean = name, mean
        values.append(table[best][seed])
        chosen.append(best)
    return values, chosen


tables = st.dictionaries(
    st.sampled_from("abcde"),
    st.dictionaries(st.integers(0, 6), st.sampled_from([0.0, 0.25, 0.5, 0.75, 0.9, 1.0]),
                    min_size=1, max_size=6),
    min_size=1, max_size=5)


@settings(max_examples=100, deadline=None)
@given(table=tables)
def test_held_out_best_equals_brute_force_leave_one_out(table):
    values, chosen = held_out_best(table)
    expected_values, expected_chosen = _brute_force(table)
    assert chosen == expected_chosen
    assert values == pytest.approx(expected_values)


def test_held_out_best_never_uses_the_scored_seed():
    # config "a" is best on average only because of seed 0; seed 0 is scored with "b"
    table = {"a": {0: 1.0, 1: 0.1, 2: 0.1}, "b": {0: 0.0, 1: 0.5, 2: 0.5}}
    values, chosen = held_out_best(table)
    assert chosen == ["b", "a", "a"] and values == [0.0, 0.1, 0.1]
    assert held_out_best({}) == ([], [])


def test_verdicts_skip_rules_whose_evidence_is_missing():
    evidence = _evidence({"bidirectional": 1.0, "one_layer_k1": 0.5, "causal_best": 0.5})
    evidence["preview_auc"] = Evidence("preview_auc", ())
    assert [v.rule.claim for v in verdicts(evidence)] == ["bidirectional", "causal"]
    everything = {name: e for case in CASES.values() for name, e in
                  _evidence(case["qualified"]).items()}
    assert [v.rule.claim for v in verdicts(everything)] == [r.claim for r in RULES]
    assert verdicts({}) == []


def _grid_record(k, layers, seed, hard, stack):
    from dyckbook.evaluate import Score
    from dyckbook.grid import Cell, GridSpec
    from dyckbook.run import RunRecord

    config = GridSpec().config(Cell(k, layers, "causal", "learned", "end"), seed).to_dict()
    scores = {name: Score(100, round(100 * acc), {}, {}, {})
              for name, acc in (("hard", hard), ("stack", stack))}
    return RunRecord(config=config, status="ok", failure=None, train_accuracy=1.0,
                     margin_std=1.0, scores=scores, baselines={}, baseline_train={}, data={},
                     steps=1, stopped_at=None, seconds=0.0, n_params=1, history=[])


def test_gather_reads_the_grid_on_the_named_test_set():
    from dyckbook.verdicts import gather

    grid = [_grid_record(k, layers, s, hard=1.0, stack=0.6 + 0.01 * s)
            for k in (1, 3) for layers in (1, 2) for s in range(3)]
    on_stack, on_hard = gather(grid=grid, test="stack"), gather(grid=grid)
    assert on_hard["causal_best"].values == (1.0, 1.0, 1.0)
    assert on_stack["causal_best"].values == (0.6, 0.61, 0.62)
    assert on_stack["two_layers_k3"].n_strings == 100
    assert [v.label for v in verdicts(on_hard) if v.rule.claim == "causal"] == ["refuted"]
    assert [v.label for v in verdicts(on_stack) if v.rule.claim == "causal"] == ["qualified"]
    assert gather(grid=grid, test="random") == {}  # no record has that set: no evidence


def test_universal_claims_read_the_language_that_speaks_against_them():
    """"Causal masking cannot be trained" is refuted by one language where a causal model
    trains; a language no mask learns is no support for it (the higher of Dyck-1 and Dyck-3)."""
    from dyckbook.verdicts import gather

    grid = [_grid_record(k, layers, s, hard=1.0, stack=0.997 if k == 1 else 0.5)
            for k in (1, 3) for layers in (1, 2) for s in range(3)]
    evidence = gather(grid=grid, test="stack")
    assert evidence["causal_best"].name == "causal_best k1"
    assert [v.label for v in verdicts(evidence) if v.rule.claim == "causal"] == ["refuted"]
