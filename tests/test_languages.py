"""Tests for dyckbook.languages: membership, structure, counting and exact uniform sampling."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_checker import is_member as ref_member
from scipy.stats import chisquare

from dyckbook.languages import (
    DEFAULT_PAIRS,
    PAD_CODE,
    Dyck,
    ShuffleDyck,
    iter_length_chunks,
    sample_lengths,
)

LANGUAGES = [
    Dyck(1),
    Dyck(2),
    Dyck(3),
    Dyck(8),
    Dyck(2, max_depth=2),
    Dyck(1, max_depth=1),
    Dyck(3, max_depth=3),
    ShuffleDyck(1),
    ShuffleDyck(2),
    ShuffleDyck(3),
]
IDS = [lang.name for lang in LANGUAGES]


def all_strings(alphabet: str, n: int) -> list[str]:
    return ["".join(w) for w in itertools.product(alphabet, repeat=n)]


# --- membership -------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", LANGUAGES[:7] + LANGUAGES[7:], ids=IDS)
def test_membership_equals_reference_exhaustively(lang):
    max_n = 8 if lang.k <= 2 else 6
    if lang.k == 8:
        max_n = 4
    for n in range(max_n + 1):
        words = all_strings(lang.alphabet, n)
        batch = lang.is_member_batch(words)
        ref = np.array([ref_member(lang, w) for w in words])
        np.testing.assert_array_equal(batch, ref, err_msg=f"{lang.name} length {n}")
        assert int(ref.sum()) == lang.count(n)


@st.composite
def lang_and_strings(draw):
    lang = draw(st.sampled_from(LANGUAGES))
    # mostly near-balanced strings: random ones are almost never members
    words = []
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.booleans()):
            n = draw(st.integers(0, 15))
            words.append(draw(st.text(alphabet=lang.alphabet, min_size=n, max_size=n)))
        else:
            rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
            w = lang.sample(rng, [2 * draw(st.integers(0, 10))])[0]
            if w and draw(st.booleans()):  # a point mutation
                i = draw(st.integers(0, len(w) - 1))
                w = w[:i] + draw(st.sampled_from(lang.alphabet)) + w[i + 1 :]
            words.append(w)
    return lang, words


@given(lang_and_strings())
@settings(max_examples=150, deadline=None)
def test_batch_equals_single_equals_reference(case):
    lang, words = case
    batch = lang.is_member_batch(words)
    assert batch.dtype == bool and batch.shape == (len(words),)
    single = [lang.is_member(w) for w in words]
    ref = [ref_member(lang, w) for w in words]
    assert batch.tolist() == single == ref
    codes, lengths = lang.encode(words)
    assert lang.is_member_batch((codes, lengths)).tolist() == ref


def test_membership_of_large_mixed_batch_uses_chunks():
    lang = Dyck(2)
    rng = np.random.default_rng(0)
    lengths = sample_lengths(rng, 3000, 0, 3000)
    words = lang.sample(rng, lengths)
    words[::3] = [w[1:] + w[:1] for w in words[::3]]  # rotations: members only if length 0
    ref = np.array([ref_member(lang, w) for w in words])
    np.testing.assert_array_equal(lang.is_member_batch(words), ref)
    np.testing.assert_array_equal(lang.is_member_batch(lang.encode(words)), ref)


def test_codes_outside_the_alphabet_are_not_members():
    lang = Dyck(1)
    codes = np.array([[2, 3], [0, 1]], dtype=np.uint8)  # "[]" is not Dyck-1
    assert lang.is_member_batch((codes, np.array([2, 2]))).tolist() == [False, True]


# --- encoding ---------------------------------------------------------------------------------


@given(
    st.lists(
        st.text(alphabet=DEFAULT_PAIRS[0] + DEFAULT_PAIRS[4] + DEFAULT_PAIRS[7], max_size=20),
        max_size=10,
    )
)
def test_encode_decode_round_trip(words):
    lang = Dyck(8)
    codes, lengths = lang.encode(words)
    assert codes.dtype == np.uint8 and lengths.dtype == np.int64
    assert codes.shape == (len(words), max(map(len, words), default=0))
    assert lengths.tolist() == [len(w) for w in words]
    for row, w in zip(codes, words):
        assert row[: len(w)].tolist() == [lang.alphabet.index(c) for c in w]
        assert (row[len(w) :] == PAD_CODE).all()
    assert lang.decode(codes, lengths) == words


@pytest.mark.parametrize("bad", ["x", "\x00", "é", "\U0001f600", "⟨", " "])
def test_encode_rejects_foreign_characters_with_position(bad):
    lang = Dyck(2)
    with pytest.raises(ValueError) as err:
        lang.encode(["()", "[]", "(" + bad + ")"])
    msg = str(err.value)
    assert "strings[2]" in msg and "position 1" in msg and repr(bad) in msg
    with pytest.raises(ValueError, match="position 1"):
        lang.is_member("(" + bad + ")")


def test_encode_rejects_bad_containers():
    lang = Dyck(1)
    with pytest.raises(ValueError, match="strings"):
        lang.encode("()")
    with pytest.raises(ValueError, match=r"strings\[1\]"):
        lang.encode(["()", 3])
    with pytest.raises(ValueError, match="strings"):
        lang.is_member_batch("()")
    with pytest.raises(ValueError, match="codes"):
        lang.is_member_batch((np.zeros((2, 2), dtype=np.int64), np.array([2, 2])))
    with pytest.raises(ValueError, match="lengths"):
        lang.is_member_batch((np.zeros((2, 2), dtype=np.uint8), np.array([2, 3])))


def test_empty_batch():
    lang = Dyck(2)
    codes, lengths = lang.encode([])
    assert codes.shape == (0, 0) and lengths.shape == (0,)
    assert lang.is_member_batch([]).shape == (0,)
    assert lang.decode(codes, lengths) == []
    assert lang.sample(np.random.default_rng(0), []) == []


# --- structure --------------------------------------------------------------------------------


def test_depth_profile_and_matching():
    lang = Dyck(2)
    assert lang.depth_profile("([])").tolist() == [1, 2, 1, 0]
    assert lang.depth_profile(")(").tolist() == [-1, 0]
    assert lang.matching("([])()").tolist() == [3, 2, 1, 0, 5, 4]
    assert lang.matching("([)]").tolist() == [3, 2, 1, 0]  # skeleton matching ignores types
    assert lang.matching(")(()").tolist() == [-1, -1, 3, 2]
    sh = ShuffleDyck(2)
    assert sh.matching("([)]").tolist() == [2, 3, 0, 1]
    assert sh.depth_profile("([)]").tolist() == [1, 2, 1, 0]


@given(st.integers(0, 2**32 - 1), st.integers(0, 30))
@settings(max_examples=40, deadline=None)
def test_matching_pairs_are_consistent(seed, m):
    lang = Dyck(3)
    w = lang.sample(np.random.default_rng(seed), [2 * m])[0]
    partner = lang.matching(w)
    depth = lang.depth_profile(w)
    for i, j in enumerate(partner):
        assert partner[j] == i and j != i
        if i < j:
            assert lang.alphabet.index(w[i]) + 1 == lang.alphabet.index(w[j])
            assert depth[i] == depth[j] + 1


# --- counting ---------------------------------------------------------------------------------


def test_counts_closed_forms_and_logs():
    assert [Dyck(1).count(n) for n in range(0, 12, 2)] == [1, 1, 2, 5, 14, 42]
    assert Dyck(3).count(6) == 5 * 27
    assert Dyck(2).count(7) == 0
    assert Dyck(1, max_depth=1).count(10) == 1
    assert Dyck(1, max_depth=2).count(8) == 8  # 2^(m-1)
    assert ShuffleDyck(2).count(4) == 6 + 2 * 2  # (()),()() per type + 6 interleavings of ()[]
    for lang in LANGUAGES:
        for n in (0, 2, 10, 64):
            assert lang.log_count(n) == pytest.approx(math.log(lang.count(n)), rel=1e-9, abs=1e-9)
    assert Dyck(2).log_count(3) == -math.inf
    assert Dyck(3).log_count(4096) == pytest.approx(math.log(Dyck(3).count(4096)), rel=1e-9)


# --- sampling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", LANGUAGES, ids=IDS)
def test_samples_are_members_of_requested_lengths(lang):
    rng = np.random.default_rng(1)
    lengths = np.concatenate([sample_lengths(rng, 300, 0, 60), [0, 2, 4, 200]])
    words = lang.sample(rng, lengths)
    assert [len(w) for w in words] == lengths.tolist()
    assert all(ref_member(lang, w) for w in words)
    codes, out_lengths = lang.sample_codes(rng, lengths)
    assert codes.dtype == np.uint8 and codes.shape == (lengths.size, lengths.max())
    np.testing.assert_array_equal(out_lengths, lengths)


@pytest.mark.parametrize("lang", [Dyck(3), Dyck(2, max_depth=5), ShuffleDyck(2)], ids=str)
def test_long_lengths(lang):
    rng = np.random.default_rng(2)
    words = lang.sample(rng, [4096, 4096, 4100, 1000])
    assert [len(w) for w in words] == [4096, 4096, 4100, 1000]
    assert all(ref_member(lang, w) for w in words)


@pytest.mark.parametrize("lang", LANGUAGES, ids=IDS)
def test_determinism(lang):
    lengths = [0, 2, 8, 30, 8, 100]
    a = lang.sample_codes(np.random.default_rng(7), lengths)[0]
    b = lang.sample_codes(np.random.default_rng(7), lengths)[0]
    assert a.tobytes() == b.tobytes()
    if lang.count(100) > 1:  # Dyck-(1,1) has one word per length
        c = lang.sample_codes(np.random.default_rng(8), lengths)[0]
        assert a.tobytes() != c.tobytes()


@pytest.mark.parametrize(
    ("lang", "length", "per_cell"),
    [
        (Dyck(2), 6, 250),  # 5 * 8 = 40 words
        (Dyck(2, max_depth=2), 8, 250),  # 13 * 16 = 208 words
        (ShuffleDyck(2), 6, 250),
        (Dyck(1), 10, 400),  # 42 words
        (Dyck(3, max_depth=1), 4, 400),  # 9 words
    ],
    ids=["dyck2_len6", "dyck2_d2_len8", "shuffle2_len6", "dyck1_len10", "dyck3_d1_len4"],
)
def test_uniformity_chi_square(lang, length, per_cell):
    words = [w for w in all_strings(lang.alphabet, length) if ref_member(lang, w)]
    assert len(words) == lang.count(length)
    n = per_cell * len(words)
    sample = lang.sample(np.random.default_rng(12345), [length] * n)
    index = {w: i for i, w in enumerate(words)}
    observed = np.bincount([index[w] for w in sample], minlength=len(words))
    assert observed.sum() == n
    p = chisquare(observed).pvalue
    assert p > 1e-4, (lang.name, p)


def test_uniform_skeleton_statistics_at_large_length():
    # the mean height at the middle of a uniform Dyck path of 2m steps is ~ sqrt(pi m) - ...:
    # compare with the exact mean from ballot numbers rather than an asymptotic
    m = 200
    lang = Dyck(1)
    words = lang.sample(np.random.default_rng(3), [2 * m] * 2000)
    mid = np.array([lang.depth_profile(w)[m - 1] for w in words])

    # exact distribution of the height after m steps of a uniform Dyck path of length 2m
    def paths(steps, h):  # paths from 0 to h in `steps` steps staying >= 0 (ballot)
        if (steps - h) % 2 or h > steps:
            return 0
        up = (steps + h) // 2
        return math.comb(steps, up) * (h + 1) // (up + 1)

    total = math.comb(2 * m, m) // (m + 1)
    mean = sum(h * paths(m, h) ** 2 for h in range(m + 1)) / total
    assert abs(mid.mean() - mean) < 4 * mid.std() / math.sqrt(mid.size)


# --- lengths and argument checks --------------------------------------------------------------


def test_sample_lengths():
    rng = np.random.default_rng(0)
    x = sample_lengths(rng, 20000, 3, 11)
    assert x.dtype == np.int64 and set(x.tolist()) == {4, 6, 8, 10}
    counts = np.bincount(x)[4::2]
    assert counts.min() > 4500
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
    with pytest.raises(ValueError, match="k"):
        Dyck(0)
    with pytest.raises(ValueError, match="k=9"):
        Dyck(9)
    with pytest.raises(ValueError, match="k"):
        Dyck(2.0)
    with pytest.raises(ValueError, match="max_depth"):
        Dyck(2, max_depth=0)
    with pytest.raises(ValueError, match="pairs"):
        Dyck(2, pairs=["()"])
    with pytest.raises(ValueError, match="pairs"):
        Dyck(2, pairs=["()", "(]"])
    with pytest.raises(ValueError, match=r"pairs\[1\]"):
        Dyck(2, pairs=["()", "[]]"])
    lang = Dyck(2)
    with pytest.raises(ValueError, match=r"lengths\[1\] = 3"):
        lang.sample(rng, [2, 3])
    with pytest.raises(ValueError, match=r"lengths\[0\] = -2"):
        lang.sample(rng, [-2])
    with pytest.raises(ValueError, match="lengths"):
        lang.sample(rng, 4)
    with pytest.raises(ValueError, match="lengths"):
        lang.sample(rng, [2.0])
    with pytest.raises(ValueError, match="rng"):
        lang.sample(np.random.RandomState(0), [2])
    with pytest.raises(ValueError, match="length"):
        lang.count(-2)
    with pytest.raises(ValueError, match="s must be a str"):
        lang.is_member(None)


def test_custom_pairs_and_large_k():
    lang = Dyck(3, pairs=["ab", "cd", "ef"])
    assert lang.alphabet == "abcdef" and lang.openers == "ace" and lang.closers == "bdf"
    assert lang.is_member("acdb") and not lang.is_member("adcb")
    pairs = [chr(0x4E00 + 2 * i) + chr(0x4E01 + 2 * i) for i in range(20)]
    big = Dyck(20, pairs=pairs)
    words = big.sample(np.random.default_rng(0), [40] * 20)
    assert all(ref_member(big, w) for w in words)
    assert Dyck(2) == Dyck(2) and Dyck(2) != Dyck(2, max_depth=3) and Dyck(2) != ShuffleDyck(2)


def test_iter_length_chunks_cover_batch():
    lengths = np.array([5, 100, 0, 7, 100, 3])
    chunks = list(iter_length_chunks(lengths, max_cells=200))
    assert sorted(np.concatenate(chunks).tolist()) == list(range(6))
    for c in chunks:
        assert c.size == 1 or c.size * lengths[c].max() <= 200
