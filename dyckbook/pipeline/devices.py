"""The device a build trains on, and how many CUDA workers share one card.

One setting reaches every training run: ``make book DEVICE=cuda`` -> ``dyckbook run --device``
-> the ``device`` parameter of every training notebook -> ``run.run_seeds(..., device=)``.
The device is provenance (a record's ``versions``, a run's ``run.json``), never part of a
recipe (``recipe.EXECUTION``).

On a card, independent training groups (the runs of a stage, the grid's cells, 07's
configurations, a page's groups in ``page.run_all``) run as concurrent CUDA workers; each
worker's memory is estimated from its configuration (:func:`estimate_bytes`), and no more
workers start than fit in the memory the card has free, or in the share a kernel was given
(:data:`MEMORY_ENV`, which the runner sets for each kernel and a test can set to fake a card).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any

from dyckbook.pipeline import executors

__all__ = ["CONTEXT_BYTES", "DEVICES", "MEMORY_ENV", "card_executor", "check_device",
           "device_memory", "estimate_bytes", "executor", "fitting", "kernel_estimate", "kernels",
           "resolve", "workers"]

#: what ``--device`` and a notebook's ``device`` accept
DEVICES = "cpu | cuda | cuda:N | auto (CUDA where there is one)"
_NAME = re.compile(r"cpu|cuda|cuda:\d+|auto")
#: checkpoint's, named here without importing torch (the command line parses --device first)
MEMORY_ENV, CONTEXT_BYTES = "DYCKBOOK_DEVICE_MEMORY", 768 * 2**20


def estimate_bytes(config: Any, n_models: int = 1) -> int:
    """A worker's device memory: ``checkpoint.training_bytes`` (its configuration's weights,
    Adam's moments, activations, scoring and its context)."""
    from dyckbook.experiment.checkpoint import (  # deferred: start-up: torch (~0.8 s), CLI --help
        training_bytes,
    )

    return training_bytes(config, n_models)


def device_memory(device: str) -> int:
    """What this process may fill of ``device``: ``checkpoint.device_memory`` (the runner's
    share, :data:`MEMORY_ENV`, where it is set: a test fakes a card with it)."""
    from dyckbook.experiment.checkpoint import (  # deferred: start-up: torch (~0.8 s), CLI --help
        device_memory as memory,
    )

    return memory(device)


def check_device(device: Any) -> str:
    """``device`` if it names one (:data:`DEVICES`), else a ValueError naming the value."""
    if not isinstance(device, str) or not _NAME.fullmatch(device):
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    return device


def resolve(device: str, here: bool = True) -> str:
    """The device a run trains on: ``auto`` becomes ``cuda`` where this machine has one, else
    ``cpu``. ``here`` (the runs execute on this machine): CUDA asked for where there is none
    is a ValueError naming the value; on a cluster (``here`` False) the workers resolve it."""
    check_device(device)
    if device == "cpu" or not here:
        return device
    import torch  # deferred: start-up: torch (~0.8 s), CLI --help

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise ValueError(f"device is {device!r}, but this machine has no CUDA device "
                         "(DEVICE=cpu, or auto: CUDA where there is one)")
    return device


def fitting(each: Sequence[int], free: int, requested: int) -> int:
    """How many workers to start, at most ``requested`` (and one per job in ``each``): as many
    as fit in ``free`` bytes when each may be the largest of ``each``; at least one (a job
    larger than the card still gets its try, alone)."""
    if not each:
        return 1
    return max(1, min(requested, len(each), free // max(max(each), 1)))


def workers(device: str, configs: Sequence[Any], n_models: int, requested: int) -> int:
    """Worker processes for training ``configs`` (``RunConfig``s, ``n_models`` seeds each): on
    the CPU ``requested``; on a CUDA device as many as fit in :func:`device_memory` (at most
    ``requested``), each a process with its own context (:func:`estimate_bytes`)."""
    device = resolve(device)
    if device == "cpu":
        return requested
    each = [estimate_bytes(c, n_models) for c in configs]
    return fitting(each, device_memory(device), requested)


def executor(scheduler: str | None, requested: int, device: str, configs: Sequence[Any],
             n_models: int) -> Any:
    """``executors.make_executor`` for training ``configs`` on ``device``: on a CUDA device
    with at most :func:`workers` processes, each task asking Dask for one ``GPU`` resource
    (book/cluster.md)."""
    if resolve(device) == "cpu":
        return executors.make_executor(scheduler, requested)
    return executors.make_executor(scheduler, workers(device, configs, n_models, requested),
                                   gpu=True)


def card_executor(device: str, configs: Sequence[Any], n_models: int) -> Any:
    """For a page's groups (``page.run_all``): on a CUDA device :func:`executor` with a worker
    per configuration (as many as fit); on the CPU None (the groups train in turn, each on
    every core), as a context manager either way."""
    if resolve(device) == "cpu":
        return nullcontext(None)
    return executor(None, len(configs), device, configs, n_models)


def kernel_estimate(params: Mapping[str, Any]) -> int:
    """The least device memory a run needs, from its notebook's parameters, for the runner: its
    training configuration as ``RunConfig.from_flat`` reads the parameters (a classifier's,
    else an encoder-decoder's), one seed (given more, ``run.run_seeds`` trains more seeds
    together); a notebook whose parameters name no such configuration counts as the defaults'
    (a classifier of 16 symbols)."""
    from dyckbook.experiment import run  # deferred: start-up: torch (~0.8 s), CLI --help

    fields = run.config_fields(params)
    for kind in ("classifier", "seq2seq"):
        try:
            return estimate_bytes(run.RunConfig.from_flat(fields, model=kind), 1)
        except (ValueError, TypeError, KeyError):
            continue
    return estimate_bytes(run.RunConfig(), 1)


def kernels(device: str | None, remote: bool, jobs: int, params: Sequence[Mapping[str, Any]]
            ) -> tuple[int, dict[str, str]]:
    """The runner's notebook kernels on ``device`` (resolved; None: as the notebooks say): how
    many run at once, and the environment each gets. On a CUDA device of this machine at most
    ``jobs`` (0: one per core) and no more than fit in its free memory, each the least the
    largest run needs (:func:`kernel_estimate`: one seed); each kernel is told its share
    (:data:`MEMORY_ENV`), which its workers and its groups of seeds keep within. On the CPU, or
    on a cluster (whose workers each hold their card: book/cluster.md), ``jobs`` and nothing."""
    if device in (None, "cpu") or remote:
        return jobs, {}
    free = device_memory(device)
    n = fitting([kernel_estimate(p) for p in params], free, jobs or executors.cores())
    return n, {MEMORY_ENV: str(free // n)}
