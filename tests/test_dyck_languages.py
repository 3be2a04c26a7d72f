"""The Dyck-languages chapter's computations (``dyckbook.chapters.dyck_languages``): the length
bins, the adversary's tables over sets of strings, their rows, the spread sets and what the page
says of them, and the design study's table."""

from __future__ import annotations

import pytest

from dyckbook.chapters import dyck_languages as D
from dyckbook.data.languages import Dyck
from dyckbook.data.negatives import spread_window
from dyckbook.rules import adversary


@pytest.mark.parametrize(("n_lengths", "n_bins"), [(1, 3), (2, 3), (3, 3), (10, 3), (10, 4)])
def test_length_bins_cover_the_lengths_in_order_without_overlap(n_lengths: int,
                                                               n_bins: int) -> None:
    lengths = list(range(30, 30 + 2 * n_lengths, 2))
    bins = D.length_bins(lengths, n_bins)
    assert len(bins) == min(n_bins, n_lengths)
    covered = [n for lo, hi in bins for n in lengths if lo <= n <= hi]
    assert covered == lengths  # each length in exactly one bin, the bins in order
    sizes = [sum(lo <= n <= hi for n in lengths) for lo, hi in bins]
    assert max(sizes) - min(sizes) <= 1


def test_attack_sets_scores_every_set_and_leaves_edit_knn_out_beyond_its_reach() -> None:
    longest = adversary.EDIT_KNN_LONGEST
    sets = {"short": (Dyck(2), "stack", [30, 32, 34]),
            "long": (Dyck(2), "spread", [longest + 2, longest + 4])}
    rules = ("window8", "edit_knn")
    tables, cells = D.attack_sets(sets, rules, n=24, seed=0, n_bins=2, window=4)
    assert list(tables) == list(cells) == ["short", "long"]
    assert set(tables["short"]) == {"window8", "edit_knn"}
    assert set(tables["long"]) == {"window8"}  # edit_knn reads no string that long
    assert cells["short"] == ["30-32", "34-34", "all"]
    for label, table in tables.items():
        for row in table.values():
            assert sorted(row) == sorted(cells[label])
            assert all(0.0 <= v <= 1.0 for v in row.values())
    again, _ = D.attack_sets(sets, rules, n=24, seed=0, n_bins=2, window=4)
    assert again == tables  # the seed fixes every number


def test_oracle_rows_show_each_bin_and_a_dash_where_a_rule_did_not_run() -> None:
    tables = {"A": {"r1": {"30-32": 0.5, "34-34": 0.75, "all": 0.625}},
              "B": {"r1": {"50-50": 1.0, "all": 1.0}, "r2": {"50-50": 0.5, "all": 0.5}}}
    cells = {"A": ["30-32", "34-34", "all"], "B": ["50-50", "all"]}
    rows = D.oracle_rows(tables, cells, ("r1", "r2"))
    assert [(r["set"], r["lengths"]) for r in rows] == [
        ("A", "30–32"), ("A", "34"), ("A", "all"), ("B", "50"), ("B", "all")]
    assert rows[1]["r1"] == "75.0%" and rows[1]["r2"] == "—" and rows[3]["r2"] == "50.0%"


def test_spread_sets_lie_at_and_beyond_the_stack_lengths() -> None:
    sets = D.spread_sets([2, 3], [1, 2], 30, 36)  # (the page's 4× of 48 takes minutes)
    assert list(sets) == [f"Dyck-{k} spread {m}×" for k in (2, 3) for m in (1, 2)]
    for label, (language, regime, lengths) in sets.items():
        m = int(label.split()[-1].rstrip("×"))
        lo, hi = (30, 36) if m == 1 else ((m // 2) * 36 + 2, m * 36)
        assert regime == "spread" and language.k == int(label[5])
        assert lengths and all(lo <= n <= hi and n % 2 == 0 for n in lengths)


def _table(best: float, others: float = 0.5, growing: float = 0.99) -> D.Table:
    return {"window8": {"30-40": best, "all": best - 0.1},
            "depth": {"30-40": others, "all": others},
            D.GROWING: {"30-40": growing, "all": growing}}


def test_spread_summary_names_the_strongest_fixed_reach_rule_and_the_rules_above_the_bar() -> None:
    sets = {"Dyck-2 spread 1×": (Dyck(2), "spread", [30, 48]),
            "Dyck-2 spread 2×": (Dyck(2), "spread", [50, 96])}
    tables = {"Dyck-2 spread 1×": _table(0.8), "Dyck-2 spread 2×": _table(0.52)}
    text = D.spread_summary(tables, sets, bar=0.55)
    assert (f"on Dyck-2 spread 1× (lengths 30–48, W = {spread_window(30)}–{spread_window(48)}) "
            "the strongest rule other than `window_span` is `window8`, 80.0% in its best bin "
            "(70.0% pooled); above the bar (55%): `window8`") in text
    assert "on Dyck-2 spread 2×" in text and "no other rule is above the bar (55%)" in text
    # the growing window is above the bar everywhere, yet never named as beyond it
    assert text.endswith("no rule other than `window_span` is above the bar.")
    still = D.spread_summary({**tables, "Dyck-2 spread 2×": _table(0.6)}, sets, bar=0.55)
    assert still.endswith("these rules are still above the bar: `window8`.")
    only_1x = D.spread_summary({"Dyck-2 spread 1×": tables["Dyck-2 spread 1×"]}, sets, 0.55)
    assert only_1x.endswith("is below its reach.") and "Beyond" not in only_1x


def test_layout_rows_and_sentence_read_the_design_study() -> None:
    layouts = {"spans": {"retyped": "ceil(n / 3)", "source": "ceil(n / 3)", "spread": "n/6"},
               "balanced_accuracy": {
                   "Dyck-2 retyped": {"cnn": 0.8, "window_n/3": 0.6},
                   "Dyck-2 source": {"cnn": 0.7},
                   "Dyck-2 spread": {"cnn": 0.52, "window_n/3": 0.9}}}
    rows = D.layout_rows(layouts)
    assert [(r["set"], r["layout"], r["W"]) for r in rows] == [
        ("Dyck-2", "the book's (retyped member)", "⌈n/3⌉"),
        ("Dyck-2", "the word as member", "⌈n/3⌉"), ("Dyck-2", "spread", "n/6")]
    assert rows[1]["window at n/3"] == "—" and rows[0]["cnn"] == "80.0%"
    text = D.layout_sentence(layouts)
    assert "up to 80.0% on the book's layout and 70.0% with the word as member" in text
    assert "passes 52.0%" in text and "reach 90.0% on it" in text
