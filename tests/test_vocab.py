"""Tests for dyckbook.data.vocab: ids, pairs, and the string <-> code encoder."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dyckbook.data.vocab import (
    BOS,
    DEFAULT_PAIRS,
    END,
    EOS,
    MAX_K,
    N_SPECIAL,
    PAD,
    PAD_CODE,
    SEQ_PAD,
    START,
    Alphabet,
    check_codes,
    check_pairs,
)


def test_ids_and_defaults():
    assert (START, PAD, END) == (0, 1, 2) and (SEQ_PAD, BOS, EOS) == (0, 1, 2)
    assert N_SPECIAL == 3 and PAD_CODE == 255 and 2 * MAX_K - 1 < PAD_CODE
    assert len(set("".join(DEFAULT_PAIRS))) == 2 * len(DEFAULT_PAIRS) == 16
    assert check_pairs(2, None) == ("()", "[]")
    assert check_pairs(2, ["ab", "cd"]) == ("ab", "cd")


@pytest.mark.parametrize(
    ("k", "pairs", "match"),
    [
        (9, None, "k=9"),
        (2, "()[]", "the str"),
        (2, ["()"], "exactly k=2"),
        (2, ["()", "[]]"], r"pairs\[1\]"),
        (2, ["()", "(]"], "distinct characters"),
        (1, [3], r"pairs\[0\]"),
    ],
)
def test_check_pairs_errors(k, pairs, match):
    with pytest.raises(ValueError, match=match):
        check_pairs(k, pairs)


@pytest.mark.parametrize("k", [0, MAX_K + 1, 2.0, True, "2"])
def test_alphabet_rejects_bad_k(k):
    with pytest.raises(ValueError, match="k must be"):
        Alphabet(k, pairs=None if not isinstance(k, int) or k < 9 else ["()"] * k)


def test_symbols_and_codes():
    a = Alphabet(3)
    assert a.symbols == "()[]{}" and a.k == 3 and a.pairs == DEFAULT_PAIRS[:3]
    codes, lengths = a.encode(["([]{})", "", ")"])
    assert codes.dtype == np.uint8 and lengths.dtype == np.int64
    assert codes.tolist() == [[0, 2, 3, 4, 5, 1], [255] * 6, [1] + [255] * 5]
    assert lengths.tolist() == [6, 0, 1]
    assert a.encode([])[0].shape == (0, 0) and a.decode(*a.encode([])) == []


@given(st.lists(st.text(alphabet="()⟨⟩⌊⌋", max_size=30), max_size=12))
def test_round_trip_non_ascii(words):
    a = Alphabet(8)
    codes, lengths = a.encode(words)
    assert codes.shape == (len(words), max(map(len, words), default=0))
    for row, w in zip(codes, words):
        assert row[: len(w)].tolist() == [a.symbols.index(c) for c in w]
        assert (row[len(w) :] == PAD_CODE).all()
    assert a.decode(codes, lengths) == words


@given(st.lists(st.text(alphabet="()[]{}<>", max_size=40), max_size=12))
def test_round_trip_ascii(words):
    a = Alphabet(4)
    assert a.decode(*a.encode(words)) == words


@pytest.mark.parametrize("bad", ["x", "\x00", "é", "\U0001f600", "«", "⁅", " ", "\ud800"])
@pytest.mark.parametrize("k", [2, 8])
def test_encode_names_string_position_and_character(bad, k):
    with pytest.raises(ValueError) as err:
        Alphabet(k).encode(["()", "", "((" + bad + "))"])
    msg = str(err.value)
    assert "strings[2]" in msg and "position 2" in msg and repr(bad) in msg
    assert f"U+{ord(bad):04X}" in msg


def test_encode_rejects_bad_containers():
    a = Alphabet(1)
    with pytest.raises(ValueError, match=r"sequence of str, got '\(\)'"):
        a.encode("()")
    with pytest.raises(ValueError, match=r"strings\[1\] must be a str, got int"):
        a.encode(["()", 3])
    with pytest.raises(ValueError, match="strings must be a sequence"):
        a.encode(5)


def test_decode_and_check_codes_errors():
    a = Alphabet(1)
    with pytest.raises(ValueError, match=r"codes\[1, 1\] = 2"):
        a.decode(np.array([[0, 1], [0, 2]], dtype=np.uint8), np.array([2, 2]))
    assert a.decode(np.array([[0, 9]], dtype=np.uint8), np.array([1])) == ["("]  # pads ignored
    with pytest.raises(ValueError, match="codes must be uint8"):
        check_codes(np.zeros((1, 2), dtype=np.int64), [2], 2)
    with pytest.raises(ValueError, match="lengths must be ints"):
        check_codes(np.zeros((2, 2), dtype=np.uint8), [2], 2)
    with pytest.raises(ValueError, match=r"lengths\[1\] = 3"):
        check_codes(np.zeros((2, 2), dtype=np.uint8), [2, 3], 2)


def test_equality_hash_repr():
    assert Alphabet(2) == Alphabet(2, ["()", "[]"]) and hash(Alphabet(2)) == hash(Alphabet(2))
    assert Alphabet(2) != Alphabet(2, ["ab", "cd"]) and Alphabet(1) != "()"
    assert repr(Alphabet(1)) == "Alphabet(k=1, pairs=('()',))"
