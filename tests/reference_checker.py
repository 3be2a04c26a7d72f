"""Independent, deliberately simple membership oracle for Dyck-k, Dyck-(k, D) and Shuffle-Dyck-k."""

from __future__ import annotations

from collections.abc import Sequence


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


def is_shuffle_dyck(s: str, pairs: Sequence[str]) -> bool:
    """Each type, read on its own, is a balanced Dyck-1 word (other characters: not a member)."""
    alphabet = "".join(pairs)
    if any(c not in alphabet for c in s):
        return False
    for opener, closer in pairs:
        depth = 0
        for c in s:
            if c == opener:
                depth += 1
            elif c == closer:
                depth -= 1
                if depth < 0:
                    return False
        if depth:
            return False
    return True


def is_member(language: object, s: str) -> bool:
    """Oracle for a dyckbook language object (reads only ``pairs``, ``max_depth`` and the class)."""
    if type(language).__name__ == "ShuffleDyck":
        return is_shuffle_dyck(s, language.pairs)
    return is_dyck(s, language.pairs, language.max_depth)
