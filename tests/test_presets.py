"""Tests for the thesis presets: spot checks against Tables 4.2, 5.1, 5.2 and agreement with the manifest."""

from __future__ import annotations

from pathlib import Path

import pytest

from dyckbook import presets, runner
from dyckbook.presets import THESIS_EXPERIMENTS, THESIS_RESULTS, ThesisExperiment

MANIFEST = Path(__file__).resolve().parent.parent / "notebooks" / "experiments.yml"


def test_spot_checks_against_the_thesis_tables() -> None:
    e = presets.thesis_experiment
    assert (e(2).lr, e(2).epochs, e(2).mask) == (1e-4, 10, "causal")  # Table 5.1 row 2
    assert (e(6).d_mlp, e(6).n_ctx, e(6).epochs) == (384, 128, 25)  # Tables 4.2 / 5.1 row 6
    assert (e(6).max_length, e(6).test_min_length, e(6).test_max_length) == (96, 32, 128)
    assert (e(7).d_model, e(7).d_mlp, e(7).n_ctx, e(7).epochs) == (384, 768, 4096, 100)
    assert (e(5).n_layers, e(5).pos_encoding) == (3, "absolute")  # Yao et al.'s i/n
    assert presets.thesis_result(2).test_acc == 52.25  # Table 5.2
    assert presets.thesis_result(6).test_acc == 74.98
    assert presets.thesis_result(6).test_loss == 3.0529


def test_table_wide_invariants() -> None:
    assert sorted(THESIS_EXPERIMENTS) == sorted(THESIS_RESULTS) == list(range(1, 8))
    for i, exp in THESIS_EXPERIMENTS.items():
        assert exp.experiment == i and THESIS_RESULTS[i].experiment == i
        assert exp.dropout == 0.1 and exp.n_heads == 1  # every row of Table 4.2
        assert exp.k == (1 if i <= 2 else 3)  # |Σ| = 2 for Dyck-1, 6 for Dyck-3
        assert exp.lr == (1e-4 if i == 2 else 1e-5)  # Table 5.1
        assert exp.max_length <= exp.n_ctx
        n_train, n_val, n_test = exp.split_sizes()
        assert n_train + n_val + n_test == exp.n_strings
        assert ThesisExperiment.from_dict(exp.to_dict()) == exp
    # the thesis' own split of 10k strings: 8000 / 1200 / 800
    assert THESIS_EXPERIMENTS[1].split_sizes() == (8000, 1200, 800)
    # bidirectional rows report 100% train accuracy, causal rows about chance (Table 5.2)
    for i, exp in THESIS_EXPERIMENTS.items():
        if exp.mask == "bidirectional":
            assert THESIS_RESULTS[i].train_acc == 100.0
        else:
            assert 45 < THESIS_RESULTS[i].test_acc < 55


def test_bad_experiment_numbers_are_rejected() -> None:
    with pytest.raises(ValueError, match="experiment must be one of"):
        presets.thesis_experiment(8)
    with pytest.raises(ValueError, match="experiment must be one of"):
        presets.thesis_result(0)
    with pytest.raises(ValueError, match="unknown ThesisExperiment fields"):
        ThesisExperiment.from_dict({**THESIS_EXPERIMENTS[1].to_dict(), "epoch": 3})


def test_manifest_thesis_profile_equals_the_presets() -> None:
    """The manifest repeats the thesis numbers; this keeps the two from drifting apart."""
    specs = runner.resolve_profile(runner.load_manifest(MANIFEST), "thesis")
    seen = set()
    for spec in specs:
        exp = spec.params.get("experiment")
        if exp is None:
            continue
        seen.add(exp)
        expected = THESIS_EXPERIMENTS[exp].manifest_params()
        actual = {key: spec.params[key] for key in expected}
        assert actual == expected, (spec.name, {k: (actual[k], expected[k])
                                                for k in expected if actual[k] != expected[k]})
    assert seen == set(THESIS_EXPERIMENTS)
