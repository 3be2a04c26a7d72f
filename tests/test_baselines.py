"""Tests for baselines: each shortcut classifier on data where its answer is known."""

from __future__ import annotations

import re

import numpy as np
import pytest
from reference_checker import is_dyck

from dyckbook.data import negatives as N
from dyckbook.data.languages import Dyck, locally_valid, sample_lengths
from dyckbook.data.negatives import sample_negatives
from dyckbook.rules.baselines import (
    BASELINES,
    ORACLE_BAR,
    ORACLE_NGRAM_BAR,
    STACK_FREE,
    Bigrams,
    Counter,
    Counts,
    Depth,
    Ends,
    FirstSymbol,
    LocalRecogniser,
    NGrams,
    Stack,
    WindowCheck,
    attack,
    balanced_accuracy,
    fit_baselines,
    fit_negatives,
    make_baseline,
)


def stack(*blocks):
    """Concatenate ``(codes, lengths)`` blocks of different widths."""
    width = max(codes.shape[1] for codes, _ in blocks)
    codes = [np.pad(c, ((0, 0), (0, width - c.shape[1])), constant_values=255) for c, _ in blocks]
    return np.vstack(codes), np.concatenate([lengths for _, lengths in blocks])


def members_and(lang, rng, n, kinds, lo=4, hi=16):
    """n members and n negatives of ``kinds`` at uniform even lengths, with labels."""
    members = lang.sample_codes(rng, sample_lengths(rng, n, lo, hi))
    negatives = sample_negatives(lang, rng, sample_lengths(rng, n, lo, hi), kinds, None)[:2]
    return (*stack(members, negatives), np.repeat([1, 0], n))


def exchange_leaf_closers(lang, rng, words):
    """Exchange the closers of two leaf pairs of different types: counts kept, clashes made."""
    out = []
    for w in words:
        leaves = [m.start() for m in re.finditer(r"\(\)|\[\]|\{\}", w)]
        pairs = [(i, j) for i in leaves for j in leaves if i < j and w[i] != w[j]]
        i, j = pairs[rng.integers(len(pairs))]
        chars = list(w)
        chars[i + 1], chars[j + 1] = chars[j + 1], chars[i + 1]
        out.append("".join(chars))
    return out


def test_first_symbol():
    lang = Dyck(2)
    model = FirstSymbol(lang).fit(*lang.alphabet.encode(["()"]), [1])
    codes, lengths = lang.alphabet.encode(["", "()", ")(", "][", "[)", "]"])
    assert model.predict(codes, lengths).tolist() == [1, 1, 0, 0, 1, 0]
    assert model.predict(*lang.alphabet.encode([])).shape == (0,)
    hard, hard_lengths, _ = sample_negatives(lang, np.random.default_rng(0), [12] * 200,
                                             window=None)
    assert model.predict(hard, hard_lengths).dtype == np.int8
    assert (model.predict(hard, hard_lengths) == 1).all()  # every hard negative opens first


def test_counts_learns_balanced_counts():
    lang = Dyck(3)
    rng = np.random.default_rng(1)
    model = Counts(lang).fit(*members_and(lang, rng, 3000, "random"))
    codes, lengths, _ = members_and(lang, rng, 2000, "random")
    per_symbol = [np.bincount(row[:n], minlength=6) for row, n in zip(codes, lengths)]
    balanced = np.array([(c[0::2] == c[1::2]).all() for c in per_symbol])
    assert 0.3 < balanced.mean() < 0.7  # members, plus a few balanced random strings
    assert (model.predict(codes, lengths) == balanced).mean() > 0.99
    hard, hard_lengths, _ = sample_negatives(lang, rng, [12] * 300, ["swap", "crossing"], None)
    assert model.predict(hard, hard_lengths).all()  # a member's counts: taken for members


def test_bigrams_see_adjacent_clashes_that_counts_cannot():
    lang = Dyck(3)
    rng = np.random.default_rng(2)

    def data(n):
        words = [
            w
            for w in lang.sample(rng, sample_lengths(rng, 3 * n, 8, 20))
            if len({m.group() for m in re.finditer(r"\(\)|\[\]|\{\}", w)}) > 1
        ][:n]
        members = lang.sample(rng, [len(w) for w in words])
        codes, lengths = lang.alphabet.encode(members + exchange_leaf_closers(lang, rng, words))
        return codes, lengths, np.repeat([1, 0], n)

    train, test = data(1500), data(1000)
    assert (Bigrams(lang).fit(*train).predict(*test[:2]) == test[2]).mean() > 0.98
    assert abs((Counts(lang).fit(*train).predict(*test[:2]) == test[2]).mean() - 0.5) < 0.05


def local_reference(train_members, s, window):
    """Every window of width <= w of '<s>' occurs in '<m>' for some training member m."""
    seen = {
        f"<{m}>"[i : i + n]
        for m in train_members
        for n in range(1, window + 1)
        for i in range(len(m) + 3 - n)
    }
    b = f"<{s}>"
    return all(b[i : i + n] in seen for n in range(1, window + 1) for i in range(len(b) + 1 - n))


@pytest.mark.parametrize("window", [2, 3, 4, 6])
def test_local_recogniser_equals_its_definition(window):
    lang = Dyck(2)
    rng = np.random.default_rng(window)
    members = lang.sample(rng, sample_lengths(rng, 60, 0, 10))
    noise = ["".join(rng.choice(list("()[]"), size=rng.integers(0, 8))) for _ in range(60)]
    labels = [1] * 60 + [0] * 60
    model = LocalRecogniser(lang, window).fit(*lang.alphabet.encode(members + noise), labels)
    tests = lang.sample(rng, sample_lengths(rng, 200, 0, 14)) + noise + ["", "()", ")("]
    expected = [local_reference(members, s, window) for s in tests]
    assert model.predict(*lang.alphabet.encode(tests)).tolist() == expected
    assert 0 < sum(expected) < len(expected)


def test_local_recogniser_examples():
    lang = Dyck(1)
    model = LocalRecogniser(lang, 3).fit(*lang.alphabet.encode(["()()", ")("]), [1, 0])
    codes, lengths = lang.alphabet.encode(["()()()", "(())", ")(", "", "()"])
    assert model.predict(codes, lengths).tolist() == [1, 0, 0, 0, 1]


def test_stack_is_exact():
    lang = Dyck(3, max_depth=3)
    rng = np.random.default_rng(3)
    codes, lengths, labels = members_and(lang, rng, 500, ["random", *("dip", "swap")])
    assert (Stack(lang).fit(codes, lengths, labels).predict(codes, lengths) == labels).all()
    words = lang.alphabet.decode(codes, lengths)
    assert Stack(lang).predict(codes, lengths).tolist() == [
        int(is_dyck(w, lang.pairs, 3)) for w in words
    ]


def test_fit_baselines_is_deterministic_and_complete():
    lang = Dyck(2)
    data = members_and(lang, np.random.default_rng(4), 800, ["random", "swap"])
    a, b = fit_baselines(lang, *data), fit_baselines(lang, *data, window=4)
    assert list(a) == list(BASELINES) and [m.name for m in a.values()] == list(BASELINES)
    assert list(fit_baselines(lang, *data, names=["ends"])) == ["ends"]
    for name in BASELINES:
        assert np.array_equal(a[name].predict(*data[:2]), b[name].predict(*data[:2]))
    assert a["stack"].predict(*data[:2]).tolist() == data[2].tolist()
    assert make_baseline("local", lang, window=3).window == 3


def test_bad_arguments():
    lang = Dyck(1)
    codes, lengths = lang.alphabet.encode(["()", ")("])
    with pytest.raises(ValueError, match="name must be one of"):
        make_baseline("oracle", lang)
    with pytest.raises(ValueError, match="language"):
        Counts("Dyck-1")
    with pytest.raises(ValueError, match="window"):
        LocalRecogniser(lang, 1)
    with pytest.raises(ValueError, match="window=30"):
        LocalRecogniser(Dyck(8), 30)
    with pytest.raises(ValueError, match="labels"):
        Counts(lang).fit(codes, lengths, [1, 2])
    with pytest.raises(ValueError, match="labels"):
        Counts(lang).fit(codes, lengths, [1])
    with pytest.raises(ValueError, match="not fitted"):
        Bigrams(lang).predict(codes, lengths)
    with pytest.raises(ValueError, match="not fitted"):
        LocalRecogniser(lang).predict(codes, lengths)
    with pytest.raises(ValueError, match="codes"):
        Stack(lang).predict(codes.astype(np.int64), lengths)


def test_counter_and_window_checks():
    lang = Dyck(2)
    strings = ["()", ")(", "([)]", "(]", "([][)]", "(([]))"]
    codes, lengths = lang.alphabet.encode(strings)
    assert Counter(lang).predict(codes, lengths).tolist() == [1, 0, 1, 0, 1, 1]
    assert Counter(lang, per_type=False).predict(codes, lengths).tolist() == [1, 0, 1, 1, 1, 1]
    assert make_baseline("skeleton", lang).name == "skeleton"
    rng = np.random.default_rng(2)
    data = members_and(lang, rng, 300, "hard")
    for w in (4, 6):
        rule = make_baseline(f"window{w}", lang)
        assert isinstance(rule, WindowCheck) and rule.window == w
        assert rule.predict(*data[:2]).tolist() == locally_valid(lang, *data[:2], w).tolist()


def test_ngrams_ends_and_depth_learn_what_they_can_see():
    lang = Dyck(1)
    rng = np.random.default_rng(6)
    train, test = (members_and(lang, rng, 400, "dip", 8, 16) for _ in range(2))
    depth = Depth(lang).fit(*train)  # the minimum height: under k = 1, a recogniser
    assert (depth.predict(*test[:2]) == test[2]).all()
    train, test = (members_and(lang, rng, 400, "random", 8, 16) for _ in range(2))
    assert balanced_accuracy(NGrams(lang).fit(*train).predict(*test[:2]), test[2]) > 0.9
    lang2 = Dyck(2)  # short crossings: their first and last three symbols give them away
    train, test = (members_and(lang2, rng, 600, "crossing", 8, 8) for _ in range(2))
    assert balanced_accuracy(Ends(lang2).fit(*train).predict(*test[:2]), test[2]) > 0.8
    assert Ends(lang2).fit(*train).predict(*lang2.alphabet.encode([")]])]", ""])).tolist() == [1, 1]


def long_range_sets(lang, seed, n, lo, hi):
    """(train, test): matched members and long-range negatives, fresh samples of each."""
    rng = np.random.default_rng(seed)
    kind = N.stack_kind(lang)
    lengths = [L for L in range(lo, hi + 1, 2) if N.available_kinds(lang, L, kind)]
    out = []
    for _ in range(2):
        members = N.sample_matched_members(lang, rng, rng.choice(lengths, n), kind)
        negatives = sample_negatives(lang, rng, rng.choice(lengths, n), kind)[:2]
        out.append((*stack(members, negatives), np.repeat([1, 0], n)))
    return out


BINS = [(30, 36), (38, 42), (44, 48)]


#: the rules each long-range kind is built to be blind to (negatives' docstring): under k >= 2
#: every old rule, the per-height tally and the exact window at W, and, measured, the skip-gram
#: model as a linear count model; under k = 1 (far: the word itself is the member, the pair
#: turned inside out changes 2-grams and heights) the counts, the ends and the windows
BLIND = {1: ("first_symbol", "counts", "ends", "local", "local6", "local8", "window4",
             "window6", "window8", "window_span"),
         2: (*STACK_FREE, "height_tally", "window_span", "skipgrams", "height_stats")}
LINEAR = ("counts", "bigrams", "ngrams", "skipgrams", "height_stats")  # linear count models


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_rules_a_long_range_set_is_built_against_stay_at_chance(k):
    """Every rule the construction promises to defeat, fitted on one sample and scored on a
    fresh one, per length bin: <= 0.55 (linear models of counts: <= 0.58). The rules that do
    separate the sets (the learned ones of ``adversary``: issue 50) are measured by
    ``benchmarks/bench_adversary.py`` and shown in the Dyck chapter, not asserted away."""
    from dyckbook.rules import adversary

    lang = Dyck(k)
    train, test = long_range_sets(lang, 20 + k, 1500, 30, 48)
    names = BLIND[min(k, 2)]
    table = adversary.attack(lang, train, test, names, bins=BINS)
    for name, row in table.items():
        if name in adversary.recognisers(lang):  # Dyck-1: the running count is the stack
            assert min(row.values()) == 1.0, name
            continue
        bar = ORACLE_NGRAM_BAR if name in LINEAR else ORACLE_BAR
        assert max(row.values()) <= bar, (name, row)


def test_the_same_oracle_rejects_most_of_the_local_hard_set():
    """The attack has power: on the non-local-at-w=4 set it separates what the book said was
    hard (the measurements of the hardness issue)."""
    lang = Dyck(3)
    rng = np.random.default_rng(30)
    hard = [sample_negatives(lang, rng, sample_lengths(rng, 1500, 8, 16), "hard", 4)[:2]
            for _ in range(2)]
    members = [lang.sample_codes(rng, h[1]) for h in hard]  # the same lengths
    train, test = ((*stack(m, h), np.repeat([1, 0], 1500)) for m, h in zip(members, hard))
    table = attack(lang, train, test, bins=[(8, 10), (12, 16)])
    assert table["window4"]["all"] == 0.5  # built to pass it
    assert table["window8"]["all"] > 0.9 and table["window6"]["all"] > 0.8
    assert table["counter"]["all"] > 0.65 and table["depth"]["all"] > 0.7
    assert table["ngrams"]["8-10"] > 0.75 and table["ends"]["8-10"] > 0.7


def test_fit_negatives_picks_the_test_sets_kinds():
    kinds = np.array(["member", "random", "dip", "stack", "member"], dtype=object)
    assert fit_negatives(kinds, ["member", "stack"]).tolist() == [0, 0, 0, 1, 0]
    assert fit_negatives(kinds, ["dip", "swap"]).tolist() == [0, 0, 1, 0, 0]
    assert fit_negatives(kinds, ["crossing"]).tolist() == [0, 1, 1, 1, 0]  # none: all of them
    with pytest.raises(ValueError, match="members and non-members"):
        NGrams(Dyck(1)).fit(*Dyck(1).alphabet.encode(["()"]), [1])


def test_order_blind_ceiling_is_the_bag_majority():
    from collections import Counter

    from dyckbook.rules.baselines import order_blind_ceiling

    strings = ["()", ")(", "(())", "()()", "))((", "(()(", "()", ")("]
    labels = np.array([1, 0, 1, 1, 0, 0, 1, 1])
    codes, lengths = Dyck(1).alphabet.encode(strings)
    votes: dict[tuple, Counter] = {}
    for s, y in zip(strings, labels):
        votes.setdefault((len(s), s.count("(")), Counter())[int(y)] += 1
    expected = sum(max(c.values()) for c in votes.values()) / len(strings)
    assert order_blind_ceiling(codes, lengths, labels) == pytest.approx(expected)
    assert expected == 6 / 8  # "()"/")(" split 3:1, "(())"/"()()"/"))((" 2:1, "(()(" alone
