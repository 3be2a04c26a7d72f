"""Tests for dyckbook.evaluate: per-length / per-kind / confusion against hand counts, metrics schema."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from torch import nn

from dyckbook.evaluate import (
    METRICS_SCHEMA,
    MetricsValidationError,
    evaluate,
    validate_metrics,
    write_metrics_json,
)

torch.set_num_threads(1)


class FirstTokenRule(nn.Module):
    """Stub classifier: predicts member iff the first bracket is '(' (id 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        member = (tokens[:, 1] == 3).float()
        return torch.stack([1 - member, member], dim=-1) * 4.0 + self.dummy


def batch(rows: list[tuple[list[int], int, str]]) -> dict:
    width = max(len(t) for t, _, _ in rows)
    tokens = torch.full((len(rows), width), 1, dtype=torch.long)
    for b, (t, _, _) in enumerate(rows):
        tokens[b, : len(t)] = torch.tensor(t)
    return {
        "tokens": tokens,
        "labels": torch.tensor([lab for _, lab, _ in rows]),
        "lengths": torch.tensor([len(t) - 2 for t, _, _ in rows]),
        "kinds": [kind for _, _, kind in rows],
    }


# (tokens, label, kind); the rule predicts 1 iff tokens[1] == 3
ROWS = [
    ([0, 3, 4, 2], 1, "positive"),  # len 2, pred 1: tp
    ([0, 3, 3, 4, 4, 2], 1, "positive"),  # len 4, pred 1: tp
    ([0, 2], 1, "positive"),  # len 0, pred 0 ([end] at 1): fn
    ([0, 4, 3, 2], 0, "closer_first"),  # len 2, pred 0: tn
    ([0, 3, 4, 4, 3, 2], 0, "equal_counts"),  # len 4, pred 1: fp
    ([0, 3, 3, 4, 3, 2], 0, "unequal_counts"),  # len 4, pred 1: fp
]


def test_evaluate_against_hand_counts():
    loader = [batch(ROWS[:4]), batch(ROWS[4:])]
    model = FirstTokenRule()
    model.train()
    metrics = evaluate(model, loader, return_predictions=True)
    assert model.training  # mode restored
    assert metrics["n"] == 6
    assert metrics["accuracy"] == pytest.approx(3 / 6)
    assert metrics["per_length"] == {
        0: {"n": 1, "accuracy": 0.0},
        2: {"n": 2, "accuracy": 1.0},
        4: {"n": 3, "accuracy": 1 / 3},
    }
    assert metrics["per_kind"] == {
        "closer_first": {"n": 1, "accuracy": 1.0},
        "equal_counts": {"n": 1, "accuracy": 0.0},
        "positive": {"n": 3, "accuracy": 2 / 3},
        "unequal_counts": {"n": 1, "accuracy": 0.0},
    }
    assert metrics["confusion"] == [[1, 2], [1, 2]]  # [[tn, fp], [fn, tp]]
    assert metrics["predictions"] == [1, 1, 0, 0, 1, 1]
    # loss: mean cross-entropy of logits (4, 0) / (0, 4) against the labels, computed directly
    right = -math.log(math.exp(4) / (math.exp(4) + 1))
    wrong = -math.log(1 / (math.exp(4) + 1))
    assert metrics["loss"] == pytest.approx((3 * right + 3 * wrong) / 6)


def test_evaluate_empty_loader():
    metrics = evaluate(FirstTokenRule(), [])
    assert metrics["n"] == 0 and math.isnan(metrics["accuracy"])


def valid_metrics() -> dict:
    split = evaluate(FirstTokenRule(), [batch(ROWS)])
    return {
        "schema_version": 1,
        "experiment": "01_dyck1/smoke",
        "seed": 0,
        "config": {"model": {"d_model": 16}, "train": {"lr": 0.001}},
        "data": {"k": 1, "max_length": 16},
        "history": [{"epoch": 1, "step": 10, "train_loss": 0.5, "val_accuracy": 0.75, "seconds": 1.2}],
        "final": {"test": split, "val": split},
        "timing": {"train_seconds": 1.2},
    }


def test_valid_metrics_validate_and_round_trip(tmp_path):
    metrics = valid_metrics()
    validate_metrics(metrics)
    path = tmp_path / "metrics.json"
    write_metrics_json(path, metrics)
    loaded = json.loads(path.read_text())
    validate_metrics(loaded)
    assert loaded["final"]["test"]["per_length"]["4"] == {"n": 3, "accuracy": 1 / 3}
    assert loaded["final"]["test"]["confusion"] == [[1, 2], [1, 2]]


@pytest.mark.parametrize(
    "breaker,fragment",
    [
        (lambda m: m.pop("history"), "history"),
        (lambda m: m.update(seed="zero"), "seed"),
        (lambda m: m["final"]["test"].update(accuracy=1.5), "maximum"),
        (lambda m: m["final"]["test"].update(confusion=[[1, 2, 3], [1, 2]]), "confusion"),
        (lambda m: m["final"]["test"]["per_length"].update({"four": {"n": 1, "accuracy": 1.0}}), "four"),
        (lambda m: m["final"]["val"]["per_kind"]["positive"].pop("n"), "'n'"),
        (lambda m: m.update(final={}), "final"),
        (lambda m: m["history"][0].update(epoch=-1), "epoch"),
        (lambda m: m["timing"].pop("train_seconds"), "train_seconds"),
    ],
)
def test_broken_metrics_fail(tmp_path, breaker, fragment):
    metrics = valid_metrics()
    broken = copy.deepcopy(metrics)
    breaker(broken)
    with pytest.raises(MetricsValidationError, match=fragment):
        validate_metrics(broken)
    path = tmp_path / "metrics.json"
    with pytest.raises(MetricsValidationError):
        write_metrics_json(path, broken)
    assert not path.exists()


def test_jsonschema_backend_agrees_when_available():
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(METRICS_SCHEMA)
    validate_metrics(valid_metrics(), backend="jsonschema")
    broken = valid_metrics()
    broken["final"]["test"]["accuracy"] = 2.0
    with pytest.raises(MetricsValidationError):
        validate_metrics(broken, backend="jsonschema")


def test_unserialisable_metrics_are_rejected():
    metrics = valid_metrics()
    metrics["data"]["spec"] = object()
    with pytest.raises(ValueError, match="JSON"):
        validate_metrics(metrics)


def test_distinct_accuracy_counts_each_string_once():
    # "()" (a member the rule accepts) 8 times plus 2 strings the rule gets wrong, then "()"
    # again (padded wider, in another batch: still the same string) and "(())": 10 / 12 over
    # the rows, 2 / 4 over the distinct strings
    rows = [([0, 3, 4, 2], 1, "positive")] * 8 + [ROWS[2], ROWS[4]]
    padded = batch([([0, 3, 4, 2], 1, "positive"), ([0, 3, 3, 4, 4, 2], 1, "positive")])
    metrics = evaluate(FirstTokenRule(), [batch(rows), padded])
    assert metrics["accuracy"] == pytest.approx(10 / 12)
    assert metrics["distinct"] == {"n": 4, "accuracy": pytest.approx(2 / 4)}
    # a string seen with both labels is two entries (the data is contradictory, not duplicated)
    both = evaluate(FirstTokenRule(), [batch([([0, 3, 4, 2], 1, "positive"),
                                              ([0, 3, 4, 2], 0, "closer_first")])])
    assert both["distinct"] == {"n": 2, "accuracy": 0.5}
    assert math.isnan(evaluate(FirstTokenRule(), [])["distinct"]["accuracy"])
