"""dyckbook: Dyck-k languages, Transformers trained on them, and tools to explain them.

The main names are imported lazily, so ``import dyckbook`` is cheap and the numpy-only floors
never pull in torch. The modules, their layers and the one path of a run are described in
ARCHITECTURE.md.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from dyckbook.version import __version__

_MODULES = {m.name for m in pkgutil.iter_modules(__path__)}

_EXPORTS = {
    "Alphabet": "vocab", "Dyck": "languages", "sample_negatives": "negatives",
    "Dataset": "dataset", "DataConfig": "protocol", "make_splits": "protocol",
    "ModelConfig": "model", "Classifier": "model", "TrainConfig": "train",
    "RunConfig": "run", "RunRecord": "record", "run_seeds": "run",
    "thesis_config": "run", "load_model": "checkpoint", "save_model": "checkpoint",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name in _MODULES and name not in _EXPORTS:  # dyckbook.run, dyckbook.chapters, ...
        return importlib.import_module(f"dyckbook.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dyckbook' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"dyckbook.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
