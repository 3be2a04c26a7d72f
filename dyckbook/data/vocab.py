"""Token ids, bracket pairs and the one string <-> code encoder of the package."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

START, PAD, END = 0, 1, 2  # classifier specials (the thesis' ids)
SEQ_PAD, BOS, EOS = 0, 1, 2  # encoder-decoder specials: <pad>, <bos>, <eos>
N_SPECIAL = 3  # symbol code c is token N_SPECIAL + c in both vocabularies
PAD_CODE = 255  # pad value of code matrices; symbol codes stay below it
MAX_K = 127  # the closer of type MAX_K - 1 has code 253
#: The thesis' four pairs, then four visually distinct single code points.
DEFAULT_PAIRS: tuple[str, ...] = ("()", "[]", "{}", "<>", "⟨⟩", "⟦⟧", "⌈⌉", "⌊⌋")

_BAD = 254  # marks a character outside the alphabet while encoding


def check_pairs(k: int, pairs: Sequence[str] | None) -> tuple[str, ...]:
    """The k bracket pairs: ``DEFAULT_PAIRS[:k]`` when ``pairs`` is None, else ``pairs`` checked."""
    if pairs is None:
        if k > len(DEFAULT_PAIRS):
            raise ValueError(f"k={k} exceeds the {len(DEFAULT_PAIRS)} default pairs; pass pairs=")
        return DEFAULT_PAIRS[:k]
    if isinstance(pairs, str):
        raise ValueError(f"pairs must be a sequence of 2-character strings, got the str {pairs!r}")
    pairs = tuple(pairs)
    if len(pairs) != k:
        raise ValueError(f"pairs must hold exactly k={k} pairs, got {len(pairs)}: {pairs!r}")
    for i, p in enumerate(pairs):
        if not isinstance(p, str) or len(p) != 2:
            raise ValueError(f"pairs[{i}] must be a 2-character string, got {p!r}")
    if len(set("".join(pairs))) < 2 * k:
        raise ValueError(f"pairs must use 2k distinct characters, got {pairs!r}")
    return pairs


def check_codes(codes: object, lengths: object, n_symbols: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate a ``(codes, lengths)`` pair: uint8 ``(batch, pos)``, ints ``(batch,)`` in range."""
    codes, lengths = np.asarray(codes), np.asarray(lengths)
    if codes.ndim != 2 or codes.dtype != np.uint8:
        raise ValueError(f"codes must be uint8 (batch, pos), got {codes.dtype} {codes.shape}")
    if lengths.shape != codes.shape[:1] or not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(
            f"lengths must be ints of shape {codes.shape[:1]}, got {lengths.dtype} {lengths.shape}"
        )
    lengths = lengths.astype(np.int64, copy=False)
    outside = (lengths < 0) | (lengths > codes.shape[1])
    if outside.any():
        i = int(np.argmax(outside))
        raise ValueError(f"lengths[{i}] = {lengths[i]} is outside 0..{codes.shape[1]}")
    if codes.shape[1]:
        first = np.argmax(codes >= n_symbols, axis=1)  # each row's first non-code (or 0)
        bad = (first < lengths) & (codes[np.arange(codes.shape[0]), first] >= n_symbols)
        if bad.any():
            i, j = int(np.argmax(bad)), first[np.argmax(bad)]
            raise ValueError(f"codes[{i}, {j}] = {codes[i, j]} is not a code (0..{n_symbols - 1})")
    return codes, lengths


class Alphabet:
    """The 2k bracket symbols and the vectorised string <-> code encoder.

    Code ``2t`` is the opener of type t, ``2t + 1`` its closer; ``symbols[c]`` is code c's
    character, e.g. ``"()[]"`` for k = 2.
    """

    def __init__(self, k: int = 1, pairs: Sequence[str] | None = None) -> None:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_K:
            raise ValueError(f"k must be an int in 1..{MAX_K}, got {k!r}")
        self.k = int(k)
        self.pairs = check_pairs(self.k, pairs)
        self.symbols = "".join(self.pairs)
        points = np.array([ord(c) for c in self.symbols])
        self._lut = np.full(points.max() + 2, _BAD, dtype=np.uint8)  # last cell: larger points
        self._lut[points] = np.arange(points.size)
        self._points = points.astype(np.uint32)
        # bytes.translate is the fastest path for ASCII text (the default pairs up to k = 4)
        ascii_table = np.pad(self._lut, (0, max(0, 256 - self._lut.size)), constant_values=_BAD)
        self._ascii = ascii_table.tobytes() if points.max() < 128 else None

    def encode(self, strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``batch`` strings -> uint8 codes ``(batch, pos)`` right-padded with ``PAD_CODE``
        (``pos``: the longest length) and int64 lengths ``(batch,)``."""
        if isinstance(strings, (str, bytes)) or not isinstance(strings, Iterable):
            raise ValueError(f"strings must be a sequence of str, got {strings!r:.30}")
        strings = list(strings)
        for i, s in enumerate(strings):
            if not isinstance(s, str):
                raise ValueError(f"strings[{i}] must be a str, got {type(s).__name__}")
        lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
        joined = "".join(strings)
        if self._ascii is not None and joined.isascii():
            flat = np.frombuffer(joined.encode("ascii").translate(self._ascii), dtype=np.uint8)
        else:
            points = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
            flat = self._lut[np.minimum(points, self._lut.size - 1)]
        if flat.size and flat.max() == _BAD:
            j = int(np.argmax(flat == _BAD))
            i = int(np.searchsorted(np.cumsum(lengths), j, side="right"))
            char = joined[j]
            raise ValueError(
                f"strings[{i}] has {char!r} (U+{ord(char):04X}) at position "
                f"{j - int(lengths[:i].sum())}, which is not in the alphabet {self.symbols!r}"
            )
        width = int(lengths.max(initial=0))
        codes = np.full((lengths.size, width), PAD_CODE, dtype=np.uint8)
        codes[np.arange(width) < lengths[:, None]] = flat  # row-major fill keeps text order
        return codes, lengths

    def decode(self, codes: np.ndarray, lengths: np.ndarray) -> list[str]:
        """uint8 codes ``(batch, pos)`` and lengths ``(batch,)`` -> ``batch`` strings."""
        codes, lengths = check_codes(codes, lengths, 2 * self.k)
        flat = codes[np.arange(codes.shape[1]) < lengths[:, None]]
        text = self._points[flat].tobytes().decode("utf-32-le")
        ends = np.cumsum(lengths).tolist()
        return [text[a:b] for a, b in zip([0] + ends[:-1], ends)]

    def __eq__(self, other: object) -> bool:
        return type(other) is Alphabet and other.pairs == self.pairs

    def __hash__(self) -> int:
        return hash(("Alphabet", self.pairs))

    def __repr__(self) -> str:
        return f"Alphabet(k={self.k}, pairs={self.pairs!r})"
