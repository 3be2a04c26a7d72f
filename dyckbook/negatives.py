"""Negative examples for Dyck-k and Dyck-(k, D): the kinds, their promises, the non-local regime.

Every negative is verified to be a non-member. Every *hard* negative also has even length >= 4,
the same number of openers and closers of every type, an opener first and a closer last, and
(Dyck-(k, D)) no height above D: counts, the end symbols and depth carry no signal. With
``window=w`` (the non-local regime) each hard negative is also ``locally_valid`` at width w: no
window of w symbols, nor its first or last w - 1 symbols, shows that it is not a word, so a
strictly w-local recogniser cannot beat chance on it.

Kinds, what is wrong, and what can reject them:

- ``random``: a uniform random string, redrawn until it is not a member. Counts, the first
  symbol or a window of two reject nearly all of them. Not hard; ``window`` does not apply.
- ``dip``: a top-level pair other than the first and the last turned inside out,
  ``P (X) Q -> P )X( Q``; the running count dips to -1. The whole string is a factor (it
  reduces to one closer and one opener), so windows see it only near the ends: it is non-local
  when P and Q are long (for Dyck-(k, D) also when the dip is far from any height-D point).
  Rejected by the running count (a stack height).
- ``rotation``: a member rotated to start at an opener that follows a closer inside an open
  pair (needs D >= 2); closers come before their openers. Also a factor, so local only near
  the ends; rejected by the running count.
- ``swap``: two symbols of a member exchanged. Mostly a local error (a type clash next to a
  partner, ``)(`` at a dip); non-local when both ends of the damage are far from each other's
  partners and from the string's ends. Rejected by the running count or by type matching.
- ``crossing``: a pair and its first child, of different types, exchange closers,
  ``([X]) -> ([X)]`` (needs k >= 2, D >= 2). Heights are a member's: only type matching
  rejects it; a window sees it iff it spans the child, so it is non-local when |X| >= w - 1.
- ``deep_mismatch``: a pair at maximum depth among the pairs that enclose another pair
  exchanges its closer with the closer of a pair of another type (needs k >= 2, D >= 2).
  Heights are a member's: only type matching rejects it; a window sees it iff it spans one of
  the two pairs, so it is non-local when both enclose at least w - 1 symbols.

Availability (:func:`available_kinds`): structural rules (even length >= the kind's minimum,
and >= 6 for Dyck-1, whose only length-4 candidates ``(())`` and ``()()`` are members; k and D
large enough); in the non-local regime also a deterministic probe: the kind is available iff
at least 20 of 2048 fixed-seed candidates of the length keep every promise. Pass rates grow with
the length, so lengths beyond 8w + 8 take the verdict of 8w + 8 (under D = 1 nothing is ever
non-local; under D = 2 no crossing is, its child being a leaf).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dyckbook.languages import Dyck, check_int, check_lengths, check_rng, locally_valid
from dyckbook.vocab import PAD_CODE

__all__ = ["HARD_KINDS", "NEGATIVE_KINDS", "NegativeKind", "available_kinds", "sample_negatives"]

_MAX_ROUNDS = 64  # rejection rounds before giving up (each round oversamples the rare kinds)
_MAX_CELLS = 1 << 22  # candidate cells generated per round at most
_PROBE_SIZE, _PROBE_PASSES = 2048, 20  # available iff >= ~1% of the probe's candidates pass


@dataclass(frozen=True)
class NegativeKind:
    """One kind of negative example."""

    name: str  # identifier in datasets and metrics
    description: str  # one sentence: what is wrong with such a string
    min_k: int  # fewest bracket types for which it exists
    hard: bool  # keeps the hard promises (counts, first opener, last closer, depth)
    min_length: int = 4  # shortest length at which it can exist (Dyck-1: at least 6)
    min_depth: int = 1  # smallest depth bound D for which it exists


NEGATIVE_KINDS: dict[str, NegativeKind] = {
    kind.name: kind
    for kind in (
        NegativeKind("random", "A uniform random string that is not a word.", 1, False, 1),
        NegativeKind("dip", "A top-level pair is turned inside out: )X(.", 1, True, 6),
        NegativeKind("rotation", "A cyclic rotation of a word, cut inside a pair.", 1, True, 6, 2),
        NegativeKind("swap", "Two symbols of a word are exchanged.", 1, True),
        NegativeKind("crossing", "A pair and its first child exchange closers.", 2, True, 4, 2),
        NegativeKind("deep_mismatch", "A deepest parent pair's closer is another type's.", 2,
                     True, 4, 2),
    )
}
HARD_KINDS: tuple[str, ...] = tuple(name for name, kind in NEGATIVE_KINDS.items() if kind.hard)


def _check_language(language: object) -> Dyck:
    if not isinstance(language, Dyck):
        raise ValueError(f"language must be a Dyck, got {type(language).__name__}")
    return language


def _check_window(window: object) -> int | None:
    return None if window is None else check_int("window", window, 2)


def _resolve(kinds: str | Sequence[str]) -> tuple[str, ...]:
    if kinds == "hard":
        return HARD_KINDS
    names = (kinds,) if isinstance(kinds, str) else tuple(dict.fromkeys(kinds))
    unknown = [name for name in names if name not in NEGATIVE_KINDS]
    if not names or unknown:
        raise ValueError(f"kinds must be 'hard', a kind name or a sequence of them "
                         f"{list(NEGATIVE_KINDS)}, got {kinds!r}")
    return names


# -- constructions: (codes, ok) for a batch of lengths; ok marks rows where the construction applied
def _pick(rng: np.random.Generator, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly chosen True column of each row, and whether the row has one: ``(batch,)``."""
    col = np.argmax(np.where(mask, rng.random(mask.shape), -1.0), axis=1)
    return col, mask.any(axis=1)


def _exchange(codes: np.ndarray, ok: np.ndarray, i: np.ndarray, j: np.ndarray) -> None:
    """Exchange columns i and j of the rows where ``ok`` holds, in place."""
    rows, i, j = np.flatnonzero(ok), i[ok], j[ok]
    codes[rows, i], codes[rows, j] = codes[rows, j], codes[rows, i]


def _word(language: Dyck, rng: np.random.Generator, lengths: np.ndarray):
    """Uniform words of ``lengths`` and the mask of their real symbols, ``(batch, pos)``."""
    codes, _ = language.sample_codes(rng, lengths)
    return codes, np.arange(codes.shape[1]) < lengths[:, None]


def _random(language: Dyck, rng: np.random.Generator, lengths: np.ndarray):
    width = int(lengths.max())
    codes = rng.integers(0, 2 * language.k, size=(lengths.size, width), dtype=np.uint8)
    codes[np.arange(width) >= lengths[:, None]] = PAD_CODE
    return codes, np.ones(lengths.size, dtype=bool)


def _dip(language: Dyck, rng: np.random.Generator, lengths: np.ndarray):
    codes, valid = _word(language, rng, lengths)
    partner, h = language.matching(codes, lengths), language.heights(codes, lengths)
    top = valid & (codes % 2 == 0) & (h == 1) & (partner != lengths[:, None] - 1)
    top[:, 0] = False  # neither the first nor (above) the last top-level pair
    a, ok = _pick(rng, top)
    rows, a = np.flatnonzero(ok), a[ok]
    b = partner[rows, a]
    codes[rows, a] += 1  # opener -> closer of its type
    codes[rows, b] -= 1  # closer -> opener of its type
    return codes, ok


def _rotation(language: Dyck, rng: np.random.Generator, lengths: np.ndarray):
    codes, valid = _word(language, rng, lengths)
    h = language.heights(codes, lengths)
    after_closer = np.zeros_like(valid)
    after_closer[:, 1:] = (codes[:, :-1] % 2 == 1) & (h[:, :-1] > 0)  # still inside a pair
    r, ok = _pick(rng, valid & (codes % 2 == 0) & after_closer)
    idx = (r[:, None] + np.arange(codes.shape[1])) % np.maximum(lengths, 1)[:, None]
    rotated = np.take_along_axis(codes, idx, axis=1)
    rotated[~valid] = PAD_CODE
    return rotated, ok


def _swap(language: Dyck, rng: np.random.Generator, lengths: np.ndarray):
    codes, _ = _word(language, rng, lengths)
    rows = np.arange(lengths.size)
    i, j = (rng.random((2, lengths.size)) * lengths).astype(np.int64)
    ok = codes[rows, i] != codes[rows, j]
    _exchange(codes, ok, i, j)
    return codes, ok


def _crossing(language: Dyck, rng: np.random.Generator, lengths: np.ndarray):
    codes, valid = _word(language, rng, lengths)
    partner = language.matching(codes, lengths)
    opener = valid & (codes % 2 == 0)
    cand = np.zeros_like(opener)
    cand[:, :-1] = opener[:, :-1] & opener[:, 1:] & (codes[:, :-1] >> 1 != codes[:, 1:] >> 1)
    a, ok = _pick(rng, cand)
    rows = np.arange(lengths.size)
    _exchange(codes, ok, partner[rows, a], partner[rows, np.minimum(a + 1, codes.shape[1] - 1)])
    return codes, ok


def _deep_mismatch(language: Dyck, rng: np.random.Generator, lengths: np.ndarray):
    codes, valid = _word(language, rng, lengths)
    partner, h = language.matching(codes, lengths), language.heights(codes, lengths)
    parent = valid & (codes % 2 == 0) & (partner > np.arange(codes.shape[1]) + 1)
    depth = np.where(parent, h, -1)  # height after an opener = its pair's depth
    c, ok = _pick(rng, parent & (depth == depth.max(axis=1, keepdims=True)))
    rows = np.arange(lengths.size)
    other = valid & (codes % 2 == 1) & ((codes >> 1) != (codes[rows, c] >> 1)[:, None])
    f, has_other = _pick(rng, other)
    _exchange(codes, ok & has_other, partner[rows, c], f)
    return codes, ok & has_other


_CONSTRUCTIONS = {
    "random": _random,
    "dip": _dip,
    "rotation": _rotation,
    "swap": _swap,
    "crossing": _crossing,
    "deep_mismatch": _deep_mismatch,
}


def _keeps_promises(language: Dyck, name: str, codes: np.ndarray, lengths: np.ndarray,
                    window: int | None) -> np.ndarray:
    """bool ``(batch,)``: a non-member and, for a hard kind, every hard (and local) promise.

    Counts per type need no check: every construction permutes a word or flips a pair. Each
    check runs on the rows still standing, the most selective first.
    """
    ok = np.ones(lengths.size, dtype=bool)
    if NEGATIVE_KINDS[name].hard:
        ok = (codes[:, 0] % 2 == 0) & (codes[np.arange(lengths.size), lengths - 1] % 2 == 1)
        if window is not None:
            ok[ok] = locally_valid(language, codes[ok], lengths[ok], window)
        if language.max_depth is not None:
            ok[ok] = language.max_depths(codes[ok], lengths[ok]) <= language.max_depth
    ok[ok] = ~language.is_member((codes[ok], lengths[ok]))
    return ok


def _candidates(language, rng, name, lengths, window) -> tuple[np.ndarray, np.ndarray]:
    codes, ok = _CONSTRUCTIONS[name](language, rng, lengths)
    ok[ok] = _keeps_promises(language, name, codes[ok], lengths[ok], window)
    return codes, ok


@functools.lru_cache(maxsize=4096)
def _probe(language: Dyck, name: str, length: int, window: int) -> bool:
    """Whether >= ``_PROBE_PASSES`` of ``_PROBE_SIZE`` fixed-seed candidates keep every promise.

    The first 256 candidates usually settle it; the rest come in one block if they do not.
    """
    seed = [language.k, language.max_depth or 0, length, list(NEGATIVE_KINDS).index(name), window]
    rng, passes = np.random.default_rng(seed), 0
    for block in (256, _PROBE_SIZE - 256):
        passes += int(_candidates(language, rng, name, np.full(block, length), window)[1].sum())
        if passes >= _PROBE_PASSES:
            return True
    return False


def _available(language: Dyck, name: str, length: int, window: int | None) -> bool:
    kind = NEGATIVE_KINDS[name]
    if not kind.hard:
        return length >= 1  # the empty string is a word
    shortest = max(kind.min_length, 6 if language.k == 1 else 4)
    if length < shortest or length % 2 or language.k < kind.min_k:
        return False
    if language.max_depth is not None and language.max_depth < kind.min_depth:
        return False
    if window is None:
        return True
    # pass rates grow with the length, so the longest probed length speaks for longer ones
    length = min(length, 8 * window + 8)
    return _probe(language, name, length, window)


def available_kinds(language: Dyck, length: int, kinds: str | Sequence[str] = "hard",
                    window: int | None = None) -> tuple[str, ...]:
    """The kinds among ``kinds`` that :func:`sample_negatives` can draw at ``length``.

    Args:
        language: A :class:`~dyckbook.languages.Dyck`.
        length: String length (>= 0).
        kinds: ``"hard"``, a kind name, or a sequence of kind names.
        window: None (the local regime) or the width w >= 2 of the non-local regime.

    Returns:
        The available kind names, in the order of ``kinds``.
    """
    _check_language(language)
    length = check_int("length", length, 0)
    window = _check_window(window)
    return tuple(name for name in _resolve(kinds) if _available(language, name, length, window))


def _by_length(want: np.ndarray, have: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pair the i-th ``have`` of each length with the i-th ``want`` of that length.

    Returns:
        ``(into_want, into_have)``: int64 indices of the matched elements.
    """
    w_order, h_order = np.argsort(want, kind="stable"), np.argsort(have, kind="stable")
    ws, hs = want[w_order], have[h_order]
    rank = np.arange(hs.size) - np.searchsorted(hs, hs)  # rank of each have among its length
    pos = np.searchsorted(ws, hs) + rank
    take = pos < np.searchsorted(ws, hs, side="right")
    return w_order[pos[take]], h_order[take]


def _sample_kind(language, rng, name, lengths, window) -> np.ndarray:
    """uint8 ``(batch, pos)`` negatives of one kind by vectorised rejection.

    Each round draws, for every missing row, as many candidates as its length's pass rate in
    the previous round asks for. Passing candidates are i.i.d. given their length, so any of
    them may fill any missing row of that length.
    """
    out = np.full((lengths.size, int(lengths.max())), PAD_CODE, dtype=np.uint8)
    todo, reps = np.arange(lengths.size), np.ones(lengths.size, dtype=np.int64)
    for _ in range(_MAX_ROUNDS):
        drawn = np.repeat(lengths[todo], reps)
        codes, ok = _candidates(language, rng, name, drawn, window)
        passed = np.flatnonzero(ok)
        into, src = _by_length(lengths[todo], drawn[passed])
        out[todo[into], : codes.shape[1]] = codes[passed[src]]
        missing = np.ones(todo.size, dtype=bool)
        missing[into] = False
        todo, reps = todo[missing], reps[missing]
        if todo.size == 0:
            return out
        values, inverse = np.unique(drawn, return_inverse=True)
        rate = (np.bincount(inverse, weights=ok) / np.bincount(inverse))[
            np.searchsorted(values, lengths[todo])
        ]
        reps = np.where(rate > 0, np.ceil(1.2 / np.maximum(rate, 1e-9)), 8 * reps)
        scale = min(1.0, _MAX_CELLS / float((reps * lengths[todo]).sum()))  # bound the memory
        reps = np.clip(reps * scale, 1, 1024).astype(np.int64)
    raise RuntimeError(f"no {name} negative of length {lengths[todo[0]]} for {language.name} "
                       f"(window={window}) in {_MAX_ROUNDS} rounds")


def sample_negatives(language: Dyck, rng: np.random.Generator, lengths: Sequence[int],
                     kinds: str | Sequence[str] = "hard", window: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One verified non-member of each requested length, labelled with its kind.

    Args:
        language: A :class:`~dyckbook.languages.Dyck`.
        rng: Source of randomness.
        lengths: ints ``(batch,)``; every length must have an available kind.
        kinds: ``"hard"`` (a uniform mixture of the hard kinds available at each length), a kind
            name, or a sequence of names (a uniform mixture of those available).
        window: None, or w >= 2: hard negatives are also locally valid at width w (``random``
            ones ignore it).

    Returns:
        ``(codes, lengths, kinds)``: uint8 ``(batch, pos)`` padded with ``PAD_CODE``, int64
        ``(batch,)``, and str ``(batch,)`` kind names.
    """
    _check_language(language)
    rng = check_rng(rng)
    lengths = check_lengths(lengths, even=False)
    names, window = _resolve(kinds), _check_window(window)
    choice = np.zeros(lengths.size, dtype=np.int64)  # index into names
    for length in np.unique(lengths).tolist():
        avail = [names.index(n) for n in available_kinds(language, length, names, window)]
        if not avail:
            raise ValueError(f"lengths holds {length}, but no negative of kinds {names} exists "
                             f"at length {length} for {language.name} (window={window})")
        rows = np.flatnonzero(lengths == length)
        choice[rows] = np.array(avail)[rng.integers(0, len(avail), size=rows.size)]
    codes = np.full((lengths.size, int(lengths.max(initial=0))), PAD_CODE, dtype=np.uint8)
    for i, name in enumerate(names):
        rows = np.flatnonzero(choice == i)
        if rows.size:
            block = _sample_kind(language, rng, name, lengths[rows], window)
            codes[rows, : block.shape[1]] = block
    return codes, lengths, np.array(names)[choice]
