"""Tests for the thesis presets: internal consistency, the model they build, the data they name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dyckbook.data import presets
from dyckbook.data.presets import (
    THESIS_EXPERIMENTS,
    THESIS_RESULTS,
    ThesisData,
    ThesisExperiment,
    thesis_experiment,
)
from dyckbook.data.thesis import thesis_is_dyck_word, thesis_samples, thesis_split_sizes
from dyckbook.nn.thesis_model import ThesisClassifier, ThesisModelConfig, thesis_permutation


def expected_params(e: ThesisExperiment) -> int:
    """Parameter count from the architecture alone (embedding, blocks, 2-way head)."""
    d, f = e.d_model, e.d_mlp
    block = 4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d
    return (3 + 2 * e.k) * d + e.n_layers * block + (2 * d + 2)


def test_tables_are_complete_and_round_trip() -> None:
    assert sorted(THESIS_EXPERIMENTS) == sorted(THESIS_RESULTS) == list(range(1, 8))
    for i, e in THESIS_EXPERIMENTS.items():
        assert e.experiment == i == THESIS_RESULTS[i].experiment
        assert ThesisExperiment.from_dict(e.to_dict()) == e
        assert ThesisExperiment.from_dict(json.loads(json.dumps(e.to_dict()))) == e


def test_architectures_build_the_thesis_model() -> None:
    assert ThesisClassifier(ThesisModelConfig(**THESIS_EXPERIMENTS[1].architecture()),
                            0).n_params == 1_056_002
    for e in THESIS_EXPERIMENTS.values():
        config = ThesisModelConfig(**e.architecture())
        assert (config.k, config.n_layers, config.mask) == (e.k, e.n_layers, e.mask)
        if e.n_ctx <= 128:  # building experiment 7's model adds nothing but seconds
            assert ThesisClassifier(config, 0).n_params == expected_params(e)


def test_table_wide_invariants() -> None:
    for i, e in THESIS_EXPERIMENTS.items():
        reported = THESIS_RESULTS[i]
        assert e.dropout == 0.1 and e.n_heads == 1  # every row of Table 4.2
        assert e.lr == (1e-4 if i == 2 else 1e-5)  # Table 5.1
        assert max(e.stated_lengths[1], e.data.max_length) <= e.n_ctx
        assert e.data.k <= e.k  # the model's vocabulary holds the data's symbols
        assert (e.test_data is None) == (e.split == "thesis") == (e.stated_test_lengths is None)
        if e.reuses is not None:
            assert e.reuses < i and THESIS_EXPERIMENTS[e.reuses].data == e.data
        if e.mask == "bidirectional":  # perfect training, chance for the causal rows
            assert reported.train_acc == 100.0
        else:
            assert 45 < reported.test_acc < 55 and 45 < reported.val_acc < 55
        if e.split == "thesis":
            assert sum(thesis_split_sizes(e.data.n)) == e.data.n
    assert thesis_split_sizes(THESIS_EXPERIMENTS[1].data.n) == (8000, 1200, 800)


def test_seeded_causal_runs_reproduce_their_reported_accuracy_from_the_data() -> None:
    """A causal model reading [start] answers the same for every string, so its validation and
    test accuracy are class shares of the split; ``seeded_split`` says whether torch's seed-42
    permutation (thesis_permutation) gives the reported ones."""
    labelled: dict[ThesisData, np.ndarray] = {}
    for i, e in THESIS_EXPERIMENTS.items():
        if e.mask != "causal":
            continue
        d = e.data
        if d not in labelled:
            strings = thesis_samples(d.n, d.k, d.min_length, d.max_length, d.balanced)
            labelled[d] = np.array([thesis_is_dyck_word(s, d.k) for s in strings])
        labels, perm = labelled[d], thesis_permutation(d.n)
        n_train, n_val, _ = thesis_split_sizes(d.n)
        shares = []
        for rows in (perm[n_train:n_train + n_val], perm[n_train + n_val:]):
            share = labels[rows].mean() * 100
            shares.append({round(share, 2), round(100 - share, 2)})
        reported = THESIS_RESULTS[i]
        matches = reported.val_acc in shares[0] and reported.test_acc in shares[1]
        assert matches == e.seeded_split, i


def test_bad_inputs_are_rejected() -> None:
    for bad in (0, 8, True, 1.0, "1"):
        with pytest.raises(ValueError, match="experiment must be one of"):
            presets.thesis_experiment(bad)
        with pytest.raises(ValueError, match="experiment must be one of"):
            presets.thesis_result(bad)
    with pytest.raises(ValueError, match="unknown keys"):
        ThesisExperiment.from_dict({**THESIS_EXPERIMENTS[1].to_dict(), "epoch": 3})
    with pytest.raises(ValueError, match="generator"):
        ThesisData(10, 1, 0, 4, generator="0.1.7")
    with pytest.raises(ValueError, match="split"):
        ThesisExperiment.from_dict({**THESIS_EXPERIMENTS[1].to_dict(), "split": "70/30"})


def test_the_thesis_profile_reruns_table_5_1_as_printed():
    """Where the book shows the thesis' pipeline under the `thesis` profile, its recipe is Table
    5.1's (the cpu profile's departures are printed per row by ``book.recipe_departure``)."""
    from dyckbook.pipeline import runner

    runs = {r.name: r.params for r in runner.resolve_profile(runner.load_manifest(), "thesis")}
    p = runs["thesis-literal"]
    assert p["lr_scale"] == 1.0
    for n in map(int, str(p["experiments"]).split(",")):
        e = thesis_experiment(n)
        assert min(e.epochs, p["max_epochs"]) == e.epochs, n
        assert min(e.data.n, p["max_strings"]) == e.data.n, n
    cpu = {r.name: r.params for r in runner.resolve_profile(runner.load_manifest(), "cpu")}
    assert cpu["thesis-literal"]["max_epochs"] < 20  # hence the per-row departures
