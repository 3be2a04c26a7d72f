"""Baseline recognisers: what each data protocol can be solved by, from a shortcut to the exact automaton.

Four reference points for every accuracy the book reports:

* :func:`first_character_rule` / :class:`FirstCharacterRule` -- "member unless the first symbol
  is a closer". It scores 100% on the thesis' data (every thesis negative starts with a closer)
  and exactly the member share on hard negatives (they all start with an opener).
* :class:`CountsClassifier` -- a logistic regression (or small MLP) on the per-type opener and
  closer counts and the length. Hard negatives have the counts of a member of the same length
  by construction, so no counts model can beat the member share on them.
* :class:`BagOfTokensClassifier` -- the same learner on unordered token (or n-gram) counts.
  With ``ngram=1`` it sees exactly what a permutation-invariant model sees (a bidirectional
  encoder without positional encoding reading ``[start]`` or the mean).
* :class:`StackAutomaton` -- the exact recogniser (the language's own membership test): the
  ceiling, 100% by construction.

All expose ``fit(dataset)`` (returns ``self``), ``predict(strings) -> (batch,) int64`` and
``accuracy(dataset)``; :func:`baseline_accuracy` gives overall, per-kind and per-length
accuracy in the format of :func:`dyckbook.evaluate.evaluate`. numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dyckbook.languages import DEFAULT_PAIRS, PAD_CODE, Dyck, ShuffleDyck

__all__ = [
    "BASELINES",
    "BagOfTokensClassifier",
    "CountsClassifier",
    "FirstCharacterRule",
    "StackAutomaton",
    "baseline_accuracy",
    "first_character_rule",
    "make_baseline",
]

Language = Dyck | ShuffleDyck


# ============================================================================================
# inputs
# ============================================================================================


def _is_dataset(obj: Any) -> bool:
    # duck-typed so that this module does not import torch through dyckbook.data
    return hasattr(obj, "codes") and hasattr(obj, "labels") and hasattr(obj, "language")


def _codes_of(strings: Any, language: Language | None) -> tuple[np.ndarray, np.ndarray]:
    """``(codes (batch, pos) uint8, lengths (batch,) int64)`` of a dataset, strings or codes."""
    if _is_dataset(strings):
        n = len(strings)
        if n == 0:
            return np.zeros((0, 0), dtype=np.uint8), np.zeros(0, dtype=np.int64)
        return strings.codes(np.arange(n))
    if isinstance(strings, tuple) and len(strings) == 2 and isinstance(strings[0], np.ndarray):
        return np.asarray(strings[0]), np.asarray(strings[1], dtype=np.int64)
    if isinstance(strings, str) or not isinstance(strings, Sequence):
        raise ValueError(  # noqa: TRY004
            f"strings must be a dataset, a sequence of strings or a (codes, lengths) tuple, "
            f"got {type(strings).__name__}"
        )
    if language is None:
        raise ValueError(
            "language is needed to encode plain strings; fit the baseline first or pass a dataset"
        )
    return language.encode(list(strings))


def _language_of(strings: Any, language: Language | None) -> Language | None:
    return strings.language if _is_dataset(strings) else language


def _check_dataset(dataset: Any, what: str = "dataset") -> None:
    if not _is_dataset(dataset):
        raise ValueError(f"{what} must be a DyckDataset, got {type(dataset).__name__}")
    if len(dataset) == 0:
        raise ValueError(f"{what} must not be empty")


# ============================================================================================
# accuracy
# ============================================================================================


def baseline_accuracy(predictions: np.ndarray, dataset: Any) -> dict[str, Any]:
    """Accuracy of ``predictions`` on ``dataset``, overall, per kind and per length.

    Args:
        predictions: ``(batch,)`` 0/1 predictions, one per string of ``dataset``.
        dataset: a ``DyckDataset`` (labels, lengths and kinds are read from it).

    Returns:
        ``{"n", "accuracy", "per_kind": {kind: {"n", "accuracy"}}, "per_length": {length: {"n",
        "accuracy"}}}`` -- the keys of :func:`dyckbook.evaluate.evaluate` that do not need logits.
    """
    _check_dataset(dataset)
    predictions = np.asarray(predictions)
    labels = np.asarray(dataset.labels, dtype=np.int64)
    if predictions.shape != labels.shape:
        raise ValueError(f"predictions must have shape {labels.shape}, got {predictions.shape}")
    hit = predictions == labels
    kinds = np.asarray(dataset.kinds)
    lengths = np.asarray(dataset.lengths)
    per_kind = {
        str(k): {"n": int((kinds == k).sum()), "accuracy": float(hit[kinds == k].mean())}
        for k in sorted(set(kinds.tolist()))
    }
    per_length = {
        int(L): {"n": int((lengths == L).sum()), "accuracy": float(hit[lengths == L].mean())}
        for L in np.unique(lengths).tolist()
    }
    return {
        "n": len(hit),
        "accuracy": float(hit.mean()),
        "per_kind": per_kind,
        "per_length": per_length,
    }


class _Baseline:
    """Shared ``accuracy`` for every baseline (subclasses define ``fit`` and ``predict``)."""

    name = "baseline"

    def fit(self, dataset: Any) -> _Baseline:  # pragma: no cover - overridden
        raise NotImplementedError

    def predict(self, strings: Any) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def accuracy(self, dataset: Any) -> dict[str, Any]:
        """:func:`baseline_accuracy` of this baseline's predictions on ``dataset``."""
        _check_dataset(dataset)
        return baseline_accuracy(self.predict(dataset), dataset)


# ============================================================================================
# the first-character rule
# ============================================================================================


def first_symbol_codes(dataset: Any, chunk: int = 1024) -> np.ndarray:
    """int64 ``(batch,)``: the code of each string's first symbol, -1 for the empty string.

    Reads a dataset chunk by chunk (only the first column is kept), so it stays cheap for
    datasets of long strings.
    """
    out = np.full(len(dataset), -1, dtype=np.int64)
    for lo in range(0, len(dataset), chunk):
        idx = np.arange(lo, min(lo + chunk, len(dataset)))
        nonempty = idx[dataset.lengths[idx] > 0]
        if len(nonempty):
            out[nonempty] = dataset.codes(nonempty)[0][:, 0]
    return out


def first_character_rule(strings: Any, language: Language | None = None) -> np.ndarray:
    """The thesis' shortcut: predict "member" unless the first symbol is a closer.

    Args:
        strings: a ``DyckDataset``, a sequence of strings, or ``(codes, lengths)``.
        language: for plain strings, whose closers count; None means every closer of
            ``languages.DEFAULT_PAIRS`` (a dataset brings its own language).

    Returns:
        int64 ``(batch,)``: 1 (member) or 0. The empty string is predicted a member.
    """
    if _is_dataset(strings):
        first = first_symbol_codes(strings)
        # closers have odd codes (opener of type t is 2t, its closer 2t + 1)
        return np.where((first >= 0) & (first % 2 == 1), 0, 1).astype(np.int64)
    language = _language_of(strings, language)
    if not isinstance(strings, tuple):
        if isinstance(strings, str) or not isinstance(strings, Sequence):
            raise ValueError(
                f"strings must be a dataset, a sequence of strings or a (codes, lengths) tuple, "
                f"got {type(strings).__name__}"
            )
        closers = set(language.closers) if language is not None else {p[1] for p in DEFAULT_PAIRS}
        return np.array([0 if s and s[0] in closers else 1 for s in strings], dtype=np.int64)
    codes, lengths = _codes_of(strings, language)
    if codes.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    first = codes[:, 0].astype(np.int64) if codes.shape[1] else np.full(len(lengths), PAD_CODE)
    closer = (lengths > 0) & (first != PAD_CODE) & (first % 2 == 1)
    return np.where(closer, 0, 1).astype(np.int64)


class FirstCharacterRule(_Baseline):
    """:func:`first_character_rule` as a baseline object (``fit`` only records the language)."""

    name = "first_character_rule"

    def __init__(self) -> None:
        self.language: Language | None = None

    def fit(self, dataset: Any) -> FirstCharacterRule:
        """Nothing to learn; remembers the dataset's language for plain-string inputs."""
        _check_dataset(dataset)
        self.language = dataset.language
        return self

    def predict(self, strings: Any) -> np.ndarray:
        """``(batch,)`` int64 predictions of the rule."""
        return first_character_rule(strings, self.language)


# ============================================================================================
# the exact automaton
# ============================================================================================


class StackAutomaton(_Baseline):
    """The exact recogniser: a stack of open brackets (the language's own membership test).

    The ceiling of every protocol: 100% by construction on correctly labelled data.
    """

    name = "stack_automaton"

    def __init__(self, language: Language | None = None) -> None:
        self.language = language

    def fit(self, dataset: Any) -> StackAutomaton:
        """Nothing to learn; takes the dataset's language."""
        _check_dataset(dataset)
        self.language = dataset.language
        return self

    def predict(self, strings: Any) -> np.ndarray:
        """``(batch,)`` int64: 1 where the string is in the language."""
        language = _language_of(strings, self.language)
        if language is None:
            raise ValueError("StackAutomaton needs a language: pass one, fit it, or give a dataset")
        codes, lengths = _codes_of(strings, language)
        if codes.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        return language.is_member_batch((codes, lengths)).astype(np.int64)


# ============================================================================================
# learned baselines on order-free features
# ============================================================================================


def _symbol_counts(codes: np.ndarray, lengths: np.ndarray, n_symbols: int) -> np.ndarray:
    """``(batch, n_symbols)`` float64 count of each symbol code (padding ignored)."""
    n = codes.shape[0]
    valid = np.arange(codes.shape[1])[None, :] < lengths[:, None]
    rows = np.broadcast_to(np.arange(n)[:, None], codes.shape)[valid]
    out = np.zeros((n, n_symbols), dtype=np.float64)
    np.add.at(out, (rows, codes[valid].astype(np.int64)), 1.0)
    return out


class _FeatureClassifier(_Baseline):
    """Logistic regression (``hidden=0``) or a one-hidden-layer tanh MLP on fixed features.

    Full-batch Adam on the mean cross-entropy, features standardised on the training set,
    weights initialised from ``numpy.random.default_rng(seed)``: the same data and seed give
    the same model.
    """

    def __init__(
        self, hidden: int = 0, steps: int = 500, lr: float = 0.05, l2: float = 1e-4, seed: int = 0
    ) -> None:
        for name, value, low in (("hidden", hidden, 0), ("steps", steps, 1), ("seed", seed, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if not (isinstance(lr, (int, float)) and lr > 0):
            raise ValueError(f"lr must be > 0, got {lr!r}")
        if not (isinstance(l2, (int, float)) and l2 >= 0):
            raise ValueError(f"l2 must be >= 0, got {l2!r}")
        self.hidden, self.steps, self.lr, self.l2, self.seed = (
            hidden,
            steps,
            float(lr),
            float(l2),
            seed,
        )
        self.language: Language | None = None
        self.params: dict[str, np.ndarray] | None = None
        self._mean: np.ndarray | None = None
        self._scale: np.ndarray | None = None

    # subclasses: (codes, lengths) -> (batch, features)
    def features(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def _forward(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        p = self.params
        if self.hidden:
            h = np.tanh(x @ p["w1"] + p["b1"])  # (batch, hidden)
            return h @ p["w2"] + p["b2"], h
        return x @ p["w"] + p["b"], None

    def fit(self, dataset: Any) -> _FeatureClassifier:
        """Fit on every string of ``dataset`` (labels 1 member / 0 not)."""
        _check_dataset(dataset)
        self.language = dataset.language
        codes, lengths = _codes_of(dataset, self.language)
        x = self.features(codes, lengths)
        y = np.asarray(dataset.labels, dtype=np.float64)
        self._mean = x.mean(axis=0)
        self._scale = np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
        x = (x - self._mean) / self._scale
        rng = np.random.default_rng(self.seed)
        d = x.shape[1]
        if self.hidden:
            self.params = {
                "w1": rng.normal(0, 1 / np.sqrt(d), (d, self.hidden)),
                "b1": np.zeros(self.hidden),
                "w2": rng.normal(0, 1 / np.sqrt(self.hidden), self.hidden),
                "b2": np.zeros(()),
            }
        else:
            self.params = {"w": rng.normal(0, 0.01, d), "b": np.zeros(())}
        moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in self.params.items()}
        beta1, beta2, eps = 0.9, 0.999, 1e-8
        n = len(y)
        for step in range(1, self.steps + 1):
            z, h = self._forward(x)
            g = (1 / (1 + np.exp(-z)) - y) / n  # d(mean CE)/dz, (batch,)
            if self.hidden:
                grads = {"w2": h.T @ g, "b2": g.sum()}
                gh = np.outer(g, self.params["w2"]) * (1 - h**2)  # (batch, hidden)
                grads.update({"w1": x.T @ gh, "b1": gh.sum(axis=0)})
            else:
                grads = {"w": x.T @ g, "b": g.sum()}
            for k, v in self.params.items():
                grad = grads[k] + (self.l2 * v if v.ndim else 0.0)
                m, s = moments[k]
                m[...] = beta1 * m + (1 - beta1) * grad
                s[...] = beta2 * s + (1 - beta2) * grad**2
                v -= self.lr * (m / (1 - beta1**step)) / (np.sqrt(s / (1 - beta2**step)) + eps)
        return self

    def decision_function(self, strings: Any) -> np.ndarray:
        """``(batch,)`` float64 logit of "member"."""
        if self.params is None:
            raise ValueError(f"{type(self).__name__} is not fitted; call fit(dataset) first")
        codes, lengths = _codes_of(strings, _language_of(strings, self.language))
        x = (self.features(codes, lengths) - self._mean) / self._scale
        return self._forward(x)[0]

    def predict(self, strings: Any) -> np.ndarray:
        """``(batch,)`` int64: 1 where the logit is positive."""
        return (self.decision_function(strings) > 0).astype(np.int64)


class CountsClassifier(_FeatureClassifier):
    """Logistic regression / small MLP on per-type opener and closer counts and the length.

    Features ``(batch, 2k + 1)``: the count of every symbol (opener and closer of each type) and
    the length. Hard negatives share these with members of the same length, so on a
    length-matched hard test set no counts model beats the member share.
    """

    name = "counts"

    def features(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """``(batch, 2k + 1)`` float64 symbol counts and length."""
        counts = _symbol_counts(codes, lengths, len(self.language.alphabet))
        return np.concatenate([counts, lengths[:, None].astype(np.float64)], axis=1)


class BagOfTokensClassifier(_FeatureClassifier):
    """Logistic regression / small MLP on unordered token n-gram counts.

    ``ngram=1``: the multiset of tokens, ``[start]`` and ``[end]`` included (constant, so they
    carry nothing) -- exactly the information of a permutation-invariant encoder. ``ngram=2``:
    counts of adjacent symbol pairs as well (a bag of bigrams sees local order, e.g. ``)(``).
    """

    name = "bag_of_tokens"

    def __init__(
        self,
        ngram: int = 1,
        hidden: int = 0,
        steps: int = 500,
        lr: float = 0.05,
        l2: float = 1e-4,
        seed: int = 0,
    ) -> None:
        if isinstance(ngram, bool) or ngram not in (1, 2):
            raise ValueError(f"ngram must be 1 or 2, got {ngram!r}")
        super().__init__(hidden=hidden, steps=steps, lr=lr, l2=l2, seed=seed)
        self.ngram = ngram

    def features(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """``(batch, 2k [+ (2k)^2])`` float64 unigram [and bigram] counts."""
        m = len(self.language.alphabet)
        out = [_symbol_counts(codes, lengths, m)]
        if self.ngram == 2:
            if codes.shape[1] >= 2:
                pairs = codes[:, :-1].astype(np.int64) * m + codes[:, 1:].astype(np.int64) % 256
                inside = np.arange(1, codes.shape[1])[None, :] < lengths[:, None]
                pairs = np.where(inside, pairs, 0)
                bigrams = _symbol_counts(pairs, np.full(len(lengths), codes.shape[1] - 1), m * m)
                # positions past the string were mapped to code 0 and counted: remove them
                bigrams[:, 0] -= (~inside).sum(axis=1)
            else:
                bigrams = np.zeros((codes.shape[0], m * m))
            out.append(bigrams)
        return np.concatenate(out, axis=1)


BASELINES: tuple[str, ...] = ("first_character_rule", "counts", "bag_of_tokens", "stack_automaton")


def make_baseline(name: str, seed: int = 0, **kwargs: Any) -> _Baseline:
    """A fresh baseline by name (one of :data:`BASELINES`); ``kwargs`` go to its constructor."""
    if name == "first_character_rule":
        return FirstCharacterRule(**kwargs)
    if name == "stack_automaton":
        return StackAutomaton(**kwargs)
    if name == "counts":
        return CountsClassifier(seed=seed, **kwargs)
    if name == "bag_of_tokens":
        return BagOfTokensClassifier(seed=seed, **kwargs)
    raise ValueError(f"name must be one of {BASELINES}, got {name!r}")
