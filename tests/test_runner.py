"""Tests for the run manifest and the papermill runner (fixture notebooks, temporary output root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dyckbook import results as R
from dyckbook import runner

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "notebooks"
MANIFEST = REPO / "notebooks" / "experiments.yml"


def write_manifest(path: Path, *, fail: bool = False, ok_params: dict[str, Any] | None = None,
                   seeds: list[int] | None = None) -> Path:
    """A small manifest over the fixture notebooks: two seeded ok runs (+ a failing one) + summary."""
    runs: dict[str, Any] = {
        "alpha": {"notebook": "fixture_ok", "params": {"scale": 1.0, **(ok_params or {})}},
        "beta": {"notebook": "fixture_ok", "params": {"scale": 2.0}},
        "summary": {"notebook": "fixture_summary", "seeded": False, "params": {}},
    }
    if fail:
        runs["boom"] = {"notebook": "fixture_fail", "params": {}}
    manifest = {
        "version": 1,
        "notebooks": {
            "fixture_ok": {"path": str(FIXTURES / "ok.ipynb"), "title": "ok", "stage": 1,
                           "outputs": ["metrics.json", "per_length.csv", "config.json"],
                           "params": {"seed": 0, "scale": 1.0}},
            "fixture_fail": {"path": str(FIXTURES / "fail.ipynb"), "title": "fails",
                             "stage": 1, "outputs": ["metrics.json"], "params": {"seed": 0}},
            "fixture_summary": {"path": str(FIXTURES / "summary.ipynb"), "title": "summary",
                                "stage": 9, "outputs": ["summary.json"],
                                "params": {"group": "fixture_ok"}},
        },
        "runs": runs,
        "profiles": {"smoke": {"seeds": seeds or [0]}},
    }
    path.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return path


class Lines(list):
    """Collects runner output lines."""

    def __call__(self, line: str) -> None:
        self.append(line)

    def started(self) -> set[str]:
        return {line.split()[1] for line in self if line.startswith("[start]")}

    def skipped(self) -> set[str]:
        return {line.split()[1] for line in self if line.startswith("[skip]")}


def do_run(manifest: Path, root: Path, **kwargs: Any) -> tuple[int, Lines]:
    lines = Lines()
    rc = runner.run(profile="smoke", manifest=manifest, out_root=root, echo=lines, **kwargs)
    return rc, lines


# ------------------------------------------------------------------------ manifest (no kernels)


def test_resolution_order_and_injected_parameters(tmp_path: Path) -> None:
    m = write_manifest(tmp_path / "m.yml", seeds=[3, 4])
    raw = yaml.safe_load(m.read_text())
    raw["profiles"]["smoke"]["params"] = {"scale": 5.0}
    raw["profiles"]["smoke"]["runs"] = {"beta": {"scale": 7.0}}
    m.write_text(yaml.safe_dump(raw))
    specs = {s.name: s for s in runner.resolve_profile(runner.load_manifest(m), "smoke")}
    assert set(specs) == {"alpha-s3", "alpha-s4", "beta-s3", "beta-s4", "summary"}
    assert specs["alpha-s3"].params["scale"] == 5.0  # profile params beat run params
    assert specs["beta-s4"].params["scale"] == 7.0  # per-run profile override beats both
    assert specs["beta-s4"].params["seed"] == 4
    assert specs["alpha-s3"].params["results_dir"] == "book/results/fixture_ok/alpha-s3"
    assert specs["alpha-s3"].params["run_name"] == "alpha-s3"
    assert "scale" not in specs["summary"].params  # global params only reach declaring notebooks


@pytest.mark.parametrize("edit, message", [
    (lambda raw: raw["runs"]["alpha"]["params"].update(scael=1.0), "declares no parameter"),
    (lambda raw: raw["notebooks"]["fixture_ok"]["params"].update(results_dir="x"), "injected"),
    (lambda raw: raw["runs"]["alpha"]["params"].update(seed=1), "comes from the profile"),
    (lambda raw: raw["profiles"]["smoke"].update(params={"nowhere": 1}), "no notebook declares"),
    (lambda raw: raw["runs"]["alpha"]["params"].update(scale=[1, 2]), "flat scalar"),
    (lambda raw: raw["profiles"]["smoke"].update(seeds=[0, 0]), "distinct"),
    (lambda raw: raw["runs"]["alpha"].update(notebook="nope"), "must name a notebook"),
])
def test_manifest_errors_name_the_entry(tmp_path: Path, edit: Any, message: str) -> None:
    m = write_manifest(tmp_path / "m.yml")
    raw = yaml.safe_load(m.read_text())
    edit(raw)
    m.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=message):
        runner.resolve_profile(runner.load_manifest(m), "smoke")


def test_select_runs_patterns_and_unknown_names(tmp_path: Path) -> None:
    specs = runner.resolve_profile(
        runner.load_manifest(write_manifest(tmp_path / "m.yml", seeds=[0, 1])), "smoke")
    pick = lambda only: [s.name for s in runner.select_runs(specs, only, "smoke")]
    assert pick(["alpha"]) == ["alpha-s0", "alpha-s1"]  # a base name selects all its seeds
    assert pick(["*-s1"]) == ["alpha-s1", "beta-s1"]
    assert pick(["fixture_summary"]) == ["summary"]  # a notebook key selects its runs
    assert pick(None) == [s.name for s in specs]
    with pytest.raises(ValueError, match="'nope' matches no run"):
        pick(["alpha-s0", "nope"])
    with pytest.raises(ValueError, match="profile must be one of"):
        runner.resolve_profile(runner.load_manifest(tmp_path / "m.yml"), "gpu")


def test_hash_tracks_params_notebook_and_inputs_but_not_threads(tmp_path: Path) -> None:
    man = runner.load_manifest(write_manifest(tmp_path / "m.yml"))
    specs = runner.resolve_profile(man, "smoke")
    base = runner.compute_hashes(specs)
    assert len(set(base.values())) == len(base)
    changed = [runner.RunSpec(s.name, s.base, s.notebook,
                              {**s.params, "scale": 9.0} if s.name == "alpha-s0" else s.params)
               for s in specs]
    after = runner.compute_hashes(changed)
    assert after["alpha-s0"] != base["alpha-s0"]
    assert after["beta-s0"] == base["beta-s0"]
    assert after["summary"] != base["summary"]  # a later stage depends on earlier runs
    threads = [runner.RunSpec(s.name, s.base, s.notebook, {**s.params, "num_threads": 7})
               for s in specs]
    assert runner.compute_hashes(threads) == base
    # The notebook hash ignores outputs and metadata, not sources.
    nb = json.loads((FIXTURES / "ok.ipynb").read_text())
    nb["cells"][2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x"}]
    nb["metadata"]["foo"] = 1
    copy = tmp_path / "copy.ipynb"
    copy.write_text(json.dumps(nb))
    assert runner.notebook_source_hash(copy) == runner.notebook_source_hash(FIXTURES / "ok.ipynb")
    nb["cells"][2]["source"] = "print(1)"
    copy.write_text(json.dumps(nb))
    assert runner.notebook_source_hash(copy) != runner.notebook_source_hash(FIXTURES / "ok.ipynb")


# ------------------------------------------------------------------------ the real manifest


@pytest.mark.parametrize("profile", ["smoke", "cpu", "thesis"])
def test_every_profile_resolves(profile: str) -> None:
    man = runner.load_manifest(MANIFEST)
    specs = runner.resolve_profile(man, profile)
    assert {s.notebook.key for s in specs} == set(man.notebooks)  # every notebook, every profile
    for spec in specs:
        assert set(spec.params) >= set(spec.notebook.params) | {"run_name", "results_dir"}
    summary = [s for s in specs if s.notebook.key == "90_summary"]
    assert summary and all(s.stage > max(o.stage for o in specs if o not in summary)
                           for s in summary)
    if profile in ("cpu", "thesis"):
        for exp in (1, 2, 3, 4, 5):
            seeds = {s.params["seed"] for s in specs if s.params.get("experiment") == exp}
            assert len(seeds) >= 5, (profile, exp, seeds)


def test_chapters_run_in_every_profile_into_book_runs_chapters() -> None:
    man = runner.load_manifest(MANIFEST)
    for profile, settings in man.profiles.items():
        if settings.get("include") is not None:
            continue  # a partial profile (e.g. `grid`) runs only what it includes
        chapter = {s.name: s for s in runner.resolve_profile(man, profile)}["dyck_languages"]
        assert chapter.group == "chapters"
        assert R.run_notebook_path(chapter.group, chapter.name, "/r") == Path(
            "/r/book/runs/chapters/dyck_languages.ipynb")


def test_every_referenced_notebook_exists() -> None:
    man = runner.load_manifest(MANIFEST)
    missing = [str(nb.path.relative_to(REPO)) for nb in man.notebooks.values()
               if not nb.path.is_file()]
    assert not missing, f"manifest references missing notebooks: {missing}"


def test_existing_notebooks_declare_exactly_the_manifest_parameters() -> None:
    pm = pytest.importorskip("papermill")
    man = runner.load_manifest(MANIFEST)
    checked = 0
    for nb in man.notebooks.values():
        if not nb.path.is_file() or nb.group == R.CHAPTERS_GROUP:
            continue
        declared = set(pm.inspect_notebook(str(nb.path)))
        expected = set(nb.params) | set(runner.INJECTED)
        assert declared == expected, (nb.key, sorted(declared ^ expected))
        checked += 1
    if not checked:
        pytest.skip("no experiment notebook exists yet")


# ------------------------------------------------------------------------ executing (kernels)


@pytest.mark.notebook
def test_run_publishes_then_skips_then_reruns_only_what_changed(tmp_path: Path) -> None:
    root = tmp_path / "out"
    m = write_manifest(tmp_path / "m.yml")
    rc, lines = do_run(m, root)
    assert rc == 0, lines
    assert lines.started() == {"alpha-s0", "beta-s0", "summary"}
    for run, group in [("alpha-s0", "fixture_ok"), ("beta-s0", "fixture_ok")]:
        assert R.run_notebook_path(group, run, root).is_file()
        rdir = R.run_results_dir(group, run, root)
        assert {"metrics.json", "per_length.csv", "config.json", "run.json"} <= {
            p.name for p in rdir.iterdir()}
        record = R.read_run_record(group, run, root)
        assert record["status"] == "ok" and record["duration_s"] > 0
        metrics = R.load_run_metrics(group, run, root)
        assert metrics["run_name"] == run
        assert metrics["omp_num_threads"] == str(metrics["num_threads"])
        # the executed notebook carries the injected, repository-relative results_dir
        executed = R.run_notebook_path(group, run, root).read_text()
        assert f"book/results/{group}/{run}" in executed
    assert R.load_run_metrics("fixture_ok", "beta-s0", root)["value"] == 0.0  # seed 0 * 2.0
    summary = json.loads((R.run_results_dir("fixture_summary", "summary", root)
                          / "summary.json").read_text())
    assert summary["runs"] == ["alpha-s0", "beta-s0"]  # the summary ran after stage 1
    assert not list((root / "book" / "runs").rglob(".*"))  # no temporary files published

    published = R.run_notebook_path("fixture_ok", "alpha-s0", root)
    stamp = published.stat().st_mtime_ns
    rc, lines = do_run(m, root)
    assert rc == 0 and lines.started() == set()
    assert lines.skipped() == {"alpha-s0", "beta-s0", "summary"}
    assert published.stat().st_mtime_ns == stamp

    write_manifest(m, ok_params={"scale": 3.0})
    rc, lines = do_run(m, root)
    assert rc == 0
    assert lines.started() == {"alpha-s0", "summary"}  # the summary depends on alpha's result
    assert lines.skipped() == {"beta-s0"}

    rc, lines = do_run(m, root, force=True, only=["alpha"])
    assert rc == 0 and lines.started() == {"alpha-s0"}


@pytest.mark.notebook
def test_failing_run_is_reported_and_never_published(tmp_path: Path) -> None:
    root = tmp_path / "out"
    m = write_manifest(tmp_path / "m.yml", fail=True)
    # a stale "published" notebook from an earlier success must disappear
    stale = R.run_notebook_path("fixture_fail", "boom-s0", root)
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    rc, lines = do_run(m, root, only=["boom", "summary"])
    assert rc == 1
    report = [line for line in lines if line.startswith("FAILED")]
    assert len(report) == 1
    assert "boom-s0" in report[0] and "# cell: explode" in report[0]
    assert "cell 3 of" in report[0]  # index in the source notebook (markdown, params, setup)
    assert "ValueError: boom at seed 0" in report[0]
    assert not stale.exists()
    assert not R.run_notebook_path("fixture_summary", "summary", root).exists()  # blocked
    assert R.read_run_record("fixture_summary", "summary", root)["status"] == "blocked"
    rdir = R.run_results_dir("fixture_fail", "boom-s0", root)
    record = R.read_run_record("fixture_fail", "boom-s0", root)
    assert record["status"] == "failed" and record["error"]["ename"] == "ValueError"
    assert (rdir / "failed.ipynb").is_file()
    assert (rdir / "partial" / "metrics.json").is_file()  # partial output kept aside ...
    assert not (rdir / "metrics.json").exists()  # ... never where results are read
    with pytest.raises(FileNotFoundError, match="no successful result"):
        R.load_run_metrics("fixture_fail", "boom-s0", root)
    assert not list((root / "book" / "runs").rglob("*.ipynb"))
    status = Lines()
    runner.list_runs("smoke", manifest=m, out_root=root, echo=status)
    assert any(line.startswith("boom-s0") and " failed " in line for line in status)
    assert any(line.startswith("alpha-s0") and " missing " in line for line in status)


@pytest.mark.notebook
def test_two_jobs_run_in_parallel_processes(tmp_path: Path) -> None:
    root = tmp_path / "out"
    m = write_manifest(tmp_path / "m.yml", seeds=[0, 1])
    rc, lines = do_run(m, root, jobs=2)
    assert rc == 0, lines
    assert lines.started() == {"alpha-s0", "alpha-s1", "beta-s0", "beta-s1", "summary"}
    cores = runner._cores()
    for run in ("alpha-s0", "alpha-s1", "beta-s0", "beta-s1"):
        metrics = R.load_run_metrics("fixture_ok", run, root)
        assert metrics["num_threads"] == max(1, cores // 2)
    assert [r["run"] for r in R.collect_results("fixture_ok", root)] == [
        "alpha-s0", "alpha-s1", "beta-s0", "beta-s1"]


def test_cli_unknown_only_name_exits_2_with_one_line(tmp_path: Path) -> None:
    m = write_manifest(tmp_path / "m.yml")
    proc = subprocess.run(
        [sys.executable, "-m", "dyckbook", "run", "--profile", "smoke", "--only", "nope",
         "--manifest", str(m)],
        check=False, capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "DYCKBOOK_ROOT": str(tmp_path / "out")})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "nope" in proc.stderr
    assert not (tmp_path / "out" / "book" / "runs").exists()


def test_prepare_for_book_shows_parameters_and_hides_plumbing(tmp_path):
    import nbformat

    from dyckbook.runner import prepare_for_book

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Title\n\nThe question."),
        nbformat.v4.new_code_cell("seed = 0", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("seed = 3", metadata={"tags": ["injected-parameters"]}),
        nbformat.v4.new_code_cell("x = seed * 2"),
        nbformat.v4.new_code_cell("y = 1", metadata={"tags": ["remove-input"]}),
    ]
    path = tmp_path / "run.ipynb"
    nbformat.write(nb, str(path))
    prepare_for_book(path, name="exp-s3", group="01_x", params={"seed": 3, "num_threads": 2},
                     profile="smoke", source="notebooks/01_x.ipynb")
    out = nbformat.read(str(path), as_version=4)
    assert out.cells[0].source.startswith("# Title · `exp-s3`")
    block = out.cells[1].source
    assert "| `seed` | `3` |" in block and "num_threads" not in block and "smoke" in block
    tags = [c.metadata.get("tags", []) for c in out.cells]
    assert "remove-cell" in tags[2] and "remove-cell" in tags[3]   # both parameter cells
    assert tags[4] == ["hide-input"]                               # plumbing collapsed
    assert tags[5] == ["remove-input"]                             # an author's choice is kept


def test_prepare_for_book_keeps_chapter_code_visible(tmp_path):
    import nbformat

    from dyckbook.runner import prepare_for_book

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Chapter"),
                nbformat.v4.new_code_cell("k = 1", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("print(k)")]
    path = tmp_path / "chapter.ipynb"
    nbformat.write(nb, str(path))
    prepare_for_book(path, name="dyck_languages", group="chapters", params={}, profile="cpu",
                     source="book/dyck_languages.ipynb")
    out = nbformat.read(str(path), as_version=4)
    assert out.cells[0].source == "# Chapter" and len(out.cells) == 3
    assert out.cells[1].metadata["tags"] == ["parameters", "remove-cell"]
    assert "tags" not in out.cells[2].metadata


def test_prepare_for_book_names_only_seeded_runs_in_the_title(tmp_path):
    import nbformat

    from dyckbook.runner import prepare_for_book

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Summary")]
    path = tmp_path / "summary.ipynb"
    nbformat.write(nb, str(path))
    prepare_for_book(path, name="summary", group="90_summary", params={"groups": "a,b"},
                     profile="cpu", source="notebooks/90_summary.ipynb")
    out = nbformat.read(str(path), as_version=4)
    assert out.cells[0].source == "# Summary"  # one run: its title needs no run name
    assert "Parameters of run `summary`" in out.cells[1].source


# ------------------------------------------------- resume caches and runs of another profile


def test_keep_files_survive_a_rerun_and_nothing_else_does(tmp_path: Path) -> None:
    m = write_manifest(tmp_path / "m.yml")
    raw = yaml.safe_load(m.read_text())
    raw["notebooks"]["fixture_ok"]["keep"] = ["cache.jsonl"]
    m.write_text(yaml.safe_dump(raw))
    root = tmp_path / "out"
    assert do_run(m, root, only=["alpha"])[0] == 0
    rdir = R.run_results_dir("fixture_ok", "alpha-s0", root)
    (rdir / "cache.jsonl").write_text('{"kept": 1}\n')
    (rdir / "stale.txt").write_text("from the last execution")
    rc, lines = do_run(m, root, only=["alpha"], force=True)
    assert rc == 0 and lines.started() == {"alpha-s0"}
    assert (rdir / "cache.jsonl").read_text() == '{"kept": 1}\n'  # the cache stayed in place
    assert not (rdir / "stale.txt").exists()  # everything else was cleared before executing
    assert (rdir / "metrics.json").is_file()


@pytest.mark.parametrize("keep", [["../escape"], [".hidden"], "cache.jsonl", [""]])
def test_keep_must_list_plain_file_names(tmp_path: Path, keep: Any) -> None:
    m = write_manifest(tmp_path / "m.yml")
    raw = yaml.safe_load(m.read_text())
    raw["notebooks"]["fixture_ok"]["keep"] = keep
    m.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=r"fixture_ok.keep must be a list of plain file names"):
        runner.load_manifest(m)


def test_a_run_the_profile_excludes_is_read_once_another_profile_published_it(
        tmp_path: Path) -> None:
    m = write_manifest(tmp_path / "m.yml")
    raw = yaml.safe_load(m.read_text())
    raw["profiles"]["smoke"]["exclude"] = ["beta"]
    raw["profiles"]["extra"] = {"seeds": [0], "include": ["beta"]}
    m.write_text(yaml.safe_dump(raw))
    root = tmp_path / "out"
    summary = R.run_results_dir("fixture_summary", "summary", root)
    assert do_run(m, root)[0] == 0
    assert json.loads((summary / "summary.json").read_text())["runs"] == ["alpha-s0"]
    assert runner.run(profile="extra", manifest=m, out_root=root, echo=Lines()) == 0
    # back to smoke: beta-s0 (published by "extra", excluded here) is listed and read, and the
    # summary, whose inputs changed, reruns although its own parameters did not
    rc, lines = do_run(m, root)
    assert rc == 0 and lines.started() == {"summary"} and "alpha-s0" in lines.skipped()
    assert json.loads((summary / "summary.json").read_text())["runs"] == ["alpha-s0", "beta-s0"]
    index = json.loads((root / runner.INDEX_FILE).read_text())
    assert index["runs"]["beta-s0"]["profile"] == "extra"
    # a run merely absent from a profile (not excluded by name) is never carried over
    raw["profiles"]["smoke"]["exclude"] = []
    raw["profiles"]["smoke"]["include"] = ["alpha", "summary"]
    m.write_text(yaml.safe_dump(raw))
    assert do_run(m, root)[0] == 0
    assert json.loads((summary / "summary.json").read_text())["runs"] == ["alpha-s0"]
