"""Literal ports of the thesis' string generators (Algorithms 5.1 and 5.2), kept for reproduction.

These functions reproduce the thesis' data, defects included, so that its experiments can be
re-run and its datasets inspected. They are not samplers to train on: use
:class:`dyckbook.data.languages.Dyck` for uniform positives and :mod:`dyckbook.data.negatives` for
negatives. Each port draws from a private :class:`random.Random`, which yields the same stream
as the thesis' ``random.seed(seed)`` on the global generator, so no global state is touched.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from dyckbook.data.vocab import DEFAULT_PAIRS

__all__ = [
    "THESIS_GENERATORS",
    "THESIS_PAIRS",
    "THESIS_SEED",
    "ThesisLoopError",
    "thesis_balanced",
    "thesis_is_dyck_word",
    "thesis_samples",
    "thesis_split_sizes",
    "thesis_unbalanced",
]

#: The thesis' bracket pairs, in its order (``BRACKETS`` in its ``constants.py``).
THESIS_PAIRS: tuple[str, ...] = DEFAULT_PAIRS[:4]
#: Versions of the library's generator: as released, and as it was before 2024-09-03.
THESIS_GENERATORS = ("0.1.8", "pre-2024-09-03")
#: The default seed of both generators.
THESIS_SEED: int = 42


class ThesisLoopError(ValueError):
    """Algorithm 5.2 would recurse forever for this (order, length)."""


def _pairs_for(order: int, pairs: Sequence[str]) -> list[tuple[str, str]]:
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"order must be an int >= 1, got {order!r}")
    if order > len(pairs):
        raise ValueError(f"order={order} exceeds the {len(pairs)} available pairs {tuple(pairs)!r}")
    return [(p[0], p[1]) for p in pairs[:order]]


def _check_length(length: int) -> None:
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be an int >= 0, got {length!r}")


def thesis_is_dyck_word(query: str, k: int, pairs: Sequence[str] = THESIS_PAIRS) -> bool:
    """The thesis' stack checker (``is_dyck_word``): odd length or a foreign symbol -> False."""
    if len(query) % 2 != 0:
        return False
    brackets = _pairs_for(k, pairs)
    opening = {o for o, _ in brackets}
    closing = {c: o for o, c in brackets}
    stack: list[str] = []
    for bracket in query:
        if bracket in opening:
            stack.append(bracket)
        elif bracket in closing:
            if not stack or closing[bracket] != stack.pop():
                return False
        else:
            return False
    return not stack


def thesis_balanced(
    order: int,
    length: int,
    seed: int = THESIS_SEED,
    rng: random.Random | None = None,
    pairs: Sequence[str] = THESIS_PAIRS,
) -> str:
    """Algorithm 5.1, "generate balanced string": a Dyck word, but NOT uniformly distributed.

    While fewer than ``length / 2`` openers have been placed, the next symbol is an opener (of a
    uniformly chosen type) when the stack is empty or with probability 1/2, else the top of the
    stack is closed. Words with long runs of openers are far rarer than under the uniform
    distribution. An odd ``length`` is rounded up; ``length = 0`` gives ``""``.

    The printed listing re-seeds the generator on every call (so, like Algorithm 5.2, its output
    is a function of the length); the shipped library (0.1.8) does not re-seed and continues
    the caller's stream. Pass ``rng`` to reproduce the library: it is used as is and ``seed``
    is ignored.

    Args:
        order: Number of bracket types k.
        length: Requested length.
        seed: Seed of a fresh private generator when ``rng`` is None (the printed behaviour).
        rng: A generator to draw from without re-seeding (the library's behaviour).
        pairs: Bracket pairs in the thesis' order.

    Returns:
        The word.
    """
    _check_length(length)
    brackets = _pairs_for(order, pairs)
    r = random.Random(seed) if rng is None else rng
    if length == 0:
        return ""
    length = length if length % 2 == 0 else length + 1
    stack: list[str] = []
    word = ""
    half_length = length // 2
    first_half = last_half = 0
    while first_half + last_half < length:
        if first_half < half_length and (len(stack) == 0 or r.random() < 0.5):
            opening_bracket, closing_bracket = r.choice(brackets)
            stack.append(closing_bracket)
            first_half += 1
            word += opening_bracket
        else:
            word += stack.pop()
            last_half += 1
    return word


def _unbalanced_once(order: int, length: int, seed: int, pairs: Sequence[str]) -> str:
    # the thesis: random.seed(seed) at the top of every call
    return _unbalanced_draw(order, length, random.Random(seed), pairs)


def _unbalanced_draw(order: int, length: int, r: random.Random, pairs: Sequence[str]) -> str:
    brackets_pairs = _pairs_for(order, pairs)
    opening_brackets = [o for o, _ in brackets_pairs]
    closing_brackets = [c for _, c in brackets_pairs]
    brackets = opening_brackets + closing_brackets
    first_char = r.choice(opening_brackets) if r.random() < 0.5 else r.choice(closing_brackets)
    random_brackets = [r.choice(brackets) for _ in range(length - 1)]
    r.shuffle(random_brackets)
    return first_char + "".join(random_brackets)


def thesis_unbalanced(
    order: int, length: int, seed: int = THESIS_SEED, pairs: Sequence[str] = THESIS_PAIRS
) -> str:
    """Algorithm 5.2, "generate unbalanced string": a function of (order, length, seed) alone.

    The generator is re-seeded on every call, so with the default seed every call for the same
    length returns the same string: a thesis dataset holds one negative per distinct length. The
    first symbol is an opener or a closer with probability 1/2, the other ``length - 1`` are
    uniform over the alphabet and shuffled. ``length = 0`` returns a one-symbol string (the
    printed code always emits the first symbol).

    When the result happens to be a Dyck word, the printed code recurses without passing the
    seed, i.e. with the default seed 42; with seed 42 that recomputes the same word forever (a
    ``RecursionError`` in the original). This port follows the recursion once and raises
    :class:`ThesisLoopError` where the original would never return.

    Args:
        order: Number of bracket types k.
        length: Requested length.
        seed: The seed passed to the first call.
        pairs: Bracket pairs in the thesis' order.

    Returns:
        The string (never a Dyck word).

    Raises:
        ThesisLoopError: The original would recurse forever for this (order, length).
    """
    _check_length(length)
    word = _unbalanced_once(order, length, seed, pairs)
    if not thesis_is_dyck_word(word, order, pairs):
        return word
    if seed != THESIS_SEED:
        word = _unbalanced_once(order, length, THESIS_SEED, pairs)
        if not thesis_is_dyck_word(word, order, pairs):
            return word
    raise ThesisLoopError(
        f"thesis Algorithm 5.2 never returns for order={order}, length={length}: seed "
        f"{THESIS_SEED} yields the Dyck word {word!r} and the recursion re-seeds with {THESIS_SEED}"
    )


def thesis_samples(
    n: int,
    k: int,
    min_length: int = 0,
    max_length: int = 1024,
    balanced: float = 0.5,
    seed: int = THESIS_SEED,
    pairs: Sequence[str] = THESIS_PAIRS,
    generator: str = "0.1.8",
) -> list[str]:
    """The library's ``_generate_samples`` (``transformer-checker`` 0.1.8): a thesis dataset's
    strings.

    One private generator plays the role of the global ``random`` module: it is seeded with
    ``seed``, draws every length with ``randint(min_length, max_length)`` (odd lengths included),
    generates ``int(n * balanced)`` members with Algorithm 5.1 (no re-seeding: the stream
    continues), then ``n - int(n * balanced)`` non-members with Algorithm 5.2, which re-seeds
    the shared generator with 42 on every call, and finally shuffles the list. Because of that
    re-seeding, the length of each non-member after the first is a function of the previous
    one: the lengths fall into a short cycle and the dataset holds only a handful of distinct
    non-members.

    Args:
        n: Number of strings.
        k: Number of bracket types.
        min_length: Shortest length drawn (a drawn 0 gives a one-symbol non-member).
        max_length: Longest length drawn.
        balanced: Share of members (``int(n * balanced)`` of them).
        seed: Seed of the shared generator (the library's default is 42).
        pairs: Bracket pairs in the thesis' order.
        generator: ``"0.1.8"`` (the released library) or ``"pre-2024-09-03"`` (the version that
            wrote experiment 6's cached files: a non-member is a uniform random string of the
            length, drawn after the same re-seeding, instead of Algorithm 5.2's first symbol and
            shuffle).

    Returns:
        The ``n`` strings in the library's shuffled order (labels: :func:`thesis_is_dyck_word`).

    Raises:
        ValueError: A bad argument (named in the message).
        ThesisLoopError: A drawn length for which the original would recurse forever.
    """
    for name, value, low in (("n", n, 0), ("min_length", min_length, 0),
                             ("max_length", max_length, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    if min_length > max_length:
        raise ValueError(f"min_length must be <= max_length, got {min_length} > {max_length}")
    if (isinstance(balanced, bool) or not isinstance(balanced, (int, float))
            or not 0 <= balanced <= 1):
        raise ValueError(f"balanced must be a number in [0, 1], got {balanced!r}")
    _pairs_for(k, pairs)
    if generator not in THESIS_GENERATORS:
        raise ValueError(f"generator must be one of {THESIS_GENERATORS}, got {generator!r}")
    r = random.Random(seed)
    n_balanced = int(n * balanced)
    members = [thesis_balanced(k, r.randint(min_length, max_length), rng=r, pairs=pairs)
               for _ in range(n_balanced)]
    others = []
    for _ in range(n - n_balanced):
        length = r.randint(min_length, max_length)
        r.seed(THESIS_SEED)  # the library calls _generate_unbalanced_string with its default seed
        if generator == "0.1.8":
            word = _unbalanced_draw(k, length, r, pairs)
        else:
            symbols = [c for pair in _pairs_for(k, pairs) for c in pair]
            word = "".join(r.choice(symbols) for _ in range(length))
        if thesis_is_dyck_word(word, k, pairs):
            # the recursion re-seeds with 42 again: the same word forever
            raise ThesisLoopError(
                f"thesis Algorithm 5.2 never returns for order={k}, length={length}: seed "
                f"{THESIS_SEED} yields the Dyck word {word!r}")
        others.append(word)
    samples = members + others
    r.shuffle(samples)
    return samples


def thesis_split_sizes(n: int) -> tuple[int, int, int]:
    """The thesis notebook's split of ``n`` strings: ``(train, validation, test)`` sizes.

    ``train = int(0.8 n)``, ``validation = int(0.15 * train)``, the rest for test: the three
    sizes the notebook passes to one ``torch.utils.data.random_split`` (so the sets sum to ``n``
    and the validation set is not carved out of the training set, whatever its name says).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    train = int(0.8 * n)
    val = int(0.15 * train)
    return train, val, n - train - val
