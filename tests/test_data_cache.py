"""Tests for dyckbook.data_cache: splits made once, read back equal, keyed by all they depend on."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dyckbook import data_cache, run
from dyckbook.completion import CompletionDataConfig
from dyckbook.protocol import DataConfig, make_splits

DATA = DataConfig(k=2, min_length=4, max_length=10, n_train=200, n_val=40, n_test=80,
                  test_max_length=32, test_sets=("hard", "stack"))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv(data_cache.ENV, str(tmp_path / "data"))
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


def test_made_once_then_read_back_equal(cache: Path) -> None:
    made: list = []
    first = data_cache.load_or_make(DATA, 3, counting(made))
    second = data_cache.load_or_make(DATA, 3, counting(made))
    assert len(made) == 1 and len(list(cache.glob("*.pkl.gz"))) == 1
    assert_same_splits(second, first)
    assert_same_splits(second, make_splits(DATA, 3))


def test_without_the_variable_nothing_is_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(data_cache.ENV, raising=False)
    made: list = []
    data_cache.load_or_make(DATA, 0, counting(made))
    data_cache.load_or_make(DATA, 0, counting(made))
    assert len(made) == 2 and data_cache.folder() is None


def test_the_key_tells_apart_what_the_data_depend_on(monkeypatch) -> None:
    base = data_cache.key(DATA, 0)
    assert data_cache.key(DATA, 0) == base
    assert data_cache.key(DATA, 1) != base
    assert data_cache.key(replace(DATA, n_test=81), 0) != base
    assert data_cache.key(CompletionDataConfig(k=2), 0) != data_cache.key(
        CompletionDataConfig(k=3), 0)
    import torch

    thesis = DataConfig(k=1, max_length=16, source="thesis", n_train=100)
    with_torch = data_cache.key(thesis, 0)
    monkeypatch.setattr(torch, "__version__", "9.9.9+cu999")
    assert data_cache.key(DATA, 0) == base  # a CUDA build reads the CPU's entries
    assert data_cache.key(thesis, 0) != with_torch  # but not the thesis' torch-drawn split
    monkeypatch.setattr(data_cache, "source_digest", lambda: "another package source")
    assert data_cache.key(DATA, 0) != base


def test_the_source_digest_follows_the_modules_the_data_are_made_by(tmp_path: Path,
                                                                     monkeypatch) -> None:
    """A copy of the package with a data module's code edited digests apart; one with the model
    or the book edited, or a data module's comments, does not. The modules are read from the
    imports: one the data floor starts importing joins them."""
    import shutil

    copy = tmp_path / "dyckbook"
    shutil.copytree(Path(data_cache.__file__).parent, copy,
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    monkeypatch.setattr(data_cache, "__file__", str(copy / "data_cache.py"))

    def digest_after(edit: str, text: str = "\nEDITED = 1\n") -> str:
        (copy / edit).write_text((copy / edit).read_text() + text)
        data_cache.source_digest.cache_clear()
        return data_cache.source_digest()

    try:
        data_cache.source_digest.cache_clear()
        first = data_cache.source_digest()
        assert {"protocol", "negatives", "languages", "completion"} <= set(
            data_cache.data_modules())
        assert not {"model", "train", "book", "run"} & set(data_cache.data_modules())
        assert digest_after("model.py") == digest_after("book.py") == first
        assert digest_after("negatives.py", "\n# a comment\n") == first  # code only counts
        edited = [digest_after(name) for name in ("negatives.py", "thesis_model.py",
                                                  "data_cache.py")]
        assert len({first, *edited}) == 4  # each of them changes it
        assert "plotting" not in data_cache.data_modules()
        digest_after("hardness.py", "\nfrom dyckbook import plotting  # noqa\n")
        assert "plotting" in data_cache.data_modules()
    finally:
        data_cache.source_digest.cache_clear()


def test_an_unreadable_entry_is_made_again(cache: Path) -> None:
    made: list = []
    data_cache.load_or_make(DATA, 0, counting(made))
    entry = next(cache.glob("*.pkl.gz"))
    entry.write_bytes(b"not a pickle")
    again = data_cache.load_or_make(DATA, 0, counting(made))
    assert len(made) == 2
    assert_same_splits(again, make_splits(DATA, 0))
    assert_same_splits(data_cache.load_or_make(DATA, 0, counting(made)), again)
    assert len(made) == 2  # the replaced entry reads


def test_a_file_where_the_folder_should_be_is_named(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "f").write_text("")
    monkeypatch.setenv(data_cache.ENV, str(tmp_path / "f"))
    with pytest.raises(ValueError, match="DYCKBOOK_DATA_CACHE must name a folder"):
        data_cache.load_or_make(DATA, 0, make_splits)


def test_run_reads_its_splits_from_the_cache(cache: Path) -> None:
    first = run.data_splits(DATA, 5)
    run.data_splits.cache_clear()
    assert len(list(cache.glob("*.pkl.gz"))) == 1
    assert_same_splits(run.data_splits(DATA, 5), first)


def test_train_lengths_makes_the_data_then_trains_from_it(tmp_path: Path, monkeypatch,
                                                           capsys) -> None:
    """The GPU procedure (ARCHITECTURE.md): the data made here into a folder, then training that
    reads them gives the records training without the folder gives."""
    from dyckbook import runner
    from dyckbook.__main__ import main

    monkeypatch.setenv(data_cache.ENV, "")  # restored after: the command sets it
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
    assert len(list(folder.glob("*.pkl.gz"))) == 4

    def records(out: Path, *extra: str) -> list[dict]:
        run.data_splits.cache_clear()
        assert main(["-q", "train-lengths", "--params", str(params), "--out", str(out),
                     *extra]) == 0
        rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
        return sorted(({k: r[k] for k in ("label", "steps", "scores", "train_accuracy", "data")}
                       for r in rows), key=lambda r: (r["label"], r["scores"]["hard"]["accuracy"]))

    monkeypatch.setattr(data_cache, "make_splits", lambda *a: pytest.fail("made, not read"))
    cached = records(tmp_path / "cached", "--data-cache", str(folder))
    monkeypatch.undo()
    monkeypatch.setenv(data_cache.ENV, "")
    assert cached == records(tmp_path / "plain")
    assert len(cached) == 6


def test_data_only_needs_the_folder(capsys) -> None:
    from dyckbook.__main__ import main

    assert main(["train-lengths", "--profile", "smoke", "--data-only"]) == 2
    assert "--data-only needs --data-cache DIR" in capsys.readouterr().err
