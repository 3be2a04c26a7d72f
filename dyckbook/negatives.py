"""Negative examples for Dyck-k, Dyck-(k, D) and Shuffle-Dyck-k: a taxonomy of labelled kinds.

A classifier is only as good as the negatives it must reject. The thesis' negatives were all
rejectable by counting (and mostly by looking at the first symbol); the *hard* kinds below are
not: every hard negative has even length, the same number of openers and closers of every type,
starts with an opener, has exactly the requested length, and is not in the language. Every
negative returned by :func:`sample_negatives` is verified to be a non-member.

Kinds (``NEGATIVE_KINDS``):

``random``
    A uniform random string over the 2k symbols of the requested length, redrawn until it is
    not a member: the thesis' intent. Usually rejectable by counting or by the first symbol.
    Exists for every length >= 1 (the only string of length 0 is a member) and every k.

``thesis_literal``
    The thesis' Algorithm 5.2 exactly as printed (:func:`dyckbook.thesis.thesis_unbalanced`,
    seed 42 on every call): a function of the length alone, so a dataset holds one such
    negative per distinct length. Kept to reproduce the thesis. Exists for lengths >= 1 (the
    printed code returns one symbol for length 0), Dyck languages only (its output may be a
    Shuffle-Dyck member), any k (the thesis used k <= 4 and the pairs ``()[]{}<>``; larger k use
    the language's pairs in order).

``dip`` (hard)
    A uniform positive in which one top-level pair other than the first is turned inside out,
    ``P (X) Q -> P )X( Q``: the prefix count falls below zero right after ``P`` and comes back,
    and the flipped opener is never closed. Types keep the pair's type, so every other pair
    still matches. To reject it a model must track the running opener-minus-closer count, not
    only the totals. Exists for length >= 4, every k. For Shuffle-Dyck the flip is applied to
    the projection on one type (a top-level pair of that type that is not its first).

``unclosed_tail``
    A cyclic rotation of a uniform positive, cut just before an opener that sits inside an
    open pair: the pairs cut by the rotation leave surplus closers near the start and unclosed
    openers in the tail, each cut pair keeping its type. Local statistics match positives
    exactly. Exists for length >= 4 and every k, except Dyck-(k, 1), where no opener sits
    inside an open pair. For Shuffle-Dyck the cut is before an opener where some type is open.

``swap`` (hard)
    A uniform positive with two symbols transposed, redrawn until the result starts with an
    opener and is not a member. Often a single local error (``()`` -> ``)(`` or a type
    exchange). Exists for length >= 4 and every k and language.

``crossing`` (hard)
    A pair and its first child, of different types, exchange closers: ``([...])`` ->
    ``([...)]``. The open/close skeleton is unchanged, so only type matching rejects it
    (``([)]`` is a Shuffle-Dyck member, so this kind is Dyck only). Needs k >= 2 and nesting,
    so not Dyck-(k, 1); exists for length >= 4.

``deep_mismatch`` (hard)
    The closer of a maximum-depth pair exchanged with the closer of another pair of a different
    type: the skeleton is unchanged and the error sits where the stack is deepest. Needs
    k >= 2, Dyck only; exists for length >= 4.

For Dyck-(k, D) every hard kind stays within depth D (flips and rotations never raise the
profile above that of the positive they come from; swaps that would exceed D are redrawn), so
depth carries no signal either. No hard kind exists below length 4 (length 2 has only ``()``,
``)(``, and type variants; ``)(`` starts with a closer): :func:`available_kinds` returns ``()``
there and :func:`sample_negatives` raises a ``ValueError`` naming the length; the data layer
drops such lengths from hard datasets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dyckbook.languages import (
    PAD_CODE,
    Dyck,
    ShuffleDyck,
    _check_lengths,
    _check_rng,
    _heights,
    _pair_order,
    _valid_mask,
)
from dyckbook.thesis import thesis_unbalanced

__all__ = [
    "HARD_KINDS",
    "NEGATIVE_KINDS",
    "NegativeKind",
    "available_kinds",
    "sample_negative_codes",
    "sample_negatives",
]

Language = Dyck | ShuffleDyck
_MAX_ROUNDS = 200  # rejection rounds before giving up (never reached in tests)


@dataclass(frozen=True)
class NegativeKind:
    """One kind of negative example.

    Attributes:
        name: Identifier used in datasets and metrics.
        description: One sentence on what is wrong with such a string.
        min_length: Smallest length at which the kind exists.
        min_k: Smallest number of bracket types for which it exists.
        hard: Whether it satisfies the hard constraints (even length, equal counts per type,
            first symbol an opener), so that counting cannot reject it.
        languages: Which language classes it applies to (``"dyck"``, ``"shuffle"``).
    """

    name: str
    description: str
    min_length: int
    min_k: int
    hard: bool
    languages: tuple[str, ...] = ("dyck", "shuffle")


NEGATIVE_KINDS: dict[str, NegativeKind] = {
    k.name: k
    for k in [
        NegativeKind("random", "uniform random string over the alphabet", 1, 1, False),
        NegativeKind(
            "thesis_literal",
            "the thesis' Algorithm 5.2 (a function of the length)",
            1,
            1,
            False,
            ("dyck",),
        ),
        NegativeKind(
            "dip", "a top-level pair turned inside out: the prefix dips below zero", 4, 1, True
        ),
        NegativeKind(
            "unclosed_tail", "a rotation of a positive: unclosed openers at the end", 4, 1, True
        ),
        NegativeKind("swap", "a positive with two symbols transposed", 4, 1, True),
        NegativeKind(
            "crossing", "a pair and its child exchange closers: ([)]", 4, 2, True, ("dyck",)
        ),
        NegativeKind(
            "deep_mismatch",
            "a deepest closer exchanged with one of another type",
            4,
            2,
            True,
            ("dyck",),
        ),
    ]
}

HARD_KINDS: tuple[str, ...] = tuple(k.name for k in NEGATIVE_KINDS.values() if k.hard)

KindsArg = str | Sequence[str]


def _family(language: object) -> str:
    if isinstance(language, ShuffleDyck):
        return "shuffle"
    if isinstance(language, Dyck):
        return "dyck"
    raise ValueError(f"language must be a Dyck or ShuffleDyck, got {type(language).__name__}")


def _resolve_kinds(kinds: KindsArg) -> tuple[str, ...]:
    if isinstance(kinds, str):
        if kinds == "hard":
            return HARD_KINDS
        if kinds in NEGATIVE_KINDS:
            return (kinds,)
        raise ValueError(
            f"kinds must be 'hard', a kind name or a sequence of kind names "
            f"{sorted(NEGATIVE_KINDS)}, got {kinds!r}"
        )
    names = tuple(kinds)
    if not names:
        raise ValueError("kinds must name at least one kind, got an empty sequence")
    for name in names:
        if name not in NEGATIVE_KINDS:
            raise ValueError(f"kinds holds unknown kind {name!r}; known: {sorted(NEGATIVE_KINDS)}")
    return tuple(dict.fromkeys(names))


def _kind_exists(language: Language, name: str, length: int) -> bool:
    kind = NEGATIVE_KINDS[name]
    if _family(language) not in kind.languages or language.k < kind.min_k:
        return False
    if length < kind.min_length or (kind.hard and length % 2):
        return False
    depth = language.max_depth
    if depth == 1 and name in ("unclosed_tail", "crossing"):
        return False
    if name == "thesis_literal":
        return _thesis_word(language.k, language.pairs, length) is not None
    return True


def available_kinds(language: Language, length: int, kinds: KindsArg = "hard") -> tuple[str, ...]:
    """The kinds among ``kinds`` that have a negative of exactly ``length`` for ``language``.

    Args:
        language: A :class:`Dyck` or :class:`ShuffleDyck`.
        length: String length (>= 0).
        kinds: ``"hard"``, one kind name, or a sequence of kind names.

    Returns:
        The available kind names, in the order given (``()`` for hard kinds below length 4).
    """
    _family(language)
    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise ValueError(f"length must be an int >= 0, got {length!r}")
    return tuple(n for n in _resolve_kinds(kinds) if _kind_exists(language, n, int(length)))


@lru_cache(maxsize=4096)
def _thesis_word(k: int, pairs: tuple[str, ...], length: int) -> str | None:
    try:
        return thesis_unbalanced(k, length, pairs=pairs)
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------
# structure of positives (vectorised)
# --------------------------------------------------------------------------------------------


def _partners(
    language: Language, codes: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Partner index and depth of every symbol of member rows.

    For Dyck the matching is that of the skeleton; for Shuffle-Dyck each type is matched on its
    own and the depth is the depth within that type.

    Returns:
        ``(partner, depth)``, int64 ``(batch, pos)``; ``-1`` / ``0`` on pads. ``depth`` is the
        height after an opener and before a closer (the pair's nesting level, 1 = top level).
    """
    n, width = codes.shape
    valid = _valid_mask(lengths, width)
    if isinstance(language, ShuffleDyck):
        depth = np.zeros((n, width), dtype=np.int64)
        for t in range(language.k):
            step = (codes == 2 * t).astype(np.int64) - (codes == 2 * t + 1).astype(np.int64)
            h = np.cumsum(step, axis=1)
            lvl = h + (codes == 2 * t + 1)
            depth = np.where((codes >> 1) == t, lvl, depth)
        depth = np.where(valid, depth, 0)
        key = np.where(
            valid, (codes >> 1).astype(np.int64) * (width + 2) + depth, np.iinfo(np.int64).max
        )
        order = np.argsort(key, axis=1, kind="stable")
    else:
        h = _heights(codes, lengths)
        depth = np.where(valid, h.astype(np.int64) + (codes & 1), 0)
        order = _pair_order(codes, h, lengths)
    partner = np.full((n, width), -1, dtype=np.int64)
    rows = np.arange(n)[:, None]
    op, cl = order[:, 0::2], order[:, 1::2]
    partner[rows, op] = cl
    partner[rows, cl] = op
    partner[~valid] = -1
    return partner, depth


def _pick(rng: np.random.Generator, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One uniformly chosen True column per row: ``(column, has_any)``, int64/bool ``(batch,)``."""
    score = np.where(mask, rng.random(mask.shape), -1.0)
    col = np.argmax(score, axis=1)
    return col, mask.any(axis=1)


def _positives(
    language: Language, rng: np.random.Generator, lengths: np.ndarray, base: np.ndarray | None
) -> np.ndarray:
    """Uniform positives to transform: ``base`` (a private copy) if given, else fresh ones."""
    if base is not None:
        return base.copy()
    codes, _ = language.sample_codes(rng, lengths)
    return codes


# --------------------------------------------------------------------------------------------
# one generator per kind: (codes, ok) for a batch of positives of the given lengths
# --------------------------------------------------------------------------------------------


def _gen_random(language: Language, rng: np.random.Generator, lengths: np.ndarray, base=None):
    width = int(lengths.max())
    codes = rng.integers(0, 2 * language.k, size=(lengths.size, width), dtype=np.uint8)
    codes[~_valid_mask(lengths, width)] = PAD_CODE
    return codes, np.ones(lengths.size, dtype=bool)


def _gen_thesis(language: Language, rng: np.random.Generator, lengths: np.ndarray, base=None):
    strings = [_thesis_word(language.k, language.pairs, int(n)) for n in lengths]
    codes, _ = language.encode(strings)
    return codes, np.ones(lengths.size, dtype=bool)


def _gen_dip(language: Language, rng: np.random.Generator, lengths: np.ndarray, base=None):
    codes = _positives(language, rng, lengths, base)
    n = lengths.size
    partner, depth = _partners(language, codes, lengths)
    is_open = (codes & 1) == 0
    top = is_open & (depth == 1)
    if isinstance(language, ShuffleDyck):
        # not the first top-level opener of its type = not the first symbol of its type
        first = np.zeros_like(top)
        for t in range(language.k):
            pos = np.argmax(codes == 2 * t, axis=1)
            has = (codes == 2 * t).any(axis=1)
            first[np.arange(n)[has], pos[has]] = True
        cand = top & ~first
    else:
        cand = top.copy()
        cand[:, 0] = False
    a, ok = _pick(rng, cand)
    rows = np.arange(n)[ok]
    a = a[ok]
    b = partner[rows, a]
    codes[rows, a] |= 1  # opener -> closer of the same type
    codes[rows, b] &= 0xFE  # closer -> opener of the same type
    return codes, ok


def _gen_unclosed_tail(
    language: Language, rng: np.random.Generator, lengths: np.ndarray, base=None
):
    codes = _positives(language, rng, lengths, base)
    n, width = codes.shape
    valid = _valid_mask(lengths, width)
    h = np.cumsum(np.where(valid, 1 - 2 * (codes & 1).astype(np.int64), 0), axis=1)
    before = np.concatenate([np.zeros((n, 1), np.int64), h[:, :-1]], axis=1)
    cand = valid & ((codes & 1) == 0) & (before > 0)
    r, ok = _pick(rng, cand)
    safe = np.maximum(lengths, 1)[:, None]
    idx = (r[:, None] + np.arange(width)[None, :]) % safe
    rotated = np.take_along_axis(codes, idx, axis=1)
    rotated[~valid] = PAD_CODE
    return rotated, ok


def _gen_swap(language: Language, rng: np.random.Generator, lengths: np.ndarray, base=None):
    codes = _positives(language, rng, lengths, base)
    n = lengths.size
    rows = np.arange(n)
    i = (rng.random(n) * lengths).astype(np.int64)
    j = (rng.random(n) * lengths).astype(np.int64)
    ci, cj = codes[rows, i], codes[rows, j]
    codes[rows, i], codes[rows, j] = cj, ci
    ok = ci != cj
    return codes, ok


def _gen_crossing(language: Language, rng: np.random.Generator, lengths: np.ndarray, base=None):
    codes = _positives(language, rng, lengths, base)
    n, width = codes.shape
    partner, _ = _partners(language, codes, lengths)
    is_open = (codes & 1) == 0
    nxt_open = np.zeros_like(is_open)
    nxt_open[:, :-1] = is_open[:, 1:]
    nxt_type = np.full_like(codes, PAD_CODE)
    nxt_type[:, :-1] = codes[:, 1:]
    cand = is_open & nxt_open & ((codes >> 1) != (nxt_type >> 1)) & _valid_mask(lengths, width)
    a, ok = _pick(rng, cand)
    rows = np.arange(n)[ok]
    a = a[ok]
    b, d = partner[rows, a], partner[rows, a + 1]
    cb, cd = codes[rows, b], codes[rows, d]
    codes[rows, b], codes[rows, d] = cd, cb
    return codes, ok


def _gen_deep_mismatch(
    language: Language, rng: np.random.Generator, lengths: np.ndarray, base=None
):
    codes = _positives(language, rng, lengths, base)
    n, width = codes.shape
    valid = _valid_mask(lengths, width)
    partner, depth = _partners(language, codes, lengths)
    is_open = ((codes & 1) == 0) & valid
    deepest = depth.max(axis=1, initial=0)
    c, ok = _pick(rng, is_open & (depth == deepest[:, None]))
    rows_all = np.arange(n)
    d = partner[rows_all, np.where(ok, c, 0)]
    d_type = codes[rows_all, np.maximum(d, 0)] >> 1
    other = valid & ((codes & 1) == 1) & ((codes >> 1) != d_type[:, None])
    f, ok2 = _pick(rng, other)
    ok &= ok2
    rows = rows_all[ok]
    d, f = d[ok], f[ok]
    cd, cf = codes[rows, d], codes[rows, f]
    codes[rows, d], codes[rows, f] = cf, cd
    return codes, ok


_GENERATORS = {
    "random": _gen_random,
    "thesis_literal": _gen_thesis,
    "dip": _gen_dip,
    "unclosed_tail": _gen_unclosed_tail,
    "swap": _gen_swap,
    "crossing": _gen_crossing,
    "deep_mismatch": _gen_deep_mismatch,
}


def _accept(language: Language, name: str, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Rows that are valid negatives of kind ``name``: non-members meeting the kind's promises."""
    ok = ~language.is_member_batch((codes, lengths))
    if NEGATIVE_KINDS[name].hard:
        if codes.shape[1]:
            ok &= (codes[:, 0] & 1) == 0  # starts with an opener
        if language.max_depth is not None:
            h = _heights(codes, lengths)
            ok &= h.max(axis=1, initial=0) <= language.max_depth
    return ok


def _generate_kind(
    language: Language,
    rng: np.random.Generator,
    name: str,
    lengths: np.ndarray,
    base: np.ndarray | None = None,
) -> np.ndarray:
    """Codes ``(batch, pos)`` of verified negatives of one kind, by vectorised rejection.

    ``base`` optionally holds uniform positives of ``lengths`` for the first round (sampling
    them for all kinds in one call is faster than per kind); retries draw fresh positives.
    """
    width = int(lengths.max()) if lengths.size else 0
    out = np.full((lengths.size, width), PAD_CODE, dtype=np.uint8)
    todo = np.arange(lengths.size)
    for _ in range(_MAX_ROUNDS):
        if todo.size == 0:
            return out
        sub = lengths[todo]
        codes, ok = _GENERATORS[name](language, rng, sub, base)
        base = None
        ok &= _accept(language, name, codes, sub)
        done = todo[ok]
        out[done, : codes.shape[1]] = codes[ok]
        if name == "thesis_literal" and not ok.all():
            raise RuntimeError(f"thesis_literal produced a member at lengths {sub[~ok][:5]}")
        todo = todo[~ok]
    raise RuntimeError(
        f"could not generate {todo.size} negatives of kind {name!r} for {language.name} "
        f"(e.g. length {int(lengths[todo[0]])}) in {_MAX_ROUNDS} rounds"
    )


def sample_negative_codes(
    language: Language,
    rng: np.random.Generator,
    lengths: Sequence[int] | np.ndarray,
    kinds: KindsArg = "hard",
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Like :func:`sample_negatives`, returning ``(codes, lengths, kinds)`` (the fast path).

    Returns:
        uint8 codes ``(batch, pos)`` padded with ``PAD_CODE``, int64 lengths ``(batch,)``, and
        the kind of each row.
    """
    _family(language)
    rng = _check_rng(rng)
    lengths = _check_lengths(lengths, even=False)
    names = _resolve_kinds(kinds)
    n = lengths.size
    # choose a kind per string among those available at its length
    uniq, inverse = np.unique(lengths, return_inverse=True)
    avail = {int(L): available_kinds(language, int(L), names) for L in uniq}
    for L, av in avail.items():
        if not av:
            what = "hard kinds" if kinds == "hard" else f"kinds {names!r}"
            raise ValueError(
                f"lengths holds {L}, but no negative of {what} exists at length {L} for "
                f"{language.name} (hard kinds need an even length >= 4)"
            )
    # table (distinct length, choice) -> kind index; columns past a length's count repeat it
    n_names = len(names)
    n_avail = np.array([len(avail[int(L)]) for L in uniq], dtype=np.int64)
    table = np.array(
        [
            [names.index(avail[int(L)][j % len(avail[int(L)])]) for j in range(n_names)]
            for L in uniq
        ],
        dtype=np.int64,
    ).reshape(uniq.size, n_names)
    counts = n_avail[inverse]
    pick = np.minimum((rng.random(n) * counts).astype(np.int64), counts - 1)
    kind_idx = table[inverse, pick]
    width = int(lengths.max()) if n else 0
    codes = np.full((n, width), PAD_CODE, dtype=np.uint8)
    # one call for the positives that the transforming kinds start from
    needs_base = np.isin(kind_idx, [i for i, nm in enumerate(names) if nm in HARD_KINDS])
    base_rows = np.flatnonzero(needs_base)
    base = np.full((n, width), PAD_CODE, dtype=np.uint8)
    if base_rows.size:
        pos_codes, _ = language.sample_codes(rng, lengths[base_rows])
        base[base_rows, : pos_codes.shape[1]] = pos_codes
    for ki, name in enumerate(names):
        rows = np.flatnonzero(kind_idx == ki)
        if rows.size:
            sub_w = int(lengths[rows].max())
            sub_base = base[rows, :sub_w] if name in HARD_KINDS else None
            sub = _generate_kind(language, rng, name, lengths[rows], sub_base)
            codes[rows, : sub.shape[1]] = sub
    return codes, lengths, [names[i] for i in kind_idx]


def sample_negatives(
    language: Language,
    rng: np.random.Generator,
    lengths: Sequence[int] | np.ndarray,
    kinds: KindsArg = "hard",
) -> tuple[list[str], list[str]]:
    """One verified non-member per requested length, labelled with its kind.

    Args:
        language: A :class:`Dyck` or :class:`ShuffleDyck`.
        rng: Source of randomness.
        lengths: ints ``(batch,)``; every length must admit a negative of the requested kinds.
        kinds: ``"hard"`` (a uniform mixture of the hard kinds available at each length),
            ``"random"``, ``"thesis_literal"``, another kind name, or a sequence of names (a
            uniform mixture of those available at each length).

    Returns:
        ``(strings, kinds)``: ``strings[i]`` has length ``lengths[i]``; ``kinds[i]`` its kind.

    Raises:
        ValueError: Unknown kind, bad ``rng`` or ``lengths``, or a length at which none of the
            requested kinds exists (e.g. length 2 with hard kinds).
    """
    codes, lengths, names = sample_negative_codes(language, rng, lengths, kinds)
    return language.decode(codes, lengths), names
