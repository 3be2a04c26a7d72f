"""Tests for dyckbook.nn.tokenizer: the classifier's token layout and its inverse."""

import numpy as np
import pytest
import torch

from dyckbook.data.languages import Dyck
from dyckbook.data.vocab import END, N_SPECIAL, PAD, PAD_CODE, START
from dyckbook.nn import tokenizer

LANG = Dyck(3)


def _codes(strings):
    return LANG.alphabet.encode(strings)


STRINGS = ["", "()", "([]){}", "]", "((((", "{[()]}()"]


def test_layout_start_symbols_end_then_pads():
    codes, lengths = _codes(STRINGS)
    tokens = tokenizer.encode(codes, lengths, width=10)
    assert tokens.dtype == torch.int64 and tokens.shape == (len(STRINGS), 12)
    symbols = {c: i for i, c in enumerate(LANG.alphabet.symbols)}
    for row, s in zip(tokens.tolist(), STRINGS):
        expected = [START] + [N_SPECIAL + symbols[c] for c in s] + [END]
        assert row == expected + [PAD] * (12 - len(expected))


def test_round_trip_at_any_width():
    rng = np.random.default_rng(0)
    strings = ["".join(rng.choice(list(LANG.alphabet.symbols), n)) for n in rng.integers(0, 15, 50)]
    codes, lengths = _codes(strings)
    for width in (None, 14, 30):
        back_codes, back_lengths = tokenizer.decode(tokenizer.encode(codes, lengths, width))
        assert (back_lengths == lengths).all()
        assert LANG.alphabet.decode(back_codes, back_lengths) == strings
        assert back_codes.dtype == np.uint8 and back_codes.shape == codes.shape
        assert (back_codes[np.arange(codes.shape[1]) >= lengths[:, None]] == PAD_CODE).all()
    # numpy tokens decode the same way
    tokens = tokenizer.encode(codes, lengths).numpy()
    assert (tokenizer.decode(tokens)[1] == lengths).all()


def test_padding_garbage_in_codes_is_ignored():
    codes, lengths = _codes(["()", "(())"])
    codes[0, 2:] = 5  # a symbol code beyond the first string's length
    tokens = tokenizer.encode(codes, lengths)
    assert tokens[0].tolist() == [START, 3, 4, END, PAD, PAD]


def test_width_errors():
    codes, lengths = _codes(["()()", "()"])
    with pytest.raises(ValueError, match="width must be >= the longest string \\(4\\), got 3"):
        tokenizer.encode(codes, lengths, width=3)
    with pytest.raises(ValueError, match="tokens must be"):
        tokenizer.decode(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens must be"):
        tokenizer.decode(torch.zeros((2, 1), dtype=torch.long))
