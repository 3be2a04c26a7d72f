"""One run: a RunConfig goes through data, model, training and evaluation to a RunRecord.

``run_seeds`` is the only place the steps are wired together; everything that trains a model
in the book (experiment notebooks, the grid, the chapters, the encoder–decoder) comes here.

A run whose training did not succeed is marked ``failed``, never reported as a finding. The
rules, declared here and printed in the book:

``constant``        the output does not depend on the input (margin spread < 1e-5 on the tests)
``chance``          accuracy on (up to 4,000 of) its training strings below 0.6
``below_baseline``  training accuracy less than 5 points above always answering the training
                    set's majority class (matters when the classes are unbalanced)

A model that trains to the limit of what its architecture can see (a model blind to order
still learns to count) is not a failed run: what it cannot learn is the finding.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import nn

from dyckbook.data import negatives as N
from dyckbook.data.completion import CompletionDataConfig, CompletionSplits
from dyckbook.data.config import (
    Check,
    check_fields,
    flag,
    instance,
    integer,
    is_int,
    mapping,
    names,
    required_keys,
)
from dyckbook.data.presets import thesis_experiment
from dyckbook.data.protocol import DataConfig, Splits
from dyckbook.experiment import cache, completion_scores, results
from dyckbook.experiment.checkpoint import (
    CONTEXT_BYTES,
    MODEL_CONFIGS,
    build_model,
    device_memory,
    training_bytes,
)
from dyckbook.experiment.evaluate import margins, score
from dyckbook.experiment.record import RunRecord, RunResult
from dyckbook.experiment.train import TrainConfig, TrainResult, train
from dyckbook.nn import seq2seq
from dyckbook.nn.model import ClassificationTask, Classifier, ModelConfig
from dyckbook.nn.recurrent import RecurrentClassifier, RecurrentConfig
from dyckbook.nn.seq2seq import Seq2SeqConfig
from dyckbook.nn.thesis_model import ThesisModelConfig
from dyckbook.rules import adversary as A
from dyckbook.rules import baselines as B
from dyckbook.version import __version__

__all__ = ["FAILURE_RULES", "MODEL_CONFIGS", "RunConfig", "RunRecord", "RunResult", "build_model",
           "config_digest", "config_fields", "judge", "run", "run_seeds", "thesis_config"]

FAILURE_RULES = {
    "constant": "the output does not depend on the input (margin spread < 1e-5 on the tests; "
                "a completion model: one completion for every test prefix)",
    "chance": "accuracy on its training strings below 0.6 (classifiers)",
    "below_baseline": "training accuracy less than 5 points above the training set's majority "
                      "class",
}
# every stack-free rule (those that recognise a language are left out of its runs:
# adversary.recognisers); the adversary's rules are scored on the long-range test sets only
DEFAULT_BASELINES = (*B.STACK_FREE, *A.ADVERSARY)
_TRAIN_SAMPLE = 4000
_DATA_CONFIGS = (DataConfig, CompletionDataConfig)
# the checks of RunConfig's fields (its __post_init__) and of the entry points' arguments
_RUN_FIELDS: dict[str, Check] = {
    "data": instance(*_DATA_CONFIGS), "model": instance(*MODEL_CONFIGS.values()),
    "train": instance(TrainConfig), "seed": integer(0), "baselines": names("baseline names"),
}
# every flat field name of every data, model and training config
_FLAT_NAMES = frozenset(f.name for kind in (*_DATA_CONFIGS, *MODEL_CONFIGS.values(), TrainConfig)
                        for f in fields(kind))
_DICT_FIELDS: dict[str, Check] = {part: mapping() for part in ("data", "model", "train")}


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's numbers: data, architecture, optimisation and seed.

    A frozen dataclass: ``to_dict`` / ``from_dict`` round-trip it through JSON, ``from_flat``
    builds one from a notebook's flat parameters, ``override`` replaces flat field names and
    ``digest`` hashes it. A classifier run pairs a ``DataConfig`` with a ``ModelConfig`` or a
    ``ThesisModelConfig``; a completion run a ``CompletionDataConfig`` with a ``Seq2SeqConfig``.

    Args:
        data: A ``DataConfig`` (classification) or ``CompletionDataConfig`` (completion).
        model: A ``ModelConfig``, ``ThesisModelConfig`` or ``Seq2SeqConfig``; ``model.k`` at
            least ``data.k`` and ``model.n_ctx`` at least the longest training or test string.
        train: A ``TrainConfig``.
        seed: An int >= 0: seeds the data, the initialisation, the data order and dropout.
        baselines: A sequence of names from ``baselines.BASELINES`` or ``adversary.RULES``:
            the stack-free rules scored beside the model (the adversary's on the test sets
            with long-range negatives only; completion runs: none, ``()``).

    Raises:
        ValueError: a field of the wrong type or out of range (the message names the field,
            what it expects and the value given), or fields that do not fit together.

    Example:
        >>> from dyckbook.nn.model import ModelConfig
        >>> from dyckbook.data.protocol import DataConfig
        >>> from dyckbook.experiment.run import RunConfig
        >>> from dyckbook.experiment.train import TrainConfig
        >>> config = RunConfig(DataConfig(k=2, min_length=4, max_length=10, n_train=128),
        ...                    ModelConfig(k=2, n_ctx=10, d_model=8, d_mlp=16, n_layers=1),
        ...                    TrainConfig(max_steps=4), seed=1)
        >>> config.override(n_layers=2, seed=2).model.n_layers
        2
        >>> RunConfig.from_dict(config.to_dict()) == config
        True
        >>> len(config.digest())
        16
        >>> RunConfig(seed="1")
        Traceback (most recent call last):
        ...
        ValueError: RunConfig.seed must be an int >= 0, got '1' (str)
    """

    data: DataConfig | CompletionDataConfig = field(default_factory=DataConfig)  # the data
    model: ModelConfig | ThesisModelConfig | Seq2SeqConfig = field(
        default_factory=ModelConfig)  # the architecture
    train: TrainConfig = field(default_factory=TrainConfig)  # optimisation
    seed: int = 0  # seeds the data, the initialisation, the data order and dropout
    baselines: tuple[str, ...] = DEFAULT_BASELINES  # shortcut classifiers scored beside the model

    def __post_init__(self) -> None:
        check_fields("RunConfig.", self.__dict__, _RUN_FIELDS)
        object.__setattr__(self, "seed", int(self.seed))  # a numpy int: JSON-ready
        object.__setattr__(self, "baselines", tuple(self.baselines))
        for name in self.baselines:
            if name not in B.BASELINES and name not in A.RULES:
                raise ValueError(f"RunConfig.baselines holds {name!r}; known: "
                                 f"{(*B.BASELINES, *A.RULES)}")
        completion = isinstance(self.data, CompletionDataConfig)
        if completion != isinstance(self.model, Seq2SeqConfig):
            raise ValueError(f"RunConfig: completion data go with a Seq2SeqConfig and only with "
                             f"it, got {type(self.data).__name__} and {type(self.model).__name__}")
        if completion and self.baselines:
            raise ValueError(f"RunConfig: completion runs score no shortcut baselines; pass "
                             f"baselines=(), got {self.baselines}")
        if self.model.k < self.data.k:
            raise ValueError(f"RunConfig: model.k={self.model.k} cannot read the data's "
                             f"k={self.data.k} bracket types")
        longest = max(self.data.lengths()[1], self.data.lengths(test=True)[1])
        if longest > self.model.n_ctx:
            raise ValueError(f"RunConfig: model.n_ctx={self.model.n_ctx} is shorter than the "
                             f"longest string ({longest})")

    def to_dict(self) -> dict[str, Any]:
        return {"data": self.data.to_dict(), "model": self.model.to_dict(),
                "train": self.train.to_dict(), "seed": self.seed,
                "baselines": list(self.baselines)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunConfig:
        """The config of ``to_dict()`` (a record's ``config``); unknown or missing keys, and
        parts that are not mappings, are errors that name them."""
        required_keys("RunConfig.from_dict", data, ("data", "model", "train", "seed"),
                      ("baselines",))
        check_fields("RunConfig.from_dict: ", data, _DICT_FIELDS)
        kind = data["model"].get("kind", "classifier")
        if not isinstance(kind, str) or kind not in MODEL_CONFIGS:
            raise ValueError(f"RunConfig.from_dict: unknown model kind {kind!r}")
        data_kind = (CompletionDataConfig if data["data"].get("kind") == "completion"
                     else DataConfig)
        return cls(data_kind.from_dict(dict(data["data"])),
                   MODEL_CONFIGS[kind].from_dict(dict(data["model"])),
                   TrainConfig.from_dict(dict(data["train"])), data["seed"],
                   data.get("baselines", DEFAULT_BASELINES))

    @classmethod
    def from_flat(cls, params: Mapping[str, Any], model: str = "classifier") -> RunConfig:
        """A config from flat names, as a notebook's parameters cell declares them: every name
        that is a field of DataConfig (``model="seq2seq"``: CompletionDataConfig), of the model
        config of kind ``model``, of TrainConfig, or ``seed`` / ``baselines`` is used; names of
        no config (``run_name``, ``n_seeds``...) are not. A field of another kind's config only
        (``n_layers`` for ``seq2seq``, ``n_encoder_layers`` for a classifier) is an error
        naming it: it would be dropped. Without ``n_ctx`` the model accepts exactly the
        longest training or test string."""
        check_fields("RunConfig.from_flat: ", {"params": params}, {"params": mapping()})
        if not isinstance(model, str) or model not in MODEL_CONFIGS:
            raise ValueError(f"model must be one of {sorted(MODEL_CONFIGS)}, got {model!r}")
        data_kind = CompletionDataConfig if model == "seq2seq" else DataConfig
        kinds = (data_kind, MODEL_CONFIGS[model], TrainConfig)
        foreign = sorted(set(params) & (_FLAT_NAMES - {f.name for k in kinds for f in fields(k)}))
        if foreign:
            raise ValueError(f"RunConfig.from_flat: {foreign} are not fields of a "
                             f"model={model!r} run (its data, model or training config)")

        def pick(kind: type) -> dict[str, Any]:
            names = {f.name for f in fields(kind)}
            return {k: v for k, v in params.items() if k in names}

        extra = {k: params[k] for k in ("seed", "baselines") if k in params}
        if model == "seq2seq":
            extra.setdefault("baselines", ())
        data = data_kind(**pick(data_kind))
        arch = {"n_ctx": max(data.lengths()[1], data.lengths(test=True)[1]),
                **pick(MODEL_CONFIGS[model])}  # n_ctx: the longest string unless given
        return cls(data, MODEL_CONFIGS[model](**arch), TrainConfig(**pick(TrainConfig)), **extra)

    def override(self, **changes: Any) -> RunConfig:
        """A copy with flat field names replaced in whichever config has them (``seed`` too);
        an unknown name is an error."""
        parts = {"data": self.data, "model": self.model, "train": self.train}
        used = set()
        for key, part in parts.items():
            names = {f.name for f in fields(part)}
            mine = {k: v for k, v in changes.items() if k in names}
            used |= set(mine)
            parts[key] = replace(part, **mine) if mine else part
        unknown = sorted(set(changes) - used - {"seed"})
        if unknown:
            raise ValueError(f"RunConfig.override: unknown field(s) {unknown}")
        return replace(self, **parts, seed=changes.get("seed", self.seed))

    def digest(self, with_seed: bool = True) -> str:
        """A stable 16-hex-digit hash of the configuration (optionally without the seed)."""
        data = self.to_dict()
        if not with_seed:
            data.pop("seed")
        return config_digest(data)

    def with_seed(self, seed: int) -> RunConfig:
        return replace(self, seed=seed)


_SEEDS: Check = ((lambda v: isinstance(v, Iterable) and isinstance(v, Sized) and len(v) > 0
                  and not isinstance(v, (str, bytes, Mapping)) and all(is_int(s, 0) for s in v)),
                 "a non-empty sequence of ints >= 0")
#: the checks of ``run_seeds``' arguments
RUN_SEEDS_ARGS: dict[str, Check] = {"config": instance(RunConfig), "seeds": _SEEDS,
                                    "batched": flag(), "progress": flag(), "splits": flag()}


def training_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device`` this process can train on (``"auto"``: CUDA where there
    is one, else the CPU); a ValueError naming it otherwise (a name torch does not parse, or
    CUDA asked for where there is none)."""
    if not isinstance(device, (str, torch.device)):
        raise ValueError(f"device must be a torch.device or its name ('cpu', 'cuda', "
                         f"'cuda:1', 'auto'), got {device!r} ({type(device).__name__})")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        out = torch.device(device)
    except RuntimeError:
        raise ValueError(f"device must be a torch.device or its name ('cpu', 'cuda', "
                         f"'cuda:1'), got {device!r}") from None
    if out.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device is {device!r}, but this machine has no CUDA device")
    return out


def device_name(device: torch.device) -> str:
    """What a record says it ran on: ``cpu``, or ``cuda (<the GPU's name>)``."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type


def config_fields(params: Mapping[str, Any]) -> dict[str, Any]:
    """The names in ``params`` (a notebook's globals) that are fields of the data, model or
    training configs of any kind (classifier, thesis, completion), for ``RunConfig.override``
    or ``RunConfig.from_flat``. ``grad_clip`` 0 means no clipping; without ``n_ctx``, the model
    accepts the longest training or test string named. ``target_accuracy`` 0 means no early
    stop (train to the end of the schedule)."""
    check_fields("config_fields: ", {"params": params}, {"params": mapping()})
    out = {k: v for k, v in params.items() if k in _FLAT_NAMES}
    for name in ("grad_clip", "target_accuracy"):
        if out.get(name) == 0 and not isinstance(out[name], bool):
            out[name] = None
    longest = [out[k] for k in ("max_length", "test_max_length") if k in out]
    if longest and "n_ctx" not in out and all(is_int(v) for v in longest):
        out["n_ctx"] = max(longest)  # (a wrong type is left to the config to name)
    return out


def thesis_config(experiment: int, literal: bool = True, seed: int = 0,
                  **overrides: Any) -> RunConfig:
    """Thesis experiment 1-7 as a run.

    ``literal``: the thesis' data, split and model (``thesis_model``, its defects kept) with
    Table 5.1's learning rate and epochs, its batch size, a constant rate and no clipping or
    early stopping, as its notebook ran them (``presets``). Otherwise the same architecture in
    dyckbook's classifier on the sound protocol, with the thesis' lengths (Dyck-1 raised to at
    least 20 so its held-out test pool is large enough). ``overrides`` are flat field names of
    the data, model or training config applied last (a profile's smaller budget).
    """
    e = thesis_experiment(experiment)
    if literal:
        d = e.data
        test = e.test_data or d
        data = DataConfig(k=d.k, min_length=d.min_length, max_length=d.max_length, n_train=d.n,
                          positive_fraction=d.balanced, test_min_length=test.min_length,
                          test_max_length=test.max_length, n_test=test.n if e.test_data else 2000,
                          source="thesis", thesis_generator=d.generator, thesis_split=e.split)
        model: ModelConfig | ThesisModelConfig = ThesisModelConfig(**e.architecture())
    else:
        lo, hi = e.stated_lengths
        hi = max(hi, 20) if e.k == 1 else hi
        tlo, thi = e.stated_test_lengths or (lo, hi)
        data = DataConfig(k=e.k, min_length=lo, max_length=hi, test_min_length=tlo,
                          test_max_length=thi, n_train=int(0.8 * e.data.n))
        model = ModelConfig(**{**e.architecture(), "n_ctx": max(e.n_ctx, hi, thi)})
    batch = (e.batch_sizes or (32,))[0]
    config = RunConfig(data, model, TrainConfig(lr=e.lr, epochs=e.epochs, batch_size=batch), seed)
    return config.override(**overrides)


def config_digest(config: Mapping[str, Any]) -> str:
    """:meth:`RunConfig.digest` of a configuration *as stored* (a record's ``config``): a
    record written before a field existed lacks it, so it never matches a configuration that
    has it (``RunConfig.from_dict`` would fill in today's default and hide the difference)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def judge(train_accuracy: float, margin_std: float, majority: float) -> str | None:
    """The failure rule a run breaks (``FAILURE_RULES``), or None if it trained."""
    if margin_std < 1e-5:
        return "constant"
    if train_accuracy < 0.6:
        return "chance"
    if train_accuracy < majority + 0.05:
        return "below_baseline"
    return None


@lru_cache(maxsize=16)
def data_splits(data: DataConfig | CompletionDataConfig, seed: int) -> Splits | CompletionSplits:
    """The splits of a data config and seed, cached: the grid's cells of one k share them, and
    with ``DYCKBOOK_DATA_CACHE`` set, processes and machines too (``cache``)."""
    return cache.load_or_make(data, seed)


def _fit_rows(kinds: np.ndarray, test_kinds: Sequence[str], limit: int) -> np.ndarray:
    """Training rows a baseline for a test set is fitted on: up to ``limit / 2`` negatives of the
    test set's kinds and as many members (the first of each, the set being shuffled)."""
    negatives = np.flatnonzero(B.fit_negatives(kinds, test_kinds))[: limit // 2]
    members = np.flatnonzero(kinds.astype(str) == "member")[: max(negatives.size, 1)]
    return np.sort(np.concatenate([members, negatives]))


@lru_cache(maxsize=32)
def _fitted(data: DataConfig, seed: int, test_kinds: tuple[str, ...],
            names: tuple[str, ...]) -> dict[str, B.Baseline]:
    """The baselines of a data config and seed for one test set's kinds, cached: the cells of
    a grid that share a k share them."""
    train = data_splits(data, seed).train
    rows = _fit_rows(train.kinds, test_kinds, _TRAIN_SAMPLE)
    fit = (train.codes[rows], train.lengths[rows], train.labels[rows])
    return {name: A.make_rule(name, train.language, data.window, seed).fit(*fit)
            for name in names}


#: the longest strings a rule can fit or score (``adversary.EditKNN``: one machine word each)
_LONGEST = {"edit_knn": A._KNN_BITS}


def _rules_for(names: tuple[str, ...], kinds: tuple[str, ...],
               longest: int = 0) -> tuple[str, ...]:
    """The rules scored on a test set of ``kinds`` whose strings (and training strings) are at
    most ``longest`` symbols: the adversary's only where it holds long-range negatives (the
    sets it was assembled against), less a rule that cannot read strings that long
    (``_LONGEST``: the length study's stack sets reach 8N = 128)."""
    if set(kinds) & set(N.LONG_RANGE_KINDS):
        return tuple(name for name in names if _LONGEST.get(name, longest) >= longest)
    return tuple(name for name in names if name not in A.RULES)


def _evaluate(config: RunConfig, model: nn.Module, splits: Splits,
              scored: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A classifier's measurements: the fields of its RunRecord that only it fills (``scored``:
    its margins on the training sample and the tests, when ``_scored`` made them already)."""
    language = splits.train.language
    sample = splits.train.subset(np.arange(min(len(splits.train), _TRAIN_SAMPLE)))
    scored = scored or {"train": margins(model, sample),
                        "tests": {name: margins(model, ds) for name, ds in splits.tests.items()}}
    train_accuracy = float(((scored["train"] > 0) == sample.labels).mean())
    test_margins = scored["tests"]
    spread = np.concatenate(list(test_margins.values()) or [np.zeros(1)]).std()
    scores = {name: score((m > 0).astype(np.int8), splits.tests[name])
              for name, m in test_margins.items()}
    block = copy.deepcopy(baseline_block(config.data, config.seed,  # a record's own
                                         baseline_names(config, language)))
    majority = float(max(sample.labels.mean(), 1 - sample.labels.mean()))
    return {"failure": judge(train_accuracy, float(spread), majority),
            "train_accuracy": train_accuracy, "margin_std": float(spread), "scores": scores,
            **block}


def baseline_names(config: RunConfig, language: Any) -> tuple[str, ...]:
    """The rules a classifier of ``config`` is compared with: its baselines less those that
    recognise ``language`` (``adversary.recognisers``)."""
    return tuple(b for b in config.baselines if b not in A.recognisers(language))


@lru_cache(maxsize=64)
def baseline_block(data: DataConfig, seed: int, names: tuple[str, ...]) -> dict[str, Any]:
    """The rules' scores on a data config's tests and training sample at ``seed``: a record's
    ``{"baselines": {test: {rule: Score}}, "baseline_train": {rule: accuracy}}``. No model
    enters them, so the cells of a grid that share the data share them: kept here, and with
    ``DYCKBOOK_DATA_CACHE`` set on disk for other processes (``cache.block_key``; a card's
    workers: ``page.make_data`` makes them with the splits). Fitting them is most of a Dyck-3
    record's cost (22 s of 26 s for a grid seed on one core, scoring 3.4 s)."""
    return cache.load_or_make(data, seed, lambda d, s: _make_block(d, s, names),
                              cache.block_key(data, seed, names))


def prepare(config: RunConfig, seed: int) -> None:
    """``config``'s splits at ``seed`` and, for a classifier, its rules' scores, made (into the
    data cache where one is set): a worker's work before the cells that read them."""
    splits = data_splits(config.data, seed)
    if not isinstance(splits, CompletionSplits):
        baseline_block(config.data, int(seed), baseline_names(config, splits.train.language))


def _make_block(data: DataConfig, seed: int, names: tuple[str, ...]) -> dict[str, Any]:
    splits = data_splits(data, seed)
    sample = _sample(splits)
    baselines, first = {}, None  # first: the first test set's rules, scored on training too
    trained = int(splits.train.lengths.max(initial=0))
    for name, ds in splits.tests.items() if names else ():
        kinds = tuple(sorted(set(ds.kinds.astype(str))))
        longest = max(trained, int(ds.lengths.max(initial=0)))
        fitted = _fitted(data, seed, kinds, _rules_for(names, kinds, longest))
        first = fitted if first is None else first
        baselines[name] = {b: score(f.predict(ds.codes, ds.lengths), ds, cells=False)
                           for b, f in fitted.items()}
    return {"baselines": baselines, "baseline_train": {
        b: float((f.predict(sample.codes, sample.lengths) == sample.labels).mean())
        for b, f in (first or {}).items()}}


def _evaluate_completion(config: RunConfig, model: nn.Module,
                         splits: CompletionSplits) -> dict[str, Any]:
    """A completion run's measurements: exact match of greedy decoding per test set. Only
    "constant" marks failure here (an order-blind model that completes what it can is a finding)."""
    sample = splits.train.subset(np.arange(min(len(splits.train), _TRAIN_SAMPLE)))
    evaluated = {name: completion_scores.evaluate_completions(model, t)
                 for name, t in splits.tests.items()}
    distinct = [m["distinct_outputs"] for _, m in evaluated.values()]
    return {"failure": "constant" if max(distinct, default=2) <= 1 else None,
            "train_accuracy": completion_scores.evaluate_completions(model, sample)[0].accuracy,
            "margin_std": float("nan"),
            "scores": {name: score for name, (score, _) in evaluated.items()},
            "measures": {name: m for name, (_, m) in evaluated.items()}, "baselines": {},
            "baseline_train": {}}


def _sample(splits: Splits) -> Any:
    """The training strings a classifier's training accuracy is measured on."""
    return splits.train.subset(np.arange(min(len(splits.train), _TRAIN_SAMPLE)))


def _scored(network: nn.Module, splits: Sequence[Splits | CompletionSplits],
            on: torch.device) -> list[dict[str, Any] | None]:
    """On a device, the margins of every classifier of a trained network on its own training
    sample and tests, all models at once (a batch holds every model's rows): per model
    ``{"train", "tests"}`` for ``_evaluate``. On the CPU (each model scored alone, as it always
    was: the records keep their last bits) or for completion runs, None per model."""
    if on.type == "cpu" or not isinstance(network, (Classifier, RecurrentClassifier)) or \
            isinstance(splits[0], CompletionSplits):
        return [None] * len(splits)
    train = margins(network, [_sample(sp) for sp in splits])
    tests = {name: margins(network, [sp.tests[name] for sp in splits]) for name in splits[0].tests}
    return [{"train": train[s], "tests": {name: m[s] for name, m in tests.items()}}
            for s in range(len(splits))]


def _record(config: RunConfig, model: nn.Module, splits: Splits | CompletionSplits,
            result: TrainResult, s: int, device: torch.device,
            scored: dict[str, Any] | None = None) -> RunRecord:
    """The record of seed ``s`` of a trained group: its measurements and its training."""
    measured = (_evaluate_completion(config, model, splits)
                if isinstance(splits, CompletionSplits) else _evaluate(config, model, splits,
                                                                       scored))
    return RunRecord(
        config=config.to_dict(), status="failed" if measured["failure"] else "ok",
        data=splits.summary(), steps=result.stopped_at[s] or result.steps,
        stopped_at=result.stopped_at[s], seconds=result.seconds,
        n_params=sum(p.numel() for p in model.parameters()),
        history=[{**h, "train_loss": h["train_loss"][s],
                  **({"val_accuracy": h["val_accuracy"][s]} if "val_accuracy" in h else {})}
                 for h in result.history],
        versions={"dyckbook": __version__, "torch": torch.__version__,
                  "device": device_name(device)}, **measured)


def run_seeds(config: RunConfig, seeds: Sequence[int], batched: bool = True,
              progress: bool = False, device: str | torch.device = "cpu",
              splits: bool = True) -> list[RunResult]:
    """Run ``config`` once per seed: data, model, training and evaluation, a record per seed.

    Batching changes nothing but the speed (``experiment.train``): with ``batched`` the seeds'
    models train as one computation (on a GPU as many as fit in its memory at a time); the
    thesis' ported model has no model dimension and always trains one seed at a time. Each
    seed's data come from that seed (``config.seed`` is replaced by it). The models train and
    are scored on ``device`` (on a GPU a group's classifiers are scored together, as they
    trained); the data stay in host memory, and the returned models are on the CPU. A record
    says the device in ``versions``, never the configuration (a recipe's digest is the same on
    every device): a GPU's floating-point sums differ from the CPU's in the last bits, so its
    numbers are the CPU's to within rounding, not bit for bit.

    Where ``DYCKBOOK_RUN_CACHE`` names a folder (``cache``), a seed trained there before, by
    the same code, is read back (record and weights) and only the others train; each is written
    there as soon as its group finishes, so a stopped run resumes. Training is a pure function
    of the configuration, the seed and the code, and batching changes nothing, so a resumed run
    equals one from scratch (``tests/test_cache.py``).

    Args:
        config: A :class:`RunConfig`.
        seeds: A non-empty sequence of ints >= 0 (a list, a tuple, a range...).
        batched: True (default) or False: train the seeds' models together or one by one.
        progress: True or False (default): show a bar over the training steps.
        device: "cpu" (default), "cuda", "cuda:1", "auto" (CUDA where there is one) or a
            ``torch.device``.
        splits: True (default) or False: a seed read back from the run cache has its data
            made again, or (False, for callers that read the records only) ``splits`` None.

    Returns:
        One :class:`RunResult` per seed, in order: its ``record`` (a :class:`RunRecord`, with
        ``status`` "ok" or "failed" under ``FAILURE_RULES``), the trained ``model`` (on the
        CPU) and its ``splits``.

    Raises:
        ValueError: an argument of the wrong type or out of range (the message names it).

    Example:
        >>> from dyckbook import DataConfig, ModelConfig, RunConfig, TrainConfig, run_seeds
        >>> config = RunConfig(DataConfig(k=2, min_length=4, max_length=10, n_train=128,
        ...                               n_val=32, n_test=64),
        ...                    ModelConfig(k=2, n_ctx=10, d_model=8, d_mlp=16, n_layers=1),
        ...                    TrainConfig(max_steps=4), baselines=("counts",))
        >>> results = run_seeds(config, [0, 1])
        >>> [r.record.seed for r in results], [r.record.steps for r in results]
        ([0, 1], [4, 4])
        >>> sorted(results[0].record.scores), results[0].record.status in ("ok", "failed")
        (['hard', 'local', 'random'], True)
        >>> run_seeds(config, 3)
        Traceback (most recent call last):
        ...
        ValueError: run_seeds: seeds must be a non-empty sequence of ints >= 0, got 3 (int)
    """
    check_fields("run_seeds: ", {"config": config, "seeds": seeds, "batched": batched,
                                 "progress": progress, "splits": splits}, RUN_SEEDS_ARGS)
    on = training_device(device)
    seeds = [int(s) for s in seeds]
    root = cache.folder(cache.RUN_ENV)
    found: dict[int, RunResult | None] = dict.fromkeys(seeds)
    if root is not None:
        for s in found:
            entry = cache.read_run(root, config, s)
            if entry is not None:
                data = data_splits(config.data, s) if splits else None
                found[s] = RunResult(RunRecord.from_dict(entry[0]), entry[1], data)
        if any(r is not None for r in found.values()):
            print(f"resumed {sum(r is not None for r in found.values())} of {len(found)} "
                  f"seed(s) from {results.shown(root)}", flush=True)
    missing = [s for s, r in found.items() if r is None]
    if missing:
        for result in _train_seeds(config, missing, batched, progress, on, root):
            found[result.record.seed] = result
    return [found[s] for s in seeds]  # type: ignore[misc]


def _group_size(config: RunConfig, n: int, on: torch.device) -> int:
    """Seeds trained as one network: all ``n`` on the CPU; on a CUDA device as many as fit in
    its memory (``checkpoint.training_bytes``, ``checkpoint.device_memory``), at least one."""
    if on.type != "cuda":
        return n
    each = training_bytes(config, 1) - CONTEXT_BYTES
    return max(1, min(n, (device_memory(on) - CONTEXT_BYTES) // max(each, 1)))


def _train_seeds(config: RunConfig, seeds: list[int], batched: bool, progress: bool,
                 on: torch.device, root: Any) -> list[RunResult]:
    """Train and score ``seeds`` (in groups: all together when ``batched`` and the model has a
    model dimension, else one by one); each group's seeds are written to the run cache folder
    ``root`` (None: no cache) as soon as the group is scored."""
    configs = [config.with_seed(s) for s in seeds]
    splits = [data_splits(c.data, c.seed) for c in configs]
    completion = isinstance(config.data, CompletionDataConfig)
    task = (seq2seq.CompletionTask() if completion
            else ClassificationTask(getattr(config.model, "objective", "membership")))
    val = all(len(sp.val) for sp in splits)
    batchable = isinstance(config.model, (ModelConfig, Seq2SeqConfig, RecurrentConfig))
    size = _group_size(config, len(seeds), on) if batched and batchable else 1
    groups = [list(range(len(seeds)))[i:i + size] for i in range(0, len(seeds), size)]
    results: list[RunResult] = []
    for group in groups:
        model = build_model(config.model, [configs[i].seed for i in group]).to(on)
        result = train(model, task, [splits[i].train for i in group],
                       [splits[i].val for i in group] if val else None, config.train,
                       progress=progress)
        networks = (Classifier, RecurrentClassifier, seq2seq.EncoderDecoder, seq2seq.DecoderOnly)
        singles = model.split() if isinstance(model, networks) else [model]
        scored = _scored(model, [splits[i] for i in group], on)  # a device: together
        for s, (i, single) in enumerate(zip(group, singles)):
            done = RunResult(_record(configs[i], single, splits[i], result, s, on, scored[s]),
                             single.cpu(), splits[i])
            if root is not None:
                cache.write_run(root, config, seeds[i], done.record.to_dict(), done.model)
            results.append(done)
    return results


def run(config: RunConfig, device: str | torch.device = "cpu") -> RunResult:
    """One run of one seed, ``config.seed``, on ``device``: ``run_seeds(config, [config.seed],
    device=device)[0]``.

    Args:
        config: A :class:`RunConfig` (build one with ``RunConfig(...)``,
            ``RunConfig.from_dict`` or ``RunConfig.from_flat``).

    Returns:
        A :class:`RunResult`: ``record`` (a :class:`RunRecord`: scores per test set, beside
        the shortcut baselines, status "ok" or "failed"), the trained ``model`` (one seed, in
        eval mode) and its data ``splits``.

    Raises:
        ValueError: ``config`` is not a RunConfig (a dict: use ``RunConfig.from_dict``).

    Example:
        >>> from dyckbook import DataConfig, ModelConfig, RunConfig, TrainConfig
        >>> from dyckbook.experiment.run import run
        >>> config = RunConfig(DataConfig(k=2, min_length=4, max_length=10, n_train=128,
        ...                               n_val=32, n_test=64),
        ...                    ModelConfig(k=2, n_ctx=10, d_model=8, d_mlp=16, n_layers=1),
        ...                    TrainConfig(max_steps=4), seed=3, baselines=("counts",))
        >>> r = run(config).record  # run_seeds(config, [config.seed])[0].record
        >>> r.seed, r.steps, sorted(r.baselines["hard"]), 0.0 <= r.accuracy("hard") <= 1.0
        (3, 4, ['counts'], True)
        >>> run(config.to_dict())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: run: config must be a RunConfig, got {...} (dict)
    """
    check_fields("run: ", {"config": config}, {"config": RUN_SEEDS_ARGS["config"]})
    return run_seeds(config, [config.seed], device=device)[0]


