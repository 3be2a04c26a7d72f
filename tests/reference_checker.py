"""Independent, deliberately simple oracles for Dyck-k and Dyck-(k, D): membership, locality."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence


def is_dyck(s: str, pairs: Sequence[str], max_depth: int | None = None) -> bool:
    """Stack check: each closer closes the most recent open bracket of its type; depth <= D."""
    closer_of = {p[0]: p[1] for p in pairs}
    closers = {p[1] for p in pairs}
    stack: list[str] = []
    for c in s:
        if c in closer_of:
            stack.append(closer_of[c])
            if max_depth is not None and len(stack) > max_depth:
                return False
        elif c in closers:
            if not stack or stack.pop() != c:
                return False
        else:
            return False
    return not stack


def is_member(language: object, s: str) -> bool:
    """Oracle for a dyckbook language object (reads only ``pairs`` and ``max_depth``)."""
    return is_dyck(s, language.pairs, language.max_depth)


def dyck_words(pairs: tuple[str, ...], max_depth: int | None, length: int) -> Iterator[str]:
    """Every word of exactly ``length`` by the grammar S -> '' | o S c S (depth-limited)."""

    @functools.cache
    def words(n: int, room: int | None) -> tuple[str, ...]:
        if n == 0:
            return ("",)
        if room == 0:
            return ()
        inner_room = None if room is None else room - 1
        out = []
        for i in range(0, n - 1, 2):  # the first pair encloses i symbols
            for o, c in pairs:
                for a in words(i, inner_room):
                    out.extend(o + a + c + b for b in words(n - 2 - i, room))
        return tuple(out)

    return iter(words(length, max_depth))


@functools.cache
def local_sets(
    pairs: tuple[str, ...], max_depth: int | None, width: int
) -> tuple[frozenset, frozenset, frozenset]:
    """Factors of length ``width``, prefixes and suffixes of length < ``width`` of actual words.

    Read off every word of length <= 2 * width: a factor of length n extends to a word by
    prepending the openers of its unmatched closers and appending the closers of its unmatched
    openers, at most n symbols in all, without going deeper than the factor itself requires.
    """
    factors, prefixes, suffixes = set(), set(), set()
    for n in range(0, 2 * width + 1, 2):
        for w in dyck_words(pairs, max_depth, n):
            factors.update(w[i : i + width] for i in range(n - width + 1))
            prefixes.update(w[:m] for m in range(min(width, n + 1)))
            suffixes.update(w[n - m :] for m in range(min(width, n + 1)))
    return frozenset(factors), frozenset(prefixes), frozenset(suffixes)


def is_locally_valid(s: str, pairs: tuple[str, ...], max_depth: int | None, width: int) -> bool:
    """The definition read literally: windows of ``width``, anchored ends of min(width - 1, len)."""
    factors, prefixes, suffixes = local_sets(tuple(pairs), max_depth, width)
    m = min(width - 1, len(s))
    return (
        all(s[i : i + width] in factors for i in range(len(s) - width + 1))
        and s[:m] in prefixes
        and s[len(s) - m :] in suffixes
    )
