"""Where a profile's runs live, relative to the output root (the repository, or
``$DYCKBOOK_ROOT``)::

    book/runs/<profile>/<group>/<run>.ipynb   executed notebook, published only after success
    book/results/<profile>/<group>/<run>/     what the run wrote (records.jsonl, fig_*.png, ...)
        run.json                              the runner's record (hashes, status, last attempt)
    book/results/<profile>/index.json         the profile's runs, rewritten when a run publishes
    book/pages/                               the pages of the profile a book build shows
    scratch/<notebook>/                       where a notebook run by hand writes (never published)
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dyckbook.experiment.results import read_json, read_stored, resolve, write_bytes

__all__ = ["GZIP_FROM", "PAGES_DIR", "RESULTS_DIR", "RUNS_DIR", "RUN_RECORD", "gzip_folder",
           "migrate_legacy_tree", "profile_index", "run_notebook_path", "run_results_dir",
           "training_groups", "training_seconds"]


RUNS_DIR = Path("book") / "runs"


RESULTS_DIR = Path("book") / "results"


PAGES_DIR = Path("book") / "pages"


RUN_RECORD = "run.json"  # the runner's record of a run, in its results folder

#: records files from this size are committed compressed (the grid's 720 records: 20 MB of JSON,
#: 2.7 MB compressed; git keeps its objects compressed too, but a clone's files are not)
GZIP_FROM = 2**20


def gzip_folder(folder: str | Path) -> dict[str, list[int]]:
    """Store every ``*.jsonl`` under ``folder`` of at least :data:`GZIP_FROM` bytes as
    ``<name>.gz`` (deterministic: no time stamp), once it decompresses to the same bytes;
    returns ``{relative path: [bytes before, bytes after]}``."""
    changed, folder = {}, Path(folder)
    for path in sorted(folder.rglob("*.jsonl")):
        data = path.read_bytes()
        if len(data) < GZIP_FROM:
            continue
        packed = gzip.compress(data, compresslevel=9, mtime=0)
        if gzip.decompress(packed) != data:
            raise ValueError(f"{path}: its compressed form does not read back; left as it was")
        write_bytes(path.with_name(path.name + ".gz"), packed)
        path.unlink()
        changed[path.relative_to(folder).as_posix()] = [len(data), len(packed)]
    return changed


def training_groups(folder: str | Path) -> dict[str, dict[str, float]]:
    """The training seconds and steps of each group of seeds trained together, from the run
    records under ``folder`` and its subfolders (``records*.jsonl``, or their ``.gz``: a run's
    references keep theirs in ``references/``; not the baselines' companions), keyed
    ``<file path less .jsonl>|<label>|k<k>``, or by the configuration less its seed for a
    record without a label (the grid's cells): the seeds of a group share its time, so each
    group keeps its largest."""
    out: dict[str, dict[str, float]] = {}
    names = {p.relative_to(folder).as_posix().removesuffix(".gz")
             for p in Path(folder).rglob("records*.jsonl*")
             if not any(part.startswith(".") for part in p.relative_to(folder).parts)}
    for name in sorted(n for n in names if n.endswith(".jsonl")
                       and not n.endswith(".baselines.jsonl")):
        for line in read_stored(Path(folder) / name).decode("utf-8").splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            if "seconds" not in record or "config" not in record:
                continue  # not a run record
            config = record["config"]
            label = record.get("label") or json.dumps(
                {k: v for k, v in config.items() if k != "seed"}, sort_keys=True)
            key = f"{name.removesuffix('.jsonl')}|{label}|k{config.get('data', {}).get('k')}"
            group = out.setdefault(key, {"seconds": 0.0, "steps": 0.0})
            group["seconds"] = max(group["seconds"], float(record["seconds"]))
            group["steps"] = max(group["steps"], float(record.get("steps") or 0))
    return out


def training_seconds(folder: str | Path, record: Mapping[str, Any]) -> float:
    """What training the models under ``folder`` took, its groups one after another over the
    worker processes its ``run.json`` (``record``) names (``workers`` 0: one per core of its
    machine): a run whose models were resumed from a cache took less than this itself, since
    earlier attempts trained them."""
    workers = (record.get("params") or {}).get("workers")
    if workers == 0:  # one per core, as pages.machine() names them
        cores = re.search(r"(\d+) cores", str(record.get("machine") or ""))
        workers = int(cores.group(1)) if cores else 1
    total = sum(g["seconds"] for g in training_groups(folder).values())
    return total / max(int(workers or 1), 1)


def _check_name(what: str, name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(f"{what} must be a plain file name, got {name!r}")


def run_notebook_path(profile: str, group: str, run: str,
                      root: str | os.PathLike[str] | None = None) -> Path:
    """``book/runs/<profile>/<group>/<run>.ipynb`` under the output root: a run's published page."""
    for what, name in (("profile", profile), ("group", group), ("run", run)):
        _check_name(what, name)
    return resolve(RUNS_DIR / profile / group / f"{run}.ipynb", root)


def run_results_dir(profile: str, group: str, run: str,
                    root: str | os.PathLike[str] | None = None) -> Path:
    """``book/results/<profile>/<group>/<run>/`` under the output root: a run's published files."""
    for what, name in (("profile", profile), ("group", group), ("run", run)):
        _check_name(what, name)
    return resolve(RESULTS_DIR / profile / group / run, root)


def profile_index(profile: str, root: str | os.PathLike[str] | None = None) -> Path:
    """``book/results/<profile>/index.json``: the runs a profile has published (for the book)."""
    _check_name("profile", profile)
    return resolve(RESULTS_DIR / profile / "index.json", root)


def migrate_legacy_tree(root: str | os.PathLike[str]) -> str | None:
    """Move a tree of the layout before profiles (``book/results/<group>``, one profile for all)
    under the profile its ``index.json`` names; returns that profile, or None if nothing moved.
    Its runs then show as stale (their results folders moved) until rerun; none is deleted."""
    root = Path(root)
    legacy = root / RESULTS_DIR / "index.json"
    if not legacy.is_file():
        return None
    try:
        profile = str(read_json(legacy)["profile"])
    except (ValueError, KeyError, TypeError):
        return None
    for base in (root / RESULTS_DIR, root / RUNS_DIR):
        dest = base / profile
        dest.mkdir(parents=True, exist_ok=True)
        for child in list(base.iterdir()):
            if child.is_dir() and not (child / RUN_RECORD).exists() and any(
                    (g / RUN_RECORD).is_file() or g.suffix == ".ipynb" for g in child.iterdir()):
                if not (dest / child.name).exists():
                    os.replace(child, dest / child.name)
    os.replace(legacy, profile_index(profile, root))
    logging.getLogger(__name__).warning(
        "moved the results of profile %s into %s and %s (results are kept per profile now)",
        profile, RESULTS_DIR / profile, RUNS_DIR / profile)
    return profile
