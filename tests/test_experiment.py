"""Tests of dyckbook.experiment: parameters, data protocol, the first-character rule, results files."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from dyckbook import experiment as X
from dyckbook.data import DyckDataset
from dyckbook.evaluate import validate_metrics
from dyckbook.languages import Dyck
from dyckbook.negatives import HARD_KINDS
from dyckbook.tokenizer import DyckTokenizer

torch.set_num_threads(1)

SMALL = {"d_model": 16, "d_mlp": 32, "n_train": 160, "n_val": 40, "n_test": 60,
         "n_hard_test": 60, "epochs": 1, "lr": 1e-3, "val_batch_size": 64, "test_batch_size": 64}


def small(**over) -> X.ExperimentParams:
    return X.ExperimentParams(**{**SMALL, **over})


# ------------------------------------------------------------------------------- parameters


@pytest.mark.parametrize("over, name", [
    ({"mask": "sideways"}, "mask"),
    ({"readout": "middle"}, "readout"),
    ({"negatives": "easy"}, "negatives"),
    ({"min_length": 10, "max_length": 4}, "min_length"),
    ({"test_min_length": 5, "test_max_length": 5}, "test_min_length"),
    ({"n_ctx": 8}, "n_ctx"),
    ({"n_train": 0}, "n_train"),
    ({"epochs": 2.0}, "epochs"),
    ({"lr": 0.0}, "lr"),
    ({"positive_fraction": 1.0}, "positive_fraction"),
    ({"n_hard_test": 1}, "n_hard_test"),
    ({"bucket": 1}, "bucket"),
    ({"num_threads": 0}, "num_threads"),
    ({"d_model": 30, "n_heads": 4}, "d_model"),
    ({"device": "tpu"}, "device"),
])
def test_bad_parameters_are_rejected_naming_the_parameter(over, name) -> None:
    with pytest.raises(ValueError, match=name):
        X.ExperimentParams(**over)


def test_params_round_trip_and_namespace() -> None:
    params = small(seed=3, mask="causal")
    assert X.ExperimentParams.from_dict(params.to_dict()) == params
    namespace = {**params.to_dict(), "unrelated": object(), "np": np}
    assert X.ExperimentParams.from_namespace(namespace) == params
    with pytest.raises(ValueError, match="unknown"):
        X.ExperimentParams.from_dict({**params.to_dict(), "epochz": 3})


def test_params_build_valid_model_and_train_configs() -> None:
    params = small(mask="causal", pos_encoding="absolute", n_layers=3)
    config = params.model_config(d_vocab=5)
    assert (config.mask, config.pos_encoding, config.n_layers, config.n_ctx) == ("causal", "absolute", 3, 16)
    train = params.train_config()
    assert train.checkpoint_dir is None and train.lr == params.lr and train.seed == params.seed


# ------------------------------------------------------------------------------- data


def _strings(ds: DyckDataset) -> set[str]:
    return set(ds.strings())


@pytest.mark.parametrize("k", [1, 3])
def test_splits_are_disjoint_balanced_and_sized(k: int) -> None:
    params = small(k=k)
    data = X.make_data(params)
    train, val, test = _strings(data.train), _strings(data.val), _strings(data.test)
    assert not (train & val) and not (train & test) and not (val & test)
    assert (len(data.train), len(data.val), len(data.test)) == (params.n_train, params.n_val, params.n_test)
    for ds in (data.train, data.val, data.test):
        assert int(ds.labels.sum()) * 2 == len(ds)  # the member share survives the split
        assert set(ds.kinds) <= {"positive", "random"}
        language = Dyck(k)
        assert np.array_equal(language.is_member_batch(ds.strings()), ds.labels == 1)


def test_hard_set_is_hard_balanced_unseen_and_in_the_test_range() -> None:
    params = small(k=3, test_min_length=8)
    params = X.ExperimentParams(**{**params.to_dict(), "min_length": 8})
    data = X.make_data(params)
    hard = data.hard
    assert hard is not None and 0 < len(hard) <= params.n_hard_test
    assert set(hard.kinds) - {"positive"} <= set(HARD_KINDS)
    assert int(hard.labels.sum()) * 2 == len(hard)
    assert not (_strings(hard) & (_strings(data.train) | _strings(data.val)))
    assert len(_strings(hard)) == len(hard)  # each string once
    assert hard.lengths.min() >= params.test_min_length and hard.lengths.max() <= params.test_max_length
    assert np.array_equal(Dyck(3).is_member_batch(hard.strings()), hard.labels == 1)


def test_ood_test_set_has_its_own_lengths_and_no_training_string() -> None:
    params = small(k=1, n_ctx=32, max_length=12, test_min_length=8, test_max_length=24)
    data = X.make_data(params)
    assert data.train.lengths.max() <= 12
    assert data.test.lengths.min() >= 8 and data.test.lengths.max() <= 24
    assert not (_strings(data.test) & (_strings(data.train) | _strings(data.val)))
    assert "test" in data.specs


def test_make_data_is_deterministic_and_seed_dependent() -> None:
    a, b, c = X.make_data(small()), X.make_data(small()), X.make_data(small(seed=1))
    for name in ("train", "val", "test", "hard"):
        assert getattr(a, name).strings() == getattr(b, name).strings()
    assert a.train.strings() != c.train.strings()


def test_no_hard_set_when_not_requested() -> None:
    data = X.make_data(small(n_hard_test=0))
    assert data.hard is None and "hard" not in data.splits()


# ------------------------------------------------------------------------------- the shortcut


def test_first_character_rule_is_perfect_when_negatives_start_with_a_closer() -> None:
    language = Dyck(2)
    positives = ["", "()", "[()]", "()[]", "[[]]()"]
    negatives = [")", ")(", "](", "))((", "]()[", ")[]("]
    ds = DyckDataset.from_strings(positives + negatives, [1] * 5 + [0] * 6, language)
    assert X.first_character_rule_accuracy(ds) == 1.0
    assert X.first_character_rule(ds).tolist() == [1] * 5 + [0] * 6


def test_first_character_rule_calls_every_hard_negative_a_member() -> None:
    hard = X.make_data(small(k=2)).hard
    predictions = X.first_character_rule(hard)
    assert (predictions == 1).all()  # hard negatives all start with an opener
    assert X.first_character_rule_accuracy(hard) == pytest.approx(hard.labels.mean())
    assert X.first_character_rule_accuracy(hard) <= 0.5


def test_data_summary_counts() -> None:
    data = X.make_data(small())
    rows = {row["split"]: row for row in X.data_summary(data)}
    assert rows["hard"]["negatives_starting_with_closer"] == 0.0
    assert rows["test"]["n"] == len(data.test)
    assert rows["test"]["distinct_negatives"] == X.distinct_negatives(data.test)


# ------------------------------------------------------------------------------- model and results


def test_causal_start_readout_gives_constant_logits() -> None:
    data = X.make_data(small())
    tokenizer = DyckTokenizer(data.train.language)
    loaders = X.make_loaders(small(), data, tokenizer)
    causal = X.make_model(small(mask="causal"), tokenizer)
    bidirectional = X.make_model(small(pos_encoding="learned"), tokenizer)
    assert X.logit_margins(causal, loaders["test"]).std() < 1e-5
    assert X.logit_margins(bidirectional, loaders["test"]).std() > 1e-4


def test_padding_fraction_drops_with_bucketing() -> None:
    data = X.make_data(small(n_ctx=64, max_length=64, test_max_length=64))
    tokenizer = DyckTokenizer(data.train.language)
    plain = X.padding_fraction(X.D.make_loader(data.train, 16, tokenizer=tokenizer))
    bucketed = X.padding_fraction(X.D.make_loader(data.train, 16, bucket=True, tokenizer=tokenizer))
    assert 0 <= bucketed < plain < 1


def test_bin_per_length_pools_counts() -> None:
    binned = X.bin_per_length({2: {"n": 10, "accuracy": 1.0}, 4: {"n": 30, "accuracy": 0.5},
                               8: {"n": 4, "accuracy": 0.25}}, 4)
    assert binned == {0: {"n": 10, "accuracy": 1.0}, 4: {"n": 30, "accuracy": 0.5},
                      8: {"n": 4, "accuracy": 0.25}}
    assert X.bin_per_length({2: {"n": 10, "accuracy": 1.0}, 4: {"n": 30, "accuracy": 0.5}}, 8) == {
        0: {"n": 40, "accuracy": 0.625}}


def test_verdict_names_the_constant_readout() -> None:
    assert "does not depend on its input" in X.verdict(0.5, 0.8, 0.5, 0.0)
    assert "near chance" in X.verdict(0.9, 0.8, 0.5, 1.0)


def test_pipeline_writes_valid_results_files(tmp_path) -> None:
    params = small(results_dir=str(tmp_path / "run"), run_name="unit-test")
    data = X.make_data(params)
    tokenizer = DyckTokenizer(data.train.language)
    model = X.make_model(params, tokenizer)
    loaders = X.make_loaders(params, data, tokenizer)
    result = X.train_model(model, loaders, params, eval_train=False, progress=False)
    assert len(result.history) == 1 and result.snapshots["classifier.weight"].shape[0] == 2
    final = X.evaluate_splits(model, loaders)
    assert set(final) == {"train", "val", "test", "hard"}
    headline = {"test_accuracy": final["test"]["accuracy"], "logit_std": 0.1}
    metrics = X.assemble_metrics(params, model, data, result, final, extra=headline)
    paths = X.write_results(params.results_dir, metrics,
                            {name: split["per_length"] for name, split in final.items()},
                            {"params": params.to_dict(), "data": data.specs})
    written = json.loads(paths["metrics"].read_text())
    validate_metrics(written)
    assert written["headline"]["test_accuracy"] == pytest.approx(final["test"]["accuracy"])
    assert written["experiment"] == "unit-test"
    with paths["per_length"].open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows and set(rows[0]) == {"split", "length", "n", "accuracy"}
    test_rows = [r for r in rows if r["split"] == "test"]
    assert sum(int(r["n"]) for r in test_rows) == len(data.test)
    assert json.loads(paths["config"].read_text())["params"]["run_name"] == "unit-test"


def test_same_params_train_to_the_same_history() -> None:
    histories = []
    for _ in range(2):
        params = small(n_train=64, n_val=16, n_test=16, n_hard_test=0)
        data = X.make_data(params)
        tokenizer = DyckTokenizer(data.train.language)
        model = X.make_model(params, tokenizer)
        result = X.train_model(model, X.make_loaders(params, data, tokenizer), params,
                               eval_train=False, progress=False)
        histories.append([{k: v for k, v in r.items() if k != "seconds"} for r in result.history])
    assert histories[0] == histories[1]


# ------------------------------------------------------------------------------- the notebooks

NOTEBOOKS = ("01_dyck1", "02_dyck3", "03_ood_lengths", "04_long_context")


@pytest.mark.parametrize("key", NOTEBOOKS)
def test_notebook_sources_are_clean_and_declare_the_manifest_defaults(key: str) -> None:
    from pathlib import Path

    from dyckbook.runner import INJECTED, load_manifest

    root = Path(__file__).resolve().parent.parent
    nb = json.loads((root / "notebooks" / f"{key}.ipynb").read_text(encoding="utf-8"))
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert not any(line.rstrip().endswith(";") for c in code
                   for line in "".join(c["source"]).splitlines())
    tagged = [c for c in code if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1
    namespace: dict = {}
    exec("".join(tagged[0]["source"]), namespace)  # noqa: S102 - flat assignments only
    declared = {k: v for k, v in namespace.items() if not k.startswith("__")}
    manifest = load_manifest(root / "notebooks" / "experiments.yml").notebooks[key].params
    assert {k: v for k, v in declared.items() if k not in INJECTED} == manifest
    assert set(INJECTED) <= set(declared)
    X.ExperimentParams.from_namespace(declared)  # the defaults are valid parameters
