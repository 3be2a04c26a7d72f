"""The ablation grid: mask x positional encoding x readout x layers x k, many seeds, small models.

One *cell* is an architecture (:class:`GridCell`); one *record* is a cell trained from one seed
on the sound protocol (exact-uniform members, length-matched hard negatives of every kind,
disjoint train / validation / test strings) and evaluated on a hard test set (overall, per
negative kind, per length) and on a random-negative test set. :func:`run_grid` writes one
JSON line per (cell, seed) and resumes; :func:`summarise` turns records into per-cell rates and
intervals.

Why each cell is cheap (measured in ``benchmarks/bench_grid.py``): the data of a (k, seed) pair
is generated and tokenised once per process and shared by all 90 cells of that k; tokens are
padded once to ``n_ctx + 2`` so every step has the same shapes; batches are index draws from
pre-built tensors (no Python per item); evaluation is one forward pass per test set with
per-kind and per-length counts by ``numpy.bincount``; training stops as soon as the validation
accuracy reaches ``target_accuracy``; each worker process runs one torch thread.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dyckbook import data as D
from dyckbook.model import MASKS, POS_ENCODINGS, READOUTS, ModelConfig, TransformerClassifier
from dyckbook.negatives import HARD_KINDS
from dyckbook.tokenizer import PAD, DyckTokenizer

__all__ = [
    "CELL_SETS",
    "GridCell",
    "GridData",
    "GridSpec",
    "all_cells",
    "cells_named",
    "load_records",
    "make_grid_data",
    "order_blind_ceiling",
    "published_grid",
    "run_cell",
    "run_grid",
    "summarise",
    "t_interval",
]

LAYERS = (1, 2, 3)
KS = (1, 3)
TRAIN_NEGATIVES = ("hard", "hard+random")
SCHEDULES = ("constant", "cosine")
TEST_BALANCES = ("per_length", "overall")
_LEGACY = {"test_balance": "overall"}  # GridSpec fields added later: value of older records
GRID_GROUP = "06_ablation_grid"  # the notebook (result group) that runs the grid
SOLVED = 0.99  # hard-test accuracy that counts a seed as having learned the language
# seed-sequence tags: independent streams from one run seed
_DATA_STREAM, _SPLIT_STREAM, _RANDOM_STREAM, _INIT_STREAM, _ORDER_STREAM, _MIXED_STREAM = range(6)


def _derived_seed(*entropy: int) -> int:
    return int(np.random.SeedSequence(list(entropy)).generate_state(1)[0])


# ============================================================================================
# cells and spec
# ============================================================================================


@dataclass(frozen=True, order=True)
class GridCell:
    """One architecture of the grid (everything else comes from the :class:`GridSpec`)."""

    k: int = 1  # bracket types (Dyck-k)
    n_layers: int = 2  # encoder blocks
    mask: str = "bidirectional"  # "bidirectional" | "causal"
    pos_encoding: str = (
        "none"  # none | absolute (i/n) | absolute_ctx (i/n_ctx) | sinusoidal | learned
    )
    readout: str = "start"  # "start" | "end" | "mean"

    def __post_init__(self) -> None:
        for name, value in (("k", self.k), ("n_layers", self.n_layers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GridCell.{name} must be an int >= 1, got {value!r}")
        for name, allowed in (
            ("mask", MASKS),
            ("pos_encoding", POS_ENCODINGS),
            ("readout", READOUTS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"GridCell.{name} must be one of {allowed}, got {getattr(self, name)!r}"
                )

    @property
    def name(self) -> str:
        """Stable identifier, e.g. ``k1-L2-bidirectional-learned-start``."""
        return f"k{self.k}-L{self.n_layers}-{self.mask}-{self.pos_encoding}-{self.readout}"

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GridCell:
        """Inverse of :meth:`to_dict`."""
        return cls(**{f.name: data[f.name] for f in fields(cls)})

    @classmethod
    def from_name(cls, name: str) -> GridCell:
        """Inverse of :attr:`name`: ``"k3-L2-causal-learned-end"`` -> that cell.

        Raises:
            ValueError: naming ``name`` when it is not of the form ``k<k>-L<layers>-<mask>-<pos
                encoding>-<readout>`` or a part is not an allowed value.
        """
        parts = name.split("-") if isinstance(name, str) else []
        if (len(parts) != 5 or not parts[0][:1] == "k" or not parts[1][:1] == "L"
                or not parts[0][1:].isdigit() or not parts[1][1:].isdigit()):
            raise ValueError(
                f"cell name must look like 'k3-L2-causal-learned-end' "
                f"(k<k>-L<layers>-<mask>-<pos_encoding>-<readout>), got {name!r}"
            )
        return cls(int(parts[0][1:]), int(parts[1][1:]), parts[2], parts[3], parts[4])


def all_cells(ks: Sequence[int] = KS, layers: Sequence[int] = LAYERS) -> list[GridCell]:
    """Every cell: k x layers x mask x PE x readout (180 for the defaults), in a fixed order."""
    return [
        GridCell(k, n, m, p, r)
        for k, n, m, p, r in product(ks, layers, MASKS, POS_ENCODINGS, READOUTS)
    ]


def _reduced() -> list[GridCell]:
    # Every mask x PE x readout combination (30) at the thesis' depth (2 layers) for both k, plus
    # the depth question (1 and 3 layers) for the PEs that can see order at all ("none" is
    # order-blind or order-limited at any depth) and the readouts that are not constant:
    # 2 masks x 4 PEs x {end, mean} ... restricted to k = 1, where depth is the question.
    cells = [c for c in all_cells() if c.n_layers == 2]
    cells += [
        GridCell(1, n, m, p, r)
        for n in (1, 3)
        for m in MASKS
        for p in ("absolute", "learned")
        for r in ("end", "mean")
    ]
    return sorted(cells)


def _smoke() -> list[GridCell]:
    return [
        GridCell(1, 1, "bidirectional", "learned", "start"),
        GridCell(1, 1, "bidirectional", "none", "start"),
        GridCell(1, 1, "causal", "learned", "end"),
        GridCell(1, 1, "causal", "none", "start"),
    ]


CELL_SETS: dict[str, Callable[[], list[GridCell]]] = {
    "full": all_cells,
    "reduced": _reduced,
    "smoke": _smoke,
}


def cells_named(name: str) -> list[GridCell]:
    """A named cell set: ``"full"`` (180), ``"reduced"`` (76) or ``"smoke"`` (4).

    ``reduced``: all 30 mask x PE x readout combinations at 2 layers for k = 1 and k = 3 (60),
    plus 1 and 3 layers for k = 1 with both masks, PEs {absolute (i/n), learned} and readouts
    {end, mean} (16): the cells that answer "are two layers needed?" once order is visible.
    """
    if name not in CELL_SETS:
        raise ValueError(f"cells must be one of {sorted(CELL_SETS)}, got {name!r}")
    return CELL_SETS[name]()


@dataclass(frozen=True)
class GridSpec:
    """Everything shared by the cells of a grid: model size, data, training (CPU-feasible)."""

    d_model: int = 32  # residual stream width
    n_heads: int = 2  # attention heads per layer
    d_mlp: int = 64  # MLP hidden width
    dropout: float = 0.0  # off: small models on fresh data do not overfit in this budget
    norm: str = "post"  # LayerNorm placement (the thesis': post)
    min_length: int = 4  # shortest string (hard negatives exist from length 4)
    max_length: int = 16  # longest string; the model's n_ctx
    n_train: int = 8000  # training strings (half members)
    n_val: int = 500  # validation strings, for early stopping
    n_test: int = 2000  # hard test strings (disjoint from train and val)
    n_random_test: int = 1000  # random-negative test strings (unseen in train/val)
    # negatives of train/val: "hard" (the hard kinds only) or "hard+random" (random strings as
    # one more kind of the mixture: a model never shown unequal counts need not reject them)
    train_negatives: str = "hard+random"
    batch_size: int = 64  # training batch
    # draw each batch from strings of one length (picked in proportion to its count): no [pad]
    # tokens and the unmasked fused attention path, ~2x cheaper per step (bench_grid.py) -- but
    # off by default: measured, single-length batches learn less per step (lower hard accuracy
    # after the same number of steps), which ate most of the gain
    bucket: bool = False
    lr: float = 3e-3  # Adam's peak learning rate
    warmup_steps: int = 100  # linear warm-up steps
    schedule: str = "cosine"  # after warm-up: "constant" | "cosine" (decay to 0 at max_steps)
    grad_clip: float = 1.0  # clip the gradient's global norm to this (0: no clipping)
    max_steps: int = 1000  # optimiser steps at most
    eval_every: int = 50  # validation period in steps
    target_accuracy: float = 0.995  # stop once validation accuracy reaches this
    # test sets after removing strings seen in train/val: as many members as non-members at every
    # length ("per_length": length and symbol counts alone then give nothing on Dyck-1) or only
    # overall ("overall", the first full grid's protocol: short members, all seen in training,
    # vanish from the test set, so length becomes a cue; see order_blind_ceiling)
    test_balance: str = "per_length"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("bool", bool) and not isinstance(value, bool):
                raise ValueError(f"GridSpec.{f.name} must be a bool, got {value!r}")
            if f.type in ("int", int):
                low = 0 if f.name in ("warmup_steps", "n_random_test") else 1
                if isinstance(value, bool) or not isinstance(value, int) or value < low:
                    raise ValueError(f"GridSpec.{f.name} must be an int >= {low}, got {value!r}")
        if self.min_length > self.max_length or self.max_length < 4:
            raise ValueError(
                f"GridSpec needs 4 <= max_length and min_length <= max_length, got "
                f"min_length={self.min_length}, max_length={self.max_length}"
            )
        if self.train_negatives not in TRAIN_NEGATIVES:
            raise ValueError(
                f"GridSpec.train_negatives must be one of {TRAIN_NEGATIVES}, got "
                f"{self.train_negatives!r}"
            )
        if not 0 <= self.dropout < 1:
            raise ValueError(f"GridSpec.dropout must be in [0, 1), got {self.dropout!r}")
        if not self.lr > 0:
            raise ValueError(f"GridSpec.lr must be > 0, got {self.lr!r}")
        if self.test_balance not in TEST_BALANCES:
            raise ValueError(
                f"GridSpec.test_balance must be one of {TEST_BALANCES}, got {self.test_balance!r}"
            )
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f"GridSpec.schedule must be one of {SCHEDULES}, got {self.schedule!r}"
            )
        clip = self.grad_clip
        if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not clip >= 0:
            raise ValueError(f"GridSpec.grad_clip must be >= 0 (0: off), got {self.grad_clip!r}")
        if not 0 < self.target_accuracy <= 1:
            raise ValueError(
                f"GridSpec.target_accuracy must be in (0, 1], got {self.target_accuracy!r}"
            )
        if self.d_model % self.n_heads:
            raise ValueError(
                f"GridSpec.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GridSpec:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``."""
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"GridSpec.from_dict got unknown keys {unknown}")
        return cls(**data)

    @property
    def spec_hash(self) -> str:
        """12 hex digits identifying the spec (records of another spec are not resumed)."""
        # a field added after records were published is hashed only when it differs from the
        # value that reproduces those records, so they stay resumable under the old setting
        fields_ = {k: v for k, v in self.to_dict().items() if _LEGACY.get(k, object()) != v}
        text = json.dumps(fields_, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def learning_rate(self, step: int) -> float:
        """Adam's learning rate at optimiser step ``step`` (1-based): warm-up, then the schedule."""
        if self.warmup_steps and step <= self.warmup_steps:
            return self.lr * step / self.warmup_steps
        if self.schedule == "constant":
            return self.lr
        span = max(1, self.max_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        return self.lr * 0.5 * (1.0 + math.cos(math.pi * progress))

    def model_config(self, cell: GridCell, d_vocab: int) -> ModelConfig:
        """The :class:`ModelConfig` of ``cell`` under this spec."""
        return ModelConfig(
            d_vocab=d_vocab,
            n_ctx=self.max_length,
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_mlp=self.d_mlp,
            n_layers=cell.n_layers,
            dropout=self.dropout,
            mask=cell.mask,
            pos_encoding=cell.pos_encoding,
            readout=cell.readout,
            norm=self.norm,
        )


# ============================================================================================
# data: once per (k, seed), shared by every cell
# ============================================================================================


@dataclass
class _Split:
    tokens: torch.Tensor  # (batch, pos) int64, padded to n_ctx + 2
    labels: torch.Tensor  # (batch,) int64
    lengths: np.ndarray  # (batch,) int64
    kinds: np.ndarray  # (batch,) int64 index into GridData.kind_names


@dataclass
class GridData:
    """Pre-tokenised splits of one (k, seed): train, val, hard test, random test."""

    k: int
    seed: int
    kind_names: tuple[str, ...]
    train: _Split
    val: _Split
    hard: _Split
    random: _Split | None
    d_vocab: int
    seconds: float  # wall time spent generating and tokenising


def _split_by_class(
    dataset: D.DyckDataset, sizes: Sequence[int], rng: np.random.Generator
) -> list[np.ndarray]:
    """Disjoint index sets (no string in two of them), members and non-members split apart."""
    fractions = np.asarray(sizes, dtype=np.float64) / float(sum(sizes))
    parts: list[list[np.ndarray]] = [[] for _ in sizes]
    for label in (1, 0):
        members = np.flatnonzero(dataset.labels == label)
        for part, idx in enumerate(D.split_indices(dataset.subset(members), fractions, rng)):
            parts[part].append(members[idx])
    return [np.sort(np.concatenate(p)) for p in parts]


def _balanced_unseen(
    dataset: D.DyckDataset, seen: set[str], balance: str = "per_length"
) -> D.DyckDataset:
    """The strings of ``dataset`` not in ``seen``, with equally many members and non-members.

    Short members repeat most, so removing seen strings removes more members; re-balancing keeps
    the member share at 1/2 (the chance level of every constant answer). ``balance="per_length"``
    does so at every length (a length with no unseen member keeps no non-member either), so the
    length says nothing about the label; ``"overall"`` only over the whole set.
    """
    keep = np.array([i for i, s in enumerate(dataset.strings()) if s not in seen], dtype=np.int64)
    labels = dataset.labels[keep]
    if balance == "overall":
        groups = [np.ones(len(keep), dtype=bool)]
    else:
        lengths = dataset.lengths[keep]
        groups = [lengths == L for L in np.unique(lengths)]
    chosen = []
    for in_group in groups:
        pos, neg = keep[in_group & (labels == 1)], keep[in_group & (labels == 0)]
        each = min(len(pos), len(neg))
        chosen += [pos[:each], neg[:each]]
    return dataset.subset(np.sort(np.concatenate(chosen)))


def _tensors(
    dataset: D.DyckDataset,
    tokenizer: DyckTokenizer,
    width: int,
    kind_index: Mapping[str, int],
    what: str,
) -> _Split:
    n = len(dataset)
    if n == 0 or len(np.unique(dataset.labels)) < 2:
        raise ValueError(
            f"the {what} set has no members or no non-members unseen in training (max_length="
            f"{dataset.spec.max_length if dataset.spec else '?'} has too few distinct strings); "
            f"raise max_length or the split sizes"
        )
    codes, lengths = dataset.codes(np.arange(n))
    tokens = tokenizer.encode_codes(codes, lengths)
    if tokens.shape[1] < width:  # pad once to the model's full width: fixed step shapes
        tokens = F.pad(tokens, (0, width - tokens.shape[1]), value=1)
    kinds = np.array([kind_index[name] for name in dataset.kind_names], dtype=np.int64)
    return _Split(
        tokens=tokens,
        labels=torch.from_numpy(dataset.labels.astype(np.int64)),
        lengths=lengths.astype(np.int64),
        kinds=kinds[dataset.kind_codes],
    )


def make_grid_data(k: int, seed: int, spec: GridSpec) -> GridData:
    """Generate and tokenise the datasets of one (k, seed).

    Train and validation: members and length-matched negatives of ``spec.train_negatives``
    (a uniform mixture of the kinds available at each length). The hard test set: members and
    hard negatives only. Both come from one pool of ``n_train + n_val + n_test`` strings per
    negative protocol, split so that no string is in two parts (the hard test set is the third
    part of the hard pool, with strings seen in train or validation removed). The
    random-negative test set is generated separately and keeps only strings unseen in train
    and validation. Both test sets are then re-balanced to equally many members and
    non-members, so every constant answer scores exactly 1/2.
    """
    t0 = time.perf_counter()
    base = {
        "language": "dyck",
        "k": k,
        "min_length": spec.min_length,
        "max_length": spec.max_length,
    }
    sizes = [spec.n_train, spec.n_val, spec.n_test]
    full = D.generate_dataset(
        D.DatasetSpec(
            n=sum(sizes), negatives="hard", seed=_derived_seed(seed, k, _DATA_STREAM), **base
        )
    )
    rng = np.random.default_rng(_derived_seed(seed, k, _SPLIT_STREAM))
    parts = [full.subset(i) for i in _split_by_class(full, sizes, rng)]
    if spec.train_negatives == "hard+random":
        mixed = D.generate_dataset(
            D.DatasetSpec(
                n=sum(sizes),
                negatives=HARD_KINDS + ("random",),
                seed=_derived_seed(seed, k, _MIXED_STREAM),
                **base,
            )
        )
        train, val, _ = (mixed.subset(i) for i in _split_by_class(mixed, sizes, rng))
        seen = set(train.strings()) | set(val.strings())
        parts = [train, val, _balanced_unseen(parts[2], seen, spec.test_balance)]
    tokenizer = DyckTokenizer(full.language)
    width = spec.max_length + 2
    kind_names = ("positive", "random") + tuple(k for k in HARD_KINDS if k in full.kind_names)
    index = {name: i for i, name in enumerate(kind_names)}
    train, val, hard = (
        _tensors(p, tokenizer, width, index, what)
        for p, what in zip(parts, ("train", "validation", "hard test"))
    )
    random = None
    if spec.n_random_test:
        pool = D.generate_dataset(
            D.DatasetSpec(
                n=spec.n_random_test,
                negatives="random",
                seed=_derived_seed(seed, k, _RANDOM_STREAM),
                **base,
            )
        )
        seen = set(parts[0].strings()) | set(parts[1].strings())
        random = _tensors(
            _balanced_unseen(pool, seen, spec.test_balance), tokenizer, width, index, "random test"
        )
    return GridData(
        k=k,
        seed=seed,
        kind_names=kind_names,
        train=train,
        val=val,
        hard=hard,
        random=random,
        d_vocab=tokenizer.vocab_size,
        seconds=time.perf_counter() - t0,
    )


# ============================================================================================
# one cell
# ============================================================================================


@torch.inference_mode()
def _predict(model: TransformerClassifier, tokens: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    model.eval()
    out = torch.cat([model(tokens[i : i + chunk]).argmax(-1) for i in range(0, len(tokens), chunk)])
    model.train()
    return out


def _scores(
    model: TransformerClassifier, split: _Split, kind_names: Sequence[str]
) -> dict[str, Any]:
    hit = (_predict(model, split.tokens) == split.labels).numpy().astype(np.int64)
    n_kind = np.bincount(split.kinds, minlength=len(kind_names))
    ok_kind = np.bincount(split.kinds, weights=hit, minlength=len(kind_names))
    n_len = np.bincount(split.lengths)
    ok_len = np.bincount(split.lengths, weights=hit, minlength=len(n_len))
    return {
        "n": len(hit),
        "accuracy": float(hit.mean()),
        "per_kind": {
            kind_names[i]: float(ok_kind[i] / n_kind[i])
            for i in range(len(kind_names))
            if n_kind[i]
        },
        "n_per_kind": {kind_names[i]: int(n_kind[i]) for i in range(len(kind_names)) if n_kind[i]},
        "per_length": {str(L): float(ok_len[L] / n_len[L]) for L in np.flatnonzero(n_len)},
    }


def run_cell(
    cell: GridCell, seed: int, spec: GridSpec, data: GridData | None = None
) -> dict[str, Any]:
    """Train ``cell`` from ``seed`` and evaluate it: one grid record.

    Args:
        cell: the architecture.
        seed: seeds the data (with ``cell.k``), the initialisation and the batch order.
        spec: sizes and training settings.
        data: the (k, seed) data if already generated (must match ``cell.k`` and ``seed``).

    Returns:
        A JSON-serialisable dict: ``cell`` (its fields), ``name``, ``seed``, ``spec_hash``,
        ``n_params``, ``steps``, ``stopped_early``, ``val_accuracy``, ``hard`` and ``random``
        (``{"n", "accuracy", "per_kind", "n_per_kind", "per_length"}``), and ``seconds``
        (``data``, ``train``, ``eval``, ``total``; the only fields that vary between identical
        runs).
    """
    if not isinstance(cell, GridCell):
        raise ValueError(f"cell must be a GridCell, got {type(cell).__name__}")  # noqa: TRY004
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    t0 = time.perf_counter()
    data_seconds = 0.0
    if data is None:
        data = make_grid_data(cell.k, seed, spec)
        data_seconds = data.seconds
    elif (data.k, data.seed) != (cell.k, seed):
        raise ValueError(
            f"data is for (k, seed) = ({data.k}, {data.seed}), the cell needs ({cell.k}, {seed})"
        )
    config = spec.model_config(cell, data.d_vocab)
    init = torch.Generator().manual_seed(_derived_seed(seed, _INIT_STREAM))
    model = TransformerClassifier(config, generator=init)
    order = torch.Generator().manual_seed(_derived_seed(seed, _ORDER_STREAM))
    try:
        opt = torch.optim.Adam(model.parameters(), lr=spec.lr, fused=True)
    except (RuntimeError, TypeError, ValueError):  # no fused CPU kernel in this torch
        opt = torch.optim.Adam(model.parameters(), lr=spec.lr)
    tokens, labels = data.train.tokens, data.train.labels
    n = len(labels)
    lengths = torch.from_numpy(data.train.lengths)
    by_length = {int(L): torch.nonzero(lengths == L).flatten() for L in lengths.unique()}
    t1 = time.perf_counter()
    eval_seconds = 0.0
    stopped, steps, val_accuracy = False, 0, float("nan")
    model.train()
    with torch.random.fork_rng(devices=[]):  # dropout (if any) draws from a seeded global RNG
        torch.manual_seed(_derived_seed(seed, _INIT_STREAM, 1))
        for step in range(1, spec.max_steps + 1):
            for group in opt.param_groups:
                group["lr"] = spec.learning_rate(step)
            if spec.bucket:
                # the length of a uniformly drawn string, then a batch of that length
                length = int(lengths[torch.randint(n, (1,), generator=order)])
                pool = by_length[length]
                idx = pool[torch.randint(len(pool), (spec.batch_size,), generator=order)]
                batch_tokens = tokens[idx, : length + 2]
            else:
                idx = torch.randint(n, (min(spec.batch_size, n),), generator=order)
                batch_tokens = tokens[idx]
            loss = F.cross_entropy(model(batch_tokens), labels[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if spec.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
            opt.step()
            steps = step
            if step % spec.eval_every == 0 or step == spec.max_steps:
                te = time.perf_counter()
                val_accuracy = float(
                    (_predict(model, data.val.tokens) == data.val.labels).float().mean()
                )
                eval_seconds += time.perf_counter() - te
                if val_accuracy >= spec.target_accuracy:
                    stopped = step < spec.max_steps
                    break
    t2 = time.perf_counter()
    hard = _scores(model, data.hard, data.kind_names)
    random = _scores(model, data.random, data.kind_names) if data.random is not None else None
    t3 = time.perf_counter()
    return {
        "name": cell.name,
        "cell": cell.to_dict(),
        "seed": seed,
        "spec_hash": spec.spec_hash,
        "n_params": int(sum(p.numel() for p in model.parameters())),
        "steps": steps,
        "stopped_early": stopped,
        "val_accuracy": val_accuracy,
        "hard": hard,
        "random": random,
        "seconds": {
            "data": data_seconds,
            "train": t2 - t1 - eval_seconds,
            "eval": eval_seconds + (t3 - t2),
            "total": data_seconds + time.perf_counter() - t0,
        },
    }


# ============================================================================================
# the grid: many cells, many seeds, one JSON line each, resumable, parallel
# ============================================================================================


def load_records(
    path: str | os.PathLike[str], spec: GridSpec | None = None
) -> list[dict[str, Any]]:
    """Records of a JSON-lines file (only those of ``spec``, if given); [] if it does not exist.

    A truncated last line (an interrupted write) is ignored.
    """
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if spec is None or record.get("spec_hash") == spec.spec_hash:
            out.append(record)
    return out


_WORKER_DATA: dict[tuple[int, int], GridData] = {}


def _init_worker(num_threads: int) -> None:
    torch.set_num_threads(num_threads)


def _work(task: tuple[dict[str, Any], int, dict[str, Any]]) -> dict[str, Any]:
    """Run one (cell, seed) in a worker, reusing the worker's data for the same (k, seed)."""
    cell_dict, seed, spec_dict = task
    cell, spec = GridCell.from_dict(cell_dict), GridSpec.from_dict(spec_dict)
    key = (cell.k, seed)
    fresh = key not in _WORKER_DATA
    if fresh:
        _WORKER_DATA.clear()  # tasks arrive grouped by (k, seed): keep only the current one
        _WORKER_DATA[key] = make_grid_data(cell.k, seed, spec)
    record = run_cell(cell, seed, spec, _WORKER_DATA[key])
    if fresh:  # charge the shared data generation to the first cell that needed it
        record["seconds"]["data"] = _WORKER_DATA[key].seconds
        record["seconds"]["total"] += _WORKER_DATA[key].seconds
    return record


def run_grid(
    spec: GridSpec,
    cells: Sequence[GridCell],
    seeds: Sequence[int],
    jobs: int = 1,
    out_path: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
    threads_per_job: int = 1,
) -> list[dict[str, Any]]:
    """Train every (cell, seed) not yet in ``out_path`` and return all their records.

    Args:
        spec: the grid's shared settings (records of another spec in the file are ignored).
        cells: the cells to run.
        seeds: the seeds of every cell.
        jobs: worker processes (1: run in this process). Workers are spawned, each with
            ``threads_per_job`` torch threads; tasks are ordered by (k, seed) so that a worker
            generates each (k, seed) dataset once.
        out_path: JSON-lines file: existing records of this spec are kept and skipped, new ones
            appended (one line each, flushed as it finishes). None: nothing written.
        progress: called as ``progress(done, total, record)`` after each new record.
        threads_per_job: torch threads per worker (and in this process when ``jobs`` is 1).

    Returns:
        One record per requested (cell, seed), in the order of ``cells`` then ``seeds``.
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    cells = list(cells)
    seeds = [int(s) for s in seeds]
    for cell in cells:
        if not isinstance(cell, GridCell):
            raise ValueError(f"cells must hold GridCell objects, got {type(cell).__name__}")  # noqa: TRY004
    done = {(r["name"], r["seed"]): r for r in (load_records(out_path, spec) if out_path else [])}
    todo = sorted(
        {(c, s) for c in cells for s in seeds if (c.name, s) not in done},
        key=lambda cs: (cs[0].k, cs[1], cs[0]),
    )
    handle = None
    if out_path is not None and todo:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        handle = open(out_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in finally

    def keep(record: dict[str, Any], i: int) -> None:
        done[(record["name"], record["seed"])] = record
        if handle is not None:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()
        if progress is not None:
            progress(i, len(todo), record)

    try:
        tasks = [(c.to_dict(), s, spec.to_dict()) for c, s in todo]
        if jobs == 1 or len(tasks) <= 1:
            old = torch.get_num_threads()
            torch.set_num_threads(threads_per_job)
            try:
                for i, task in enumerate(tasks, 1):
                    keep(_work(task), i)
            finally:
                torch.set_num_threads(old)
                _WORKER_DATA.clear()
        else:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor, as_completed

            # spawn, not fork: forking a process whose torch/OpenMP threads are running can hang
            with ProcessPoolExecutor(
                max_workers=jobs,
                mp_context=mp.get_context("spawn"),
                initializer=_init_worker,
                initargs=(threads_per_job,),
            ) as pool:
                futures = [pool.submit(_work, task) for task in tasks]
                for i, future in enumerate(as_completed(futures), 1):
                    keep(future.result(), i)
    finally:
        if handle is not None:
            handle.close()
    return [done[(c.name, s)] for c in cells for s in seeds]


def _check_labelled(tokens: torch.Tensor, labels: torch.Tensor) -> None:
    if tokens.dim() != 2 or labels.shape != tokens.shape[:1]:
        raise ValueError(
            f"tokens must be (batch, pos) and labels (batch,), got {tuple(tokens.shape)} and "
            f"{tuple(labels.shape)}"
        )


def _count_groups(tokens: torch.Tensor) -> np.ndarray:
    """Group index of every row: rows with equal token counts (padding included) share one."""
    t = tokens.numpy()
    counts = np.stack([(t == v).sum(axis=1) for v in range(int(t.max()) + 1)], axis=1)
    _, group = np.unique(counts, axis=0, return_inverse=True)
    return group.reshape(-1)


def order_blind_ceiling(tokens: torch.Tensor, labels: torch.Tensor) -> float:
    """The best accuracy any order-blind classifier can reach on a labelled token set.

    A classifier that sees only the multiset of tokens (a bidirectional encoder without
    positional information, by the permutation argument of the book) gives one answer for all
    strings with the same token counts, padding included (so the length is known too). The best
    it can do is the majority label of each group of equal counts. The vote is fitted to the set
    itself, so this is an upper bound (tight when the groups are large, loose when many groups
    hold a string or two, as for Dyck-3: see :func:`order_blind_held_out` for what counts
    predict on strings they were not fitted to).

    Args:
        tokens: (batch, pos) int64 token ids.
        labels: (batch,) int64 labels.

    Returns:
        The accuracy of the per-group majority vote (NaN for an empty set).
    """
    _check_labelled(tokens, labels)
    if len(labels) == 0:
        return math.nan
    group = _count_groups(tokens)
    y = labels.numpy().astype(np.int64)
    members = np.bincount(group, weights=y)
    sizes = np.bincount(group)
    return float(np.maximum(members, sizes - members).sum() / len(y))


def order_blind_held_out(
    fit_tokens: torch.Tensor, fit_labels: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor
) -> float:
    """What token counts fitted on one labelled set predict about another, independent one.

    The per-group majority label of the fitting set (as in :func:`order_blind_ceiling`: groups of
    equal token counts, padding included) predicts the labels of the scored set; a string whose
    group is tied or absent in the fitting set scores 1/2 (a coin). Unlike the ceiling this is not
    inflated by small groups: with two independent samples of one protocol it is near 1/2 when
    counts and length carry no signal about membership, and near the ceiling when they do and the
    groups are large. (Splitting one set in halves instead would be biased below 1/2 where every
    group is exactly balanced: the half with more members leaves the other half with fewer.)

    Args:
        fit_tokens: (batch, pos) int64 token ids of the set the vote is fitted to.
        fit_labels: (batch,) int64 labels of that set.
        tokens: (batch', pos') int64 token ids of the scored set (``pos'`` may differ).
        labels: (batch',) int64 labels of the scored set.

    Returns:
        The accuracy of the fitted vote on the scored set (NaN when either set is empty).
    """
    _check_labelled(fit_tokens, fit_labels)
    _check_labelled(tokens, labels)
    if len(fit_labels) == 0 or len(labels) == 0:
        return math.nan
    width = max(fit_tokens.shape[1], tokens.shape[1])
    vocab = int(max(fit_tokens.max(), tokens.max())) + 1
    both = np.concatenate(
        [_padded_counts(fit_tokens, width, vocab), _padded_counts(tokens, width, vocab)]
    )
    _, group = np.unique(both, axis=0, return_inverse=True)
    group = group.reshape(-1)
    n_fit = len(fit_labels)
    y_fit = fit_labels.numpy().astype(np.int64)
    members = np.bincount(group[:n_fit], weights=y_fit, minlength=int(group.max()) + 1)
    others = np.bincount(group[:n_fit], minlength=int(group.max()) + 1) - members
    vote = np.sign(members - others)[group[n_fit:]]  # +1 member, -1 non-member, 0 tie or unseen
    truth = 2 * labels.numpy().astype(np.int64) - 1
    return float(np.where(vote == 0, 0.5, vote == truth).mean())


def _padded_counts(tokens: torch.Tensor, width: int, vocab: int) -> np.ndarray:
    """Token counts per row over ``vocab`` ids; columns a narrower batch lacks count as padding."""
    t = tokens.numpy()
    counts = np.stack([(t == v).sum(axis=1) for v in range(vocab)], axis=1)
    counts[:, PAD] += width - t.shape[1]
    return counts


def published_grid(root: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The published ablation-grid run with the most records (the full grid once it has run).

    Reads the run's ``summary.json`` and ``grid_summary.json``, which hold only records of the
    run's own spec (``grid_records.jsonl`` may also keep records of earlier specs, for resuming).

    Returns:
        None when no grid run is published in the indexed profile (nor excluded by it and
        published by another, see :func:`dyckbook.runner.external_runs`); otherwise ``{"run",
        "cells" (rows of :func:`summarise`), "cell_set", "seeds", "n_records", "spec",
        "params"}``.
    """
    from dyckbook import results as R

    best: dict[str, Any] | None = None
    for rec in R.collect_results(GRID_GROUP, root):
        rdir = R.run_results_dir(GRID_GROUP, rec["run"], root)
        try:
            meta = json.loads((rdir / "summary.json").read_text(encoding="utf-8"))
            cells = json.loads((rdir / "grid_summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        found = {"run": rec["run"], "cells": cells, "cell_set": meta.get("cells"),
                 "seeds": meta.get("seeds", []), "n_records": int(meta.get("n_records", 0)),
                 "spec": meta.get("spec", {}), "params": rec["params"]}
        if best is None or found["n_records"] > best["n_records"]:
            best = found
    return best


# ============================================================================================
# summary
# ============================================================================================


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval of the mean: ``(mean, low, high)``.

    ``mean +- t_{(1+level)/2, n-1} * sd / sqrt(n)`` with the sample standard deviation (ddof 1);
    not clipped to [0, 1]. One value gives ``(value, nan, nan)``; none gives three NaNs.
    """
    from scipy import stats

    x = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) == 1:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf((1 + level) / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return mean, mean - half, mean + half


def summarise(
    records: Iterable[Mapping[str, Any]], solved: float = SOLVED, level: float = 0.95
) -> list[dict[str, Any]]:
    """Per cell: how many seeds learned the language, and mean accuracies with intervals.

    Args:
        records: grid records (from :func:`run_grid` or :func:`load_records`).
        solved: hard-test accuracy at or above which a seed counts as solved (default 0.99).
        level: confidence level of the t intervals (:func:`t_interval`).

    Returns:
        One dict per cell, sorted by cell: the cell's fields, ``name``, ``n_seeds``,
        ``frac_solved`` (share of seeds with hard accuracy >= ``solved``), ``hard`` and
        ``random`` as ``{"mean", "low", "high"}``, ``per_kind`` ``{kind: {"mean", "low",
        "high"}}`` on the hard test set (``positive`` included), ``steps`` (mean) and
        ``seconds`` (mean total per record).
    """
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        groups[record["name"]].append(record)

    def interval(values: Sequence[float]) -> dict[str, float]:
        mean, low, high = t_interval(values, level)
        return {"mean": mean, "low": low, "high": high}

    out = []
    for name, group in groups.items():
        hard = [r["hard"]["accuracy"] for r in group]
        kinds = sorted({k for r in group for k in r["hard"]["per_kind"]})
        rand = [r["random"]["accuracy"] for r in group if r.get("random")]
        out.append(
            {
                **group[0]["cell"],
                "name": name,
                "n_seeds": len(group),
                "frac_solved": float(np.mean([a >= solved for a in hard])),
                "hard": interval(hard),
                "random": interval(rand),
                "per_kind": {
                    k: interval(
                        [r["hard"]["per_kind"][k] for r in group if k in r["hard"]["per_kind"]]
                    )
                    for k in kinds
                },
                "steps": float(np.mean([r["steps"] for r in group])),
                "seconds": float(np.mean([r["seconds"]["total"] for r in group])),
            }
        )
    return sorted(out, key=lambda s: GridCell.from_dict(s))


# ============================================================================================
# figures and tables
# ============================================================================================


def grid_matrix(
    summary: Sequence[Mapping[str, Any]],
    k: int,
    n_layers: int,
    value: Callable[[Mapping[str, Any]], float],
) -> tuple[np.ndarray, list[str], list[str]]:
    """One panel of the grid: ``(values (mask x readout, PE), row labels, column labels)``.

    Cells absent from ``summary`` are NaN.
    """
    rows = [(m, r) for m in MASKS for r in READOUTS]
    out = np.full((len(rows), len(POS_ENCODINGS)), np.nan)
    for s in summary:
        if s["k"] == k and s["n_layers"] == n_layers:
            out[rows.index((s["mask"], s["readout"])), POS_ENCODINGS.index(s["pos_encoding"])] = (
                value(s)
            )
    labels = [f"{'bidir' if m == 'bidirectional' else m} / {r}" for m, r in rows]
    return out, labels, list(POS_ENCODINGS)


def plot_grid(
    summary: Sequence[Mapping[str, Any]], value: str = "frac_solved", title: str | None = None
) -> Any:
    """Heatmaps of the grid: one panel per (k, layers) present; rows mask x readout, columns PE.

    Args:
        summary: rows of :func:`summarise`.
        value: ``"frac_solved"`` (share of seeds >= 99% on hard negatives) or ``"hard"`` (mean
            hard-test accuracy).
        title: figure title.

    Returns:
        A matplotlib Figure (never shown); cells not run are grey.
    """
    import matplotlib.pyplot as plt

    getters = {"frac_solved": lambda s: s["frac_solved"], "hard": lambda s: s["hard"]["mean"]}
    if value not in getters:
        raise ValueError(f"value must be one of {sorted(getters)}, got {value!r}")
    panels = sorted({(s["k"], s["n_layers"]) for s in summary})
    if not panels:
        raise ValueError("summary is empty: nothing to plot")
    ks = sorted({k for k, _ in panels})
    layers = sorted({n for _, n in panels})
    vmin = 0.0 if value == "frac_solved" else 0.5
    fig, axes = plt.subplots(
        len(ks),
        len(layers),
        figsize=(3.4 * len(layers) + 1.6, 3.1 * len(ks)),
        squeeze=False,
        sharex=True,
        sharey=True,
        constrained_layout=True,
    )
    cmap = plt.get_cmap("viridis").with_extremes(bad="#d9d9d9")
    image = None
    for i, k in enumerate(ks):
        for j, n in enumerate(layers):
            ax = axes[i][j]
            matrix, rows, cols = grid_matrix(summary, k, n, getters[value])
            image = ax.imshow(
                np.ma.masked_invalid(matrix), cmap=cmap, vmin=vmin, vmax=1.0, aspect="auto"
            )
            for (r, c), v in np.ndenumerate(matrix):
                if np.isfinite(v):
                    ax.text(
                        c,
                        r,
                        f"{v:.2f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="black" if v > vmin + 0.6 * (1 - vmin) else "white",
                    )
            ax.set_xticks(range(len(cols)), cols, rotation=40, ha="right", fontsize=8)
            ax.set_yticks(range(len(rows)), rows, fontsize=8)
            ax.axhline(2.5, color="white", lw=1.5)  # bidirectional above, causal below
            ax.set_title(f"Dyck-{k}, {n} layer{'s' if n > 1 else ''}", fontsize=9)
    label = (
        "share of seeds >= 99% on hard negatives"
        if value == "frac_solved"
        else "mean accuracy on the hard test set"
    )
    fig.colorbar(image, ax=axes, shrink=0.8, label=label)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
