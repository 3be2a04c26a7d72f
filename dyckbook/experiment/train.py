"""The training loop: Adam, a learning-rate schedule, clipping, early stopping; S models at once."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn
from tqdm import tqdm

from dyckbook.data.config import Config
from dyckbook.data.dataset import Dataset
from dyckbook.nn import blocks, tokenizer
from dyckbook.nn.model import seed_for

__all__ = ["MATMULS", "SCHEDULES", "Task", "TrainConfig", "TrainResult", "first_reach", "train"]

SCHEDULES = ("constant", "cosine", "linear")
MATMULS = ("float32", "bfloat16")


@dataclass(frozen=True)
class TrainConfig(Config):
    """How to train. Epoch mode (``max_steps`` None) or step mode (``max_steps`` set)."""

    lr: float = 1e-3  # peak learning rate of Adam
    batch_size: int = 32  # training strings per step and model
    epochs: int = 10  # epoch mode: passes over the training set
    max_steps: int | None = None  # step mode: optimiser steps (the data cycle, epochs ignored)
    warmup_steps: int = 0  # linear warm-up from lr / warmup_steps to lr
    schedule: str = "constant"  # after warm-up: constant | cosine | linear decay to 0
    grad_clip: float | None = None  # clip each model's gradient norm to this (None: off)
    weight_decay: float = 0.0  # Adam's L2 weight decay
    eval_every: int = 0  # validate every this many steps (0: at the end of every epoch)
    target_accuracy: float | None = None  # stop a model once its validation accuracy reaches it
    # ... averaged over its last this many validations: one lucky pass over a few hundred
    # strings (where one error is 0.2-0.5 points) does not stop a model
    target_window: int = 3
    freeze: tuple[str, ...] = ()  # parameters kept at their initial values (by name)
    bucket: bool = False  # batch strings of similar length together (long inputs: less padding)
    # float32 | bfloat16: the models' matrix products (and their gradients, the biases' too)
    # round their inputs and outputs to bfloat16 and sum in float32 (blocks.MATMUL; about 2x
    # faster products on CPUs with AVX512-BF16)
    matmul: str = "float32"

    def __post_init__(self) -> None:
        object.__setattr__(self, "freeze", tuple(self.freeze))
        for name in ("lr", "grad_clip", "weight_decay", "target_accuracy"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float))):
                raise ValueError(f"TrainConfig.{name} must be a number, got {value!r}")
        if self.lr is None or not self.lr > 0:
            raise ValueError(f"TrainConfig.lr must be > 0, got {self.lr!r}")
        for name in ("batch_size", "epochs"):
            _check_int(name, getattr(self, name), 1)
        for name in ("warmup_steps", "eval_every"):
            _check_int(name, getattr(self, name), 0)
        _check_int("target_window", self.target_window, 1)
        if self.max_steps is not None:
            _check_int("max_steps", self.max_steps, 1)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"TrainConfig.schedule must be one of {SCHEDULES}, "
                             f"got {self.schedule!r}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"TrainConfig.grad_clip must be > 0 or None, got {self.grad_clip!r}")
        if self.weight_decay is None or self.weight_decay < 0:
            raise ValueError(f"TrainConfig.weight_decay must be >= 0, got {self.weight_decay!r}")
        if self.matmul not in MATMULS:
            raise ValueError(f"TrainConfig.matmul must be one of {MATMULS}, got {self.matmul!r}")
        if not isinstance(self.bucket, bool):
            raise ValueError(f"TrainConfig.bucket must be True or False, got {self.bucket!r}")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ValueError(f"TrainConfig.target_accuracy must be in (0, 1], "
                             f"got {self.target_accuracy!r}")


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"TrainConfig.{name} must be an int >= {low}, got {value!r}")


class Task(Protocol):
    """What a model learns: how datasets become tensors, the loss, and what counts as correct.

    ``batch(data, rows)`` takes ``tensors`` of every model's set concatenated along the first
    dimension and ``rows`` (models, batch), the rows of ``data`` in each model's batch.
    """

    def tensors(self, dataset: Dataset, width: int) -> dict[str, torch.Tensor]: ...

    def batch(self, data: dict[str, torch.Tensor], rows: torch.Tensor
              ) -> dict[str, torch.Tensor]: ...

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def correct(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        history: one dict per validation: ``step``, ``epoch`` (fractional), ``lr``,
            ``train_loss`` (per model: mean over the steps since the last validation),
            ``val_accuracy`` (per model), ``seconds`` (since the start); a model that has
            stopped has None in the lists.
        stopped_at: per model, the step at which the mean of its last ``target_window``
            validation accuracies reached ``target_accuracy`` (its weights are those of that
            step), or None.
        steps: optimiser steps taken (by the models that trained longest).
        seconds: wall time.
    """

    history: list[dict[str, Any]]
    stopped_at: list[int | None]
    steps: int
    seconds: float


def first_reach(accuracies: Sequence[float | None], target: float, window: int) -> int | None:
    """The index of the first validation at which the mean of the last ``window`` accuracies
    reaches ``target`` (:func:`train`'s early-stop rule, read off a run that went on past it),
    or None. None entries (a model that had stopped) end the search."""
    for i in range(window - 1, len(accuracies)):
        last = accuracies[i + 1 - window:i + 1]
        if any(a is None for a in last):
            return None
        if sum(last) / window >= target:
            return i
    return None


def _schedule(config: TrainConfig, total: int):
    def factor(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        if config.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - config.warmup_steps) / max(1, total - config.warmup_steps))
        if config.schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def _epoch_order(n: int, g: torch.Generator, lengths: torch.Tensor, config: TrainConfig,
                 epoch: int) -> torch.Tensor:
    """The order of one epoch: a random permutation; with ``bucket``, sorted by length within
    windows of 50 batches, the batches then shuffled (each batch holds similar lengths).

    The shuffle of the batches is the same for every model (it depends on the epoch only), so
    models trained together meet batches of the same length band at each step and pad to
    nearly the same width; which strings fill a band is each model's own draw.
    """
    order = torch.randperm(n, generator=g)
    if not config.bucket:
        return order
    window = 50 * config.batch_size
    chunks = [c[lengths[c].argsort(stable=True)] for c in order.split(window)]
    batches = torch.cat(chunks).split(config.batch_size)
    full = n // config.batch_size  # the partial batch stays last, where the step slices expect it
    bands = torch.Generator().manual_seed(seed_for(epoch, "bands"))
    shuffled = [batches[i] for i in torch.randperm(full, generator=bands)] + list(batches[full:])
    return torch.cat(shuffled)


@functools.cache
def _reuse_freed_memory() -> None:
    """On glibc, keep freed memory for reuse (malloc's mmap and trim thresholds raised, once
    per process): a step's activations then land in memory the last step freed instead of
    fresh pages, whose faults cost about 5% of a grid step. Elsewhere, nothing."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: return memory to the system above 1 GiB
        libc.mallopt(-3, 1 << 28)  # M_MMAP_THRESHOLD: only blocks over 256 MiB get own pages


def _clip(params: list[nn.Parameter], max_norm: float, n_models: int) -> None:
    """Scale each model's gradient to norm at most ``max_norm`` (torch's rule, per model; the
    same arithmetic for a model alone as for it among others). A network without a model
    dimension has ``n_models`` 1."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.cat([g.reshape(n_models, -1) for g in grads], 1), dim=1)
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)  # (S,)
    torch._foreach_mul_(grads, [scale.view(-1, *(1,) * (g.dim() - 1)) for g in grads])


def _concat(parts: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Every model's tensors, one after another along the first dimension."""
    return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}


def _on(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A batch moved to the model's device (nothing moves on the CPU), asynchronously. The
    datasets stay in host memory, where sizing a batch (its longest row) needs no device
    synchronisation."""
    return {key: tokenizer.to_device(value, device) for key, value in batch.items()}


def _check_ids(model: nn.Module, data: dict[str, torch.Tensor]) -> None:
    """Every token id of the data checked once, on the host, against the model's vocabulary:
    a forward pass on a device does not read its ids back (``tokenizer.check_ids``)."""
    vocab = getattr(getattr(model, "config", None), "d_vocab", None)
    for key in ("tokens", "source", "target"):
        if vocab is not None and key in data:
            tokenizer.check_ids(data[key], vocab, key)


def _accuracy(model: nn.Module, task: Task, data: dict[str, torch.Tensor],
              sizes: Sequence[int], models: Sequence[int], chunk: int = 1024) -> list[float]:
    """Accuracy of the network's models (eval mode), which are the ``models`` of ``data``:
    model s's set is the ``sizes[s]`` rows of ``data`` after those of the models before it."""
    device = next(model.parameters()).device
    positions = max(t.shape[1] for t in data.values() if t.dim() > 1)
    chunk = tokenizer.eval_rows(len(models), positions, getattr(model.config, "d_model", 256),
                                device, chunk, tokenizer.attention_scores(model.config,
                                                                             positions))
    first = torch.tensor([0, *sizes]).cumsum(0)[list(models), None]  # (network's models, 1)
    sizes = [sizes[s] for s in models]
    last = first + torch.tensor(sizes)[:, None] - 1
    hits = torch.zeros(len(sizes), dtype=torch.long, device=device)  # read back once, at the end
    was = model.training
    model.eval()
    with torch.inference_mode():
        for start in range(0, max(sizes), chunk):
            at = first + torch.arange(start, min(start + chunk, max(sizes)))  # (S, batch)
            ok = task.correct(model, _on(task.batch(data, torch.minimum(at, last)), device))
            # ok: (S, batch); models with fewer rows repeat their last
            hits += (ok & tokenizer.to_device(at <= last, device)).sum(1)
    model.train(was)
    return [float(h) / n for h, n in zip(hits.tolist(), sizes)]


def progress_bar(total: int) -> Any:
    """A bar over ``total`` training steps. A widget only under a Jupyter front end (JupyterLab
    sets ``JPY_SESSION_NAME`` for its kernels) or on a terminal; elsewhere (papermill, a log
    file) plain text on stderr at most every 10 s, which ``papermill --log-output`` shows as it
    trains and a saved notebook keeps at its final count, never a widget frozen at 0%."""
    if "ipykernel" in sys.modules and os.environ.get("JPY_SESSION_NAME"):
        from tqdm.auto import tqdm as widget  # deferred: start-up: tqdm.auto+ipywidgets (~30 ms)

        return widget(total=total, desc="training", unit="step", leave=False)
    tty = sys.stderr.isatty() and "ipykernel" not in sys.modules
    return tqdm(total=total, desc="training", unit="step", file=sys.stderr, ascii=not tty,
                mininterval=0.1 if tty else 10.0, leave=not tty)


def train(model: nn.Module, task: Task, train_sets: Sequence[Dataset],
          val_sets: Sequence[Dataset] | None, config: TrainConfig,
          progress: bool = False) -> TrainResult:
    """Train the ``model.n_models`` models of ``model``, model s on ``train_sets[s]``.

    Model s draws its batches from its own generator (seeded from ``model.seeds[s]``), its
    dropout from its own stream (the model's), clips its own gradient norm and stops on its own
    validation accuracy; Adam updates each element from that element's gradients only, so
    training S models at once gives each the weights it would get alone, to floating-point
    rounding. A model that stops is taken out of the computation (the network shrinks) and
    gets back the weights of its stopping step at the end. The caller's global random state
    is not used. Training runs on the device of the model's parameters (``model.to("cuda")``
    first for a GPU): the datasets stay in host memory and each batch is copied over, so the
    batches, their order and the dropout draws are those of a CPU run; the arithmetic differs
    by rounding.

    Args:
        model: a network with ``n_models`` and ``seeds`` (``Classifier``, ``ThesisClassifier``,
            the sequence models), mapping the task's batches to outputs.
        task: the :class:`Task` (``model.ClassificationTask``, ``seq2seq.CompletionTask``).
        train_sets: one training set per model, all of the same size.
        val_sets: one validation set per model, or None (no validation, no early stop).
        config: the :class:`TrainConfig`.
        progress: show a progress bar over steps (``tqdm.auto``: in a notebook, under
            papermill and on a terminal).

    Returns:
        The :class:`TrainResult`; the model is left in eval mode.
    """
    _reuse_freed_memory()
    n_models = model.n_models
    if len(train_sets) != n_models or (val_sets is not None and len(val_sets) != n_models):
        raise ValueError(f"train_sets and val_sets must hold one dataset per model "
                         f"({n_models}), got {len(train_sets)} and "
                         f"{None if val_sets is None else len(val_sets)}")
    sizes = {len(ds) for ds in train_sets}
    if len(sizes) != 1 or 0 in sizes:
        raise ValueError(f"train_sets must be non-empty and of one size, got sizes {sorted(sizes)}")
    n = sizes.pop()
    names = dict(model.named_parameters())
    for name in config.freeze:
        if name not in names:
            raise ValueError(f"TrainConfig.freeze names unknown parameter {name!r}; known: "
                             f"{sorted(names)}")
        names[name].requires_grad_(False)
    if val_sets is not None and not all(len(ds) for ds in val_sets):
        raise ValueError("val_sets must be None or hold a non-empty dataset for every model")
    sets = list(train_sets) + list(val_sets or [])
    width = max(int(ds.lengths.max(initial=0)) for ds in sets)
    data = _concat([task.tensors(ds, width) for ds in train_sets])  # model s: rows s n ..
    val = None if val_sets is None else _concat([task.tensors(ds, width) for ds in val_sets])
    for part in (data, val or {}):  # the data boundary: the steps read no ids back
        _check_ids(model, part)
    val_rows = None if val_sets is None else [len(ds) for ds in val_sets]
    per_epoch = math.ceil(n / config.batch_size)
    total = config.max_steps or config.epochs * per_epoch
    eval_every = config.eval_every or per_epoch
    params = [p for p in model.parameters() if p.requires_grad]
    device = next(model.parameters()).device
    optimizer = torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay,
                                 fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(config, total))
    orders = [torch.Generator().manual_seed(seed_for(s, "order")) for s in model.seeds]
    seeds, streams = list(model.seeds), list(getattr(model, "streams", []))
    active = list(range(n_models))  # models still training, in the network's order
    stopped: list[int | None] = [None] * n_models
    recent: dict[int, list[float]] = {s: [] for s in range(n_models)}  # last validations
    final: dict[int, dict[str, torch.Tensor]] = {}  # weights of the models that stopped
    history: list[dict[str, Any]] = []
    losses = torch.zeros(n_models, device=device)  # summed on the device: no sync per step
    at = torch.arange(n_models, device=device)  # where the active models' losses go
    counted = 0
    start = time.perf_counter()
    bar = None
    if progress:
        bar = progress_bar(total)
    model.train()
    orders_now = torch.empty(0, n, dtype=torch.long)  # this epoch's rows of the active models
    step = 0
    token = blocks.MATMUL.set(config.matmul)  # the precision of the blocks' products, here
    try:
        while step < total and active:
            if step % per_epoch == 0:
                orders_now = torch.stack([
                    s * n + _epoch_order(n, orders[s], data["lengths"][s * n:(s + 1) * n],
                                         config, step // per_epoch) for s in active])
            i = step % per_epoch
            rows = orders_now[:, i * config.batch_size:(i + 1) * config.batch_size]
            loss = task.loss(model, _on(task.batch(data, rows), device))  # (active,)
            for p in params:  # optimizer.zero_grad(set_to_none=True), without its overhead
                p.grad = None
            loss.sum().backward()
            # drop the graph: its gradient accumulators would keep the shapes of a network that
            # _keep_models shrinks before the next step
            loss = loss.detach()
            if config.grad_clip is not None:
                _clip(params, config.grad_clip, len(active))
            optimizer.step()
            scheduler.step()
            step += 1
            losses[at] += loss
            counted += 1
            if bar is not None:
                bar.update(1)
            if step % eval_every and step != total:
                continue
            summed = losses.tolist()  # the one read-back of the losses, at a validation
            record = {"step": step, "epoch": step / per_epoch, "lr": scheduler.get_last_lr()[0],
                      "train_loss": [summed[s] / counted if s in active else None
                                     for s in range(n_models)]}
            losses.zero_()
            counted = 0
            if val is not None:
                accuracy = _accuracy(model, task, val, val_rows, active)
                record["val_accuracy"] = [accuracy[active.index(s)] if s in active else None
                                          for s in range(n_models)]
                for s, acc in zip(active, accuracy):
                    recent[s] = (recent[s] + [acc])[-config.target_window:]
                done = [s for s in active if config.target_accuracy is not None
                        and len(recent[s]) == config.target_window
                        and sum(recent[s]) / config.target_window >= config.target_accuracy]
                for s in done:
                    stopped[s] = step
                    final[s] = _weights(model, active.index(s))
                if done and len(done) < len(active):  # train on without the models that stopped
                    keep = [j for j, s in enumerate(active) if s not in done]
                    _keep_models(model, optimizer, keep)
                    orders_now = orders_now[keep]
                    at = at[keep]
                active = [s for s in active if s not in done]
            record["seconds"] = time.perf_counter() - start
            history.append(record)
    finally:
        blocks.MATMUL.reset(token)
    if bar is not None:
        bar.close()
    for s in active:
        final[s] = _weights(model, active.index(s))
    _restore_models(model, [final[s] for s in range(n_models)], seeds, streams)
    for name in config.freeze:
        names[name].requires_grad_(True)
    model.eval()
    return TrainResult(history, stopped, step, time.perf_counter() - start)


def _weights(model: nn.Module, j: int) -> dict[str, torch.Tensor]:
    """Model j's parameters (a network without a model dimension is its own model 0)."""
    single = not isinstance(model, blocks.Stacked)  # the thesis' ported model
    return {name: (p.detach() if single else p.detach()[j]).clone()
            for name, p in model.named_parameters()}


def _keep_models(model: nn.Module, optimizer: torch.optim.Optimizer, keep: list[int]) -> None:
    """Shrink the network (and Adam's state) to the models at positions ``keep``."""
    with torch.no_grad():
        for p in model.parameters():
            state = optimizer.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key] = state[key][keep].clone()
            p.data = p.data[keep].clone()
    model.seeds[:] = [model.seeds[j] for j in keep]
    if hasattr(model, "streams"):  # dropout generators (a recurrent model has none)
        model.streams[:] = [model.streams[j] for j in keep]


def _restore_models(model: nn.Module, weights: list[dict[str, torch.Tensor]], seeds: list[int],
                    streams: list[torch.Generator]) -> None:
    """Put every model's final weights back into the full network."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            stacked = [w[name] for w in weights]
            p.data = stacked[0].clone() if p.shape == stacked[0].shape else torch.stack(stacked)
    model.seeds[:] = seeds
    if streams:
        model.streams[:] = streams
