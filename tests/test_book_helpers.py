"""Tests for dyckbook.book's text builders: every sentence branch and the Markdown table."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from dyckbook.chapters import ablation_grid, completion, page, summary, thesis_literal
from dyckbook.data.presets import thesis_result
from dyckbook.experiment.evaluate import Score
from dyckbook.experiment.record import RunRecord


def _row(accuracy, low, high, seeds=5, failed=0, failures=(), baselines=None):
    return {"label": "causal-learned-end", "seeds": seeds, "failed": failed,
            "failures": list(failures), "accuracy": accuracy, "low": low, "high": high,
            "baselines": baselines or {"counts": 0.7, "bigrams": 0.8, "local": 0.5}}


def test_versus_shortcuts_branches():
    beats = page.versus_shortcuts(_row(0.9, 0.85, 0.95))
    assert beats == ("causal-learned-end scores 90.0% [85.0%, 95.0%] over 5 seeds, 10.0 points "
                     "above the best shortcut (bigrams, 80.0%).")
    below = page.versus_shortcuts(_row(0.6, 0.55, 0.65, seeds=2, failed=1, failures=["chance"]))
    assert below == ("causal-learned-end scores 60.0% [55.0%, 65.0%] over 2 seeds, 1 of them "
                     "failed (chance), below the best shortcut (bigrams, 80.0%).")
    straddles = page.versus_shortcuts(_row(0.82, 0.75, 0.9))
    assert straddles.endswith(": no better than the best shortcut (bigrams, 80.0%).")
    touching = page.versus_shortcuts(_row(0.85, 0.8, 0.9))  # the interval must clear the bar
    assert "no better than" in touching
    none = page.versus_shortcuts(_row(math.nan, math.nan, math.nan, seeds=0))
    assert none == "causal-learned-end: not run."


def _split_row(within, beyond):
    return {"configuration": "cfg", "within": "W", "beyond": "B", "_within": within,
            "_beyond": beyond}


def test_length_split_sentences_branches():
    falls, rises, holds, empty = page.length_split_sentences([
        _split_row([0.99, 1.0, 0.98], [0.6, 0.55, 0.7]),
        _split_row([0.6, 0.55, 0.7], [0.99, 1.0, 0.98]),
        _split_row([0.9, 0.8, 0.95], [0.85, 0.9, 0.7]),
        _split_row([0.9], []),
    ])
    assert falls == "cfg falls beyond the training lengths: W within, B beyond."
    assert rises.startswith("cfg rises beyond")
    assert holds == ("cfg: within and beyond the training lengths cannot be told apart (the 95% "
                     "intervals overlap): W within, B beyond.")
    assert empty == "cfg: no seed run, or no strings on one side."


def _score(n_members, n_others, members_right, others_right):
    n = n_members + n_others
    return Score(n, members_right + others_right, {}, {
        "member": [n_members, members_right], "thesis": [n_others, others_right]}, {})


def _record(failure, score, margin_std=1e-7):
    return RunRecord(config={"seed": 0}, status="failed" if failure else "ok", failure=failure,
                     train_accuracy=0.5, margin_std=margin_std, scores={"thesis": score},
                     baselines={}, baseline_train={}, data={}, steps=1, stopped_at=None,
                     seconds=0.0, n_params=1, history=[])


def test_constant_sentences():
    records = {2: _record("constant", _score(1045, 955, 1045, 0)),  # always "member"
               4: _record("constant", _score(1200, 1800, 0, 1800)),  # always "non-member"
               1: _record(None, _score(10, 10, 10, 10), margin_std=2.0)}
    text = thesis_literal.constant_sentences(records)
    sentences = text.split("Experiment ")[1:]
    assert len(sentences) == 2  # experiment 1 trained
    two, four = sentences
    assert two.startswith("2's output is the same for every input (margin spread 1.0e-07): it "
                          "answers \"member\" every time, 1045 of the 2000 strings")
    assert "so it scores 52.25%" in two and f"{thesis_result(2).test_acc:.2f}%" in two
    assert "answers \"non-member\" every time, 1800 of the 3000 strings" in four
    assert "so it scores 60.00%" in four
    assert thesis_literal.constant_sentences({1: records[1]}) == (
        "Every experiment's output depends on its input.")


def test_pattern_gap_sentence():
    real = np.zeros((2, 1, 3, 3))
    thesis_way = real.copy()
    thesis_way[0, 0, 1, 2] = 0.25
    thesis_way[1, 0, 0, 0] = -0.5
    assert thesis_literal.pattern_gap_sentence(real, thesis_way) == (
        "Largest difference in attention probability between the thesis' extraction and the "
        "forward pass, by layer: layer 0: 0.25; layer 1: 0.5.")


def test_markdown_table():
    rows = [{"name": "a|b", "acc": 0.91234, "gap": math.nan, "_data": [1, 2], "n": 3,
             "none": None},
            {"name": "c", "acc": 1.0, "gap": 0.5, "_data": [], "n": 4}]
    assert page.markdown_table(rows).splitlines() == [
        "| name | acc | gap | n | none |",
        "|---|---|---|---|---|",
        "| a\\|b | 0.912 | n/a | 3 |  |",
        "| c | 1.000 | 0.500 | 4 |  |",
    ]
    assert page.markdown_table(rows, floatfmt=".1%").splitlines()[2] == (
        "| a\\|b | 91.2% | n/a | 3 |  |")
    assert page.markdown_table([{"a|b": 1}]).splitlines()[0] == "| a\\|b |"
    assert page.markdown_table([]) == ""
    # a key only a later row has is a column too (issue 63's 4x verdict lost its evidence)
    assert page.markdown_table([{"a": 1}, {"a": 2, "b": 3}]).splitlines() == [
        "| a | b |", "|---|---|", "| 1 |  |", "| 2 | 3 |"]


@pytest.mark.parametrize("value, text", [(0.9876, "98.8%"), (1.0, "100.0%"), (0.0, "0.0%"),
                                         (math.nan, "n/a"), (None, "n/a"), (math.inf, "n/a")])
def test_pct(value, text):
    assert page.pct(value) == text
    assert page.span(0.5, value) == f"[50.0%, {text}]"


def _summary_row(label: str, acc: float) -> dict:
    return {"label": label, "accuracy": acc, "low": acc - 0.01, "high": acc + 0.01,
            "seeds": 3, "failed": 0, "solved": 0}


def test_completion_sentence_names_the_best_and_the_seed_model():
    rows = [_summary_row("Dyck-1, encoder-decoder, none", 0.99),
            _summary_row("Dyck-1, decoder-only, learned", 0.5),
            _summary_row("Dyck-3, encoder-decoder, none", 0.2),
            _summary_row("Dyck-3, decoder-only, learned", 0.8)]
    text = completion.completion_sentence(rows).splitlines()
    assert text[0].startswith("- Dyck-1: best encoder-decoder, none, 99.0%")
    assert text[1].startswith("- Dyck-3: best decoder-only, learned, 80.0%")
    assert "without positions 20.0%" in text[1]
    rows[3]["accuracy"] = float("nan")  # a configuration with no trained seed is never "best"
    assert ("- Dyck-3: best encoder-decoder, none, 20.0%"
            in completion.completion_sentence(rows))


def test_completion_rows_and_agreement_sentence():
    rows = {"in_distribution": [_summary_row("a", 0.9)], "ood": [_summary_row("a", 0.4)]}
    (out,) = completion.completion_rows(rows)
    assert out["exact match, training lengths"].startswith("90.0%")
    assert out["exact match, longer prefixes"].startswith("40.0%")
    assert "a: 100.0% of completions unchanged" in completion.agreement_sentence({"a": 1.0})
    assert "no such model ran" in completion.agreement_sentence({})
    learned = {"in_distribution": [_summary_row("Dyck-3, decoder-only, learned", 0.99)],
               "ood": [_summary_row("Dyck-3, decoder-only, learned", 0.1)]}
    (out,) = completion.completion_rows(learned, {"Dyck-3, decoder-only, learned": "9"})
    assert out["exact match, longer prefixes"].startswith("untrained positions (10.0%")
    assert out["steps to 99% validation (median)"] == "9"
    (out,) = completion.completion_rows(learned, norms={
        "Dyck-3, decoder-only, learned": "pre"})
    assert out["LayerNorm"] == "pre-LN" and list(out)[:2] == ["configuration", "LayerNorm"]


@pytest.mark.parametrize("stopped_at, accuracies, expected", [
    (500, [0.5, 0.99, 1.0], 500),  # stopped there: its stopped_at
    (None, [0.97, 0.99, 1.0, 1.0, 1.0], 1000),  # trained on: the mean of 3 is 0.997 at 1000
    (None, [0.98, 1.0, 0.98, 0.985], None),  # never
    (None, [0.99, 0.995], None)])  # fewer validations than the window
def test_step_of_target_reads_a_run_that_went_on(stopped_at, accuracies, expected):
    history = [{"step": 250 * (i + 1), "val_accuracy": a} for i, a in enumerate(accuracies)]
    history.insert(1, {"step": 260})  # an entry without a validation is skipped
    record = SimpleNamespace(stopped_at=stopped_at, history=history,
                             config={"train": {"target_window": 3}})
    assert completion.step_of_target(record) == expected


def test_bbh_rows_count_items_missed_by_every_and_by_some_seed():
    from dyckbook.experiment.completion_scores import score_items

    items = [("([", "])"), ("{<", ">}"), ("((", "))"), ("[", "]")]
    right = score_items(lambda prefixes: [t for _, t in items], items)
    one_wrong = score_items(lambda prefixes: ["])", ">}", ")", "]"], items)
    two_wrong = score_items(lambda prefixes: ["])", "}>", ")", "]"], items)
    (row,) = completion.bbh_rows({"m": [right, one_wrong, two_wrong]})
    assert row["each seed"] == "4/4, 3/4, 2/4"
    assert (row["items missed by every seed"], row["by some seed"]) == (0, 2)
    missed = completion.missed_rows({"Dyck-4, m, learned": [one_wrong, two_wrong]}, items)
    assert [(r["item"], r["target"], r["wrong answers"]) for r in missed] == [
        (2, "))", "m: ), )"), (1, ">}", "m: }>")]


def test_bbh_references_are_computed_on_the_items():
    items = [("([", "])"), ("[(", ")]"), ("((", "))")]
    rows = {r["reference"].split(" (")[0]: r["exact match"]
            for r in completion.bbh_reference_rows(items)}
    # random order: 1/2 + 1/2 + 1 over 3 items; a fixed order gets one of the two mixed ones
    assert rows["order-blind: the unmatched closers in a random order"] == "66.7%"
    assert rows["order-blind: the unmatched closers in the best fixed order"] == "66.7%"
    # "([" and "[(" share their counts and differ in target: no order-blind rule gets both
    assert rows["order-blind, fitted to these items"] == "66.7%"
    assert rows["code-davinci-002, chain of thought"] == "56.8%"


def test_the_item_sets_are_bbh_the_original_its_rest_and_a_users_file(tmp_path):
    bbh = [("([", "])"), ("{", "}")]
    original = [("<", ">"), ("([", "])"), ("{", "}"), ("[[", "]]")]
    mine = tmp_path / "mine.json"  # the original BIG-bench format, as a user would give it
    mine.write_text('{"examples": [{"input": "( <", "target_scores": {"> )": 1, ") >": 0}}]}')
    sets = completion.item_sets(bbh, original, f" {mine} ,")
    assert sets == {"BIG-Bench Hard": bbh, "BIG-bench, every item": original,
                    "BIG-bench, the items BBH left out": [("<", ">"), ("[[", "]]")],
                    str(mine): [("(<", ">)")]}
    with pytest.raises(ValueError, match="'.*nowhere.json' is not a file"):
        completion.item_sets(bbh, original, str(tmp_path / "nowhere.json"))
    assert completion.bigbench_paths("") == [] and completion.bigbench_paths(f"{mine}") == [mine]
    (tmp_path / "bad.json").write_text('{"examples": [{"input": "( <", "target": ") >"}]}')
    with pytest.raises(ValueError, match="bad.json, example 0: target '\\) >' is not"):
        completion.item_sets(bbh, original, str(tmp_path / "bad.json"))


def test_bigbench_rows_name_each_set_with_its_size():
    from dyckbook.experiment.completion_scores import score_items

    def scores(items, wrong=0):
        return score_items(lambda p: ["" if i < wrong else t for i, (_, t) in enumerate(items)],
                           items)

    every, rest = [("(", ")"), ("[", "]"), ("<", ">")], [("[", "]")]
    rows = completion.bigbench_rows({"every": {"m": [scores(every, 1)]},
                                     "rest": {"m": [scores(rest)]}, "none": {}})
    assert [(r["items"], r["model"], r["each seed"]) for r in rows] == [
        ("every (3)", "m", "2/3"), ("rest (1)", "m", "1/1")]
    published = completion.bbh_reference_rows(every, published=False)
    assert not any("published" in r["source"] for r in published) and len(published) == 3


def test_group_by_label_and_evidence_rows():
    from dyckbook.chapters.re_examining_thesis import evidence_rows
    from dyckbook.claims.verdicts import RULES, Evidence, verdicts

    records = [SimpleNamespace(label=x) for x in "abab"]
    groups = page.group_by_label(records)
    assert list(groups) == ["a", "b"] and [len(g) for g in groups.values()] == [2, 2]
    judged = verdicts({"bidirectional_k1": Evidence("b k1", (0.995, 1.0, 0.999, 0.998, 1.0))})
    rows = evidence_rows(judged)
    assert [r["value"] for r in rows] == [0.995, 1.0, 0.999, 0.998, 1.0]
    assert {r["config"] for r in rows} == {"bidirectional_k1 (reproduced): b k1"}
    assert RULES[0].claim == "bidirectional_k1"


def test_grid_scope_states_the_budget_and_the_batching():
    from dyckbook.chapters.ablation_grid import GridSpec

    rows = [{"seeds": 5}, {"seeds": 5}]
    text = ablation_grid.grid_scope(rows, GridSpec(max_steps=1500))
    assert text == ("This page shows 2 cells x 5 seeds = 10 trained models: d_model 32, 2 heads, "
                    "at most 1500 steps of 64 strings (of similar length) from 8000 training "
                    "strings of length 4 to 48 (Dyck-1: 40), matrix products in bfloat16, stopped "
                    "early once the mean of a model's last three validation accuracies (hard and "
                    "stack negatives) reaches 99.5%; test sets: stack, hard, local, random.")
    text = ablation_grid.grid_scope(rows, GridSpec(bucket=False, matmul="float32"))
    assert "(drawn at random)" in text and "matrix products in float32" in text


def test_summary_rows_show_hardness_bins_and_the_strongest_shortcut():
    row = {**_row(0.9, 0.85, 0.95), "solved": 2, "n_test": 100,
           "per_bin": {"counter": 0.99, "w>8": 0.51}, "strongest": ("bigrams", 0.8),
           "bin_shares": {"counter": 0.5, "w<=4": 0.0, "w>8": 0.5}}
    shown = page.summary_rows([row], shortcuts=("counts",))[0]
    assert shown["bin counter"] == "99.0%" and shown["bin w>8"] == "51.0%"
    assert "bin w<=4" not in shown  # bins no string of the set is in
    assert shown["strongest shortcut"] == "bigrams 80.0%" and shown["counts"] == "70.0%"
    text = page.bin_sentence([row], "hard")
    assert text.startswith("The hard test set's negatives by hardness bin: 50% counter, 50% w>8 "
                           "(counter: rejected by counts without a stack; w<=n:")
    assert text.endswith("causal-learned-end by bin, balanced against the members of the same "
                         "lengths: counter: 99.0%, w>8: 51.0%.")
    assert page.bin_sentence([{**row, "bin_shares": {}}]) == ""


def test_moved_sentence_names_the_verdicts_that_change():
    def rule(claim):
        return SimpleNamespace(claim=claim)

    stack = [SimpleNamespace(rule=rule("causal"), label="qualified"),
             SimpleNamespace(rule=rule("layers_k1"), label="refuted")]
    local = [SimpleNamespace(rule=rule("causal"), label="refuted"),
             SimpleNamespace(rule=rule("layers_k1"), label="refuted")]
    from dyckbook.chapters.re_examining_thesis import moved_sentence

    assert moved_sentence(stack, local) == (
        "Verdicts that move with the test set: `causal` (refuted on the local sets, qualified on "
        "the stack sets).")
    assert moved_sentence(local, local).startswith("Every verdict is the same")


def test_table52_rows_put_the_strongest_shortcut_beside_the_sound_reruns():
    def sound(label, accuracy, shortcuts):
        record = _record(None, _score(50, 50, 50, round(100 * accuracy) - 50))
        record.label, record.scores = label, {"hard": record.scores["thesis"]}
        record.baselines = {"hard": {name: _score(50, 50, 50, round(100 * a) - 50)
                                     for name, a in shortcuts.items()}}
        return record

    records = [sound("exp. 1: bidirectional, [start]", 0.6, {"ngrams": 0.7, "window8": 0.9}),
               sound("exp. 2 read at [end]", 0.8, {"ngrams": 0.8, "window8": 0.96})]
    rows = {r["exp."]: r for r in summary.table52_rows([], records)}
    assert rows[1]["sound: thesis' model"] == "60.0%, 1 seed"
    assert rows[1]["strongest shortcut, same strings"] == "window8 90.0%"
    assert rows[2]["strongest shortcut, same strings"] == "window8 96.0%"
    assert rows[3]["strongest shortcut, same strings"] == "not run"


def test_table52_rows_read_experiment_7_and_every_label_of_the_sound_reruns():
    """Issue 54: 04_long_context's records ('exp. 7 width, causal, [end]') showed as not run."""
    def sound(label, accuracy):
        record = _record(None, _score(50, 50, 50, round(100 * accuracy) - 50))
        record.label, record.scores, record.baselines = label, {"hard": record.scores["thesis"]}, {}
        return record

    records = [sound("exp. 7 width, causal, [end]", 0.7), sound("exp. 7 width, causal, [end]", 0.9),
               sound("exp. 1: bidirectional, [start]", 0.6), sound("exp. 17: other", 0.1)]
    rows = {r["exp."]: r for r in summary.table52_rows([], records)}
    assert rows[7]["sound: read at [end]"] == "80.0%, 2 seeds"
    assert rows[7]["sound: thesis' model"] == "not run"
    assert rows[1]["sound: thesis' model"] == "60.0%, 1 seed"
    assert rows[1]["sound: read at [end]"] == "not run"
    assert [summary.sound_column(x) for x in ("exp. 2 read at [end]", "exp. 12: x", "exp. x",
                                              "experiment 7")] == [(2, "end"), (12, "start"),
                                                                   None, None]


def test_recipe_departure_names_what_differs_from_table_5_1():
    def literal(epochs, lr, n_train):
        return SimpleNamespace(config={"train": {"epochs": epochs, "lr": lr},
                                       "data": {"n_train": n_train}})

    assert summary.recipe_departure(1, literal(20, 1e-5, 10_000)) == "Table 5.1"
    assert summary.recipe_departure(2, literal(2, 5e-4, 8_000)) == (
        "2 of 10 epochs; lr 0.0005 (Table 5.1: 0.0001); 8,000 of 10,000 strings")
    run7 = SimpleNamespace(label="experiment 7", accuracy=lambda test: 0.5,
                           **vars(literal(100, 1e-5, 10_000)))
    rows = summary.table52_rows([run7], [])
    assert rows[6]["recipe vs Table 5.1"] == "Table 5.1" and rows[0]["recipe vs Table 5.1"] == (
        "not run")


def test_stack_beside_hard_ranks_one_k_by_stack_accuracy():
    def row(cell, k, accuracy, bins=None, strongest=("ngrams", 0.5)):
        return {"cell": cell, "k": k, "accuracy": accuracy, "low": accuracy - 0.01,
                "high": accuracy + 0.01, "per_bin": bins or {}, "strongest": strongest}

    stack = [row("a", 3, 0.6), row("b", 3, 0.8), row("c", 1, 0.99), row("d", 3, math.nan)]
    hard = [row("a", 3, 0.9, {"counter": 0.95, "w>8": 0.6}, ("window8", 0.97)),
            row("b", 3, 0.95, {"counter": 0.99})]
    shown = ablation_grid.stack_beside_hard(stack, hard, 3)
    assert [r["cell"] for r in shown] == ["b", "a"]  # by stack accuracy; NaN (no seed) left out
    assert shown[0]["stack"] == "80.0% [79.0%, 81.0%]" and shown[0]["hard, bin w>8"] == "n/a"
    assert shown[1]["hard, bin w>8"] == "60.0%" and shown[1]["hard: strongest shortcut"] == (
        "window8 97.0%")
    assert ablation_grid.stack_beside_hard(stack, hard, 2) == []


def test_the_end_readout_sentence_sets_every_model_beside_its_shortcut():
    """A model read at [end] has learned only where it clears the strongest shortcut on its
    own test strings: the sentence counts exactly those that do."""
    def record(label, acc, rules):
        return SimpleNamespace(label=label, accuracy=lambda test, a=acc: a,
                               baselines={"hard": {name: SimpleNamespace(accuracy=v)
                                                   for name, v in rules.items()}})

    sound = [record("exp. 2 read at [end]", 0.90, {"local8": 0.95, "counts": 0.5}),
             record("exp. 2 read at [end]", 0.92, {"local8": 0.97, "counts": 0.5}),
             record("exp. 4 read at [end]", 0.99, {"window8": 0.96}),
             record("exp. 1: bidirectional, [start]", 1.0, {"local8": 0.2})]
    text = summary.end_readout_sentence(sound)
    assert "1 of 2 clears it" in text
    assert "experiment 2 91.0% against `local8` 96.0%" in text
    assert "experiment 4 99.0% against `window8` 96.0%" in text and "experiment 1" not in text
    assert "none clears it" in summary.end_readout_sentence(sound[:2])
    assert summary.end_readout_sentence(sound[3:]) == "No sound rerun reads at `[end]`."
