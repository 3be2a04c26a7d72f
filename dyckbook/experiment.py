"""The experiment pipeline shared by the experiment notebooks: parameters, data, model, training, results."""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dyckbook import data as D
from dyckbook.baselines import first_character_rule, first_symbol_codes
from dyckbook.evaluate import evaluate, validate_metrics, write_metrics_json
from dyckbook.model import MASKS, POS_ENCODINGS, READOUTS, ModelConfig, TransformerClassifier
from dyckbook.results import resolve, write_json
from dyckbook.tokenizer import DyckTokenizer
from dyckbook.train import TrainConfig, TrainResult, select_device, train

__all__ = [
    "ExperimentData",
    "ExperimentParams",
    "assemble_metrics",
    "bin_per_length",
    "data_summary",
    "distinct_negatives",
    "evaluate_splits",
    "first_character_rule",
    "first_character_rule_accuracy",
    "logit_margins",
    "make_data",
    "make_loaders",
    "make_model",
    "markdown_table",
    "padding_fraction",
    "plot_model_vs_rule",
    "save_figure",
    "set_threads",
    "time_passes",
    "train_model",
    "verdict",
    "write_results",
]

NEGATIVE_CHOICES = ("random", "hard", "thesis_literal")
DEVICES = ("cpu", "cuda", "mps", "auto")
# Seed-sequence tags: each dataset gets its own stream derived from the run's seed.
_TRAIN_STREAM, _TEST_STREAM, _HARD_STREAM, _SPLIT_STREAM, _ORDER_STREAM = range(5)
# Candidates drawn per requested hard-test string: strings seen in training are removed and the
# classes balanced afterwards, which needs a margin for short lengths where most strings repeat.
_HARD_POOL_FACTOR = 4


def _derived_seed(seed: int, stream: int) -> int:
    """A 32-bit seed for one data stream of a run (independent streams from one run seed)."""
    return int(np.random.SeedSequence([seed, stream]).generate_state(1)[0])


def _int(name: str, value: Any, minimum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")  # noqa: TRY004
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")


def _number(name: str, value: Any, low: float, high: float, open_low: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")  # noqa: TRY004
    if not (low < value <= high if open_low else low <= value <= high):
        bracket = "(" if open_low else "["
        raise ValueError(f"{name} must lie in {bracket}{low}, {high}], got {value!r}")


def _choice(name: str, value: Any, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {tuple(allowed)}, got {value!r}")


# ============================================================================================
# parameters
# ============================================================================================


@dataclass(frozen=True)
class ExperimentParams:
    """The flat papermill parameters of an experiment notebook, validated.

    Field names equal the parameter names in ``notebooks/experiments.yml``; the defaults are the
    thesis' experiment 1 (the manifest's notebook-level defaults).
    """

    experiment: int = 1  # thesis experiment number (Tables 4.2, 5.1, 5.2)
    seed: int = 0  # seeds data generation, initialisation and shuffling
    k: int = 1  # bracket types (Dyck-k)
    n_layers: int = 2  # encoder blocks
    d_model: int = 256  # residual stream width
    d_mlp: int = 512  # MLP hidden width (the thesis' d_ff)
    n_heads: int = 1  # attention heads per layer
    dropout: float = 0.1  # dropout probability
    mask: str = "bidirectional"  # "bidirectional" | "causal"
    pos_encoding: str = "none"  # none | absolute (i/n) | absolute_ctx | sinusoidal | learned
    readout: str = "start"  # "start" (the thesis) | "end" | "mean"
    n_ctx: int = 16  # longest string the model accepts (specials excluded)
    lr: float = 1e-5  # Adam learning rate
    epochs: int = 20  # passes over the training split
    batch_size: int = 32  # training batch
    val_batch_size: int = 8  # validation batch (speed only)
    test_batch_size: int = 4  # test batch (speed only)
    n_train: int = 8000  # training strings
    n_val: int = 1200  # validation strings
    n_test: int = 800  # test strings (random-negative kind, like training)
    min_length: int = 0  # shortest training/validation string (inclusive)
    max_length: int = 16  # longest training/validation string (inclusive)
    test_min_length: int = 0  # shortest test string
    test_max_length: int = 16  # longest test string
    positive_fraction: float = 0.5  # share of members in every split
    negatives: str = "random"  # negative kind of train/val/test: random | hard | thesis_literal
    hard_negatives: str = "hard"  # negative kind of the extra hard test set
    n_hard_test: int = 2000  # requested size of the hard test set (0: none)
    device: str = "cpu"  # cpu | cuda | mps | auto
    bucket: bool = False  # batch strings of similar length together (data.LengthBucketSampler)
    length_bin: int = 1  # width of the length bins in per-length plots (1: every length)
    run_name: str = "interactive"  # injected by the runner
    results_dir: str = "book/results/interactive"  # injected by the runner (root-relative)
    num_threads: int | None = None  # torch threads (injected by the runner; None: unchanged)

    def __post_init__(self) -> None:
        for name in ("experiment", "seed"):
            _int(name, getattr(self, name), 0)
        for name in ("k", "n_layers", "d_model", "d_mlp", "n_heads", "n_ctx", "epochs",
                     "batch_size", "val_batch_size", "test_batch_size", "n_train", "n_val",
                     "n_test", "length_bin"):
            _int(name, getattr(self, name), 1)
        for name in ("min_length", "max_length", "test_min_length", "test_max_length",
                     "n_hard_test"):
            _int(name, getattr(self, name), 0)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model must be divisible by n_heads, got d_model={self.d_model}, "
                             f"n_heads={self.n_heads}")
        _number("dropout", self.dropout, 0.0, 0.999)
        _number("lr", self.lr, 0.0, 10.0, open_low=True)
        _number("positive_fraction", self.positive_fraction, 0.0, 1.0, open_low=True)
        if self.positive_fraction == 1.0:
            raise ValueError("positive_fraction must be < 1 (a split needs negatives), got 1.0")
        _choice("mask", self.mask, MASKS)
        _choice("pos_encoding", self.pos_encoding, POS_ENCODINGS)
        _choice("readout", self.readout, READOUTS)
        _choice("negatives", self.negatives, NEGATIVE_CHOICES)
        _choice("hard_negatives", self.hard_negatives, NEGATIVE_CHOICES)
        _choice("device", self.device, DEVICES)
        for lo, hi in (("min_length", "max_length"), ("test_min_length", "test_max_length")):
            a, b = getattr(self, lo), getattr(self, hi)
            if a > b:
                raise ValueError(f"{lo} must be <= {hi}, got {lo}={a} > {hi}={b}")
            if (a + 1) // 2 > b // 2:
                raise ValueError(f"{lo}..{hi} = {a}..{b} holds no even length (members are even)")
        longest = max(self.max_length, self.test_max_length)
        if longest > self.n_ctx:
            raise ValueError(f"n_ctx must cover the longest string, got n_ctx={self.n_ctx} < "
                             f"max(max_length, test_max_length)={longest}")
        if self.n_hard_test == 1:
            raise ValueError("n_hard_test must be 0 (no hard set) or >= 2, got 1")
        if not isinstance(self.bucket, bool):
            raise ValueError(f"bucket must be true or false, got {self.bucket!r}")  # noqa: TRY004
        for name in ("run_name", "results_dir"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        if self.num_threads is not None:
            _int("num_threads", self.num_threads, 1)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every parameter name, in declaration order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_namespace(cls, namespace: Mapping[str, Any]) -> ExperimentParams:
        """Build from a notebook's namespace (``globals()``): every known name found is used.

        Names the notebook does not declare keep their defaults (e.g. ``bucket`` outside the
        long-context notebook); unrelated names in the namespace are ignored.
        """
        return cls(**{name: namespace[name] for name in cls.names() if name in namespace})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExperimentParams:
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        unknown = sorted(set(data) - set(cls.names()))
        if unknown:
            raise ValueError(f"unknown experiment parameter(s) {unknown}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every parameter."""
        return asdict(self)

    @property
    def same_test_range(self) -> bool:
        """Test lengths equal training lengths: the test split is carved from one dataset."""
        return (self.min_length, self.max_length) == (self.test_min_length, self.test_max_length)

    def model_config(self, d_vocab: int) -> ModelConfig:
        """The ``ModelConfig`` these parameters describe."""
        return ModelConfig(d_vocab=d_vocab, n_ctx=self.n_ctx, d_model=self.d_model,
                           n_heads=self.n_heads, d_mlp=self.d_mlp, n_layers=self.n_layers,
                           dropout=float(self.dropout), mask=self.mask,
                           pos_encoding=self.pos_encoding, readout=self.readout)

    def train_config(self, **overrides: Any) -> TrainConfig:
        """The ``TrainConfig``: no checkpoints, snapshots of the classifier once per epoch."""
        base = {"lr": float(self.lr), "epochs": self.epochs, "seed": self.seed,
                "device": self.device, "num_threads": self.num_threads, "checkpoint_dir": None}
        base.update(overrides)
        return TrainConfig(**base)

    def spec(self, part: str) -> D.DatasetSpec:
        """The ``DatasetSpec`` of one generated part: ``"train"`` (train + val, + test when the
        test lengths equal the training lengths), ``"test"`` (separate test lengths) or
        ``"hard"`` (the candidate pool of the hard test set)."""
        common = {"language": "dyck", "k": self.k, "positive_fraction": float(self.positive_fraction)}
        if part == "train":
            n = self.n_train + self.n_val + (self.n_test if self.same_test_range else 0)
            return D.DatasetSpec(n=n, min_length=self.min_length, max_length=self.max_length,
                                 negatives=self.negatives,
                                 seed=_derived_seed(self.seed, _TRAIN_STREAM), **common)
        if part == "test":
            return D.DatasetSpec(n=self.n_test, min_length=self.test_min_length,
                                 max_length=self.test_max_length, negatives=self.negatives,
                                 seed=_derived_seed(self.seed, _TEST_STREAM), **common)
        if part == "hard":
            return D.DatasetSpec(language="dyck", k=self.k, positive_fraction=0.5,
                                 n=max(2, _HARD_POOL_FACTOR * self.n_hard_test),
                                 min_length=self.test_min_length, max_length=self.test_max_length,
                                 negatives=self.hard_negatives,
                                 seed=_derived_seed(self.seed, _HARD_STREAM))
        raise ValueError(f"part must be 'train', 'test' or 'hard', got {part!r}")


def set_threads(num_threads: int | None) -> int:
    """Set torch's intra-op threads (None: leave as is); returns the number in effect."""
    if num_threads is not None:
        _int("num_threads", num_threads, 1)
        torch.set_num_threads(int(num_threads))
    return torch.get_num_threads()


# ============================================================================================
# data
# ============================================================================================


@dataclass
class ExperimentData:
    """The datasets of one run.

    Attributes:
        train, val, test: disjoint splits (no string in two of them); negatives of the run's
            ``negatives`` kind.
        hard: the hard test set (``hard_negatives`` kind, test lengths, half members), disjoint
            from train and val; None when ``n_hard_test`` is 0.
        specs: the ``DatasetSpec`` of each generated part, as dicts.
    """

    train: D.DyckDataset
    val: D.DyckDataset
    test: D.DyckDataset
    hard: D.DyckDataset | None
    specs: dict[str, dict[str, Any]]

    def splits(self) -> dict[str, D.DyckDataset]:
        """``{name: dataset}`` of every present split, in the order train, val, test, hard."""
        out = {"train": self.train, "val": self.val, "test": self.test}
        if self.hard is not None:
            out["hard"] = self.hard
        return out


def _seen(*datasets: D.DyckDataset) -> set[str]:
    seen: set[str] = set()
    for dataset in datasets:
        seen.update(dataset.strings())
    return seen


def _unseen_unique(dataset: D.DyckDataset, seen: set[str]) -> np.ndarray:
    """Indices of the first copy of every string of ``dataset`` that is not in ``seen``."""
    keep, taken = [], set()
    for i, s in enumerate(dataset.strings()):
        if s not in seen and s not in taken:
            taken.add(s)
            keep.append(i)
    return np.asarray(keep, dtype=np.int64)


def make_data(params: ExperimentParams) -> ExperimentData:
    """Generate the run's datasets.

    Training, validation and test strings are exact-uniform members and length-matched
    non-members of the ``negatives`` kind (``"random"``: the thesis' intent). With the test
    lengths equal to the training lengths, one dataset of ``n_train + n_val + n_test`` strings
    is split so that no string lands in two parts (the thesis' test set overlapped its training
    set); otherwise (out-of-distribution lengths) the test set is generated separately and
    strings seen in training are removed. The hard test set is drawn from a pool of
    ``4 * n_hard_test`` strings of the ``hard_negatives`` kind at test lengths, keeps only
    strings absent from train and val (each once), and takes equally many members and
    non-members: ``min(n_hard_test // 2, unseen members, unseen non-members)`` of each.

    Args:
        params: the run's parameters (sizes, lengths, kinds, seed).

    Returns:
        An :class:`ExperimentData`.
    """
    full = D.generate_dataset(params.spec("train"))
    specs = {"train": params.spec("train").to_dict()}
    split_rng = np.random.default_rng(_derived_seed(params.seed, _SPLIT_STREAM))
    if params.same_test_range:
        train, val, test = _split_by_class(full, [params.n_train, params.n_val, params.n_test],
                                           split_rng)
    else:
        train, val = _split_by_class(full, [params.n_train, params.n_val], split_rng)
        candidates = D.generate_dataset(params.spec("test"))
        specs["test"] = params.spec("test").to_dict()
        test = candidates.subset(_unseen(candidates, _seen(train, val)))
    hard = None
    if params.n_hard_test:
        pool = D.generate_dataset(params.spec("hard"))
        specs["hard"] = params.spec("hard").to_dict()
        keep = _unseen_unique(pool, _seen(train, val))
        labels = pool.labels[keep]
        pos, neg = keep[labels == 1], keep[labels == 0]
        each = min(params.n_hard_test // 2, len(pos), len(neg))
        chosen = np.concatenate([pos[:each], neg[:each]])
        order = np.random.default_rng(_derived_seed(params.seed, _ORDER_STREAM)).permutation(
            len(chosen))
        hard = pool.subset(chosen[order])
    return ExperimentData(train=train, val=val, test=test, hard=hard, specs=specs)


def _split_by_class(dataset: D.DyckDataset, sizes: Sequence[int],
                    rng: np.random.Generator) -> tuple[D.DyckDataset, ...]:
    """Disjoint parts (no shared string) with the classes split separately.

    ``data.split_dataset`` sends all copies of a repeated string to one part, largest groups
    first; short strings repeat most (there are few of them), and splitting both classes
    together would leave the smaller parts with a skewed class balance. Splitting members and
    non-members separately keeps each part's member share equal to the whole's; every part's
    strings are then shuffled.
    """
    fractions = np.asarray(sizes, dtype=np.float64) / float(sum(sizes))
    parts: list[list[np.ndarray]] = [[] for _ in sizes]
    for label in (1, 0):
        members = np.flatnonzero(dataset.labels == label)
        if len(members) == 0:
            continue
        for part, idx in enumerate(D.split_indices(dataset.subset(members), fractions, rng)):
            parts[part].append(members[idx])
    out = []
    for chunks in parts:
        idx = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
        out.append(dataset.subset(idx[rng.permutation(len(idx))]))
    return tuple(out)


def _unseen(dataset: D.DyckDataset, seen: set[str]) -> np.ndarray:
    """Indices of the strings of ``dataset`` not in ``seen`` (repeats within it are kept)."""
    return np.asarray([i for i, s in enumerate(dataset.strings()) if s not in seen],
                      dtype=np.int64)


def distinct_negatives(dataset: D.DyckDataset) -> int:
    """Number of distinct non-member strings in ``dataset``."""
    labels = dataset.labels.tolist()
    return len({s for s, label in zip(dataset.strings(), labels) if label == 0})


def data_summary(data: ExperimentData) -> list[dict[str, Any]]:
    """One row per split: size, members, lengths, distinct negatives, share starting with a closer.

    Returns:
        Rows with keys ``split, n, members, min_length, max_length, distinct_negatives,
        negatives_starting_with_closer, kinds``.
    """
    rows = []
    for name, ds in data.splits().items():
        labels = ds.labels
        first = first_symbol_codes(ds)
        neg = labels == 0
        closer_first = (first[neg] >= 0) & (first[neg] % 2 == 1)
        rows.append({
            "split": name,
            "n": len(ds),
            "members": int(labels.sum()),
            "min_length": int(ds.lengths.min()) if len(ds) else None,
            "max_length": int(ds.lengths.max()) if len(ds) else None,
            "distinct_negatives": distinct_negatives(ds),
            "negatives_starting_with_closer": float(closer_first.mean()) if neg.any() else None,
            "kinds": ", ".join(f"{k} {v}" for k, v in ds.kind_counts().items()),
        })
    return rows


# ============================================================================================
# the shortcut
# ============================================================================================


def first_character_rule_accuracy(dataset: D.DyckDataset) -> float:
    """Accuracy of "balanced unless the first character is a closer" on ``dataset`` (NaN if empty).

    This rule scores 100% on every thesis dataset; hard negatives all start with an opener, so
    on them it always answers "member".
    """
    if len(dataset) == 0:
        return math.nan
    return float((first_character_rule(dataset) == dataset.labels).mean())


# ============================================================================================
# model, loaders, training, evaluation
# ============================================================================================


def make_model(params: ExperimentParams, tokenizer: DyckTokenizer) -> TransformerClassifier:
    """The run's classifier, initialised from ``torch.Generator().manual_seed(params.seed)``."""
    generator = torch.Generator().manual_seed(params.seed)
    return TransformerClassifier(params.model_config(tokenizer.vocab_size), generator=generator)


def make_loaders(params: ExperimentParams, data: ExperimentData,
                 tokenizer: DyckTokenizer) -> dict[str, D.BatchLoader]:
    """Batches for every split: train shuffled per epoch (seeded), the others in order.

    With ``params.bucket`` every loader groups similar lengths (less padding on long inputs);
    evaluation results do not depend on the order.
    """
    sizes = {"train": params.batch_size, "val": params.val_batch_size,
             "test": params.test_batch_size, "hard": params.test_batch_size}
    return {name: D.make_loader(ds, sizes[name], shuffle=name == "train", bucket=params.bucket,
                                seed=params.seed, tokenizer=tokenizer)
            for name, ds in data.splits().items() if len(ds)}


def train_model(model: TransformerClassifier, loaders: Mapping[str, Any],
                params: ExperimentParams, checkpoint_dir: str | os.PathLike[str] | None = None,
                **overrides: Any) -> TrainResult:
    """Train on ``loaders["train"]``, validating on ``loaders["val"]`` after every epoch.

    Checkpoints are off unless ``checkpoint_dir`` is given; the classifier weights are
    snapshotted once per epoch (``TrainResult.snapshots``). ``overrides`` go to ``TrainConfig``.
    """
    if checkpoint_dir is not None:
        overrides["checkpoint_dir"] = os.fspath(checkpoint_dir)
    config = params.train_config(**overrides)
    return train(model, loaders["train"], loaders.get("val"), config)


def evaluate_splits(model: TransformerClassifier, loaders: Mapping[str, Any],
                    device: str | torch.device | None = None) -> dict[str, dict[str, Any]]:
    """``evaluate`` (accuracy, loss, per length, per kind, confusion) on every loader."""
    device = select_device(device) if isinstance(device, str) else device
    return {name: evaluate(model, loader, device) for name, loader in loaders.items()}


def logit_margins(model: TransformerClassifier, loader: Any) -> np.ndarray:
    """``logit[member] - logit[non-member]`` of every input, in loader order (eval mode).

    Its standard deviation across inputs is 0 when the output ignores the input, as for a
    causal model read out at ``[start]``.

    Returns:
        float64 (n,).
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = []
    try:
        with torch.inference_mode():
            for batch in loader:
                logits = model(batch["tokens"].to(device)).double().cpu()
                out.append((logits[:, 1] - logits[:, 0]).numpy())
    finally:
        model.train(was_training)
    return np.concatenate(out) if out else np.zeros(0)


def padding_fraction(loader: Any) -> float:
    """Share of the token positions of one pass over ``loader`` that are padding."""
    total = pads = 0
    for batch in loader:
        tokens = batch["tokens"]
        total += tokens.numel()
        pads += int((batch["lengths"] + 2).sum())
    return 1.0 - pads / total if total else math.nan


def time_passes(model: TransformerClassifier, loader: Any, max_batches: int | None = None) -> float:
    """Seconds for forward + backward over (the first ``max_batches`` of) ``loader``.

    No optimiser step is taken and gradients are cleared afterwards, so the model is unchanged;
    dropout runs from a forked RNG state. Measures the cost of one training pass.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.train()
    start = time.perf_counter()
    try:
        with torch.random.fork_rng(devices=[]):
            for i, batch in enumerate(loader):
                if max_batches is not None and i >= max_batches:
                    break
                logits = model(batch["tokens"].to(device))
                torch.nn.functional.cross_entropy(logits, batch["labels"].to(device)).backward()
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return time.perf_counter() - start


# ============================================================================================
# results files
# ============================================================================================


def assemble_metrics(params: ExperimentParams, model: TransformerClassifier, data: ExperimentData,
                     result: TrainResult, final: Mapping[str, Any],
                     extra: Mapping[str, Any] | None = None,
                     timing: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The ``metrics.json`` object (``evaluate.METRICS_SCHEMA``) of a run.

    Beyond the schema's required keys it holds ``thesis_experiment`` (int), ``params`` (every
    notebook parameter) and ``headline`` (``extra``: flat numbers such as
    ``first_char_rule_test``, ``first_char_rule_hard``, ``logit_std``), read by the summary.
    """
    history = [{key: value for key, value in record.items()} for record in result.history]
    metrics = {
        "schema_version": 1,
        "experiment": params.run_name,
        "thesis_experiment": params.experiment,
        "seed": params.seed,
        "config": {"model": model.config.to_dict(), "train": params.train_config().to_dict(),
                   "n_params": model.n_params},
        "data": data.specs,
        "params": params.to_dict(),
        "history": history,
        "final": {name: dict(value) for name, value in final.items()},
        "timing": {"train_seconds": float(result.seconds), **(timing or {})},
        "headline": dict(extra or {}),
        "environment": {"torch": torch.__version__, "device": params.device,
                        "num_threads": torch.get_num_threads()},
    }
    validate_metrics(metrics)
    return metrics


def write_results(results_dir: str | os.PathLike[str], metrics: Mapping[str, Any],
                  per_length: Mapping[str, Mapping[Any, Mapping[str, Any]]],
                  config: Mapping[str, Any]) -> dict[str, Path]:
    """Write ``metrics.json`` (validated), ``per_length.csv`` and ``config.json``.

    Args:
        results_dir: root-relative or absolute directory (created if missing).
        metrics: a ``METRICS_SCHEMA`` object (see :func:`assemble_metrics`).
        per_length: ``{split: {length: {"n", "accuracy"}}}`` (``evaluate``'s ``per_length``).
        config: the run's configuration (parameters, model, training, data specs).

    Returns:
        ``{"metrics": path, "per_length": path, "config": path}``. ``per_length.csv`` has the
        columns ``split,length,n,accuracy`` sorted by split order then length.
    """
    directory = resolve(results_dir)
    directory.mkdir(parents=True, exist_ok=True)
    metrics_path = directory / "metrics.json"
    write_metrics_json(metrics_path, dict(metrics))
    csv_path = directory / "per_length.csv"
    tmp = directory / ".per_length.csv.tmp"
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["split", "length", "n", "accuracy"])
        for split, table in per_length.items():
            for length in sorted(table, key=int):
                cell = table[length]
                acc = cell["accuracy"]
                writer.writerow([split, int(length), int(cell["n"]),
                                 "" if acc is None or not math.isfinite(acc) else f"{acc:.6g}"])
    os.replace(tmp, csv_path)
    config_path = write_json(directory / "config.json", _jsonable(config))
    return {"metrics": metrics_path, "per_length": csv_path, "config": config_path}


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def save_figure(fig: Any, results_dir: str | os.PathLike[str], name: str, dpi: int = 120) -> Path:
    """Save ``fig`` as ``<results_dir>/fig_<name>.png`` and return the path."""
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"name must be letters, digits, '_' or '-', got {name!r}")
    directory = resolve(results_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"fig_{name}.png"
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def plot_model_vs_rule(rows: Mapping[str, tuple[float, float]], *, title: str | None = None) -> Any:
    """Grouped bars: the model's accuracy beside the first-character rule's, per test set.

    Args:
        rows: ``{test set name: (model accuracy, rule accuracy)}``.
        title: figure title.

    Returns:
        The matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    from dyckbook.plotting import style_context

    if not rows:
        raise ValueError("rows must not be empty")
    names = list(rows)
    model_acc = np.array([rows[n][0] for n in names], dtype=float)
    rule_acc = np.array([rows[n][1] for n in names], dtype=float)
    x = np.arange(len(names))
    with style_context():
        fig, ax = plt.subplots(figsize=(1.9 * len(names) + 3.0, 3.6), layout="constrained")
        for offset, values, label, color in ((-0.2, model_acc, "model", "#0072B2"),
                                             (0.2, rule_acc, "first-character rule", "#999999")):
            bars = ax.bar(x + offset, np.nan_to_num(values), width=0.38, label=label, color=color)
            for bar, value in zip(bars, values):
                ax.annotate(f"{value:.1%}" if np.isfinite(value) else "n/a",
                            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                            textcoords="offset points")
        ax.axhline(0.5, color="0.4", lw=0.8, ls=":")
        ax.set_xticks(x, names)
        ax.set_ylim(0, 1.12)
        ax.set_ylabel("accuracy")
        ax.legend(loc="upper left", ncols=2, frameon=False)
        if title:
            ax.set_title(title)
    return fig


def markdown_table(rows: Sequence[Mapping[str, Any]], floatfmt: str = ".3g") -> str:
    """A Markdown table of ``rows`` (dicts with the same keys), for ``IPython.display.Markdown``."""
    if not rows:
        return ""
    keys = list(rows[0])

    def fmt(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, float):
            return format(value, floatfmt)
        return str(value)

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(fmt(row.get(k)) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def bin_per_length(per_length: Mapping[Any, Mapping[str, Any]], width: int) -> dict[int, dict[str, Any]]:
    """Pool ``{length: {"n", "accuracy"}}`` into bins ``[w * j, w * (j + 1))`` keyed by their start.

    Accuracy of a bin is the count-weighted mean of its lengths; ``width`` 1 changes nothing.
    """
    _int("width", width, 1)
    pooled: dict[int, list[float]] = {}
    for length, cell in per_length.items():
        if not cell["n"] or cell["accuracy"] is None:
            continue
        start = int(length) // width * width
        n_acc = pooled.setdefault(start, [0, 0.0])
        n_acc[0] += int(cell["n"])
        n_acc[1] += float(cell["accuracy"]) * int(cell["n"])
    return {start: {"n": n, "accuracy": hits / n} for start, (n, hits) in sorted(pooled.items())}


def verdict(test_accuracy: float, rule_test_accuracy: float, hard_accuracy: float | None,
            logit_std: float) -> str:
    """One or two sentences (Markdown) saying what a run's headline numbers mean.

    Generated from the numbers, so notebook prose never states a number by hand.
    """
    parts = []
    if logit_std < 1e-4:
        parts.append(
            f"The classifier's output does not depend on its input (logit std {logit_std:.1g}): "
            "under a causal mask the `[start]` position attends only to itself, so every string "
            f"gets the same answer and the test accuracy ({test_accuracy:.1%}) is the share of "
            "the class it always predicts.")
    else:
        parts.append(f"On its own test split the model scores {test_accuracy:.1%}, the "
                     f"first-character rule {rule_test_accuracy:.1%}.")
    if hard_accuracy is not None and math.isfinite(hard_accuracy):
        if hard_accuracy < 0.6:
            parts.append(f"On hard negatives it is near chance ({hard_accuracy:.1%}): trained on "
                         "random negatives, it has not learned to reject strings that start with "
                         "an opener and have balanced counts.")
        elif hard_accuracy < 0.95:
            parts.append(f"On the hard test set it scores {hard_accuracy:.1%}: it rejects some "
                         "hard negatives, not all (see the per-kind figure).")
        else:
            parts.append(f"It also handles hard negatives ({hard_accuracy:.1%}), so it learned "
                         "more than the shortcut.")
    return " ".join(parts)
