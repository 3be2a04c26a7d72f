"""dyckbook: Dyck-k languages, Transformers trained on them, and tools to explain them.

The library is grouped by concept, each package importing only those before it:

``data``        the languages, their exact sampling, the negatives, data sets and splits
``nn``          the tokenizer and the networks: blocks, positions, the classifier, the
                thesis' port, recurrent references, encoder–decoder and decoder-only models
``rules``       the stack-free rules scored beside every model, and the adversary
``experiment``  one run from configuration to record: training, evaluation, caches, results,
                the recipe key (what determines a number)
``interp``      attention measures, probes, activation patching, hand-set constructions
``claims``      the verdict rules and the registered recipes
``chapters``    one module per book page that computes its tables and figures
``pipeline``    manifest, papermill runner, pages, executors, verify, the command line

The package face keeps the short names: ``from dyckbook import languages, model, run`` and
``dyckbook.Dyck`` work as before, imported lazily (``import dyckbook`` is cheap and never pulls
in torch). ARCHITECTURE.md maps the packages and the one path of a run.
"""

from __future__ import annotations

import importlib
from typing import Any

from dyckbook.version import __version__

#: the packages and their layers: a module imports only from its own package or a lower layer
#: (``nn`` and ``rules`` are peers: neither imports the other). ``tests/test_package.py`` holds
#: the code to it and ARCHITECTURE.md's table to this declaration.
LAYERS = {"data": 1, "nn": 2, "rules": 2, "experiment": 3, "interp": 4, "claims": 5,
          "chapters": 6, "pipeline": 7}
PACKAGES = tuple(LAYERS)

#: every library module by its short name: the face's ``from dyckbook import run``
MODULES = {
    **{m: "data" for m in ("vocab", "config", "presets", "languages", "negatives", "hardness",
                           "dataset", "protocol", "thesis", "completion")},
    **{m: "nn" for m in ("tokenizer", "options", "blocks", "positions", "dropout", "kernels",
                         "model", "thesis_model", "recurrent", "seq2seq")},
    **{m: "rules" for m in ("baselines", "adversary")},
    **{m: "experiment" for m in ("train", "evaluate", "intervals", "record", "results",
                                 "checkpoint", "cache", "run", "recipe", "grid",
                                 "completion_scores")},
    **{m: "interp" for m in ("explain", "probes", "patching", "readout",
                             "constructions")},
    **{m: "claims" for m in ("verdicts", "registry")},
}

_EXPORTS = {
    "Alphabet": "vocab", "Dyck": "languages", "sample_negatives": "negatives",
    "Dataset": "dataset", "DataConfig": "protocol", "make_splits": "protocol",
    "ModelConfig": "model", "Classifier": "model", "TrainConfig": "train",
    "RunConfig": "run", "RunRecord": "record", "run_seeds": "run",
    "thesis_config": "run", "load_model": "checkpoint", "save_model": "checkpoint",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def module_path(name: str) -> str:
    """The dotted path of a library module by its short name (``run`` ->
    ``dyckbook.experiment.run``); a ValueError names an unknown one."""
    if name not in MODULES:
        raise ValueError(f"name must be a library module {sorted(MODULES)}, got {name!r}")
    return f"dyckbook.{MODULES[name]}.{name}"


def __getattr__(name: str) -> Any:
    if name in PACKAGES:
        return importlib.import_module(f"dyckbook.{name}")
    if name in MODULES:  # the face: dyckbook.run is dyckbook.experiment.run
        return importlib.import_module(module_path(name))
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dyckbook' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_path(_EXPORTS[name])), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
