"""The data protocol: a DataConfig and a seed give disjoint training, validation and test sets.

Every distinct string is assigned, by a hash salted with the seed, to the training pool, the
validation pool or the test pool (``held_out`` of the strings, halved between the last two), so
no string of a test set can occur in training, whatever the sizes. Training sets are drawn
uniformly within their pool (members exactly uniform for their length, negatives from the
configured mixture). Validation and test sets are deduplicated (one copy and one kind per
string) and balanced per length: at every length they hold as many members as non-members, and
a length joins only if both classes exist there, so neither length nor class frequency carries
a signal. Validation uses the hard negatives (non-local at ``window``), and where the
training lengths admit them also a ``stack`` set, so that early stopping waits for both.

Test regimes (negative kinds of a test set):

``hard``    the hard kinds of :mod:`dyckbook.data.negatives`, no window of ``window`` symbols (4)
            rejecting them; counters, wider windows and the ends still reject most of them
            (``baselines.attack``)
``local``   the same kinds without the window condition (a local shortcut may reject many)
``random``  uniform random non-members of even length (the thesis' intent)
``stack``   the verdict-bearing set: long-range negatives (``stack`` for k >= 2, ``far`` for
            k = 1) against their matched members, from length 28 (k >= 2) or 30 (k = 1). What
            it is hard for is measured, not assumed (``dyckbook.rules.adversary``,
            ``benchmarks/bench_adversary.py``): counters (k >= 2), per-height type tallies,
            the exact window of W = max(8, ceil(length / 3)) symbols, n-gram counts and the
            end symbols do not beat chance on it; learned rules that read heights, gapped
            pairs or local pieces still do (up to 0.89 on Dyck-2, the Dyck chapter's table).
            Training negatives of this regime come with matched members too.
``spread``  a test set only (k >= 2): the ``spread`` kind against its matched members (the words
            themselves), W = max(4, ceil(length / 6)): every relation that differs lies W or
            more apart, and a rule of reach r meets negatives whose W exceeds r from about
            6r on (issue 63). The training mixture never holds it.
``deep``    a test set only: members of depth at least D = 1 + the depth of the deepest
            training member (so deeper than any training string), against hard negatives
            (non-local at ``window``) made from such words, at the test lengths >= 2D
            (:class:`~dyckbook.data.languages.DeepDyck`); ``Splits.deep_depth`` holds D. Its
            strings are labelled by the plain test language (Dyck-k), as every other set's.

Validation (``val_negatives``): ``auto``, the hard set plus a stack set where the training
lengths admit one; ``hard``, the hard set alone, so that a study whose tests are long-range sets
never selects a model on their kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dyckbook.data import negatives as N
from dyckbook.data.config import Config
from dyckbook.data.dataset import MEMBER, Dataset, string_hash
from dyckbook.data.languages import DeepDyck, Dyck
from dyckbook.data.thesis import (
    THESIS_GENERATORS,
    THESIS_PAIRS,
    thesis_is_dyck_word,
    thesis_samples,
    thesis_split_sizes,
)

__all__ = ["LONG_RANGE", "REGIMES", "SOURCES", "TEST_POOLS", "TEST_REGIMES", "TRAIN_NEGATIVES",
           "VAL_NEGATIVES", "DataConfig", "Splits", "balanced_sample", "make_splits", "regime_lengths"]

#: the regimes of the training mixture (``train_negatives: mix``) and of the test sets
REGIMES = ("hard", "local", "random", "stack")
#: a test set may also be ``spread`` or ``deep``, which training never sees
TEST_REGIMES = (*REGIMES, "spread", "deep")
TRAIN_NEGATIVES = ("mix", "hard", "local", "random", "stack")
#: the validation set's regimes: ``auto`` (hard, plus stack where the lengths admit it) | ``hard``
TEST_POOLS = ("hashed", "beyond")
VAL_NEGATIVES = ("auto", "hard")
#: the long-range regimes: their negative kind for a language, and the ``_sample`` regime of
#: their matched members (the stack set's keeps its old name, so its draws are unchanged)
LONG_RANGE: dict[str, tuple[Callable[[Dyck], str], str]] = {
    "stack": (N.stack_kind, "matched member"),
    "spread": (lambda language: "spread", "matched member (spread)"),
}
MATCHED = LONG_RANGE["stack"][1]  # _sample's regime for the members of a stack set
SOURCES = ("sound", "thesis")
THESIS_SPLITS = ("thesis", "80/20")
_TRAIN, _VAL, _TEST = 0, 1, 2
_MAX_ROUNDS = 12  # sampling rounds before a length counts as exhausted in its pool


_SHORTEST_SEARCHED = 256  # DataConfig: how far an error looks for the shortest stack length


@dataclass(frozen=True)
class DataConfig(Config):
    """What to train and test on. Lengths are inclusive; members have even length."""

    k: int = 1  # bracket types (Dyck-k)
    max_depth: int | None = None  # depth bound of training strings (None: unbounded)
    min_length: int = 0  # shortest training / validation string
    max_length: int = 16  # longest training / validation string
    test_min_length: int | None = None  # shortest test string (None: min_length)
    test_max_length: int | None = None  # longest test string (None: max_length)
    test_max_depth: int | None = None  # depth bound of test strings (None: max_depth)
    n_train: int = 8000  # training strings (source "thesis": the thesis dataset's size n)
    positive_fraction: float = 0.5  # share of members in the training set
    train_negatives: str = "mix"  # mix (a quarter each of hard, local, random, stack; where no
    #                               stack negative exists, a third each of the others) | hard |
    #                               local | random | stack
    window: int = 4  # w of the hard (non-local) regime
    n_val: int = 1000  # requested validation strings (hard negatives, balanced per length)
    n_test: int = 2000  # requested strings per test set (balanced per length)
    test_sets: tuple[str, ...] = ("hard", "local", "random")  # regimes of the test sets
    held_out: float = 0.2  # share of distinct strings reserved for validation and test pools
    source: str = "sound"  # sound | thesis (the thesis' generator and split, see make_splits)
    thesis_generator: str = "0.1.8"  # source thesis: the library version (thesis.THESIS_GENERATORS)
    thesis_split: str = "thesis"  # source thesis: "thesis" (train/val/test in one random_split)
    #                               | "80/20" (train/val; the test set generated apart)
    val_negatives: str = "auto"  # auto (hard, local where none, plus stack where the training
    #                              lengths admit it) | hard (the hard or local set alone)
    test_pool: str = "hashed"  # hashed (every test string from the test pool) | beyond (test
    #                            strings longer than max_length, which no training or validation
    #                            string can be, are all test strings: ~10x fewer draws there)

    #: added after records were written: left out of ``to_dict`` at their default (digests kept)
    LATER_FIELDS = ("val_negatives", "test_pool")

    def __post_init__(self) -> None:
        if isinstance(self.test_sets, str):
            raise ValueError(f"DataConfig.test_sets must be a sequence of regime names, "
                             f"got the string {self.test_sets!r}")
        object.__setattr__(self, "test_sets", tuple(self.test_sets))
        for name in ("positive_fraction", "held_out"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"DataConfig.{name} must be a number, got {value!r}")
        for name in ("k", "n_train", "n_val", "n_test", "window", "min_length", "max_length"):
            value = getattr(self, name)
            low = 0 if name in ("min_length", "n_val") else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"DataConfig.{name} must be an int >= {low}, got {value!r}")
        for name in ("max_depth", "test_max_depth", "test_min_length", "test_max_length"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 0):
                raise ValueError(f"DataConfig.{name} must be None or an int >= 0, got {value!r}")
        for lo, hi in (("min_length", "max_length"), ("test_min", "test_max")):
            a, b = self.lengths(lo.startswith("test"))
            if a > b or (a + 1) // 2 > b // 2:
                raise ValueError(f"DataConfig lengths {a}..{b} ({lo}, {hi}) hold no even length")
        choices = (("train_negatives", TRAIN_NEGATIVES), ("source", SOURCES),
                   ("thesis_generator", THESIS_GENERATORS), ("thesis_split", THESIS_SPLITS),
                   ("val_negatives", VAL_NEGATIVES), ("test_pool", TEST_POOLS))
        for name, allowed in choices:
            if getattr(self, name) not in allowed:
                raise ValueError(f"DataConfig.{name} must be one of {allowed}, "
                                 f"got {getattr(self, name)!r}")
        for regime in self.test_sets:
            if regime not in TEST_REGIMES:
                raise ValueError(f"DataConfig.test_sets holds {regime!r}; known: {TEST_REGIMES}")
        bound = self.language(test=True).max_depth
        if "deep" in self.test_sets and bound is not None:
            raise ValueError(f"DataConfig.test_sets holds 'deep', whose words are deeper than any "
                             f"training word, but the test strings are bounded to depth {bound} "
                             f"(test_max_depth / max_depth): leave both None")
        for regime in LONG_RANGE:
            if regime not in self.test_sets and self.train_negatives != regime:
                continue
            test = regime in self.test_sets
            lo, hi = self.lengths(test)
            language = self.language(test)
            kind = LONG_RANGE[regime][0](language)
            if not any(N.available_kinds(language, L, kind) for L in range(lo + lo % 2, hi + 1, 2)):
                # the search is bounded: each length is a probe, and a depth bound can leave
                # none at any length (Dyck-(2, 3): none to 534 at least)
                shortest = next((L for L in range(2, _SHORTEST_SEARCHED + 1, 2)
                                 if N.available_kinds(language, L, kind)), None)
                where = "test_sets" if test else "train_negatives"
                found = (f"the shortest length that has them is {shortest}" if shortest else
                         f"none has them up to length {_SHORTEST_SEARCHED} either")
                raise ValueError(f"DataConfig.{where} asks for {regime} negatives ({kind}), but "
                                 f"{language.name} has none at lengths {lo}..{hi}; {found}")
        if self.window < 2:
            raise ValueError(f"DataConfig.window must be >= 2, got {self.window}")
        if not (0.0 < self.positive_fraction < 1.0):
            raise ValueError(f"DataConfig.positive_fraction must be in (0, 1), "
                             f"got {self.positive_fraction!r}")
        if not (0.0 < self.held_out < 1.0):
            raise ValueError(f"DataConfig.held_out must be in (0, 1), got {self.held_out!r}")
        if self.thesis_split == "80/20" and self.lengths(test=True) == self.lengths():
            raise ValueError("DataConfig.thesis_split '80/20' leaves no test split: it needs test "
                             "lengths of their own (the thesis' experiment 6)")

    def lengths(self, test: bool = False) -> tuple[int, int]:
        """``(shortest, longest)`` of the training or the test strings."""
        if not test:
            return self.min_length, self.max_length
        lo = self.min_length if self.test_min_length is None else self.test_min_length
        hi = self.max_length if self.test_max_length is None else self.test_max_length
        return lo, hi

    def language(self, test: bool = False) -> Dyck:
        """The training language, or the test language (``test_max_depth`` if set)."""
        depth = self.max_depth
        if test and self.test_max_depth is not None:
            depth = self.test_max_depth
        pairs = THESIS_PAIRS[: self.k] if self.source == "thesis" else None
        return Dyck(self.k, max_depth=depth, pairs=pairs)


@dataclass
class Splits:
    """The datasets of one run.

    Attributes:
        train: the training set (duplicates allowed: members are drawn with replacement).
        val: the validation set (deduplicated, balanced per length, hard negatives).
        tests: ``{name: dataset}``: one deduplicated, per-length balanced set per regime of
            ``DataConfig.test_sets``, plus ``"thesis"`` (the thesis' own test split) when the
            source is the thesis.
        deep_depth: D of the ``deep`` test set (its members have depth >= D, one more than
            the deepest training member), or None without one.
    """

    train: Dataset
    val: Dataset
    tests: dict[str, Dataset]
    deep_depth: int | None = None

    def summary(self) -> dict[str, dict[str, Any]]:
        """Realised size, members, distinct strings, lengths and kinds of every set."""
        sets = {"train": self.train, "val": self.val, **self.tests}
        return {name: ds.summary() for name, ds in sets.items()}


def make_splits(config: DataConfig, seed: int,
                permutation: np.ndarray | None = None) -> Splits:
    """Generate the training, validation and test sets of one seed.

    Args:
        config: the data protocol.
        seed: seeds every draw and the assignment of strings to pools.
        permutation: source "thesis" only: the order that splits the thesis' dataset
            (``dyckbook.nn.thesis_model.thesis_permutation``: ``torch.randperm`` seeded with 42,
            the thesis' ``random_split``); it is computed with torch, which this floor avoids.

    Returns:
        The :class:`Splits`.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    streams = np.random.SeedSequence([seed, 0x5EED]).spawn(8)
    rngs = [np.random.default_rng(s) for s in streams]
    if config.source == "thesis":
        return _thesis_splits(config, seed, permutation, rngs)
    language = config.language()
    salt = int(streams[7].generate_state(1)[0])
    in_pool = _pool_test(salt, config.held_out)
    share = config.held_out / 2
    train = _training_set(config, language, rngs[0], lambda h: in_pool(h, _TRAIN))
    lo, hi = config.lengths()
    regimes = _val_regimes(config)
    val = _balanced_sets(language, regimes, lo, hi, config.n_val // len(regimes), config.window,
                         rngs[1], lambda h: in_pool(h, _VAL), share)
    others = tuple(r for r in config.test_sets if r != "deep")
    open_above = hi if config.test_pool == "beyond" else None
    tests = _balanced_sets(config.language(test=True), others,
                           *config.lengths(test=True), config.n_test, config.window, rngs[2],
                           lambda h: in_pool(h, _TEST), share, open_above)
    tests, depth = _with_deep(config, train, tests, rngs[2], lambda h: in_pool(h, _TEST), share,
                              open_above)
    return Splits(train, Dataset.concat(list(val.values())), tests, depth)


def _with_deep(config: DataConfig, train: Dataset, tests: dict[str, Dataset],
               rng: np.random.Generator, accept: Callable[[np.ndarray], np.ndarray],
               share: float, open_above: int | None = None
               ) -> tuple[dict[str, Dataset], int | None]:
    """``tests`` with the ``deep`` set, when ``config.test_sets`` asks for it, in the order of
    ``test_sets``, and its D (None without one). Drawn after every other set from their
    stream, so that none of their draws changes.

    The set is :func:`_balanced_sets`'s hard set of ``DeepDyck(k, D)`` at the test lengths
    >= 2D, D one more than the depth of the deepest training member, relabelled as the plain
    test language's (a member of depth >= D is a member; every negative is a verified
    non-member of Dyck-k).
    """
    if "deep" not in config.test_sets:
        return tests, None
    language = config.language(test=True)
    members = np.flatnonzero(train.labels == 1)
    depth = 1 + int(language.max_depths(train.codes[members], train.lengths[members]).max(
        initial=0))
    deep = DeepDyck(language.k, depth, pairs=language.pairs)
    lo, hi = config.lengths(test=True)
    lo = max(lo, deep.shortest_word)
    if not any(_has_negatives(deep, int(L), "hard", config.window) for L in _even_lengths(lo, hi)):
        what = (f"no length >= {deep.shortest_word} (2D)" if hi < lo else
                f"no hard negative made from such a word (lengths {lo}..{hi})")
        raise ValueError(f"DataConfig.test_sets asks for a deep set, of depth >= {depth} (one "
                         f"more than the deepest training member), but the test lengths "
                         f"{config.lengths(test=True)[0]}..{hi} hold {what}: raise "
                         f"test_max_length")
    made = _balanced_sets(deep, ("hard",), lo, hi, config.n_test, config.window, rng, accept,
                          share, open_above)["hard"]
    tests = {**tests, "deep": Dataset(language, made.codes, made.lengths, made.labels,
                                      made.kinds)}
    return {name: tests[name] for name in config.test_sets}, depth


def _pool_test(salt: int, held_out: float) -> Callable[[np.ndarray, int], np.ndarray]:
    """``accept(hashes, pool)``: which strings belong to the pool (train 0, val 1, test 2)."""

    def accept(hashes: np.ndarray, pool: int) -> np.ndarray:
        mixed = string_hash(hashes.view(np.uint8).reshape(-1, 8), np.full(hashes.size, 8), salt)
        u = (mixed >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        which = np.where(u < held_out / 2, _TEST, np.where(u < held_out, _VAL, _TRAIN))
        return which == pool

    return accept


def _val_regimes(config: DataConfig) -> tuple[str, ...]:
    """Hard negatives for validation (local where the training lengths admit none), and, with
    ``val_negatives`` "auto", stack negatives where they admit those."""
    language = config.language()
    lo, hi = config.lengths()
    even = range(lo + lo % 2, hi + 1, 2)
    first = "hard" if any(_has_negatives(language, L, "hard", config.window) for L in even) \
        else "local"
    if config.val_negatives == "hard":
        return (first,)
    stack = any(_has_negatives(language, L, "stack", config.window) for L in even)
    return (first, "stack") if stack else (first,)


def _regime_args(regime: str, window: int, language: Dyck) -> tuple[str, int | None]:
    """``(kinds, window)`` of :func:`negatives.sample_negatives` for a regime."""
    if regime == "deep":  # the hard kinds of a DeepDyck, whose D make_splits finds
        if not isinstance(language, DeepDyck):
            raise ValueError(f"regime 'deep' has the hard negatives of a DeepDyck (its depth D: "
                             f"one more than the deepest training member, as make_splits "
                             f"finds it), got {language.name}; pass DeepDyck(k, D)")
        return "hard", window
    if regime in LONG_RANGE:
        return LONG_RANGE[regime][0](language), None
    if regime == "random":
        return "random", None
    return "hard", window if regime == "hard" else None


def _has_negatives(language: Dyck, length: int, regime: str, window: int) -> bool:
    kinds, w = _regime_args(regime, window, language)
    return length > 0 and bool(N.available_kinds(language, length, kinds, w))


def _sample(language: Dyck, regime: str, lengths: np.ndarray, window: int,
            rng: np.random.Generator) -> Dataset:
    """Members (``regime`` "member"; ``MATCHED``: a stack set's matched members) or negatives
    of a regime at the given lengths."""
    matched = {member: kind for kind, member in LONG_RANGE.values()}
    if regime == MEMBER or regime in matched:
        if regime == MEMBER:
            codes, lengths = language.sample_codes(rng, lengths)
        else:
            codes, lengths = N.sample_matched_members(language, rng, lengths,
                                                      matched[regime](language))
        kinds = np.full(lengths.size, MEMBER, dtype=object)
        return Dataset(language, codes, lengths, np.ones(lengths.size, np.int8), kinds)
    kinds, w = _regime_args(regime, window, language)
    codes, lengths, names = N.sample_negatives(language, rng, lengths, kinds, w)
    return Dataset(language, codes, lengths, np.zeros(lengths.size, np.int8),
                   np.asarray(names, dtype=object))


def regime_lengths(language: Dyck, regime: str, lo: int, hi: int,
                   window: int = N.DEFAULT_WINDOW) -> list[int]:
    """The even lengths in ``[lo, hi]`` at which ``regime`` has negatives for ``language``
    (``deep``: the hard negatives of a :class:`~dyckbook.data.languages.DeepDyck`, from 2D on;
    any other language is refused, D being the training set's)."""
    if regime not in TEST_REGIMES:
        raise ValueError(f"regime must be one of {TEST_REGIMES}, got {regime!r}")
    _regime_args(regime, window, language)  # refuses what it cannot answer for
    return [int(L) for L in _even_lengths(lo, hi) if _has_negatives(language, int(L), regime,
                                                                    window)]


def balanced_sample(language: Dyck, regime: str, lengths: np.ndarray, window: int,
                    rng: np.random.Generator) -> Dataset:
    """A member and a ``regime`` negative at each of ``lengths`` (a ``stack`` set's members
    are its matched members), members first."""
    member = LONG_RANGE[regime][1] if regime in LONG_RANGE else MEMBER
    return Dataset.concat([_sample(language, member, lengths, window, rng),
                           _sample(language, regime, lengths, window, rng)])


def _even_lengths(lo: int, hi: int) -> np.ndarray:
    return np.arange(lo + lo % 2, hi + 1, 2, dtype=np.int64)


def _training_set(config: DataConfig, language: Dyck, rng: np.random.Generator,
                  accept: Callable[[np.ndarray], np.ndarray]) -> Dataset:
    """``n_train`` strings from the training pool: negatives from the configured mixture (a
    regime that has no negative at a length falls back to local, then to random); members
    uniform for a length drawn uniformly over the even training lengths, but for one matched
    member (``negatives.sample_matched_members``) at the length of each stack negative."""
    lo, hi = config.lengths()
    n_pos = round(config.n_train * config.positive_fraction)
    member_lengths = _even_lengths(lo, hi)
    neg_lengths = member_lengths[member_lengths > 0]
    mix = REGIMES if config.train_negatives == "mix" else (config.train_negatives,)
    lengths = rng.choice(neg_lengths, config.n_train - n_pos)
    regime = np.empty(lengths.size, dtype=object)
    for L in np.unique(lengths):
        rows = np.flatnonzero(lengths == L)
        here = [g for g in mix if g != "stack" or len(mix) == 1
                or _has_negatives(language, int(L), g, config.window)]
        wanted = np.asarray(here, dtype=object)[rng.integers(0, len(here), rows.size)]
        for want in here:
            usable = [g for g in (want, "local", "random")
                      if _has_negatives(language, int(L), g, config.window)]
            regime[rows[wanted == want]] = usable[0]
    # every stack negative comes with a matched member of its length (in place of a uniform
    # member), as in the stack test sets: no shortcut between the two kinds of member
    matched = lengths[regime == "stack"][:n_pos]
    parts = [_draw(language, MEMBER, rng.choice(member_lengths, n_pos - matched.size),
                   config.window, rng, accept)]
    if matched.size:
        parts.append(_draw(language, MATCHED, matched, config.window, rng, accept))
    parts += [_draw(language, g, lengths[regime == g], config.window, rng, accept)
              for g in REGIMES if (regime == g).any()]
    train = Dataset.concat(parts)
    return train.subset(rng.permutation(len(train)))


def _first_per_length(lengths: np.ndarray, rows: np.ndarray, need: dict[int, int]) -> np.ndarray:
    """The first ``need[L]`` of ``rows`` (positions into ``lengths``) of every length ``L``."""
    rows = rows[np.argsort(lengths[rows], kind="stable")]
    rows_len = lengths[rows]
    starts = np.searchsorted(rows_len, rows_len, side="left")
    rank = np.arange(rows.size) - starts
    quota = np.array([need.get(int(L), 0) for L in rows_len], dtype=np.int64)
    return np.sort(rows[rank < quota])


def _draw(language: Dyck, regime: str, lengths: np.ndarray, window: int,
          rng: np.random.Generator, accept: Callable[[np.ndarray], np.ndarray]) -> Dataset:
    """``lengths.size`` strings of a regime, one per requested length, each from the accepted
    pool. A length whose strings all lie outside the pool (a short length with a handful of
    words, say) cannot be served: its share goes to the other requested lengths at random."""
    got: list[Dataset] = [Dataset.empty(language)]
    values, counts = np.unique(lengths, return_counts=True)
    need = dict(zip(values.tolist(), counts.tolist()))
    misses = dict.fromkeys(need, 0)
    served = set(need)  # the lengths whose pool has strings (as far as we know)
    for _ in range(64):
        if not need:
            return Dataset.concat(got)
        want = np.repeat(np.asarray(list(need), np.int64), [2 * c + 2 for c in need.values()])
        batch = _sample(language, regime, want, window, rng)
        rows = _first_per_length(batch.lengths, np.flatnonzero(accept(batch.hashes())), need)
        got.append(batch.subset(rows))
        found = np.bincount(batch.lengths[rows], minlength=max(need) + 1)
        for L in list(need):
            misses[L] = 0 if found[L] else misses.get(L, 0) + 1
            need[L] -= int(found[L])
            if need[L] and misses[L] >= 4 and len(served) > 1:  # nothing of length L in the pool
                served.discard(L)
                for M in rng.choice(sorted(served), need[L]):
                    need[int(M)] = need.get(int(M), 0) + 1
                need[L] = 0
        need = {L: c for L, c in need.items() if c > 0}
    raise RuntimeError(f"could not draw {sum(need.values())} {regime} strings of lengths "
                       f"{sorted(need)[:5]} from their pool for {language.name}")


def _balanced_sets(language: Dyck, regimes: Sequence[str], lo: int, hi: int, n: int,
                   window: int, rng: np.random.Generator,
                   accept: Callable[[np.ndarray], np.ndarray], share: float,
                   open_above: int | None = None) -> dict[str, Dataset]:
    """One set per regime: up to ``n`` distinct strings, as many members as ``regime``
    negatives at every length (the members are shared by the sets).

    Lengths where either class has no string are left out; at a length where the pool holds
    fewer distinct strings than its share of ``n``, all that sampling finds are used (so the
    realised size can fall short of ``n``; records report it).
    """
    usable = {r: [int(L) for L in _even_lengths(lo, hi) if L > 0 and n > 0
                  and _has_negatives(language, int(L), r, window)] for r in regimes}
    per = {r: math.ceil(n / (2 * len(usable[r]))) if usable[r] else 0 for r in regimes}
    need: dict[int, int] = {}
    for r in regimes:
        for L in usable[r]:
            if r not in LONG_RANGE:  # a long-range set has matched members of its own
                need[L] = max(need.get(L, 0), per[r])
    shared = _distinct(language, MEMBER, need, window, rng, accept, share, open_above)
    out = {}
    for r in regimes:
        own = {L: per[r] for L in usable[r]}
        members = _distinct(language, LONG_RANGE[r][1], own, window, rng, accept, share,
                            open_above) \
            if r in LONG_RANGE else shared
        others = _distinct(language, r, own, window, rng, accept, share, open_above)
        rows_m, rows_o = [], []
        for L in usable[r]:
            m = np.flatnonzero(members.lengths == L)
            o = np.flatnonzero(others.lengths == L)
            take = min(m.size, o.size, per[r])
            rows_m.append(m[:take])
            rows_o.append(o[:take])
        both = Dataset.concat([members.subset(np.concatenate(rows_m or [np.zeros(0, int)])),
                               others.subset(np.concatenate(rows_o or [np.zeros(0, int)]))])
        out[r] = both.subset(rng.permutation(len(both)))
    return out


def _distinct(language: Dyck, regime: str, need: dict[int, int], window: int,
              rng: np.random.Generator, accept: Callable[[np.ndarray], np.ndarray],
              share: float, open_above: int | None = None) -> Dataset:
    """Up to ``need[L]`` distinct accepted strings of every length ``L`` (fewer where the pool
    runs out: a round that finds nothing new at a length retires it). ``share`` is the expected
    accepted fraction, which sizes the draws; a string longer than ``open_above`` (the longest
    training string, ``DataConfig.test_pool`` "beyond") is accepted whatever its pool."""
    need = {L: c for L, c in need.items() if c > 0}
    seen = np.zeros(0, np.uint64)
    got: list[Dataset] = [Dataset.empty(language)]
    for _ in range(_MAX_ROUNDS):
        if not need:
            break
        counts = [math.ceil(1.5 * c / (1.0 if open_above is not None and L > open_above
                                       else share)) + 8 for L, c in need.items()]
        batch = _sample(language, regime, np.repeat(np.asarray(list(need), np.int64), counts),
                        window, rng)
        hashes = batch.hashes()
        first = np.zeros(len(batch), bool)
        first[batch.first_copies()] = True
        ok = first & accept(hashes) & ~np.isin(hashes, seen)
        if open_above is not None:
            ok |= first & (batch.lengths > open_above) & ~np.isin(hashes, seen)
        rows = _first_per_length(batch.lengths, np.flatnonzero(ok), need)
        got.append(batch.subset(rows))
        seen = np.concatenate([seen, hashes[rows]])
        found = np.bincount(batch.lengths[rows], minlength=max(need) + 1)
        need = {L: c - int(found[L]) for L, c in need.items() if 0 < found[L] < c}
    return Dataset.concat(got)


def _thesis_splits(config: DataConfig, seed: int, permutation: np.ndarray | None,
                   rngs: list[np.random.Generator]) -> Splits:
    """The thesis' dataset and split, plus sound test sets of strings it never trained on.

    The thesis' generator (``dyckbook.data.thesis.thesis_samples``, seeded with 42 as the library
    is) makes ``n_train`` strings over the training lengths. ``thesis_split`` "thesis" splits
    them by ``permutation`` into ``int(0.8 n)`` training, ``int(0.15 int(0.8 n))`` validation
    and the rest as the ``"thesis"`` test set; "80/20" (experiment 6) into 80% training and 20%
    validation. When the test lengths differ, the thesis test set is a second call of the
    generator over the test lengths with ``n_test`` strings. The sound test sets exclude every
    string of the thesis' training split.
    """
    language = config.language()
    n = config.n_train
    if permutation is None or sorted(np.asarray(permutation).tolist()) != list(range(n)):
        raise ValueError(f"source 'thesis' needs permutation= a permutation of range({n})")
    permutation = np.asarray(permutation)
    lo, hi = config.lengths()
    full = _thesis_dataset(language, thesis_samples(n, config.k, lo, hi, config.positive_fraction,
                                                    generator=config.thesis_generator))
    if config.thesis_split == "thesis":
        n_tr, n_va, _ = thesis_split_sizes(n)
    else:  # torch's random_split(data, [0.8, 0.2]): floor(0.8 n), then the remainder
        n_tr, n_va = int(0.8 * n), n - int(0.8 * n)
    train = full.subset(permutation[:n_tr])
    val = full.subset(permutation[n_tr:n_tr + n_va])
    test = full.subset(permutation[n_tr + n_va:])
    tlo, thi = config.lengths(test=True)
    if (tlo, thi) != (lo, hi):
        test = _thesis_dataset(language, thesis_samples(config.n_test, config.k, tlo, thi, 0.5,
                                                        generator=config.thesis_generator))
    seen = train.hashes()
    others = tuple(r for r in config.test_sets if r != "deep")
    tests = _balanced_sets(config.language(test=True), others, tlo, thi, config.n_test,
                           config.window, rngs[2], lambda h: ~np.isin(h, seen), 1.0)
    tests, depth = _with_deep(config, train, tests, rngs[2], lambda h: ~np.isin(h, seen), 1.0)
    return Splits(train, val, {"thesis": test, **tests}, depth)


def _thesis_dataset(language: Dyck, strings: list[str]) -> Dataset:
    """The thesis' strings, labelled by its own checker (odd lengths included)."""
    kinds = ["member" if thesis_is_dyck_word(s, language.k) else "thesis" for s in strings]
    return Dataset.from_strings(language, strings, kinds)
