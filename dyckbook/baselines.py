"""Shortcut classifiers (numpy only) scored beside every model: what cheap rules already achieve.

- ``first_symbol``: "a member unless the first symbol is a closer", the shortcut that solves the
  thesis' data; every hard negative starts with an opener, so it says "member" to all of them.
- ``counts``: logistic regression on count features (per type the opener-minus-closer count and
  its absolute value, the total imbalance, the length): the best a counting rule can do, e.g.
  "every count is zero"; hard negatives have a member's counts.
- ``bigrams``: logistic regression on bigram frequencies and the first and last symbols.
- ``local``: the strictly w-local recogniser; it accepts a string iff every window of width <= w
  of ``⋊ s ⋉`` (with boundary markers) occurred in a member of its training set. Non-local hard
  negatives (``window=w``) are built to pass it.
- ``stack``: the exact stack automaton (the language's own membership test), 1.0 by construction.
"""

from __future__ import annotations

import numpy as np

from dyckbook.languages import Dyck, check_int, window_index
from dyckbook.vocab import check_codes

__all__ = ["BASELINES", "Baseline", "Bigrams", "Counts", "FirstSymbol", "LocalRecogniser", "Stack",
           "fit_baselines", "make_baseline"]

BASELINES: tuple[str, ...] = ("first_symbol", "counts", "bigrams", "local", "stack")
_NEWTON_STEPS = 50  # Newton steps at most; the fit stops earlier once a step is below _TOLERANCE
_TOLERANCE = 1e-8
_L2 = 1.0  # ridge penalty on the (standardised) weights, not on the bias


class Baseline:
    """A classifier of strings given as ``(codes, lengths)``; subclasses define the rule.

    Attributes:
        name: The baseline's name in :data:`BASELINES`.
        language: The :class:`~dyckbook.languages.Dyck` whose strings it reads.
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
        x = self._features(codes, lengths)  # (batch, features)
        self._mean, self._scale = x.mean(axis=0), x.std(axis=0)
        self._scale[self._scale == 0] = 1.0
        z = self._design(x)
        penalty = np.full(z.shape[1], _L2)
        penalty[0] = 1e-6  # the bias is all but free
        self._w = np.zeros(z.shape[1])
        for _ in range(_NEWTON_STEPS):
            p = 0.5 * (1.0 + np.tanh(0.5 * (z @ self._w)))  # the logistic, without overflow
            grad = z.T @ (p - labels) + penalty * self._w
            hess = (z.T * (p * (1.0 - p))) @ z + np.diag(penalty)
            step = np.linalg.solve(hess, grad)
            self._w -= step
            if np.abs(step).max() < _TOLERANCE:
                break

    def _design(self, x: np.ndarray) -> np.ndarray:
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


def make_baseline(name: str, language: Dyck, window: int = 4) -> Baseline:
    """A fresh baseline by name (one of :data:`BASELINES`); ``window`` is the local one's w."""
    if name == "local":
        return LocalRecogniser(language, window)
    classes = {cls.name: cls for cls in (FirstSymbol, Counts, Bigrams, Stack)}
    if name not in classes:
        raise ValueError(f"name must be one of {BASELINES}, got {name!r}")
    return classes[name](language)


def fit_baselines(language: Dyck, codes: np.ndarray, lengths: np.ndarray, labels: np.ndarray,
                  window: int = 4) -> dict[str, Baseline]:
    """Every baseline of :data:`BASELINES`, fitted on the same labelled strings."""
    return {
        name: make_baseline(name, language, window).fit(codes, lengths, labels)
        for name in BASELINES
    }
