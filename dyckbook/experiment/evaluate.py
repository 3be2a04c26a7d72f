"""Scores of a classifier on a dataset: accuracy with a Wilson interval, per length, kind, depth and
hardness bin, and balanced accuracies of a kind or bin against members of the same lengths."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from dyckbook.data.dataset import MEMBER, Dataset
from dyckbook.data.hardness import MEMBER_BIN
from dyckbook.nn import tokenizer
from dyckbook.nn.blocks import evaluating

__all__ = ["MEMBER_BIN", "Score", "binned", "evaluating", "margins", "pool", "predict", "score",
           "wilson"]

Z95 = 1.959963984540054


def wilson(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``correct / n`` (95% by default), within [0, 1].

    Returns ``(nan, nan)`` for ``n = 0``.
    """
    if n == 0:
        return math.nan, math.nan
    if not 0 <= correct <= n:
        raise ValueError(f"correct must lie in [0, n={n}], got {correct}")
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # the interval always holds p; clamping to it removes rounding at p = 0 or 1 (e.g. 5e-17)
    return min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half))


def _table(keys: np.ndarray, ok: np.ndarray) -> dict[Any, list[int]]:
    """``{key: [n, correct]}`` over the distinct keys, sorted."""
    out = {}
    for key in sorted(set(keys.tolist())):
        rows = keys == key
        out[key] = [int(rows.sum()), int(ok[rows].sum())]
    return out


@dataclass
class Score:
    """A classifier's results on one dataset.

    Attributes:
        n: strings scored.
        correct: strings classified correctly.
        per_length / per_kind / per_depth / per_bin: ``{key: [n, correct]}`` (depth: the
            string's maximum prefix height; bin: the hardness bin, ``hardness.BINS``, members
            under ``"member"``).
        cells: ``{"kind|bin|length": [n, correct]}`` (a model's scores; empty for baselines'),
            so that a kind or bin is compared with the members of its own lengths.
    """

    n: int
    correct: int
    per_length: dict[int, list[int]]
    per_kind: dict[str, list[int]]
    per_depth: dict[int, list[int]]
    per_bin: dict[str, list[int]] = field(default_factory=dict)
    cells: dict[str, list[int]] = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else math.nan

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.correct, self.n)

    @property
    def balanced_accuracy(self) -> float:
        """Mean of the accuracy on members and on non-members."""
        kinds = self.per_kind
        members = kinds.get(MEMBER, [0, 0])
        others = [sum(v[i] for k, v in kinds.items() if k != MEMBER) for i in (0, 1)]
        if not members[0] or not others[0]:
            return math.nan
        return 0.5 * (members[1] / members[0] + others[1] / others[0])

    def balanced(self, kind: str | None = None, bin: str | None = None) -> float:
        """Balanced accuracy of the negatives of one kind and/or hardness bin (all negatives if
        neither) against the members: the mean of their accuracy and the members' accuracy at
        the negatives' lengths, weighted like the negatives (with ``cells``; otherwise the
        members' pooled accuracy). NaN when either side is empty."""
        if not self.cells:
            if kind is not None and bin is not None:
                raise ValueError("a score without cells has no table of kind and bin together")
            table, key = ("per_kind", kind) if bin is None else ("per_bin", bin)
            members = self.per_kind.get(MEMBER, [0, 0])
            if key is None:
                cells = [v for k, v in self.per_kind.items() if k != MEMBER]
            else:
                cells = [getattr(self, table).get(key, [0, 0])]
            n, ok = sum(c[0] for c in cells), sum(c[1] for c in cells)
            if not n or not members[0]:
                return math.nan
            return 0.5 * (ok / n + members[1] / members[0])
        neg: dict[int, list[int]] = {}
        mem: dict[int, list[int]] = {}
        for k, b, length, n, ok in self.cell_items():
            if k == MEMBER:
                mem[length] = [n, ok]
            elif (kind is None or k == kind) and (bin is None or b == bin):
                cell = neg.setdefault(length, [0, 0])
                cell[0] += n
                cell[1] += ok
        neg = {L: c for L, c in neg.items() if L in mem and mem[L][0]}
        total = sum(c[0] for c in neg.values())
        if not total:
            return math.nan
        negatives = sum(c[1] for c in neg.values()) / total
        members = sum(c[0] / total * mem[L][1] / mem[L][0] for L, c in neg.items())
        return 0.5 * (negatives + members)

    def cell_items(self) -> list[tuple[str, str, int, int, int]]:
        """``cells`` read back: ``(kind, bin, length, n, correct)`` per cell."""
        out = []
        for key, (n, ok) in self.cells.items():
            kind, bin_, length = key.split("|")
            out.append((kind, bin_, int(length), n, ok))
        return out

    def accuracy_of(self, table: str, key: Any) -> float:
        """Accuracy within one cell, e.g. ``accuracy_of("per_kind", "swap")`` (NaN if empty)."""
        n, ok = getattr(self, table).get(key, [0, 0])
        return ok / n if n else math.nan

    def accuracy_between(self, low: int, high: int, table: str = "per_length") -> float:
        """Accuracy over the keys (lengths, or depths) in ``[low, high]`` (NaN if none)."""
        cells = [v for k, v in getattr(self, table).items() if low <= k <= high]
        n = sum(c[0] for c in cells)
        return sum(c[1] for c in cells) / n if n else math.nan

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for table in ("per_length", "per_depth"):
            data[table] = {str(k): v for k, v in data[table].items()}
        data.update(accuracy=self.accuracy, interval=list(self.interval),
                    balanced_accuracy=self.balanced_accuracy)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Score:
        return cls(n=int(data["n"]), correct=int(data["correct"]),
                   per_length={int(k): list(v) for k, v in data["per_length"].items()},
                   per_kind={str(k): list(v) for k, v in data["per_kind"].items()},
                   per_depth={int(k): list(v) for k, v in data["per_depth"].items()},
                   per_bin={str(k): list(v) for k, v in data.get("per_bin", {}).items()},
                   cells={str(k): list(v) for k, v in data.get("cells", {}).items()})


def score(predicted: np.ndarray, dataset: Dataset, cells: bool = True) -> Score:
    """Score predicted labels (batch,) against a dataset's labels.

    ``cells``: also keep the kind x bin x length table (``Score.cells``), which a length-matched
    balanced accuracy needs (a model's scores); baselines' scores leave it out.
    """
    predicted = np.asarray(predicted)
    if predicted.shape != (len(dataset),):
        raise ValueError(f"predicted must have shape ({len(dataset)},), got {predicted.shape}")
    ok = predicted.astype(np.int64) == dataset.labels
    bins = dataset.hardness_bins()
    kinds = dataset.kinds.astype(str)
    table = {}
    if cells and len(dataset):
        keys = np.char.add(np.char.add(np.char.add(kinds, "|"), np.char.add(bins.astype(str), "|")),
                           dataset.lengths.astype(str))
        table = _table(keys, ok)
    return Score(n=len(dataset), correct=int(ok.sum()), per_length=_table(dataset.lengths, ok),
                 per_kind=_table(kinds, ok), per_depth=_table(dataset.depths(), ok),
                 per_bin=_table(bins.astype(str), ok), cells=table)


def margins(model: nn.Module, dataset: Dataset | Sequence[Dataset],
            batch_size: int = 1024) -> np.ndarray | list[np.ndarray]:
    """``logit[member] - logit[non-member]`` of every string (eval mode), on the model's device.

    ``dataset``: one dataset for a single model; or a sequence of one per model of a network
    of S models (``Classifier``, ``RecurrentClassifier``), scored at once: each batch holds
    ``batch_size`` rows of every model's own set (a shorter set repeats its last row; on a
    device fewer for long strings, ``tokenizer.eval_rows``). The margins stay on the device
    until the end (one read-back); ids are checked on the host.

    Returns:
        float64 (batch,), or a list of them (one per model). Its spread across inputs is 0
        when the output ignores the input.
    """
    single = isinstance(dataset, Dataset)
    sets = [dataset] if single else list(dataset)
    device = next(model.parameters()).device  # a model on a GPU is scored there
    vocab = getattr(getattr(model, "config", None), "d_vocab", None)
    longest = max((len(ds) for ds in sets), default=0)
    config = getattr(model, "config", None)
    width = getattr(config, "d_model", 256)
    positions = max(int(ds.lengths.max(initial=0)) for ds in sets) + 2
    batch_size = tokenizer.eval_rows(len(sets), positions, width, device, batch_size,
                                     tokenizer.attention_scores(config, positions))
    out = []
    with evaluating(model):
        for start in range(0, longest, batch_size):
            parts = [ds.subset(np.minimum(np.arange(start, min(start + batch_size, longest)),
                                          max(len(ds) - 1, 0))) for ds in sets]
            width = max(int(part.lengths.max(initial=0)) for part in parts)
            tokens = torch.stack([tokenizer.encode(part.codes, part.lengths, None if single
                                                   else width) for part in parts])
            if vocab is not None and device.type != "cpu":  # the host side of the boundary
                tokenizer.check_ids(tokens, vocab)
            logits = model(tokenizer.to_device(tokens[0] if single else tokens, device)).double()
            out.append(logits[..., 1] - logits[..., 0])  # (batch,) or (S, batch)
    every = torch.cat(out, -1).cpu().numpy() if out else np.zeros((len(sets), 0))
    return every.reshape(-1) if single else [m[:len(ds)] for m, ds in zip(every, sets)]


def predict(model: nn.Module, dataset: Dataset) -> np.ndarray:
    """Predicted labels (batch,) int8, 1 = member."""
    return (margins(model, dataset) > 0).astype(np.int8)


def binned(table: Mapping[int, Sequence[int]], width: int) -> dict[int, list[int]]:
    """``{key: [n, correct]}`` pooled into bins ``[w j, w (j + 1))`` keyed by their start."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be an int >= 1, got {width!r}")
    return _summed((int(key) // width * width, cell) for key, cell in table.items())


def _summed(cells: Iterable[tuple[Any, Sequence[int]]]) -> dict[Any, list[int]]:
    """``(key, [n, correct])`` pairs summed per key, sorted by key."""
    out: dict[Any, list[int]] = {}
    for key, (n, ok) in cells:
        cell = out.setdefault(key, [0, 0])
        cell[0] += n
        cell[1] += ok
    return dict(sorted(out.items()))


def pool(scores: Sequence[Score]) -> Score:
    """One Score summing the counts of several (e.g. the seeds of a configuration)."""
    tables = ("per_length", "per_kind", "per_depth", "per_bin", "cells")
    return Score(n=sum(s.n for s in scores), correct=sum(s.correct for s in scores),
                 **{table: _summed(cell for s in scores for cell in getattr(s, table).items())
                    for table in tables})
