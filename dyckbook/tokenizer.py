"""Tokenizer mapping bracket strings to int64 token tensors: ``[start] s [end] [pad]...``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

# Special token ids, compatible with the thesis' tokenizer; bracket ids follow from 3.
START, PAD, END = 0, 1, 2
N_SPECIAL = 3
SPECIAL_NAMES = ("[start]", "[pad]", "[end]")

# The language layer pads its uint8 code matrices with this value (see dyckbook.languages).
PAD_CODE = 255

_INVALID = b"\xff"  # marks a character outside the alphabet in the ASCII translate tables


def _describe(char: str) -> str:
    """``'x' (U+0078)``: the character and its code point, readable even when unprintable."""
    return f"{char!r} (U+{ord(char):04X})"


def _check_alphabet(alphabet: Any) -> str:
    if not isinstance(alphabet, str):
        raise ValueError(
            f"language_or_alphabet must be a language (with an .alphabet) or a str, "
            f"got {type(alphabet).__name__}")
    if len(alphabet) == 0:
        raise ValueError("alphabet must not be empty, got ''")
    if len(alphabet) > PAD_CODE:
        raise ValueError(f"alphabet has {len(alphabet)} symbols; at most {PAD_CODE} fit a uint8 code")
    seen: dict[str, int] = {}
    for position, char in enumerate(alphabet):
        if char in seen:
            raise ValueError(
                f"alphabet {alphabet!r} repeats {_describe(char)} at positions "
                f"{seen[char]} and {position}")
        seen[char] = position
    return alphabet


class AlphabetError(ValueError):
    """A character outside the alphabet; ``index``/``position``/``char`` locate it."""

    def __init__(self, message: str, index: int, position: int, char: str) -> None:
        super().__init__(message)
        self.index, self.position, self.char = index, position, char


class AlphabetIndex:
    """Vectorised map from characters to alphabet indexes (the language's symbol codes).

    Strings are joined and viewed as UTF-32 code points, so any code point (including ones above
    255 and astral ones) is looked up without a per-character Python loop.
    """

    def __init__(self, alphabet: str) -> None:
        self.alphabet = _check_alphabet(alphabet)
        points = np.array([ord(c) for c in alphabet], dtype=np.int64)
        # Dense table over 0..max code point of the alphabet; -1 marks "not in the alphabet".
        self._table = np.full(int(points.max()) + 1, -1, dtype=np.int16)
        self._table[points] = np.arange(len(alphabet), dtype=np.int16)

    def flat(self, strings: Sequence[str], what: str = "strings") -> tuple[np.ndarray, np.ndarray]:
        """Alphabet indexes of all strings concatenated, and the strings' lengths.

        Args:
            strings: the batch; every element must be a ``str``.
            what: the parameter name used in error messages.

        Returns:
            ``(indexes, lengths)``: int16 ``(sum of lengths,)`` and int64 ``(batch,)``.

        Raises:
            ValueError: an element is not a ``str``; AlphabetError (a ValueError): a character is
                outside the alphabet (the message names the character, its code point, its
                position and the string index).
        """
        try:
            joined = "".join(strings)
        except TypeError:
            for index, item in enumerate(strings):
                if not isinstance(item, str):
                    raise ValueError(
                        f"{what}[{index}] must be a str, got {type(item).__name__}: {item!r}"
                    ) from None
            raise
        lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
        # surrogatepass: a lone surrogate is still one code point, reported as out of alphabet.
        points = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        table = self._table
        inside = points < len(table)
        if inside.all():
            indexes = table[points]
        else:
            indexes = np.full(len(points), -1, dtype=np.int16)
            indexes[inside] = table[points[inside]]
        if len(indexes) and indexes.min() < 0:
            bad = int(np.flatnonzero(indexes < 0)[0])
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            # The last string starting at or before `bad` holds it (empty strings before it share
            # its start, so side="right" skips them).
            string_index = int(np.searchsorted(starts, bad, side="right") - 1)
            position = bad - int(starts[string_index])
            raise AlphabetError(
                f"{what}[{string_index}] has character {_describe(joined[bad])} at position "
                f"{position}, which is not in the alphabet {self.alphabet!r}",
                string_index, position, joined[bad])
        return indexes, lengths


class DyckTokenizer:
    """Token ids for bracket strings: ``[start]``=0, ``[pad]``=1, ``[end]``=2, symbols from 3.

    The bracket with alphabet index ``i`` (language code ``i``) has token id ``3 + i``, so for the
    default pairs ``(``=3, ``)``=4, ``[``=5, ``]``=6, ...

    Args:
        language_or_alphabet: a language object (anything with an ``alphabet`` string, e.g.
            ``dyckbook.Dyck``) or the alphabet string itself, e.g. ``"()[]"``.
    """

    start_id = START
    pad_id = PAD
    end_id = END

    def __init__(self, language_or_alphabet: Any) -> None:
        alphabet = getattr(language_or_alphabet, "alphabet", language_or_alphabet)
        self._index = AlphabetIndex(alphabet)
        self.alphabet: str = self._index.alphabet
        # Code point of each token id's symbol; specials map to 0 and are never emitted by decode.
        self._points = np.zeros(self.vocab_size, dtype=np.uint32)
        self._points[N_SPECIAL:] = [ord(c) for c in self.alphabet]
        # bytes.translate tables for the printable-ASCII fast path of encode(): characters ->
        # token ids, 0xFF for anything outside the alphabet; the layout table additionally maps
        # \x01/\x02/\x03 to [start]/[end]/[pad].
        self._ascii_table: bytes | None = None
        if all(32 <= ord(c) < 127 for c in self.alphabet):
            table = bytearray([_INVALID[0]]) * 256
            for index, char in enumerate(self.alphabet):
                table[ord(char)] = N_SPECIAL + index
            self._ascii_table = bytes(table)
            table[1], table[2], table[3] = START, END, PAD
            self._layout_table = bytes(table)

    @property
    def vocab_size(self) -> int:
        """Number of token ids: 3 specials plus one per alphabet symbol."""
        return N_SPECIAL + len(self.alphabet)

    @property
    def token_names(self) -> list[str]:
        """Name of each token id, for labelling plots: ``["[start]", "[pad]", "[end]", "(", ...]``."""
        return list(SPECIAL_NAMES) + list(self.alphabet)

    def __repr__(self) -> str:
        return f"DyckTokenizer(alphabet={self.alphabet!r}, vocab_size={self.vocab_size})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DyckTokenizer) and other.alphabet == self.alphabet

    def __hash__(self) -> int:
        return hash(("DyckTokenizer", self.alphabet))

    # ------------------------------------------------------------------ encoding

    def encode(self, strings: Sequence[str], max_length: int | None = None) -> torch.Tensor:
        """Tokenize a batch of strings, padding to the longest string in the batch.

        Args:
            strings: the batch (a list or tuple of ``str``; a bare ``str`` is refused because it is
                ambiguous).
            max_length: optional limit on a string's length (specials excluded); a longer string
                raises. The output is still padded only to the batch's longest string.

        Returns:
            int64 tensor ``(batch, pos)`` with ``pos = longest length + 2``, laid out
            ``[start] s [end] [pad]...``.

        Raises:
            ValueError: empty batch, non-``str`` element, character outside the alphabet, a string
                longer than ``max_length``, or a bad ``max_length``.
        """
        if isinstance(strings, str):
            raise ValueError(
                f"strings must be a sequence of str, got a single str {strings[:20]!r}; "
                f"wrap it in a list")
        if isinstance(strings, np.ndarray):
            strings = strings.tolist()
        if not isinstance(strings, Sequence):
            raise ValueError(f"strings must be a sequence of str, got {type(strings).__name__}")
        if len(strings) == 0:
            raise ValueError("strings must not be empty (an empty batch has no shape to pad to)")
        if self._ascii_table is not None:
            fast = self._encode_ascii(strings, max_length)
            if fast is not None:
                return fast
        # General path (any alphabet; also produces the precise error for a bad character).
        indexes, lengths = self._index.flat(strings, what="strings")
        self._check_max_length(lengths, max_length)
        return self._assemble(indexes.astype(np.int64) + N_SPECIAL, lengths)

    def _encode_ascii(self, strings: Sequence[str], max_length: int | None) -> torch.Tensor | None:
        """Fast path for printable-ASCII alphabets: bytes.translate maps characters to token ids.

        Returns None when the batch holds anything unusual (a non-str element, a character outside
        the alphabet), so that the general path raises its precise error.
        """
        try:
            lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
        except TypeError:
            return None
        self._check_max_length(lengths, max_length)
        batch, total = len(strings), int(lengths.sum())
        width = int(lengths.max()) + 2
        try:
            if total >= 64 * batch:
                # Long strings: lay each row out as text, with control characters standing for the
                # specials (the alphabet is printable, so it cannot contain them), and translate
                # once; this avoids a boolean scatter of every character.
                text = "".join([("\x01" + s + "\x02").ljust(width, "\x03") for s in strings])
                raw = text.encode("ascii")
            else:
                raw = "".join(strings).encode("ascii")
        except (TypeError, UnicodeEncodeError):
            return None
        if total >= 64 * batch:
            # A control character inside a string would masquerade as a special: count them.
            if (raw.count(b"\x01") != batch or raw.count(b"\x02") != batch
                    or raw.count(b"\x03") != batch * width - total - 2 * batch):
                return None
            ids = raw.translate(self._layout_table)
            if _INVALID in ids:
                return None
            matrix = np.frombuffer(ids, dtype=np.uint8).reshape(batch, width)
        else:
            ids = raw.translate(self._ascii_table)
            if _INVALID in ids:
                return None
            matrix = np.full((batch, width), PAD, dtype=np.uint8)
            matrix[:, 0] = START
            matrix[:, 1:width - 1][np.arange(width - 2) < lengths[:, None]] = np.frombuffer(
                ids, dtype=np.uint8)
            matrix[np.arange(batch), lengths + 1] = END
        return torch.from_numpy(matrix.astype(np.int64))

    def encode_codes(self, codes: np.ndarray, lengths: np.ndarray | Sequence[int],
                     max_length: int | None = None) -> torch.Tensor:
        """Tokenize a language code matrix (the fast path: no Python strings involved).

        Args:
            codes: uint8 ``(batch, pos)`` symbol codes (alphabet indexes), padded with
                ``PAD_CODE = 255``; columns past ``max(lengths)`` are ignored.
            lengths: int ``(batch,)`` string lengths.
            max_length: optional limit on a string's length, as in :meth:`encode`.

        Returns:
            int64 tensor ``(batch, max(lengths) + 2)``, laid out as in :meth:`encode`.

        Raises:
            ValueError: shapes disagree, the batch is empty, a length is negative or wider than
                ``codes``, or a code within a string's length is not a symbol of the alphabet.
        """
        codes = np.asarray(codes)
        lengths = np.asarray(lengths)
        if codes.ndim != 2:
            raise ValueError(f"codes must have shape (batch, pos), got shape {codes.shape}")
        if lengths.shape != (codes.shape[0],):
            raise ValueError(
                f"lengths must have shape (batch,) = ({codes.shape[0]},), got {lengths.shape}")
        if codes.shape[0] == 0:
            raise ValueError("codes must not be empty (an empty batch has no shape to pad to)")
        if not np.issubdtype(lengths.dtype, np.integer):
            raise ValueError(f"lengths must be integers, got dtype {lengths.dtype}")
        lengths = lengths.astype(np.int64, copy=False)
        if lengths.min() < 0:
            raise ValueError(f"lengths must be >= 0, got {int(lengths.min())}")
        longest = int(lengths.max())
        if longest > codes.shape[1]:
            raise ValueError(
                f"lengths has {longest} but codes has only {codes.shape[1]} positions")
        self._check_max_length(lengths, max_length)
        window = codes[:, :longest]
        inside = np.arange(longest) < lengths[:, None]  # (batch, pos)
        if window.dtype != np.uint8:
            if window.size and (window.min() < 0 or window.max() > PAD_CODE):
                raise ValueError(f"codes must hold uint8 values (0..255), got {window.min()}.."
                                 f"{window.max()}")
            window = window.astype(np.uint8)
        # Whole-matrix uint8 arithmetic (no boolean gather): codes outside a string are ignored.
        symbols = np.where(inside, window, 0)
        if symbols.size and symbols.max() >= len(self.alphabet):
            row, col = np.argwhere(symbols >= len(self.alphabet))[0]
            raise ValueError(
                f"codes[{row}, {col}] = {int(window[row, col])} is not a symbol code of the "
                f"alphabet {self.alphabet!r} (valid codes: 0..{len(self.alphabet) - 1})")
        matrix = np.full((len(lengths), longest + 2), PAD, dtype=np.uint8)
        matrix[:, 0] = START
        np.copyto(matrix[:, 1:longest + 1], symbols + N_SPECIAL, where=inside)
        matrix[np.arange(len(lengths)), lengths + 1] = END
        return torch.from_numpy(matrix.astype(np.int64))

    @staticmethod
    def _check_max_length(lengths: np.ndarray, max_length: int | None) -> None:
        if max_length is None:
            return
        if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)):
            raise ValueError(f"max_length must be an int or None, got {max_length!r}")
        if max_length < 0:
            raise ValueError(f"max_length must be >= 0, got {max_length}")
        too_long = np.flatnonzero(lengths > max_length)
        if len(too_long):
            index = int(too_long[0])
            raise ValueError(
                f"strings[{index}] has length {int(lengths[index])}, longer than "
                f"max_length={max_length}" + (f" ({len(too_long)} strings in all)"
                                             if len(too_long) > 1 else ""))

    @staticmethod
    def _assemble(ids: np.ndarray, lengths: np.ndarray,
                  inside: np.ndarray | None = None) -> torch.Tensor:
        """Lay out flat symbol ids as ``[start] s [end] [pad]...`` rows (batch, longest + 2)."""
        batch = len(lengths)
        longest = int(lengths.max())
        tokens = np.full((batch, longest + 2), PAD, dtype=np.int64)
        tokens[:, 0] = START
        if inside is None:
            inside = np.arange(longest) < lengths[:, None]
        # Row-major boolean assignment fills each row's first `length` cells in order, which is
        # exactly the order of the concatenated strings.
        tokens[:, 1:longest + 1][inside] = ids
        tokens[np.arange(batch), lengths + 1] = END
        return torch.from_numpy(tokens)

    # ------------------------------------------------------------------ decoding

    def decode(self, tokens: torch.Tensor | np.ndarray | Sequence[Sequence[int]]) -> list[str]:
        """Turn token rows back into strings, dropping every special token (pads included).

        Args:
            tokens: integer ``(batch, pos)`` tensor/array, or one ``(pos,)`` row.

        Returns:
            One string per row.

        Raises:
            ValueError: a token id outside ``0..vocab_size-1``, or a non-integer array.
        """
        if isinstance(tokens, torch.Tensor):
            array = tokens.detach().cpu().numpy()
        else:
            array = np.asarray(tokens)
        if array.ndim == 1:
            array = array[None, :]
        if array.ndim != 2:
            raise ValueError(f"tokens must have shape (batch, pos) or (pos,), got {array.shape}")
        if array.size and not np.issubdtype(array.dtype, np.integer):
            raise ValueError(f"tokens must be integers, got dtype {array.dtype}")
        array = array.astype(np.int64, copy=False)
        if array.size and (array.min() < 0 or array.max() >= self.vocab_size):
            bad = tuple(int(i) for i in np.argwhere((array < 0) | (array >= self.vocab_size))[0])
            raise ValueError(
                f"tokens[{bad[0]}, {bad[1]}] = {int(array[bad])} is not a token id "
                f"(vocab_size={self.vocab_size})")
        keep = array >= N_SPECIAL
        points = self._points[array[keep]]
        text = points.tobytes().decode("utf-32-le", "surrogatepass")
        ends = np.cumsum(keep.sum(axis=1))
        starts = np.concatenate(([0], ends[:-1]))
        return [text[s:e] for s, e in zip(starts.tolist(), ends.tolist())]

    def names(self, tokens: torch.Tensor | np.ndarray | Sequence[int]) -> list[str]:
        """Token names of one row, specials included (axis labels for attention plots).

        Args:
            tokens: integer ``(pos,)`` row.

        Returns:
            ``pos`` names such as ``["[start]", "(", ")", "[end]"]``.
        """
        row = np.asarray(tokens.detach().cpu() if isinstance(tokens, torch.Tensor) else tokens)
        if row.ndim != 1:
            raise ValueError(f"tokens must have shape (pos,), got {row.shape}")
        names = self.token_names
        out = []
        for position, token in enumerate(row.tolist()):
            if not 0 <= token < self.vocab_size:
                raise ValueError(
                    f"tokens[{position}] = {token} is not a token id (vocab_size={self.vocab_size})")
            out.append(names[token])
        return out
