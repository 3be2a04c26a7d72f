"""Tests for hardness: the profile against window enumeration and independent checkers."""

from __future__ import annotations

import numpy as np
import pytest
from reference_checker import is_dyck, is_locally_valid

from dyckbook.data.hardness import BINS, MEMBER_BIN, profile, window_rejects
from dyckbook.data.languages import Dyck, locally_valid
from dyckbook.data.negatives import sample_negatives

LANGUAGES = [Dyck(1), Dyck(2), Dyck(3), Dyck(2, max_depth=3), Dyck(1, max_depth=2),
             Dyck(3, max_depth=4)]


def random_strings(lang, rng, n=3000, width=14):
    lengths = rng.integers(0, width + 1, n)
    codes = rng.integers(0, 2 * lang.k, (n, width)).astype(np.uint8)
    codes[np.arange(width) >= lengths[:, None]] = 255
    return codes, lengths


@pytest.mark.parametrize("lang", LANGUAGES, ids=repr)
def test_w_star_is_the_smallest_width_whose_window_check_rejects(lang):
    rng = np.random.default_rng(lang.k + 7 * (lang.max_depth or 0))
    sets = [random_strings(lang, rng)]
    if lang.max_depth != 1:
        sets.append(sample_negatives(lang, rng, [12] * 300 + [20] * 300, "hard", None)[:2])
    for codes, lengths in sets:
        p = profile(lang, codes, lengths)
        assert np.array_equal(p.member, lang.is_member((codes, lengths)))
        assert (p.w_star[p.member] == 0).all() and (p.w_star[~p.member] >= 2).all()
        assert (p.w_star[~p.member] <= lengths[~p.member] + 1).all()
        for width in range(2, 8 if lang.k < 3 else 7):  # the tables enumerate every window
            enumerated = ~locally_valid(lang, codes, lengths, width)
            assert np.array_equal(window_rejects(lang, codes, lengths, width), enumerated), width


def test_w_star_agrees_with_the_literal_definition_on_short_strings():
    lang = Dyck(2)
    rng = np.random.default_rng(3)
    codes, lengths = random_strings(lang, rng, 400, 10)
    strings = lang.alphabet.decode(codes, lengths)
    p = profile(lang, codes, lengths)
    for s, w_star, member in zip(strings, p.w_star, p.member):
        if member:
            continue
        rejects = [not is_locally_valid(s, lang.pairs, None, w) for w in range(2, 6)]
        assert rejects == [w >= w_star for w in range(2, 6)], (s, w_star)


def count_checks(s, pairs, max_depth):
    """(skeleton rejects, per-type rejects) by plain loops."""
    height, low, high = 0, 0, 0
    for ch in s:
        height += 1 if any(ch == p[0] for p in pairs) else -1
        low, high = min(low, height), max(high, height)
    skeleton = low < 0 or height != 0 or (max_depth is not None and high > max_depth)
    per_type = False
    for o, c in pairs:
        h, lo = 0, 0
        for ch in s:
            h += (ch == o) - (ch == c)
            lo = min(lo, h)
        per_type |= lo < 0 or h != 0
    return skeleton, per_type


def first_failure(s, pairs, max_depth):
    """Where a left-to-right stack first fails, or len(s) if only at the end."""
    closer_of = {p[0]: p[1] for p in pairs}
    stack = []
    for i, ch in enumerate(s):
        if ch in closer_of:
            stack.append(closer_of[ch])
            if max_depth is not None and len(stack) > max_depth:
                return i
        elif not stack or stack.pop() != ch:
            return i
    return len(s)


@pytest.mark.parametrize("lang", LANGUAGES, ids=repr)
def test_counters_and_end_distance_agree_with_loops(lang):
    rng = np.random.default_rng(11)
    codes, lengths = random_strings(lang, rng, 600, 12)
    p = profile(lang, codes, lengths)
    for i, s in enumerate(lang.alphabet.decode(codes, lengths)):
        member = is_dyck(s, lang.pairs, lang.max_depth)
        assert p.member[i] == member
        if member:
            assert (p.skeleton[i], p.per_type[i], p.end_distance[i]) == (False, False, -1)
            continue
        assert (p.skeleton[i], p.per_type[i]) == count_checks(s, lang.pairs, lang.max_depth)
        f = first_failure(s, lang.pairs, lang.max_depth)
        assert p.end_distance[i] == (0 if f >= len(s) else min(f, len(s) - 1 - f)), s


def test_bins_and_examples():
    lang = Dyck(3)
    strings = ["", "()", ")(", "([)]", "([" + "{}" * 3 + ")]", "(" + "[]" * 6 + "{" + "}" + ")",
               "(([" + "{}" * 5 + ")])"]
    codes, lengths = lang.alphabet.encode(strings)
    p = profile(lang, codes, lengths)
    assert p.w_star.tolist() == [0, 0, 2, 2, 8, 0, 12]  # the mismatched pair's span
    assert p.bins().tolist() == [MEMBER_BIN, MEMBER_BIN, "counter", "w<=4", "w<=8", MEMBER_BIN,
                                 "w>8"]
    assert p.end_distance.tolist()[2:5] == [0, 1, 1]
    assert set(p.bins()) <= {MEMBER_BIN, *BINS}
    one = profile(Dyck(1), *Dyck(1).alphabet.encode([")(", "(()())" + ")(" + "(())()", "()"]))
    assert one.counter.tolist() == [True, True, False]  # under k = 1 the count is the stack
    assert one.bins().tolist() == ["w<=4", "w<=8", MEMBER_BIN]  # binned by w* alone


def test_bad_arguments():
    lang = Dyck(1)
    codes, lengths = lang.alphabet.encode(["()"])
    with pytest.raises(ValueError, match="language"):
        profile("Dyck-1", codes, lengths)
    with pytest.raises(ValueError, match="width"):
        window_rejects(lang, codes, lengths, 1)
    with pytest.raises(ValueError, match="codes"):
        profile(lang, codes.astype(np.int64), lengths)
