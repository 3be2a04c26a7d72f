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

What the hard kinds can be rejected by, measured (``baselines.attack``, the book's chapter on
Dyck languages): at the grid's lengths ``dip`` and ``rotation`` by one running count, ``swap``
mostly by counters per type, and most of every kind by an exact window of 6 to 8 symbols or by
its first and last few symbols. They are *local* in the book's sense only up to w = 4.

Long-range kinds, the verdict-bearing sets (``stack`` regime); W = :func:`long_range_window`
of the length, max(8, ceil(length / 3)):

- ``stack`` (k >= 2): two pairs A before B at one depth, each spanning W symbols or more, of
  types a != b, inside a common ancestor of type b, exchange their closers. The heights, every
  type's projection and every (height, type) tally stay a word's, so no counter rejects it; no
  window of W symbols (nor the first or last W - 1) holds a mismatched pair.
- ``far`` (k = 1, where the running count is the stack): a top-level pair at least W symbols
  from both ends, after a closer and before an opener, turned inside out, ``P (X) Q -> P )X(
  Q``: the count dips below 0 there, and no window of W symbols (nor the first or last W - 1)
  sees the dip.

Their members (:func:`sample_matched_members`) are made from the same words: for ``far`` the
word itself; for ``stack`` the word with B retyped to a, so that in both classes A and B show
a closer and an opener of one type where they meet and a same-typed pair sits under the
ancestor of another type. A negative and its member differ in two symbols
(:func:`sample_minimal_pairs`). What the sets are measured against is
``dyckbook.rules.adversary``'s rules (``benchmarks/bench_adversary.py``): the per-height type tally,
the exact window at W and the old oracle do not beat chance; learned rules that read heights,
gapped pairs or local pieces (an MLP on (height, symbol) counts, skip-grams, CNNs of receptive
field W, kNN on edit distance) still do, as the Dyck chapter's table shows.

Availability (:func:`available_kinds`): structural rules (even length >= the kind's minimum,
and >= 6 for Dyck-1, whose only length-4 candidates ``(())`` and ``()()`` are members; k and D
large enough); in the non-local regime also a deterministic probe: the kind is available iff
at least 20 of 2048 fixed-seed candidates of the length keep every promise. Pass rates grow with
the length, so lengths beyond 8w + 8 take the verdict of 8w + 8 (under D = 1 nothing is ever
non-local; under D = 2 no crossing is, its child being a leaf).

A language whose words start at some length (``shortest_word`` > 0: a
:class:`~dyckbook.data.languages.DeepDyck`, whose words reach depth D, so hard negatives are
made from deep words) has no hard negative below it, and every hard kind is probed at the
requested length itself (local regime included): near 2D its words are nearly all alike.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dyckbook.data.config import Declared, check_fields, describe, is_int
from dyckbook.data.hardness import profile
from dyckbook.data.languages import (
    Dyck,
    check_int,
    check_lengths,
    check_rng,
    locally_valid,
)
from dyckbook.data.vocab import PAD_CODE

__all__ = ["HARD_KINDS", "LONG_RANGE_KINDS", "NEGATIVE_KINDS", "NegativeKind", "available_kinds",
           "long_range_window", "sample_matched_members", "sample_minimal_pairs",
           "sample_negatives", "spread_window", "stack_kind"]

_MAX_ROUNDS = 64  # rejection rounds before giving up (each round oversamples the rare kinds)
_MAX_CELLS = 1 << 22  # candidate cells generated per round at most
_PROBE_SIZE, _PROBE_PASSES = 2048, 20  # available iff >= ~1% of the probe's candidates pass
_LONG_RANGE_PROBE = 8  # the long-range kinds' probe is 8 times larger: >= ~0.12% pass


@dataclass(frozen=True)
class NegativeKind:
    """One kind of negative example."""

    name: str  # identifier in datasets and metrics
    description: str  # one sentence: what is wrong with such a string
    min_k: int  # fewest bracket types for which it exists
    hard: bool  # keeps the hard promises (counts, first opener, last closer, depth)
    min_length: int = 4  # shortest length at which it can exist (Dyck-1: at least 6)
    min_depth: int = 1  # smallest depth bound D for which it exists
    max_k: int | None = None  # most bracket types for which it is built (None: any)
    long_range: bool = False  # built non-local at a window W of the length, far from the ends
    #: what the construction guarantees of every string it keeps (the docs' tables)
    guarantees: str = ""
    #: the construction: ``(language, rng, lengths) -> (codes, ok)``, a long-range kind's
    #: ``-> (codes, ok, words)`` (the words kept for its matched members)
    build: Callable[..., tuple[np.ndarray, ...]] | None = field(default=None, repr=False,
                                                                 compare=False)
    #: a long-range kind's W of every length, ``(batch,) -> (batch,)``: verified, no window of W
    #: symbols rejects one of its strings
    window: Callable[[np.ndarray], np.ndarray] | None = field(default=None, repr=False,
                                                              compare=False)
    counter_free: bool = False  # verified: no counter without a stack rejects it


DEFAULT_WINDOW = 4  # w of the non-local regime unless asked otherwise (DataConfig.window too)
LONG_RANGE_MIN_WINDOW = 8  # W is never below this


def long_range_window(length: int) -> int:
    """W of the long-range kinds at ``length``: max(8, ceil(length / 3))."""
    return max(LONG_RANGE_MIN_WINDOW, -(-int(length) // 3))


def long_range_windows(lengths: np.ndarray) -> np.ndarray:
    """:func:`long_range_window` of every length: int64 ``(batch,)``."""
    return np.maximum(LONG_RANGE_MIN_WINDOW, -(-np.asarray(lengths, dtype=np.int64) // 3))


SPREAD_MIN_WINDOW = 4  # the spread layout's W is never below this


def spread_window(length: int) -> int:
    """W of the ``spread`` kind at ``length``: max(4, ceil(length / 6)); its layout needs about
    4W symbols, so it cannot exist at the stack set's W = n / 3."""
    return max(SPREAD_MIN_WINDOW, -(-int(length) // 6))


def spread_windows(lengths: np.ndarray) -> np.ndarray:
    """:func:`spread_window` of every length: int64 ``(batch,)``."""
    return np.maximum(SPREAD_MIN_WINDOW, -(-np.asarray(lengths, dtype=np.int64) // 6))


def stack_kind(language: Dyck) -> str:
    """The long-range kind of a language's ``stack`` regime: ``stack``, or ``far`` when k = 1."""
    return "far" if _check_language(language).k == 1 else "stack"


def _check_language(language: object) -> Dyck:
    check_fields("", {"language": language},
                 {"language": ((lambda v: isinstance(v, Dyck)), "a dyckbook.data.languages.Dyck")})
    return language  # type: ignore[return-value]


def _check_window(window: object) -> int | None:
    check_fields("", {"window": window},
                 {"window": ((lambda v: v is None or is_int(v, 2)), "None or an int >= 2")})
    return None if window is None else int(window)  # type: ignore[call-overload]


def _resolve(kinds: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(kinds, str) and kinds in ("hard", "long_range"):
        return HARD_KINDS if kinds == "hard" else LONG_RANGE_KINDS
    try:  # a name, or any sequence of hashable names
        names = (kinds,) if isinstance(kinds, str) else tuple(dict.fromkeys(kinds))
    except TypeError:
        names = ()
    unknown = [name for name in names if not isinstance(name, str) or name not in NEGATIVE_KINDS]
    if not names or unknown:
        raise ValueError(f"kinds must be 'hard', 'long_range', a kind name or a sequence of them "
                         f"{list(NEGATIVE_KINDS)}, got {describe(kinds)}")
    return names


# -- constructions: (codes, ok) for a batch of lengths; ok marks rows where the construction applied
def _pick(rng: np.random.Generator, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A uniformly chosen True column of each row, and whether the row has one: ``(batch,)``.

    The r-th True of a row with c of them, r uniform in 0..c - 1 (one draw per row).
    """
    seen = np.cumsum(mask, axis=1, dtype=np.int32)  # (batch, col)
    count = seen[:, -1] if mask.shape[1] else np.zeros(mask.shape[0], np.int32)
    rank = (rng.random(mask.shape[0]) * count).astype(np.int32)  # (batch,)
    return np.argmax(seen > rank[:, None], axis=1), count > 0


def _pick_pair(rng: np.random.Generator, mask: np.ndarray) -> tuple[np.ndarray, ...]:
    """A uniformly chosen True cell ``(i, j)`` of each row's matrix ``(batch, m, m)``, and
    whether it has one: a row i weighted by its count, then a column of it."""
    counts = mask.sum(axis=2, dtype=np.int32)  # (batch, m)
    seen = np.cumsum(counts, axis=1)
    rank = (rng.random(mask.shape[0]) * seen[:, -1]).astype(np.int32)
    i = np.argmax(seen > rank[:, None], axis=1)
    j, _ = _pick(rng, mask[np.arange(mask.shape[0]), i])
    return i, j, seen[:, -1] > 0


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


def _pairs(language: Dyck, codes: np.ndarray, valid: np.ndarray, lengths: np.ndarray):
    """Every pair of each word in opener order: ``(o, c, depth, type, real)``, ``(batch, pair)``
    each (``depth`` 0: top level; ``real``: the row has that many pairs)."""
    n_pairs = max(codes.shape[1] // 2, 1)
    opener = valid & (codes % 2 == 0)
    o = np.argsort(~opener, axis=1, kind="stable")[:, :n_pairs]  # openers in text order
    real = np.arange(n_pairs) < lengths[:, None] // 2
    c = np.where(real, np.take_along_axis(language.matching(codes, lengths), o, 1), -1)
    depth = np.take_along_axis(language.heights(codes, lengths).astype(np.int64), o, 1) - 1
    return o, c, depth, np.take_along_axis(codes, o, 1).astype(np.int64) >> 1, real


def _stack_eligible(k: int, o, c, depth, kind, real, long) -> np.ndarray:
    """bool ``(batch, A, B)``: A before B at its depth, both long, of types a != b, with a
    common ancestor of type b."""
    encloses = (o[:, :, None] < o[:, None, :]) & (c[:, :, None] > c[:, None, :]) \
        & real[:, :, None] & real[:, None, :]  # (batch, X, Y): X encloses Y
    eligible = long[:, :, None] & long[:, None, :] & (depth[:, :, None] == depth[:, None, :]) \
        & (o[:, None, :] > c[:, :, None]) & (kind[:, :, None] != kind[:, None, :])
    ancestor = np.zeros_like(eligible)
    for t in range(k):
        of_t = (encloses & (kind == t)[:, :, None]).astype(np.float32)  # (batch, X, Y)
        ancestor |= (np.matmul(of_t.transpose(0, 2, 1), of_t) > 0) & (kind == t)[:, None, :]
    return eligible & ancestor


def _choose_pairs(rng: np.random.Generator, m: int, maybe: np.ndarray,
                  eligible: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, ...]:
    """A uniform (A, B) per row among ``eligible(rows)``'s True cells (``(rows, pair, pair)``,
    asked only of the rows ``maybe`` marks), rows at a time; ``(a, b, ok)``, ``ok`` bool."""
    a, b, ok = (np.zeros(maybe.size, np.int64) for _ in range(3))
    step = max(1, _MAX_CELLS // m ** 2)  # rows at a time: (rows, pair, pair) arrays
    for lo in range(0, maybe.size, step):
        at = np.arange(lo, min(lo + step, maybe.size))
        mask = np.zeros((at.size, m, m), dtype=bool)  # the other rows' draws are made all the same
        mask[maybe[at]] = eligible(at[maybe[at]])
        a[at], b[at], ok[at] = _pick_pair(rng, mask)
    return a, b, ok.astype(bool)


def _stack(language: Dyck, rng: np.random.Generator, lengths: np.ndarray):
    """Words in which two pairs A before B at the same depth, each spanning W symbols or more,
    with types a != b, inside a common ancestor of type b, exchange closers:
    ``X( A(..)  B[..] )X -> X( A(..]  B[..) )X``, a uniform choice among a word's such (A, B).

    The matched member is the same word with B retyped to a: ``A(..)  B(..)``; the two differ
    in A's closer and B's opener. Both exchanged pairs keep their height, so every (height,
    type) tally is a word's in both; between A and B both show a closer and an opener of one
    type; both have the ancestor of another type around a same-typed pair.

    Returns:
        ``(codes, ok, words)``: the changed rows and their matched members.
    """
    codes, valid = _word(language, rng, lengths)
    o, c, depth, kind, real = _pairs(language, codes, valid, lengths)
    long = real & (c - o >= long_range_windows(lengths)[:, None])  # (batch, pair)
    # only rows with two long pairs at one depth can have an (A, B): about 1 in 12 at 30-48
    depths = np.sort(np.where(long, depth, -1), axis=1)
    maybe = ((depths[:, 1:] == depths[:, :-1]) & (depths[:, 1:] >= 0)).any(axis=1)
    a, b, ok = _choose_pairs(rng, o.shape[1], maybe, lambda some: _stack_eligible(
        language.k, o[some], c[some], depth[some], kind[some], real[some], long[some]))
    rows = np.arange(lengths.size)
    ca, cb, ob = c[rows, a], c[rows, b], o[rows, b]
    words = codes.copy()
    words[rows[ok], ob[ok]] = words[rows[ok], o[rows, a][ok]]  # B retyped to A's type
    words[rows[ok], cb[ok]] = words[rows[ok], ca[ok]]
    _exchange(codes, ok, ca, cb)
    return codes, ok, words


def _far(language: Dyck, rng: np.random.Generator, lengths: np.ndarray):
    """Words ``P (X) Q`` with the top-level pair ``(X)`` at least W from both ends, P ending
    with a closer and Q starting with an opener, turned inside out: ``P )X( Q``, a uniform
    choice among a word's such pairs. The count dips below 0 inside the pair.

    The length, the ends, every symbol count and the height profile outside the pair stay the
    word's (inside it, two lower). Measured against the adversary (``bench_adversary.py``), a
    non-empty X (which keeps every 2-gram count too) helped the rules that read heights and
    gapped pairs: the longer X, the longer the dip below a member's heights.

    Returns:
        ``(codes, ok, words)``: the changed rows and the words they were made from.
    """
    codes, valid = _word(language, rng, lengths)
    words, width = codes.copy(), codes.shape[1]
    partner, h = language.matching(codes, lengths), language.heights(codes, lengths)
    pos, w = np.arange(width), long_range_windows(lengths)[:, None]
    after = np.clip(partner, 0, width - 2) + 1  # the symbol after each pair's closer
    before = np.zeros_like(valid)
    before[:, 1:] = codes[:, :-1] == 1  # a closer just before
    top = valid & (codes == 0) & (h == 1) & before & (pos >= w) \
        & (partner <= lengths[:, None] - 1 - w) \
        & (np.take_along_axis(codes, after, 1) == 0)
    a, ok = _pick(rng, top)
    rows = np.flatnonzero(ok)
    codes[rows, a[ok]] = 1
    codes[rows, partner[rows, a[ok]]] = 0
    return codes, ok, words


def _spread_eligible(k: int, o, c, depth, kind, real, long, w) -> np.ndarray:
    """bool ``(batch, A, B)``: A before B at its depth, at least ``w`` (``(batch,)``) apart
    (A's closer to B's opener), both long, of types a != b, with an ancestor of type b whose
    closer lies at least ``w`` after B's."""
    encloses = (o[:, :, None] < o[:, None, :]) & (c[:, :, None] > c[:, None, :]) \
        & real[:, :, None] & real[:, None, :]  # (batch, X, Y): X encloses Y
    apart = (o[:, None, :] - c[:, :, None]) >= w[:, None, None]  # (batch, A, B)
    eligible = long[:, :, None] & long[:, None, :] & (depth[:, :, None] == depth[:, None, :]) \
        & apart & (kind[:, :, None] != kind[:, None, :])
    closes_after = (c[:, :, None] - c[:, None, :]) >= w[:, None, None]  # (batch, X, Y)
    ancestor = np.zeros_like(eligible)
    for t in range(k):
        of_t = (encloses & (kind == t)[:, :, None]).astype(np.float32)  # (batch, X, A)
        far_t = (encloses & closes_after & (kind == t)[:, :, None]).astype(np.float32)
        ancestor |= (np.matmul(of_t.transpose(0, 2, 1), far_t) > 0) & (kind == t)[:, None, :]
    return eligible & ancestor


def _spread(language: Dyck, rng: np.random.Generator, lengths: np.ndarray):
    """Words in which two pairs A before B at one depth exchange closers, laid out so that
    every relation that differs from the word is at least W = :func:`spread_window` apart:
    A spans W symbols or more, so does the gap from A's closer to B's opener, so does B, and
    so does the way from B's closer to that of an ancestor X of B's type,
    ``X( A(..) .. B[..] .. )X -> X( A(..] .. B[..) .. )X``; a uniform choice among a word's
    such (A, B). The matched member is the word itself: the long closers' types (a, b and X's
    b) form the same multiset in both, and the heights, every type's projection and every
    (height, type) tally are a word's in both (benchmarks/bench_stack_layouts.py's layout).

    Returns:
        ``(codes, ok, words)``: the changed rows and the words they were made from.
    """
    codes, valid = _word(language, rng, lengths)
    words = codes.copy()
    o, c, depth, kind, real = _pairs(language, codes, valid, lengths)
    w = spread_windows(lengths)
    long = real & (c - o >= w[:, None])  # (batch, pair)
    depths = np.sort(np.where(long, depth, -1), axis=1)
    maybe = ((depths[:, 1:] == depths[:, :-1]) & (depths[:, 1:] >= 0)).any(axis=1)
    a, b, ok = _choose_pairs(rng, o.shape[1], maybe, lambda some: _spread_eligible(
        language.k, o[some], c[some], depth[some], kind[some], real[some], long[some], w[some]))
    rows = np.arange(lengths.size)
    _exchange(codes, ok, c[rows, a], c[rows, b])
    return codes, ok, words


#: every negative kind, declared once with what belongs to it: the languages it exists for,
#: its promises, what it guarantees and its construction. The hard mixture, the long-range
#: sets, the protocol, the golden records and the Dyck chapter's table read it.
NEGATIVE_KINDS: dict[str, NegativeKind] = {
    kind.name: kind
    for kind in (
        NegativeKind("random", "A uniform random string that is not a word.", 1, False, 1,
                     guarantees="nothing: a uniform random string, redrawn until it is not a "
                     "word", build=_random),
        NegativeKind("dip", "A top-level pair is turned inside out: )X(.", 1, True, 6,
                     guarantees="the promises; the running count dips below zero, so one "
                     "counter rejects it", build=_dip),
        NegativeKind("rotation", "A cyclic rotation of a word, cut inside a pair.", 1, True, 6, 2,
                     guarantees="the promises; closers come before their openers, so one "
                     "counter rejects it", build=_rotation),
        NegativeKind("swap", "Two symbols of a word are exchanged.", 1, True,
                     guarantees="the promises only", build=_swap),
        NegativeKind("crossing", "A pair and its first child exchange closers.", 2, True, 4, 2,
                     guarantees="the promises; its heights and every kind's own brackets are "
                     "a member's, so no counter rejects it", build=_crossing),
        NegativeKind("deep_mismatch", "A deepest parent pair's closer is another type's.", 2,
                     True, 4, 2, guarantees="the promises; its heights are a member's, so the "
                     "type-blind counter never rejects it", build=_deep_mismatch),
        NegativeKind("stack", "Two long pairs of different types at one height, under an "
                     "ancestor, exchange closers.", 2, True, 28, 2, long_range=True,
                     guarantees="the promises; its heights, every kind's own brackets and "
                     "every (height, kind) tally are a member's; each exchanged pair spans W "
                     "symbols or more; matched members", build=_stack,
                     window=long_range_windows, counter_free=True),
        NegativeKind("far", "A top-level pair far from both ends is turned inside out, so the "
                     "count dips.", 1, True, 30, max_k=1, long_range=True,
                     guarantees="the promises; the heights outside the pair are the word's; "
                     "the dip lies at least W from the ends; matched members", build=_far,
                     window=long_range_windows),
        NegativeKind("spread", "Two pairs of different types at one height, under an ancestor, "
                     "exchange closers, every changed relation far apart.", 2, True, 28, 2,
                     long_range=True,
                     guarantees="the promises; its heights, every kind's own brackets and every "
                     "(height, kind) tally are a member's; A, the gap to B, B and B's closer to "
                     "its ancestor's each span W = max(4, ⌈n/6⌉) symbols or more, so no window "
                     "of W sees two changed relations; the long closers' types are the "
                     "member's; matched members (the word itself)", build=_spread,
                     window=spread_windows, counter_free=True),
    )
}
#: the kinds of the ``hard`` mixture and of the long-range sets, read from the declaration
HARD_KINDS = Declared(NEGATIVE_KINDS, lambda kind: kind.hard and not kind.long_range)
LONG_RANGE_KINDS = Declared(NEGATIVE_KINDS, lambda kind: kind.long_range)


def _keeps_promises(language: Dyck, name: str, codes: np.ndarray, lengths: np.ndarray,
                    window: int | None) -> np.ndarray:
    """bool ``(batch,)``: a non-member and, for a hard kind, every hard (and local) promise.

    Counts per type need no check: every construction permutes a word or flips a pair. Each
    check runs on the rows still standing, the most selective first.
    """
    ok = np.ones(lengths.size, dtype=bool)
    kind = NEGATIVE_KINDS[name]
    if kind.hard:
        ok = (codes[:, 0] % 2 == 0) & (codes[np.arange(lengths.size), lengths - 1] % 2 == 1)
        if window is not None and not kind.long_range:
            ok[ok] = locally_valid(language, codes[ok], lengths[ok], window)
        if language.max_depth is not None:
            ok[ok] = language.max_depths(codes[ok], lengths[ok]) <= language.max_depth
    if kind.long_range:  # verified, not assumed: no W-window sees it; no counter (stack, spread)
        hardness = profile(language, codes[ok], lengths[ok])
        passed = hardness.w_star > kind.window(lengths[ok])
        if kind.counter_free:
            passed &= ~hardness.counter
        ok[ok] = passed & ~hardness.member
        return ok
    ok[ok] = ~language.is_member((codes[ok], lengths[ok]))
    return ok


def _candidates(language, rng, name, lengths, window) -> tuple[np.ndarray, ...]:
    """Candidates of a kind, which keep its promises, and (long-range kinds) their matched
    members: the words the construction made them from, or a retyped word (``stack``)."""
    kind = NEGATIVE_KINDS[name]
    if kind.build is None:
        raise ValueError(f"negative kind {name!r} declares no construction (build)")
    if kind.long_range:
        codes, ok, words = kind.build(language, rng, lengths)
    else:
        (codes, ok), words = kind.build(language, rng, lengths), None
    ok[ok] = _keeps_promises(language, name, codes[ok], lengths[ok], window)
    return codes, ok, words


@functools.lru_cache(maxsize=4096)
def _probe(language: Dyck, name: str, length: int, window: int | None) -> bool:
    """Whether >= ``_PROBE_PASSES`` of ``_PROBE_SIZE`` fixed-seed candidates keep every promise
    (``window`` None: the local regime's promises; long-range kinds pass 0).

    The first 256 candidates usually settle it; the rest come in one block if they do not.
    """
    seed = [language.k, language.max_depth or 0, length, list(NEGATIVE_KINDS).index(name),
            window or 0]
    rng, passes = np.random.default_rng(seed), 0
    size = _PROBE_SIZE * (_LONG_RANGE_PROBE if NEGATIVE_KINDS[name].long_range else 1)
    for block in (256, size - 256):
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
    if kind.max_k is not None and language.k > kind.max_k:
        return False
    if language.max_depth is not None and language.max_depth < kind.min_depth:
        return False
    if kind.long_range:  # W grows with the length: every length is probed
        return length >= language.shortest_word and _probe(language, name, length, 0)
    if language.shortest_word > 0:  # words from some length on (DeepDyck): probe that length
        return length >= language.shortest_word and _probe(language, name, length, window)
    if window is None:
        return True
    # pass rates grow with the length, so the longest probed length speaks for longer ones
    length = min(length, 8 * window + 8)
    return _probe(language, name, length, window)


def available_kinds(language: Dyck, length: int, kinds: str | Sequence[str] = "hard",
                    window: int | None = DEFAULT_WINDOW) -> tuple[str, ...]:
    """The kinds among ``kinds`` that :func:`sample_negatives` can draw at ``length``.

    Args:
        language: A :class:`~dyckbook.data.languages.Dyck`.
        length: String length (>= 0).
        kinds: ``"hard"``, a kind name, or a sequence of kind names.
        window: The width w >= 2 of the non-local regime (default 4, as ``DataConfig``), or
            None (the local regime). Long-range kinds have their own W.

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


def _sample_kind(language, rng, name, lengths, window, pairs: bool = False):
    """uint8 ``(batch, pos)`` negatives of one kind by vectorised rejection; ``pairs``: also
    their matched members, ``(members, negatives)``.

    Each round draws, for every missing row, as many candidates as its length's pass rate in
    the previous round asks for. Passing candidates are i.i.d. given their length, so any of
    them may fill any missing row of that length.
    """
    out = np.full((lengths.size, int(lengths.max())), PAD_CODE, dtype=np.uint8)
    members = out.copy() if pairs else None
    todo, reps = np.arange(lengths.size), np.ones(lengths.size, dtype=np.int64)
    rounds = _MAX_ROUNDS * (4 if NEGATIVE_KINDS[name].long_range else 1)  # rare at some lengths
    for _ in range(rounds):
        drawn = np.repeat(lengths[todo], reps)
        codes, ok, words = _candidates(language, rng, name, drawn, window)
        passed = np.flatnonzero(ok)
        into, src = _by_length(lengths[todo], drawn[passed])
        out[todo[into], : codes.shape[1]] = codes[passed[src]]
        if pairs:
            members[todo[into], : words.shape[1]] = words[passed[src]]
        missing = np.ones(todo.size, dtype=bool)
        missing[into] = False
        todo, reps = todo[missing], reps[missing]
        if todo.size == 0:
            return (members, out) if pairs else out
        values, inverse = np.unique(drawn, return_inverse=True)
        rate = (np.bincount(inverse, weights=ok) / np.bincount(inverse))[
            np.searchsorted(values, lengths[todo])
        ]
        reps = np.where(rate > 0, np.ceil(1.2 / np.maximum(rate, 1e-9)), 8 * reps)
        scale = min(1.0, _MAX_CELLS / float((reps * lengths[todo]).sum()))  # bound the memory
        reps = np.clip(reps * scale, 1, 1024).astype(np.int64)
    raise RuntimeError(f"no {name} negative of length {lengths[todo[0]]} for {language.name} "
                       f"(window={window}) in {rounds} rounds")


def sample_negatives(language: Dyck, rng: np.random.Generator, lengths: Sequence[int],
                     kinds: str | Sequence[str] = "hard",
                     window: int | None = DEFAULT_WINDOW,
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One verified non-member of each requested length, labelled with its kind.

    Every negative is checked not to be a word of ``language``; hard ones also keep the hard
    promises (module docstring: counts, first opener, last closer, depth) and, with a
    ``window``, are locally valid at that width.

    Args:
        language: A :class:`~dyckbook.data.languages.Dyck`.
        rng: A ``numpy.random.Generator``, the source of randomness.
        lengths: A sequence of ints >= 0, ``(batch,)``; every length must have an available
            kind (:func:`available_kinds`).
        kinds: ``"hard"`` (a uniform mixture of the hard kinds available at each length),
            ``"long_range"``, a kind name, or a sequence of names (a uniform mixture of those
            available); names from :data:`NEGATIVE_KINDS`.
        window: An int w >= 2 (default 4, as ``DataConfig``): hard negatives are also locally
            valid at width w; None: the local regime (``random`` and long-range kinds ignore it).

    Returns:
        ``(codes, lengths, kinds)``: uint8 ``(batch, pos)`` padded with ``PAD_CODE``, int64
        ``(batch,)``, and str ``(batch,)`` kind names.

    Raises:
        ValueError: an argument of the wrong type or out of range (the message names it), or a
            length at which none of ``kinds`` exists.

    Example:
        >>> import numpy as np
        >>> from dyckbook.data.languages import Dyck
        >>> from dyckbook.data.negatives import HARD_KINDS, sample_negatives
        >>> dyck2 = Dyck(2)
        >>> codes, lengths, kinds = sample_negatives(dyck2, np.random.default_rng(0), [8, 8, 12])
        >>> codes.shape, lengths.tolist()
        ((3, 12), [8, 8, 12])
        >>> bool(dyck2.is_member((codes, lengths)).any()), set(kinds) <= set(HARD_KINDS)
        (False, True)
        >>> sample_negatives(dyck2, np.random.default_rng(0), [6, 8], kinds="random")[2].tolist()
        ['random', 'random']
        >>> sample_negatives(dyck2, np.random.default_rng(0), [8], window="4")
        Traceback (most recent call last):
        ...
        ValueError: window must be None or an int >= 2, got '4' (str)
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


def _long_range_args(language: Dyck, rng: np.random.Generator, lengths: Sequence[int],
                     kind: str, what: str = "") -> tuple[np.random.Generator, np.ndarray]:
    """The checked arguments of a long-range sampler; a ValueError names a wrong one, or a
    length at which ``kind`` (``what``: and whatever else the sampler needs) does not exist."""
    _check_language(language)
    rng = check_rng(rng)
    lengths = check_lengths(lengths)
    if kind not in LONG_RANGE_KINDS:
        raise ValueError(f"kind must be one of {LONG_RANGE_KINDS}, got {kind!r}")
    for length in np.unique(lengths).tolist():
        if not available_kinds(language, length, kind):
            raise ValueError(f"lengths holds {length}, but no {kind} negative{what} exists at "
                             f"length {length} for {language.name}")
    return rng, lengths


def sample_matched_members(language: Dyck, rng: np.random.Generator, lengths: Sequence[int],
                           kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Members drawn as the long-range ``kind``'s negatives are, without their last change.

    A uniform word of the length that admits the kind's change, and a uniform choice of the
    pairs it would change: for ``far`` and ``spread`` the word itself, for ``stack`` the word
    with the second pair B retyped to the first pair's type (``_stack``), so that the classes
    differ only by the long-range violation (module docstring).

    Args:
        language: A :class:`~dyckbook.data.languages.Dyck`.
        rng: Source of randomness.
        lengths: ints ``(batch,)``; the kind must be available at each.
        kind: One of :data:`LONG_RANGE_KINDS`.

    Returns:
        ``(codes, lengths)``: uint8 ``(batch, pos)`` padded with ``PAD_CODE``, int64 ``(batch,)``.
    """
    rng, lengths = _long_range_args(language, rng, lengths, kind, " (nor its matched member)")
    if lengths.size == 0:
        return np.zeros((0, 0), np.uint8), lengths
    return _sample_kind(language, rng, kind, lengths, None, pairs=True)[0], lengths


def sample_minimal_pairs(language: Dyck, rng: np.random.Generator, lengths: Sequence[int],
                         kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Long-range negatives of ``kind``, each beside its matched member: pairs that differ in
    two symbols that only a stack tells apart (``stack``: A's closer and B's opener; ``far``:
    the pair turned inside out), for patching activations from one into the other.

    Args:
        language: A :class:`~dyckbook.data.languages.Dyck`.
        rng: Source of randomness.
        lengths: ints ``(batch,)``; the kind must be available at each.
        kind: One of :data:`LONG_RANGE_KINDS`.

    Returns:
        ``(members, negatives, lengths)``: uint8 ``(batch, pos)`` each, padded with
        ``PAD_CODE``, and int64 ``(batch,)``; row i of both has length ``lengths[i]``.
    """
    rng, lengths = _long_range_args(language, rng, lengths, kind)
    if lengths.size == 0:
        return np.zeros((0, 0), np.uint8), np.zeros((0, 0), np.uint8), lengths
    return (*_sample_kind(language, rng, kind, lengths, None, pairs=True), lengths)
