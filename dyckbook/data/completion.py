"""Dyck completion: prefixes of uniform Dyck words, their shortest completions, BIG-bench files."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dyckbook.data.config import Config
from dyckbook.data.dataset import string_hash
from dyckbook.data.languages import Dyck
from dyckbook.data.vocab import PAD_CODE, check_codes

__all__ = ["BBH_DYCK_FILE", "BIGBENCH_DYCK_FILE", "BIGBENCH_SENTENCE", "REGIMES",
           "CompletionDataConfig", "CompletionSet", "CompletionSplits", "check_items",
           "close_by_counts", "closing_codes",
           "completion_target", "make_completion_splits", "open_positions", "order_blind_best",
           "order_blind_expected", "parse_bigbench", "to_bigbench_json", "to_items"]

REGIMES = ("suffix", "bbh")
#: The sentence before the tokens of every BIG-bench / BIG-Bench Hard ``dyck_languages`` input.
BIGBENCH_SENTENCE = ("Complete the rest of the sequence, making sure that the parentheses are "
                     "closed properly. Input:")
_TRAIN, _VAL, _TEST = 0, 1, 2  # hash pools
_ROUNDS = 32  # sampling rounds before a set is returned short (its pool is exhausted)


@dataclass(frozen=True)
class CompletionDataConfig(Config):
    """Completion pairs of one run. Defaults: HELM's Dyck scenario (Dyck-3, 4-50 | 52-100)."""

    k: int = 3  # bracket types; pairs vocab.DEFAULT_PAIRS[:k] (k = 4: BIG-bench's "()[]{}<>")
    regime: str = "suffix"  # suffix: cut in a word's second half | bbh: 1-3 final closers removed
    min_length: int = 4  # shortest prefix of training, validation and in-distribution test
    max_length: int = 50  # longest prefix of training, validation and in-distribution test
    test_min_length: int = 52  # shortest prefix of the out-of-distribution ("ood") test
    test_max_length: int = 100  # longest prefix of the out-of-distribution test
    n_train: int = 20_000  # training pairs (drawn with replacement from the training pool)
    n_val: int = 1_000  # distinct validation pairs
    n_test: int = 2_000  # distinct pairs per test set
    held_out: float = 0.2  # share of prefixes kept from training: half validation, half test

    kind = "completion"  # RunConfig tells data configs apart by this

    def __post_init__(self) -> None:
        # suffix: lengths >= 3; bbh: >= 2 (BIG-Bench Hard has prefixes of 2, two closers
        # removed); min < max: both parities occur
        short = 2 if self.regime == "bbh" else 3
        for name, low in (("k", 1), ("n_train", 1), ("n_val", 0), ("n_test", 0),
                          ("min_length", short), ("max_length", short + 1),
                          ("test_min_length", short), ("test_max_length", short + 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"CompletionDataConfig.{name} must be an int >= {low}, "
                                 f"got {value!r}")
        for lo, hi in (("min_length", "max_length"), ("test_min_length", "test_max_length")):
            if getattr(self, lo) >= getattr(self, hi):
                raise ValueError(f"CompletionDataConfig.{lo} must be < {hi}, "
                                 f"got {getattr(self, lo)} >= {getattr(self, hi)}")
        if self.regime not in REGIMES:
            raise ValueError(f"CompletionDataConfig.regime must be one of {REGIMES}, "
                             f"got {self.regime!r}")
        if isinstance(self.held_out, bool) or not 0.0 < self.held_out < 1.0:
            raise ValueError(f"CompletionDataConfig.held_out must be in (0, 1), "
                             f"got {self.held_out!r}")

    def lengths(self, test: bool = False) -> tuple[int, int]:
        """``(shortest, longest)`` prefix of training (and in-distribution tests) or OOD tests."""
        return ((self.test_min_length, self.test_max_length) if test
                else (self.min_length, self.max_length))


def open_positions(language: Dyck, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Positions of each prefix's unmatched openers (those whose level the height never falls
    below afterwards), in the order a completion closes them; types are not checked here.

    Returns:
        int64 (batch, depth): column j holds the opener that the j-th completion symbol closes
        (innermost first); -1 past a row's height, and on all of a row that dips below 0.
    """
    h = language.heights(codes, lengths).astype(np.int64)  # (batch, pos)
    valid = np.arange(codes.shape[1]) < lengths[:, None]
    floor = np.minimum.accumulate(np.where(valid, h, h.max(initial=0))[:, ::-1], axis=1)[:, ::-1]
    sound = (floor[:, 0] >= 0) if codes.shape[1] else np.ones(lengths.size, bool)
    rows, cols = np.nonzero(valid & (codes % 2 == 0) & (floor >= h) & sound[:, None])
    depth = np.bincount(rows, minlength=lengths.size)  # the height at the cut
    out = np.full((lengths.size, int(depth.max(initial=0))), -1, np.int64)
    out[rows, depth[rows] - h[rows, cols]] = cols  # the opener at level d is closed d-th last
    return out


def closing_codes(language: Dyck, codes: np.ndarray,
                  lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The unique shortest completion of every prefix: its unmatched openers' closers, reversed.

    Returns ``(codes, lengths)``, uint8 (batch, depth) and int64 (batch,), of the completions of
    prefixes ``codes`` uint8 (batch, pos), ``lengths`` (batch,). Raises ValueError naming the
    first row that is not a prefix of a word of ``language``.
    """
    codes, lengths = check_codes(codes, lengths, 2 * language.k)
    opened = open_positions(language, codes, lengths)
    found = opened >= 0
    rows = np.nonzero(found)[0]
    out = np.full(opened.shape, PAD_CODE, np.uint8)
    out[found] = codes[rows, opened[found]] + 1
    # a prefix is valid iff it completes to a word (one that dips below 0 or mixes types does not)
    width = codes.shape[1]
    whole = np.full((lengths.size, width + out.shape[1]), PAD_CODE, np.uint8)
    whole[:, :width] = np.where(np.arange(width) < lengths[:, None], codes, PAD_CODE)
    whole[rows, (lengths[:, None] + np.arange(out.shape[1]))[found]] = out[found]
    bad = ~language.is_member((whole, lengths + found.sum(1)))
    if bad.any():
        i = int(np.argmax(bad))
        text = language.alphabet.decode(codes[i:i + 1], lengths[i:i + 1])[0]
        raise ValueError(f"{text!r} (row {i}) is not a prefix of a {language.name} word")
    return out, found.sum(1).astype(np.int64)


def completion_target(prefix: str, k: int = 4) -> str:
    """The shortest completion of one prefix, e.g. ``completion_target("([") == "])"``; a
    ValueError names a prefix with a character outside the k pairs, or that is no prefix."""
    alphabet = Dyck(k).alphabet
    if not isinstance(prefix, str):
        raise ValueError(f"prefix must be a str, got {type(prefix).__name__}")
    unknown = [c for c in prefix if c not in alphabet.symbols]
    if unknown:
        raise ValueError(f"prefix {prefix!r} holds {unknown[0]!r}, which is not one of the "
                         f"symbols {alphabet.symbols!r}")
    return alphabet.decode(*closing_codes(Dyck(k), *alphabet.encode([prefix])))[0]


@dataclass(frozen=True)
class CompletionSet:
    """Prefixes to complete; their completions are derived (:meth:`targets`), never stored.

    Attributes:
        language: the Dyck-k language (no depth bound).
        codes: uint8 (batch, pos) prefixes, right-padded with ``PAD_CODE``.
        lengths: int64 (batch,) prefix lengths.
        regime: ``suffix``, ``bbh``, or ``bigbench`` (read from a file); scores' ``per_kind`` key.
    """

    language: Dyck
    codes: np.ndarray
    lengths: np.ndarray
    regime: str

    def __post_init__(self) -> None:
        if self.codes.ndim != 2 or self.codes.shape[0] != self.lengths.shape[0]:
            raise ValueError(f"codes must be (batch, pos) with batch={self.lengths.shape[0]}, "
                             f"got {self.codes.shape}")

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def targets(self) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, lengths)`` of the shortest completions (see :func:`closing_codes`)."""
        return closing_codes(self.language, self.codes, self.lengths)

    def depths(self) -> np.ndarray:
        """(batch,) height at the cut: the unmatched openers, i.e. the completion's length."""
        return (open_positions(self.language, self.codes, self.lengths) >= 0).sum(1)

    def subset(self, index: np.ndarray | Sequence[int]) -> CompletionSet:
        """The rows ``index`` (positions or a bool mask), trimmed to their longest prefix."""
        index = np.asarray(index)
        index = np.flatnonzero(index) if index.dtype == bool else index.astype(np.int64)
        lengths = self.lengths[index]
        codes = np.ascontiguousarray(self.codes[index, :int(lengths.max(initial=0))])
        return CompletionSet(self.language, codes, lengths, self.regime)

    def hashes(self) -> np.ndarray:
        """uint64 (batch,) of the prefixes (``dataset.string_hash``)."""
        return string_hash(self.codes, self.lengths)

    def strings(self) -> list[str]:
        """The prefixes as text."""
        return self.language.alphabet.decode(self.codes, self.lengths)

    def summary(self) -> dict[str, Any]:
        """Size, distinct prefixes, and the ranges of prefix and completion lengths."""
        span = lambda a: [int(a.min()), int(a.max())] if a.size else [0, 0]
        return {"n": len(self), "distinct": int(np.unique(self.hashes()).size),
                "regime": self.regime, "lengths": span(self.lengths),
                "target_lengths": span(self.depths())}


@dataclass
class CompletionSplits:
    """The sets of one run; ``tests`` holds ``in_distribution`` and ``ood``."""

    train: CompletionSet
    val: CompletionSet
    tests: dict[str, CompletionSet]

    def summary(self) -> dict[str, dict[str, Any]]:
        sets = {"train": self.train, "val": self.val, **self.tests}
        return {name: s.summary() for name, s in sets.items()}


def _candidates(config: CompletionDataConfig, language: Dyck, rng: np.random.Generator, n: int,
                lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``n`` prefixes with lengths in [lo, hi]: ``(codes (batch, hi), lengths)``.

    ``suffix``: the first L symbols (L uniform) of a uniform word of length uniform over the even
    numbers in (L, 2L], kept if not balanced. ``bbh``: t uniform in 1..3, a uniform word of even
    length N with N - t uniform in [lo, hi], kept if its last t symbols (the completion) close.
    """
    if config.regime == "suffix":
        cut = rng.integers(lo, hi + 1, n)
        words = 2 * rng.integers(cut // 2 + 1, cut + 1)
    else:
        need = rng.integers(1, 4, n)
        words = 2 * rng.integers((lo + need + 1) // 2, (hi + need) // 2 + 1)
        cut = words - need
    codes, words = language.sample_codes(rng, words)
    height = language.heights(codes, words)[np.arange(n), cut - 1]
    keep = height >= 1 if config.regime == "suffix" else height == need
    width = min(hi, codes.shape[1])  # every cut is at most both
    out = np.full((n, hi), PAD_CODE, np.uint8)
    out[:, :width] = np.where(np.arange(width) < cut[:, None], codes[:, :width], PAD_CODE)
    return out[keep], cut[keep].astype(np.int64)


def _draw(config: CompletionDataConfig, rng: np.random.Generator, n: int, test: bool, salt: int,
          pool: int) -> CompletionSet:
    """``n`` prefixes of one pool, distinct outside training (fewer if the pool runs out)."""
    language, bounds = Dyck(config.k), config.lengths(test)
    codes, lengths, seen = np.zeros((0, bounds[1]), np.uint8), np.zeros(0, np.int64), []
    for _ in range(_ROUNDS):
        if lengths.size >= n:
            break
        more, more_lengths = _candidates(config, language, rng, 2 * (n - lengths.size) + 64,
                                         *bounds)
        hashes = string_hash(more, more_lengths, salt)
        u = (hashes >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        h = config.held_out
        ok = np.where(u < h / 2, _TEST, np.where(u < h, _VAL, _TRAIN)) == pool
        if pool != _TRAIN:
            first = np.zeros(hashes.size, bool)
            first[np.unique(hashes, return_index=True)[1]] = True
            ok &= first & ~np.isin(hashes, np.concatenate([np.zeros(0, np.uint64), *seen]))
        rows = np.flatnonzero(ok)[:n - lengths.size]
        seen.append(hashes[rows])
        codes = np.concatenate([codes, more[rows]])
        lengths = np.concatenate([lengths, more_lengths[rows]])
    return CompletionSet(language, codes, lengths, config.regime).subset(np.arange(lengths.size))


def make_completion_splits(config: CompletionDataConfig, seed: int) -> CompletionSplits:
    """Training, validation and test pairs of one seed; no prefix is in two of them.

    A salted hash of the prefix assigns it to the training, validation or test pool (shares
    ``1 - held_out``, ``held_out / 2``, ``held_out / 2``); the completion is a function of the
    prefix, so no held-out pair occurs in training. Validation and ``in_distribution`` use the
    training lengths, ``ood`` the test lengths; both tests come from the test pool.
    """
    if not isinstance(config, CompletionDataConfig):
        raise ValueError(f"config must be a CompletionDataConfig, got {type(config).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    streams = np.random.SeedSequence([seed, 0xC0DE]).spawn(5)
    salt = int(streams[4].generate_state(1)[0])
    plan = [(config.n_train, False, _TRAIN), (config.n_val, False, _VAL),
            (config.n_test, False, _TEST), (config.n_test, True, _TEST)]
    sets = [_draw(config, np.random.default_rng(stream), n, test, salt, pool)
            for stream, (n, test, pool) in zip(streams, plan)]
    return CompletionSplits(sets[0], sets[1], {"in_distribution": sets[2], "ood": sets[3]})


def to_bigbench_json(completions: CompletionSet) -> str:
    """The BIG-Bench Hard ``dyck_languages`` file of a set: ``{"examples": [{"input", "target"}]}``
    with space-separated tokens, each input led by :data:`BIGBENCH_SENTENCE`."""
    targets = completions.language.alphabet.decode(*completions.targets())
    examples = [{"input": f"{BIGBENCH_SENTENCE} {' '.join(p)}", "target": " ".join(t)}
                for p, t in zip(completions.strings(), targets)]
    return json.dumps({"name": "dyck_languages", "examples": examples}, indent=1,
                      ensure_ascii=False) + "\n"


def _answers(example: dict, where: str) -> dict[str, list[str]]:
    """What an example says its answer is, by where it says it, each a list of answers: its
    ``target`` (a string, or a list of strings any of which is right) and the single best key
    of its ``target_scores`` (the original BIG-bench task scores its answer there)."""
    target, scores = example.get("target"), example.get("target_scores")
    ok = (isinstance(example.get("input"), str) and (target is not None or scores is not None)
          and (target is None or isinstance(target, str)
               or (isinstance(target, list) and target
                   and all(isinstance(t, str) for t in target)))
          and (scores is None or (isinstance(scores, dict) and scores and all(
              isinstance(v, (int, float)) and not isinstance(v, bool)
              for v in scores.values()))))
    if not ok:
        raise ValueError(f"{where}: needs the string fields 'input' and 'target' (or a list "
                         f"of strings as 'target', or 'target_scores' mapping answers to "
                         f"numbers), got {str(example)[:80]}")
    out = {} if target is None else {"target": [target] if isinstance(target, str) else target}
    if scores is not None:
        best = max(scores.values())
        top = [answer for answer, score in scores.items() if score == best]
        if len(top) != 1:
            raise ValueError(f"{where}: target_scores has {len(top)} answers with the best "
                             f"score {best!r} ({', '.join(map(repr, top[:4]))}), not one")
        out["the best of target_scores"] = top
    return out


def parse_bigbench(text: str, source: str, k: int = 4) -> CompletionSet:
    """Read the text of a BIG-bench or BIG-Bench Hard ``dyck_languages`` task.

    Both formats hold ``{"examples": [...]}`` with space-separated tokens. BIG-Bench Hard's
    (:func:`to_bigbench_json`): each ``input`` led by :data:`BIGBENCH_SENTENCE`, a string
    ``target``. The original BIG-bench task (google/BIG-bench, ``task.json``): bare tokens
    as ``input``, the instruction in the task's ``task_prefix`` and ``example_input_prefix``
    (removed from an input that carries it), the answer scored by ``target_scores`` (its one
    best key) and/or ``target`` (a string, or a list of right answers). Each answer must be
    the input's shortest completion. Every error names ``source`` (a path) and the example:
    not JSON, no ``examples`` list, a prefix that is not a string, a missing or malformed
    answer, an unknown token, an input that is not a prefix, a wrong answer.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{source}: not JSON ({error})") from None
    examples = data.get("examples") if isinstance(data, dict) else None
    if not isinstance(examples, list) or not examples:
        raise ValueError(f"{source}: expected an object with a non-empty 'examples' list")
    for field in ("task_prefix", "example_input_prefix"):
        if not isinstance(data.get(field, ""), str):
            raise ValueError(f"{source}: {field} must be a string, got {data[field]!r}")
    lead = data.get("example_input_prefix", "").strip()
    prefixes = []
    for i, example in enumerate(examples):
        where = f"{source}, example {i}"
        if not isinstance(example, dict):
            raise ValueError(f"{where}: needs the string fields 'input' and 'target', "
                             f"got {str(example)[:80]}")
        answers = _answers(example, where)
        line = example["input"].strip()
        line = line[len(lead):] if lead and line.startswith(lead) else line
        tokens = line.rpartition("Input:")[2].split()
        try:
            if any(len(t) != 1 for t in tokens):
                raise ValueError(f"the input token {max(tokens, key=len)!r} is not one symbol")
            expected = completion_target("".join(tokens), k)
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
        for name, given in answers.items():
            if list(expected) not in [a.split() for a in given]:
                said = repr(given[0]) if len(given) == 1 else f"none of {given!r}"
                raise ValueError(f"{where}: {name} {said} is not the shortest completion of "
                                 f"{' '.join(tokens)!r}, which is {' '.join(expected)!r}")
        prefixes.append("".join(tokens))
    return CompletionSet(Dyck(k), *Dyck(k).alphabet.encode(prefixes), "bigbench")


# ------------------------------------------------------------------ items and order-blind scores
#: The real BIG-Bench Hard ``dyck_languages`` items (250, MIT; shipped with the package, so a
#: worker without a checkout has them); read them with ``results.read_bigbench`` and
#: :func:`to_items`.
BBH_DYCK_FILE = Path(__file__).resolve().parent / "external" / "bbh" / "dyck_languages.json"
#: The original BIG-bench ``dyck_languages`` task (1,000 items, Apache-2.0; BBH's 250 are among
#: them), in BIG-bench's JSON task format; shipped with the package like :data:`BBH_DYCK_FILE`.
BIGBENCH_DYCK_FILE = Path(__file__).resolve().parent / "external" / "bigbench" / "task.json"


def to_items(completions: CompletionSet) -> list[tuple[str, str]]:
    """The ``(prefix, target)`` pairs of a set, as text without spaces, e.g. ``("[{[", "]}]")``:
    ``to_items(results.read_bigbench(path))`` are a BIG-bench file's items in file order."""
    targets = completions.language.alphabet.decode(*completions.targets())
    return list(zip(completions.strings(), targets))


def check_items(items: Sequence[tuple[str, str]], k: int = 4) -> list[tuple[str, str]]:
    """``items`` as a list of ``(prefix, target)`` str pairs over the k pairs' symbols; a
    ValueError names the first item (by index) that is not such a pair (targets are not checked
    against the prefixes here: :func:`parse_bigbench` does that)."""
    symbols = set(Dyck(k).alphabet.symbols)
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise ValueError(f"items must be a sequence of (prefix, target) pairs, got "
                         f"{type(items).__name__}")
    out = []
    for i, item in enumerate(items):
        if not (isinstance(item, (tuple, list)) and len(item) == 2
                and all(isinstance(s, str) for s in item)):
            raise ValueError(f"item {i}: expected a (prefix, target) pair of str, got "
                             f"{str(item)[:80]}")
        for name, text in zip(("prefix", "target"), item):
            unknown = sorted(set(text) - symbols)
            if unknown:
                raise ValueError(f"item {i}: {name} {text!r} holds {unknown[0]!r}, which is not "
                                 f"one of the symbols {''.join(sorted(symbols))!r}")
        out.append((item[0], item[1]))
    return out


def _unmatched(prefix: str, pairs: Sequence[str]) -> list[int]:
    """Per pair: openers minus closers in ``prefix`` (never below 0) -- all an order-blind rule
    knows about what is left open."""
    return [max(0, prefix.count(p[0]) - prefix.count(p[1])) for p in pairs]


def close_by_counts(prefix: str, order: str | None = None, k: int = 4) -> str:
    """The order-blind rule "close the unmatched counts in a fixed order": every closer of
    ``order`` (default the k pairs' closers, ``")]}>"`` for k = 4), repeated as often as its
    opener outnumbers it in ``prefix``. E.g. ``close_by_counts("([") == ")]"`` (the right
    completion is ``"])"``); ``close_by_counts("[[") == "]]"``."""
    pairs = Dyck(k).alphabet.pairs
    closers = "".join(p[1] for p in pairs)
    order = closers if order is None else order
    if not isinstance(order, str) or sorted(order) != sorted(closers):
        raise ValueError(f"order must arrange the closers {closers!r} once each, got {order!r}")
    left = dict(zip(closers, _unmatched(prefix, pairs)))
    return "".join(c * left[c] for c in order)


def _bag_keys(items: list[tuple[str, str]], k: int) -> list[tuple[int, ...]]:
    symbols = Dyck(k).alphabet.symbols
    return [tuple(prefix.count(s) for s in symbols) for prefix, _ in items]


def order_blind_best(items: Sequence[tuple[str, str]], k: int = 4) -> float:
    """The best exact-match share any order-blind predictor (a function of how often each symbol
    occurs in the prefix) can reach on these very items: each count vector answered with the
    most frequent target among the items sharing it. An upper bound, fitted to the items: where
    (almost) every count vector is unique it memorises them (see :func:`order_blind_expected`).
    NaN for no items."""
    items = check_items(items, k)
    if not items:
        return float("nan")
    groups: dict[tuple[int, ...], dict[str, int]] = {}
    for key, (_, target) in zip(_bag_keys(items, k), items):
        counts = groups.setdefault(key, {})
        counts[target] = counts.get(target, 0) + 1
    return sum(max(c.values()) for c in groups.values()) / len(items)


def order_blind_expected(items: Sequence[tuple[str, str]], k: int = 4) -> float:
    """The expected exact-match share of closing the unmatched counts in a uniformly random
    order (each arrangement of the closers left open equally likely): per item 1 / (distinct
    arrangements of its target) when its target uses exactly the unmatched closers, else 0.
    NaN for no items."""
    items = check_items(items, k)
    if not items:
        return float("nan")
    pairs, total = Dyck(k).alphabet.pairs, 0.0
    for prefix, target in items:
        left = _unmatched(prefix, pairs)
        if [target.count(p[1]) for p in pairs] != left or len(target) != sum(left):
            continue
        arrangements = math.factorial(sum(left))
        for n in left:
            arrangements //= math.factorial(n)
        total += 1.0 / arrangements
    return total / len(items)
