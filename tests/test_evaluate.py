"""Tests for evaluate: Wilson intervals, score tables, pooling, binning, predictions."""

import json
import math

import numpy as np
import pytest
import torch

from dyckbook.data.dataset import MEMBER, Dataset
from dyckbook.data.languages import Dyck
from dyckbook.experiment.evaluate import Score, binned, margins, pool, predict, score, wilson
from dyckbook.nn import tokenizer
from dyckbook.nn.model import Classifier, ModelConfig

LANG = Dyck(2)


@pytest.mark.parametrize("correct, n, low, high", [
    (5, 10, 0.2366, 0.7634),  # hand-computed closed form, z = 1.96
    (0, 10, 0.0, 0.2775),
    (10, 10, 0.7225, 1.0),
    (81, 100, 0.7222, 0.8749),
    (1, 1, 0.2065, 1.0),
])
def test_wilson_matches_the_closed_form(correct, n, low, high):
    lo, hi = wilson(correct, n)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)


def test_wilson_contains_p_within_unit_interval_and_narrows_with_n():
    for n in (1, 2, 7, 50, 1000):
        for correct in range(0, n + 1, max(1, n // 7)):
            lo, hi = wilson(correct, n)
            assert 0.0 <= lo <= correct / n <= hi <= 1.0
    assert np.diff([np.subtract(*wilson(n // 2, n)[::-1]) for n in (10, 100, 1000)]).max() < 0
    assert all(math.isnan(v) for v in wilson(0, 0))
    narrow, wide = wilson(50, 100, z=1.0), wilson(50, 100)
    assert wide[0] < narrow[0] < narrow[1] < wide[1]
    with pytest.raises(ValueError, match="correct must lie in \\[0, n=10\\], got 11"):
        wilson(11, 10)


def _set():
    strings = ["()", "([])", "[]()", ")(", "(]", "([)]", "(([]))", "]]", "", "(("]
    kinds = [MEMBER, MEMBER, MEMBER, "dip", "random", "crossing", MEMBER, "random", MEMBER,
             "random"]
    return Dataset.from_strings(LANG, strings, kinds)


def test_score_tables_count_every_string_once():
    ds = _set()
    predicted = np.array([1, 1, 0, 0, 1, 1, 1, 0, 0, 0])
    s = score(predicted, ds)
    assert (s.n, s.correct) == (10, 6)
    for table in (s.per_length, s.per_kind, s.per_depth):
        assert sum(v[0] for v in table.values()) == s.n
        assert sum(v[1] for v in table.values()) == s.correct
    assert s.per_length == {0: [1, 0], 2: [5, 4], 4: [3, 1], 6: [1, 1]}
    assert s.per_kind == {MEMBER: [5, 3], "crossing": [1, 0], "dip": [1, 1], "random": [3, 2]}
    assert s.per_depth[3] == [1, 1] and s.per_depth[0] == [3, 2]  # "", ")(" and "]]"
    assert s.accuracy == 0.6 and s.interval == wilson(6, 10)
    assert s.balanced_accuracy == pytest.approx(0.5 * (3 / 5 + 3 / 5))
    assert s.accuracy_of("per_kind", "random") == pytest.approx(2 / 3)
    assert math.isnan(s.accuracy_of("per_kind", "swap"))
    with pytest.raises(ValueError, match="predicted must have shape \\(10,\\), got \\(9,\\)"):
        score(predicted[:9], ds)


def test_accuracy_between_pools_the_keys_in_range():
    s = score(np.array([1, 1, 0, 0, 1, 1, 1, 0, 0, 0]), _set())
    assert s.accuracy_between(2, 4) == pytest.approx(5 / 8)
    assert s.accuracy_between(0, 100) == s.accuracy
    assert s.accuracy_between(5, 6) == 1.0
    assert math.isnan(s.accuracy_between(7, 9))
    assert s.accuracy_between(1, 3, table="per_depth") == pytest.approx(
        sum(v[1] for d, v in s.per_depth.items() if 1 <= d <= 3)
        / sum(v[0] for d, v in s.per_depth.items() if 1 <= d <= 3))


def test_balanced_accuracy_is_the_mean_of_the_class_accuracies():
    s = Score(n=110, correct=0, per_length={}, per_depth={},
              per_kind={MEMBER: [100, 90], "dip": [4, 1], "swap": [6, 5]})
    assert s.balanced_accuracy == pytest.approx(0.5 * (0.9 + 0.6))
    assert math.isnan(Score(3, 3, {}, {MEMBER: [3, 3]}, {}).balanced_accuracy)
    assert math.isnan(Score(3, 3, {}, {"dip": [3, 3]}, {}).balanced_accuracy)
    assert math.isnan(Score(0, 0, {}, {}, {}).accuracy)


def test_pool_and_binned_preserve_totals():
    rng = np.random.default_rng(0)
    ds = _set()
    scores = [score(rng.integers(0, 2, len(ds)), ds) for _ in range(4)]
    pooled = pool(scores)
    assert pooled.n == 40 and pooled.correct == sum(s.correct for s in scores)
    for table in ("per_length", "per_kind", "per_depth"):
        for key, (n, ok) in getattr(pooled, table).items():
            assert n == sum(getattr(s, table).get(key, [0, 0])[0] for s in scores)
            assert ok == sum(getattr(s, table).get(key, [0, 0])[1] for s in scores)
    table = {1: [3, 2], 2: [5, 5], 7: [4, 0], 9: [1, 1], 10: [2, 1]}
    bins = binned(table, 5)
    assert bins == {0: [8, 7], 5: [5, 1], 10: [2, 1]}
    assert binned(table, 1) == table
    with pytest.raises(ValueError, match="width must be an int >= 1, got 0"):
        binned(table, 0)


def test_score_dict_round_trip():
    s = score(np.ones(10, np.int8), _set())
    data = s.to_dict()
    assert data["accuracy"] == s.accuracy and data["interval"] == list(s.interval)
    assert Score.from_dict(data) == s


def test_margins_and_predict_agree_with_the_model():
    model = Classifier(ModelConfig(k=2, n_ctx=8, d_model=8, n_heads=1, d_mlp=16, n_layers=1),
                       [0]).train()
    ds = _set()
    m = margins(model, ds, batch_size=3)
    assert model.training  # restored
    with torch.no_grad():
        logits = model.eval()(tokenizer.encode(ds.codes, ds.lengths))
    assert m.dtype == np.float64 and np.allclose(m, (logits[:, 1] - logits[:, 0]).numpy(),
                                                 atol=1e-6)
    assert (predict(model, ds) == (m > 0)).all()
    assert margins(model, Dataset.empty(LANG)).shape == (0,)


def test_balanced_accuracy_compares_a_kind_with_the_members_of_its_lengths():
    lang = Dyck(3)
    strings = ["()" * 5, "([]){}" + "()" * 2, "(" * 10 + ")" * 10, "[" * 10 + "]" * 10,
               "([)]" + "()" * 3, "([" + "{}" * 8 + ")]"]
    ds = Dataset.from_strings(lang, strings, ["member", "member", "member", "member", "a", "b"])
    # right on the members of length 10 and on both negatives; wrong on the members of length 20
    s = score(np.array([1, 1, 0, 0, 0, 0]), ds)
    assert s.balanced(kind="a") == 1.0  # its members (length 10) are right
    assert s.balanced(kind="b") == 0.5  # its members (length 20) are wrong
    assert s.per_bin == {"member": [4, 2], "w<=4": [1, 1], "w>8": [1, 1]}
    assert s.balanced(bin="w<=4") == 1.0 and s.balanced(bin="w>8") == 0.5
    assert s.balanced() == 0.75 and math.isnan(s.balanced(kind="dip"))
    back = Score.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back == s and pool([s, s]).cells == {k: [2 * n, 2 * c] for k, (n, c) in s.cells.items()}
    bare = score(np.array([1, 1, 0, 0, 0, 0]), ds, cells=False)
    assert bare.cells == {} and bare.balanced(kind="b") == 0.75  # pooled members: 2 of 4
    with pytest.raises(ValueError, match="kind and bin"):
        bare.balanced(kind="a", bin="w<=4")
