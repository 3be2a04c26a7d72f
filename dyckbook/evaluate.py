"""Evaluation of a classifier over a loader (per length, per negative kind, confusion) and the metrics JSON schema."""

from __future__ import annotations

import json
import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "METRICS_SCHEMA",
    "SPLIT_METRICS_SCHEMA",
    "MetricsValidationError",
    "evaluate",
    "validate_metrics",
    "write_metrics_json",
]


def _move(batch: dict[str, Any], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = batch["tokens"].to(device, non_blocking=True)
    labels = batch["labels"].to(device, non_blocking=True)
    return tokens, labels


def evaluate(
    model: nn.Module,
    loader: Iterable[dict[str, Any]],
    device: torch.device | str | None = None,
    return_predictions: bool = False,
) -> dict[str, Any]:
    """Evaluate ``model`` in eval mode on every batch of ``loader`` (no gradients).

    Args:
        model: maps tokens (batch, pos) to logits (batch, n_classes).
        loader: iterable of batch dicts with ``tokens`` (batch, pos), ``labels`` (batch,),
            ``lengths`` (batch,) and ``kinds`` (list[str]).
        device: where to run; None uses the device of the model's first parameter.
        return_predictions: also return ``predictions`` (list[int], loader order) and
            ``p_member`` (list[float], softmax probability of class 1).

    Returns:
        ``{"n", "accuracy", "loss" (mean cross-entropy), "per_length": {length: {"n", "accuracy"}},
        "per_kind": {kind: {"n", "accuracy"}}, "confusion": [[tn, fp], [fn, tp]],
        "distinct": {"n", "accuracy"}}``. ``distinct`` counts each (string, label) once: a
        test split drawn with uniform lengths repeats short strings many times (a Dyck-1 split of
        lengths <= 16 can be a third one string), so ``accuracy`` weighs those few strings
        heavily and ``distinct["accuracy"]`` says how the model does across different strings.
        The confusion matrix has true labels as rows and predictions as columns, class 0
        (non-member) first: ``confusion[1][0]`` counts members rejected (false negatives).
        Predictions are ``logits.argmax(dim=-1)``, identical on every device. An empty loader
        gives n = 0 and NaN accuracy and loss.
    """
    if device is None:
        device = next(model.parameters()).device
    device = torch.device(device)
    was_training = model.training
    model.eval()
    n = 0
    correct = 0
    loss_sum = 0.0
    by_length: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # length -> [n, correct]
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    confusion = [[0, 0], [0, 0]]
    distinct: dict[tuple[bytes, int], int] = {}  # (string's tokens, label) -> correct
    predictions: list[int] = []
    p_member: list[float] = []
    try:
        with torch.inference_mode():
            for batch in loader:
                tokens, labels = _move(batch, device)
                logits = model(tokens)
                loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
                pred = logits.argmax(dim=-1)
                hit = (pred == labels).cpu().tolist()
                labels_list = labels.cpu().tolist()
                pred_list = pred.cpu().tolist()
                lengths = batch["lengths"].tolist()
                kinds = batch["kinds"]
                rows = batch["tokens"].cpu().numpy()
                for i, ok in enumerate(hit):
                    # [start] + string + [end]: identical strings give one key (and, the model
                    # being deterministic in eval mode, one verdict)
                    distinct[(rows[i, : int(lengths[i]) + 2].tobytes(), labels_list[i])] = ok
                    cell = by_length[int(lengths[i])]
                    cell[0] += 1
                    cell[1] += ok
                    cell = by_kind[kinds[i]]
                    cell[0] += 1
                    cell[1] += ok
                    if labels_list[i] in (0, 1) and pred_list[i] in (0, 1):
                        confusion[labels_list[i]][pred_list[i]] += 1
                n += len(hit)
                correct += sum(hit)
                if return_predictions:
                    predictions.extend(pred_list)
                    p_member.extend(logits.softmax(dim=-1)[:, 1].cpu().tolist())
    finally:
        model.train(was_training)
    result: dict[str, Any] = {
        "n": n,
        "accuracy": correct / n if n else math.nan,
        "loss": loss_sum / n if n else math.nan,
        "per_length": {
            length: {"n": c[0], "accuracy": c[1] / c[0]} for length, c in sorted(by_length.items())
        },
        "per_kind": {kind: {"n": c[0], "accuracy": c[1] / c[0]} for kind, c in sorted(by_kind.items())},
        "confusion": confusion,
        "distinct": {
            "n": len(distinct),
            "accuracy": sum(distinct.values()) / len(distinct) if distinct else math.nan,
        },
    }
    if return_predictions:
        result["predictions"] = predictions
        result["p_member"] = p_member
    return result


# --------------------------------------------------------------------- metrics JSON schema
_NUMBER = {"type": "number"}
_COUNT = {"type": "integer", "minimum": 0}
_FRACTION_OR_NULL = {"type": ["number", "null"], "minimum": 0, "maximum": 1}
_CELL = {
    "type": "object",
    "required": ["n", "accuracy"],
    "properties": {"n": _COUNT, "accuracy": _FRACTION_OR_NULL},
}

#: Schema of one split's metrics: what :func:`evaluate` returns, after a JSON round trip
#: (``per_length`` keys become strings of digits; NaN is written as null).
SPLIT_METRICS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["n", "accuracy", "loss", "per_length", "per_kind", "confusion"],
    "properties": {
        "n": _COUNT,
        "accuracy": _FRACTION_OR_NULL,
        "loss": {"type": ["number", "null"], "minimum": 0},
        "per_length": {
            "type": "object",
            "patternProperties": {"^[0-9]+$": _CELL},
            "additionalProperties": False,
        },
        "per_kind": {"type": "object", "additionalProperties": _CELL},
        "confusion": {
            "type": "array",
            "minItems": 2,
            "maxItems": 2,
            "items": {"type": "array", "minItems": 2, "maxItems": 2, "items": _COUNT},
        },
        "distinct": _CELL,
        "predictions": {"type": "array", "items": {"type": "integer"}},
        "p_member": {"type": "array", "items": _NUMBER},
    },
}

#: Schema of the ``metrics.json`` a run writes. Fields:
#:
#: - ``schema_version`` (1), ``experiment`` (run id, e.g. ``"01_dyck1/thesis"``), ``seed``;
#: - ``config``: ``{"model": ModelConfig.to_dict(), "train": TrainConfig.to_dict()}`` (+ extras);
#: - ``data``: the dataset spec(s) (``DatasetSpec`` as a dict, or ``{split: spec}``);
#: - ``history``: one record per epoch (``epoch``, ``step``, ``train_loss``, ``val_accuracy`` ...);
#: - ``final``: ``{split: SPLIT_METRICS_SCHEMA}`` for the splits evaluated at the end
#:   (``train``, ``val``, ``test``, ``ood`` ...), each with per-length and per-kind accuracy and the
#:   confusion matrix ``[[tn, fp], [fn, tp]]`` (rows = truth, columns = prediction);
#: - ``timing``: ``{"train_seconds": float, ...}`` (further numeric entries allowed);
#: - ``environment`` (optional): versions, device.
METRICS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "dyckbook run metrics",
    "type": "object",
    "required": ["schema_version", "experiment", "seed", "config", "data", "history", "final", "timing"],
    "properties": {
        "schema_version": {"type": "integer", "enum": [1]},
        "experiment": {"type": "string", "minLength": 1},
        "seed": {"type": "integer"},
        "config": {
            "type": "object",
            "required": ["model"],
            "properties": {"model": {"type": "object"}, "train": {"type": "object"}},
        },
        "data": {"type": "object"},
        "history": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["epoch", "step"],
                "properties": {"epoch": _COUNT, "step": _COUNT},
                "additionalProperties": {"type": ["number", "null"]},
            },
        },
        "final": {"type": "object", "minProperties": 1, "additionalProperties": SPLIT_METRICS_SCHEMA},
        "timing": {
            "type": "object",
            "required": ["train_seconds"],
            "properties": {"train_seconds": {"type": "number", "minimum": 0}},
            "additionalProperties": {"type": ["number", "null"]},
        },
        "environment": {"type": "object"},
    },
}


class MetricsValidationError(ValueError):
    """A metrics object does not follow :data:`METRICS_SCHEMA`; ``errors`` lists every problem."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("metrics do not match METRICS_SCHEMA: " + "; ".join(errors[:10]))
        self.errors = errors


_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _check(value: Any, schema: dict[str, Any], where: str, errors: list[str]) -> None:
    """A small validator for the JSON Schema keywords used in this module."""
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](value) for t in types):
            errors.append(f"{where}: expected {'/'.join(types)}, got {type(value).__name__}")
            return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    if _TYPES["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: {value!r} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: {value!r} > maximum {schema['maximum']}")
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        errors.append(f"{where}: shorter than {schema['minLength']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: more than {schema['maxItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                _check(item, schema["items"], f"{where}[{i}]", errors)
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                errors.append(f"{where}: missing required key {key!r}")
        if len(value) < schema.get("minProperties", 0):
            errors.append(f"{where}: fewer than {schema['minProperties']} properties")
        props = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            matched = False
            if key in props:
                matched = True
                _check(item, props[key], f"{where}.{key}", errors)
            for pattern, sub in patterns.items():
                if re.search(pattern, key):
                    matched = True
                    _check(item, sub, f"{where}.{key}", errors)
            if not matched:
                if extra is False:
                    errors.append(f"{where}: unexpected key {key!r}")
                elif isinstance(extra, dict):
                    _check(item, extra, f"{where}.{key}", errors)


def _to_json(obj: Any) -> Any:
    """JSON round trip with NaN/inf written as null (strict JSON has no NaN)."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        if hasattr(value, "tolist"):  # numpy / torch scalars and arrays
            return clean(value.tolist())
        return value

    return json.loads(json.dumps(clean(obj), allow_nan=False))


def validate_metrics(obj: Any, backend: str = "builtin") -> None:
    """Check ``obj`` (as it would be written to JSON) against :data:`METRICS_SCHEMA`.

    Args:
        obj: the metrics dict (int keys, numpy numbers and NaN are normalised as when written).
        backend: ``"builtin"`` (the small validator here, no dependency), ``"jsonschema"`` (needs
            the package), or ``"auto"`` (jsonschema when importable).

    Raises:
        MetricsValidationError: listing every violation.
        ValueError: unknown backend, or the object is not JSON-serialisable.
    """
    if backend not in ("builtin", "jsonschema", "auto"):
        raise ValueError(f"backend must be 'builtin', 'jsonschema' or 'auto', got {backend!r}")
    try:
        data = _to_json(obj)
    except (TypeError, ValueError) as error:
        raise ValueError(f"metrics are not JSON-serialisable: {error}") from error
    if backend in ("jsonschema", "auto"):
        try:
            import jsonschema  # type: ignore[import-not-found]
        except ImportError:
            if backend == "jsonschema":
                raise
        else:
            validator = jsonschema.Draft202012Validator(METRICS_SCHEMA)
            errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(data)]
            if errors:
                raise MetricsValidationError(errors)
            return
    errors: list[str] = []
    _check(data, METRICS_SCHEMA, "$", errors)
    if errors:
        raise MetricsValidationError(errors)


def write_metrics_json(path: str | os.PathLike[str], metrics: dict[str, Any]) -> None:
    """Validate ``metrics`` and write it as indented JSON, atomically (temporary file + rename).

    NaN becomes null and dict keys become strings, as in any JSON; nothing is written when the
    metrics fail validation.
    """
    validate_metrics(metrics)
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(_to_json(metrics), handle, indent=2, sort_keys=False)
        handle.write("\n")
    os.replace(tmp, path)
