"""How well a sequence model completes Dyck prefixes: exact match, where errors and attention fall,
and per-item scores beside the order-blind references (the completion chapter's measures).

The models are ``nn.seq2seq``'s; this module scores them, as ``experiment.evaluate`` scores the
classifiers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dyckbook.data.completion import CompletionSet, check_items, open_positions
from dyckbook.data.languages import Dyck
from dyckbook.data.vocab import EOS, N_SPECIAL, SEQ_PAD
from dyckbook.experiment.evaluate import Score
from dyckbook.nn import tokenizer
from dyckbook.nn.seq2seq import CompletionTask, SequenceModel, greedy_decode, source_tokens

__all__ = ["ItemScores", "evaluate_completions", "score_items"]


def _table(keys: np.ndarray, ok: np.ndarray) -> dict[int, list[int]]:
    """``{key: [n, correct]}`` over the distinct keys."""
    return {int(key): [int((keys == key).sum()), int(ok[keys == key].sum())]
            for key in np.unique(keys)}


def evaluate_completions(model: SequenceModel, data: CompletionSet, batch_size: int = 500
                         ) -> tuple[Score, dict[str, Any]]:
    """Exact match of a single model's greedy completions, and where errors and attention fall.

    Returns:
        ``(score, measures)``. The :class:`~dyckbook.evaluate.Score` counts exact matches
        (completion and ``<eos>``) by prefix length (``per_length``), completion length
        (``per_depth``) and regime (``per_kind``). ``measures``: ``per_position`` ``{j: [n,
        correct]}`` teacher-forced accuracy of output j (j = completion length: its ``<eos>``);
        ``per_max_depth`` exact match by the prefix's deepest nesting; ``distinct_outputs``
        how many different completions the model gave (1: it ignores its input); encoder–decoder
        only, ``cross_attention``: the attention each closer's query puts on the opener it
        closes, ``share`` (layer, head) means, ``best`` the [layer, head] with the largest and,
        for it, ``by_depth`` (opener's level, 1 = outermost) and ``by_distance`` (symbols from
        the opener to the prefix's end, 1 = last) as ``{key: [n, mean share]}``.
    """
    if model.n_models != 1:
        raise ValueError(f"evaluate_completions needs a single model, got {model.n_models}; "
                         f"use split()")
    task, width = CompletionTask(), int(data.lengths.max(initial=0))
    device = next(model.parameters()).device  # decoded there; ids checked here first
    exact, hits = np.zeros(len(data), bool), np.zeros((2, width + 2), np.int64)
    shares, depth, distance, outputs = [], [], [], set()
    opened = open_positions(data.language, data.codes, data.lengths)
    for start in range(0, len(data), batch_size):
        rows = np.arange(start, min(start + batch_size, len(data)))
        part = task.tensors(data.subset(rows), width)
        batch = task.batch(part, torch.arange(rows.size)[None])
        tokenizer.check_ids(batch["source"], model.config.d_vocab, "source")
        labels = batch["labels"][0]  # (batch, pos)
        out = greedy_decode(model, tokenizer.to_device(batch["source"][0], device),
                            labels.shape[1]).cpu()
        out = F.pad(out, (0, labels.shape[1] - out.shape[1]), value=SEQ_PAD)
        exact[rows] = (out == labels).all(-1).numpy()
        outputs.update(tuple(row[row != SEQ_PAD].tolist()) for row in out)
        with torch.inference_mode():
            logits, cache = model.run_with_cache(
                *(tokenizer.to_device(batch[key][0], device) for key in ("source", "target")),
                lambda name: "cross_attn.hook_pattern" in name)
            logits, cache = logits.cpu(), {name: t.cpu() for name, t in cache.items()}
        real = (labels != SEQ_PAD).numpy()
        hits[0, :real.shape[1]] += real.sum(0)
        hits[1, :real.shape[1]] += ((logits.argmax(-1) == labels).numpy() & real).sum(0)
        if cache:
            where = opened[rows, :labels.shape[1] - 1]  # (batch, pos - 1): partner of output j
            r, j = np.nonzero(where >= 0)
            pattern = torch.stack([cache[f"blocks.{i}.cross_attn.hook_pattern"]
                                   for i in range(len(cache))], -1)  # (batch, head, q, k, layer)
            pick = (torch.from_numpy(r), slice(None), torch.from_numpy(j),
                    torch.from_numpy(where[r, j] + 1))  # source pos = prefix pos + 1 (<bos>)
            shares.append(pattern[pick].transpose(1, 2).numpy())  # (closers, layer, head)
            depth.append(part["target_lengths"].numpy()[r] - j)
            distance.append(data.lengths[rows][r] - where[r, j])
    keys = np.arange(width + 2)[hits[0] > 0]
    measures: dict[str, Any] = {
        "per_position": {int(j): [int(hits[0, j]), int(hits[1, j])] for j in keys},
        "per_max_depth": _table(data.language.max_depths(data.codes, data.lengths), exact),
        "distinct_outputs": len(outputs)}
    if shares:
        share = np.concatenate(shares)  # (closers, layer, head)
        mean = share.mean(0)
        layer, head = (int(i) for i in np.unravel_index(np.argmax(mean), mean.shape))
        best, depth, distance = share[:, layer, head], np.concatenate(depth), np.concatenate(
            distance)
        measures["cross_attention"] = {
            "share": mean.tolist(), "best": [layer, head],
            **{name: {int(v): [int((key == v).sum()), float(best[key == v].mean())]
                      for v in np.unique(key)}
               for name, key in (("by_depth", depth), ("by_distance", distance))}}
    score = Score(n=len(data), correct=int(exact.sum()), per_length=_table(data.lengths, exact),
                  per_kind={data.regime: [len(data), int(exact.sum())]},
                  per_depth=_table(data.depths(), exact))
    return score, measures


# ------------------------------------------------------------------ scoring (prefix, target) items
@dataclass
class ItemScores:
    """Exact match of one completer on a list of ``(prefix, target)`` items, item by item.

    Attributes:
        score: a :class:`~dyckbook.evaluate.Score`: ``n``, ``correct``, ``interval`` (Wilson,
            95%), ``per_length`` (prefix length), ``per_depth`` (target length), ``per_kind``.
        correct: bool (n,): item i completed exactly.
        predictions: the completion given for each item, as text without spaces (a model's
            special tokens shown as ``?``; ``…`` after one that did not end in time).
    """

    score: Score
    correct: np.ndarray
    predictions: list[str]

    @property
    def accuracy(self) -> float:
        return self.score.accuracy

    @property
    def interval(self) -> tuple[float, float]:
        return self.score.interval

    @property
    def missed(self) -> list[int]:
        """Indices of the items not completed exactly, in order."""
        return np.flatnonzero(~self.correct).tolist()


def _model_predictions(model: SequenceModel, prefixes: list[str], targets: list[str],
                       batch_size: int) -> tuple[list[str], np.ndarray]:
    """Greedy completions of a single model, and whether each is its target then ``<eos>``;
    each batch decodes up to its longest target + 1 tokens, as in :func:`evaluate_completions`."""
    alphabet = Dyck(model.config.k).alphabet
    longest = max(map(len, prefixes))
    if longest > model.config.n_ctx:
        raise ValueError(f"a prefix of length {longest} is longer than the model's n_ctx "
                         f"({model.config.n_ctx})")
    symbols = {N_SPECIAL + c: s for c, s in enumerate(alphabet.symbols)}
    predictions, exact = [], np.zeros(len(prefixes), bool)
    for start in range(0, len(prefixes), batch_size):
        rows = range(start, min(start + batch_size, len(prefixes)))
        codes, lengths = alphabet.encode([prefixes[i] for i in rows])
        steps = min(max(len(targets[i]) for i in rows) + 1, model.config.n_ctx + 1)
        out = greedy_decode(model, source_tokens(codes, lengths, codes.shape[1]), steps)
        for i, row in zip(rows, out.tolist()):
            ended = EOS in row
            row = row[:row.index(EOS)] if ended else row
            text = "".join(symbols.get(t, "?") for t in row)
            predictions.append(text if ended else text + "…")
            exact[i] = ended and text == targets[i]
    return predictions, exact


def score_items(model: SequenceModel | Callable[[list[str]], Sequence[str]],
                items: Sequence[tuple[str, str]], kind: str = "bbh",
                batch_size: int = 500) -> ItemScores:
    """Exact match of a completer on ``(prefix, target)`` items (e.g. ``completion.to_items`` of
    ``results.read_bigbench``'s set), with a Wilson interval and every item's outcome.

    Args:
        model: a single sequence model (:func:`build_seq2seq`; greedy decoding, exact = its
            target then ``<eos>``, as :func:`evaluate_completions` counts), or a function from
            the list of all prefixes to their completions as text (spaces are ignored).
        items: ``(prefix, target)`` str pairs over the model's symbols (``k`` pairs; 4 for a
            function); errors name the item.
        kind: the ``per_kind`` key of the score.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if isinstance(model, SequenceModel):
        if model.n_models != 1:
            raise ValueError(f"score_items needs a single model, got {model.n_models}; "
                             f"use split()")
        items = check_items(items, model.config.k)
    elif callable(model):
        items = check_items(items, 4)
    else:
        raise ValueError(f"model must be a sequence model or a function of the prefixes, got "
                         f"{type(model).__name__}")
    prefixes, targets = [p for p, _ in items], [t for _, t in items]
    if not items:
        predictions, exact = [], np.zeros(0, bool)
    elif isinstance(model, SequenceModel):
        predictions, exact = _model_predictions(model, prefixes, targets, batch_size)
    else:
        given = model(list(prefixes))
        if isinstance(given, str) or len(given) != len(items):
            raise ValueError(f"model gave {len(given)} completions for {len(items)} prefixes"
                             if not isinstance(given, str) else
                             "model must return one completion per prefix, got one str")
        predictions = []
        for i, text in enumerate(given):
            if not isinstance(text, str):
                raise ValueError(f"item {i}: the model's completion must be a str, got "
                                 f"{type(text).__name__}")
            predictions.append("".join(text.split()))
        exact = np.array([p == t for p, t in zip(predictions, targets)], bool)
    lengths = np.array([len(p) for p in prefixes], np.int64)
    depths = np.array([len(t) for t in targets], np.int64)
    score = Score(n=len(items), correct=int(exact.sum()), per_length=_table(lengths, exact),
                  per_kind={kind: [len(items), int(exact.sum())]},
                  per_depth=_table(depths, exact))
    return ItemScores(score, exact, predictions)
