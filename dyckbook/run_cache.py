"""A folder of trained runs (a record and its model per configuration and seed): long runs resume.

A notebook's runs go through ``book.run_all`` (07's through ``length_study.run_records``),
which runs each configuration's seeds with :func:`run_seeds`. Where the environment variable
``DYCKBOOK_RUN_CACHE`` names a folder, a (configuration, seed) already trained there is read
back, record and weights, and only the rest train; each trained seed is written there as soon
as its configuration finishes. A run that is stopped (the end of a session, a killed kernel)
therefore resumes where it stopped, and the runner's published results are what a run from
scratch would have given: training is a pure function of the configuration, the seed and the
code, and batching seeds changes nothing (``train``), so a seed trained alone equals one
trained beside others.

An entry is two files, ``<key>.pt`` (``results.save_model``) and ``<key>.json`` (the record),
written in that order: the record marks the entry complete. The key digests the configuration
with its seed and the code that trains and scores a model (``code_digest``: every package
module ``run`` imports, docstrings and comments aside, and the C kernels). An edit to that code
makes new entries, never a stale read (even one that adds an option and leaves the trained
models as they were: so a long run is resumed before such an edit, not after); one to the
book, the plots or the analysis keeps them.
The device is not in the key: a GPU's model differs from the CPU's in the last bits only, and
its record names the device (``versions``). An entry that cannot be read is trained again and
replaced.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from dyckbook import data_cache, results

log = logging.getLogger(__name__)

ENV = "DYCKBOOK_RUN_CACHE"
CODE_ROOTS = ("run",)  # a run is made by this module and every package module it imports


def folder() -> Path | None:
    """The cache folder ``DYCKBOOK_RUN_CACHE`` names, or None (no cache)."""
    return data_cache.folder(ENV)


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the code of every module ``run`` imports (``data_cache.code_text``) and of
    the C kernels' source."""
    package = Path(__file__).parent
    digest = hashlib.sha256()
    modules = data_cache.data_modules(CODE_ROOTS)
    for name in modules:
        text = data_cache.code_text((package / f"{name}.py").read_text(encoding="utf-8"))
        digest.update(f"{name}\0{text}\0".encode())
    if "kernels" in modules:
        digest.update(b"kernels.c\0" + (package / "kernels.c").read_bytes())
    return digest.hexdigest()


def key(config: Any, seed: int) -> str:
    """The entry's name: the ``RunConfig`` with ``seed`` and :func:`code_digest`."""
    text = json.dumps({"config": config.with_seed(int(seed)).digest(), "code": code_digest()},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _read(root: Path, config: Any, seed: int, splits: bool) -> Any:
    """The cached ``RunResult`` of ``config`` at ``seed`` (its data splits made again only if
    ``splits``), or None (absent or unreadable)."""
    from dyckbook.run import RunRecord, RunResult, config_digest, data_splits

    name = key(config, seed)
    record_path, model_path = root / f"{name}.json", root / f"{name}.pt"
    if not record_path.is_file():
        return None
    try:
        record = RunRecord.from_dict(results.read_json(record_path))
        model = results.load_model(model_path)
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("run cache entry %s unreadable (%s): trained again", name, error)
        return None
    wanted = config.with_seed(int(seed))
    if config_digest(record.config) != wanted.digest() or list(model.seeds) != [int(seed)]:
        log.warning("run cache entry %s holds another configuration: trained again", name)
        return None
    return RunResult(record, model, data_splits(wanted.data, wanted.seed) if splits else None)


def run_seeds(config: Any, seeds: Sequence[int], batched: bool = True,
              progress: bool = False, device: Any = "cpu", splits: bool = True) -> list[Any]:
    """``run.run_seeds(config, seeds, batched, progress, device)``, each seed read from the
    cache folder when it holds it (whatever device trained it); the seeds it lacks train
    together and are written there. Without a folder, ``run.run_seeds`` itself. A caller that
    reads the records only passes ``splits=False``: a seed read back then has ``splits`` None
    rather than its data made again (at the thesis' size, about 20 s a seed).

    Returns:
        One ``RunResult`` per seed, in the order of ``seeds``.
    """
    from dyckbook import run
    from dyckbook.config import check_fields

    check_fields("run_seeds: ", {"config": config, "seeds": seeds, "batched": batched,
                                 "progress": progress}, run.RUN_SEEDS_ARGS)
    run.training_device(device)
    root = folder()
    if root is None:
        return run.run_seeds(config, seeds, batched, progress=progress, device=device)
    seeds = [int(s) for s in seeds]
    found = {s: _read(root, config, s, splits) for s in dict.fromkeys(seeds)}
    missing = [s for s, r in found.items() if r is None]
    if len(missing) < len(found):
        print(f"resumed {len(found) - len(missing)} of {len(found)} seed(s) from {root}",
              flush=True)
    if missing:
        for r in run.run_seeds(config, missing, batched, progress=progress, device=device):
            name = key(config, r.record.seed)
            results.save_model(root / f"{name}.pt", r.model)
            results.write_json(root / f"{name}.json", r.record.to_dict())
            found[r.record.seed] = r
    return [found[s] for s in seeds]
