"""A folder of generated splits, shared by processes and machines: a run's data made once.

Generating the data of one (data config, seed) is pure: the same config, seed, package source
and numpy give the same splits. Where the environment variable ``DYCKBOOK_DATA_CACHE`` names a
folder, ``run`` reads a seed's splits from it, or makes them and writes them there. Worker
processes inherit the variable, so configurations that share data (07's eight of one k) make
it once; and splits made on the CPU here can be carried to a GPU machine, which then trains
only (ARCHITECTURE.md: 07 on a GPU).

An entry is a gzip-compressed pickle: the cache is written and read by this package only. The
key of an entry is a digest of the data config, the seed, the code of every module the data
are made by (``data_modules``; docstrings and comments aside), numpy's version and, for the
thesis' data, torch's: a change to any of them makes new entries (never a stale read). An entry
that cannot be read is made again and replaced.
"""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import logging
import os
import pickle
import zlib
from collections.abc import Callable
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from dyckbook.results import write_bytes

log = logging.getLogger(__name__)

ENV = "DYCKBOOK_DATA_CACHE"
T = TypeVar("T")


def folder(variable: str = ENV) -> Path | None:
    """The cache folder the environment ``variable`` names (``DYCKBOOK_DATA_CACHE``; the run
    cache's too), or None (no cache)."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return None
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{variable} must name a folder, got {text!r} (a file)")
    return path


#: where the data are made: these modules and every package module they import (anywhere in
#: them), then the files of this module (``make_splits``) and of the one function it takes from
#: the model floor (``thesis_model.thesis_permutation``), whose own imports are not data's
DATA_ROOTS = ("protocol", "completion")
DATA_FILES = ("data_cache", "thesis_model")


def data_modules(roots: tuple[str, ...] = DATA_ROOTS) -> list[str]:
    """The package's modules that ``roots`` import, read from their source, transitively."""
    package, seen, todo = Path(__file__).parent, set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen or not (package / f"{name}.py").is_file():
            continue
        seen.add(name)
        for node in ast.walk(ast.parse((package / f"{name}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "dyckbook":
                todo += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dyckbook."):
                todo.append(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                todo += [a.name.split(".")[1] for a in node.names
                         if a.name.startswith("dyckbook.")]
    return sorted(seen)


def code_text(source: str) -> str:
    """What of a module's source can change a run: its syntax tree without docstrings (the
    comments and the layout are not in the tree)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                and isinstance(first.value.value, str):
            node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree)


@lru_cache(maxsize=1)
def source_digest() -> str:
    """A digest of the code of :func:`data_modules` and ``DATA_FILES`` (names and
    :func:`code_text`) and numpy's version: an edit to the model, the training or the book, or
    to any docstring or comment, keeps the entries; one to the data's makers does not."""
    digest = hashlib.sha256(np.__version__.encode())
    package = Path(__file__).parent
    for name in sorted(set(data_modules()) | set(DATA_FILES)):
        text = code_text((package / f"{name}.py").read_text(encoding="utf-8"))
        digest.update(f"{name}\0{text}\0".encode())
    return digest.hexdigest()


def make_splits(data: Any, seed: int) -> Any:
    """The splits of a data config (``DataConfig`` or ``CompletionDataConfig``) and seed."""
    from dyckbook.completion import CompletionDataConfig, make_completion_splits
    from dyckbook.protocol import make_splits as make_classifier_splits
    from dyckbook.thesis_model import thesis_permutation

    if isinstance(data, CompletionDataConfig):
        return make_completion_splits(data, seed)
    permutation = thesis_permutation(data.n_train) if data.source == "thesis" else None
    return make_classifier_splits(data, seed, permutation)


def key(data: Any, seed: int) -> str:
    """The entry's name: the data config (a dataclass), the seed, ``source_digest`` and, for
    the thesis' own data only, torch's version (its ``randperm`` deals out the thesis' split;
    other data do not depend on torch, so a GPU machine's build reads what the CPU's made)."""
    import torch

    thesis = getattr(data, "source", None) == "thesis"
    text = json.dumps({"type": type(data).__name__, "data": asdict(data), "seed": int(seed),
                       "source": source_digest(), "torch": torch.__version__ if thesis else None},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def load_or_make(data: Any, seed: int, make: Callable[[Any, int], T]) -> T:
    """``make(data, seed)``, read from the cache folder when it holds the entry and written to
    it when not; ``make`` itself when no folder is set."""
    root = folder()
    if root is None:
        return make(data, seed)
    path = root / f"{key(data, seed)}.pkl.gz"
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
