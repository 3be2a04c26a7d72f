"""Tests for the study beyond the training lengths: its length bins, the adversary's level, the
verdict's evidence (held-out choice, the weaker long-range set), the mean readout's
per-position margins, and the study's configurations (what training and validation never see)."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from dyckbook.chapters import beyond_lengths as B
from dyckbook.claims.verdicts import NOT_TESTABLE, RULE_OF, beyond_table, gather
from dyckbook.experiment.evaluate import Score


def test_bins_are_the_multiples_of_n():
    assert B.bins(48, 30, [1, 2, 4]) == {"1×": (30, 48), "2×": (50, 96), "4×": (98, 192)}
    assert B.bins(16, 12, [2, 1]) == {"1×": (12, 16), "2×": (18, 32)}
    with pytest.raises(ValueError, match="multiples"):
        B.bins(48, 30, [0, 1])


def test_strongest_is_the_rule_whose_weaker_set_is_best():
    scores = {"stack": {"a": 0.9, "b": 0.7, "c": 1.0}, "spread": {"a": 0.6, "b": 0.65}}
    assert B.strongest(scores) == ("b", 0.65)  # c is not scored on every set
    assert B.strongest({}) == ("", B.strongest({})[1]) and math.isnan(B.strongest({})[1])


def _score(per_length):
    """A Score from {length: (n, correct)}."""
    n = sum(v[0] for v in per_length.values())
    return Score(n, sum(v[1] for v in per_length.values()),
                 {L: list(v) for L, v in per_length.items()}, {}, {})


def _record(label, seed, within, beyond_2x, beyond_4x, spread_gap=0.0, k=3):
    def score(extra):
        return _score({40: (100, round(100 * within)), 80: (100, round(100 * (beyond_2x - extra))),
                       150: (100, round(100 * (beyond_4x - extra)))})
    return SimpleNamespace(label=label, seed=seed, status="ok",
                           config={"model": {"kind": "classifier"},
                                   "data": {"k": k, "max_length": 48, "test_min_length": 30}},
                           scores={"stack": score(0.0), "spread": score(spread_gap)})


def test_the_evidence_reads_the_weaker_set_of_the_held_out_best_configuration():
    records = [*(_record("Dyck-3 L2 rope", s, 1.0, 0.99, 0.97, spread_gap=0.02) for s in range(5)),
               *(_record("Dyck-3 L2 none", s, 1.0, 0.6, 0.5) for s in range(5)),
               *(_record("Dyck-1 L2 none", s, 1.0, 1.0, 1.0, k=1) for s in range(5))]
    table = beyond_table({"x": records[:5]}, 50, 96)
    assert table == {"x": {s: pytest.approx(0.97) for s in range(5)}}  # spread is the weaker
    evidence = gather(beyond=records, beyond_adversary={"2×": 0.6, "4×": 0.95})
    assert evidence["lengths_2x_k3"].values == pytest.approx((0.97,) * 5)
    assert set(evidence["lengths_2x_k3"].chosen) == {"Dyck-3 L2 rope"}  # Dyck-1 left out
    assert evidence["lengths_1x_k3"].values == pytest.approx((1.0,) * 5)
    assert RULE_OF["lengths_2x_k3"].judge(evidence) == "refuted"  # it generalises: claim 4 false
    assert RULE_OF["lengths_4x_k3"].judge(evidence) == NOT_TESTABLE  # a rule does as well
    weak = [r for r in records if r.label == "Dyck-3 L2 none"]
    assert RULE_OF["lengths_2x_k3"].judge(gather(beyond=weak, beyond_adversary={"2×": 0.6})) \
        == "reproduced"


def test_every_verdict_row_fills_the_same_columns():
    from dyckbook.claims.verdicts import verdicts

    records = [_record("Dyck-3 L2 none", s, 1.0, 0.9, 0.6) for s in range(5)]
    judged = [v for v in verdicts(gather(beyond=records, beyond_adversary={"2×": 0.5,
                                                                           "4×": 0.5}))
              if v.rule.run == "beyond-lengths"]
    rows = B.verdict_rows(judged)
    assert [r["lengths"] for r in rows] == ["2× N", "4× N"]
    assert all(list(r) == list(rows[0]) for r in rows)
    assert rows[1]["beyond k3"].startswith("60.0% [") and rows[0]["beyond k3"].startswith("90.0%")
    assert rows[1]["adversary k3"] == "50.0%"
    said = B.verdict_sentence(judged)
    assert said.startswith("The registered verdicts on the thesis' claim 4: at 2× N **")
    assert "; at 4× N **reproduced**, held-out best Dyck-3 L2 none" in said
    assert "adversary 50.0%" in said and "within 100.0%" in said
    assert B.verdict_sentence([]) == "No registered verdict was judged."


def test_a_bin_without_long_range_strings_gives_no_evidence():
    records = [_record("Dyck-3 L2 none", s, 1.0, 0.9, 0.9) for s in range(3)]
    for r in records:  # no string of 30-48
        for score in r.scores.values():
            del score.per_length[40]
    evidence = gather(beyond=records, beyond_adversary={"2×": 0.5})
    assert "lengths_1x_k3" not in evidence and "lengths_2x_k3" in evidence


def test_the_study_never_trains_or_validates_on_a_long_range_kind():
    study = B.study("objective:language_model n_train:200 max_steps:5", [3, 1], [2],
                    ["none", "rope"], [4], ["none"], [2], ["randomized"], 16, 12, [1, 2, 4],
                    ["hard", "stack", "spread", "deep"], 100, "stack,lstm")
    assert list(study.models) == ["Dyck-3 L2 none", "Dyck-3 L2 rope", "Dyck-3 L4 none",
                                  "Dyck-1 L2 randomized"]
    assert list(study.references) == ["Dyck-3 stack RNN", "Dyck-3 LSTM"]
    for label, c in {**study.models, **study.references}.items():
        assert c.data.train_negatives == "hard" and c.data.val_negatives == "hard", label
        assert (c.data.max_length, c.data.test_min_length, c.data.test_max_length) == \
            (16, 12, 64)
        assert c.model.n_ctx == 64
    assert "spread" not in study.models["Dyck-1 L2 randomized"].data.test_sets
    assert study.models["Dyck-3 L2 rope"].model.pos_encoding == "rope"
    assert study.models["Dyck-3 L2 rope"].model.readout == "mean"
    assert study.models["Dyck-3 L2 rope"].model.mask == "causal"


def test_a_mean_readout_is_the_average_of_its_positions_margins():
    import torch

    from dyckbook.interp import readout
    from dyckbook.nn.model import Classifier, ModelConfig

    torch.manual_seed(0)
    model = Classifier(ModelConfig(k=2, n_ctx=20, d_model=16, n_heads=2, d_mlp=32, n_layers=2,
                                   mask="causal", pos_encoding="rope", readout="mean"), [0])
    from dyckbook.nn.tokenizer import PAD

    tokens = torch.randint(3, 7, (5, 12))
    tokens[torch.arange(5) % 2 == 0, 8:] = PAD  # pads on some rows
    margins, real = readout.position_margins(model, tokens)
    model.eval()
    with torch.no_grad():
        logits = model(tokens).double()
    assert np.allclose((margins * real).sum(1) / real.sum(1),
                       (logits[:, 1] - logits[:, 0]).numpy(), atol=1e-4)
    assert (margins[~real] == 0).all()
    end = Classifier(ModelConfig(k=2, n_ctx=20, readout="end"), [0])
    with pytest.raises(ValueError, match="mean readout"):
        readout.position_margins(end, tokens)


def test_the_deep_set_is_attacked_on_its_own_distribution_when_its_depth_is_known():
    """The deep set's test-distribution adversary fits the rules on hard negatives of words of
    depth >= D (``DeepDyck``), from 2D on; without D it is left out, never attacked as the
    plain hard set."""
    spans = {"2×": (14, 20)}
    without = B.test_adversary(1, ["deep"], spans, 16, seed=0)
    assert without == {"2×": {}}
    found = B.test_adversary(1, ["hard", "deep"], spans, 16, seed=0, deep_depth=6)
    assert set(found["2×"]) == {"hard", "deep"} and found["2×"]["deep"]
    assert all(0.0 <= v <= 1.0 for v in found["2×"]["deep"].values())
    # no length in the bin reaches 2D: nothing to attack, the set is left out
    assert "deep" not in B.test_adversary(1, ["deep"], spans, 16, seed=0, deep_depth=11)["2×"]


def test_how_far_each_configuration_holds_is_counted_per_multiple_and_seed():
    """The landing page's sentence: per configuration and multiple, the seeds whose lower
    long-range accuracy reaches 0.95, from the records' own bins."""
    def rec(label, seed, by_length):
        scores = {s: SimpleNamespace(accuracy_between=lambda lo, hi, s=s: next(
            (a for L, a in by_length[s] if lo <= L <= hi), math.nan)) for s in by_length}
        return SimpleNamespace(label=label, scores=scores, seed=seed, config={
            "seed": seed, "model": {"kind": "classifier"},
            "data": {"max_length": 16, "test_min_length": 12, "test_max_length": 64}})

    records = [rec("Dyck-3 L2 none", s, {"stack": [(14, 1.0), (30, 0.97 - 0.1 * s), (60, 0.6)],
                                         "spread": [(14, 0.99), (30, 0.99), (60, 0.7)]})
               for s in range(3)]
    assert B.recorded_bins(records) == {"1×": (12, 16), "2×": (18, 32), "4×": (34, 64)}
    said = B.holds_sentence(records)
    assert said.startswith("seeds at 95% or more on both long-range sets at 1×, 2×, 4× N")
    assert "Dyck-3 L2 none 3/3, 1/3, 0/3" in said
    assert B.holds_sentence([]) == "not measured yet"
    assert B.holds_sentence(records, language=1) == "not measured yet"
    # the deep set is its own measure: these records have none
    assert B.holds_sentence(records, on="deep") == "not measured yet"
    deep = [rec("Dyck-3 L2 none", s, {"stack": [(14, 1.0)], "deep": [(14, 0.99), (30, 0.9),
                                                                      (60, 0.96 - 0.1 * s)]})
            for s in range(2)]
    said = B.holds_sentence(deep, on="deep")
    assert said.startswith("seeds at 95% or more on the deep set at 1×, 2×, 4× N")
    assert "Dyck-3 L2 none 2/2, 0/2, 1/2 (mean 99.0%, 90.0%, 91.0%)" in said
    with pytest.raises(ValueError, match="on must be one of"):
        B.holds_sentence(records, on="hard")


def test_a_multiple_without_long_range_strings_says_so_not_zero_seeds():
    def rec(seed):
        scores = {"stack": SimpleNamespace(accuracy_between=lambda lo, hi: 0.99 if hi > 16
                                           else math.nan)}
        return SimpleNamespace(label="Dyck-3 L2 none", scores=scores, seed=seed, config={
            "seed": seed, "model": {"kind": "classifier"},
            "data": {"max_length": 16, "test_min_length": 12, "test_max_length": 32}})

    said = B.holds_sentence([rec(0), rec(1)])
    assert "Dyck-3 L2 none —, 2/2 (mean —, 99.0%)" in said


def test_the_mechanism_sentence_tells_dilution_from_fading_evidence():
    """Dilution: the total evidence holds at 2× while its mean (the decision) falls; fading:
    the total itself falls below half; the hypotheses' verdicts are said per multiple."""
    def entry(label, role, m, total, mean, verdict="rejected"):
        return {"label": label, "role": role, "multiple": m, "seeds": 5,
                "evidence": {"total": total, "mean": mean, "negatives_right": 0.9,
                             "members_right": 0.99, "tokens": 40.0 if m == "1×" else 73.0},
                "verdicts": {"H5": "accepted", "H7": verdict}}

    found = [entry("Dyck-3 L2 alibi", "best", "1×", 10.0, 0.25),
             entry("Dyck-3 L2 alibi", "best", "2×", 9.0, 0.12, "accepted"),
             entry("Dyck-3 L2 rope", "worst", "1×", 10.0, 0.25),
             entry("Dyck-3 L2 rope", "worst", "2×", 3.0, 0.04),
             entry("Dyck-3 L2 none", "other", "1×", 10.0, 0.25),
             entry("Dyck-3 L2 none", "other", "2×", 6.0, 0.08)]
    lines = B.mechanism_sentence(found).splitlines()
    assert len(lines) == 3
    assert "**dilution**" in lines[0] and "90.0%" in lines[0]
    assert "2×: H5 accepted, H7 accepted" in lines[0]
    assert "**the evidence itself fades**" in lines[1] and "30.0%" in lines[1]
    assert "**partly dilution, partly fading**" in lines[2]
    # the total holding while the mean does not fall is not dilution
    steady = [entry("Dyck-3 L2 none", "best", "1×", 10.0, 0.25),
              entry("Dyck-3 L2 none", "best", "2×", 10.0, 0.30)]
    assert "**the evidence holds**" in B.mechanism_sentence(steady)
    assert B.mechanism_sentence([]).startswith("No mechanism check ran")


def test_the_mechanism_brief_is_one_plain_line_of_the_same_readings(tmp_path):
    from dyckbook.chapters import re_examining_thesis

    def entry(m, total, mean, verdicts):
        return {"label": "Dyck-3 L2 alibi", "role": "best", "multiple": m, "seeds": 5,
                "evidence": {"total": total, "mean": mean, "negatives_right": 0.9,
                             "members_right": 0.99, "tokens": 40.0}, "verdicts": verdicts}

    found = [entry("1×", 10.0, 0.25, {"H5": "accepted", "H7": "accepted"}),
             entry("2×", 2.0, 0.03, {"H5": "rejected", "H7": "rejected"})]
    brief = B.mechanism_brief(found)
    assert "\n" not in brief and "*" not in brief
    assert brief.startswith("Dyck-3 L2 alibi (best): the evidence itself fades")
    assert "at 1× H5, H7 accepted; at 2× no hypothesis accepted" in brief
    assert B.mechanism_brief([]) == "not measured yet"
    # the verdict chapter quotes it from the run's mechanism.json
    assert re_examining_thesis.beyond_mechanism(str(tmp_path)) == "not measured yet"
    (tmp_path / "mechanism.json").write_text(json.dumps({"found": found, "brief": brief}))
    assert re_examining_thesis.beyond_mechanism(str(tmp_path)) == brief
    answers = re_examining_thesis.beyond_answers(str(tmp_path))  # no records: said so
    assert answers == {"beyond_holds": "not measured yet", "beyond_deep": "not measured yet",
                       "beyond_adversary_1x": "n/a", "beyond_mechanism": brief}


def test_a_language_with_one_long_range_set_is_attacked_on_it_alone():
    """Dyck-1 has no spread layout: its own-strings adversary leaves spread out instead of an
    empty set that vetoes every rule, and its table has no 'stack and spread' row."""
    def rec(seed):
        base = {"stack": {"ngrams": _score({40: (100, 60)}), "cnn": _score({40: (100, 70)})}}
        return SimpleNamespace(label="Dyck-1 L2 none", seed=seed, baselines=base)

    own = {"1×": B.own_adversary([rec(0), rec(1)], ["stack", "spread"], 30, 48)}
    assert own["1×"] == {"stack": {"cnn": pytest.approx(0.7), "ngrams": pytest.approx(0.6)}}
    test = {"1×": {"stack": {"cnn": 0.65}}}
    rows = B.adversary_rows(own, test)
    assert [r["set"] for r in rows] == ["stack"]
    assert rows[0]["fitted on the training strings"] == "`cnn` 70.0%"
    said = B.adversary_sentence(own, test, "the long-range set")
    assert "fitted on the models' training strings `cnn` 70.0%" in said
    three = {"1×": {"stack": {"cnn": 0.6}, "spread": {"cnn": 0.9, "window_span": 1.0}}}
    assert [r["set"] for r in B.adversary_rows(three, three)] == ["stack", "spread",
                                                                   "stack and spread"]
