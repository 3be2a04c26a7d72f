"""Attention measures of single models: patterns from the real forward pass, arrays in and out."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from dyckbook.data.dataset import Dataset
from dyckbook.experiment.evaluate import evaluating, predict
from dyckbook.nn import tokenizer
from dyckbook.nn.model import MASKS, Classifier
from dyckbook.nn.thesis_model import ThesisClassifier

__all__ = ["LongInputSummary", "MatchingScores", "attention_patterns",
           "end_self_attention", "head_movement", "head_reset_accuracy", "long_input_summary",
           "matching_scores", "minmax_scale", "partner_positions", "preview_auc",
           "preview_scores", "recent_openers", "roc_auc", "roc_curve", "visible_keys"]

HEAD = ("classifier.weight", "classifier.bias")  # the classifier head's parameters
_CHUNK = 512  # query rows long_input_summary handles at a time


def _check_mask(mask: str) -> None:
    if mask not in MASKS:
        raise ValueError(f"mask must be one of {MASKS}, got {mask!r}")


def attention_patterns(model: nn.Module, data: Dataset | torch.Tensor,
                       batch_size: int = 256) -> np.ndarray:
    """Attention patterns of every layer from the forward pass that makes the prediction.

    Layer l's pattern is computed from the residual stream layer l - 1 produced (never by
    re-applying a layer to the embeddings, as the thesis' plotting code did). Eval mode, no
    gradients, ``batch_size`` strings at a time; the model's mode is restored.

    Args:
        model: a single-model ``Classifier`` (read through ``run_with_cache``) or a
            ``ThesisClassifier`` (its ``attention_patterns``).
        data: a Dataset (tokens of width pos + 2, pos = ``data.codes.shape[1]``) or tokens
            int64 (batch, pos).

    Returns:
        float32 (layer, batch, head, query, key); real query rows sum to 1.
    """
    if isinstance(data, Dataset):
        tokens = tokenizer.encode(data.codes, data.lengths, data.codes.shape[1])
    elif isinstance(data, torch.Tensor) and data.dim() == 2:
        tokens = data
    else:
        raise ValueError(f"data must be a Dataset or int64 tokens (batch, pos), got {data!r:.80}")
    if not isinstance(model, (Classifier, ThesisClassifier)):
        raise ValueError(f"model must be a Classifier or a ThesisClassifier, got "
                         f"{type(model).__name__}")
    device = next(model.parameters()).device
    out = []
    with evaluating(model):
        for start in range(0, len(tokens), batch_size):
            part = tokens[start:start + batch_size].to(device)
            if isinstance(model, Classifier):
                _, cache = model.run_with_cache(part, lambda n: n.endswith("hook_pattern"))
                layers = [cache[f"blocks.{l}.attn.hook_pattern"]
                          for l in range(model.config.n_layers)]
            else:
                layers = model.attention_patterns(part)
            out.append(np.stack([torch.as_tensor(p).float().cpu().numpy() for p in layers]))
    return np.concatenate(out, axis=1)


def visible_keys(lengths: np.ndarray, n_pos: int, mask: str) -> np.ndarray:
    """Which keys a real query may attend to (pad query rows: none).

    Args:
        lengths: int (batch,) string lengths; tokens 0 .. length + 1 are real.
        n_pos: token positions.
        mask: ``bidirectional`` (pads hidden) or ``causal`` (pads and later keys hidden).

    Returns:
        bool (batch, query, key).
    """
    _check_mask(mask)
    real = np.arange(n_pos)[None, :] < np.asarray(lengths)[:, None] + 2  # (batch, pos)
    out = real[:, :, None] & real[:, None, :]
    if mask == "causal":
        out &= np.tri(n_pos, dtype=bool)[None]
    return out


def partner_positions(dataset: Dataset) -> np.ndarray:
    """Token position of every bracket token's partner, in member strings.

    Returns:
        int64 (batch, pos + 2), pos = ``dataset.codes.shape[1]``: the partner's token position
        (string position + 1) for every symbol of a member; -1 at ``[start]``, ``[end]``,
        pads and everywhere in non-members.
    """
    m = dataset.language.matching(dataset.codes, dataset.lengths)
    out = np.full((len(dataset), m.shape[1] + 2), -1, np.int64)
    out[:, 1:-1] = np.where(m >= 0, m + 1, -1)
    return out


def recent_openers(dataset: Dataset) -> np.ndarray:
    """For every closer, the nearest opener of its type before it, closed or not.

    Returns:
        int64 (batch, pos + 2) token positions; -1 where there is none and at non-closers.
    """
    codes, n = dataset.codes, dataset.codes.shape[1]
    closer = (codes & 1).astype(bool) & (np.arange(n)[None, :] < dataset.lengths[:, None])
    out = np.full((len(dataset), n + 2), -1, np.int64)
    for t in np.unique(codes[closer] >> 1):
        last = np.maximum.accumulate(np.where(codes == 2 * t, np.arange(n), -1), axis=1)
        here = closer & (codes == 2 * t + 1)
        out[:, 1:-1][here] = np.where(last[here] >= 0, last[here] + 1, -1)
    return out


@dataclass
class MatchingScores:
    """Mean attention of closers (of members) per (layer, head), beside two cheap heuristics.

    A closer's ``previous`` key is the token before it; its ``recent_opener`` the nearest
    opener of its type before it. Where the recent opener is the partner, attending to the
    partner needs no notion of nesting, so ``partner_hard`` is measured only at the closers
    where both heuristics miss: that is the evidence of a head that matches brackets.

    Attributes:
        partner / previous / recent_opener: float64 (layer, head), mean attention on that key
            over all closers.
        partner_hard: float64 (layer, head), mean attention on the partner at the hard closers
            (NaN when there are none).
        uniform / uniform_hard: mean of 1 / (number of visible keys) over all / hard closers:
            what uniform attention would put on the partner.
        n_closers / n_hard: closers counted, and those where both heuristics miss.
        previous_share / recent_share: share of closers whose partner each heuristic names.
    """

    partner: np.ndarray
    partner_hard: np.ndarray
    previous: np.ndarray
    recent_opener: np.ndarray
    uniform: float
    uniform_hard: float
    n_closers: int
    n_hard: int
    previous_share: float
    recent_share: float

    def to_dict(self) -> dict[str, Any]:
        return {k: v.tolist() if isinstance(v, np.ndarray) else v
                for k, v in asdict(self).items()}


def _check_patterns(patterns: np.ndarray, batch: int, n_pos: int) -> np.ndarray:
    p = np.asarray(patterns)
    if p.ndim != 5 or p.shape[1] != batch or p.shape[3] != p.shape[4] or p.shape[3] < n_pos:
        raise ValueError(f"patterns must be (layer, batch={batch}, head, query, key) with at "
                         f"least {n_pos} positions, got shape {p.shape}")
    return p


def matching_scores(patterns: np.ndarray, dataset: Dataset,
                    mask: str = "bidirectional") -> MatchingScores:
    """Attention of member closers on their partner, the previous token and the recent opener.

    Args:
        patterns: (layer, batch, head, query, key) of ``dataset`` (see :func:`attention_patterns`).
        dataset: the strings; only the closers of members count.
        mask: the model's mask, for the uniform baseline.

    Returns:
        A :class:`MatchingScores`.
    """
    _check_mask(mask)
    partner = partner_positions(dataset)
    p = _check_patterns(patterns, len(dataset), partner.shape[1])
    recent = recent_openers(dataset)
    closer = np.zeros_like(partner, dtype=bool)
    closer[:, 1:-1] = (dataset.codes & 1).astype(bool)
    b, q = np.nonzero(closer & (partner >= 0))
    if b.size == 0:
        raise ValueError(f"dataset holds no member with a closer ({dataset!r})")
    key = {"partner": partner[b, q], "previous": q - 1, "recent_opener": recent[b, q]}
    mass = {name: p[:, b, :, q, k].mean(axis=0).astype(np.float64) for name, k in key.items()}
    prev_ok, recent_ok = key["previous"] == key["partner"], key["recent_opener"] == key["partner"]
    hard = ~prev_ok & ~recent_ok
    n_visible = q + 1 if mask == "causal" else dataset.lengths[b] + 2
    partner_hard = np.full((p.shape[0], p.shape[2]), np.nan)  # (layer, head)
    if hard.any():
        partner_hard = p[:, b[hard], :, q[hard], key["partner"][hard]].mean(axis=0)
    return MatchingScores(
        partner=mass["partner"], partner_hard=partner_hard.astype(np.float64),
        previous=mass["previous"], recent_opener=mass["recent_opener"],
        uniform=float(np.mean(1.0 / n_visible)),
        uniform_hard=float(np.mean(1.0 / n_visible[hard])) if hard.any() else math.nan,
        n_closers=int(b.size), n_hard=int(hard.sum()), previous_share=float(prev_ok.mean()),
        recent_share=float(recent_ok.mean()))


def minmax_scale(pattern: np.ndarray, hidden: np.ndarray | None = None) -> np.ma.MaskedArray:
    """The thesis' display scaling: each (query, key) matrix mapped affinely onto [-1, 1].

    The smallest visible cell becomes -1 and the largest +1 (a constant matrix: 0). The
    result is not a probability (a cell at -1 may hold half a row's mass): a display option.

    Args:
        pattern: (..., query, key); a masked array keeps its mask.
        hidden: bool broadcastable to ``pattern``, True where a key is hidden.

    Returns:
        float64 masked array, hidden cells masked.
    """
    p = np.ma.asarray(pattern).astype(np.float64)
    if p.ndim < 2:
        raise ValueError(f"pattern must be (..., query, key), got shape {p.shape}")
    m = np.ma.getmaskarray(p)
    if hidden is not None:
        m = m | np.broadcast_to(np.asarray(hidden, dtype=bool), p.shape)
    data = np.ma.getdata(p)
    lo = np.where(m, np.inf, data).min(axis=(-2, -1), keepdims=True)
    span = np.where(m, -np.inf, data).max(axis=(-2, -1), keepdims=True) - lo
    with np.errstate(invalid="ignore"):
        scaled = np.where(span > 0, 2 * (data - lo) / np.where(span > 0, span, 1) - 1, 0.0)
    return np.ma.MaskedArray(scaled, mask=m)


def end_self_attention(patterns: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The ``[end]`` token's attention to itself (token position length + 1).

    Returns:
        float64 (layer, batch, head).
    """
    lengths = np.asarray(lengths)
    p = _check_patterns(patterns, lengths.size, int(lengths.max(initial=0)) + 2)
    end = lengths + 1
    return np.moveaxis(p[:, np.arange(lengths.size), :, end, end], 0, 1).astype(np.float64)


def preview_scores(model: nn.Module, dataset: Dataset) -> np.ndarray:
    """The thesis' "preview": ``[end]``'s self-attention in the last layer, mean over heads.

    Returns:
        float64 (batch,).
    """
    return end_self_attention(attention_patterns(model, dataset), dataset.lengths)[-1].mean(-1)


def preview_auc(model: nn.Module, dataset: Dataset) -> float:
    """ROC AUC of :func:`preview_scores` as a score for membership (0.5: no information;
    below 0.5: informative the other way round)."""
    return roc_auc(preview_scores(model, dataset), dataset.labels)


def _check_scores(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    if s.shape != y.shape or np.isnan(s).any():
        raise ValueError(f"scores must be {y.size} numbers without NaN, got shape {s.shape}")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"labels must be 0/1, got values {np.unique(y)[:5].tolist()}")
    y = y.astype(bool)
    if y.all() or not y.any():
        raise ValueError(f"labels need both classes, got {int(y.sum())} of {y.size} positive")
    return s, y


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a random positive > that of a random negative) + P(equal) / 2.

    The Mann-Whitney statistic from average ranks, so ties count one half.

    Args:
        scores: (batch,) higher means "more likely positive".
        labels: (batch,) 0/1.
    """
    s, y = _check_scores(scores, labels)
    order = np.argsort(s, kind="stable")
    _, first, counts = np.unique(s[order], return_index=True, return_counts=True)
    ranks = np.empty(s.size)
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)
    n_pos = int(y.sum())
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * (y.size - n_pos)))


def roc_curve(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """False- and true-positive rates at every distinct threshold (a tie is one step).

    Returns:
        ``(fpr, tpr)`` float64, from (0, 0) to (1, 1).
    """
    s, y = _check_scores(scores, labels)
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]  # the end of every tie group
    return (np.r_[0.0, np.cumsum(~y)[last] / (~y).sum()],
            np.r_[0.0, np.cumsum(y)[last] / y.sum()])


def _initial(model: nn.Module) -> nn.Module:
    """The model as training started (initialisation is deterministic in the seed)."""
    if isinstance(model, ThesisClassifier):
        initial = ThesisClassifier(model.config, model.seeds[0])
    elif isinstance(model, Classifier) and model.n_models == 1:
        initial = Classifier(model.config, model.seeds)
    else:
        raise ValueError(f"model must be a single-model Classifier or a ThesisClassifier, "
                         f"got {model!r:.80}")
    return initial.to(next(model.parameters()).device)


def head_reset_accuracy(model: nn.Module, dataset: Dataset) -> float:
    """Accuracy with the classifier head back at its initial values, all else trained
    (a single-model ``Classifier`` or a ``ThesisClassifier``).

    The thesis read the head's small movement as "the head does not matter"; this asks the
    model. A copy is changed, never ``model``.
    """
    reset = _initial(model)
    state = model.state_dict()
    state.update({name: reset.state_dict()[name] for name in HEAD})
    reset.load_state_dict(state)
    return float((predict(reset, dataset) == dataset.labels).mean())


def head_movement(model: nn.Module) -> float:
    """Relative change ``||W - W0|| / ||W0||`` of the head (weight and bias together)."""
    initial, now = _initial(model).state_dict(), model.state_dict()
    w0 = torch.cat([initial[name].flatten() for name in HEAD]).double()
    w = torch.cat([now[name].flatten() for name in HEAD]).double()
    return float((w - w0).norm() / w0.norm())


@dataclass
class LongInputSummary:
    """What one head does on one long string, small enough to plot at 4,096 tokens.

    Attributes:
        n: real tokens (length + 2).
        offset_edges: int64 (bins + 1,) edges 1, 2, 4, ... of |key - query|; bin j holds
            distances in [edges[j], edges[j + 1]).
        offset_mass: float64 (2 bins + 1,) mean mass per query by signed offset bin: the
            farthest earlier keys first, the query itself in the middle, later keys last.
        uniform_mass: the same for uniform attention over the visible keys.
        partner_mass: float64 (n,) attention of every closer on its partner (NaN elsewhere and
            in a non-member).
        visible: int64 (n,) keys each query may see (uniform attention gives each 1 / visible).
        levels: int64 (n,) nesting level of every bracket's pair (1 = outermost; 0 for specials).
        partner_by_level: float64 (max level,) mean partner mass of the closers per level 1, 2, ...
        block_edges: int64 (blocks + 1,) token edges of the downsampled map.
        block_max: float64 (blocks, blocks) largest weight per block (thin diagonals such as
            partner attention survive the downsampling).
    """

    n: int
    offset_edges: np.ndarray
    offset_mass: np.ndarray
    uniform_mass: np.ndarray
    partner_mass: np.ndarray
    visible: np.ndarray
    levels: np.ndarray
    partner_by_level: np.ndarray
    block_edges: np.ndarray
    block_max: np.ndarray


def _offset_bins(offsets: np.ndarray, n_bins: int) -> np.ndarray:
    """Signed log2 bin of every offset: 0 -> n_bins, +d -> n_bins + 1 + floor(log2 d)."""
    a = np.abs(offsets)
    j = np.floor(np.log2(np.maximum(a, 1))).astype(np.int64)
    return np.where(offsets > 0, n_bins + 1 + j, np.where(offsets < 0, n_bins - 1 - j, n_bins))


def long_input_summary(pattern: np.ndarray, dataset: Dataset, index: int,
                       mask: str = "bidirectional", max_blocks: int = 256) -> LongInputSummary:
    """Summarise one head's (query, key) pattern of string ``index`` of ``dataset``.

    Args:
        pattern: (query, key), e.g. ``attention_patterns(model, dataset)[layer, index, head]``;
            pads beyond the string are cropped.
        dataset: the strings; partner and levels are those of string ``index`` (a member).
        mask: the model's mask, for the uniform baseline.
        max_blocks: the downsampled map has at most this many blocks a side.
    """
    _check_mask(mask)
    one = dataset.subset([index])
    n = int(one.lengths[0]) + 2
    p = np.asarray(pattern)
    if p.ndim != 2 or min(p.shape) < n:
        raise ValueError(f"pattern must be (query, key) with at least {n} positions, "
                         f"got shape {p.shape}")
    p = p[:n, :n].astype(np.float64)
    n_bins = max(1, math.ceil(math.log2(n)))
    diagonal = np.zeros(2 * n - 1)  # diagonal[d + n - 1]: mass at offset key - query = d
    for lo in range(0, n, _CHUNK):  # bounded temporaries: _CHUNK * n floats
        rows = p[lo:lo + _CHUNK]
        offsets = np.arange(n)[None, :] - np.arange(lo, lo + len(rows))[:, None] + n - 1
        diagonal += np.bincount(offsets.ravel(), rows.ravel(), minlength=2 * n - 1)
    d = np.arange(-(n - 1), n)
    if mask == "causal":  # query q sees keys 0..q, each with weight 1 / (q + 1)
        tail = np.cumsum((1.0 / np.arange(1, n + 1))[::-1])[::-1]  # sum over q >= j of 1/(q+1)
        uniform = np.where(d <= 0, tail[np.minimum(-d, n - 1)], 0.0)
    else:
        uniform = (n - np.abs(d)) / n
    bins = _offset_bins(d, n_bins)
    partner = partner_positions(one)[0, :n]
    closer = np.r_[False, (one.codes[0] & 1).astype(bool), False]
    rows = np.flatnonzero((partner >= 0) & closer)
    partner_mass = np.full(n, np.nan)
    partner_mass[rows] = p[rows, partner[rows]]
    heights = one.language.heights(one.codes, one.lengths)[0].astype(np.int64)
    levels = np.zeros(n, np.int64)
    levels[1:-1] = heights + (one.codes[0] & 1)  # an opener's height after, a closer's before
    counts = np.bincount(levels[rows], minlength=levels.max() + 1)[1:]
    sums = np.bincount(levels[rows], partner_mass[rows], minlength=levels.max() + 1)[1:]
    edges = np.unique(np.linspace(0, n, min(max_blocks, n) + 1).round().astype(np.int64))
    block_max = np.maximum.reduceat(np.maximum.reduceat(p, edges[:-1], 0), edges[:-1], 1)
    with np.errstate(invalid="ignore"):
        by_level = sums / counts
    return LongInputSummary(
        n=n, offset_edges=2 ** np.arange(n_bins + 1), partner_mass=partner_mass,
        offset_mass=np.bincount(bins, diagonal, minlength=2 * n_bins + 1) / n,
        uniform_mass=np.bincount(bins, uniform, minlength=2 * n_bins + 1) / n,
        visible=np.arange(1, n + 1) if mask == "causal" else np.full(n, n),
        levels=levels, partner_by_level=by_level, block_edges=edges, block_max=block_max)
