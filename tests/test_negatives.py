"""Tests for dyckbook.negatives: every negative is a verified non-member meeting its kind's promises."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_checker import is_member as ref_member

from dyckbook.languages import Dyck, ShuffleDyck, sample_lengths
from dyckbook.negatives import (
    HARD_KINDS,
    NEGATIVE_KINDS,
    available_kinds,
    sample_negative_codes,
    sample_negatives,
)
from dyckbook.thesis import thesis_unbalanced

LANGUAGES = [
    Dyck(1),
    Dyck(2),
    Dyck(3),
    Dyck(2, max_depth=1),
    Dyck(2, max_depth=2),
    Dyck(1, max_depth=1),
    ShuffleDyck(1),
    ShuffleDyck(2),
    ShuffleDyck(3),
]
IDS = [lang.name for lang in LANGUAGES]


def max_depth_of(lang, s: str) -> int:
    return int(lang.depth_profile(s).max(initial=0))


def check_hard(lang, s: str) -> None:
    assert len(s) % 2 == 0
    assert s[0] in lang.openers
    for opener, closer in lang.pairs:
        assert s.count(opener) == s.count(closer)
    assert not ref_member(lang, s)
    if lang.max_depth is not None:
        assert max_depth_of(lang, s) <= lang.max_depth


@pytest.mark.parametrize("lang", LANGUAGES, ids=IDS)
def test_hard_mixture_constraints(lang):
    rng = np.random.default_rng(0)
    lengths = np.concatenate([sample_lengths(rng, 600, 4, 40), [4, 4, 6, 200]])
    strings, kinds = sample_negatives(lang, rng, lengths)
    assert [len(s) for s in strings] == lengths.tolist()
    for s in strings:
        check_hard(lang, s)
    expected = {k for k in HARD_KINDS if k in available_kinds(lang, 40)}
    assert set(kinds) == expected  # every available kind is used
    assert not lang.is_member_batch(strings).any()


@pytest.mark.parametrize("lang", LANGUAGES, ids=IDS)
@pytest.mark.parametrize("kind", HARD_KINDS)
def test_each_hard_kind(lang, kind):
    rng = np.random.default_rng(1)
    if kind not in available_kinds(lang, 8):
        with pytest.raises(ValueError, match="length 8"):
            sample_negatives(lang, rng, [8], kinds=kind)
        return
    lengths = [4, 4, 6, 8, 10, 30, 31 - 1, 64] * 10
    strings, kinds = sample_negatives(lang, rng, lengths, kinds=kind)
    assert kinds == [kind] * len(lengths)
    for s in strings:
        check_hard(lang, s)


def test_kind_shapes():
    rng = np.random.default_rng(2)
    lang = Dyck(2)
    for s in sample_negatives(lang, rng, [20] * 50, kinds="crossing")[0]:
        # skeleton untouched: the open/close pattern is a Dyck-1 word
        assert ref_member(Dyck(1), s.translate(str.maketrans("[]", "()")))
    for s in sample_negatives(lang, rng, [20] * 50, kinds="deep_mismatch")[0]:
        assert ref_member(Dyck(1), s.translate(str.maketrans("[]", "()")))
    for s in sample_negatives(lang, rng, [20] * 50, kinds="dip")[0]:
        assert lang.depth_profile(s).min() == -1
    for s in sample_negatives(lang, rng, [20] * 50, kinds="unclosed_tail")[0]:
        partner = lang.matching(s)
        assert partner[-1] == -1 or s[-1] in lang.closers
        unclosed = [i for i, p in enumerate(partner) if p < 0 and s[i] in lang.openers]
        assert unclosed and lang.depth_profile(s).min() < 0


@pytest.mark.parametrize("lang", LANGUAGES, ids=IDS)
def test_random_kind(lang):
    rng = np.random.default_rng(3)
    lengths = list(range(1, 30)) * 5
    strings, kinds = sample_negatives(lang, rng, lengths, kinds="random")
    assert [len(s) for s in strings] == lengths and set(kinds) == {"random"}
    assert not any(ref_member(lang, s) for s in strings)
    assert len(set(strings)) > len(strings) // 2  # not a function of the length
    with pytest.raises(ValueError, match="length 0"):
        sample_negatives(lang, rng, [0], kinds="random")


def test_thesis_literal_is_a_function_of_the_length():
    lang = Dyck(3)
    a, _ = sample_negatives(lang, np.random.default_rng(0), [1, 7, 16, 16, 128], "thesis_literal")
    b, _ = sample_negatives(lang, np.random.default_rng(99), [16, 1, 7, 128, 16], "thesis_literal")
    assert a[2] == a[3] == b[0] == b[4] == thesis_unbalanced(3, 16)
    assert a[0] == b[1] and a[1] == b[2] and a[4] == b[3]
    assert not any(ref_member(lang, s) for s in a)
    assert "thesis_literal" not in available_kinds(ShuffleDyck(2), 8, ["thesis_literal"])
    assert available_kinds(lang, 0, ["thesis_literal", "random"]) == ()


def test_no_hard_kind_below_length_four():
    for lang in LANGUAGES:
        for n in (0, 1, 2, 3, 5):
            assert available_kinds(lang, n) == ()
        with pytest.raises(ValueError, match="length 2"):
            sample_negatives(lang, np.random.default_rng(0), [8, 2])
    assert available_kinds(Dyck(2), 4) == HARD_KINDS
    assert available_kinds(Dyck(1), 4) == ("dip", "unclosed_tail", "swap")
    assert available_kinds(Dyck(2, max_depth=1), 4) == ("dip", "swap", "deep_mismatch")
    assert available_kinds(ShuffleDyck(3), 6) == ("dip", "unclosed_tail", "swap")


def test_registry():
    assert set(HARD_KINDS) == {"dip", "unclosed_tail", "swap", "crossing", "deep_mismatch"}
    for name, kind in NEGATIVE_KINDS.items():
        assert kind.name == name and kind.description
        assert kind.hard == (name in HARD_KINDS)
        assert kind.min_length == (4 if kind.hard else 1)


@given(st.integers(0, 2**32 - 1), st.sampled_from(LANGUAGES))
@settings(max_examples=30, deadline=None)
def test_negatives_fail_reference_property(seed, lang):
    rng = np.random.default_rng(seed)
    lengths = sample_lengths(rng, 20, 4, 24)
    strings, _ = sample_negatives(lang, rng, lengths, kinds=list(HARD_KINDS) + ["random"])
    assert not any(ref_member(lang, s) for s in strings)
    assert [len(s) for s in strings] == lengths.tolist()


def test_determinism_and_codes_path():
    lang = Dyck(3)
    lengths = [4, 10, 10, 64, 200]
    a = sample_negative_codes(lang, np.random.default_rng(5), lengths)
    b = sample_negative_codes(lang, np.random.default_rng(5), lengths)
    assert a[0].tobytes() == b[0].tobytes() and a[2] == b[2]
    strings, kinds = sample_negatives(lang, np.random.default_rng(5), lengths)
    assert strings == lang.decode(a[0], a[1]) and kinds == a[2]


def test_long_lengths():
    lang = Dyck(3)
    strings, kinds = sample_negatives(lang, np.random.default_rng(6), [4096] * 10 + [4094] * 5)
    assert not lang.is_member_batch(strings).any()
    for s in strings:
        check_hard(lang, s)
    assert len(Counter(kinds)) >= 3


def test_bad_arguments():
    lang = Dyck(2)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="kinds"):
        sample_negatives(lang, rng, [4], kinds="easy")
    with pytest.raises(ValueError, match="kinds"):
        sample_negatives(lang, rng, [4], kinds=["dip", "nope"])
    with pytest.raises(ValueError, match="kinds"):
        sample_negatives(lang, rng, [4], kinds=[])
    with pytest.raises(ValueError, match="rng"):
        sample_negatives(lang, 0, [4])
    with pytest.raises(ValueError, match="language"):
        sample_negatives("Dyck-2", rng, [4])
    with pytest.raises(ValueError, match=r"lengths\[1\] = -4"):
        sample_negatives(lang, rng, [4, -4])
    with pytest.raises(ValueError, match="length 7"):
        sample_negatives(lang, rng, [7])
    with pytest.raises(ValueError, match="length"):
        available_kinds(lang, -1)
