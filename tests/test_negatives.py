"""Tests for dyckbook.data.negatives: verified non-members that keep every promise of their kind."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from reference_checker import is_dyck, is_locally_valid

from dyckbook.data import negatives as N
from dyckbook.data.hardness import profile
from dyckbook.data.languages import DeepDyck, Dyck, locally_valid, sample_lengths
from dyckbook.data.negatives import (
    HARD_KINDS,
    LONG_RANGE_KINDS,
    NEGATIVE_KINDS,
    available_kinds,
    long_range_window,
    sample_matched_members,
    sample_negatives,
    stack_kind,
)
from dyckbook.rules.baselines import LocalRecogniser

LANGUAGES = [Dyck(1), Dyck(2), Dyck(3), Dyck(2, 1), Dyck(2, 2), Dyck(1, 3), Dyck(3, 3)]
IDS = [lang.name for lang in LANGUAGES]


def heights(lang: Dyck, s: str) -> list[int]:
    return list(itertools.accumulate(1 if c in lang.alphabet.symbols[::2] else -1 for c in s))


def check_hard(lang: Dyck, s: str, window: int | None) -> None:
    """Every promise of a hard negative, checked independently of the package."""
    assert len(s) % 2 == 0 and len(s) >= 4
    assert s[0] in lang.alphabet.symbols[::2] and s[-1] in lang.alphabet.symbols[1::2]
    for opener, closer in lang.pairs:
        assert s.count(opener) == s.count(closer)
    assert not is_dyck(s, lang.pairs, lang.max_depth)
    if lang.max_depth is not None:
        assert max(heights(lang, s)) <= lang.max_depth
    if window is not None and (2 * lang.k) ** window <= 4096:
        assert is_locally_valid(s, lang.pairs, lang.max_depth, window)
    elif window is not None:  # the reference would enumerate >= 10^5 words: the tested tables
        assert locally_valid(lang, *lang.alphabet.encode([s]), window)[0]


def draw(lang, seed, lengths, kinds="hard", window=None):
    codes, out_lengths, names = sample_negatives(
        lang, np.random.default_rng(seed), lengths, kinds, window
    )
    assert codes.dtype == np.uint8 and out_lengths.tolist() == list(lengths)
    assert names.shape == (len(lengths),)
    return lang.alphabet.decode(codes, out_lengths), names.tolist()


@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("lang", LANGUAGES, ids=IDS)
def test_every_hard_kind_keeps_its_promises(lang, window):
    lengths = [4, 6, 8, 10, 12, 16, 22, 30, 64]
    for kind in HARD_KINDS:
        usable = [n for n in lengths if kind in available_kinds(lang, n, window=window)]
        if not usable:
            continue
        strings, names = draw(lang, 1, usable * 4, kind, window)
        assert names == [kind] * len(strings)
        for s in strings:
            check_hard(lang, s, window)


@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("lang", LANGUAGES, ids=IDS)
def test_hard_mixture_uses_every_available_kind(lang, window):
    rng = np.random.default_rng(2)
    lengths = sample_lengths(rng, 300, 20, 40).tolist()
    if not available_kinds(lang, 30, window=window):  # nothing is non-local under D = 1
        assert lang.max_depth == 1 and window is not None
        with pytest.raises(ValueError, match="length"):
            draw(lang, 2, lengths, window=window)
        return
    strings, names = draw(lang, 2, lengths, window=window)
    for s in strings[:100]:
        check_hard(lang, s, window)
    assert set(names) == set(available_kinds(lang, 30, window=window))


def unswap(s: str, lang: Dyck) -> tuple[str, list[tuple[int, int]]]:
    """The skeleton's pairs whose types differ, and the string with their closers exchanged."""
    stack, wrong = [], []
    for j, c in enumerate(s):
        if c in lang.alphabet.symbols[::2]:
            stack.append(j)
        else:
            i = stack.pop()
            if lang.alphabet.symbols.index(c) != lang.alphabet.symbols.index(s[i]) + 1:
                wrong.append((i, j))
    assert len(wrong) == 2
    chars = list(s)
    (_, b), (_, d) = wrong
    chars[b], chars[d] = chars[d], chars[b]
    return "".join(chars), sorted(wrong)


@pytest.mark.parametrize("window", [None, 4])
def test_kind_shapes(window):
    lang = Dyck(3)
    for s in draw(lang, 3, [24] * 60, "crossing", window)[0]:
        word, [(a, _), (c, _)] = unswap(s, lang)
        assert is_dyck(word, lang.pairs) and c == a + 1  # a pair and its first child
    for s in draw(lang, 4, [24] * 60, "deep_mismatch", window)[0]:
        word, pairs = unswap(s, lang)
        assert is_dyck(word, lang.pairs)
        h = heights(lang, word)
        depth = {i: h[i] for i, c in enumerate(word) if c in "([{"}
        # parents: openers whose partner is not adjacent; the exchanged one is a deepest parent
        parents = [i for i, j in ((i, j) for i, j in pairs) if j > i + 1]
        all_parents = [i for i in depth if word[i + 1] in "([{"]
        assert any(depth[i] == max(depth[p] for p in all_parents) for i in parents)
    for s in draw(lang, 5, [24] * 60, "dip", window)[0]:
        assert min(heights(lang, s)) == -1
    for s in draw(lang, 6, [24] * 60, "rotation", window)[0]:
        assert any(is_dyck(s[r:] + s[:r], lang.pairs) for r in range(len(s)))
        assert min(heights(lang, s)) < 0


def test_random_kind():
    lang = Dyck(2, 2)
    lengths = list(range(1, 30)) * 5
    strings, names = draw(lang, 7, lengths, "random", window=4)  # window applies to hard kinds
    assert set(names) == {"random"} and not any(is_dyck(s, lang.pairs, 2) for s in strings)
    assert len(set(strings)) > len(strings) // 2
    with pytest.raises(ValueError, match="length 0"):
        draw(lang, 7, [0], "random")


def test_structural_availability():
    local = {"window": None}
    assert available_kinds(Dyck(1), 4, **local) == ()
    assert available_kinds(Dyck(1), 6, **local) == ("dip", "rotation", "swap")
    assert available_kinds(Dyck(2), 4, **local) == ("swap", "crossing", "deep_mismatch")
    assert available_kinds(Dyck(2), 6, **local) == HARD_KINDS
    assert available_kinds(Dyck(2, 1), 6, **local) == ("dip", "swap")
    assert available_kinds(Dyck(3), 7) == () and available_kinds(Dyck(3), 2) == ()
    assert available_kinds(Dyck(3), 3, ["random", "dip"]) == ("random",)
    assert available_kinds(Dyck(1), 8) == ()  # the default window is 4, as DataConfig's
    assert available_kinds(Dyck(3), 10**6, window=4) == HARD_KINDS  # beyond the probes


def test_dyck1_non_local_availability_matches_brute_force_existence():
    # brute force (tests/test_languages.py): non-local Dyck-1 negatives exist from length 10
    available = [n for n in range(4, 42, 2) if available_kinds(Dyck(1), n, window=4)]
    assert available == list(range(10, 42, 2))


@pytest.mark.parametrize("window", [4, 6])
@pytest.mark.parametrize("max_depth", [None, 3])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_sampling_succeeds_exactly_where_available(k, max_depth, window):
    lang = Dyck(k, max_depth)
    lengths, kinds = [], []
    for n in range(4, 42, 2):
        avail = available_kinds(lang, n, window=window)
        if not avail:
            with pytest.raises(ValueError, match=f"length {n} "):
                sample_negatives(lang, np.random.default_rng(0), [n], window=window)
        lengths += [n] * len(avail)
        kinds += avail
        for kind in set(HARD_KINDS) - set(avail):
            with pytest.raises(ValueError, match=f"length {n} "):
                sample_negatives(lang, np.random.default_rng(0), [n], kind, window)
    for kind in set(kinds):
        chosen = [n for n, name in zip(lengths, kinds) if name == kind]
        strings, _ = draw(lang, 8, chosen, kind, window)
        for s in strings:
            check_hard(lang, s, window)


def balanced_accuracy_by_kind_and_length(lang, recogniser, lengths, window, rng):
    """{(kind, length): (accepted share of fresh members + rejected share of negatives) / 2}."""
    out = {}
    for n in lengths:
        kinds = available_kinds(lang, n, window=window)
        if not kinds:
            continue
        accepted = recogniser.predict(*lang.sample_codes(rng, [n] * 300)).mean()
        codes, lens, names = sample_negatives(lang, rng, [n] * (300 * len(kinds)), window=window)
        rejected = 1 - recogniser.predict(codes, lens)
        for kind in kinds:
            assert (names == kind).sum() >= 200
            out[kind, n] = (accepted + rejected[names == kind].mean()) / 2
    return out


@pytest.mark.parametrize(("k", "lo", "hi"), [(1, 10, 20), (3, 4, 16)])
def test_key_non_local_hard_set_defeats_a_4_local_recogniser(k, lo, hi):
    lang = Dyck(k)
    rng = np.random.default_rng(k)
    train = lang.sample_codes(rng, sample_lengths(rng, 8000, lo, hi))
    local = LocalRecogniser(lang, 4).fit(*train, np.ones(8000, dtype=np.int64))
    lengths = range(lo, hi + 1, 2)
    non_local = balanced_accuracy_by_kind_and_length(lang, local, lengths, 4, rng)
    assert {kind for kind, _ in non_local} == set(available_kinds(lang, hi, window=4))
    assert max(non_local.values()) <= 0.55, non_local
    # without the window the same recogniser sees through a clear majority of some kind
    local_regime = balanced_accuracy_by_kind_and_length(lang, local, lengths, None, rng)
    assert max(local_regime.values()) >= 0.75, local_regime


def test_determinism():
    lang = Dyck(3)
    lengths = [4, 10, 10, 16, 64, 200]
    for window in (None, 4):
        lengths_w = lengths if window is None else lengths[1:]
        a = sample_negatives(lang, np.random.default_rng(5), lengths_w, window=window)
        b = sample_negatives(lang, np.random.default_rng(5), lengths_w, window=window)
        c = sample_negatives(lang, np.random.default_rng(6), lengths_w, window=window)
        assert a[0].tobytes() == b[0].tobytes() and a[2].tolist() == b[2].tolist()
        assert a[0].tobytes() != c[0].tobytes()


@pytest.mark.parametrize("window", [None, 4])
def test_long_lengths(window):
    lang = Dyck(3)
    strings, names = draw(lang, 9, [1024] * 6 + [4094] * 2, window=window)
    for s in strings:
        check_hard(lang, s, window)
    assert len(set(names)) >= 3


def test_the_declaration():
    """Every kind declares what belongs to it; the views are read from the declaration."""
    assert HARD_KINDS == tuple(n for n, k in NEGATIVE_KINDS.items()
                               if k.hard and not k.long_range)
    assert LONG_RANGE_KINDS == tuple(n for n, k in NEGATIVE_KINDS.items() if k.long_range)
    for name, kind in NEGATIVE_KINDS.items():
        assert kind.name == name and kind.description.endswith(".")
        assert kind.guarantees and callable(kind.build), name
        assert kind.hard or not kind.long_range, name
    # the facts of today's kinds
    assert not NEGATIVE_KINDS["random"].hard
    assert {n for n in ("crossing", "deep_mismatch", "stack") if NEGATIVE_KINDS[n].min_k == 2} \
        == {"crossing", "deep_mismatch", "stack"}
    assert {"dip", "rotation", "swap", "crossing", "deep_mismatch"} <= set(HARD_KINDS)
    assert {"stack", "far"} <= set(LONG_RANGE_KINDS)
    assert stack_kind(Dyck(1)) == "far" and stack_kind(Dyck(3, 4)) == "stack"
    assert [long_range_window(n) for n in (4, 24, 25, 36, 48, 100)] == [8, 8, 9, 12, 16, 34]


def mismatched_pairs(s: str, pairs) -> list[tuple[int, int]]:
    """(opener, closer) positions of the type-blind skeleton's pairs whose types differ."""
    openers = {p[0]: i for i, p in enumerate(pairs)}
    stack, out = [], []
    for i, ch in enumerate(s):
        if ch in openers:
            stack.append(i)
        elif stack:
            j = stack.pop()
            if openers[s[j]] != [p[1] for p in pairs].index(ch):
                out.append((j, i))
    return out


@pytest.mark.parametrize("lang", [Dyck(1), Dyck(2), Dyck(3), Dyck(3, 6)], ids=repr)
def test_long_range_negatives_keep_their_promises(lang):
    kind = stack_kind(lang)
    lengths = [n for n in range(20, 66, 2) if kind in available_kinds(lang, n, kind)]
    assert lengths and lengths[0] <= 36 and lengths[-1] == 64
    strings, names = draw(lang, 12, lengths * 6, kind)
    assert set(names) == {kind}
    for s in strings:
        check_hard(lang, s, None)
        w = long_range_window(len(s))
        height = heights(lang, s)
        if kind == "far":  # the count dips, only between W and len - W symbols from the start
            dips = [i for i, h in enumerate(height) if h < 0]
            assert dips and w <= dips[0] and dips[-1] <= len(s) - 1 - w
        else:  # a member's heights and projections; every mismatched pair spans more than W
            assert min(height) >= 0
            for opener, closer in lang.pairs:
                proj = [1 if c == opener else -1 for c in s if c in (opener, closer)]
                assert min(itertools.accumulate(proj)) >= 0
            bad = mismatched_pairs(s, lang.pairs)
            assert len(bad) == 2 and all(j - i + 1 > w for i, j in bad)
    p = profile(lang, *lang.alphabet.encode(strings))
    assert (p.w_star > [long_range_window(len(s)) for s in strings]).all()
    assert (p.end_distance >= [long_range_window(len(s)) for s in strings]).all()
    members = sample_matched_members(lang, np.random.default_rng(13), lengths * 4, kind)
    assert lang.is_member(members).all() and members[1].tolist() == lengths * 4


def test_far_keeps_the_counts_and_the_heights_outside_the_pair():
    lang = Dyck(1)
    codes, ok, words = N._far(lang, np.random.default_rng(5), np.full(3000, 40))
    assert ok.sum() > 50
    assert not (codes != words)[~ok].any()  # rows not chosen are left alone
    assert ((codes != words).sum(axis=1)[ok] == 2).all()
    assert ((codes[ok] == 0).sum(axis=1) == (words[ok] == 0).sum(axis=1)).all()
    h_neg = np.cumsum(np.where(codes[ok] == 0, 1, -1), axis=1)
    h_word = np.cumsum(np.where(words[ok] == 0, 1, -1), axis=1)
    changed = h_neg != h_word
    assert ((h_word - h_neg)[changed] == 2).all()  # inside the pair: two lower, a dip to -1
    assert (h_neg.min(axis=1) == -1).all()


@pytest.mark.parametrize("k", [2, 3])
def test_stack_exchanges_two_long_pairs_at_one_height_under_an_ancestor(k):
    """A before B at one depth, types a != b, spans >= W, a common ancestor of type b;
    the negative exchanges their closers, the matched member retypes B to a: the two differ
    in A's closer and B's opener, and every (height, type) tally of both is a word's."""
    from dyckbook.rules.adversary import HeightTally

    lang = Dyck(k)
    lengths = np.repeat(np.arange(30, 50, 2), 60)
    members, negatives, _ = N.sample_minimal_pairs(lang, np.random.default_rng(k), lengths,
                                                   "stack")
    assert HeightTally(lang).predict(negatives, lengths).all()
    assert lang.is_member((members, lengths)).all()
    for word, neg, n in zip(members, negatives, lengths):
        w = long_range_window(n)
        partner = lang.matching(word[None, :n], np.array([n]))[0]
        depth = np.cumsum(np.where(word[:n] % 2 == 0, 1, -1)) - (word[:n] % 2 == 0)
        at = np.flatnonzero(word[:n] != neg[:n])
        assert at.size == 2
        ca, ob = at  # A's closer, then B's opener
        oa, cb = partner[ca], partner[ob]
        assert word[oa] >> 1 == word[ob] >> 1 == neg[oa] >> 1 != neg[ob] >> 1
        assert neg[ca] == neg[ob] + 1 and neg[cb] == neg[oa] + 1  # closers exchanged
        assert depth[oa] == depth[ob] and ca - oa >= w and cb - ob >= w and oa < ca < ob < cb
        ancestors = [x for x in range(oa) if word[x] % 2 == 0 and partner[x] > cb]
        assert any(word[x] >> 1 == neg[ob] >> 1 for x in ancestors)


@pytest.mark.parametrize("k", [2, 3])
def test_spread_keeps_its_guarantees(k):
    """``spread`` (W = max(4, ceil(n / 6))): the negative and its matched member (the word
    itself) differ in two closers, A's and B's, exchanged; A and B sit at one depth with types
    a != b, A, the gap A-B, B and B's closer to an ancestor of type b each span >= W; every
    (height, type) tally, every symbol count and every type's projection are a word's; no
    window of W symbols and no counter rejects it; and its long closers' types are the
    member's. Checked from the strings, independently of the construction."""
    from dyckbook.rules.adversary import HeightTally

    lang = Dyck(k)
    lengths = np.repeat(np.arange(30, 98, 6), 30)
    members, negatives, got = N.sample_minimal_pairs(lang, np.random.default_rng(k), lengths,
                                                     "spread")
    assert got.tolist() == lengths.tolist()
    assert lang.is_member((members, lengths)).all() and not lang.is_member(
        (negatives, lengths)).any()
    assert HeightTally(lang).predict(negatives, lengths).all()  # tallies: a word's
    p = profile(lang, negatives, lengths)
    windows = np.array([N.spread_window(n) for n in lengths])
    assert (p.w_star > windows).all() and not p.counter.any()
    for word, neg, n, w in zip(members, negatives, lengths, windows):
        assert w == max(4, -(-n // 6))
        word, neg = word[:n], neg[:n]
        assert sorted(word.tolist()) == sorted(neg.tolist())  # every symbol's count
        at = np.flatnonzero(word != neg)
        assert at.size == 2 and (word[at] % 2 == 1).all()  # two closers
        ca, cb = at
        assert neg[ca] == word[cb] and neg[cb] == word[ca]  # exchanged
        partner = lang.matching(word[None], np.array([n]))[0]
        oa, ob = partner[ca], partner[cb]
        depth = np.cumsum(np.where(word % 2 == 0, 1, -1)) - (word % 2 == 0)
        assert depth[oa] == depth[ob] and oa < ca < ob < cb
        assert word[oa] >> 1 != word[ob] >> 1
        assert ca - oa >= w and ob - ca >= w and cb - ob >= w
        ancestors = [x for x in range(oa) if word[x] % 2 == 0 and partner[x] > cb
                     and word[x] >> 1 == word[ob] >> 1 and partner[x] - cb >= w]
        assert ancestors
        for t in range(k):  # every type's projection stays balanced
            proj = np.cumsum(np.where(neg[neg >> 1 == t] % 2 == 0, 1, -1))
            assert proj.min() >= 0 and proj[-1] == 0
    # the same strings, as the test sets draw them
    strings, names = draw(lang, 3, [36, 48] * 10, "spread")
    assert set(names) == {"spread"}
    for s in strings:
        check_hard(lang, s, None)


def test_long_range_availability_and_errors():
    assert available_kinds(Dyck(3), 20, "stack") == () == available_kinds(Dyck(1), 20, "far")
    assert available_kinds(Dyck(3), 48, "long_range") == ("stack", "spread")  # far: Dyck-1
    assert available_kinds(Dyck(1), 48, "spread") == ()  # k >= 2
    assert available_kinds(Dyck(1), 48, "long_range") == ("far",)
    assert available_kinds(Dyck(3, 1), 48, "stack") == ()
    with pytest.raises(ValueError, match="no far negative"):
        sample_matched_members(Dyck(1), np.random.default_rng(0), [40, 12], "far")
    with pytest.raises(ValueError, match="kind must be one of"):
        sample_matched_members(Dyck(1), np.random.default_rng(0), [40], "dip")


def test_empty_request():
    codes, lengths, names = sample_negatives(Dyck(2), np.random.default_rng(0), [], window=None)
    assert codes.shape == (0, 0) and lengths.shape == names.shape == (0,)


def test_bad_arguments():
    lang, rng = Dyck(2), np.random.default_rng(0)
    for kwargs, match in [
        ({"kinds": "easy"}, "kinds"),
        ({"kinds": ["dip", "nope"]}, "kinds"),
        ({"kinds": []}, "kinds"),
        ({"window": 1}, "window"),
        ({"window": 4.0}, "window"),
        ({"window": True}, "window"),
    ]:
        with pytest.raises(ValueError, match=match):
            sample_negatives(lang, rng, [8], **kwargs)
    with pytest.raises(ValueError, match="rng"):
        sample_negatives(lang, 0, [4])
    with pytest.raises(ValueError, match="language"):
        sample_negatives("Dyck-2", rng, [4])
    with pytest.raises(ValueError, match=r"lengths\[1\] = -4"):
        sample_negatives(lang, rng, [4, -4])
    with pytest.raises(ValueError, match="length 7 "):
        sample_negatives(lang, rng, [7])
    with pytest.raises(ValueError, match="length"):
        available_kinds(lang, -1)
    with pytest.raises(ValueError, match="k=8 and width=9"):
        sample_negatives(Dyck(8), rng, [20], window=9)


def test_deep_languages_are_probed_at_the_length_itself():
    """A DeepDyck has no word below 2D, and near 2D its words are nearly all alike: Dyck-1's
    only word of length 20 and depth 10 is (^10 )^10, from which no hard kind can be made."""
    deep, plain = DeepDyck(1, 10), Dyck(1)
    for window in (4, None):
        for length in (4, 18, 20):
            assert available_kinds(deep, length, window=window) == ()
        assert available_kinds(plain, 20, window=window) == ("dip", "rotation", "swap")
        assert available_kinds(deep, 60, window=window)
    assert available_kinds(deep, 20, "random") == ("random",)  # built from no word
    assert available_kinds(deep, 18, "far") == ()
    with pytest.raises(ValueError, match="no negative of kinds"):
        sample_negatives(deep, np.random.default_rng(0), [20])


@pytest.mark.parametrize("window", [None, 4])
def test_hard_negatives_of_deep_words(window):
    lang = DeepDyck(2, 8)
    lengths = [L for L in range(16, 41, 2) if available_kinds(lang, L, window=window)] * 8
    assert lengths and min(lengths) >= 16
    strings, names = draw(lang, 3, lengths, window=window)
    for s, name in zip(strings, names):
        check_hard(lang, s, window)  # a non-member of all of Dyck-2 (lang.max_depth is None)
        if name in ("crossing", "deep_mismatch"):  # the word's heights, so its depth
            assert max(heights(lang, s)) >= 8
    assert {"crossing", "deep_mismatch", "swap"} <= set(names)
