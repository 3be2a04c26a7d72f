"""Tests for the results layer: path conventions, run records, and reading only published results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dyckbook import results as R


def publish(root: Path, group: str, run: str, *, status: str = "ok", hash_: str = "h",
            metrics: dict | None = None) -> None:
    """Fake what the runner leaves behind for one run."""
    rdir = R.run_results_dir(group, run, root)
    rdir.mkdir(parents=True, exist_ok=True)
    if metrics is not None:
        R.write_json(rdir / "metrics.json", metrics)
    (rdir / "per_length.csv").write_text("length,accuracy\n2,1.0\n4,0.5\n")
    if status == "ok":
        nb = R.run_notebook_path(group, run, root)
        nb.parent.mkdir(parents=True, exist_ok=True)
        nb.write_text("{}")
    R.write_run_record(group, run, {"status": status, "hash": hash_, "params": {"seed": 1},
                                    "duration_s": 1.5}, root)


def test_path_conventions(tmp_path: Path) -> None:
    assert R.run_notebook_path("01_dyck1", "dyck1-exp1-s0", tmp_path) == (
        tmp_path / "book" / "runs" / "01_dyck1" / "dyck1-exp1-s0.ipynb")
    assert R.run_results_dir("01_dyck1", "dyck1-exp1-s0", tmp_path) == (
        tmp_path / "book" / "results" / "01_dyck1" / "dyck1-exp1-s0")
    assert R.run_results_rel("chapters", "dyck_languages") == Path(
        "book/results/chapters/dyck_languages")
    assert R.resolve("/abs/x", tmp_path) == Path("/abs/x")
    assert R.resolve("book/results/a", tmp_path) == tmp_path.resolve() / "book/results/a"


@pytest.mark.parametrize("bad", ["", "..", ".", "a/b", ".hidden"])
def test_names_that_would_escape_the_layout_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="plain file name"):
        R.run_results_dir("01_dyck1", bad)
    with pytest.raises(ValueError, match="plain file name"):
        R.run_notebook_path(bad, "run")


def test_repo_root_follows_env_then_manifest_search(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(R.ROOT_ENV, str(tmp_path))
    assert R.repo_root() == tmp_path.resolve()
    monkeypatch.delenv(R.ROOT_ENV)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "experiments.yml").write_text("version: 1\n")
    monkeypatch.chdir(tmp_path / "notebooks")  # a notebook opened by hand in JupyterLab
    assert R.repo_root() == tmp_path.resolve()
    assert R.resolve("book/results/x") == tmp_path.resolve() / "book/results/x"


def test_records_round_trip_and_reject_unknown_status(tmp_path: Path) -> None:
    assert R.read_run_record("g", "r", tmp_path) is None
    R.write_run_record("g", "r", {"status": "failed", "hash": None}, tmp_path)
    assert R.read_run_record("g", "r", tmp_path) == {"status": "failed", "hash": None}
    with pytest.raises(ValueError, match="status"):
        R.write_run_record("g", "r", {"status": "fine"}, tmp_path)
    (R.run_results_dir("g", "r", tmp_path) / "run.json").write_text("{not json")
    assert R.read_run_record("g", "r", tmp_path) is None


def test_only_successful_runs_are_read(tmp_path: Path) -> None:
    publish(tmp_path, "g", "a", metrics={"acc": 1.0})
    publish(tmp_path, "g", "b", status="failed", metrics={"acc": 0.0})
    assert R.load_run_metrics("g", "a", tmp_path) == {"acc": 1.0}
    assert R.load_per_length("g", "a", tmp_path)[1] == {"length": "4", "accuracy": "0.5"}
    for run in ("b", "never"):
        with pytest.raises(FileNotFoundError, match="no successful result"):
            R.load_run_metrics("g", run, tmp_path)
    # an ok record whose notebook is gone is not published
    R.run_notebook_path("g", "a", tmp_path).unlink()
    assert not R.is_ok("g", "a", tmp_path)
    with pytest.raises(FileNotFoundError):
        R.load_per_length("g", "a", tmp_path)


def test_collect_results_reads_only_current_runs_of_the_indexed_profile(tmp_path: Path) -> None:
    publish(tmp_path, "g", "x-s0", hash_="h0", metrics={"acc": 0.9})
    publish(tmp_path, "g", "x-s1", hash_="h1", metrics={"acc": 0.8})
    publish(tmp_path, "g", "x-s2", hash_="old", metrics={"acc": 0.1})  # stale parameters
    publish(tmp_path, "g", "x-s3", status="failed", metrics={"acc": 0.5})
    publish(tmp_path, "g", "leftover", hash_="z", metrics={"acc": 0.0})  # another profile
    publish(tmp_path, "other", "y", hash_="hy", metrics={"acc": 1.0})
    # without an index: every ok run of the group
    assert [r["run"] for r in R.collect_results("g", tmp_path)] == [
        "leftover", "x-s0", "x-s1", "x-s2"]
    index = {"profile": "cpu", "runs": {
        "x-s1": {"group": "g", "hash": "h1"}, "x-s0": {"group": "g", "hash": "h0"},
        "x-s2": {"group": "g", "hash": "h2"}, "x-s3": {"group": "g", "hash": "h3"},
        "y": {"group": "other", "hash": "hy"}}}
    R.write_json(tmp_path / "book" / "results" / "index.json", index, sort_keys=False)
    rows = R.collect_results("g", tmp_path)
    assert [r["run"] for r in rows] == ["x-s0", "x-s1"]
    assert rows[0] == {"run": "x-s0", "params": {"seed": 1}, "metrics": {"acc": 0.9},
                       "duration_s": 1.5}
    assert R.published_runs(root=tmp_path) == [("g", "x-s1"), ("g", "x-s0"), ("other", "y")]
    assert R.read_index(tmp_path)["profile"] == "cpu"


def test_write_json_is_sorted_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = R.write_json(tmp_path / "d" / "m.json", {"b": 1, "a": [1, 2]})
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    assert path.read_text().index('"a"') < path.read_text().index('"b"')
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["m.json"]
