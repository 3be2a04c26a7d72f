"""Tests for dyckbook.tokenizer: layout, round trips, the codes fast path, and every bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dyckbook.languages import Dyck
from dyckbook.tokenizer import END, PAD, PAD_CODE, START, DyckTokenizer

ALPHABETS = ["()", "()[]{}", "()[]{}<>⟨⟩⟦⟧⌈⌉⌊⌋", "𝟘𝟙𝟚𝟛"]  # ASCII, > U+00FF, astral


def reference_encode(tokenizer: DyckTokenizer, strings: list[str]) -> np.ndarray:
    """Slow, obviously correct layout: [start] s [end] then pads, per row."""
    width = max(len(s) for s in strings) + 2
    rows = []
    for s in strings:
        row = [START] + [3 + tokenizer.alphabet.index(c) for c in s] + [END]
        rows.append(row + [PAD] * (width - len(row)))
    return np.array(rows, dtype=np.int64)


def batches(alphabet: str, max_len: int = 40) -> st.SearchStrategy[list[str]]:
    return st.lists(st.text(alphabet=alphabet, max_size=max_len), min_size=1, max_size=12)


def test_ids_and_layout():
    tok = DyckTokenizer("()[]")
    assert (START, PAD, END) == (0, 1, 2)
    assert tok.vocab_size == 7
    assert tok.token_names == ["[start]", "[pad]", "[end]", "(", ")", "[", "]"]
    tokens = tok.encode(["(]", "", "[()]"])
    assert tokens.dtype == torch.int64
    assert tokens.tolist() == [
        [0, 3, 6, 2, 1, 1],
        [0, 2, 1, 1, 1, 1],
        [0, 5, 3, 4, 6, 2],
    ]
    assert tok.names(tokens[0]) == ["[start]", "(", "]", "[end]", "[pad]", "[pad]"]


def test_language_object_gives_its_alphabet():
    tok = DyckTokenizer(Dyck(3))
    assert tok.alphabet == "()[]{}"
    assert tok == DyckTokenizer("()[]{}")
    assert tok.encode(["{"]).tolist() == [[0, 7, 2]]


def test_padding_is_per_batch():
    tok = DyckTokenizer("()")
    assert tok.encode(["()"]).shape == (1, 4)
    assert tok.encode(["()", "(())()"]).shape == (2, 8)
    assert tok.encode(["()"], max_length=100).shape == (1, 4)


@pytest.mark.parametrize("alphabet", ALPHABETS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_round_trip_and_reference_layout(alphabet, data):
    strings = data.draw(batches(alphabet))
    tok = DyckTokenizer(alphabet)
    tokens = tok.encode(strings)
    assert tokens.dtype == torch.int64
    np.testing.assert_array_equal(tokens.numpy(), reference_encode(tok, strings))
    assert tok.decode(tokens) == strings


@settings(max_examples=30, deadline=None)
@given(strings=st.lists(st.text(alphabet="()[]", min_size=60, max_size=300), min_size=1,
                        max_size=6))
def test_round_trip_long_strings(strings):
    # Long strings take the row-layout fast path; it must agree with the reference.
    tok = DyckTokenizer("()[]")
    tokens = tok.encode(strings)
    np.testing.assert_array_equal(tokens.numpy(), reference_encode(tok, strings))
    assert tok.decode(tokens) == strings


@pytest.mark.parametrize("alphabet", ALPHABETS[:3])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_encode_codes_matches_encode(alphabet, data):
    strings = data.draw(batches(alphabet))
    language = Dyck(len(alphabet) // 2, pairs=[alphabet[i:i + 2] for i in range(0, len(alphabet), 2)])
    codes, lengths = language.encode(strings)
    tok = DyckTokenizer(language)
    assert torch.equal(tok.encode_codes(codes, lengths), tok.encode(strings))


def test_encode_codes_ignores_extra_columns_and_pad_code():
    tok = DyckTokenizer("()")
    codes = np.array([[0, 1, PAD_CODE, PAD_CODE], [0, PAD_CODE, PAD_CODE, PAD_CODE]], np.uint8)
    assert tok.encode_codes(codes, np.array([2, 1])).tolist() == [[0, 3, 4, 2], [0, 3, 2, 1]]


def test_decode_drops_every_special_token():
    tok = DyckTokenizer("()")
    assert tok.decode(torch.tensor([[0, 3, 1, 4, 2, 1, 0, 2]])) == ["()"]
    assert tok.decode([0, 3, 4, 2, 1]) == ["()"]  # one row
    assert tok.decode(np.array([[0, 2, 1]])) == [""]


# ----------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("alphabet", ["()", "()[]"])
@pytest.mark.parametrize("length", [3, 200])  # both encode paths
def test_character_outside_alphabet_is_named(alphabet, length):
    tok = DyckTokenizer(alphabet)
    strings = ["()" * (length // 2), "(" * 5 + "x" + ")" * 5]
    with pytest.raises(ValueError, match=r"strings\[1\] has character 'x' \(U\+0078\) at position 5"):
        tok.encode(strings)


@pytest.mark.parametrize("char, point", [("ā", "U+0101"), ("⟨", "U+27E8"), ("😀", "U+1F600"),
                                         ("\x01", "U+0001"), ("\ud800", "U+D800")])
@pytest.mark.parametrize("length", [3, 200])
def test_any_code_point_outside_alphabet(char, point, length):
    tok = DyckTokenizer("()")
    strings = ["", "()" * (length // 2) + char]
    with pytest.raises(ValueError) as info:
        tok.encode(strings)
    message = str(info.value)
    assert "strings[1]" in message and point in message
    assert f"position {2 * (length // 2)}" in message


def test_astral_alphabet_positions_count_code_points():
    tok = DyckTokenizer("𝟘𝟙")
    with pytest.raises(ValueError, match=r"strings\[0\] has character '\(' \(U\+0028\) at position 2"):
        tok.encode(["𝟘𝟙("])


def test_over_long_string():
    tok = DyckTokenizer("()")
    with pytest.raises(ValueError, match=r"strings\[1\] has length 6, longer than max_length=4"):
        tok.encode(["()", "((()))"], max_length=4)
    with pytest.raises(ValueError, match=r"max_length=4"):
        tok.encode_codes(np.zeros((1, 6), np.uint8), np.array([6]), max_length=4)
    with pytest.raises(ValueError, match="max_length must be >= 0"):
        tok.encode(["()"], max_length=-1)


def test_empty_batch():
    tok = DyckTokenizer("()")
    with pytest.raises(ValueError, match="must not be empty"):
        tok.encode([])
    with pytest.raises(ValueError, match="must not be empty"):
        tok.encode_codes(np.zeros((0, 3), np.uint8), np.zeros(0, np.int64))


@pytest.mark.parametrize("bad", [["()", 3], ["()", None], ["()", b"()"], ["()", ["(", ")"]]])
def test_non_string_element(bad):
    with pytest.raises(ValueError, match=r"strings\[1\] must be a str"):
        DyckTokenizer("()").encode(bad)


def test_bare_string_is_refused():
    with pytest.raises(ValueError, match="wrap it in a list"):
        DyckTokenizer("()").encode("()")


def test_bad_alphabets():
    with pytest.raises(ValueError, match="must not be empty"):
        DyckTokenizer("")
    with pytest.raises(ValueError, match=r"repeats '\(' \(U\+0028\)"):
        DyckTokenizer("(()")
    with pytest.raises(ValueError, match="language_or_alphabet"):
        DyckTokenizer(3)


def test_bad_codes():
    tok = DyckTokenizer("()")
    with pytest.raises(ValueError, match=r"codes\[0, 1\] = 5 is not a symbol code"):
        tok.encode_codes(np.array([[0, 5]], np.uint8), np.array([2]))
    with pytest.raises(ValueError, match="only 2 positions"):
        tok.encode_codes(np.array([[0, 1]], np.uint8), np.array([3]))
    with pytest.raises(ValueError, match=r"shape \(batch,\)"):
        tok.encode_codes(np.array([[0, 1]], np.uint8), np.array([2, 2]))


def test_bad_token_ids():
    tok = DyckTokenizer("()")
    with pytest.raises(ValueError, match=r"tokens\[0, 2\] = 5 is not a token id \(vocab_size=5\)"):
        tok.decode(torch.tensor([[0, 3, 5, 2]]))
    with pytest.raises(ValueError, match="not a token id"):
        tok.decode(torch.tensor([[0, -1]]))
    with pytest.raises(ValueError, match="integers"):
        tok.decode(np.array([[0.0, 3.0]]))
