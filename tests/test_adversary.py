"""Tests for dyckbook.rules.adversary: each stack-free rule against an oracle for what it can and
cannot see."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dyckbook.data.languages import Dyck, sample_lengths
from dyckbook.data.negatives import long_range_window, sample_negatives
from dyckbook.rules import adversary as A
from dyckbook.rules.baselines import WindowCheck, balanced_accuracy

LEARNED = ("height_mlp", "skipgrams", "cnn", "cnn_dilated", "height_stats", "edit_knn")


def pad_stack(*blocks):
    """Concatenate ``(codes, lengths)`` blocks of different widths."""
    width = max(codes.shape[1] for codes, _ in blocks)
    codes = [np.pad(c, ((0, 0), (0, width - c.shape[1])), constant_values=255) for c, _ in blocks]
    return np.vstack(codes), np.concatenate([lengths for _, lengths in blocks])


def labelled(lang, rng, n, kinds="random", lo=8, hi=20, window=None):
    """n members and n negatives of ``kinds`` at uniform even lengths, with labels."""
    members = lang.sample_codes(rng, sample_lengths(rng, n, lo, hi))
    negatives = sample_negatives(lang, rng, sample_lengths(rng, n, lo, hi), kinds, window)[:2]
    return (*pad_stack(members, negatives), np.repeat([1, 0], n))


def random_strings(rng, n, n_symbols, lo, hi):
    lengths = rng.integers(lo, hi + 1, n)
    codes = np.full((n, hi), 255, np.uint8)
    for i, length in enumerate(lengths):
        codes[i, :length] = rng.integers(0, n_symbols, length)
    return codes, lengths


def levenshtein(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[:], i
        for j, y in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (x != y))
    return row[-1]


@pytest.fixture(scope="module")
def easy():
    """Dyck-2 members against random negatives: a fitting set and a fresh scoring set."""
    lang = Dyck(2)
    rng = np.random.default_rng(0)
    return lang, labelled(lang, rng, 300), labelled(lang, rng, 300)


@pytest.mark.parametrize("name", A.ADVERSARY)
def test_every_rule_fits_predicts_and_has_its_name(name, easy):
    lang, train, test = easy
    rule = A.make_rule(name, lang)
    assert rule.name == name
    out = rule.fit(*train).predict(*test[:2])
    assert out.dtype == np.int8 and out.shape == test[2].shape and set(out.tolist()) <= {0, 1}
    assert rule.predict(np.zeros((0, 5), np.uint8), np.zeros(0, np.int64)).shape == (0,)


@pytest.mark.parametrize("name", LEARNED)
def test_learned_rules_separate_an_easy_set(name, easy):
    lang, train, test = easy
    rule = A.make_rule(name, lang)
    if name == "edit_knn":  # random non-members against members: too near for 5 neighbours
        rng = np.random.default_rng(5)
        far = []  # non-members made mostly of closers: far from every member
        for _ in range(2):
            members = lang.sample_codes(rng, sample_lengths(rng, 300, 8, 20))
            codes = members[0] | (rng.random(members[0].shape) < 0.75).astype(np.uint8)
            far.append((*pad_stack(members, (codes, members[1])), np.repeat([1, 0], 300)))
        train, test = far
        assert not lang.is_member(test[:2])[300:].any()
    assert balanced_accuracy(rule.fit(*train).predict(*test[:2]), test[2]) >= 0.9


@pytest.mark.parametrize("name", ["height_mlp", "cnn", "edit_knn"])
def test_seeded_rules_are_deterministic(name, easy):
    lang, train, test = easy
    first = A.make_rule(name, lang, seed=3).fit(*train)
    again = A.make_rule(name, lang, seed=3).fit(*train)
    assert (first.predict(*test[:2]) == again.predict(*test[:2])).all()
    if name == "cnn":
        assert np.array_equal(first.features(*test[:2]), again.features(*test[:2]))
        other = A.CNN(lang, width=16, seed=4)
        assert not np.array_equal(A.CNN(lang, width=16, seed=3).features(*test[:2]),
                                  other.features(*test[:2]))


def test_bad_arguments(easy):
    lang, train, test = easy
    cases = [
        (lambda: A.make_rule("nope", lang), "name"),
        (lambda: A.make_rule("cnn", lang, seed=-1), "seed"),
        (lambda: A.HeightTally("Dyck-2"), "language"),
        (lambda: A.HeightCountsMLP(lang, hidden=0), "hidden"),
        (lambda: A.SkipGrams(lang, span=3), "span"),
        (lambda: A.SkipGrams(lang, span=lambda n: 0).fit(*train), "span"),
        (lambda: A.CNN(lang, width=0), "width"),
        (lambda: A.CNN(lang, width=8, layers=[(5, 1), (5, 1)]), "width"),
        (lambda: A.CNN(lang, layers=[(0, 1)]), "kernel"),
        (lambda: A.CNN(lang, lr=0.0), "lr"),
        (lambda: A.CNN(lang, restarts=0), "restarts"),
        (lambda: A.WindowSpan(lang, span=3), "span"),
        (lambda: A.WindowSpan(lang, span=lambda n: 1).predict(*test[:2]), "span"),
        (lambda: A.EditKNN(lang, neighbours=0), "neighbours"),
        (lambda: A.EditKNN(lang, max_train=0), "max_train"),
        (lambda: A.EditKNN(lang).fit(*lang.alphabet.encode(["()" * 33, "(" * 66]), [1, 0]),
         "lengths"),
        (lambda: A.EditKNN(lang).fit(*lang.alphabet.encode(["()", ")("]), [1, 0]),
         "neighbours"),
        (lambda: A.HeightCountsMLP(lang).fit(train[0], train[1], train[2] + 2), "labels"),
        (lambda: A.HeightStats(lang).fit(train[0], train[1], np.ones_like(train[2])),
         "members and non-members"),
        (lambda: A.CNN(lang).predict(*test[:2]), "not fitted"),
        (lambda: A.EditKNN(lang).predict(*test[:2]), "not fitted"),
        (lambda: A.attack_regime(lang, "stack", [30], 0), "n"),
        (lambda: A.attack_regime(lang, "stack", [], 10), "lengths"),
    ]
    for call, word in cases:
        with pytest.raises(ValueError, match=word):
            call()


@pytest.mark.parametrize("k", [2, 3])
def test_height_tally_rejects_nested_exchanges_and_no_stack_negative(k):
    lang = Dyck(k)
    rng = np.random.default_rng(k)
    tally = A.HeightTally(lang)
    members = lang.sample_codes(rng, sample_lengths(rng, 500, 0, 40))
    assert tally.predict(*members).all()
    # the previous stack kind exchanged the closers of two *nested* pairs: the tally caught all
    # of those; today's exchanges pairs at one height, and it is fooled by every one
    codes, lengths, _ = sample_negatives(lang, rng, [30, 36, 40] * 50, "stack", None)
    assert tally.predict(codes, lengths).all()
    nested = ["([])", "([)]", "(()[])", "(()[)]", "[(())]", "[(()])"]
    assert tally.predict(*lang.alphabet.encode(nested)).tolist() == [1, 0, 1, 0, 1, 0]
    # a same-height exchange keeps every tally: the rule is fooled (accepts a non-member)
    fooled = ["(][)", "(()][)", "((][))", "[()](][)"]
    assert not lang.is_member(fooled).any()
    assert tally.predict(*lang.alphabet.encode(fooled)).all()


def test_height_tally_is_fooled_by_every_same_height_exchange():
    lang = Dyck(2)
    rng = np.random.default_rng(7)
    codes, lengths = lang.sample_codes(rng, [24] * 400)
    partner = lang.matching(codes, lengths)
    heights = lang.heights(codes, lengths).astype(int)
    made = []
    for row, (c, p, h) in enumerate(zip(codes, partner, heights)):
        openers = [i for i in range(24) if c[i] % 2 == 0]
        level = {i: h[i] - 1 for i in openers}
        pairs = [(i, j) for i, j in itertools.combinations(openers, 2)
                 if level[i] == level[j] and c[i] != c[j]]
        if pairs:
            i, j = pairs[rng.integers(len(pairs))]
            s = c.copy()
            s[p[i]], s[p[j]] = c[p[j]], c[p[i]]
            made.append(s)
    made = np.array(made)
    n = np.full(len(made), 24)
    assert len(made) > 200
    assert not lang.is_member((made, n)).any()
    assert A.HeightTally(lang).predict(made, n).all()


def test_height_tally_is_dyck1_itself():
    lang = Dyck(1)
    rng = np.random.default_rng(1)
    codes, lengths = pad_stack(random_strings(rng, 3000, 2, 0, 12),
                               lang.sample_codes(rng, sample_lengths(rng, 500, 0, 30)))
    assert np.array_equal(A.HeightTally(lang).predict(codes, lengths),
                          lang.is_member((codes, lengths)))
    assert "height_tally" in A.recognisers(lang)
    assert "height_tally" not in A.recognisers(Dyck(2))


@pytest.mark.parametrize("rule", [A.HeightStats, A.HeightCountsMLP])
def test_dyck1_height_features_hide_the_dip(rule):
    """Under k = 1 some member and some dipping non-member share every feature: the rule
    cannot be the recogniser, whatever it learns."""
    lang = Dyck(1)
    strings = ["".join(s) for s in itertools.product("()", repeat=10) if s.count("(") == 5]
    codes, lengths = lang.alphabet.encode(strings)
    member = lang.is_member((codes, lengths))
    features = rule(lang)._features(codes, lengths)
    keys = [row.tobytes() for row in features]
    seen_member = {key for key, m in zip(keys, member) if m}
    assert any(key in seen_member for key, m in zip(keys, member) if not m)
    # for k = 2 the minimum is among the features: a dip changes them
    assert A.HeightStats(Dyck(2))._features(*Dyck(2).alphabet.encode(["()", ")("]))[:, -2] \
        .tolist() == [0, -1]


def test_window_span_is_the_exact_check_at_each_length():
    lang = Dyck(2)
    rng = np.random.default_rng(2)
    codes, lengths, _ = labelled(lang, rng, 400, "hard", 10, 40, window=4)
    whole = A.WindowSpan(lang, span=lambda n: n + 1)  # sees the whole string: the language
    assert np.array_equal(whole.predict(codes, lengths), lang.is_member((codes, lengths)))
    for w in (4, 6, 10):
        assert np.array_equal(A.WindowSpan(lang, span=lambda n, w=w: w).predict(codes, lengths),
                              WindowCheck(lang, w).predict(codes, lengths))
    assert A.WindowSpan(lang, span=lambda n: 4).predict(codes, lengths).all()  # 4-local
    grow = A.WindowSpan(lang).predict(codes, lengths)
    assert A.WindowSpan(lang).widths(lengths).tolist() == [long_range_window(n) for n in lengths]
    for n in (10, 22, 40):
        at = lengths == n
        if at.any():
            assert np.array_equal(grow[at], WindowCheck(lang, long_range_window(n)).predict(
                codes[at], lengths[at]))


def test_skipgram_features_count_gapped_pairs():
    lang = Dyck(1)
    rule = A.SkipGrams(lang, span=lambda n: 3).fit(*lang.alphabet.encode(["()", ")("]), [1, 0])
    x = rule._features(*lang.alphabet.encode(["(())", ""]))
    # symbols (a, b) at gap g, index a * 2 + b: ((, (), )(, )); then the first and last symbol
    assert (x[0, :4] * 4).tolist() == [1, 1, 0, 1]  # ((, (), )(, ))
    assert (x[0, 4:8] * 4).tolist() == [0, 2, 0, 0]
    assert (x[0, 8:12] * 4).tolist() == [0, 1, 0, 0]
    assert x[0, 12:].tolist() == [1, 0, 0, 1] and not x[1].any()
    wide = A.SkipGrams(Dyck(3), span=lambda n: 24).fit(*Dyck(3).alphabet.encode(["()", ")("]),
                                                         [1, 0])
    assert wide._features(*Dyck(3).alphabet.encode(["()"])).shape == (1, 24 * 36 + 12)
    # by default a string's gaps reach W of its length and no further
    by_length = A.SkipGrams(lang).fit(*lang.alphabet.encode(["()" * 20, ")(" * 20]), [1, 0])
    assert by_length._gaps == long_range_window(40)


@pytest.mark.parametrize("kwargs", [{"width": 16}, {"width": 16, "dilated": True}, {"width": 9},
                                    {"width": 50, "layers": ((8, 1), (8, 2), (8, 4))}])
def test_cnn_receptive_field_is_what_it_states(kwargs):
    lang = Dyck(2)
    cnn = A.CNN(lang, **kwargs)
    rf = cnn.receptive_field
    assert rf == 1 + sum((k - 1) * d for k, d in cnn.layers) <= cnn.width
    rng = np.random.default_rng(0)
    n = 2 * rf + 20
    codes, lengths = random_strings(rng, 6, 4, n, n)
    base = cnn.features(codes, lengths)
    assert base.shape == (6, n + 2, cnn.channels)
    short = cnn.features(codes, np.array([n - 5] + [n] * 5))
    assert not short[0, n - 3 :].any() and short[0, : n - 3].any()  # nothing past the end marker
    widest = 0
    for j in range(rf, n - rf):
        changed = codes.copy()
        changed[:, j] = (changed[:, j] + 1) % 4
        diff = np.abs(cnn.features(changed, lengths) - base).max(axis=2) > 0  # (batch, col)
        cols = np.flatnonzero(diff.any(axis=0))
        assert cols.min() >= j + 1 - (rf - 1) and cols.max() <= j + 1 + (rf - 1)
        for row in diff:
            hit = np.flatnonzero(row)
            if hit.size:
                widest = max(widest, hit.max() - hit.min() + 1)
                assert hit.max() - hit.min() + 1 <= rf
    assert widest == rf  # and the stated field is reached


def test_edit_distances_match_the_textbook_recurrence():
    rng = np.random.default_rng(3)
    a = random_strings(rng, 40, 4, 0, 64)
    b = random_strings(rng, 30, 4, 0, 50)
    got = A.edit_distances(a, b, 4)
    want = [[levenshtein(a[0][i, : a[1][i]].tolist(), b[0][j, : b[1][j]].tolist())
             for j in range(30)] for i in range(40)]
    assert got.tolist() == want


def test_edit_knn_with_one_neighbour_returns_the_training_labels(easy):
    lang, train, _ = easy
    knn = A.EditKNN(lang, neighbours=1, max_train=10_000).fit(*train)
    assert np.array_equal(knn.predict(*train[:2]), train[2])


def test_attack_scores_new_and_old_rules_and_leaves_out_recognisers():
    lang = Dyck(1)
    timings = {}
    table = A.attack_regime(lang, "stack", [30, 32], 60, seed=1, bins=[(30, 30), (32, 32)],
                            names=("height_tally", "window_span", "counts", "counter"),
                            timings=timings)
    assert set(table) == {"window_span", "counts"} == set(timings)
    assert set(table["counts"]) == {"all", "30-30", "32-32"}
    assert all(0.0 <= v <= 1.0 for row in table.values() for v in row.values())
    lang2 = Dyck(2)
    rng = np.random.default_rng(4)
    train, test = labelled(lang2, rng, 100), labelled(lang2, rng, 100)
    out = A.attack(lang2, train, test, ("height_tally", "stack"), bins=[(8, 20)])
    assert out["stack"]["all"] == 1.0 and out["height_tally"]["8-20"] == out["height_tally"]["all"]
