"""A stronger adversary: stack-free rules that the long-range (``stack``/``far``) sets must defeat.

:mod:`~dyckbook.rules.baselines` tries cheap shortcuts (counts, n-grams, windows up to 8, the
ends). An audit broke the long-range sets with rules it never tried; this module holds them, with
the :class:`~dyckbook.rules.baselines.Baseline` interface, so that new negatives can be designed
against them. None of them has a stack; each docstring says why it cannot recognise Dyck-k.

- ``height_tally``: per (height, type) openers minus closers, all zero (unfitted).
- ``height_mlp``: an MLP on length-normalised (height, symbol) counts.
- ``window_span``: the exact window check at a width that grows with the length (ceil(n / 3));
  ``window10``, ``window12``, ``window16``: the same at a fixed width.
- ``skipgrams``, ``skipgrams24``: logistic regression on (symbol, gap, symbol) counts, gaps up
  to 16 (24).
- ``cnn``, ``cnn_dilated``: 1-D convolutions of receptive field at most 16, sum and max pooled.
- ``height_stats``: logistic regression on summary statistics of the height profile.
- ``edit_knn``: 5 nearest training strings by Levenshtein distance.

Under k = 1 the running count is the stack: ``height_tally`` is then the language itself, and
``baselines.recognisers`` names the old rules that read the count (``counter``, ``skeleton``,
``depth``). :func:`recognisers` lists them all and :func:`attack_regime` leaves them out there.
``height_stats`` and ``height_mlp`` drop, under k = 1, whatever shows the minimum height or its
sign (for k = 1 a dip below 0 *is* non-membership), so they stay shortcuts. Learned rules are
seeded (``seed``), run torch on at most :data:`MAX_THREADS` threads, and fit 8,000 strings of
length <= 48 in under 20 s on two shared CPU cores (measured: the CNNs 5-17 s, a second start
doubling it; the rest under 7 s; ``edit_knn`` scores 6,000 strings in 7-16 s).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from dyckbook.data.hardness import profile
from dyckbook.data.languages import Dyck, check_int
from dyckbook.data.negatives import long_range_window
from dyckbook.data.vocab import check_codes
from dyckbook.rules import baselines as B

__all__ = ["ADVERSARY", "CNN", "EDIT_KNN_LONGEST", "MAX_THREADS", "RULES", "EditKNN",
           "HeightCountsMLP", "HeightStats", "HeightTally", "SkipGrams", "WindowSpan", "attack",
           "attack_regime", "edit_distances", "make_rule", "recognisers"]

ADVERSARY: tuple[str, ...] = ("height_tally", "height_mlp", "window_span", "skipgrams", "cnn",
                              "cnn_dilated", "height_stats", "edit_knn")
MAX_THREADS = 1  # torch threads while a learned rule fits or predicts (on a busy 2-core
#                 machine one thread trained the MLP 4x and the CNN 2x faster than two)
_MAX_LEVEL = 15  # height_mlp: heights above it count as it
_KNN_BITS = 64  # edit_knn: strings of at most one machine word (Myers' bit-parallel algorithm)
EDIT_KNN_LONGEST = _KNN_BITS  # the longest string edit_knn fits or scores
_PAIR_CELLS = 1 << 18  # edit_knn: (test, train) pairs computed at once
_GOOD_LOSS = 0.5  # cnn: a start whose held-out loss is below this needs no restart


def _check_seed(seed: object) -> int:
    return check_int("seed", seed, 0)


def _heights(language: Dyck, codes: np.ndarray, lengths: np.ndarray):
    """Heights after each symbol (int64, flat after the end), pair levels and the valid mask.

    A symbol's level is the type-blind skeleton height at which its pair opens: the height
    before an opener, after a closer.
    """
    h = language.heights(codes, lengths).astype(np.int64)  # (batch, pos)
    valid = np.arange(codes.shape[1]) < lengths[:, None]
    closer = (codes & 1).astype(np.int64)
    return h, np.where(valid, h - 1 + closer, 0), valid


def _skeleton_word(language: Dyck, h: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Whether each skeleton is a Dyck-1 word (within the depth bound, if any)."""
    if h.shape[1] == 0:
        return lengths == 0
    ok = (lengths % 2 == 0) & (h.min(axis=1) >= 0) & (h[:, -1] == 0)
    if language.max_depth is not None:
        ok &= h.max(axis=1) <= language.max_depth
    return ok


class HeightTally(B.Baseline):
    """Member iff the skeleton is a Dyck-1 word and, for each (height, type), as many openers
    as closers open or close a pair at that height. Not fitted.

    Why it is no recogniser (k >= 2): a tally ignores order within a height, so two pairs at
    the same height that exchange closers, ``()[] -> (][)``, keep every tally at zero. Under
    k = 1 it is the skeleton check, the language itself.
    """

    name = "height_tally"

    def _predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        h, level, valid = _heights(self.language, codes, lengths)
        k, n, levels = self.language.k, lengths.size, codes.shape[1] + 1
        rows = np.broadcast_to(np.arange(n)[:, None], codes.shape)[valid]
        c = codes[valid].astype(np.int64)
        key = (rows * levels + np.clip(level[valid], 0, levels - 1)) * k + (c >> 1)
        tally = np.bincount(key, weights=1 - 2 * (c & 1), minlength=n * levels * k)
        tally = tally.reshape(n, levels * k)
        return _skeleton_word(self.language, h, lengths) & ~tally.any(axis=1)


@contextlib.contextmanager
def _threads():
    """At most :data:`MAX_THREADS` torch threads inside; the caller's setting after."""
    before = torch.get_num_threads()
    torch.set_num_threads(min(before, MAX_THREADS))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _seeded(build: Callable[[], torch.nn.Module], seed: int) -> torch.nn.Module:
    """``build()`` under ``torch.manual_seed(seed)``, leaving the global generator as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


class _Run:
    """One seeded training run: a network, its Adam state and its order of minibatches."""

    def __init__(self, net: torch.nn.Module, lr: float, seed: int, decay: float = 1e-4) -> None:
        self.net, self.order = net, np.random.default_rng(seed)
        self.opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=decay)

    def train(self, inputs: Sequence[torch.Tensor], y: torch.Tensor, epochs: int,
              batch: int) -> None:
        """Adam on the logistic loss (``batch >= len(y)``: full-batch, ``epochs`` steps)."""
        n = y.shape[0]
        for _ in range(epochs):
            order = torch.as_tensor(self.order.permutation(n)) if batch < n else None
            for start in range(0, n, batch):
                idx = slice(None) if order is None else order[start : start + batch]
                self.opt.zero_grad()
                F.binary_cross_entropy_with_logits(self.net(*(t[idx] for t in inputs)),
                                                   y[idx]).backward()
                self.opt.step()


def _logits(net: torch.nn.Module, inputs: Sequence[torch.Tensor], batch: int = 2048) -> np.ndarray:
    n = inputs[0].shape[0]
    with torch.no_grad():
        parts = [net(*(t[s : s + batch] for t in inputs)) for s in range(0, n, batch)]
    return torch.cat(parts).numpy() if parts else np.zeros(0, np.float32)


class HeightCountsMLP(B.Baseline):
    """An MLP (one hidden layer of ``hidden`` ReLUs, full-batch Adam) on the length-normalised
    counts of (level, symbol), the level (see :class:`HeightTally`) clipped to 0..15, with a
    bucket for levels below 0 (merged into 0 under k = 1, where a dip is non-membership).

    Why it is no recogniser: counts are order-blind within a (height, symbol) cell, so a
    same-height exchange of closers (``()[] -> (][)``) leaves every feature unchanged.
    """

    name = "height_mlp"

    def __init__(self, language: Dyck, hidden: int = 64, steps: int = 300, seed: int = 0) -> None:
        super().__init__(language)
        self.hidden = check_int("hidden", hidden, 1)
        self.steps = check_int("steps", steps, 1)
        self.seed = _check_seed(seed)
        self._net: torch.nn.Module | None = None

    def _features(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        _, level, valid = _heights(self.language, codes, lengths)
        low = 0 if self.language.k == 1 else -1  # k = 1: no below-0 bucket
        bucket = np.clip(level, low, _MAX_LEVEL) + 1  # 0: below 0
        m = 2 * self.language.k
        cells = B._counts(bucket * m + codes.astype(np.int64), valid, (_MAX_LEVEL + 2) * m)
        return np.hstack([cells / np.maximum(lengths, 1)[:, None], lengths[:, None] / 100.0])

    def _inputs(self, codes: np.ndarray, lengths: np.ndarray) -> list[torch.Tensor]:
        x = (self._features(codes, lengths) - self._mean) / self._scale
        return [torch.as_tensor(x, dtype=torch.float32)]

    def _fit(self, codes: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> None:
        x = self._features(codes, lengths)
        self._mean, self._scale = x.mean(axis=0), np.maximum(x.std(axis=0), 1e-6)
        width = x.shape[1]
        self._net = _seeded(lambda: torch.nn.Sequential(
            torch.nn.Linear(width, self.hidden), torch.nn.ReLU(),
            torch.nn.Linear(self.hidden, 1), torch.nn.Flatten(0)), self.seed)
        y = torch.as_tensor(labels, dtype=torch.float32)
        with _threads():
            _Run(self._net, 1e-2, self.seed).train(self._inputs(codes, lengths), y, self.steps,
                                                   labels.size)

    def _predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        if self._net is None:
            raise ValueError(f"{self!r} is not fitted; call fit first")
        with _threads():
            return _logits(self._net, self._inputs(codes, lengths)) > 0


class WindowSpan(B.Baseline):
    """The exact window check (``hardness.window_rejects``) at a width ``span(n)`` that depends
    on each string's length n (default W, ``negatives.long_range_window``): rejects iff some
    window of ``span(n)`` symbols (or the first or last ``span(n) - 1``) is a piece of no word.
    Not fitted.

    Why it is no recogniser: a window shorter than the string misses a violation whose witness
    (a mismatched pair, a dip's distance from the ends) spans more than ``span(n)`` symbols.
    """

    name = "window_span"

    def __init__(self, language: Dyck,
                 span: Callable[[int], int] = long_range_window) -> None:
        super().__init__(language)
        if not callable(span):
            raise ValueError(f"span must be a callable length -> width, got {span!r}")
        self.span = span

    def widths(self, lengths: np.ndarray) -> np.ndarray:
        """int64 ``(batch,)``: the width checked at each length."""
        lengths = np.asarray(lengths, dtype=np.int64)
        unique, inverse = np.unique(lengths, return_inverse=True)
        out = []
        for n in unique.tolist():
            w = self.span(n)
            if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 2:
                raise ValueError(f"span({n}) must be an int >= 2, got {w!r}")
            out.append(int(w))
        return np.asarray(out, dtype=np.int64)[inverse.ravel()]

    def _predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        p = profile(self.language, codes, lengths)
        return p.member | (p.w_star > self.widths(lengths))

    def __repr__(self) -> str:
        return f"WindowSpan({self.language.name}, span={getattr(self.span, '__name__', '?')})"


class SkipGrams(B._Logistic):
    """L2 logistic regression (``baselines``' Newton fit) on the length-normalised counts of
    (symbol a at i, symbol b at i + g) for every gap g up to ``span(n)`` of the string's length
    n (default W, ``negatives.long_range_window``), and the one-hot first and last symbols. The
    features cover the gaps up to the largest span of the strings it was fitted on.

    Why it is no recogniser: it sees pairs of symbols at most ``span(n)`` apart, counted and
    summed linearly, so a mismatch between partners farther apart, or an order of its pairs,
    is invisible to it.
    """

    name = "skipgrams"
    _gaps = 0  # the largest gap of the features, set by the fit

    def __init__(self, language: Dyck,
                 span: Callable[[int], int] = long_range_window) -> None:
        super().__init__(language)
        if not callable(span):
            raise ValueError(f"span must be a callable length -> gap, got {span!r}")
        self.span = span

    def _fit(self, codes: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> None:
        self._gaps = int(WindowSpan(self.language, self.span).widths(lengths).max(initial=1))
        super()._fit(codes, lengths, labels)

    def _features(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        m, n, pos = 2 * self.language.k, lengths.size, codes.shape[1]
        c = np.where(np.arange(pos) < lengths[:, None], codes, 0).astype(np.int64)
        reach = WindowSpan(self.language, self.span).widths(lengths)  # (batch,)
        out = np.zeros((n, self._gaps * m * m + 2 * m))
        scale = np.maximum(lengths, 1)[:, None]
        for g in range(1, min(self._gaps, pos - 1) + 1):
            inside = (np.arange(pos - g) < lengths[:, None] - g) & (g <= reach)[:, None]
            block = B._counts(c[:, :-g] * m + c[:, g:], inside, m * m)
            out[:, (g - 1) * m * m : g * m * m] = block / scale
        rows = np.flatnonzero(lengths > 0)
        ends = self._gaps * m * m
        out[rows, ends + c[rows, 0]] = 1.0
        out[rows, ends + m + c[rows, lengths[rows] - 1]] = 1.0
        return out


def _cnn_layers(width: int, dilated: bool) -> tuple[tuple[int, int], ...]:
    """(kernel, dilation) of each layer, for a receptive field of exactly ``width`` symbols:
    kernels of 5 (dilated: kernels of 3 at dilations 1, 2, 4, ...), then one layer that fills
    the remainder."""
    layers, rf, d = [], 1, 1
    while True:
        kernel, dil = (3, d) if dilated else (5, 1)
        if rf + (kernel - 1) * dil > width:
            break
        layers.append((kernel, dil))
        rf, d = rf + (kernel - 1) * dil, 2 * d
    if rf < width:
        layers.append((width - rf + 1, 1))
    return tuple(layers)


class _ConvNet(torch.nn.Module):
    """Same-padded 1-D convolutions + GELU, activations zeroed outside each string, then the sum
    (/ 16) and the max over positions into a linear head."""

    def __init__(self, n_in: int, channels: int, layers: tuple[tuple[int, int], ...]) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList(
            torch.nn.Conv1d(n_in if i == 0 else channels, channels, kernel, dilation=dil)
            for i, (kernel, dil) in enumerate(layers))
        for conv in self.convs:  # He initialisation: the signal survives a deep stack
            torch.nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
            torch.nn.init.zeros_(conv.bias)
        self.pads = [((k - 1) * d // 2, (k - 1) * d - (k - 1) * d // 2) for k, d in layers]
        self.head = torch.nn.Linear(2 * channels, 1)

    def local(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Pre-pooling features ``(batch, channels, pos)``."""
        for conv, pad in zip(self.convs, self.pads):
            x = F.gelu(conv(F.pad(x, pad))) * mask[:, None, :]
        return x

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        f = self.local(x, mask)
        return self.head(torch.cat([f.sum(-1) / 16.0, f.amax(-1)], 1)).squeeze(1)


class CNN(B.Baseline):
    """1-D convolutions over the one-hot symbols of ``⋊ s ⋉`` (boundary markers), receptive
    field :attr:`receptive_field` = ``width`` symbols (default None: W of the shortest string it
    is fitted on, ``negatives.long_range_window``, so that it reaches no further than W on any
    of them; ``dilated``: kernels of 3 at dilations 1, 2, 4, ...), then the sum and the max over
    positions into a linear head. GELU activations (on Dyck-3 stack sets ReLUs memorised in 2 of
    4 measured starts, or died in 2 of 9 under more decay; GELUs memorised in 1 of 10).
    Minibatch Adam, ``epochs`` passes over 90% of the strings; a start whose loss on the other
    10% stays above 0.5 (chance: 0.69) is followed by the next seeded start, up to
    ``restarts``, and the best one is kept.

    Why it is no recogniser: each pre-pooling feature sees ``width`` consecutive symbols, and
    pooling by a sum and a max forgets where they were, so a violation whose witness spans more
    than ``width`` symbols is seen by no feature, and the order of local pieces is lost.
    """

    name = "cnn"

    def __init__(self, language: Dyck, width: int | None = None, dilated: bool = False,
                 channels: int = 16, epochs: int = 20, batch: int = 256, lr: float = 3e-3,
                 restarts: int = 2, seed: int = 0,
                 layers: Sequence[tuple[int, int]] | None = None) -> None:
        super().__init__(language)
        self.width = None if width is None else check_int("width", width, 1)
        self.dilated = bool(dilated)
        self.channels = check_int("channels", channels, 1)
        self.epochs = check_int("epochs", epochs, 1)
        self.batch = check_int("batch", batch, 1)
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise ValueError(f"lr must be a number > 0, got {lr!r}")
        self.lr = float(lr)
        self.restarts = check_int("restarts", restarts, 1)
        self.seed = _check_seed(seed)
        if dilated:
            self.name = "cnn_dilated"
        self.layers: tuple[tuple[int, int], ...] = ()
        if layers is not None:
            self._set_layers(layers)
        elif self.width is not None:
            self._set_layers(_cnn_layers(self.width, self.dilated))
        self._fitted = False

    def _set_layers(self, layers: Sequence[tuple[int, int]]) -> None:
        layers = tuple((check_int("layers kernel", k, 1), check_int("layers dilation", d, 1))
                       for k, d in layers)
        if not layers:
            raise ValueError("layers must hold at least one (kernel, dilation)")
        self.layers = layers
        if self.width is not None and self.receptive_field > self.width:
            raise ValueError(f"layers reach {self.receptive_field} symbols, more than "
                             f"width={self.width}")
        self._net = self._build(self.seed * self.restarts)  # the first restart's start

    @property
    def receptive_field(self) -> int:
        """Symbols of ``⋊ s ⋉`` that one pre-pooling feature depends on: 1 + sum (k - 1) d."""
        return 1 + sum((k - 1) * d for k, d in self.layers)

    def _build(self, seed: int) -> _ConvNet:
        return _seeded(lambda: _ConvNet(2 * self.language.k + 2, self.channels, self.layers),
                       seed)

    def _inputs(self, codes: np.ndarray, lengths: np.ndarray) -> list[torch.Tensor]:
        m, (n, pos) = 2 * self.language.k, codes.shape
        bordered = np.full((n, pos + 2), m + 2, dtype=np.int64)  # m + 2: pad (all zero)
        bordered[:, 0] = m  # ⋊
        inside = np.arange(pos) < lengths[:, None]
        bordered[:, 1:-1] = np.where(inside, codes, m + 2)
        bordered[np.arange(n), lengths + 1] = m + 1  # ⋉
        onehot = np.eye(m + 3, m + 2, dtype=np.float32)[bordered]  # (batch, pos + 2, m + 2)
        mask = np.arange(pos + 2) <= lengths[:, None] + 1
        return [torch.as_tensor(onehot).transpose(1, 2).contiguous(),
                torch.as_tensor(mask, dtype=torch.float32)]

    def features(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Pre-pooling features, float32 ``(batch, pos + 2, channels)``; column j reads the
        symbols of ``⋊ s ⋉`` around j, and is 0 past the ``⋉``."""
        codes, lengths = check_codes(codes, lengths, 2 * self.language.k)
        if not self.layers:
            raise ValueError(f"{self!r} has no layers yet: give width or layers, or fit it")
        with _threads(), torch.no_grad():
            return self._net.local(*self._inputs(codes, lengths)).transpose(1, 2).numpy()

    def _fit(self, codes: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> None:
        if not self.layers:  # reach W of the shortest string
            self._set_layers(_cnn_layers(long_range_window(int(lengths.min(initial=0))),
                                         self.dilated))
        inputs, y = self._inputs(codes, lengths), torch.as_tensor(labels, dtype=torch.float32)
        held = np.random.default_rng(self.seed).permutation(y.shape[0]) % 10 == 0  # 10% aside
        best: tuple[float, _ConvNet] | None = None
        with _threads():
            for r in range(self.restarts):
                run = _Run(self._build(self.seed * self.restarts + r), self.lr, self.seed)
                run.train([t[~held] for t in inputs], y[~held], self.epochs, self.batch)
                with torch.no_grad():
                    loss = F.binary_cross_entropy_with_logits(
                        run.net(*(t[held] for t in inputs)), y[held]).item()
                if best is None or loss < best[0]:
                    best = (loss, run.net)
                if loss < _GOOD_LOSS:
                    break
        self._net, self._fitted = best[1], True

    def _predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        if not self._fitted:
            raise ValueError(f"{self!r} is not fitted; call fit first")
        with _threads():
            return _logits(self._net, self._inputs(codes, lengths)) > 0

    def __repr__(self) -> str:
        return f"CNN({self.language.name}, layers={self.layers}, rf={self.receptive_field})"


class HeightStats(B._Logistic):
    """L2 logistic regression on summary statistics of the height profile: returns to height 0
    (count and per length), maximum, mean height, peaks (an opener then a closer), final
    height, length; for k >= 2 also the minimum height and the mean absolute height.

    Under k = 1 the minimum height (or its sign, which the mean absolute height beside the
    mean reveals) is the recogniser itself, so they are left out there. Why it is no
    recogniser: a handful of statistics of the type-blind skeleton cannot tell types apart
    (k >= 2), nor, without the minimum, where the count dips (k = 1).
    """

    name = "height_stats"

    def _features(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        h, _, valid = _heights(self.language, codes, lengths)
        n = lengths.size
        t = np.hstack([np.zeros((n, 1), np.int64), h])  # heights at the time points 0..length
        live = np.arange(t.shape[1]) <= lengths[:, None]
        points = (lengths + 1)[:, None].astype(float)
        returns = ((t[:, 1:] == 0) & live[:, 1:]).sum(axis=1, keepdims=True)
        c = codes.astype(np.int64)
        peaks = ((c[:, :-1] % 2 == 0) & (c[:, 1:] % 2 == 1) & valid[:, 1:]).sum(axis=1)
        cols = [returns, returns / np.maximum(lengths, 1)[:, None],
                np.where(live, t, -(10**6)).max(axis=1, keepdims=True),
                np.where(live, t, 0).sum(axis=1, keepdims=True) / points, peaks[:, None],
                t[np.arange(n), lengths][:, None], lengths[:, None] / 100.0]
        if self.language.k > 1:
            cols += [np.where(live, t, 10**6).min(axis=1, keepdims=True),
                     np.where(live, np.abs(t), 0).sum(axis=1, keepdims=True) / points]
        return np.hstack(cols).astype(np.float64)


def _peq(codes: np.ndarray, lengths: np.ndarray, n_symbols: int) -> np.ndarray:
    """uint64 ``(batch, n_symbols + 1)``: bit i of column s set iff symbol i of the row is s
    (column n_symbols, the pad's, is empty)."""
    pos = codes.shape[1]
    bits, valid = np.uint64(1) << np.arange(pos, dtype=np.uint64), np.arange(pos) < lengths[:, None]
    out = np.zeros((lengths.size, n_symbols + 1), np.uint64)
    for s in range(n_symbols):
        out[:, s] = np.bitwise_or.reduce(np.where(valid & (codes == s), bits, np.uint64(0)),
                                         axis=1)
    return out


def edit_distances(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray],
                   n_symbols: int) -> np.ndarray:
    """Levenshtein distance between every row of ``a`` and of ``b`` (``(codes, lengths)``
    each, codes below ``n_symbols``): int32 ``(len(a), len(b))``, by Myers' bit-parallel
    algorithm (``a``'s rows are the patterns, at most 64 symbols), pairs in blocks."""
    (ca, la), (cb, lb) = a, b
    if la.size and int(la.max()) > _KNN_BITS:
        raise ValueError(f"lengths must be <= {_KNN_BITS} for edit distances, got {la.max()}")
    peq = _peq(ca, la, n_symbols)
    text = np.where(np.arange(cb.shape[1]) < lb[:, None], cb, n_symbols).astype(np.int64)
    out = np.empty((la.size, lb.size), np.int32)
    one = np.uint64(1)
    step = max(1, _PAIR_CELLS // max(lb.size, 1))
    for s in range(0, la.size, step):
        p, m = peq[s : s + step], la[s : s + step, None]
        high = np.where(m > 0, np.left_shift(one, np.maximum(m - 1, 0).astype(np.uint64)),
                        np.uint64(0))  # (rows, 1): the pattern's last bit
        shape = (p.shape[0], lb.size)
        pv, mv = np.full(shape, ~np.uint64(0)), np.zeros(shape, np.uint64)
        score = np.broadcast_to(m, shape).astype(np.int32)
        for j in range(text.shape[1]):
            eq = p[:, text[:, j]]
            xv = eq | mv
            xh = (((eq & pv) + pv) ^ pv) | eq
            ph = mv | ~(xh | pv)
            mh = pv & xh
            live = (j < lb)[None, :]
            score += (live & ((ph & high) != 0)).astype(np.int32)
            score -= (live & ((mh & high) != 0)).astype(np.int32)
            ph = (ph << one) | one
            mh <<= one
            pv = mh | ~(xv | ph)
            mv = ph & xv
        out[s : s + step] = np.where(m == 0, lb[None, :], score)
    return out


class EditKNN(B.Baseline):
    """The majority label of the ``neighbours`` training strings nearest in Levenshtein
    distance (ties broken by a seeded random order); a random subsample of at most
    ``max_train`` training strings is kept (default 2,000), so scoring 6,000 strings takes
    seconds. Strings of at most 64 symbols.

    Why it is no recogniser: a non-member one exchange away from a member has a member as
    its nearest neighbour; distance to a finite sample is no membership test.
    """

    name = "edit_knn"

    def __init__(self, language: Dyck, neighbours: int = 5, max_train: int = 2000,
                 seed: int = 0) -> None:
        super().__init__(language)
        self.neighbours = check_int("neighbours", neighbours, 1)
        self.max_train = check_int("max_train", max_train, 1)
        self.seed = _check_seed(seed)
        self._train: tuple[np.ndarray, ...] | None = None

    def _fit(self, codes: np.ndarray, lengths: np.ndarray, labels: np.ndarray) -> None:
        if lengths.size and int(lengths.max()) > _KNN_BITS:
            raise ValueError(f"lengths must be <= {_KNN_BITS} for {self!r}, got {lengths.max()}")
        if lengths.size < self.neighbours:
            raise ValueError(f"neighbours={self.neighbours} exceeds the {lengths.size} "
                             "training strings")
        rng = np.random.default_rng(self.seed)
        keep = np.sort(rng.permutation(lengths.size)[: self.max_train])
        width = int(lengths[keep].max(initial=0))
        self._train = (codes[keep, :width], lengths[keep], labels[keep],
                       rng.permutation(keep.size))  # the tie-breaking rank of each

    def _predict(self, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        if self._train is None:
            raise ValueError(f"{self!r} is not fitted; call fit first")
        tc, tl, ty, rank = self._train
        d = edit_distances((codes, lengths), (tc, tl), 2 * self.language.k).astype(np.int64)
        key = d * tl.size + rank[None, :]
        near = np.argpartition(key, self.neighbours - 1, axis=1)[:, : self.neighbours]
        return 2 * ty[near].sum(axis=1) > self.neighbours  # a tie (even neighbours): no

    def __repr__(self) -> str:
        return f"EditKNN({self.language.name}, neighbours={self.neighbours})"


#: the adversary's rules by name: ``factory(language, seed)``; :data:`ADVERSARY` lists them
RULES: dict[str, Callable[[Dyck, int], B.Baseline]] = {
    "height_tally": lambda language, seed: HeightTally(language),
    "height_mlp": lambda language, seed: HeightCountsMLP(language, seed=seed),
    "window_span": lambda language, seed: WindowSpan(language),
    "skipgrams": lambda language, seed: SkipGrams(language),
    "cnn": lambda language, seed: CNN(language, seed=seed),
    "cnn_dilated": lambda language, seed: CNN(language, dilated=True, seed=seed),
    "height_stats": lambda language, seed: HeightStats(language),
    "edit_knn": lambda language, seed: EditKNN(language, seed=seed),
}


def make_rule(name: str, language: Dyck, window: int = 4, seed: int = 0) -> B.Baseline:
    """A fresh rule by name: one of :data:`RULES`, or of ``baselines.BASELINES`` (``window``:
    ``local``'s w). ``seed`` seeds the learned rules."""
    seed = _check_seed(seed)
    if name in RULES:
        return RULES[name](language, seed)
    if name in B.BASELINES:
        return B.make_baseline(name, language, window)
    raise ValueError(f"name must be one of {tuple(RULES)} or {B.BASELINES}, got {name!r}")


def recognisers(language: Dyck) -> tuple[str, ...]:
    """The rules (old and new) that recognise ``language`` outright: ``baselines.recognisers``
    (``stack``; under k = 1 also ``counter``, ``skeleton``, ``depth``), and under k = 1 also
    ``height_tally`` (the skeleton check). ``height_stats`` and ``height_mlp`` are not among
    them: under k = 1 they leave out the minimum height and the below-0 bucket."""
    extra = ("height_tally",) if language.k == 1 else ()
    return B.recognisers(language) + extra


def attack(language: Dyck, train: tuple[np.ndarray, np.ndarray, np.ndarray],
           test: tuple[np.ndarray, np.ndarray, np.ndarray], names: Sequence[str] = ADVERSARY,
           bins: Sequence[tuple[int, int]] | None = None, window: int = 4, seed: int = 0,
           timings: dict[str, tuple[float, float]] | None = None) -> dict[str, dict[str, float]]:
    """Every rule of ``names`` (new or ``baselines``') fitted on ``train``, scored on ``test``.

    As ``baselines.attack``: ``{rule: {"low-high": balanced accuracy, "all": pooled}}``; bins
    default to one per length of ``test``. ``timings``, if given, receives each rule's
    ``(fit seconds, predict seconds)``.
    """
    codes, lengths, labels = test
    lengths, labels = np.asarray(lengths), np.asarray(labels)
    if bins is None:
        bins = [(int(n), int(n)) for n in np.unique(lengths)]
    out: dict[str, dict[str, float]] = {}
    for name in names:
        start = time.perf_counter()
        rule = make_rule(name, language, window, seed).fit(*train)
        fitted = time.perf_counter()
        predicted = rule.predict(codes, lengths)
        if timings is not None:
            timings[name] = (fitted - start, time.perf_counter() - fitted)
        row = {"all": B.balanced_accuracy(predicted, labels)}
        for lo, hi in bins:
            inside = (lengths >= lo) & (lengths <= hi)
            row[f"{lo}-{hi}"] = B.balanced_accuracy(predicted[inside], labels[inside])
        out[name] = row
    return out


def attack_regime(language: Dyck, regime: str, lengths: Sequence[int], n: int, seed: int = 0,
                  bins: Sequence[tuple[int, int]] | None = None, window: int = 4,
                  names: Sequence[str] = ADVERSARY,
                  timings: dict[str, tuple[float, float]] | None = None
                  ) -> dict[str, dict[str, float]]:
    """:func:`attack` on a regime of ``dyckbook.data.protocol``: fitted on ``n`` members and ``n``
    negatives (``protocol.balanced_sample``, lengths drawn uniformly from ``lengths``), scored
    on a fresh sample of the same size, both from ``seed``. The rules that recognise the
    language outright (:func:`recognisers`: under k = 1 ``height_tally`` and the old rules
    that read the count) are left out."""
    fit, test = B.regime_samples(language, regime, lengths, n, seed, window)
    kept = [name for name in names if name not in recognisers(language)]
    return attack(language, fit, test, kept, bins, window, seed, timings)
