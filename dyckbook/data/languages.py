"""Dyck-k and Dyck-(k, D): vectorised membership, structure, uniform sampling, local validity;
:class:`DeepDyck`, Dyck-k sampled among its words of depth at least D."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from dyckbook.data.vocab import PAD_CODE, Alphabet, check_codes

__all__ = ["DeepDyck", "Dyck", "check_int", "check_lengths", "check_rng", "local_tables",
           "locally_valid", "sample_lengths", "window_index"]

_CELLS = 1 << 22  # cells of a padded matrix that one batch kernel call processes at once
_MAX_TABLE = 1 << 24  # the largest window table local_tables builds

Codes = tuple[np.ndarray, np.ndarray]


def check_int(name: str, value: object, minimum: int | None = None) -> int:
    """``value`` as an int, or a ValueError naming ``name`` (bools and floats are refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_rng(rng: object) -> np.random.Generator:
    """``rng`` if it is a numpy Generator, else a ValueError."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    return rng


def check_lengths(lengths: object, even: bool = True) -> np.ndarray:
    """Requested lengths (non-negative ints, even if ``even``) -> int64 ``(batch,)``."""
    if isinstance(lengths, (str, bytes, int, np.integer)):
        raise ValueError(f"lengths must be a sequence of ints (one per string), got {lengths!r}")
    arr = np.asarray(lengths)
    if arr.ndim != 1 or (arr.size and (arr.dtype == bool or arr.dtype.kind not in "iu")):
        raise ValueError(f"lengths must be a 1-d sequence of ints, got {arr.dtype} {arr.shape}")
    arr = arr.astype(np.int64)
    for bad, what in ((arr < 0, "negative"), ((arr % 2 == 1) & even, "odd (Dyck words are even)")):
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"lengths[{i}] = {arr[i]} is {what}")
    return arr


def sample_lengths(rng: np.random.Generator, size: int, min_length: int,
                   max_length: int) -> np.ndarray:
    """Lengths drawn uniformly over the even integers of ``[min_length, max_length]``.

    Returns:
        int64 ``(batch,)`` with ``batch = size``.
    """
    rng = check_rng(rng)
    size = check_int("size", size, 0)
    lo = check_int("min_length", min_length, 0)
    hi = check_int("max_length", max_length, 0)
    if lo > hi:
        raise ValueError(f"min_length must be <= max_length, got {lo} > {hi}")
    if (lo + 1) // 2 > hi // 2:
        raise ValueError(f"min_length={lo}..max_length={hi} holds no even length")
    return 2 * rng.integers((lo + 1) // 2, hi // 2 + 1, size=size, dtype=np.int64)


def window_index(values: np.ndarray, width: int, base: int) -> np.ndarray:
    """Index of every window of ``width`` consecutive values read as a base-``base`` number.

    Args:
        values: ints ``(batch, pos)`` in ``0..base - 1`` (mask pads before calling).

    Returns:
        int64 ``(batch, pos - width + 1)``; column j reads ``values[:, j : j + width]``, first
        value most significant.
    """
    n_win = values.shape[1] - width + 1
    index = np.zeros((values.shape[0], n_win), dtype=np.int64)
    for i in range(width):
        index = index * base + values[:, i : i + n_win]
    return index


# ----------------------------------------------- kernels on padded code matrices (callers validate)
def _valid(lengths: np.ndarray, width: int) -> np.ndarray:
    return np.arange(width) < lengths[:, None]  # (batch, pos)


def _chunks(lengths: np.ndarray) -> Iterator[np.ndarray]:
    """Row indices in decreasing length order, in blocks of at most ``_CELLS`` padded cells."""
    order = np.argsort(-lengths, kind="stable")
    start = 0
    while start < order.size:
        rows = max(1, _CELLS // max(int(lengths[order[start]]), 1))
        yield order[start : start + rows]
        start += rows


def _by_chunks(fn: Callable, codes: np.ndarray, lengths: np.ndarray, dtype=bool) -> np.ndarray:
    """``fn(codes, lengths) -> (batch,)`` over blocks of similar length, so memory stays bounded."""
    if codes.size <= _CELLS:
        return fn(codes, lengths)
    out = np.empty(lengths.size, dtype=dtype)
    for idx in _chunks(lengths):
        out[idx] = fn(codes[idx, : int(lengths[idx].max())], lengths[idx])
    return out


def _heights(codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    dt = np.int16 if codes.shape[1] < 32767 else np.int32
    step = (1 - 2 * (codes & 1).astype(dt)) * _valid(lengths, codes.shape[1])  # pads: 0
    return np.cumsum(step, axis=1, dtype=dt)


def _max_height(codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    return _heights(codes, lengths).max(axis=1, initial=0).astype(np.int64)


def _sort_levels(level: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Stable argsort of each row's levels, pads last; uint8 keys (one radix pass) when they fit."""
    dt = np.uint8 if int(level.max(initial=0)) < 255 else np.int16
    key = np.where(valid, level, np.iinfo(dt).max).astype(dt, copy=False)
    return np.argsort(key, axis=1, kind="stable")


def _pair_order(codes: np.ndarray, h: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Positions ordered so that the skeleton's matched pairs are adjacent (balanced rows only).

    Sorting positions stably by level (height after an opener, before a closer) keeps text order
    within a level, where a balanced row alternates opener, partner, opener, partner, ...
    """
    return _sort_levels(h + (codes & 1).astype(h.dtype), _valid(lengths, codes.shape[1]))


def _balanced(codes: np.ndarray, lengths: np.ndarray, max_depth: int | None):
    """Heights, and whether each row's skeleton (types ignored) is a word within the depth bound."""
    h = _heights(codes, lengths)
    ok = (lengths % 2 == 0) & (h.min(axis=1) >= 0) & (h[:, -1] == 0)
    if max_depth is not None:
        ok &= h.max(axis=1) <= max_depth
    return h, ok


def _pairs(codes: np.ndarray, h: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, ...]:
    """Opener and closer positions of the pairs of balanced rows, and which pairs are real.

    Returns:
        ``(op, cl, real)``, each ``(batch, pos // 2)``; pads sort last and form no real pair.
    """
    order = _pair_order(codes, h, lengths)
    op, cl = order[:, 0:-1:2], order[:, 1::2]
    return op, cl, np.arange(op.shape[1]) < lengths[:, None] // 2


def _typed(codes: np.ndarray, op: np.ndarray, cl: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Whether every real pair closes with its opener's type: bool ``(batch,)``."""
    opener, closer = np.take_along_axis(codes, op, 1), np.take_along_axis(codes, cl, 1)
    return ((closer == opener + 1) | ~real).all(axis=1)


def _member(codes: np.ndarray, lengths: np.ndarray, k: int, max_depth: int | None) -> np.ndarray:
    if codes.shape[1] == 0:
        return lengths == 0
    h, ok = _balanced(codes, lengths, max_depth)
    if k > 1 and ok.any():
        rows = np.flatnonzero(ok)
        ok[rows] = _typed(codes[rows], *_pairs(codes[rows], h[rows], lengths[rows]))
    return ok


@functools.lru_cache(maxsize=8)
def _up_table(steps: int, depth: int) -> np.ndarray:
    """P(up | r steps left, height h) for uniform paths in [0, depth] that end at 0.

    Path counts are rescaled per row (the scale cancels in the ratio), so nothing overflows.

    Returns:
        float64 ``(steps + 1, depth + 1)``, read-only.
    """
    table = np.zeros((steps + 1, depth + 1))
    ways = np.zeros(depth + 3)  # ways[h + 1]: ways to finish from height h; ends are 0 pads
    ways[1] = 1.0
    for r in range(1, steps + 1):
        up, total = ways[2:], ways[2:] + ways[: depth + 1]
        np.divide(up, total, out=table[r], where=total > 0)
        ways = np.concatenate([[0.0], total, [0.0]]) / total.max()
    table.flags.writeable = False
    return table


def _ballot(r: int, h: int) -> int:
    """Paths of r steps (+1 or -1) from height h to 0 that never go below 0 (exact)."""
    if r < h or (r - h) % 2:
        return 0
    u = (r - h) // 2  # up steps
    return math.comb(r, u) - (math.comb(r, u - 1) if u else 0)


def _deep_rows(steps: int, depth: int) -> Iterator[list[int]]:
    """For r = 0..steps, the exact ``[N(r, h) for h in 0..depth]``: the ways to finish r steps
    from height h at 0, never below 0, reaching ``depth`` on the way. A path at ``depth`` has
    reached it, so every way counts there (the ballot number); below, N(r, h) = N(r - 1, h + 1)
    + N(r - 1, h - 1), i.e. all ways less those that stay within [0, depth - 1]."""
    row = [0] * (depth + 1)  # r = 0: only height 0 finishes, and it has not reached depth >= 1
    yield row
    for r in range(1, steps + 1):
        row = [row[h + 1] + (row[h - 1] if h else 0) for h in range(depth)] + [_ballot(r, depth)]
        yield row


@functools.lru_cache(maxsize=8)
def _deep_up_table(steps: int, depth: int) -> np.ndarray:
    """P(up | r steps left, height h, ``depth`` not reached yet) for uniform paths that end at 0
    and reach ``depth``: N(r - 1, h + 1) / N(r, h) of :func:`_deep_rows`, each ratio of exact
    ints rounded once to float64 (0 where no path finishes).

    Returns:
        float64 ``(steps + 1, depth)``, read-only; column h for height h < ``depth``.
    """
    table = np.zeros((steps + 1, depth))
    before = None
    for r, row in enumerate(_deep_rows(steps, depth)):
        if before is not None:
            table[r] = [before[h + 1] / row[h] if row[h] else 0.0 for h in range(depth)]
        before = row
    table.flags.writeable = False
    return table


def _walk(lengths: np.ndarray, width: int,
          step: Callable[[int, np.ndarray, np.ndarray], np.ndarray]) -> tuple[np.ndarray, ...]:
    """One path per row for decreasing ``lengths``: ``step(t, h, r)`` says which of the rows
    still running (a prefix, heights h and steps left r, float64) go up at step t.

    Returns:
        ``(down, level)``, each ``(pos, batch)``: uint8 1 for a down step; the level of each
        step (opener: height after it; closer: height before it), uint8 (int16 from 510).
    """
    n = lengths.size
    down = np.ones((width, n), dtype=np.uint8)
    level = np.zeros((width, n), dtype=np.uint8 if width < 510 else np.int16)
    h = np.zeros(n)
    rem_0 = lengths.astype(np.float64)
    active = n
    for t in range(width):
        while lengths[active - 1] <= t:
            active -= 1
        hh, rem = h[:active], rem_0[:active] - t
        up = step(t, hh, rem)
        down[t, :active] = ~up
        level[t, :active] = hh + up  # opener: height after it; closer: height before it
        hh += 2.0 * up - 1.0
    return down, level


def _type_pairs(k: int, rng: np.random.Generator, down: np.ndarray, level: np.ndarray,
                lengths: np.ndarray) -> np.ndarray:
    """Codes of the paths of :func:`_walk`, each pair given an independent uniform type (one
    ``rng.integers`` call, none when k = 1): uint8 ``(batch, pos)``, padded with PAD_CODE."""
    width, n = down.shape
    codes = np.ascontiguousarray(down.T)
    valid = _valid(lengths, width)
    if k > 1:
        order = _sort_levels(np.ascontiguousarray(level.T), valid)
        types = 2 * rng.integers(0, k, size=(n, width // 2), dtype=np.uint8)
        typed = np.repeat(types, 2, axis=1)
        typed[:, 1::2] += 1
        np.put_along_axis(codes, order, typed, axis=1)
    codes[~valid] = PAD_CODE
    return codes


# ------------------------------------------------------------------------------ the language
class Dyck:
    """Dyck-k, the well-nested words over k bracket types, or Dyck-(k, D), depth at most D.

    Attributes:
        k: Number of bracket types.
        max_depth: Depth bound D, or None.
        pairs: The k two-character pairs.
        alphabet: The :class:`~dyckbook.data.vocab.Alphabet` (string <-> code encoder).
        name: ``"Dyck-3"`` or ``"Dyck-(3, 4)"``.
    """

    def __init__(self, k: int = 1, max_depth: int | None = None,
                 pairs: Sequence[str] | None = None) -> None:
        self.alphabet = Alphabet(k, pairs)
        self.k, self.pairs = self.alphabet.k, self.alphabet.pairs
        self.max_depth = None if max_depth is None else check_int("max_depth", max_depth, 1)
        self.name = f"Dyck-{self.k}" if max_depth is None else f"Dyck-({self.k}, {self.max_depth})"

    @property
    def shortest_word(self) -> int:
        """The shortest length :meth:`sample_codes` draws words of: 0 (the empty word) here;
        2D for :class:`DeepDyck`. Samplers of other strings built from words (the hard
        negatives) exist only from this length on."""
        return 0

    def _codes(self, codes: object, lengths: object) -> Codes:
        return check_codes(codes, lengths, 2 * self.k)

    def _as_codes(self, strings_or_codes: Sequence[str] | Codes) -> Codes:
        if (isinstance(strings_or_codes, tuple) and len(strings_or_codes) == 2
                and isinstance(strings_or_codes[0], np.ndarray)):
            return self._codes(*strings_or_codes)
        return self.alphabet.encode(strings_or_codes)

    # -- membership and structure -----------------------------------------------------------

    def is_member(self, strings_or_codes: Sequence[str] | Codes) -> np.ndarray:
        """Membership of every string.

        Args:
            strings_or_codes: ``batch`` strings, or ``(codes, lengths)``.

        Returns:
            bool ``(batch,)``.
        """
        codes, lengths = self._as_codes(strings_or_codes)
        fn = functools.partial(_member, k=self.k, max_depth=self.max_depth)
        return _by_chunks(fn, codes, lengths)

    def __contains__(self, s: str) -> bool:
        if not isinstance(s, str):
            raise ValueError(f"s must be a str, got {type(s).__name__}")
        return bool(self.is_member([s])[0])

    def heights(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Open brackets (any type) after each symbol, flat after the end; negative for dips.

        Returns:
            ``(batch, pos)``, int16 (int32 when ``pos`` >= 32767).
        """
        return _heights(*self._codes(codes, lengths))

    def next_symbols(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Which symbols may follow each prefix of each row and keep it a prefix of a word.

        Returns:
            bool ``(batch, pos + 1, 2k + 1)``: ``[b, i, c]`` for symbol code c after the first i
            symbols of row b, and ``[b, i, 2k]`` for the end of the string; every entry False
            from the first prefix that is no prefix of a word (and past the row's length).
        """
        codes, lengths = self._codes(codes, lengths)
        n, width = codes.shape
        k, depth = self.k, self.max_depth
        out = np.zeros((n, width + 1, 2 * k + 1), dtype=bool)
        for b in range(n):
            stack: list[int] = []
            for i in range(int(lengths[b]) + 1):
                if depth is None or len(stack) < depth:
                    out[b, i, 0:2 * k:2] = True  # any opener
                if stack:
                    out[b, i, 2 * stack[-1] + 1] = True  # the closer of the innermost opener
                else:
                    out[b, i, 2 * k] = True  # balanced: the string may end
                if i == lengths[b]:
                    break
                c = int(codes[b, i])
                if not out[b, i, c]:
                    out[b, i + 1:] = False
                    break
                if c % 2 == 0:
                    stack.append(c // 2)
                else:
                    stack.pop()
        return out

    def max_depths(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Maximum height of each row (0 for the empty string): int64 ``(batch,)``."""
        codes, lengths = self._codes(codes, lengths)
        return _by_chunks(_max_height, codes, lengths, np.int64)

    def matching(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Index of each symbol's partner in member rows.

        Returns:
            int64 ``(batch, pos)``: the partner's position for every symbol of a member row;
            -1 on pads and on every position of a non-member row.
        """
        codes, lengths = self._codes(codes, lengths)
        partner = np.full(codes.shape, -1, dtype=np.int64)
        if codes.shape[1] == 0:
            return partner
        h, ok = _balanced(codes, lengths, self.max_depth)
        rows = np.flatnonzero(ok)
        sub = codes[rows]
        op, cl, real = _pairs(sub, h[rows], lengths[rows])
        real &= _typed(sub, op, cl, real)[:, None]  # member rows only
        r = np.broadcast_to(rows[:, None], op.shape)[real]
        partner[r, op[real]] = cl[real]
        partner[r, cl[real]] = op[real]
        return partner

    # -- counting ----------------------------------------------------------------------------

    def count(self, length: int) -> int:
        """Exact number of words of ``length``: Dyck paths (bounded by D) times k^(length/2)."""
        length = check_int("length", length, 0)
        if length % 2:
            return 0
        m = length // 2
        if self.max_depth is None:
            return math.comb(2 * m, m) // (m + 1) * self.k**m
        depth = min(self.max_depth, m)
        ways = [1] + [0] * depth  # paths ending at each height, by a DP over the steps
        for _ in range(length):
            ways = [
                (ways[h - 1] if h else 0) + (ways[h + 1] if h < depth else 0)
                for h in range(depth + 1)
            ]
        return ways[0] * self.k**m

    def log_count(self, length: int) -> float:
        """Natural log of :meth:`count` (-inf for odd lengths); no big integers if unbounded."""
        length = check_int("length", length, 0)
        if length % 2:
            return -math.inf
        if self.max_depth is not None:
            return math.log(self.count(length))
        m = length // 2
        return (math.lgamma(2 * m + 1) - math.lgamma(m + 1) - math.lgamma(m + 2)
                + m * math.log(self.k))

    # -- sampling ----------------------------------------------------------------------------

    def sample_codes(self, rng: np.random.Generator, lengths: Sequence[int]) -> Codes:
        """One exactly uniform word of each requested length.

        Args:
            rng: Source of randomness.
            lengths: Even, non-negative ints ``(batch,)``.

        Returns:
            ``(codes, lengths)``: uint8 ``(batch, pos)`` padded with ``PAD_CODE``, int64
            ``(batch,)``.
        """
        rng = check_rng(rng)
        lengths = check_lengths(lengths)
        codes = np.full((lengths.size, int(lengths.max(initial=0))), PAD_CODE, dtype=np.uint8)
        for idx in _chunks(lengths):
            block = self._sample_block(rng, lengths[idx])
            codes[idx, : block.shape[1]] = block
        return codes, lengths

    def sample(self, rng: np.random.Generator, lengths: Sequence[int]) -> list[str]:
        """Like :meth:`sample_codes`, as strings."""
        return self.alphabet.decode(*self.sample_codes(rng, lengths))

    def _sample_block(self, rng: np.random.Generator, lengths: np.ndarray) -> np.ndarray:
        """Uniform words for decreasing ``lengths``: a uniform path, then uniform pair types.

        A row with r symbols left at height h opens with probability N(r - 1, h + 1) / N(r, h),
        N counting the ways to finish: the ballot ratio (r - h)(h + 2) / (2r(h + 1)) unbounded, a
        DP table bounded. Every path with m pairs carries exactly k^m typings, so typing the pairs
        (adjacent in the level order of :func:`_pair_order`) independently keeps it uniform.

        Returns:
            uint8 ``(batch, pos)``.
        """
        n = lengths.size
        width = int(lengths[0]) if n else 0
        if width == 0:
            return np.zeros((n, 0), dtype=np.uint8)
        if self.max_depth is not None:
            steps = 1 << max(6, (width - 1).bit_length())  # few distinct sizes, so the cache hits
            table = _up_table(steps, min(self.max_depth, steps // 2))
            flat_table, cols = table.ravel(), table.shape[1]
        u = rng.random((width, n))  # (pos, batch): every step reads a contiguous row
        if self.max_depth is None:
            def step(t: int, hh: np.ndarray, rem: np.ndarray) -> np.ndarray:
                return u[t, : hh.size] * (2.0 * rem * (hh + 1.0)) < (rem - hh) * (hh + 2.0)
        else:
            def step(t: int, hh: np.ndarray, rem: np.ndarray) -> np.ndarray:
                return u[t, : hh.size] < flat_table[rem.astype(np.int64) * cols
                                                    + hh.astype(np.int64)]
        down, level = _walk(lengths, width, step)
        return _type_pairs(self.k, rng, down, level, lengths)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and repr(other) == repr(self)

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        return f"Dyck(k={self.k}, max_depth={self.max_depth}, pairs={self.pairs!r})"


class DeepDyck(Dyck):
    """Dyck-k sampled among its words of depth (maximum height) at least D: test strings
    deeper than any training string.

    Membership, structure and local validity are Dyck-k's (:meth:`is_member` accepts shallow
    words too, so a negative built from a deep word is verified against all of Dyck-k, and the
    hard negatives keep their meaning); what is restricted is what :meth:`sample_codes` draws
    and what :meth:`count` counts, the words of depth >= ``min_depth``. A word of depth D has
    at least 2D symbols (:attr:`shortest_word`). Test depth with :meth:`max_depths`.

    Attributes:
        min_depth: D >= 1.
        name: ``"Dyck-3 (depth >= 5)"``.
    """

    def __init__(self, k: int, min_depth: int, pairs: Sequence[str] | None = None) -> None:
        super().__init__(k, None, pairs)
        self.min_depth = check_int("min_depth", min_depth, 1)
        self.name = f"Dyck-{self.k} (depth >= {self.min_depth})"

    @property
    def shortest_word(self) -> int:
        """2D: the shortest word of depth D, D openers then D closers."""
        return 2 * self.min_depth

    def count(self, length: int) -> int:
        """Exact number of words of ``length`` and depth >= D: paths times k^(length/2)."""
        length = check_int("length", length, 0)
        if length % 2 or length < self.shortest_word:
            return 0
        for row in _deep_rows(length, self.min_depth):
            pass
        return row[0] * self.k ** (length // 2)

    def log_count(self, length: int) -> float:
        """Natural log of :meth:`count` (-inf where it is 0)."""
        count = self.count(length)
        return math.log(count) if count else -math.inf

    def sample_codes(self, rng: np.random.Generator, lengths: Sequence[int]) -> Codes:
        """One exactly uniform word of depth >= D of each requested length.

        Args:
            rng: Source of randomness.
            lengths: Even ints >= 2D ``(batch,)``.

        Returns:
            ``(codes, lengths)`` as :meth:`Dyck.sample_codes`.

        Raises:
            ValueError: a length below 2 * ``min_depth`` (no word that deep exists), or an
                argument that :meth:`Dyck.sample_codes` refuses.
        """
        checked = check_lengths(lengths)
        short = checked < self.shortest_word
        if short.any():
            i = int(np.argmax(short))
            raise ValueError(f"lengths[{i}] = {checked[i]} is below 2 * min_depth = "
                             f"{self.shortest_word}: {self.name} has no word that short")
        return super().sample_codes(rng, lengths)

    def _sample_block(self, rng: np.random.Generator, lengths: np.ndarray) -> np.ndarray:
        """Uniform deep words for decreasing ``lengths`` (each >= 2D): a path uniform among
        those that reach D, then uniform pair types as :meth:`Dyck._sample_block` (same draws:
        ``rng.random((pos, batch))``, then the types).

        Until a row has reached D it opens with probability N(r - 1, h + 1) / N(r, h), N
        counting the ways to finish that reach D (:func:`_deep_up_table`, exact ints rounded
        once); from then on every way to finish counts, so it opens with the unbounded ballot
        ratio.

        Returns:
            uint8 ``(batch, pos)``.
        """
        n = lengths.size
        width = int(lengths[0])
        depth = self.min_depth
        steps = 1 << max(6, (width - 1).bit_length())  # few distinct sizes, so the cache hits
        flat_table = _deep_up_table(steps, depth).ravel()
        reached = np.zeros(n, dtype=bool)
        u = rng.random((width, n))  # (pos, batch), as Dyck's

        def step(t: int, hh: np.ndarray, rem: np.ndarray) -> np.ndarray:
            a = hh.size
            free = u[t, :a] * (2.0 * rem * (hh + 1.0)) < (rem - hh) * (hh + 2.0)
            below = np.minimum(hh, depth - 1).astype(np.int64)
            bound = u[t, :a] < flat_table[rem.astype(np.int64) * depth + below]
            up = np.where(reached[:a], free, bound)
            reached[:a] |= up & (hh >= depth - 1)
            return up

        down, level = _walk(lengths, width, step)
        return _type_pairs(self.k, rng, down, level, lengths)

    def __repr__(self) -> str:
        return f"DeepDyck(k={self.k}, min_depth={self.min_depth}, pairs={self.pairs!r})"


# ----------------------------------------------- local validity: what a window of w symbols can see
def _reductions(k: int, n: int) -> tuple[np.ndarray, ...]:
    """Stack reduction of every word of length n over the 2k codes (index: base 2k, big-endian).

    Returns:
        ``(crossed, closers, openers, low, high)``, each ``((2k)^n,)``: a closer met an
        unmatched opener of another type; unmatched closers; unmatched openers; minimum and
        maximum height relative to the start (0 included).
    """
    base = 2 * k
    index = np.arange(base**n, dtype=np.int32)  # (2k)^n <= 2^24
    stack = np.zeros(index.size, dtype=np.int32)  # unmatched opener types in base k, top last
    openers, closers, h, low, high = (np.zeros(index.size, dtype=np.int8) for _ in range(5))
    crossed = np.zeros(index.size, dtype=bool)
    for j in range(n):
        code = index // base ** (n - 1 - j) % base
        t, opens = code >> 1, (code & 1) == 0
        pops = ~opens & (openers > 0)
        crossed |= pops & (stack % k != t)
        closers += ~opens & (openers == 0)
        stack = np.where(opens, stack * k + t, np.where(pops, stack // k, stack))
        openers += opens.astype(np.int8) - pops
        h += 2 * opens.astype(np.int8) - 1
        np.minimum(low, h, out=low)
        np.maximum(high, h, out=high)
    return crossed, closers, openers, low, high


@functools.lru_cache(maxsize=16)
def _local_tables(k: int, max_depth: int | None, width: int) -> tuple[np.ndarray, ...]:
    # a factor reduces to closers* openers*; a prefix to openers*; a suffix to closers*; under a
    # depth bound the relative heights must also fit in D (a prefix starts at 0, so max <= D)
    crossed, _, _, low, high = _reductions(k, width)
    infix = ~crossed & ((high - low <= max_depth) if max_depth is not None else True)
    crossed, closers, openers, low, high = _reductions(k, width - 1)
    fits = (high - low <= max_depth) if max_depth is not None else True
    tables = (infix, ~crossed & (closers == 0) & fits, ~crossed & (openers == 0) & fits)
    for table in tables:
        table.flags.writeable = False
    return tables


def local_tables(language: Dyck, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which windows a word of ``language`` can contain, by brute force over all windows.

    Args:
        language: A :class:`Dyck`.
        width: Window width w >= 2, with (2k)^w <= 2^24.

    Returns:
        ``(infix, prefix, suffix)``: read-only bool tables indexed by :func:`window_index` (base
        2k); ``infix`` ``((2k)^w,)``: the w-window is a factor of some word; ``prefix`` and
        ``suffix`` ``((2k)^(w-1),)``: the (w-1)-window begins / ends some word.
    """
    if not isinstance(language, Dyck):
        raise ValueError(f"language must be a Dyck, got {type(language).__name__}")
    width = check_int("width", width, 2)
    if (2 * language.k) ** width > _MAX_TABLE:
        raise ValueError(f"k={language.k} and width={width} need (2k)^width = "
                         f"{(2 * language.k) ** width} window cells, more than 2**24")
    return _local_tables(language.k, language.max_depth, width)


def _local(codes: np.ndarray, lengths: np.ndarray, language: Dyck, width: int) -> np.ndarray:
    infix, prefix, suffix = local_tables(language, width)
    ok = np.empty(lengths.size, dtype=bool)
    short = lengths < width
    if short.any():  # prefix and suffix are the whole string: valid iff a member
        ok[short] = language.is_member((codes[short], lengths[short]))
    rows = np.flatnonzero(~short)
    if rows.size:
        n = lengths[rows]
        x = np.where(_valid(n, codes.shape[1]), codes[rows], 0)  # (rows, pos)
        windows = window_index(x, width, 2 * language.k)
        seen = infix[windows] | (np.arange(windows.shape[1]) > (n - width)[:, None])
        tail = np.take_along_axis(x, n[:, None] - width + 1 + np.arange(width - 1), axis=1)
        head = window_index(x[:, : width - 1], width - 1, 2 * language.k)[:, 0]
        tail = window_index(tail, width - 1, 2 * language.k)[:, 0]
        ok[rows] = seen.all(axis=1) & prefix[head] & suffix[tail]
    return ok


def locally_valid(language: Dyck, codes: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
    """Whether no window of ``width`` symbols shows that a string is not in ``language``.

    True iff every window of w consecutive symbols is a factor of some word, the first
    min(w - 1, length) symbols begin some word and the last min(w - 1, length) end one. A
    string shorter than w is therefore locally valid iff it is a member.

    Args:
        language: A :class:`Dyck`.
        codes: uint8 ``(batch, pos)``.
        lengths: ints ``(batch,)``.
        width: Window width w (see :func:`local_tables`).

    Returns:
        bool ``(batch,)``.
    """
    local_tables(language, width)  # validates language and width before the codes
    codes, lengths = language._codes(codes, lengths)
    fn = functools.partial(_local, language=language, width=width)
    return _by_chunks(fn, codes, lengths)
