"""Tests for dyckbook.baselines: each baseline gets the accuracy its protocol forces on it."""

from __future__ import annotations

import numpy as np
import pytest

from dyckbook import baselines as B
from dyckbook import data as D
from dyckbook.languages import Dyck
from dyckbook.negatives import HARD_KINDS
from tests.reference_checker import is_dyck  # independent stack checker


def _data(k: int, negatives: str, n: int = 1200, seed: int = 0, min_length: int = 0):
    return D.generate_dataset(
        D.DatasetSpec(
            k=k, n=n, negatives=negatives, seed=seed, min_length=min_length, max_length=16
        )
    )


@pytest.mark.parametrize("k", [1, 3])
def test_first_character_rule_is_perfect_on_thesis_literal_data(k):
    ds = _data(k, "thesis_literal")
    result = B.FirstCharacterRule().fit(ds).accuracy(ds)
    assert result["accuracy"] == 1.0
    assert set(result["per_kind"]) == {"positive", "thesis_literal"}


@pytest.mark.parametrize("k", [1, 3])
def test_first_character_rule_says_member_to_every_hard_negative(k):
    ds = _data(k, "hard")
    pred = B.first_character_rule(ds)
    assert (pred == 1).all()  # every hard negative starts with an opener
    result = B.FirstCharacterRule().fit(ds).accuracy(ds)
    assert result["accuracy"] == pytest.approx(float(ds.labels.mean()))  # the member share
    assert all(
        result["per_kind"][kind]["accuracy"] == 0.0
        for kind in result["per_kind"]
        if kind in HARD_KINDS
    )


def test_first_character_rule_on_plain_strings():
    assert B.first_character_rule([")(", "()", "", "]["]).tolist() == [0, 1, 1, 0]
    lang = Dyck(2, pairs=("ab", "cd"))
    assert B.first_character_rule(["ba", "ab", "dc"], lang).tolist() == [0, 1, 0]


def test_counts_model_is_exactly_at_chance_on_hard_dyck1():
    # For k = 1 every member and every hard negative of a length have the same counts, so any
    # counts model predicts one label per length; the lengths are paired, so accuracy is 1/2.
    train = _data(1, "hard", n=2000, seed=1)
    test = _data(1, "hard", n=2000, seed=2)
    for hidden in (0, 16):
        model = B.CountsClassifier(hidden=hidden, steps=300).fit(train)
        result = model.accuracy(test)
        assert result["accuracy"] == pytest.approx(0.5)
        assert all(cell["accuracy"] == pytest.approx(0.5) for cell in result["per_length"].values())


def test_counts_model_is_near_chance_on_hard_dyck3_but_not_on_random():
    # k = 3: the per-type counts of hard negatives match members' (kinds needing two types
    # shift their distribution slightly), so a counts model stays within a few points of 1/2;
    # on random negatives counting works.
    hard = B.CountsClassifier(hidden=16, steps=400).fit(_data(3, "hard", n=3000, seed=1))
    assert abs(hard.accuracy(_data(3, "hard", n=3000, seed=2))["accuracy"] - 0.5) < 0.06
    rand = B.CountsClassifier(hidden=16, steps=400).fit(_data(3, "random", n=3000, seed=1))
    assert rand.accuracy(_data(3, "random", n=3000, seed=2))["accuracy"] > 0.9


def test_bag_of_tokens_unigrams_at_chance_on_hard_dyck1():
    model = B.BagOfTokensClassifier(ngram=1, hidden=8, steps=200).fit(_data(1, "hard", n=1000))
    assert model.accuracy(_data(1, "hard", n=1000, seed=5))["accuracy"] == pytest.approx(0.5)


def test_bag_of_bigrams_features_count_adjacent_pairs():
    lang = Dyck(1)
    model = B.BagOfTokensClassifier(ngram=2)
    model.language = lang
    codes, lengths = lang.encode(["(())", "()", ""])
    feats = model.features(codes, lengths)  # [n(, n), (( () )( ))]
    assert feats.tolist() == [[2, 2, 1, 1, 0, 1], [1, 1, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0]]


@pytest.mark.parametrize("negatives", ["hard", "random", "thesis_literal"])
@pytest.mark.parametrize("k", [1, 3])
def test_stack_automaton_is_perfect(k, negatives):
    ds = _data(k, negatives, n=800)
    automaton = B.StackAutomaton().fit(ds)
    assert automaton.accuracy(ds)["accuracy"] == 1.0
    strings = ds.strings()[:50]
    expected = [int(is_dyck(s, ds.language.pairs)) for s in strings]
    assert automaton.predict(strings).tolist() == expected


def test_learned_baselines_are_deterministic():
    ds = _data(3, "random", n=600)
    a = B.CountsClassifier(hidden=8, steps=50, seed=3).fit(ds).decision_function(ds)
    b = B.CountsClassifier(hidden=8, steps=50, seed=3).fit(ds).decision_function(ds)
    assert np.array_equal(a, b)


def test_accuracy_breakdown_is_consistent():
    ds = _data(1, "random", n=400)
    result = B.make_baseline("first_character_rule").fit(ds).accuracy(ds)
    n = sum(cell["n"] for cell in result["per_kind"].values())
    assert n == result["n"] == len(ds)
    weighted = sum(c["n"] * c["accuracy"] for c in result["per_length"].values()) / n
    assert weighted == pytest.approx(result["accuracy"])


def test_bad_arguments_raise_naming_the_parameter():
    with pytest.raises(ValueError, match="name must be one of"):
        B.make_baseline("oracle")
    with pytest.raises(ValueError, match="ngram"):
        B.BagOfTokensClassifier(ngram=3)
    with pytest.raises(ValueError, match="hidden"):
        B.CountsClassifier(hidden=-1)
    with pytest.raises(ValueError, match="not fitted"):
        B.CountsClassifier().predict(["()"])
    with pytest.raises(ValueError, match="predictions must have shape"):
        B.baseline_accuracy(np.zeros(3), _data(1, "hard", n=10))
