"""Dyck-k, Dyck-(k, D) and Shuffle-Dyck-k: vectorised membership, structure and exact uniform sampling."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

__all__ = [
    "DEFAULT_PAIRS",
    "PAD_CODE",
    "Dyck",
    "ShuffleDyck",
    "iter_length_chunks",
    "sample_lengths",
]

#: Bracket pairs used when ``pairs=`` is not given: the thesis' four, then four more that are
#: visually distinct and single code points (mathematical angle, white square, ceiling, floor).
DEFAULT_PAIRS: tuple[str, ...] = ("()", "[]", "{}", "<>", "⟨⟩", "⟦⟧", "⌈⌉", "⌊⌋")

#: Pad value of code matrices; a real symbol code is at most ``2 * 127 + 1 = 255 - 1``.
PAD_CODE: int = 255

_MAX_K = 127  # opener 2t and closer 2t+1 must stay below PAD_CODE
_BAD = 254  # internal marker for "character not in the alphabet" during encoding
#: Default budget (cells of a padded matrix) processed at once by batch operations.
_CHUNK_CELLS = 1 << 22

Codes = tuple[np.ndarray, np.ndarray]
StringsOrCodes = Sequence[str] | Codes


# --------------------------------------------------------------------------------------------
# argument checks (errors at the boundary name the parameter and the bad value)
# --------------------------------------------------------------------------------------------


def _check_int(name: str, value: object, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _check_rng(rng: object) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"rng must be a numpy.random.Generator (e.g. numpy.random.default_rng(0)), "
            f"got {type(rng).__name__}"
        )
    return rng


def _check_lengths(lengths: object, name: str = "lengths", even: bool = True) -> np.ndarray:
    """Validate a sequence of requested lengths -> int64 array ``(batch,)``."""
    if isinstance(lengths, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of ints, got {lengths!r}")
    if isinstance(lengths, (int, np.integer)) and not isinstance(lengths, bool):
        raise ValueError(
            f"{name} must be a sequence of ints (one per string), got the scalar {lengths!r}; "
            f"pass [{lengths!r}] * n"
        )
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must hold ints, got dtype {arr.dtype} (first value {arr[0]!r})")
    arr = arr.astype(np.int64, copy=False)
    bad = np.flatnonzero(arr < 0)
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}] = {arr[bad[0]]} is negative")
    if even:
        bad = np.flatnonzero(arr % 2)
        if bad.size:
            raise ValueError(
                f"{name}[{bad[0]}] = {arr[bad[0]]} is odd; every word of a Dyck language has "
                f"even length"
            )
    return arr


def _check_pairs(k: int, pairs: Sequence[str] | None) -> tuple[str, ...]:
    if pairs is None:
        if k > len(DEFAULT_PAIRS):
            raise ValueError(
                f"k={k} exceeds the {len(DEFAULT_PAIRS)} default pairs; pass pairs= with k pairs"
            )
        return DEFAULT_PAIRS[:k]
    if isinstance(pairs, str):
        raise ValueError(f"pairs must be a sequence of 2-character strings, got the str {pairs!r}")
    pairs = tuple(pairs)
    if len(pairs) != k:
        raise ValueError(f"pairs must hold exactly k={k} pairs, got {len(pairs)}: {pairs!r}")
    for i, p in enumerate(pairs):
        if not isinstance(p, str) or len(p) != 2:
            raise ValueError(f"pairs[{i}] must be a 2-character string, got {p!r}")
    chars = "".join(pairs)
    if len(set(chars)) != len(chars):
        dup = next(c for c in chars if chars.count(c) > 1)
        raise ValueError(f"pairs must use distinct characters, {dup!r} repeats in {pairs!r}")
    return pairs


# --------------------------------------------------------------------------------------------
# length helpers
# --------------------------------------------------------------------------------------------


def sample_lengths(
    rng: np.random.Generator, size: int, min_length: int, max_length: int
) -> np.ndarray:
    """Draw lengths uniformly over the even integers of ``[min_length, max_length]``.

    Args:
        rng: Source of randomness.
        size: Number of lengths to draw.
        min_length: Smallest allowed length (inclusive, >= 0).
        max_length: Largest allowed length (inclusive).

    Returns:
        int64 array ``(batch,)`` with ``batch = size``.

    Raises:
        ValueError: Bad ``rng``, negative ``size``/``min_length``, ``min_length > max_length``,
            or a range that holds no even length (e.g. ``min_length = max_length = 3``).
    """
    rng = _check_rng(rng)
    size = _check_int("size", size, 0)
    min_length = _check_int("min_length", min_length, 0)
    max_length = _check_int("max_length", max_length, 0)
    if min_length > max_length:
        raise ValueError(
            f"min_length must be <= max_length, got min_length={min_length} > "
            f"max_length={max_length}"
        )
    lo = (min_length + 1) // 2  # smallest half-length
    hi = max_length // 2
    if lo > hi:
        raise ValueError(
            f"the range min_length={min_length}..max_length={max_length} holds no even length"
        )
    return 2 * rng.integers(lo, hi + 1, size=size, dtype=np.int64)


def iter_length_chunks(lengths: np.ndarray, max_cells: int = _CHUNK_CELLS) -> Iterator[np.ndarray]:
    """Split a batch into chunks of similar length so that padded chunks stay small.

    Rows are visited in order of decreasing length; each chunk holds at most ``max_cells``
    cells once padded to its own longest row (always at least one row).

    Args:
        lengths: int array ``(batch,)``.
        max_cells: Cell budget of one padded chunk.

    Yields:
        int64 index arrays into the batch; together they cover every row exactly once.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    start, n = 0, order.size
    while start < n:
        width = max(int(lengths[order[start]]), 1)
        rows = max(1, max_cells // width)
        yield order[start : start + rows]
        start += rows


# --------------------------------------------------------------------------------------------
# vectorised kernels on padded code matrices
# --------------------------------------------------------------------------------------------


def _valid_mask(lengths: np.ndarray, width: int) -> np.ndarray:
    return np.arange(width)[None, :] < lengths[:, None]  # (batch, pos)


def _heights(codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Height (opened minus closed, ignoring type) after each symbol; flat after the end.

    Returns int16 (int32 beyond 32k symbols) ``(batch, pos)``.
    """
    width = codes.shape[1]
    dt = np.int16 if width < 32767 else np.int32
    valid = _valid_mask(lengths, width)
    # opener codes are even, closer codes odd; PAD (odd) is masked out
    step = (1 - 2 * (codes & 1).astype(dt)) * valid
    return np.cumsum(step, axis=1, dtype=dt)


def _final(h: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    if h.shape[1] == 0:
        return np.zeros(h.shape[0], dtype=h.dtype)
    return h[:, -1]  # heights stay flat after each row's end


def _sort_levels(level: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Stable argsort of each row's levels with invalid cells last: int64 ``(batch, pos)``.

    Uses uint8 keys (one radix pass) when every level fits, else int16 (two passes).
    """
    top = int(level.max(initial=0))
    dt = np.uint8 if top < 255 else np.int16
    big = np.iinfo(dt).max
    key = np.where(valid, level, big).astype(dt, copy=False)
    return np.argsort(key, axis=1, kind="stable")


def _pair_order(codes: np.ndarray, h: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Order of positions in which matched pairs are adjacent (valid skeletons only).

    Sort positions by level (height after an opener, height before a closer), stably, so within a
    level positions stay in text order: a valid skeleton's level-l symbols then alternate opener,
    closer, opener, closer, and each opener is immediately followed by its partner. Pads get a
    level above every real one and sort last.

    Returns int64 ``(batch, pos)``.
    """
    level = h + (codes & 1).astype(h.dtype)
    # radix sort for <= 16-bit keys: linear time per row
    return _sort_levels(level, _valid_mask(lengths, codes.shape[1]))


def _dyck_member_codes(
    codes: np.ndarray, lengths: np.ndarray, k: int, max_depth: int | None
) -> np.ndarray:
    width = codes.shape[1]
    if width == 0:
        return lengths == 0
    h = _heights(codes, lengths)
    ok = (lengths % 2 == 0) & (h.min(axis=1) >= 0) & (_final(h, lengths) == 0)
    if max_depth is not None:
        ok &= h.max(axis=1) <= max_depth
    # symbols outside the alphabet (possible when codes are passed in directly)
    valid = _valid_mask(lengths, width)
    ok &= ~((codes >= 2 * k) & valid).any(axis=1)
    if k > 1 and ok.any():
        rows = np.flatnonzero(ok)
        sub_codes, sub_h, sub_len = codes[rows], h[rows], lengths[rows]
        order = _pair_order(sub_codes, sub_h, sub_len)
        srt = np.take_along_axis(sub_codes, order, axis=1)
        w2 = srt.shape[1] - srt.shape[1] % 2  # members have even length <= width
        opener, closer = srt[:, 0:w2:2], srt[:, 1:w2:2]
        # pads sort last and are PAD_CODE in both columns: PAD != PAD + 1 so mask them
        pair_valid = np.arange(opener.shape[1])[None, :] < (sub_len // 2)[:, None]
        good = ((closer == opener + 1) | ~pair_valid).all(axis=1)
        ok[rows] = good
    return ok


def _shuffle_member_codes(codes: np.ndarray, lengths: np.ndarray, k: int) -> np.ndarray:
    width = codes.shape[1]
    if width == 0:
        return lengths == 0
    valid = _valid_mask(lengths, width)
    ok = (lengths % 2 == 0) & ~((codes >= 2 * k) & valid).any(axis=1)
    dt = np.int16 if width < 32767 else np.int32
    for t in range(k):
        step = (codes == 2 * t).astype(dt) - (codes == 2 * t + 1).astype(dt)
        h = np.cumsum(step, axis=1, dtype=dt)
        ok &= (h.min(axis=1) >= 0) & (h[:, -1] == 0)
    return ok


# --------------------------------------------------------------------------------------------
# uniform samplers (building blocks)
# --------------------------------------------------------------------------------------------


def _uniform_skeletons(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    """Uniform Dyck-1 words with ``m`` pairs by the cycle lemma.

    Every sequence of m ups and m+1 downs has exactly one rotation that is a Dyck word followed
    by a down (the rotation starting just after the first minimum of the prefix sums), and each
    Dyck word arises from exactly 2m+1 sequences, so a uniform shuffle gives a uniform word.

    Returns int8 ``(batch, pos)`` of +1 (open) / -1 (close), ``batch = n, pos = 2m``.
    """
    if m == 0:
        return np.zeros((n, 0), dtype=np.int8)
    total = 2 * m + 1
    base = np.empty((n, total), dtype=np.int8)
    base[:, :m] = 1
    base[:, m:] = -1
    steps = rng.permuted(base, axis=1)
    prefix = np.cumsum(steps, axis=1, dtype=np.int16 if total < 32767 else np.int32)
    start = np.argmin(prefix, axis=1) + 1  # first minimum; the rotation starts after it
    idx = (start[:, None] + np.arange(2 * m)[None, :]) % total
    return np.take_along_axis(steps, idx, axis=1)


def _type_skeletons(rng: np.random.Generator, steps: np.ndarray, k: int) -> np.ndarray:
    """Give every matched pair of valid skeletons an independent uniform type.

    Args:
        steps: int8 ``(batch, pos)`` of +1/-1, every row a Dyck-1 word of length ``pos``.

    Returns:
        uint8 codes ``(batch, pos)``.
    """
    n, width = steps.shape
    codes = (steps < 0).astype(np.uint8)  # 0 = "(" , 1 = ")"
    if k == 1 or width == 0:
        return codes
    lengths = np.full(n, width, dtype=np.int64)
    h = np.cumsum(steps, axis=1, dtype=np.int16 if width < 32767 else np.int32)
    order = _pair_order(codes, h, lengths)
    types = rng.integers(0, k, size=(n, width // 2), dtype=np.uint8) * np.uint8(2)
    rows = np.arange(n)[:, None]
    codes[rows, order[:, 0::2]] += types
    codes[rows, order[:, 1::2]] += types
    return codes


def _bounded_up_table(max_steps: int, depth: int) -> np.ndarray:
    """P(up | r steps remain, height h) for uniform paths that end at 0 and stay in [0, depth].

    Paths are counted by a DP over (remaining steps, height); each row is rescaled by its
    maximum, which cancels in the ratio, so lengths of many thousands never overflow.

    Returns float64 ``(max_steps + 1, depth + 1)``.
    """
    table = np.zeros((max_steps + 1, depth + 1))
    ways = np.zeros(depth + 3)  # ways[h + 1] = paths from height h with r steps left (scaled)
    ways[1] = 1.0  # r = 0: only height 0 is a valid end
    for r in range(1, max_steps + 1):
        up = ways[2 : depth + 3].copy()  # from h go to h + 1 (ways[h + 2]); h = depth -> 0 pad
        up[depth] = 0.0
        down = ways[0 : depth + 1]  # ways[h]: height h - 1 (h = 0 -> the 0 pad)
        total = up + down
        with np.errstate(invalid="ignore", divide="ignore"):
            table[r] = np.where(total > 0, up / np.where(total > 0, total, 1.0), 0.0)
        new = np.zeros_like(ways)
        new[1 : depth + 2] = total
        peak = new.max()
        ways = new / peak if peak > 0 else new
    return table


def _log_catalan(m: np.ndarray | int) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    from math import lgamma

    lg = np.vectorize(lgamma, otypes=[np.float64])
    return lg(2 * m + 1) - lg(m + 1) - lg(m + 2)


# --------------------------------------------------------------------------------------------
# the languages
# --------------------------------------------------------------------------------------------


class _BracketLanguage:
    """Shared alphabet handling: encoding, decoding, single-string wrappers."""

    k: int
    pairs: tuple[str, ...]

    def _init_alphabet(self, k: int, pairs: Sequence[str] | None) -> None:
        self.k = _check_int("k", k, 1)
        if self.k > _MAX_K:
            raise ValueError(f"k must be <= {_MAX_K} (codes are uint8), got {self.k}")
        self.pairs = _check_pairs(self.k, pairs)
        self.alphabet = "".join(self.pairs)
        self.openers = "".join(p[0] for p in self.pairs)
        self.closers = "".join(p[1] for p in self.pairs)
        cps = np.array([ord(c) for c in self.alphabet], dtype=np.int64)
        self._lut = np.full(int(cps.max()) + 2, _BAD, dtype=np.uint8)  # last slot: any larger cp
        self._lut[cps] = np.arange(cps.size, dtype=np.uint8)
        self._chars = np.array(list(self.alphabet))
        self._cps = np.zeros(256, dtype=np.uint32)
        self._cps[: cps.size] = cps
        # one byte per character when the alphabet is Latin-1 (all default pairs up to k = 4)
        self._latin1 = bool(cps.max() < 256)
        self._bytes = self._cps.astype(np.uint8)

    # -- encoding ----------------------------------------------------------------------------

    def encode(self, strings: Sequence[str]) -> Codes:
        """Strings -> padded symbol codes.

        Args:
            strings: A sequence of strings over ``alphabet`` (not a bare ``str``).

        Returns:
            ``(codes, lengths)``: uint8 ``(batch, pos)`` padded with ``PAD_CODE`` (``pos`` is the
            longest length, 0 for an empty batch) and int64 ``(batch,)``.

        Raises:
            ValueError: ``strings`` is a bare string, an element is not a ``str``, or a character
                is outside the alphabet (the message names it, its position and the string index).
        """
        if isinstance(strings, (str, bytes)):
            raise ValueError(
                f"strings must be a sequence of str, got a single {type(strings).__name__} "
                f"{strings[:20]!r}; wrap it in a list"
            )
        strings = list(strings)
        try:
            lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
            joined = "".join(strings)
        except TypeError:
            i = next(i for i, s in enumerate(strings) if not isinstance(s, str))
            raise ValueError(
                f"strings[{i}] must be a str, got {type(strings[i]).__name__}"
            ) from None
        batch = lengths.size
        width = int(lengths.max()) if batch else 0
        if not joined:
            return np.full((batch, width), PAD_CODE, dtype=np.uint8), lengths
        if self._latin1 and joined.isascii():
            cps = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
        else:
            cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        flat = self._lut[np.minimum(cps, self._lut.size - 1)]
        bad = np.flatnonzero(flat == _BAD)
        if bad.size:
            offsets = np.cumsum(lengths)
            j = int(bad[0])
            i = int(np.searchsorted(offsets, j, side="right"))
            pos = j - (int(offsets[i - 1]) if i else 0)
            ch = chr(int(cps[j]))
            raise ValueError(
                f"strings[{i}] has character {ch!r} (U+{ord(ch):04X}) at position {pos}, which "
                f"is not in the alphabet {self.alphabet!r} of {self.name}"
            )
        codes = np.full((batch, width), PAD_CODE, dtype=np.uint8)
        codes[_valid_mask(lengths, width)] = flat  # row-major fill keeps text order
        return codes, lengths

    def decode(self, codes: np.ndarray, lengths: np.ndarray) -> list[str]:
        """Padded symbol codes -> strings (inverse of :meth:`encode`).

        Args:
            codes: uint8 ``(batch, pos)``.
            lengths: int ``(batch,)``.

        Returns:
            ``batch`` strings.
        """
        codes, lengths = self._check_codes(codes, lengths)
        flat = codes[_valid_mask(lengths, codes.shape[1])]
        if flat.size and int(flat.max()) >= 2 * self.k:
            j = int(np.flatnonzero(flat >= 2 * self.k)[0])
            raise ValueError(f"codes holds {int(flat[j])}, not a symbol code of {self.name}")
        if self._latin1:
            text = self._bytes[flat].tobytes().decode("latin-1")
        else:
            text = self._cps[flat].tobytes().decode("utf-32-le")
        ends = np.cumsum(lengths).tolist()
        starts = [0] + ends[:-1]
        return [text[a:b] for a, b in zip(starts, ends)]

    def _check_codes(self, codes: object, lengths: object) -> Codes:
        codes = np.asarray(codes)
        lengths = np.asarray(lengths)
        if codes.ndim != 2 or codes.dtype != np.uint8:
            raise ValueError(
                f"codes must be a uint8 array (batch, pos), got dtype {codes.dtype} shape "
                f"{codes.shape}"
            )
        if lengths.ndim != 1 or lengths.shape[0] != codes.shape[0]:
            raise ValueError(f"lengths must have shape ({codes.shape[0]},), got {lengths.shape}")
        if lengths.size and (lengths.min() < 0 or lengths.max() > codes.shape[1]):
            raise ValueError(
                f"lengths must lie in 0..{codes.shape[1]} (the width of codes), got "
                f"{int(lengths.min())}..{int(lengths.max())}"
            )
        return codes, lengths.astype(np.int64, copy=False)

    def _as_codes(self, strings: StringsOrCodes) -> Codes:
        if isinstance(strings, tuple) and len(strings) == 2 and isinstance(strings[0], np.ndarray):
            return self._check_codes(*strings)
        return self.encode(strings)

    def _single(self, s: str) -> np.ndarray:
        if not isinstance(s, str):
            raise ValueError(f"s must be a str, got {type(s).__name__}")
        return self.encode([s])[0][0]

    # -- membership --------------------------------------------------------------------------

    def _member_codes(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def is_member_batch(self, strings: StringsOrCodes) -> np.ndarray:
        """Membership of every string, vectorised over the batch.

        Args:
            strings: A sequence of strings, or a ``(codes, lengths)`` pair from :meth:`encode`.

        Returns:
            bool ``(batch,)``.
        """
        if isinstance(strings, tuple) and len(strings) == 2 and isinstance(strings[0], np.ndarray):
            codes, lengths = self._check_codes(*strings)
            out = np.empty(lengths.size, dtype=bool)
            if lengths.size and codes.shape[1] * lengths.size <= 2 * _CHUNK_CELLS:
                return self._member_codes(codes, lengths)
            for idx in iter_length_chunks(lengths):
                width = int(lengths[idx].max()) if idx.size else 0
                out[idx] = self._member_codes(codes[idx, :width], lengths[idx])
            return out
        if isinstance(strings, (str, bytes)):
            raise ValueError(
                "strings must be a sequence of str or a (codes, lengths) tuple, got a single "
                f"{type(strings).__name__}; use is_member for one string"
            )
        strings = list(strings)
        lens = np.fromiter(
            (len(s) if isinstance(s, str) else -1 for s in strings), np.int64, len(strings)
        )
        if lens.size and lens.min() < 0:
            i = int(np.flatnonzero(lens < 0)[0])
            raise ValueError(f"strings[{i}] must be a str, got {type(strings[i]).__name__}")
        out = np.empty(len(strings), dtype=bool)
        if lens.size == 0:
            return out
        if int(lens.max()) * lens.size <= 2 * _CHUNK_CELLS:
            return self._member_codes(*self.encode(strings))
        for idx in iter_length_chunks(lens):
            try:
                codes, lengths = self.encode([strings[i] for i in idx])
            except ValueError:
                self.encode(strings)  # re-raise with the caller's string index
                raise
            out[idx] = self._member_codes(codes, lengths)
        return out

    def is_member(self, s: str) -> bool:
        """Whether one string is in the language (characters outside the alphabet raise)."""
        codes = self._single(s)
        return bool(self._member_codes(codes[None, :], np.array([codes.size]))[0])

    # -- sampling ----------------------------------------------------------------------------

    def sample(self, rng: np.random.Generator, lengths: Sequence[int] | np.ndarray) -> list[str]:
        """One exactly-uniform word per requested length.

        Args:
            rng: Source of randomness.
            lengths: Even, non-negative ints ``(batch,)``.

        Returns:
            ``batch`` strings; ``strings[i]`` has length ``lengths[i]``.
        """
        return self.decode(*self.sample_codes(rng, lengths))

    def sample_codes(self, rng: np.random.Generator, lengths: Sequence[int] | np.ndarray) -> Codes:
        """Like :meth:`sample`, returning ``(codes, lengths)`` (the fast path).

        The padded matrix is ``(batch, max(lengths))``; for very large mixed-length sets call it
        on chunks (see :func:`iter_length_chunks`) to bound memory.
        """
        rng = _check_rng(rng)
        lengths = _check_lengths(lengths)
        self._check_sample_lengths(lengths)
        width = int(lengths.max()) if lengths.size else 0
        codes = np.full((lengths.size, width), PAD_CODE, dtype=np.uint8)
        self._fill_samples(rng, lengths, codes)
        return codes, lengths

    def _check_sample_lengths(self, lengths: np.ndarray) -> None:
        pass

    def _fill_samples(self, rng: np.random.Generator, lengths: np.ndarray, out: np.ndarray) -> None:
        raise NotImplementedError

    # -- counting ----------------------------------------------------------------------------

    def count(self, length: int) -> int:
        raise NotImplementedError

    def log_count(self, length: int) -> float:
        """Natural log of :meth:`count` (``-inf`` when there is no word of that length)."""
        c = self.count(length)
        return math.log(c) if c > 0 else -math.inf

    # -- misc --------------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and repr(other) == repr(self)

    def __hash__(self) -> int:
        return hash(repr(self))


def _group_by_value(values: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(value, indices)`` for each distinct value, in increasing value order."""
    if values.size == 0:
        return
    order = np.argsort(values, kind="stable")
    sv = values[order]
    cuts = np.flatnonzero(np.diff(sv)) + 1
    for grp in np.split(order, cuts):
        yield int(values[grp[0]]), grp


class Dyck(_BracketLanguage):
    """The Dyck language over k bracket types, optionally with nesting depth at most D.

    A word is in Dyck-k when every closer closes the most recent unclosed opener of the same
    type and nothing stays open; Dyck-(k, D) also requires that no prefix has more than D open
    brackets. Symbol codes: opener of type t is ``2t``, its closer ``2t + 1``.

    Attributes:
        k: Number of bracket types.
        max_depth: Depth bound D, or ``None`` for unbounded.
        pairs: The k two-character pairs.
        alphabet: Interleaved pairs, e.g. ``"()[]{}"``; index = symbol code.
        openers, closers: The opening and closing characters in type order.
        name: ``"Dyck-k"`` or ``"Dyck-(k,D)"``.
    """

    def __init__(
        self, k: int = 1, max_depth: int | None = None, pairs: Sequence[str] | None = None
    ) -> None:
        self._init_alphabet(k, pairs)
        if max_depth is not None:
            max_depth = _check_int("max_depth", max_depth, 1)
        self.max_depth = max_depth
        self.name = f"Dyck-{self.k}" if max_depth is None else f"Dyck-({self.k},{max_depth})"
        self._up_table: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"Dyck(k={self.k}, max_depth={self.max_depth}, pairs={self.pairs!r})"

    def _member_codes(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        return _dyck_member_codes(codes, lengths, self.k, self.max_depth)

    def depth_profile(self, s: str) -> np.ndarray:
        """Number of open brackets (any type) after each symbol.

        Types are ignored; for a non-member the profile may go negative.

        Returns:
            int64 ``(pos,)`` with ``pos = len(s)``.
        """
        codes = self._single(s)
        return np.cumsum(1 - 2 * (codes.astype(np.int64) & 1))

    def matching(self, s: str) -> np.ndarray:
        """Index of each bracket's partner under stack matching of the skeleton (types ignored).

        A closer pairs with the most recent unmatched opener whatever its type, so crossing
        types such as ``([)]`` still get partners (0-3, 1-2); the membership test is separate.

        Returns:
            int64 ``(pos,)``; ``-1`` for a bracket with no partner.
        """
        codes = self._single(s)
        out = np.full(codes.size, -1, dtype=np.int64)
        stack: list[int] = []
        for j, c in enumerate(codes.tolist()):
            if c & 1 == 0:
                stack.append(j)
            elif stack:
                i = stack.pop()
                out[i], out[j] = j, i
        return out

    # -- counting ----------------------------------------------------------------------------

    def _bounded_paths(self, length: int) -> int:
        depth = min(self.max_depth, length // 2)
        ways = [1] + [0] * depth
        for _ in range(length):
            ways = [
                (ways[h - 1] if h > 0 else 0) + (ways[h + 1] if h < depth else 0)
                for h in range(depth + 1)
            ]
        return ways[0]

    def count(self, length: int) -> int:
        """Exact number of words of ``length`` (0 for odd lengths).

        Dyck-k: ``Catalan(m) * k**m`` with ``m = length / 2``; Dyck-(k, D): bounded Dyck paths
        (DP over heights) times ``k**m``.
        """
        length = _check_int("length", length, 0)
        if length % 2:
            return 0
        m = length // 2
        if self.max_depth is None:
            paths = math.comb(2 * m, m) // (m + 1)
        else:
            paths = self._bounded_paths(length)
        return paths * self.k**m

    def log_count(self, length: int) -> float:
        """Natural log of :meth:`count` without big integers for the unbounded case."""
        length = _check_int("length", length, 0)
        if length % 2:
            return -math.inf
        m = length // 2
        if self.max_depth is None:
            return float(_log_catalan(m)) + m * math.log(self.k)
        return super().log_count(length)

    # -- sampling ----------------------------------------------------------------------------

    def _fill_samples(self, rng: np.random.Generator, lengths: np.ndarray, out: np.ndarray) -> None:
        for idx in iter_length_chunks(lengths):
            sub = lengths[idx]
            codes = self._sequential_codes(rng, sub)
            out[idx, : codes.shape[1]] = codes

    def _sequential_codes(self, rng: np.random.Generator, lengths: np.ndarray) -> np.ndarray:
        """Uniform words: sequential sampling with exact path-count ratios, then uniform types.

        At each step a row with ``r`` symbols left at height ``h`` opens with probability
        ``N(r - 1, h + 1) / N(r, h)``, where ``N`` counts the ways to finish; unbounded, this is
        the ballot ratio ``(r - h)(h + 2) / (2 r (h + 1))``, bounded it comes from a DP table.
        Then every matched pair (found by the stable level sort of :func:`_pair_order`) gets an
        independent uniform type. Each Dyck-1 path with m pairs carries exactly k**m typings,
        so the result is uniform over the language's words of each length. The loop runs over
        positions; all work inside it is vectorised over the batch.

        Args:
            lengths: even ints ``(batch,)`` in decreasing order.

        Returns:
            uint8 codes ``(batch, pos)`` padded with ``PAD_CODE``.
        """
        n = lengths.size
        width = int(lengths[0]) if n else 0
        if width == 0:
            return np.full((n, 0), PAD_CODE, dtype=np.uint8)
        cap = width // 2 if self.max_depth is None else min(self.max_depth, width // 2)
        table = None
        if self.max_depth is not None:
            table = self._up_table
            if table is None or table.shape[0] <= width or table.shape[1] < cap + 1:
                size = max(width, 64)
                table = _bounded_up_table(size, min(self.max_depth, size // 2))
                self._up_table = table
            flat_table = table.ravel()
            tcols = table.shape[1]
        # rows are time steps so every per-step slice is contiguous: (pos, batch)
        u = rng.random((width, n))
        down_bits = np.ones((width, n), dtype=np.uint8)  # 1 = closer (also for pads, fixed below)
        level_t = (
            np.zeros((width, n), dtype=np.uint8 if cap < 255 else np.int16) if self.k > 1 else None
        )
        h = np.zeros(n, dtype=np.float64)  # float: the ballot ratio is computed in floats anyway
        lengths_f = lengths.astype(np.float64)
        active = n
        for t in range(width):
            while active and lengths[active - 1] <= t:
                active -= 1
            hh = h[:active]
            rem = lengths_f[:active] - t
            if table is None:
                # open iff u * 2r(h+1) < (r-h)(h+2): the ballot ratio without a division
                up = u[t, :active] * (2.0 * rem * (hh + 1.0)) < (rem - hh) * (hh + 2.0)
            else:
                up = u[t, :active] < flat_table[rem.astype(np.int64) * tcols + hh.astype(np.int64)]
            down_bits[t, :active] = ~up
            if level_t is not None:
                level_t[t, :active] = hh + up  # opener: height after; closer: height before
            hh += up
            hh -= ~up
        codes = np.ascontiguousarray(down_bits.T)  # (batch, pos)
        valid = _valid_mask(lengths, width)
        if self.k > 1:
            # type the pairs: pairs are adjacent in the stable level order (see _pair_order)
            level = np.ascontiguousarray(level_t.T)
            order = _sort_levels(level, valid)
            types = rng.integers(0, self.k, size=(n, width // 2), dtype=np.uint8) * np.uint8(2)
            typed = np.repeat(types, 2, axis=1)
            typed[:, 1::2] += 1
            flat = codes.ravel()
            flat[(order + (np.arange(n, dtype=np.int64) * width)[:, None]).ravel()] = typed.ravel()
        codes[~valid] = PAD_CODE
        return codes


class ShuffleDyck(_BracketLanguage):
    """Shuffle-Dyck-k: every bracket type is balanced on its own; types may cross.

    A word is a member iff, for each type t, the subsequence of type-t brackets is a Dyck-1
    word, so ``([)]`` is a member while ``)(`` is not. Symbol codes as in :class:`Dyck`.

    Sampling is exactly uniform over the words of the requested length: the per-type lengths
    ``(n_1, ..., n_k)`` are drawn with probability proportional to
    ``multinomial(n; n_1..n_k) * prod_t Catalan(n_t / 2)`` (the number of words with those
    per-type lengths), then each type's Dyck-1 word is drawn uniformly and the types are
    interleaved by a uniformly random arrangement of the type labels.
    """

    max_depth = None

    def __init__(self, k: int = 2, pairs: Sequence[str] | None = None) -> None:
        self._init_alphabet(k, pairs)
        self.name = f"Shuffle-Dyck-{self.k}"

    def __repr__(self) -> str:
        return f"ShuffleDyck(k={self.k}, pairs={self.pairs!r})"

    def _member_codes(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        return _shuffle_member_codes(codes, lengths, self.k)

    def depth_profile(self, s: str) -> np.ndarray:
        """Total number of open brackets (all types together) after each symbol.

        Returns:
            int64 ``(pos,)``.
        """
        codes = self._single(s)
        return np.cumsum(1 - 2 * (codes.astype(np.int64) & 1))

    def matching(self, s: str) -> np.ndarray:
        """Partner index of each bracket, matching each type independently with its own stack.

        Returns:
            int64 ``(pos,)``; ``-1`` for a bracket with no partner.
        """
        codes = self._single(s)
        out = np.full(codes.size, -1, dtype=np.int64)
        stacks: list[list[int]] = [[] for _ in range(self.k)]
        for j, c in enumerate(codes.tolist()):
            st = stacks[c >> 1]
            if c & 1 == 0:
                st.append(j)
            elif st:
                i = st.pop()
                out[i], out[j] = j, i
        return out

    # -- counting ----------------------------------------------------------------------------

    def count(self, length: int) -> int:
        """Exact number of words of ``length``: ``sum multinomial * prod Catalan`` over splits."""
        length = _check_int("length", length, 0)
        if length % 2:
            return 0
        # exponential generating function: S_j(n) = sum_a C(n, a) Cat(a/2) S_{j-1}(n - a)
        cat = [math.comb(2 * i, i) // (i + 1) for i in range(length // 2 + 1)]
        s = [1] + [0] * length  # S_0: only the empty word
        for _ in range(self.k):
            s = [
                sum(math.comb(n, a) * cat[a // 2] * s[n - a] for a in range(0, n + 1, 2))
                if n % 2 == 0
                else 0
                for n in range(length + 1)
            ]
        return s[length]

    def _log_s_table(self, max_length: int) -> np.ndarray:
        """log S_j(n) for j = 0..k types and even n = 2i, i = 0..max_length/2.

        Returns float64 ``(k + 1, max_length // 2 + 1)``.
        """
        half = max_length // 2
        lgf = np.array([math.lgamma(n + 1) for n in range(max_length + 1)])
        log_cat = _log_catalan(np.arange(half + 1))
        # work with T_j(n) = S_j(n) / n!  so the recursion is a plain convolution in log space
        c = log_cat - lgf[0 : max_length + 1 : 2]  # Cat(a/2)/a!
        t = np.full((self.k + 1, half + 1), -np.inf)
        t[0, 0] = 0.0
        for j in range(1, self.k + 1):
            for i in range(half + 1):
                t[j, i] = np.logaddexp.reduce(c[: i + 1] + t[j - 1, i::-1])
        return t + lgf[0 : max_length + 1 : 2][None, :]

    def _fill_samples(self, rng: np.random.Generator, lengths: np.ndarray, out: np.ndarray) -> None:
        n = lengths.size
        if n == 0:
            return
        k = self.k
        width = int(lengths.max())
        logs = self._log_s_table(width)
        lgf = np.array([math.lgamma(x + 1) for x in range(width + 1)])
        log_cat = _log_catalan(np.arange(width // 2 + 1))
        # per-type lengths, one type at a time: P(n_t = a | r left) ∝ C(r,a) Cat(a/2) S_rest(r-a)
        parts = np.zeros((n, k), dtype=np.int64)
        remaining = lengths.copy()
        for t in range(k - 1):
            rest = k - t - 1
            for r, idx in _group_by_value(remaining):
                a = np.arange(0, r + 1, 2)
                logw = lgf[r] - lgf[a] - lgf[r - a] + log_cat[a // 2] + logs[rest, (r - a) // 2]
                w = np.exp(logw - logw.max())
                cdf = np.cumsum(w)
                pick = np.searchsorted(cdf, rng.random(idx.size) * cdf[-1], side="right")
                parts[idx, t] = a[np.minimum(pick, a.size - 1)]
            remaining = remaining - parts[:, t]
        parts[:, k - 1] = remaining
        # concatenated per-type words, type 0 first, then scatter by a random label arrangement
        concat = np.full((n, width), PAD_CODE, dtype=np.uint8)
        offsets = np.concatenate([np.zeros((n, 1), np.int64), np.cumsum(parts, axis=1)], axis=1)
        for t in range(k):
            for m2, idx in _group_by_value(parts[:, t]):
                if m2 == 0:
                    continue
                steps = _uniform_skeletons(rng, idx.size, m2 // 2)
                cols = offsets[idx, t][:, None] + np.arange(m2)[None, :]
                concat[idx[:, None], cols] = (steps < 0).astype(np.uint8) + np.uint8(2 * t)
        labels = np.full((n, width), k, dtype=np.uint8)  # k = pad, sorts last
        for t in range(k):
            labels[
                (np.arange(width)[None, :] >= offsets[:, t : t + 1])
                & (np.arange(width)[None, :] < offsets[:, t + 1 : t + 2])
            ] = t
        # shuffle the labels within each row's real prefix: permute full rows of equal length
        for length, idx in _group_by_value(lengths):
            if length:
                labels[idx, :length] = rng.permuted(labels[idx, :length], axis=1)
        # the i-th type-t position (in text order) receives the i-th symbol of type t's word
        pos = np.argsort(labels, axis=1, kind="stable")
        rows = np.arange(n)[:, None]
        result = np.full((n, width), PAD_CODE, dtype=np.uint8)
        result[rows, pos] = concat
        out[:, :width] = result
