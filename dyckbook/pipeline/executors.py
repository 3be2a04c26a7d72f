"""Where runs and grid cells execute (a local process pool or a Dask cluster), and progress."""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import multiprocessing
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

__all__ = ["MAX_WORKERS", "TEMP_PREFIX", "Progress", "check_scheduler", "cores", "make_executor",
           "progress", "remove_orphaned_folders", "sigterm_interrupts"]

log = logging.getLogger(__name__)

MAX_WORKERS = 512  # more workers than this on one client is a typo, not a plan
#: Environment of every worker process: one BLAS/OpenMP (hence torch) thread each, so that N
#: workers on N cores do not oversubscribe them.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
QUIET_ENV = "DYCKBOOK_QUIET"


def cores() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def make_executor(scheduler: str | None, workers: int, gpu: bool = False) -> cf.Executor:
    """An executor for :func:`dyckbook.pipeline.runner.run` and
    :func:`dyckbook.chapters.ablation_grid.run_grid`.

    Args:
        scheduler: None or ``"processes"``: a local process pool (spawned workers, one torch
            thread each). ``"local"``: a Dask ``LocalCluster`` of worker processes with one
            thread each. ``"tcp://HOST:PORT"``: the Dask scheduler of an existing cluster.
            Under Dask a task whose worker dies is retried once (on a fresh worker), then
            fails with ``KilledWorker`` (on an existing cluster, start its scheduler with
            ``DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=1`` for the same rule).
        workers: processes of the pool or the LocalCluster; 0 means one per core (ignored for
            an existing cluster, whose workers are its own).
        gpu: the tasks train on a GPU: under Dask each asks for one ``GPU`` resource (a
            LocalCluster's workers have one each; a cluster's workers declare theirs with
            ``--resources GPU=1``: book/cluster.md), so only workers on a card take them.

    Returns:
        A ``concurrent.futures.Executor``; ``shutdown(cancel_futures=True)`` cancels what has
        not finished and stops the pool or the LocalCluster.

    Raises:
        ValueError: an unknown scheduler, a bad worker count, Dask not installed, or a
            cluster that cannot be reached (the message names the address).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or not 0 <= workers <= MAX_WORKERS:
        raise ValueError(f"workers must be an int in 0..{MAX_WORKERS}, got {workers!r}")
    workers = workers or cores()
    if check_scheduler(scheduler) == "processes":
        return _Pool(workers)
    return _Dask(scheduler, workers, {"GPU": 1} if gpu else None)


def check_scheduler(scheduler: str | None) -> str:
    """``"processes"``, ``"local"`` or ``"remote"``; a ValueError for anything else."""
    if scheduler in (None, "processes", "local"):
        return scheduler or "processes"
    if isinstance(scheduler, str) and re.fullmatch(r"tcp://[\w.\-\[\]:]+:\d+", scheduler):
        return "remote"
    raise ValueError(f"scheduler must be 'processes', 'local' or 'tcp://HOST:PORT', "
                     f"got {scheduler!r}")


def _init_worker() -> None:
    os.environ.update(ONE_THREAD)
    torch = sys.modules.get("torch")
    if torch is not None:  # imported before this ran (a script's __main__, which spawn re-imports
        torch.set_num_threads(1)  # first): its thread pool no longer reads the environment


class _Pool(cf.ProcessPoolExecutor):
    """A spawned process pool whose ``shutdown(cancel_futures=True)`` also stops running tasks."""

    def __init__(self, workers: int) -> None:
        super().__init__(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                         initializer=_init_worker)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            # the standard pool lets running and already queued tasks finish (and waits for
            # them at exit); a terminated worker's kernel stops by itself when its parent dies
            running = list((self._processes or {}).values())
            for process in running:
                process.terminate()
            # the queue of submitted tasks (megabytes each: a task carries its input files) can
            # no longer drain into dead workers: do not wait for its feeder thread at exit
            if self._call_queue is not None:
                self._call_queue.cancel_join_thread()
            for process in running:  # gone before the caller sweeps their temporary folders
                process.join(timeout=10)
        super().shutdown(wait=wait, cancel_futures=cancel_futures)


class _Dask(cf.Executor):
    """A Dask client's executor that owns its client (and its LocalCluster, if it made one)."""

    def __init__(self, scheduler: str, workers: int, resources: dict | None = None) -> None:
        try:
            from distributed import (  # deferred: optional dependency distributed
                Client,
                LocalCluster,
            )
        except ImportError:
            raise ValueError(f"scheduler {scheduler!r} needs Dask: pip install "
                             "'dyckbook[dask]'") from None
        self._cluster = None
        if scheduler == "local":
            self._cluster = LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                scheduler_kwargs={"allowed_failures": 1}, env=ONE_THREAD,
                silence_logs=logging.ERROR, resources=resources)
            self._client = Client(self._cluster)
        else:
            try:
                self._client = Client(scheduler, timeout="10s")
            except (OSError, TimeoutError) as error:
                raise ValueError(f"cannot reach the Dask scheduler {scheduler!r}: "
                                 f"{error}") from None
            log.info("Dask cluster %s, dashboard %s", scheduler, self._client.dashboard_link)
        # pure=False: two tasks with equal arguments are two runs, never merged into one
        self._executor = self._client.get_executor(pure=False, resources=resources)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        return self._executor.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._executor.shutdown(wait=wait and not cancel_futures)
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()  # stops its worker processes, running tasks included


# ------------------------------------------------------------------------------ clean exits
TEMP_PREFIX = "dyckbook-run-"


def remove_orphaned_folders(tmp: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the temporary folders of runs whose process is gone (a killed worker cannot
    clean up after itself); each is named ``dyckbook-run-<pid>-*``. Returns those removed."""
    removed = []
    for folder in Path(tmp or tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*-*"):
        pid = folder.name.removeprefix(TEMP_PREFIX).split("-", 1)[0]
        if folder.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            log.debug("removed %s (its process %s is gone)", folder, pid)
            removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (``kill``) handled as Ctrl-C while the runner runs: workers stopped, temporary
    folders removed, nothing half-published (only in the main thread, where signals arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# ------------------------------------------------------------------------------ progress
class Progress:
    """Progress over ``total`` items, shown where the reader is.

    A tqdm bar (``tqdm.auto``: a widget in a notebook) when the stream is a terminal or the code
    runs in a Jupyter kernel; plain lines, at most one per ``every`` seconds and a last one,
    when it is not (a log file, a pipe); nothing when ``DYCKBOOK_QUIET=1``.
    """

    def __init__(self, total: int, desc: str, unit: str = "item", stream: TextIO | None = None,
                 every: float = 30.0) -> None:
        self.total, self.done, self.desc, self.unit, self.every = total, 0, desc, unit, every
        self._stream = stream if stream is not None else sys.stderr
        self._start = self._last = time.monotonic()
        self._bar = None
        self.mode = ("off" if os.environ.get(QUIET_ENV) == "1" else
                     "bar" if _interactive(self._stream) else "lines")
        if self.mode == "bar":
            from tqdm.auto import tqdm  # deferred: start-up: tqdm.auto (~10-30 ms) off --help

            self._bar = tqdm(total=total, desc=desc, unit=unit, file=self._stream)

    def update(self, n: int = 1) -> None:
        """``n`` more items are done."""
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.mode == "lines" and (time.monotonic() - self._last >= self.every
                                       or self.done >= self.total):
            self._line()

    def skip(self, n: int = 1) -> None:
        """``n`` items need no work (they leave the total, so they do not distort the ETA)."""
        self.total -= n
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def close(self) -> None:
        """End the bar (plain lines: nothing more to say)."""
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Progress:  # noqa: PYI034 - Self needs Python 3.11
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _line(self) -> None:
        self._last = now = time.monotonic()
        elapsed = now - self._start
        eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
        print(f"{self.desc}: {self.done}/{self.total} {self.unit}s, {_clock(elapsed)} elapsed, "
              f"ETA {_clock(eta)}", file=self._stream, flush=True)


def progress(total: int, desc: str, unit: str = "item") -> Progress:
    """A :class:`Progress` on stderr, e.g. ``with progress(len(cells), "grid", "cell") as p:``."""
    return Progress(total, desc, unit)


def _interactive(stream: TextIO) -> bool:
    in_kernel = "ipykernel" in sys.modules and type(stream).__module__.startswith("ipykernel")
    return in_kernel or (hasattr(stream, "isatty") and stream.isatty())


def _clock(seconds: float) -> str:
    if math.isnan(seconds):  # no rate yet
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def package_path() -> str:
    """``PYTHONPATH`` for a notebook's kernel: the folder that holds this ``dyckbook`` first, so
    the kernel imports the package the runner runs (a checkout not installed with pip, as on a
    lent GPU machine, included), then what was set."""
    here = str(Path(__file__).resolve().parents[2])
    return os.pathsep.join([here, *(p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p and p != here)])
