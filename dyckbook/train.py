"""Training loop: Adam + cross-entropy, schedules, early stopping, checkpoints, resume, weight snapshots."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dyckbook.evaluate import evaluate

__all__ = [
    "Logger",
    "TensorBoardLogger",
    "TrainConfig",
    "TrainResult",
    "WandbLogger",
    "load_checkpoint",
    "save_checkpoint",
    "select_device",
    "train",
]

SCHEDULES = ("constant", "cosine", "linear")
CHECKPOINT_NAME = "checkpoint.pt"


@dataclass
class TrainConfig:
    """How to train. Batch sizes belong to the loaders, not here."""

    lr: float = 1e-3  # peak learning rate of Adam (the thesis used 1e-5 to 1e-4)
    epochs: int = 10  # passes over the training loader
    max_steps: int | None = None  # stop after this many optimiser steps (None: epochs decide)
    warmup_steps: int = 0  # linear warm-up from 0 to lr over this many steps
    schedule: str = "constant"  # after warm-up: "constant" | "cosine" | "linear" decay to 0
    grad_clip: float | None = None  # clip the global gradient norm to this (None: no clipping)
    weight_decay: float = 0.0  # Adam's L2 weight decay (the thesis: 0)
    target_val_accuracy: float | None = None  # stop after the first epoch reaching this val accuracy
    seed: int = 0  # seeds dropout (and anything else drawn from torch's RNG during training)
    device: str = "auto"  # "auto" (CUDA, then MPS, then CPU) or a torch device string
    checkpoint_dir: str | None = None  # where checkpoint.pt is written (None: no checkpoints)
    checkpoint_every_epochs: int = 1  # checkpoint period in epochs (the last epoch is always saved)
    resume: bool = False  # continue from checkpoint_dir/checkpoint.pt if it exists
    snapshot_params: tuple[str, ...] = ("classifier.weight",)  # parameters recorded over training
    snapshot_every_steps: int | None = None  # snapshot period in steps (None: once per epoch)
    progress: bool | None = None  # tqdm bars; None: on only for an interactive terminal outside CI
    num_threads: int | None = None  # torch intra-op threads while training (None: unchanged)
    eval_train: bool = True  # evaluate the train split in eval mode after each epoch

    def __post_init__(self) -> None:
        self.snapshot_params = tuple(self.snapshot_params)
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ValueError(f"TrainConfig.lr must be > 0, got {self.lr!r}")
        _positive_int("epochs", self.epochs)
        if self.max_steps is not None:
            _positive_int("max_steps", self.max_steps)
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"TrainConfig.warmup_steps must be an int >= 0, got {self.warmup_steps!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"TrainConfig.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise ValueError(f"TrainConfig.grad_clip must be > 0 or None, got {self.grad_clip!r}")
        if self.weight_decay < 0:
            raise ValueError(f"TrainConfig.weight_decay must be >= 0, got {self.weight_decay!r}")
        if self.target_val_accuracy is not None and not 0 < self.target_val_accuracy <= 1:
            raise ValueError(
                f"TrainConfig.target_val_accuracy must be in (0, 1], got {self.target_val_accuracy!r}"
            )
        _positive_int("checkpoint_every_epochs", self.checkpoint_every_epochs)
        if self.snapshot_every_steps is not None:
            _positive_int("snapshot_every_steps", self.snapshot_every_steps)
        if self.num_threads is not None:
            _positive_int("num_threads", self.num_threads)
        if self.resume and self.checkpoint_dir is None:
            raise ValueError("TrainConfig.resume=True needs a checkpoint_dir, got None")
        if not isinstance(self.device, str):
            raise ValueError(f"TrainConfig.device must be a string, got {self.device!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict (tuples become lists)."""
        data = asdict(self)
        data["snapshot_params"] = list(self.snapshot_params)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"TrainConfig.from_dict got unknown keys {unknown}")
        return cls(**data)


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"TrainConfig.{name} must be a positive int, got {value!r}")


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        history: one dict per epoch: ``epoch`` (1-based), ``step`` (optimiser steps so far),
            ``train_loss_running`` (mean loss over the epoch's batches, train mode),
            ``train_loss``/``train_accuracy`` (eval mode, if ``eval_train``), ``val_loss``,
            ``val_accuracy``, ``test_loss``/``test_accuracy`` (if a test loader is given), ``lr``,
            ``seconds`` (wall time of the epoch's training and evaluation).
        snapshots: ``{param_name: (n_snapshots, n_values)}`` flattened parameter values.
        snapshot_steps: (n_snapshots,) the optimiser step of each snapshot (0 = before training).
        stopped_early: the target validation accuracy was reached (or a callback asked to stop).
        steps: optimiser steps taken in total.
        seconds: total wall time of this call (a resumed run counts only the resumed part).
    """

    history: list[dict[str, Any]]
    snapshots: dict[str, np.ndarray]
    snapshot_steps: np.ndarray
    stopped_early: bool = False
    steps: int = 0
    seconds: float = 0.0


class Logger(Protocol):
    """Anything with ``log(metrics, step)`` can receive per-epoch records."""

    def log(self, metrics: dict[str, Any], step: int) -> None: ...


class TensorBoardLogger:
    """Writes per-epoch scalars to TensorBoard; imports ``torch.utils.tensorboard`` only here."""

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the optional tensorboard package

        self.writer = SummaryWriter(log_dir=os.fspath(log_dir))

    def log(self, metrics: dict[str, Any], step: int) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """Logs to Weights & Biases; the package is imported and a run started only on construction."""

    def __init__(self, **init_kwargs: Any) -> None:
        import wandb  # optional dependency

        self.run = wandb.init(**init_kwargs)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


def select_device(spec: str | torch.device = "auto") -> torch.device:
    """Resolve a device spec.

    ``"auto"`` picks CUDA if available, then Apple MPS, then CPU; anything else is passed to
    ``torch.device``. Predictions everywhere are ``logits.argmax(dim=-1)``, which agrees across
    devices: the thesis worked around a wrong MPS argmax in old torch builds, which torch >= 2.3
    (this package's minimum) no longer has.

    Raises:
        ValueError: an unknown device string, or a device that is not available here.
    """
    if isinstance(spec, torch.device):
        device = spec
    elif spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    else:
        try:
            device = torch.device(spec)
        except (RuntimeError, TypeError) as error:
            raise ValueError(f"device must be 'auto' or a torch device string, got {spec!r}") from error
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {spec!r} requested but CUDA is not available")
    if device.type == "mps" and not (
        getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    ):
        raise ValueError(f"device {spec!r} requested but MPS is not available")
    return device


def _lr_lambda(config: TrainConfig, total_steps: int | None) -> Callable[[int], float]:
    warmup = config.warmup_steps

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if config.schedule == "constant":
            return 1.0
        span = max(1, (total_steps or 1) - warmup)
        progress = min(1.0, (step - warmup) / span)
        if config.schedule == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def _atomic_save(obj: Any, path: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_checkpoint(path: str | os.PathLike[str], state: dict[str, Any]) -> None:
    """Write a training checkpoint atomically (tensors and plain containers only)."""
    _atomic_save(state, os.fspath(path))


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint written by :func:`train` (``weights_only=True``, no code is executed)."""
    return torch.load(os.fspath(path), map_location="cpu", weights_only=True)


def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def _progress_enabled(flag: bool | None) -> bool:
    if flag is not None:
        return flag
    return not os.environ.get("CI") and sys.stdout.isatty()


def _batches_in(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:
        return None


def train(
    model: nn.Module,
    train_loader: Iterable[dict[str, Any]],
    val_loader: Iterable[dict[str, Any]] | None,
    config: TrainConfig | None = None,
    test_loader: Iterable[dict[str, Any]] | None = None,
    callbacks: Sequence[Callable[[dict[str, Any], nn.Module], bool | None]] | None = None,
    loggers: Sequence[Logger] | None = None,
) -> TrainResult:
    """Train ``model`` with Adam and cross-entropy.

    Determinism: training runs inside ``torch.random.fork_rng`` seeded with ``config.seed``, so
    dropout is reproducible and the caller's global RNG is left as it was. Data order is the
    loaders' business: before each epoch ``train_loader.set_epoch(epoch)`` is called if it exists
    (``dyckbook.data`` loaders derive their shuffle from (seed, epoch)); a loader without it must
    itself be deterministic for runs, and resumed runs, to repeat exactly. On CPU the same model
    initialisation, data and config give an identical history (except ``seconds``).

    Resume: with ``checkpoint_dir`` set, a checkpoint (model, optimiser, scheduler, RNG state,
    epoch, step, history, snapshots) is written atomically every ``checkpoint_every_epochs``
    epochs and after the last; with ``resume=True`` training continues from it, giving the same
    final weights and history as an uninterrupted run.

    Args:
        model: maps tokens (batch, pos) to logits (batch, n_classes); moved to the chosen device.
        train_loader: iterable of batch dicts (``tokens``, ``labels``, ``lengths``, ``kinds``).
        val_loader: evaluated after every epoch (None: skipped; then no early stopping).
        config: training settings (default ``TrainConfig()``).
        test_loader: also evaluated after every epoch if given.
        callbacks: called as ``callback(record, model)`` after each epoch; returning True stops.
        loggers: objects with ``log(record, step)`` receiving each epoch's record.

    Returns:
        A :class:`TrainResult`.
    """
    config = config or TrainConfig()
    device = select_device(config.device)
    names = dict(model.named_parameters())
    unknown = [name for name in config.snapshot_params if name not in names]
    if unknown:
        raise ValueError(
            f"TrainConfig.snapshot_params has unknown parameter names {unknown}; "
            f"available: {sorted(names)}"
        )
    n_batches = _batches_in(train_loader)
    total_steps = config.max_steps
    if total_steps is None and n_batches is not None:
        total_steps = n_batches * config.epochs
    if config.schedule != "constant" and total_steps is None:
        raise ValueError(
            f"TrainConfig.schedule={config.schedule!r} needs max_steps or a train_loader with len()"
        )

    old_threads = torch.get_num_threads()
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    fork_devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=fork_devices, enabled=True):
            torch.manual_seed(config.seed)
            return _train(
                model, train_loader, val_loader, test_loader, config, device, total_steps,
                n_batches, list(callbacks or ()), list(loggers or ()),
            )
    finally:
        torch.set_num_threads(old_threads)


def _adam(model: nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.Adam:
    """Adam with the fused kernel where torch has one for the device (CPU since torch 2.4, CUDA).

    The fused update is one kernel over all parameters instead of ~10 small ops per tensor; it
    cut the optimiser's share of an experiment-1 step from ~15% to ~5% on CPU (see
    benchmarks/bench_training.py). Its arithmetic differs from the loop version only in rounding.
    """
    kwargs = {"lr": config.lr, "weight_decay": config.weight_decay}
    if device.type in ("cpu", "cuda"):
        try:
            return torch.optim.Adam(model.parameters(), fused=True, **kwargs)
        except (RuntimeError, TypeError, ValueError):  # older torch: no fused CPU kernel
            pass
    return torch.optim.Adam(model.parameters(), **kwargs)


def _train(
    model: nn.Module,
    train_loader: Any,
    val_loader: Any,
    test_loader: Any,
    config: TrainConfig,
    device: torch.device,
    total_steps: int | None,
    n_batches: int | None,
    callbacks: list[Callable[[dict[str, Any], nn.Module], bool | None]],
    loggers: list[Logger],
) -> TrainResult:
    start_time = time.perf_counter()
    model.to(device)
    optimizer = _adam(model, config, device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_lambda(config, total_steps))
    params = dict(model.named_parameters())
    history: list[dict[str, Any]] = []
    snapshots: dict[str, list[torch.Tensor]] = {name: [] for name in config.snapshot_params}
    snapshot_steps: list[int] = []
    step = 0
    start_epoch = 1
    stopped = False

    def snapshot() -> None:
        snapshot_steps.append(step)
        for name in config.snapshot_params:
            snapshots[name].append(params[name].detach().flatten().cpu().clone())

    ckpt_path = (
        os.path.join(config.checkpoint_dir, CHECKPOINT_NAME) if config.checkpoint_dir else None
    )
    if ckpt_path is not None:
        os.makedirs(config.checkpoint_dir, exist_ok=True)
    if config.resume and ckpt_path is not None and os.path.exists(ckpt_path):
        state = load_checkpoint(ckpt_path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        _set_rng_state(state["rng"], device)
        history = list(state["history"])
        step = int(state["step"])
        start_epoch = int(state["epoch"]) + 1
        stopped = bool(state["stopped"])
        snapshot_steps = list(state["snapshot_steps"])
        snapshots = {name: list(state["snapshots"].get(name, [])) for name in config.snapshot_params}
    else:
        snapshot()

    def checkpoint(epoch: int) -> None:
        if ckpt_path is None:
            return
        save_checkpoint(
            ckpt_path,
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": _rng_state(device),
                "epoch": epoch,
                "step": step,
                "stopped": stopped,
                "history": history,
                "snapshot_steps": snapshot_steps,
                "snapshots": snapshots,
                "train_config": config.to_dict(),
            },
        )

    show = _progress_enabled(config.progress)
    out_of_steps = config.max_steps is not None and step >= config.max_steps
    for epoch in range(start_epoch, config.epochs + 1):
        if stopped or out_of_steps:
            break
        epoch_start = time.perf_counter()
        if hasattr(train_loader, "set_epoch"):
            train_loader.set_epoch(epoch)
        model.train()
        loss_sum = 0.0
        seen = 0
        batches: Iterable[dict[str, Any]] = train_loader
        bar = None
        if show:
            from tqdm.auto import tqdm

            bar = tqdm(train_loader, total=n_batches, desc=f"epoch {epoch}", leave=False)
            batches = bar
        for batch in batches:
            tokens = batch["tokens"].to(device, non_blocking=True)
            labels = batch["labels"].to(device, non_blocking=True)
            logits = model(tokens)
            loss = F.cross_entropy(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            scheduler.step()
            step += 1
            # .item() syncs once per step; cheap on CPU and keeps the running loss exact
            loss_sum += loss.item() * len(labels)
            seen += len(labels)
            if config.snapshot_every_steps is not None and step % config.snapshot_every_steps == 0:
                snapshot()
            if config.max_steps is not None and step >= config.max_steps:
                out_of_steps = True
                break
        if bar is not None:
            bar.close()
        if config.snapshot_every_steps is None:
            snapshot()
        record: dict[str, Any] = {
            "epoch": epoch,
            "step": step,
            "train_loss_running": loss_sum / seen if seen else math.nan,
        }
        if config.eval_train:
            metrics = evaluate(model, train_loader, device)
            record["train_loss"] = metrics["loss"]
            record["train_accuracy"] = metrics["accuracy"]
        if val_loader is not None:
            metrics = evaluate(model, val_loader, device)
            record["val_loss"] = metrics["loss"]
            record["val_accuracy"] = metrics["accuracy"]
        if test_loader is not None:
            metrics = evaluate(model, test_loader, device)
            record["test_loss"] = metrics["loss"]
            record["test_accuracy"] = metrics["accuracy"]
        record["lr"] = optimizer.param_groups[0]["lr"]
        record["seconds"] = time.perf_counter() - epoch_start
        history.append(record)
        if (
            config.target_val_accuracy is not None
            and val_loader is not None
            and record["val_accuracy"] >= config.target_val_accuracy
        ):
            stopped = True
        for callback in callbacks:
            if callback(record, model):
                stopped = True
        for logger in loggers:
            logger.log(record, step)
        last = epoch == config.epochs or stopped or out_of_steps
        if last or epoch % config.checkpoint_every_epochs == 0:
            checkpoint(epoch)

    model.eval()
    return TrainResult(
        history=history,
        snapshots={
            name: torch.stack(values).numpy() if values else np.zeros((0, params[name].numel()))
            for name, values in snapshots.items()
        },
        snapshot_steps=np.asarray(snapshot_steps, dtype=np.int64),
        stopped_early=stopped,
        steps=step,
        seconds=time.perf_counter() - start_time,
    )
