"""One rule for what determines a number: its recipe and ``RESULTS_VERSION``.

A number the book shows is made by a recipe (the parameters of a run, the configuration of a
trained seed, the data configuration of a set) and by the library's code. The code enters
through one integer, :data:`dyckbook.version.RESULTS_VERSION`: a change that moves any number
bumps it, and the golden records of ``tests/test_results_version.py`` (sampling, every
negative kind, the test sets, the stack-free rules and the adversary, training, evaluation,
the completion and recurrent models) fail while a number moved without a bump. A refactor
that moves no number (a function moved between modules, a module split) therefore changes no
key, and every published run, registration and cache entry stays valid.

Three stores keep what was computed, and all three ask :func:`key` and :func:`check`:

``run``           a published run (``pipeline.runner``): its recipe, its notebook's code
                  (imports reduced to the names they bind: moving a module is wiring, not a
                  number) and the digests of what it reads;
``registration``  a registered recipe (``claims.registry``): the run, its recipe, the text of
                  the rules it feeds and the interval method;
``cache``         a cache entry (``experiment.cache``): a trained (configuration, seed), a data
                  set, a block of rules' scores.

A parameter whose value names a set of things (``cells: reduced``, ``configs: positions``)
enters a key by what it expands to today (:data:`EXPANSIONS`): a new positional encoding that
joins the reduced grid makes the grid's run stale and its registration unjudged, as it should.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from dyckbook.experiment.grid import EXPANSIONS
from dyckbook.version import RESULTS_VERSION

__all__ = ["EXECUTION", "EXPANSIONS", "KINDS", "check", "expanded", "key", "recipe"]

#: the stores that keep computed numbers, each keyed by :func:`key`
KINDS = ("run", "registration", "cache")
#: parameters that say where and how fast a run executes, not what it computes
EXECUTION = frozenset({"run_name", "results_dir", "num_threads", "workers", "scheduler",
                       "device"})


def recipe(params: Mapping[str, Any]) -> dict[str, Any]:
    """A run's parameters without its execution settings (:data:`EXECUTION`), sorted."""
    return {k: params[k] for k in sorted(params) if k not in EXECUTION}


def expanded(params: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`recipe` with each parameter of :data:`EXPANSIONS` beside what it expands to
    (``{"cells": "reduced", "cells=": ["k1-L1-...", ...]}``); a value that does not expand (a
    bad name: the notebook rejects it) is kept as it is."""
    out = recipe(params)
    for name, expand in EXPANSIONS.items():
        if isinstance(out.get(name), str):
            try:
                out[f"{name}="] = list(expand(out[name]))
            except ValueError:
                pass
    return out


def key(kind: str, content: Mapping[str, Any], results_version: int | None = None) -> str:
    """The one key: SHA-256 (hex) of ``kind``, ``content`` (a recipe and what else the store
    names: a notebook's code, the inputs' digests, the rules' text) and the results version
    (default :data:`RESULTS_VERSION`)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not isinstance(content, Mapping):
        raise TypeError(f"content must be a mapping, got {type(content).__name__}")
    version = RESULTS_VERSION if results_version is None else results_version
    text = json.dumps({"kind": kind, "content": content, "results_version": version},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def check(stored: str | None, kind: str, content: Mapping[str, Any]) -> str:
    """Whether what a store kept under ``stored`` is still valid for ``content`` today: "" if
    ``stored`` is :func:`key` of it, else why not (nothing stored; another recipe or results
    version). The one answer the runner, the registry and the caches give."""
    if not stored:
        return f"no {kind} key is stored"
    if stored != key(kind, content):
        return (f"its {kind} key differs: its recipe or what it reads changed, or it was made "
                f"under a results version other than {RESULTS_VERSION}")
    return ""
