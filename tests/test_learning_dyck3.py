"""The Dyck-3 learning study's page module: recipes as registered text, resumable training,
the stack-top targets of its probes, the references."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dyckbook.chapters import learning_dyck3 as L
from dyckbook.data.dataset import Dataset
from dyckbook.data.languages import Dyck
from dyckbook.data.negatives import sample_negatives
from dyckbook.experiment import results
from dyckbook.nn.recurrent import RecurrentConfig

TINY = "max_steps:3 n_train:120 n_val:20 n_test:20 test_sets:('stack',) d_model:8 d_mlp:16"


def test_recipes_are_read_from_their_text() -> None:
    a, b = L.parse_recipes("lm@k3-L4-causal-learned-mean objective:language_model "
                           "n_train:64000 max_steps:20000 lr:0.001;  "
                           "plain@k3-L2-causal-learned-end train_negatives:stack ;")
    config = a.config(seed=7)
    assert (config.model.n_layers, config.model.readout, config.model.objective) == (
        4, "mean", "language_model")
    assert (config.data.n_train, config.train.max_steps, config.train.lr, config.seed) == (
        64000, 20000, 0.001, 7)
    assert b.config().data.train_negatives == "stack" and b.config().model.n_layers == 2
    assert L.recipe_rows([a])[0]["what it changes"] == (
        "n_train = 64000, max_steps = 20000, lr = 0.001, objective = language_model")


@pytest.mark.parametrize(("text", "message"), [
    ("", "recipes must name at least one recipe"),
    ("lm k3-L2-causal-learned-mean", "each must start with a new 'name@cell', got 'lm'"),
    ("a@k3-L2-causal-learned-mean; a@k3-L2-causal-learned-end", "a new 'name@cell'"),
    ("a@k3-L2-causal-learned-mean max_steps", "a: expected key:value, got 'max_steps'"),
    ("a@k3-L2-causal-learned-mean flavour:mint", "a: .*flavour"),
    ("a@k3-L2-sideways-learned-mean", "a: cell name"),
    ("a@k3-L2-causal-learned-mean max_steps:0", "a: .*max_steps"),
])
def test_a_bad_recipe_is_named(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        L.parse_recipes(text)


def _tops_by_hand(codes: np.ndarray, length: int, k: int) -> list[int]:
    stack, out = [], []
    for c in codes[:length].tolist():
        if c % 2 == 0:
            stack.append(c >> 1)
        elif stack:
            stack.pop()
        out.append(stack[-1] if stack else k)
    return out


def test_stack_tops_follow_a_stack_on_words_and_on_negatives_with_a_words_heights() -> None:
    """A closer pops whatever is on top (in crossing and deep-mismatch negatives, of another
    type): the type on top is the stack's, not the pairs'."""
    language, rng = Dyck(3), np.random.default_rng(0)
    lengths = rng.integers(5, 13, 40) * 2
    words, _ = language.sample_codes(rng, lengths)
    negatives, neg_lengths, _ = sample_negatives(language, rng, lengths,
                                                 ["crossing", "deep_mismatch"])
    for codes, lens in ((words, lengths), (negatives, neg_lengths)):
        data = Dataset(language, codes, lens, np.ones(len(lens), bool), np.array(["x"] * len(lens)))
        tops = L.stack_tops(data)
        for row in range(len(lens)):
            assert tops[row, : lens[row]].tolist() == _tops_by_hand(codes[row], lens[row], 3)


def test_recipes_resume_from_their_records(tmp_path: Path, monkeypatch) -> None:
    trained: list[str] = []
    real = L.run_all

    def spy(configs, seeds, out, **kw):
        trained.extend(configs)
        return real(configs, seeds, out, **kw)

    monkeypatch.setattr(L, "run_all", spy)
    monkeypatch.delenv("DYCKBOOK_RUN_CACHE", raising=False)
    path = tmp_path / "records.jsonl"
    configs = {r.name: r.config() for r in L.parse_recipes(
        f"a@k3-L1-causal-learned-mean {TINY}; b@k3-L1-causal-learned-end {TINY}")}
    first = L.run_recipes(configs, [0, 1], path)
    assert trained == ["a", "b"] and len(results.read_records(path)) == 4
    again = L.run_recipes(configs, [0, 1], path)  # e.g. on another machine: nothing trained
    assert trained == ["a", "b"]
    assert {k: [r.to_dict() for r in v] for k, v in again.items()} == {
        k: [r.to_dict() for r in v] for k, v in first.items()}
    L.run_recipes({"a": configs["a"]}, [0, 1], path)  # b's records leave the file
    assert trained == ["a", "b"] and {r.label for r in results.read_records(path)} == {"a"}
    # more seeds: a trains again, all its seeds (the run cache would read back 0 and 1), and
    # its file holds each seed once, not its old seeds beside their new records
    L.run_recipes({"a": configs["a"]}, [0, 1, 2], path)
    assert trained == ["a", "b", "a"]
    assert sorted(r.seed for r in results.read_records(path)) == [0, 1, 2]
    # a file holding a seed twice (written before this rule) keeps its latest record
    records = results.read_records(path)
    stale = records[0].to_dict() | {"steps": -1}
    results.write_records(path, [stale, *records])
    again = L.run_recipes({"a": configs["a"]}, [0, 1, 2], path)
    assert trained == ["a", "b", "a"]  # nothing trained
    kept = results.read_records(path)
    assert [r.to_dict() for r in kept] == [r.to_dict() for r in records]
    assert [r.to_dict() for r in again["a"]] == [r.to_dict() for r in records]


def test_references_share_the_first_recipe_data_and_the_largest_budget() -> None:
    configs = {r.name: r.config() for r in L.parse_recipes(
        f"a@k3-L2-causal-learned-mean {TINY}; b@k3-L2-causal-learned-mean {TINY} max_steps:9")}
    refs = L.reference_configs(configs, "stack, lstm")
    assert list(refs) == ["stack RNN", "LSTM"]
    for ref in refs.values():
        assert isinstance(ref.model, RecurrentConfig) and ref.data == configs["a"].data
        assert ref.train.max_steps == 9 and ref.baselines == ()
    assert L.reference_configs(configs, "lstm", steps=5)["LSTM"].train.max_steps == 5
    assert L.reference_configs(configs, "none") == {}


def test_the_sentence_counts_a_recipe_solved_only_in_most_seeds() -> None:
    summary = [{"label": "a", "seeds": 5, "solved": 3}, {"label": "b", "seeds": 4, "solved": 2}]
    text = L.solved_sentence(summary, {"LSTM": 0.9, "construction": 1.0}, 20000)
    assert text.startswith("1 recipe of 2 solved the stack set in most of their seeds (a).")
    assert "trained for 20,000 steps on the same data, score LSTM 90.0%" in text
    assert text.endswith("construction, trained on nothing, scores 100.0%.")


def test_the_curves_are_a_panel_per_recipe_titled_with_its_seeds_solved() -> None:
    from types import SimpleNamespace

    def record(acc: float) -> SimpleNamespace:
        score = SimpleNamespace(correct=round(acc * 100), n=100)
        return SimpleNamespace(history=[{"step": 50, "val_accuracy": [0.6]},
                                        {"step": 100, "val_accuracy": [acc]}],
                               scores={"stack": score},
                               accuracy=lambda name, a=acc: a)

    groups = {f"r{i}": [record(0.995), record(0.9)] for i in range(5)}
    fig = L.plot_curves(groups, columns=4)
    shown = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in shown] == [f"r{i} (1/2 solved)" for i in range(5)]
    assert len(fig.axes) == 8 and all(len(ax.lines) == 3 for ax in shown)  # 2 seeds, the 99% line
    assert shown[3].get_xlabel() == "optimiser steps"  # its column's lowest panel
    assert shown[0].get_xlabel() == ""


def test_reference_rows_show_every_seed_not_only_the_mean() -> None:
    from types import SimpleNamespace

    def rec(a):
        return SimpleNamespace(accuracy=lambda kind, a=a: {"stack": a}[kind])

    rows = L.reference_rows({"stack RNN": [rec(a) for a in (1.0, 0.8487, 1.0, 0.9705, 1.0)],
                             "LSTM": [rec(0.998)]}, construction=1.0)
    assert [r["reference"] for r in rows] == ["stack RNN", "LSTM", "construction"]
    stack = rows[0]
    assert stack["seeds"] == 5 and stack["stack-set accuracy (mean)"] == "96.4%"
    assert stack["lowest, highest seed"] == "84.9%, 100.0%"
    assert stack["seeds at 99% or more"] == "3 of 5"
    assert rows[2]["seeds"] == "-" and rows[2]["stack-set accuracy (mean)"] == "100.0%"
    assert len(L.reference_rows({"LSTM": [rec(0.5)]})) == 1  # no construction: no row


def test_the_probed_sentence_says_when_the_probed_model_is_not_the_record() -> None:
    same = L.probed_sentence({"a": (1.0, 1.0)})
    assert "a 100.0% (its record: 100.0%)" in same and "trained again" not in same
    differs = L.probed_sentence({"a": (0.6059, 0.6169), "b": (1.0, 1.0)})
    assert "a 60.6% (its record: 61.7%), b 100.0%" in differs and "trained again" in differs
    assert L.probed_sentence({}) == ""
