"""Tests for dyckbook.data.languages: membership, structure, counting, sampling, local validity."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_checker import is_locally_valid, local_sets
from reference_checker import is_member as ref_member
from scipy.stats import chisquare

from dyckbook.data.languages import (
    DeepDyck,
    Dyck,
    local_tables,
    locally_valid,
    sample_lengths,
    window_index,
)
from dyckbook.data.vocab import PAD_CODE

LANGUAGES = [
    Dyck(1),
    Dyck(2),
    Dyck(3),
    Dyck(8),
    Dyck(1, max_depth=1),
    Dyck(2, max_depth=2),
    Dyck(3, max_depth=3),
]
IDS = [lang.name for lang in LANGUAGES]


def all_strings(symbols: str, n: int) -> list[str]:
    return ["".join(w) for w in itertools.product(symbols, repeat=n)]


def stack_partners(s: str, lang: Dyck) -> list[int] | None:
    """Partner of each position by an explicit stack, or None for a non-member."""
    out, stack = [-1] * len(s), []
    for j, c in enumerate(s):
        if lang.alphabet.symbols.index(c) % 2 == 0:
            stack.append(j)
        else:
            if not stack:
                return None
            i = stack.pop()
            out[i], out[j] = j, i
    return out if not stack and ref_member(lang, s) else None


def near_members(lang: Dyck, rng: np.random.Generator, n: int, max_length: int) -> list[str]:
    """Members, members with one symbol changed or two swapped, rotations, random strings."""
    words = lang.sample(rng, sample_lengths(rng, n, 0, max_length))
    out = []
    for w, how in zip(words, rng.integers(0, 5, size=n)):
        chars = list(w)
        if how == 1 and w:
            chars[rng.integers(len(w))] = lang.alphabet.symbols[rng.integers(2 * lang.k)]
        elif how == 2 and w:
            i, j = rng.integers(len(w), size=2)
            chars[i], chars[j] = chars[j], chars[i]
        elif how == 3 and w:
            r = int(rng.integers(len(w)))
            chars = chars[r:] + chars[:r]
        elif how == 4:
            chars = list(rng.choice(list(lang.alphabet.symbols), size=len(w) + rng.integers(2)))
        out.append("".join(chars))
    return out


# --- membership -------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", LANGUAGES, ids=IDS)
def test_membership_and_count_equal_brute_force(lang):
    max_n = {1: 10, 2: 8, 3: 6, 8: 4}[lang.k]
    for n in range(max_n + 1):
        words = all_strings(lang.alphabet.symbols, n)
        ref = np.array([ref_member(lang, w) for w in words])
        np.testing.assert_array_equal(lang.is_member(words), ref, err_msg=f"{lang.name} {n}")
        assert int(ref.sum()) == lang.count(n)


@given(st.sampled_from(LANGUAGES), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_strings_codes_and_contains_agree_with_reference(lang, seed):
    words = near_members(lang, np.random.default_rng(seed), 12, 24)
    ref = [ref_member(lang, w) for w in words]
    assert lang.is_member(words).tolist() == ref
    assert lang.is_member(lang.alphabet.encode(words)).tolist() == ref
    assert [w in lang for w in words] == ref


def test_large_mixed_batch_is_chunked_and_correct():
    lang = Dyck(2)
    rng = np.random.default_rng(0)
    words = lang.sample(rng, sample_lengths(rng, 1200, 0, 4000))  # > 4M padded cells
    words[::3] = [w[1:] + w[:1] for w in words[::3]]  # rotations: members only when empty
    ref = np.array([ref_member(lang, w) for w in words])
    np.testing.assert_array_equal(lang.is_member(words), ref)
    codes, lengths = lang.alphabet.encode(words)
    np.testing.assert_array_equal(
        lang.max_depths(codes, lengths),
        [max(itertools.accumulate((1 if c in "([" else -1 for c in w), initial=0)) for w in words],
    )


def test_codes_outside_the_alphabet_are_refused():
    with pytest.raises(ValueError, match=r"codes\[0, 1\] = 2"):
        Dyck(1).is_member((np.array([[0, 2]], dtype=np.uint8), np.array([2])))
    with pytest.raises(ValueError, match="sequence of str"):
        Dyck(1).is_member("()")
    with pytest.raises(ValueError, match="s must be a str"):
        assert None in Dyck(1)


# --- structure --------------------------------------------------------------------------------


@given(st.sampled_from(LANGUAGES), st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_heights_and_matching_against_a_stack(lang, seed):
    words = near_members(lang, np.random.default_rng(seed), 10, 30)
    codes, lengths = lang.alphabet.encode(words)
    heights, partners = lang.heights(codes, lengths), lang.matching(codes, lengths)
    depths = lang.max_depths(codes, lengths)
    for w, h, p, d in zip(words, heights, partners, depths):
        steps = [1 if lang.alphabet.symbols.index(c) % 2 == 0 else -1 for c in w]
        expected = list(itertools.accumulate(steps))
        assert h.tolist() == expected + [expected[-1] if w else 0] * (codes.shape[1] - len(w))
        assert d == max([0] + expected)
        ref = stack_partners(w, lang)
        assert p.tolist() == (ref if ref is not None else [-1] * len(w)) + [-1] * (
            codes.shape[1] - len(w)
        )


def test_structure_examples():
    lang = Dyck(2)
    codes, lengths = lang.alphabet.encode(["([])()", "([)]", ")("])
    assert lang.matching(codes, lengths).tolist() == [[3, 2, 1, 0, 5, 4], [-1] * 6, [-1] * 6]
    assert lang.heights(codes, lengths)[2].tolist() == [-1, 0, 0, 0, 0, 0]
    assert lang.max_depths(codes, lengths).tolist() == [2, 2, 0]


# --- counting ---------------------------------------------------------------------------------


def test_counts_closed_forms_and_logs():
    assert [Dyck(1).count(n) for n in range(0, 12, 2)] == [1, 1, 2, 5, 14, 42]
    assert Dyck(3).count(6) == 5 * 27 and Dyck(2).count(7) == 0
    assert Dyck(1, max_depth=1).count(10) == 1 and Dyck(1, max_depth=2).count(8) == 8
    for lang in LANGUAGES:
        for n in (0, 2, 10, 64):
            assert lang.log_count(n) == pytest.approx(math.log(lang.count(n)), rel=1e-9, abs=1e-9)
    assert Dyck(2).log_count(3) == -math.inf
    assert Dyck(3).log_count(4096) == pytest.approx(math.log(Dyck(3).count(4096)), rel=1e-9)


# --- sampling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", LANGUAGES, ids=IDS)
def test_samples_are_members_of_the_requested_lengths(lang):
    rng = np.random.default_rng(1)
    lengths = np.concatenate([sample_lengths(rng, 300, 0, 60), [0, 2, 4, 200]])
    codes, out_lengths = lang.sample_codes(rng, lengths)
    assert codes.dtype == np.uint8 and codes.shape == (lengths.size, 200)
    np.testing.assert_array_equal(out_lengths, lengths)
    assert (codes[np.arange(200) >= lengths[:, None]] == PAD_CODE).all()
    words = lang.alphabet.decode(codes, out_lengths)
    assert all(ref_member(lang, w) for w in words)
    assert [len(w) for w in lang.sample(rng, [4, 0, 8])] == [4, 0, 8]


@pytest.mark.parametrize("lang", [Dyck(3), Dyck(2, max_depth=5)], ids=str)
def test_long_lengths(lang):
    words = lang.sample(np.random.default_rng(2), [4096, 4096, 4100, 1000])
    assert [len(w) for w in words] == [4096, 4096, 4100, 1000]
    assert all(ref_member(lang, w) for w in words)


@pytest.mark.parametrize("lang", LANGUAGES, ids=IDS)
def test_determinism(lang):
    lengths = [0, 2, 8, 30, 8, 100]
    a = lang.sample_codes(np.random.default_rng(7), lengths)[0]
    b = lang.sample_codes(np.random.default_rng(7), lengths)[0]
    assert a.tobytes() == b.tobytes()
    if lang.count(100) > 1:
        assert a.tobytes() != lang.sample_codes(np.random.default_rng(8), lengths)[0].tobytes()


@pytest.mark.parametrize(
    ("lang", "length", "per_word"),
    [
        (Dyck(2), 6, 250),
        (Dyck(2, 2), 8, 120),
        (Dyck(1), 10, 400),
        (Dyck(3, 1), 4, 400),
        (Dyck(1, 3), 12, 300),
    ],
    ids=str,
)
def test_exact_uniformity_chi_square(lang, length, per_word):
    words = [w for w in all_strings(lang.alphabet.symbols, length) if ref_member(lang, w)]
    assert len(words) == lang.count(length)
    sample = lang.sample(np.random.default_rng(12345), [length] * (per_word * len(words)))
    index = {w: i for i, w in enumerate(words)}
    observed = np.bincount([index[w] for w in sample], minlength=len(words))
    assert chisquare(observed).pvalue > 1e-4


def test_mid_height_of_long_words_matches_ballot_numbers():
    m = 200
    lang = Dyck(1)
    codes, lengths = lang.sample_codes(np.random.default_rng(3), [2 * m] * 2000)
    mid = lang.heights(codes, lengths)[:, m - 1].astype(np.float64)

    def paths(steps, h):  # paths from 0 to h in `steps` steps staying >= 0 (ballot)
        up = (steps + h) // 2
        return 0 if (steps - h) % 2 or h > steps else math.comb(steps, up) * (h + 1) // (up + 1)

    mean = sum(h * paths(m, h) ** 2 for h in range(m + 1)) / (math.comb(2 * m, m) // (m + 1))
    assert abs(mid.mean() - mean) < 4 * mid.std() / math.sqrt(mid.size)


# --- local validity ---------------------------------------------------------------------------


@pytest.mark.parametrize("width", [2, 3, 4, 5])
@pytest.mark.parametrize("max_depth", [None, 2, 3])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_locally_valid_equals_the_brute_force_reference(k, max_depth, width):
    lang = Dyck(k, max_depth)
    rng = np.random.default_rng(k * 100 + (max_depth or 0) * 10 + width)
    short = [w for n in range({1: 9, 2: 6, 3: 5}[k]) for w in all_strings(lang.alphabet.symbols, n)]
    words = near_members(lang, rng, 400, 18) + short
    got = locally_valid(lang, *lang.alphabet.encode(words), width)
    ref = [is_locally_valid(w, lang.pairs, max_depth, width) for w in words]
    assert got.tolist() == ref
    assert 0 < sum(ref) < len(ref)


@pytest.mark.parametrize(
    ("k", "max_depth", "width"), [(1, 2, 5), (2, None, 4), (2, 2, 4), (3, 3, 3)]
)
def test_local_tables_equal_the_reference_sets(k, max_depth, width):
    lang = Dyck(k, max_depth)
    factors, prefixes, suffixes = local_sets(lang.pairs, max_depth, width)
    infix, prefix, suffix = local_tables(lang, width)
    for table, n, reference in [
        (infix, width, factors),
        (prefix, width - 1, prefixes),
        (suffix, width - 1, suffixes),
    ]:
        words = all_strings(lang.alphabet.symbols, n)  # in index order: base 2k, big-endian
        assert table.tolist() == [w in reference for w in words]


def test_locally_valid_non_members_of_dyck1_at_width_4():
    # every even-length string with an opener first, a closer last and balanced counts: the
    # non-members no window of 4 can reject (brute-force counts from the design brief)
    lang = Dyck(1)
    for length, expected in [(8, 0), (10, 4), (12, 28), (14, 145), (16, 670)]:
        words = []
        for opens in itertools.combinations(range(1, length - 1), length // 2 - 1):
            chars = [")"] * length
            for i in (0, *opens):
                chars[i] = "("
            words.append("".join(chars))
        codes, lengths = lang.alphabet.encode(words)
        hidden = locally_valid(lang, codes, lengths, 4) & ~lang.is_member((codes, lengths))
        assert int(hidden.sum()) == expected


def test_local_tables_shape_cache_and_errors():
    infix, prefix, suffix = local_tables(Dyck(2), 3)
    assert infix.shape == (64,) and prefix.shape == suffix.shape == (16,)
    assert local_tables(Dyck(2), 3)[0] is infix and not infix.flags.writeable
    assert window_index(np.array([[0, 1, 3, 2]]), 3, 4).tolist() == [[7, 30]]
    with pytest.raises(ValueError, match="k=8 and width=7"):
        local_tables(Dyck(8), 7)
    with pytest.raises(ValueError, match="width"):
        local_tables(Dyck(1), 1)
    with pytest.raises(ValueError, match="language"):
        local_tables("Dyck-1", 4)
    with pytest.raises(ValueError, match="codes"):
        locally_valid(Dyck(1), np.zeros((1, 2), dtype=np.int64), [2], 4)


# --- lengths and argument checks --------------------------------------------------------------


def test_sample_lengths():
    rng = np.random.default_rng(0)
    x = sample_lengths(rng, 20000, 3, 11)
    assert x.dtype == np.int64 and set(x.tolist()) == {4, 6, 8, 10}
    assert np.bincount(x)[4::2].min() > 4500
    assert sample_lengths(rng, 5, 8, 8).tolist() == [8] * 5
    assert sample_lengths(rng, 0, 0, 4).shape == (0,)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((5, 10, 4), "min_length"),
        ((5, -2, 4), "min_length"),
        ((-1, 0, 4), "size"),
        ((5, 3, 3), "no even length"),
        ((5, 0.0, 4), "min_length"),
        ((5, 0, True), "max_length"),
    ],
)
def test_sample_lengths_errors(args, match):
    with pytest.raises(ValueError, match=match):
        sample_lengths(np.random.default_rng(0), *args)


def test_bad_arguments():
    rng = np.random.default_rng(0)
    for kwargs, match in [
        ({"k": 0}, "k"),
        ({"k": 9}, "k=9"),
        ({"k": 2.0}, "k"),
        ({"k": 2, "max_depth": 0}, "max_depth"),
        ({"k": 2, "max_depth": 1.5}, "max_depth"),
        ({"k": 2, "pairs": ["()"]}, "pairs"),
    ]:
        with pytest.raises(ValueError, match=match):
            Dyck(**kwargs)
    lang = Dyck(2)
    for lengths, match in [
        ([2, 3], r"lengths\[1\] = 3 is odd"),
        ([-2], r"lengths\[0\] = -2 is negative"),
        (4, "lengths"),
        ([2.0], "lengths"),
    ]:
        with pytest.raises(ValueError, match=match):
            lang.sample(rng, lengths)
    with pytest.raises(ValueError, match="rng"):
        lang.sample(np.random.RandomState(0), [2])
    with pytest.raises(ValueError, match="length"):
        lang.count(-2)


def test_custom_pairs_large_k_names_and_equality():
    lang = Dyck(3, pairs=["ab", "cd", "ef"])
    assert lang.alphabet.symbols == "abcdef" and "acdb" in lang and "adcb" not in lang
    big = Dyck(20, pairs=[chr(0x4E00 + 2 * i) + chr(0x4E01 + 2 * i) for i in range(20)])
    assert all(ref_member(big, w) for w in big.sample(np.random.default_rng(0), [40] * 20))
    assert Dyck(1).name == "Dyck-1" and Dyck(3, 4).name == "Dyck-(3, 4)"
    assert Dyck(2) == Dyck(2) and hash(Dyck(2)) == hash(Dyck(2, pairs=["()", "[]"]))
    assert Dyck(2) != Dyck(2, max_depth=3) and Dyck(2) != Dyck(2, pairs=["ab", "cd"])
    assert repr(Dyck(1, 2)) == "Dyck(k=1, max_depth=2, pairs=('()',))"


# ------------------------------------------------------------------ DeepDyck: words of depth >= D
def ref_depth(lang: Dyck, s: str) -> int:
    """Maximum running count of openers minus closers, by a plain loop."""
    h = top = 0
    for c in s:
        h += 1 if lang.alphabet.symbols.index(c) % 2 == 0 else -1
        top = max(top, h)
    return top


@pytest.mark.parametrize("k, length, depth", [(1, 10, 3), (2, 8, 3), (1, 12, 1), (3, 6, 2)],
                         ids=str)
def test_deep_dyck_count_and_exact_uniformity_by_brute_force(k, length, depth):
    lang = DeepDyck(k, depth)
    words = [w for w in all_strings(lang.alphabet.symbols, length)
             if ref_member(Dyck(k), w) and ref_depth(lang, w) >= depth]
    assert len(words) == lang.count(length) > 0
    # the length among others in one batch: rows of other lengths run beside it
    n = 20_000
    others = [2 * depth, length + 4] * (n // 8)
    rng = np.random.default_rng(2024)
    sample = lang.sample(rng, list(rng.permutation([length] * n + others)))
    assert all(ref_member(Dyck(k), w) and ref_depth(lang, w) >= depth for w in sample)
    index = {w: i for i, w in enumerate(words)}
    observed = np.bincount([index[w] for w in sample if len(w) == length], minlength=len(words))
    assert observed.sum() == n
    assert chisquare(observed).pvalue > 1e-3


def test_deep_dyck_count_is_all_words_less_the_shallow_ones():
    for k, length, depth in [(2, 60, 12), (1, 60, 12), (3, 40, 2), (1, 200, 30)]:
        expected = Dyck(k).count(length) - Dyck(k, max_depth=depth - 1).count(length)
        assert DeepDyck(k, depth).count(length) == expected > 0
    assert DeepDyck(2, 1).count(10) == Dyck(2).count(10)  # every non-empty word
    assert DeepDyck(1, 3).count(6) == 1 and DeepDyck(1, 3).count(4) == 0
    assert DeepDyck(1, 3).count(7) == 0 and DeepDyck(1, 3).log_count(4) == -math.inf
    assert DeepDyck(2, 12).log_count(60) == pytest.approx(math.log(DeepDyck(2, 12).count(60)))


def test_deep_dyck_long_samples_are_deep_members():
    lang = DeepDyck(3, 30)
    codes, lengths = lang.sample_codes(np.random.default_rng(7), [60, 300, 64, 1000, 60])
    assert lang.is_member((codes, lengths)).all()
    assert (lang.max_depths(codes, lengths) >= 30).all()
    assert lang.max_depths(codes[:1], lengths[:1]).tolist() == [30]  # only (^30 )^30 is that short
    again = lang.sample_codes(np.random.default_rng(7), [60, 300, 64, 1000, 60])
    assert (again[0] == codes).all()


def test_deep_dyck_identity_shortest_word_and_errors():
    lang = DeepDyck(2, 3)
    assert lang.name == "Dyck-2 (depth >= 3)" and lang.max_depth is None
    assert repr(lang) == "DeepDyck(k=2, min_depth=3, pairs=('()', '[]'))"
    assert lang == DeepDyck(2, 3) and hash(lang) == hash(DeepDyck(2, 3))
    assert lang != DeepDyck(2, 4) and lang != Dyck(2) and hash(lang) != hash(DeepDyck(2, 4))
    assert (lang.shortest_word, Dyck(2).shortest_word, Dyck(2, 3).shortest_word) == (6, 0, 0)
    assert "([])" in lang  # membership is Dyck-2's; depth is what sampling restricts
    with pytest.raises(ValueError, match=r"lengths\[1\] = 4 is below 2 \* min_depth = 6"):
        lang.sample_codes(np.random.default_rng(0), [6, 4])
    with pytest.raises(ValueError, match=r"lengths\[0\] = 0 .*min_depth"):
        lang.sample(np.random.default_rng(0), [0])
    with pytest.raises(ValueError, match=r"lengths\[0\] = 7 is odd"):
        lang.sample(np.random.default_rng(0), [7])
    for bad in (0, 1.5, True, None):
        with pytest.raises(ValueError, match="min_depth"):
            DeepDyck(2, bad)
