"""dyckbook: Dyck-k languages, Transformer classifiers trained on them, and tools to explain them.

Public names are imported lazily, so ``import dyckbook`` is cheap and the numpy-only language
layer never pulls in torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # languages (numpy only)
    "Dyck": "dyckbook.languages",
    "ShuffleDyck": "dyckbook.languages",
    "DEFAULT_PAIRS": "dyckbook.languages",
    "sample_lengths": "dyckbook.languages",
    # negatives (numpy only)
    "NEGATIVE_KINDS": "dyckbook.negatives",
    "HARD_KINDS": "dyckbook.negatives",
    "sample_negatives": "dyckbook.negatives",
    "available_kinds": "dyckbook.negatives",
    # tokenizer and data
    "DyckTokenizer": "dyckbook.tokenizer",
    "DyckDataset": "dyckbook.data",
    "DatasetSpec": "dyckbook.data",
    "generate_dataset": "dyckbook.data",
    "load_jsonl": "dyckbook.data",
    "save_jsonl": "dyckbook.data",
    "load_or_generate": "dyckbook.data",
    "split_dataset": "dyckbook.data",
    "split_by_length": "dyckbook.data",
    "make_loader": "dyckbook.data",
    "collate": "dyckbook.data",
    "LengthBucketSampler": "dyckbook.data",
    # model, training, evaluation
    "ModelConfig": "dyckbook.model",
    "TransformerClassifier": "dyckbook.model",
    "save_model": "dyckbook.model",
    "load_model": "dyckbook.model",
    "TrainConfig": "dyckbook.train",
    "train": "dyckbook.train",
    "evaluate": "dyckbook.evaluate",
    "METRICS_SCHEMA": "dyckbook.evaluate",
    "validate_metrics": "dyckbook.evaluate",
    "write_metrics_json": "dyckbook.evaluate",
    "TrainResult": "dyckbook.train",
    "select_device": "dyckbook.train",
    # explainability (arrays) and plotting (figures)
    "attention_patterns": "dyckbook.explain",
    "matching_attention": "dyckbook.explain",
    "preview_statistic": "dyckbook.explain",
    "long_input_summary": "dyckbook.explain",
    "roc_auc": "dyckbook.explain",
    "plot_attention_grid": "dyckbook.plotting",
    "plot_attention_summary": "dyckbook.plotting",
    # baselines and the ablation grid
    "first_character_rule": "dyckbook.baselines",
    "CountsClassifier": "dyckbook.baselines",
    "BagOfTokensClassifier": "dyckbook.baselines",
    "StackAutomaton": "dyckbook.baselines",
    "GridCell": "dyckbook.grid",
    "GridSpec": "dyckbook.grid",
    "cells_named": "dyckbook.grid",
    "run_grid": "dyckbook.grid",
    "summarise": "dyckbook.grid",
    # probes and ablations
    "collect_residuals": "dyckbook.probes",
    "fit_linear_probe": "dyckbook.probes",
    "probe_all": "dyckbook.probes",
    "ablate_heads": "dyckbook.probes",
    "head_ablation_effects": "dyckbook.probes",
    # the thesis as data, and its generators ported literally
    "thesis_samples": "dyckbook.thesis",
    "thesis_balanced": "dyckbook.thesis",
    "thesis_unbalanced": "dyckbook.thesis",
    "THESIS_EXPERIMENTS": "dyckbook.presets",
    "THESIS_RESULTS": "dyckbook.presets",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dyckbook' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # cache: later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from dyckbook.baselines import (BagOfTokensClassifier, CountsClassifier, StackAutomaton,
                                    first_character_rule)
    from dyckbook.data import (DatasetSpec, DyckDataset, LengthBucketSampler, collate,
                               generate_dataset, load_jsonl, load_or_generate, make_loader,
                               save_jsonl, split_by_length, split_dataset)
    from dyckbook.evaluate import METRICS_SCHEMA, evaluate, validate_metrics, write_metrics_json
    from dyckbook.explain import (attention_patterns, long_input_summary, matching_attention,
                                  preview_statistic, roc_auc)
    from dyckbook.languages import DEFAULT_PAIRS, Dyck, ShuffleDyck, sample_lengths
    from dyckbook.model import ModelConfig, TransformerClassifier, load_model, save_model
    from dyckbook.grid import GridCell, GridSpec, cells_named, run_grid, summarise
    from dyckbook.negatives import HARD_KINDS, NEGATIVE_KINDS, available_kinds, sample_negatives
    from dyckbook.plotting import plot_attention_grid, plot_attention_summary
    from dyckbook.presets import THESIS_EXPERIMENTS, THESIS_RESULTS
    from dyckbook.probes import (ablate_heads, collect_residuals, fit_linear_probe,
                                 head_ablation_effects, probe_all)
    from dyckbook.thesis import thesis_balanced, thesis_samples, thesis_unbalanced
    from dyckbook.tokenizer import DyckTokenizer
    from dyckbook.train import TrainConfig, TrainResult, select_device, train
