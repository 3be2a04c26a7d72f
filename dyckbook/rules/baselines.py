"""Shortcut classifiers (numpy only) scored beside every model: what cheap rules already achieve.

- ``first_symbol``: "a member unless the first symbol is a closer", the shortcut that solves the
  thesis' data; every hard negative starts with an opener, so it says "member" to all of them.
- ``counts``: logistic regression on count features (per type the opener-minus-closer count and
  its absolute value, the total imbalance, the length): the best a counting rule can do, e.g.
  "every count is zero"; hard negatives have a member's counts.
- ``bigrams``: logistic regression on bigram frequencies and the first and last symbols.
- ``local`` (w from the data config), ``local6``, ``local8``: the strictly w-local recogniser;
  it accepts a string iff every window of width <= w of ``⋊ s ⋉`` (with boundary markers)
  occurred in a member of its training set. Non-local hard negatives (``window=w``) pass it.
- ``ngrams``: logistic regression on the frequencies of every 1- to 4-gram.
- ``ends``: a lookup on the first three and the last three symbols (the likelier class of that
  key in training; member when unseen).
- ``depth``: logistic regression on the height profile (heights at 16 relative positions, their
  histogram, maximum, minimum, mean, final height, returns to 0, length). Under k = 1 the
  minimum height is the running count: this rule is then a recogniser, not a shortcut.
- ``counter``: rejects iff counters without a stack do: the type-blind skeleton or some type's
  projection is not a Dyck-1 word (``hardness``). Exact, not fitted; under k = 1 it is the
  language itself.
- ``skeleton``: the type-blind skeleton check alone (one counter).
- ``window4``, ``window6``, ``window8``: the exact w-window check (``hardness.window_rejects``),
  the best any strictly w-local rule can do.
- ``stack``: the exact stack automaton (the language's own membership test), 1.0 by construction.

Rules that learn are fitted on the training strings the run trains on: the members and the
negatives of the kinds of the test set they are scored on (``fit_negatives``).
:func:`attack` fits every rule on one sample and scores it, per length bin, on a fresh one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dyckbook.data.hardness import profile, window_rejects
from dyckbook.data.languages import Dyck, check_int, window_index
from dyckbook.data.protocol import balanced_sample
from dyckbook.data.vocab import check_codes

__all__ = [
    "BASELINES",
    "ORACLE_BAR",
    "ORACLE_NGRAM_BAR",
    "STACK_FREE",
    "Baseline",
    "Bigrams",
    "Counter",
    "Counts",
    "Depth",
    "Ends",
    "FirstSymbol",
    "LocalRecogniser",
    "NGrams",
    "Stack",
    "WindowCheck",
    "attack",
    "attack_regime",
    "balanced_accuracy",
    "fit_baselines",
    "fit_negatives",
    "make_baseline",
    "order_blind_ceiling",
    "recognisers",
    "regime_samples",
]

BASELINES: tuple[str, ...] = ("first_symbol", "counts", "bigrams", "local", "local6", "local8",
                              "ngrams", "ends", "depth", "counter", "skeleton", "window4",
                              "window6", "window8", "stack")
# every rule that needs no stack; under k = 1 "counter", "skeleton" and "depth" read the running
# count, which is the stack there (``recognisers``)
STACK_FREE: tuple[str, ...] = BASELINES[:-1]
# the bars of the long-range (stack) sets: no stack-free rule above ORACLE_BAR balanced accuracy
# at any length bin, n-grams above ORACLE_NGRAM_BAR (tests/test_baselines.py, the Dyck chapter)
ORACLE_BAR, ORACLE_NGRAM_BAR = 0.55, 0.58
_NEWTON_STEPS = 30  # Newton steps at most; the fit stops earlier once a step is below _TOLERANCE
_TOLERANCE = 1e-6
_L2 = 1.0  # ridge penalty on the (standardised) weights, not on the bias
_HESSIAN_DTYPE = np.float32  # Newton's Hessian products: half the time of float64, same fits
#                              (benchmarks/bench_hardness.py measures both)


class Baseline:
    """A classifier of strings given as ``(codes, lengths)``; subclasses define the rule.

    Attributes:
        name: The baseline's name in :data:`BASELINES`.
        language: The :class:`~dyckbook.data.languages.Dyck` whose strings it reads.
    """

    name = "baseline"

    def __init__(self, language: Dyck) -> None:
        if not isinstance(language, Dyck):
            raise ValueError(f"language must be a Dyck, got {type(language).__name__}")
        self.language = language

    def fit(self, codes: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> Baseline:
        """Fit on labelled strings.

        Args:
            codes: uint8 ``(batch, pos)``.
            lengths: ints ``(batch,)``.
            labels: ``(batch,)`` 1 for a member, 0 for a non-member.

        Returns:
            ``self``.
        """
        codes, lengths = check_codes(codes, lengths, 2 * self.language.k)
        labels = np.asarray(labels)
        if labels.shape != lengths.shape or not np.isin(labels, (0, 1)).all():
            raise ValueError(f"labels must be 0/1 of shape {lengths.shape}, got {labels!r:.80}")
        self._fit(codes, lengths, labels.astype(np.int64))
        return self

    def predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """int8 ``(batch,)``: 1 where the rule says member."""
        codes, lengths = check_codes(codes, lengths, 2 * self.language.k)
        return self._predict(codes, lengths).astype(np.int8)

    def _fit(self, codes: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> None:
        """Nothing to learn unless a subclass says otherwise."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.language.name})"


class FirstSymbol(Baseline):
    """Member unless the first symbol is a closer (the empty string is a member)."""

    name = "first_symbol"

    def _predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        if codes.shape[1] == 0:
            return np.ones(lengths.size, dtype=bool)
        return (lengths == 0) | (codes[:, 0] % 2 == 0)


class Stack(Baseline):
    """The exact stack automaton."""

    name = "stack"

    def _predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        return self.language.is_member((codes, lengths))


def _counts(symbols: np.ndarray, valid: np.ndarray, n_symbols: int) -> np.ndarray:
    """float64 ``(batch, n_symbols)``: how often each symbol occurs where ``valid``."""
    rows = np.broadcast_to(np.arange(symbols.shape[0])[:, None], symbols.shape)[valid]
    flat = np.bincount(rows * n_symbols + symbols[valid], minlength=symbols.shape[0] * n_symbols)
    return flat.reshape(symbols.shape[0], n_symbols).astype(np.float64)


class _Logistic(Baseline):
    """L2-regularised logistic regression on standardised features, fitted by Newton's method."""

    _w: np.ndarray | None = None  # bias, then one weight per standardised feature

    def _fit(self, codes: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> None:
        if np.unique(labels).size < 2:
            raise ValueError(f"{self!r} needs members and non-members to fit, got labels "
                             f"{np.unique(labels).tolist()} only")
        x = self._features(codes, lengths)  # (batch, features)
        self._used = np.flatnonzero(x.std(axis=0) > 0)  # a constant feature carries nothing
        x = x[:, self._used]
        self._mean, self._scale = x.mean(axis=0), x.std(axis=0)
        z = np.hstack([np.ones((x.shape[0], 1)), (x - self._mean) / self._scale])
        penalty = np.full(z.shape[1], _L2)
        penalty[0] = 1e-6  # the bias is all but free
        self._w = np.zeros(z.shape[1])
        z32 = z.astype(_HESSIAN_DTYPE)
        for _ in range(_NEWTON_STEPS):
            p = 0.5 * (1.0 + np.tanh(0.5 * (z @ self._w)))  # the logistic, without overflow
            grad = z.T @ (p - labels) + penalty * self._w
            curvature = (p * (1.0 - p)).astype(_HESSIAN_DTYPE)
            hess = ((z32.T * curvature) @ z32).astype(np.float64) + np.diag(penalty)
            step = np.linalg.solve(hess, grad)
            self._w -= step
            if np.abs(step).max() < _TOLERANCE:
                break

    def _design(self, x: np.ndarray) -> np.ndarray:
        x = x[:, self._used]
        return np.hstack([np.ones((x.shape[0], 1)), (x - self._mean) / self._scale])

    def _predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        if self._w is None:
            raise ValueError(f"{self!r} is not fitted; call fit first")
        return self._design(self._features(codes, lengths)) @ self._w > 0


class Counts(_Logistic):
    """Logistic regression on count features.

    Per type the opener-minus-closer count and its absolute value, the absolute total
    imbalance, and length / 100: enough to learn "every count is zero".
    """

    name = "counts"

    def _features(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        valid = np.arange(codes.shape[1]) < lengths[:, None]
        n = _counts(codes.astype(np.int64), valid, 2 * self.language.k)
        diff = n[:, 0::2] - n[:, 1::2]  # (batch, k)
        total = np.abs(diff.sum(axis=1, keepdims=True))
        return np.hstack([diff, np.abs(diff), total, lengths[:, None] / 100.0])


class Bigrams(_Logistic):
    """Logistic regression on bigram counts / length and the one-hot first and last symbols."""

    name = "bigrams"

    def _features(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        m, n = 2 * self.language.k, lengths.size
        c = codes.astype(np.int64)
        pairs = c[:, :-1] * m + c[:, 1:]  # (batch, pos - 1)
        inside = np.arange(pairs.shape[1]) < lengths[:, None] - 1
        bigrams = _counts(pairs, inside, m * m) / np.maximum(lengths, 1)[:, None]
        ends = np.zeros((n, 2 * m))
        rows = np.flatnonzero(lengths > 0)
        ends[rows, c[rows, 0]] = 1.0
        ends[rows, m + c[rows, lengths[rows] - 1]] = 1.0
        return np.hstack([bigrams, ends])


class LocalRecogniser(Baseline):
    """Strictly w-local: accepts iff every window of width <= w of ``⋊ s ⋉`` occurred in a member.

    Fitted on the members of the training set only. Rows are bordered, then filled with ``⋉`` up
    to width w, so every string has a window of width w; the sub-windows of a window occurred
    whenever it did, so "every window of width w occurred" is the same test as "every window of
    width <= w occurred".
    """

    name = "local"
    _seen: np.ndarray | None = None  # sorted keys of the windows seen in training members

    def __init__(self, language: Dyck, window: int = 4) -> None:
        super().__init__(language)
        self.window = check_int("window", window, 2)
        if (2 * language.k + 2) ** self.window > 2**62:
            raise ValueError(f"window={window} is too wide for k={language.k} (keys overflow)")

    def _windows(self, codes: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Window keys ``(batch, n_win)`` of the bordered rows, and which windows are real."""
        w, m = self.window, 2 * self.language.k
        n, pos = codes.shape
        bordered = np.full((n, max(pos + 2, w)), m + 1, dtype=np.int64)  # ⋉ = 2k + 1 from the end
        bordered[:, 0] = m  # ⋊ = 2k
        bordered[:, 1 : pos + 1] = np.where(np.arange(pos) < lengths[:, None], codes, m + 1)
        keys = window_index(bordered, w, m + 2)
        real = np.arange(keys.shape[1]) <= np.maximum(lengths + 2 - w, 0)[:, None]
        return keys, real

    def _fit(self, codes: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> None:
        members = labels == 1
        keys, real = self._windows(codes[members], lengths[members])
        self._seen = np.unique(keys[real])

    def _predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        if self._seen is None:
            raise ValueError(f"{self!r} is not fitted; call fit first")
        keys, real = self._windows(codes, lengths)
        return (np.isin(keys, self._seen) | ~real).all(axis=1)

    def __repr__(self) -> str:
        return f"LocalRecogniser({self.language.name}, window={self.window})"


class NGrams(_Logistic):
    """Logistic regression on the frequency (count / length) of every 1- to 4-gram."""

    name = "ngrams"
    max_n = 4

    def _features(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        m = 2 * self.language.k
        c = np.where(np.arange(codes.shape[1]) < lengths[:, None], codes, 0).astype(np.int64)
        parts = []
        for n in range(1, self.max_n + 1):
            if c.shape[1] < n:
                parts.append(np.zeros((lengths.size, m**n)))
                continue
            grams = window_index(c, n, m)  # (batch, pos - n + 1)
            inside = np.arange(grams.shape[1]) < lengths[:, None] - n + 1
            parts.append(_counts(grams, inside, m**n))
        return np.hstack(parts) / np.maximum(lengths, 1)[:, None]


class Depth(_Logistic):
    """Logistic regression on the height profile: what depth statistics alone can tell."""

    name = "depth"
    points = 16  # relative positions at which the height is read
    histogram = 16  # heights 0..15 (higher ones count as 15; negative as their own feature)

    def _features(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        h = np.hstack([np.zeros((lengths.size, 1), np.int64),  # heights at every time point
                       self.language.heights(codes, lengths).astype(np.int64)])  # (batch, pos + 1)
        rows = np.arange(lengths.size)[:, None]
        at = np.rint(np.linspace(0.0, 1.0, self.points)[None, :] * lengths[:, None]).astype(int)
        live = np.arange(h.shape[1]) <= lengths[:, None]
        scale = np.maximum(lengths, 1)[:, None]
        hist = _counts(np.clip(h, 0, self.histogram - 1), live, self.histogram) / scale
        below = ((h < 0) & live).sum(axis=1, keepdims=True) / scale
        masked = np.where(live, h, 0)
        zero = ((h == 0) & live).sum(axis=1, keepdims=True) / scale
        return np.hstack([h[rows, at], hist, below, zero,
                          np.where(live, h, -10**6).max(axis=1, keepdims=True),
                          np.where(live, h, 10**6).min(axis=1, keepdims=True),
                          masked.sum(axis=1, keepdims=True) / scale,
                          h[rows[:, 0], lengths][:, None], lengths[:, None] / 100.0])


class Ends(Baseline):
    """A lookup on the first three and last three symbols: the class whose training strings
    show that key more often (relative to the class's size); member when the key is unseen."""

    name = "ends"
    span = 3
    _member: dict[bytes, bool] | None = None

    def _keys(self, codes: np.ndarray, lengths: np.ndarray) -> list[bytes]:
        s = self.span
        out = []
        for row, n in zip(codes, lengths.tolist()):
            out.append(bytes(row[: min(s, n)]) + b"|" + bytes(row[max(n - s, 0): n]) + b"#"
                       + str(min(n, 2 * s)).encode())
        return out

    def _fit(self, codes: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> None:
        counts: dict[bytes, list[int]] = {}
        for key, label in zip(self._keys(codes, lengths), labels.tolist()):
            counts.setdefault(key, [0, 0])[label] += 1
        n_neg, n_pos = max(int((labels == 0).sum()), 1), max(int(labels.sum()), 1)
        self._member = {key: pos * n_neg >= neg * n_pos for key, (neg, pos) in counts.items()}

    def _predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        if self._member is None:
            raise ValueError(f"{self!r} is not fitted; call fit first")
        return np.array([self._member.get(key, True) for key in self._keys(codes, lengths)],
                        dtype=bool)


class Counter(Baseline):
    """Rejects iff counters without a stack do (``hardness``): the type-blind skeleton, or with
    ``per_type`` also the projection of some type, is not a Dyck-1 word."""

    def __init__(self, language: Dyck, per_type: bool = True) -> None:
        super().__init__(language)
        self.per_type = per_type
        self.name = "counter" if per_type else "skeleton"

    def _predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        p = profile(self.language, codes, lengths)
        return ~(p.counter if self.per_type else p.skeleton)

    def __repr__(self) -> str:
        return f"Counter({self.language.name}, per_type={self.per_type})"


class WindowCheck(Baseline):
    """The exact w-window check: rejects iff some window of w symbols (or its first or last
    w - 1 symbols) is a piece of no word. Not fitted: the best any strictly w-local rule can do."""

    def __init__(self, language: Dyck, window: int = 4) -> None:
        super().__init__(language)
        self.window = check_int("window", window, 2)
        self.name = f"window{self.window}"

    def _predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        return ~window_rejects(self.language, codes, lengths, self.window)

    def __repr__(self) -> str:
        return f"WindowCheck({self.language.name}, window={self.window})"


def make_baseline(name: str, language: Dyck, window: int = 4) -> Baseline:
    """A fresh baseline by name (one of :data:`BASELINES`); ``window`` is ``local``'s w."""
    if name == "local":
        return LocalRecogniser(language, window)
    if name in ("local6", "local8"):
        rule = LocalRecogniser(language, int(name[-1]))
        rule.name = name  # the same rule at a fixed w, beside ``local`` at the data's w
        return rule
    if name in ("window4", "window6", "window8"):
        return WindowCheck(language, int(name[-1]))
    if name in ("counter", "skeleton"):
        return Counter(language, per_type=name == "counter")
    classes = {cls.name: cls for cls in (FirstSymbol, Counts, Bigrams, NGrams, Ends, Depth, Stack)}
    if name not in classes:
        raise ValueError(f"name must be one of {BASELINES}, got {name!r}")
    return classes[name](language)


def recognisers(language: Dyck) -> tuple[str, ...]:
    """The baselines that recognise ``language`` outright: ``stack``, and under k = 1 (where the
    running count is the stack) also ``counter``, ``skeleton`` and ``depth``."""
    return ("counter", "skeleton", "depth", "stack") if language.k == 1 else ("stack",)


def fit_negatives(train_kinds: np.ndarray, test_kinds: Sequence[str]) -> np.ndarray:
    """bool ``(batch,)``: the training negatives a rule scored on a test set is fitted on, those
    of the test set's kinds (all training negatives if the training set has none of them)."""
    kinds = np.asarray(train_kinds).astype(str)
    wanted = np.isin(kinds, [k for k in test_kinds if k != "member"])
    return wanted if wanted.any() else kinds != "member"


def fit_baselines(language: Dyck, codes: np.ndarray, lengths: np.ndarray, labels: np.ndarray,
                  window: int = 4, names: Sequence[str] = BASELINES) -> dict[str, Baseline]:
    """The baselines ``names`` (default: every one), fitted on the same labelled strings."""
    return {name: make_baseline(name, language, window).fit(codes, lengths, labels)
            for name in names}


def order_blind_ceiling(codes: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> float:
    """The best accuracy any order-blind classifier (a function of how often each symbol occurs)
    can reach on these very strings: each bag of symbols answered with its majority label."""
    codes, lengths = np.asarray(codes), np.asarray(lengths)
    labels = np.asarray(labels).astype(bool)
    if labels.size == 0:
        return float("nan")
    n_symbols = int(codes.max()) + 1 if codes.size else 1
    valid = np.arange(codes.shape[1])[None, :] < lengths[:, None]
    counts = np.stack([(np.where(valid, codes, -1) == c).sum(axis=1) for c in range(n_symbols)],
                      axis=1)
    _, bag = np.unique(counts, axis=0, return_inverse=True)
    bag = bag.ravel()
    members = np.bincount(bag, weights=labels.astype(float))
    total = np.bincount(bag)
    return float(np.maximum(members, total - members).sum() / labels.size)


def balanced_accuracy(predicted: np.ndarray, labels: np.ndarray) -> float:
    """Mean of the accuracy on members and on non-members (NaN if a class is absent)."""
    predicted, labels = np.asarray(predicted).astype(bool), np.asarray(labels).astype(bool)
    if labels.all() or not labels.any():
        return float("nan")
    return 0.5 * float(predicted[labels].mean() + (~predicted[~labels]).mean())


def attack(language: Dyck, train: tuple[np.ndarray, np.ndarray, np.ndarray],
           test: tuple[np.ndarray, np.ndarray, np.ndarray], names: Sequence[str] = STACK_FREE,
           bins: Sequence[tuple[int, int]] | None = None,
           window: int = 4) -> dict[str, dict[str, float]]:
    """Every rule fitted on ``train`` and scored on the fresh ``test``, per length bin.

    Args:
        language: The language of both samples.
        train: ``(codes, lengths, labels)`` to fit on.
        test: ``(codes, lengths, labels)`` to score, disjoint from ``train``.
        names: Rules of :data:`BASELINES`.
        bins: Inclusive ``(low, high)`` length bins; default one bin per length of ``test``.
        window: ``local``'s w.

    Returns:
        ``{rule: {"low-high": balanced accuracy}}``, plus ``"all"``: every length pooled.
    """
    codes, lengths, labels = test
    lengths = np.asarray(lengths)
    if bins is None:
        bins = [(int(n), int(n)) for n in np.unique(lengths)]
    fitted = fit_baselines(language, *train, window=window, names=names)
    out: dict[str, dict[str, float]] = {}
    for name, rule in fitted.items():
        predicted = rule.predict(codes, lengths)
        row = {"all": balanced_accuracy(predicted, labels)}
        for lo, hi in bins:
            inside = (lengths >= lo) & (lengths <= hi)
            row[f"{lo}-{hi}"] = balanced_accuracy(predicted[inside], np.asarray(labels)[inside])
        out[name] = row
    return out


def attack_regime(language: Dyck, regime: str, lengths: Sequence[int], n: int, seed: int = 0,
                  bins: Sequence[tuple[int, int]] | None = None, window: int = 4,
                  names: Sequence[str] = STACK_FREE) -> dict[str, dict[str, float]]:
    """:func:`attack` on a test regime of ``dyckbook.data.protocol``: every rule fitted on ``n``
    members and ``n`` negatives of the regime (a member and a negative at each length drawn
    uniformly from ``lengths``), scored on a fresh sample of the same size.

    Rules that recognise the language outright (:func:`recognisers`) are left out.
    """
    fit, test = regime_samples(language, regime, lengths, n, seed, window)
    kept = [name for name in names if name not in recognisers(language)]
    return attack(language, fit, test, kept, bins, window)


Sample = tuple[np.ndarray, np.ndarray, np.ndarray]  # codes, lengths, labels


def regime_samples(language: Dyck, regime: str, lengths: Sequence[int], n: int, seed: int,
                   window: int) -> tuple[Sample, Sample]:
    """Two samples of ``n`` members and ``n`` negatives of a test regime (a member and a
    negative at each length drawn uniformly from ``lengths``), both from ``seed``: the one
    the rules are fitted on, then the one they are scored on."""
    n = check_int("n", n, 1)
    rng = np.random.default_rng(check_int("seed", seed, 0))
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0:
        raise ValueError(f"lengths must hold at least one length with {regime} negatives")
    fit, test = (balanced_sample(language, regime, rng.choice(lengths, n), window, rng)
                 for _ in range(2))
    return (fit.codes, fit.lengths, fit.labels), (test.codes, test.lengths, test.labels)
