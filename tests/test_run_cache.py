"""Tests for dyckbook.run_cache: a stopped run resumes; what it reads back is what it trained."""

import json
from pathlib import Path

import pytest
import torch

from dyckbook import book, data_cache, results, run, run_cache
from dyckbook.model import ModelConfig
from dyckbook.protocol import DataConfig
from dyckbook.run import RunConfig
from dyckbook.train import TrainConfig

CONFIG = RunConfig(DataConfig(k=2, min_length=4, max_length=10, n_train=128, n_val=32, n_test=64),
                   ModelConfig(k=2, n_ctx=10, d_model=8, d_mlp=16, n_layers=1),
                   TrainConfig(max_steps=4), baselines=("counts",))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv(run_cache.ENV, str(tmp_path / "runs"))
    return tmp_path / "runs"


@pytest.fixture
def trained(monkeypatch) -> list:
    """The seeds ``run.run_seeds`` is asked to train, call by call."""
    calls: list = []
    real = run.run_seeds

    def spy(config, seeds, *args, **kw):
        calls.append(list(seeds))
        return real(config, seeds, *args, **kw)

    monkeypatch.setattr(run, "run_seeds", spy)
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


def test_trained_once_then_read_back_equal(cache: Path, trained: list) -> None:
    first = run_cache.run_seeds(CONFIG, [0, 1])
    assert trained == [[0, 1]] and len(list(cache.glob("*.pt"))) == 2
    second = run_cache.run_seeds(CONFIG, [1, 0])
    assert trained == [[0, 1]]  # nothing trained again
    assert [r.record.seed for r in second] == [1, 0]
    assert_same_run(second[0], first[1])
    assert_same_run(second[1], first[0])
    assert not second[0].model.training  # read back ready to use, as trained


def test_a_stopped_run_trains_only_the_seeds_it_lacks(cache: Path, trained: list) -> None:
    whole = run.run_seeds(CONFIG, [0, 1, 2])  # the spy counts this call too
    run_cache.run_seeds(CONFIG, [1])
    resumed = run_cache.run_seeds(CONFIG, [0, 1, 2])
    assert trained == [[0, 1, 2], [1], [0, 2]]
    for a, b in zip(resumed, whole):  # as a run from scratch: batching changes nothing
        assert_same_run(a, b)


def test_another_configuration_or_code_is_not_read(cache: Path, trained: list,
                                                   monkeypatch) -> None:
    run_cache.run_seeds(CONFIG, [0])
    other = CONFIG.override(max_steps=5)
    assert run_cache.run_seeds(other, [0])[0].record.steps == 5
    monkeypatch.setattr(run_cache, "code_digest", lambda: "code after an edit")
    run_cache.run_seeds(CONFIG, [0])
    assert trained == [[0], [0], [0]]


def test_an_unreadable_entry_is_trained_again_and_replaced(cache: Path, trained: list,
                                                           caplog) -> None:
    first = run_cache.run_seeds(CONFIG, [0])[0]
    (model_file,) = cache.glob("*.pt")
    model_file.write_bytes(b"not a model")
    again = run_cache.run_seeds(CONFIG, [0])[0]
    assert trained == [[0], [0]] and "unreadable" in caplog.text
    assert_same_run(again, first)
    assert_same_run(run_cache.run_seeds(CONFIG, [0])[0], first)  # the entry was rewritten
    assert trained == [[0], [0]]


def test_without_the_variable_nothing_is_kept(tmp_path: Path, trained: list,
                                              monkeypatch) -> None:
    monkeypatch.delenv(run_cache.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    run_cache.run_seeds(CONFIG, [0])
    run_cache.run_seeds(CONFIG, [0])
    assert trained == [[0], [0]] and run_cache.folder() is None
    assert not list(tmp_path.iterdir())


def test_run_all_resumes_and_still_writes_every_record(cache: Path, trained: list,
                                                       tmp_path: Path) -> None:
    configs = {"a": CONFIG, "b": CONFIG.override(max_steps=3)}
    book.run_all(configs, [0, 1], tmp_path / "first")
    runs = book.run_all(configs, [0, 1], tmp_path / "second")
    assert trained == [[0, 1], [0, 1]]
    records = results.read_records(tmp_path / "second" / "records.jsonl")
    assert [(r.label, r.seed) for r in records] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert [r.record.label for r in runs["b"]] == ["b", "b"]


def test_bad_arguments_and_folders_are_named(cache: Path, tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ValueError, match=r"run_seeds: seeds must be a non-empty sequence"):
        run_cache.run_seeds(CONFIG, 3)
    with pytest.raises(ValueError, match=r"run_seeds: config must be a RunConfig"):
        run_cache.run_seeds(CONFIG.to_dict(), [0])
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv(run_cache.ENV, str(tmp_path / "a file"))
    with pytest.raises(ValueError, match="DYCKBOOK_RUN_CACHE must name a folder"):
        run_cache.run_seeds(CONFIG, [0])


def test_the_code_digest_ignores_documentation_but_not_code() -> None:
    source = 'def f(x):\n    """Twice x."""\n    return 2 * x  # doubled\n'
    documented = 'def f(x):\n    """Twice x, documented\n    at length."""\n\n    return 2 * x\n'
    assert data_cache.code_text(source) == data_cache.code_text(documented)
    assert data_cache.code_text(source) != data_cache.code_text(source.replace("2 *", "3 *"))


def test_the_code_digest_covers_training_and_scoring() -> None:
    modules = set(data_cache.data_modules(run_cache.CODE_ROOTS))
    assert {"run", "train", "model", "blocks", "kernels", "evaluate", "baselines", "protocol",
            "negatives"} <= modules
    assert not modules & {"book", "plotting", "patching", "explain", "runner"}


def test_the_runner_hands_the_kernel_absolute_cache_folders(tmp_path: Path,
                                                            monkeypatch) -> None:
    from dyckbook import runner

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(run_cache.ENV, "cache/runs")
    monkeypatch.setenv(data_cache.ENV, " ")
    assert runner.cache_folders() == {run_cache.ENV: str(tmp_path / "cache" / "runs")}


def test_the_length_study_resumes_from_it_too(cache: Path, trained: list, tmp_path: Path) -> None:
    """07's records live in its (temporary) results folder while the runner runs it; with the
    cache, a study stopped there trains again only what the cache lacks."""
    from dyckbook import length_study

    configs = {"a": CONFIG, "b": CONFIG.override(max_steps=3)}
    first = length_study.run_records(configs, [0, 1], tmp_path / "killed")
    again = length_study.run_records(configs, [0, 1], tmp_path / "fresh folder")
    assert trained == [[0, 1], [0, 1]]
    assert {k: [plain(r) for r in v] for k, v in again.items()} == {
        k: [plain(r) for r in v] for k, v in first.items()}


def test_a_caller_of_records_only_does_not_make_the_data_again(cache: Path, monkeypatch) -> None:
    first = run_cache.run_seeds(CONFIG, [0])[0]

    def refuse(*_):
        raise AssertionError("the data were made again")

    monkeypatch.setattr(run, "data_splits", refuse)
    again = run_cache.run_seeds(CONFIG, [0], splits=False)[0]
    assert again.splits is None and plain(again.record) == plain(first.record)


def test_a_device_is_checked_even_when_every_seed_is_cached(cache: Path) -> None:
    run_cache.run_seeds(CONFIG, [0])
    with pytest.raises(ValueError, match="device"):
        run_cache.run_seeds(CONFIG, [0], device="tpu")
