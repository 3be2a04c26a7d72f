"""How hard a non-member is to reject: the smallest exact window that sees it, counters, distances.

A string's *hardness profile* says what, short of a stack, can reject it:

``w_star``        the smallest width w at which the exact w-window check rejects it: some window
                  of w symbols is a factor of no word, or its first or last w - 1 symbols begin
                  or end no word (a string shorter than w: it is not a member). The check is
                  monotone in w, so it rejects exactly when ``w_star <= w``. Members: 0.
``skeleton``      the type-blind skeleton is not a Dyck-1 word (the running count dips below 0 or
                  does not end at 0; under a depth bound D also: exceeds D). One counter rejects.
``per_type``      some bracket type's projection is not a Dyck-1 word (k counters reject).
``end_distance``  where a left-to-right stack first fails, as the distance from the nearer end
                  (0 when it only fails at the end, with brackets left open). Members: -1.

``w_star`` is computed from the string's structure, not by trying widths: under no depth bound
a window is a factor of some word iff it has no *mismatched pair* (a closer whose partner in the
type-blind skeleton has another type), a prefix begins a word iff it also has no unmatched
closer and a suffix ends one iff it has no unmatched opener; a depth bound D also rejects any
window whose heights span more than D. ``tests/test_hardness.py`` checks it against
:func:`dyckbook.data.languages.locally_valid`, which enumerates the windows.

Bins (:data:`BINS`), for tables: ``counter`` (skeleton or per-type counters reject it), else by
``w_star``: ``w<=4``, ``w<=6``, ``w<=8``, ``w>8``. Under k = 1 the running count *is* the stack
(every Dyck-1 non-member is counter-detectable), so Dyck-1 strings are binned by ``w_star``
alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dyckbook.data.languages import Dyck

__all__ = ["BINS", "MEMBER_BIN", "Hardness", "profile", "window_rejects"]

BINS: tuple[str, ...] = ("counter", "w<=4", "w<=6", "w<=8", "w>8")
MEMBER_BIN = "member"  # the bin of every member
_EDGES = ((4, "w<=4"), (6, "w<=6"), (8, "w<=8"))


@dataclass(frozen=True)
class Hardness:
    """The hardness profile of a batch of strings (see the module docstring); all ``(batch,)``."""

    member: np.ndarray  # bool
    w_star: np.ndarray  # int64; 0 for members
    skeleton: np.ndarray  # bool
    per_type: np.ndarray  # bool
    end_distance: np.ndarray  # int64; -1 for members
    counter_bin: bool = True  # bin counter-detectable strings apart (False under k = 1)

    @property
    def counter(self) -> np.ndarray:
        """bool: counters without a stack reject the string (skeleton or per-type)."""
        return self.skeleton | self.per_type

    def bins(self) -> np.ndarray:
        """str ``(batch,)``: ``MEMBER_BIN`` for members, else one of :data:`BINS`."""
        out = np.full(self.w_star.shape, BINS[-1], dtype=object)
        for edge, name in reversed(_EDGES):
            out[self.w_star <= edge] = name
        if self.counter_bin:
            out[self.counter] = "counter"
        out[self.member] = MEMBER_BIN
        return out


def _skeleton_pairs(codes: np.ndarray, h: np.ndarray, valid: np.ndarray):
    """Every closer's partner in the type-blind skeleton, for any string (balanced or not).

    A symbol's level is the height after an opener or before a closer. The path crosses the
    edge between two heights alternately upwards and downwards, so among the symbols of one
    level, in text order, a closer's partner is the opener just before it (none if it is first).

    Returns:
        int64 ``(batch, pos)``: the partner of each matched closer, -1 elsewhere.
    """
    n, width = codes.shape
    closer = (codes & 1).astype(bool) & valid
    level = h.astype(np.int64) + closer  # (batch, pos)
    key = np.where(valid, level + width + 1, 4 * width + 4)  # >= 0; pads last
    order = np.argsort(key * (width + 1) + np.arange(width), axis=1)  # by level, then position
    lev = np.take_along_axis(key, order, 1)
    is_closer = np.take_along_axis(closer, order, 1)
    matched = np.zeros_like(is_closer)
    matched[:, 1:] = is_closer[:, 1:] & ~is_closer[:, :-1] & (lev[:, 1:] == lev[:, :-1])
    partner = np.full((n, width), -1, dtype=np.int64)
    rows, j = np.nonzero(matched)
    partner[rows, order[rows, j]] = order[rows, j - 1]
    return partner


def _first(mask: np.ndarray, default: int | np.ndarray) -> np.ndarray:
    """Column of each row's first True, or ``default`` where there is none."""
    return np.where(mask.any(axis=1), mask.argmax(axis=1), default)


def profile(language: Dyck, codes: np.ndarray, lengths: np.ndarray) -> Hardness:
    """The hardness profile of every string.

    Args:
        language: A :class:`~dyckbook.data.languages.Dyck`.
        codes: uint8 ``(batch, pos)``.
        lengths: ints ``(batch,)``.

    Returns:
        A :class:`Hardness`.
    """
    if not isinstance(language, Dyck):
        raise ValueError(f"language must be a Dyck, got {type(language).__name__}")
    codes, lengths = language._codes(codes, lengths)
    n, width = codes.shape
    member = language.is_member((codes, lengths))
    valid = np.arange(width) < lengths[:, None]  # (batch, pos)
    c = np.where(valid, codes, 0).astype(np.int64)
    step = np.where(valid, 1 - 2 * (c & 1), 0)
    h = np.cumsum(step, axis=1)  # height after each symbol, flat after the end
    t = np.hstack([np.zeros((n, 1), np.int64), h])  # (batch, pos + 1): heights at time points
    final = h[:, -1] if width else np.zeros(n, np.int64)
    depth = language.max_depth
    big = lengths + 1  # w = length + 1 rejects every non-member (the whole string is checked)

    # the exact window check: the smallest width of each kind of evidence
    partner = _skeleton_pairs(c, h, valid)
    pos = np.arange(width)
    partner_code = np.take_along_axis(c, np.maximum(partner, 0), 1)
    mismatched = (partner >= 0) & ((c >> 1) != partner_code >> 1)
    spans = np.where(mismatched, pos - partner + 1, big[:, None])  # a window holding the pair
    w_star = np.minimum(big, spans.min(axis=1, initial=np.iinfo(np.int64).max))
    time = np.arange(width + 1)
    live = time <= lengths[:, None]
    dip = _first(live & (t < 0), width + 1)  # the prefix of `dip` symbols has an unmatched closer
    w_star = np.minimum(w_star, dip + 1)
    below_end = live & (t < final[:, None])  # a suffix from there has an unmatched opener
    last_below = np.where(below_end.any(axis=1), width - np.argmax(below_end[:, ::-1], axis=1), -1)
    w_star = np.where(last_below >= 0, np.minimum(w_star, lengths - last_below + 1), w_star)
    over = np.zeros(n, dtype=bool)
    if depth is not None:  # a window whose heights span more than D
        over = (t > depth).any(axis=1)
        for d in range(depth + 1, width + 1):
            spread = np.abs(t[:, d:] - t[:, :-d]) > depth
            hit = (spread & live[:, d:]).any(axis=1)
            w_star = np.where(hit, np.minimum(w_star, d), w_star)
            if hit.all():
                break

    # counters
    skeleton = (lengths % 2 == 1) | (t.min(axis=1) < 0) | (final != 0) | over
    per_type = np.zeros(n, dtype=bool)
    for kind in range(language.k):
        typed = np.cumsum(np.where(valid & (c >> 1 == kind), step, 0), axis=1)
        per_type |= (typed.min(axis=1, initial=0) < 0) | (typed[:, -1] != 0 if width else False)

    # where a left-to-right stack first fails
    fail = np.minimum(_first(mismatched, width + 1), dip - 1)
    if depth is not None:
        fail = np.minimum(fail, _first(live & (t > depth), width + 2) - 1)
    at_end = fail >= lengths
    distance = np.where(at_end, 0, np.minimum(fail, lengths - 1 - fail))

    w_star = np.where(member, 0, w_star)
    return Hardness(member=member, w_star=w_star.astype(np.int64), skeleton=skeleton & ~member,
                    per_type=per_type & ~member,
                    end_distance=np.where(member, -1, distance).astype(np.int64),
                    counter_bin=language.k > 1)


def window_rejects(language: Dyck, codes: np.ndarray, lengths: np.ndarray,
                   width: int) -> np.ndarray:
    """The exact ``width``-window check: bool ``(batch,)``, True where it rejects the string.

    The complement of :func:`dyckbook.data.languages.locally_valid`, for any width (no tables).
    """
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 2:
        raise ValueError(f"width must be an int >= 2, got {width!r}")
    p = profile(language, codes, lengths)
    return ~p.member & (p.w_star <= width)
