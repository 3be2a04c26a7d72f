"""Two caches of pure computations, keyed by the one rule (``recipe``): data and trained runs.

Making a (data config, seed)'s splits, and training and scoring a (run config, seed), are pure:
the same configuration, seed and results version give the same result. Where an environment
variable names a folder, the result is read from there, or computed and written there:

``DYCKBOOK_DATA_CACHE``  the splits of a (data config, seed) (:func:`load_or_make`): processes
                         and machines that share the folder make a run's data once (07's eight
                         configurations of one k; data made here and carried to a GPU machine).
``DYCKBOOK_RUN_CACHE``   a trained (run config, seed): its record and its weights
                         (:func:`read_run`, :func:`write_run`; ``run.run_seeds`` reads and
                         writes it), so a stopped run resumes where it stopped.

A key is ``recipe.key("cache", ...)`` of the configuration and the seed, under
``version.RESULTS_VERSION``: a change that moves a number bumps it (the golden records insist),
so it makes new entries, never a stale read; a refactor that moves no number keeps them.

A data entry is a gzip-compressed pickle (written and read by this package only); its key also
holds numpy's version and, for the thesis' own data, torch's (its ``randperm`` deals the
thesis' split). A run entry is ``<key>.pt`` (``checkpoint.save_model``) then ``<key>.json``
(the record), written in that order: the record marks it complete. The device is not in a run
key: a GPU's model differs from the CPU's in the last bits only, and its record names the
device. An entry that cannot be read is made again and replaced.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import pickle
import zlib
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from dyckbook.data.completion import CompletionDataConfig, make_completion_splits
from dyckbook.data.protocol import make_splits as make_classifier_splits
from dyckbook.experiment import recipe
from dyckbook.experiment.results import read_json, write_bytes, write_json

log = logging.getLogger(__name__)

DATA_ENV = "DYCKBOOK_DATA_CACHE"
RUN_ENV = "DYCKBOOK_RUN_CACHE"
T = TypeVar("T")


def folder(variable: str = DATA_ENV) -> Path | None:
    """The cache folder the environment ``variable`` names (``DATA_ENV`` or ``RUN_ENV``), or
    None (no cache)."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return None
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{variable} must name a folder, got {text!r} (a file)")
    return path


# ------------------------------------------------------------------------------ data
def make_splits(data: Any, seed: int) -> Any:
    """The splits of a data config (``DataConfig`` or ``CompletionDataConfig``) and seed."""
    from dyckbook.nn.thesis_model import (  # deferred: start-up: torch (~0.8 s) off dyckbook list
        thesis_permutation,
    )

    if isinstance(data, CompletionDataConfig):
        return make_completion_splits(data, seed)
    permutation = thesis_permutation(data.n_train) if data.source == "thesis" else None
    return make_classifier_splits(data, seed, permutation)


def data_key(data: Any, seed: int) -> str:
    """A data entry's name: the data config (a dataclass), the seed, numpy's version and, for
    the thesis' own data only,
    torch's."""
    import torch  # deferred: start-up: torch (~0.8 s) off dyckbook list

    thesis = getattr(data, "source", None) == "thesis"
    return recipe.key("cache", {"type": type(data).__name__, "data": asdict(data),
                                "seed": int(seed), "numpy": np.__version__,
                                "torch": torch.__version__ if thesis else None})[:24]


def block_key(data: Any, seed: int, names: tuple[str, ...]) -> str:
    """A rules' scores entry's name (``run.baseline_block``): its data entry's, the rules, and
    the results version (``recipe.key``)."""
    return recipe.key("cache", {"data": data_key(data, seed), "rules": list(names)})[:24]


def load_or_make(data: Any, seed: int, make: Callable[[Any, int], T] | None = None,
                 key: str | None = None) -> T:
    """``make(data, seed)`` (default :func:`make_splits`), read from the data cache folder when
    it holds the entry (named ``key``, default :func:`data_key`) and written to it when not;
    ``make`` itself when no folder is set."""
    make = make or make_splits
    root = folder(DATA_ENV)
    if root is None:
        return make(data, seed)
    path = root / f"{key or data_key(data, seed)}.pkl.gz"
    if path.is_file():
        try:
            return pickle.loads(gzip.decompress(path.read_bytes()))
        except (OSError, EOFError, zlib.error, pickle.UnpicklingError, AttributeError,
                ValueError) as error:
            log.warning("data cache entry %s unreadable (%s): made again", path, error)
    made = make(data, seed)
    # compressed: the padded code matrices shrink about fivefold (07's thesis data: ~16 MB)
    write_bytes(path, gzip.compress(pickle.dumps(made, protocol=pickle.HIGHEST_PROTOCOL), 6))
    log.debug("data cache: wrote %s (seed %d)", path, seed)
    return made


# ------------------------------------------------------------------------------ runs
def run_key(config: Any, seed: int) -> str:
    """A run entry's name: the ``RunConfig`` with ``seed``, under the results version."""
    return recipe.key("cache", {"config": config.with_seed(int(seed)).digest()})[:24]


def read_run(root: Path, config: Any, seed: int) -> tuple[dict[str, Any], Any] | None:
    """The cached ``(record as a dict, model)`` of ``config`` at ``seed`` in ``root``, or None
    (absent, unreadable, or another configuration's)."""
    from dyckbook.experiment.checkpoint import (
        load_model,  # deferred: start-up: torch (~0.8 s) off dyckbook list
    )

    name = run_key(config, seed)
    record_path, model_path = root / f"{name}.json", root / f"{name}.pt"
    if not record_path.is_file():
        return None
    try:
        record, model = read_json(record_path), load_model(model_path)
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("run cache entry %s unreadable (%s): trained again", name, error)
        return None
    wanted = config.with_seed(int(seed)).to_dict()
    if not isinstance(record, dict) or record.get("config") != json.loads(json.dumps(wanted)) \
            or list(model.seeds) != [int(seed)]:
        log.warning("run cache entry %s holds another configuration: trained again", name)
        return None
    return record, model


def write_run(root: Path, config: Any, seed: int, record: dict[str, Any], model: Any) -> None:
    """Write a trained seed's model, then its record (which marks the entry complete)."""
    from dyckbook.experiment.checkpoint import (
        save_model,  # deferred: start-up: torch (~0.8 s) off dyckbook list
    )

    name = run_key(config, seed)
    save_model(root / f"{name}.pt", model)
    # in the record's own order: a page built from a cached record reads as a fresh one's
    write_json(root / f"{name}.json", record, sort_keys=False)
