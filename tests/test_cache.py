"""Tests for cache: a run's data made once and its trained seeds kept, read back equal,
keyed by every configuration field and every line of code they depend on."""

import dataclasses
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from dyckbook.chapters import page
from dyckbook.data.completion import CompletionDataConfig
from dyckbook.data.protocol import DataConfig, make_splits
from dyckbook.experiment import cache, results, run
from dyckbook.experiment.run import RunConfig
from dyckbook.experiment.train import TrainConfig
from dyckbook.nn.model import ModelConfig
from dyckbook.pipeline.executors import make_executor

DATA = DataConfig(k=2, min_length=4, max_length=10, n_train=200, n_val=40, n_test=80,
                  test_max_length=32, test_sets=("hard", "stack"))


@pytest.fixture
def data_cache(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv(cache.DATA_ENV, str(tmp_path / "data"))
    run.data_splits.cache_clear()  # the in-process cache would hide the folder's
    yield tmp_path / "data"
    run.data_splits.cache_clear()


def counting(made: list):
    def make(data, seed):
        made.append((data, seed))
        return make_splits(data, seed)
    return make


def assert_same_splits(a, b) -> None:
    sets_a, sets_b = {"train": a.train, "val": a.val, **a.tests}, {"train": b.train, "val": b.val,
                                                                   **b.tests}
    assert sets_a.keys() == sets_b.keys()
    for name, x in sets_a.items():
        y = sets_b[name]
        assert x.language == y.language, name
        for field in ("codes", "lengths", "labels", "kinds"):
            assert np.array_equal(getattr(x, field), getattr(y, field)), (name, field)


def test_made_once_then_read_back_equal(data_cache: Path) -> None:
    made: list = []
    first = cache.load_or_make(DATA, 3, counting(made))
    second = cache.load_or_make(DATA, 3, counting(made))
    assert len(made) == 1 and len(list(data_cache.glob("*.pkl.gz"))) == 1
    assert_same_splits(second, first)
    assert_same_splits(second, make_splits(DATA, 3))


def test_without_the_variable_nothing_is_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(cache.DATA_ENV, raising=False)
    made: list = []
    cache.load_or_make(DATA, 0, counting(made))
    cache.load_or_make(DATA, 0, counting(made))
    assert len(made) == 2 and cache.folder(cache.DATA_ENV) is None


def test_the_key_tells_apart_what_the_data_depend_on(monkeypatch) -> None:
    base = cache.data_key(DATA, 0)
    assert cache.data_key(DATA, 0) == base
    assert cache.data_key(DATA, 1) != base
    assert cache.data_key(replace(DATA, n_test=81), 0) != base
    assert cache.data_key(CompletionDataConfig(k=2), 0) != cache.data_key(
        CompletionDataConfig(k=3), 0)
    import torch

    thesis = DataConfig(k=1, max_length=16, source="thesis", n_train=100)
    with_torch = cache.data_key(thesis, 0)
    monkeypatch.setattr(torch, "__version__", "9.9.9+cu999")
    assert cache.data_key(DATA, 0) == base  # a CUDA build reads the CPU's entries
    assert cache.data_key(thesis, 0) != with_torch  # but not the thesis' torch-drawn split
    monkeypatch.setattr(cache.recipe, "RESULTS_VERSION", cache.recipe.RESULTS_VERSION + 1)
    assert cache.data_key(DATA, 0) != base


def test_an_unreadable_entry_is_made_again(data_cache: Path) -> None:
    made: list = []
    cache.load_or_make(DATA, 0, counting(made))
    entry = next(data_cache.glob("*.pkl.gz"))
    entry.write_bytes(b"not a pickle")
    again = cache.load_or_make(DATA, 0, counting(made))
    assert len(made) == 2
    assert_same_splits(again, make_splits(DATA, 0))
    assert_same_splits(cache.load_or_make(DATA, 0, counting(made)), again)
    assert len(made) == 2  # the replaced entry reads


def test_a_file_where_the_folder_should_be_is_named(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "f").write_text("")
    monkeypatch.setenv(cache.DATA_ENV, str(tmp_path / "f"))
    with pytest.raises(ValueError, match="DYCKBOOK_DATA_CACHE must name a folder"):
        cache.load_or_make(DATA, 0, make_splits)


def test_run_reads_its_splits_from_the_cache(data_cache: Path) -> None:
    first = run.data_splits(DATA, 5)
    run.data_splits.cache_clear()
    assert len(list(data_cache.glob("*.pkl.gz"))) == 1
    assert_same_splits(run.data_splits(DATA, 5), first)


def test_train_lengths_makes_the_data_then_trains_from_it(tmp_path: Path, monkeypatch,
                                                           capsys) -> None:
    """The GPU procedure (ARCHITECTURE.md): the data made here into a folder, then training that
    reads them gives the records training without the folder gives."""
    from dyckbook.pipeline import runner
    from dyckbook.pipeline.cli import main

    monkeypatch.setenv(cache.DATA_ENV, "")  # restored after: the command sets it
    expected = next(r for r in runner.resolve_profile(runner.load_manifest(), "smoke")
                    if r.name == "generalisation").params
    params = tmp_path / "params.json"
    params.write_text(json.dumps({**expected, "ks": "1", "configs": "causal-none-end,lstm",
                                  "depth_configs": "lstm", "n_seeds": 2, "n_train": 120,
                                  "n_test": 40, "max_steps": 4, "test_max_length": 32}))
    folder = tmp_path / "data"
    assert main(["-q", "train-lengths", "--params", str(params), "--data-cache", str(folder),
                 "--data-only"]) == 0
    assert "4 (data config, seed) splits" in capsys.readouterr().out  # 2 studies x 2 seeds
    assert len(list(folder.glob("*.pkl.gz"))) == 8  # and the rules' scores of each

    def records(out: Path, *extra: str) -> list[dict]:
        run.data_splits.cache_clear()
        assert main(["-q", "train-lengths", "--params", str(params), "--out", str(out),
                     *extra]) == 0
        rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
        return sorted(({k: r[k] for k in ("label", "steps", "scores", "train_accuracy", "data")}
                       for r in rows), key=lambda r: (r["label"], r["scores"]["hard"]["accuracy"]))

    monkeypatch.setattr(cache, "make_splits", lambda *a: pytest.fail("made, not read"))
    monkeypatch.setattr(run, "_make_block", lambda *a: pytest.fail("fitted, not read"))
    run.baseline_block.cache_clear()
    cached = records(tmp_path / "cached", "--data-cache", str(folder))
    monkeypatch.undo()
    monkeypatch.setenv(cache.DATA_ENV, "")
    assert cached == records(tmp_path / "plain")
    assert len(cached) == 6


def test_data_only_needs_the_folder(capsys) -> None:
    from dyckbook.pipeline.cli import main

    assert main(["train-lengths", "--profile", "smoke", "--data-only"]) == 2
    assert "--data-only needs --data-cache DIR" in capsys.readouterr().err


CONFIG = RunConfig(DataConfig(k=2, min_length=4, max_length=10, n_train=128, n_val=32, n_test=64),
                   ModelConfig(k=2, n_ctx=10, d_model=8, d_mlp=16, n_layers=1),
                   TrainConfig(max_steps=4), baselines=("counts",))


@pytest.fixture
def run_cache(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv(cache.RUN_ENV, str(tmp_path / "runs"))
    return tmp_path / "runs"


@pytest.fixture
def trained(monkeypatch) -> list:
    """The seeds ``run.run_seeds`` trains (does not read back), call by call."""
    calls: list = []
    real = run._train_seeds

    def spy(config, seeds, *args, **kw):
        calls.append(list(seeds))
        return real(config, seeds, *args, **kw)

    monkeypatch.setattr(run, "_train_seeds", spy)
    return calls


def plain(record) -> dict:
    """A record as its JSON file holds it (NaN as null), the wall-clock times aside."""
    data = json.loads(json.dumps(results._plain(record.to_dict()), sort_keys=True))
    data.pop("seconds")
    for entry in data["history"]:
        entry.pop("seconds")
    return data


def assert_same_run(a, b) -> None:
    assert plain(a.record) == plain(b.record)
    assert a.model.config == b.model.config and list(a.model.seeds) == list(b.model.seeds)
    state_a, state_b = a.model.state_dict(), b.model.state_dict()
    assert state_a.keys() == state_b.keys()
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert a.splits.summary() == b.splits.summary()


def test_trained_once_then_read_back_equal(run_cache: Path, trained: list) -> None:
    first = run.run_seeds(CONFIG, [0, 1])
    assert trained == [[0, 1]] and len(list(run_cache.glob("*.pt"))) == 2
    second = run.run_seeds(CONFIG, [1, 0])
    assert trained == [[0, 1]]  # nothing trained again
    assert [r.record.seed for r in second] == [1, 0]
    assert_same_run(second[0], first[1])
    assert_same_run(second[1], first[0])
    assert not second[0].model.training  # read back ready to use, as trained


def test_a_record_read_back_keeps_its_order(run_cache: Path, trained: list) -> None:
    """A page lays out a record's dicts in their order (test sets, baselines): one built from
    the cache must read as one built from a fresh run (`dyckbook verify` found tables whose
    columns came back sorted)."""
    def order(record) -> list:
        return [list(record.scores), *(list(v) for v in record.baselines.values()),
                list(record.to_dict())]

    config = dataclasses.replace(CONFIG, baselines=("ngrams", "counts", "bigrams"))  # unsorted
    fresh = run.run_seeds(config, [0])[0].record
    again = run.run_seeds(config, [0])[0].record
    assert trained == [[0]]
    assert list(next(iter(fresh.baselines.values()))) == ["ngrams", "counts", "bigrams"]
    assert order(again) == order(fresh)


def test_a_stopped_run_trains_only_the_seeds_it_lacks(run_cache: Path, trained: list) -> None:
    with pytest.MonkeyPatch.context() as uncached:
        uncached.delenv(cache.RUN_ENV)
        whole = run.run_seeds(CONFIG, [0, 1, 2])  # the spy counts this call too
    run.run_seeds(CONFIG, [1])
    resumed = run.run_seeds(CONFIG, [0, 1, 2])
    assert trained == [[0, 1, 2], [1], [0, 2]]
    for a, b in zip(resumed, whole):  # as a run from scratch: batching changes nothing
        assert_same_run(a, b)


def test_another_configuration_or_results_version_is_not_read(run_cache: Path, trained: list,
                                                   monkeypatch) -> None:
    run.run_seeds(CONFIG, [0])
    other = CONFIG.override(max_steps=5)
    assert run.run_seeds(other, [0])[0].record.steps == 5
    monkeypatch.setattr(cache.recipe, "RESULTS_VERSION", cache.recipe.RESULTS_VERSION + 1)
    run.run_seeds(CONFIG, [0])
    assert trained == [[0], [0], [0]]


def test_an_unreadable_entry_is_trained_again_and_replaced(run_cache: Path, trained: list,
                                                           caplog) -> None:
    first = run.run_seeds(CONFIG, [0])[0]
    (model_file,) = run_cache.glob("*.pt")
    model_file.write_bytes(b"not a model")
    again = run.run_seeds(CONFIG, [0])[0]
    assert trained == [[0], [0]] and "unreadable" in caplog.text
    assert_same_run(again, first)
    assert_same_run(run.run_seeds(CONFIG, [0])[0], first)  # the entry was rewritten
    assert trained == [[0], [0]]


def test_without_the_variable_nothing_is_kept(tmp_path: Path, trained: list,
                                              monkeypatch) -> None:
    monkeypatch.delenv(cache.RUN_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    run.run_seeds(CONFIG, [0])
    run.run_seeds(CONFIG, [0])
    assert trained == [[0], [0]] and cache.folder(cache.RUN_ENV) is None
    assert not list(tmp_path.iterdir())


def test_run_all_resumes_and_still_writes_every_record(run_cache: Path, trained: list,
                                                       tmp_path: Path, capsys) -> None:
    configs = {"a": CONFIG, "b": CONFIG.override(max_steps=3)}
    page.run_all(configs, [0, 1], tmp_path / "first")
    assert capsys.readouterr().out == ""  # no bare progress lines on a page (issue 54)
    runs = page.run_all(configs, [0, 1], tmp_path / "second")
    assert trained == [[0, 1], [0, 1]]
    records = results.read_records(tmp_path / "second" / "records.jsonl")
    assert [(r.label, r.seed) for r in records] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert [r.record.label for r in runs["b"]] == ["b", "b"]


def test_bad_arguments_and_folders_are_named(run_cache: Path, tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ValueError, match=r"run_seeds: seeds must be a non-empty sequence"):
        run.run_seeds(CONFIG, 3)
    with pytest.raises(ValueError, match=r"run_seeds: config must be a RunConfig"):
        run.run_seeds(CONFIG.to_dict(), [0])
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv(cache.RUN_ENV, str(tmp_path / "a file"))
    with pytest.raises(ValueError, match="DYCKBOOK_RUN_CACHE must name a folder"):
        run.run_seeds(CONFIG, [0])


def test_the_runner_hands_the_kernel_absolute_cache_folders(tmp_path: Path,
                                                            monkeypatch) -> None:
    from dyckbook.pipeline import runner

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(cache.RUN_ENV, "cache/runs")
    monkeypatch.setenv(cache.DATA_ENV, " ")
    assert runner.cache_folders() == {cache.RUN_ENV: str(tmp_path / "cache" / "runs")}


def test_the_length_study_resumes_from_it_too(run_cache: Path, trained: list,
                                              tmp_path: Path) -> None:
    """07's records live in its (temporary) results folder while the runner runs it; with the
    cache, a study stopped there trains again only what the cache lacks."""
    from dyckbook.chapters import generalisation

    configs = {"a": CONFIG, "b": CONFIG.override(max_steps=3)}
    first = generalisation.run_records(configs, [0, 1], tmp_path / "killed")
    again = generalisation.run_records(configs, [0, 1], tmp_path / "fresh folder")
    assert trained == [[0, 1], [0, 1]]
    assert {k: [plain(r) for r in v] for k, v in again.items()} == {
        k: [plain(r) for r in v] for k, v in first.items()}


def test_a_caller_of_records_only_does_not_make_the_data_again(run_cache: Path,
                                                               monkeypatch) -> None:
    first = run.run_seeds(CONFIG, [0])[0]

    def refuse(*_):
        raise AssertionError("the data were made again")

    monkeypatch.setattr(run, "data_splits", refuse)
    again = run.run_seeds(CONFIG, [0], splits=False)[0]
    assert again.splits is None and plain(again.record) == plain(first.record)


def test_a_page_of_records_only_does_not_make_the_data_again(run_cache: Path, tmp_path: Path,
                                                             monkeypatch) -> None:
    """``page.run_all(..., splits=False)`` hands the flag to ``run_seeds``: cached seeds come
    back with their models and records, no data made (the intervention page's rerun)."""
    first = page.run_all({"a": CONFIG}, [0], tmp_path / "first")["a"][0]

    def refuse(*_):
        raise AssertionError("the data were made again")

    monkeypatch.setattr(run, "data_splits", refuse)
    again = page.run_all({"a": CONFIG}, [0], tmp_path / "again", splits=False)["a"][0]
    assert again.splits is None and again.model is not None
    assert plain(again.record) == plain(first.record)


def test_a_device_is_checked_even_when_every_seed_is_cached(run_cache: Path) -> None:
    run.run_seeds(CONFIG, [0])
    with pytest.raises(ValueError, match="device"):
        run.run_seeds(CONFIG, [0], device="tpu")


def test_the_runner_hands_the_kernel_this_package_first(monkeypatch) -> None:
    """A kernel imports the dyckbook the runner runs, also from a checkout that pip never
    installed (a lent GPU machine: the kernel there failed with ModuleNotFoundError)."""
    import os

    import dyckbook
    from dyckbook.pipeline import executors

    here = str(Path(dyckbook.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/elsewhere", here]))
    assert executors.package_path().split(os.pathsep) == [here, "/elsewhere"]
    monkeypatch.delenv("PYTHONPATH")
    assert executors.package_path() == here


def test_run_all_side_by_side_is_the_run_in_turn(tmp_path: Path, trained: list,
                                                  monkeypatch) -> None:
    """Groups trained at once in worker processes (a card's path, here with a CPU pool), read
    back here: the records and weights of the groups trained in turn (to
    rounding: a worker has one thread), in the same order, and nothing trained here."""
    monkeypatch.delenv(cache.RUN_ENV, raising=False)
    configs = {"a": CONFIG, "b": CONFIG.override(max_steps=3)}
    seeds = {"a": [0, 1], "b": [2]}
    in_turn = page.run_all(configs, seeds, tmp_path / "turn")
    assert trained == [[0, 1], [2]]
    with make_executor(None, 2) as executor:
        side = page.run_all(configs, seeds, tmp_path / "side", executor=executor)
    assert trained == [[0, 1], [2]]  # the workers trained; this process read them back
    assert cache.folder(cache.RUN_ENV) is None  # the temporary run cache is gone with its variable
    for label in configs:
        for a, b in zip(side[label], in_turn[label], strict=True):
            assert (a.record.label, a.record.seed, a.record.steps) == (
                b.record.label, b.record.seed, b.record.steps)
            for test, score in b.record.scores.items():
                assert a.record.scores[test].accuracy == pytest.approx(score.accuracy, abs=1e-6)
            state_a, state_b = a.model.state_dict(), b.model.state_dict()
            assert all(torch.allclose(state_a[k], state_b[k], rtol=1e-4, atol=1e-6)
                       for k in state_b)
            assert a.splits.summary() == b.splits.summary()
    records = results.read_records(tmp_path / "side" / "records.jsonl")
    assert [(r.label, r.seed) for r in records] == [("a", 0), ("a", 1), ("b", 2)]
    with pytest.raises(ValueError, match=r"seeds names no seeds for the label 'b'"):
        page.run_all(configs, {"a": [0]}, tmp_path / "bad")


def test_cells_that_share_data_share_their_rules_scores(data_cache: Path, monkeypatch) -> None:
    """No model enters a rule's scores: a second cell on the same data and seed (another
    model) fits and scores nothing, here or in a fresh process (the data cache), and its record
    holds the first's scores in its own copy."""
    made: list = []
    real = run._make_block
    monkeypatch.setattr(run, "_make_block", lambda *a: made.append(a[1]) or real(*a))
    run.baseline_block.cache_clear()
    config = replace(CONFIG, baselines=("counts", "bigrams"))
    other = config.override(n_layers=2, mask="causal")  # another cell, the same data
    first = run.run_seeds(config, [0, 1])
    second = run.run_seeds(other, [0, 1])
    assert made == [0, 1]
    run.baseline_block.cache_clear()  # as another process: read from the folder
    third = run.run_seeds(other.override(max_steps=5), [1])
    assert made == [0, 1] and len(list(data_cache.glob("*.pkl.gz"))) == 4  # 2 splits, 2 blocks
    for a, b in ((first[0], second[0]), (first[1], second[1]), (first[1], third[0])):
        assert set(a.record.baselines) == set(a.record.scores)
        assert all(set(rules) == {"counts", "bigrams"} for rules in a.record.baselines.values())
        assert a.record.baselines == b.record.baselines
        assert a.record.baseline_train == b.record.baseline_train
    test = next(iter(first[0].record.baselines))
    second[0].record.baselines[test].clear()
    assert first[0].record.baselines[test]  # each record its own copy
    run.run_seeds(replace(config, baselines=("counts",)), [0])  # other rules: made
    assert made == [0, 1, 0]
