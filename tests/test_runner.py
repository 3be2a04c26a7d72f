"""The manifest and the runner, on fixture notebooks (tests/fixtures) and a temporary root."""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import nbformat
import pytest
import yaml

from dyckbook.pipeline import layout, pages, runner
from dyckbook.pipeline.executors import make_executor

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
MANIFEST = FIXTURES / "experiments.yml"


def manifest(tmp_path: Path, edit: Any = None, name: str = "m.yml") -> Path:
    """A copy of the fixture manifest (paths made absolute), changed by ``edit(raw)``."""
    raw = yaml.safe_load(MANIFEST.read_text())
    for section in ("chapters", "notebooks"):
        for entry in raw[section].values():
            entry["path"] = str(FIXTURES / entry["path"])
    if edit is not None:
        edit(raw)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def results(root: Path, group: str, run: str, profile: str = "smoke") -> Path:
    return root / "book" / "results" / profile / group / run


def page(root: Path, group: str, run: str, profile: str = "smoke") -> Path:
    return root / "book" / "runs" / profile / group / f"{run}.ipynb"


def record(root: Path, group: str, run: str, profile: str = "smoke") -> dict[str, Any]:
    return json.loads((results(root, group, run, profile) / "run.json").read_text())


def ran(caplog: pytest.LogCaptureFixture) -> set[str]:
    """Runs that finished (ok or failed) according to the runner's log."""
    return {r.getMessage().split()[1].rstrip(":") for r in caplog.records
            if r.getMessage().startswith(("[ok]", "[FAIL]"))}


@pytest.fixture(scope="module")
def pool():
    executor = make_executor(None, 1)
    yield executor
    executor.shutdown()


# ------------------------------------------------------------------------ manifest (no kernels)


def _parameters_cell(path: Path) -> dict[str, Any]:
    """An independent reading of a parameters cell: ``name: type = literal`` lines, by ast."""
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    return {node.target.id: ast.literal_eval(node.value)
            for node in ast.parse(cell.source).body if isinstance(node, ast.AnnAssign)}


def test_resolution_order_defaults_then_run_then_profile() -> None:
    man = runner.load_manifest(MANIFEST)
    runs = {r.name: r for r in runner.resolve_profile(man, "scaled")}
    assert list(runs) == ["chapter", "alpha", "beta", "summary"]  # manifest order, boom excluded
    defaults = _parameters_cell(FIXTURES / "notebooks" / "ok.ipynb")
    assert runs["alpha"].params == {**defaults, "seed": 1, "scale": 10.0, "run_name": "alpha",
                                    "results_dir": "book/results/scaled/fixture_ok/alpha"}
    assert runs["beta"].params["scale"] == 7.0  # profile runs.beta beats profile params
    assert runs["beta"].params["seed"] == 2  # run params beat notebook defaults
    assert "scale" not in runs["summary"].params  # profile params reach declaring notebooks only
    assert runs["chapter"].notebook.group == "chapters" and runs["chapter"].notebook.stage == 0
    assert runs["summary"].notebook.stage == 9
    smoke = {r.name: r for r in runner.resolve_profile(man, "smoke")}
    assert smoke["alpha"].params["scale"] == defaults["scale"]
    assert [r.name for r in runner.resolve_profile(man, "failing")] == ["boom", "summary"]


@pytest.mark.parametrize("edit, message", [
    (lambda raw: raw["runs"]["alpha"]["params"].update(scael=1.0),
     "'scael' is not a parameter of fixture_ok"),
    (lambda raw: raw["runs"]["alpha"]["params"].update(results_dir="x"), "injected"),
    (lambda raw: raw["runs"]["alpha"]["params"].update(scale=[1, 2]), "flat scalar"),
    (lambda raw: raw["runs"]["alpha"].update(notebook="nope"), "must name a notebook"),
    (lambda raw: raw["runs"]["alpha"].update(seeded=True), "unknown keys ['seeded']"),
    (lambda raw: raw["runs"].update(chapter={"notebook": "fixture_ok"}), "unique plain names"),
    (lambda raw: raw["profiles"]["smoke"].update(params={"nowhere": 1}),
     "'nowhere' is not a parameter of any notebook"),
    (lambda raw: raw["profiles"]["smoke"].update(notebooks={"fixture_ok": {"sed": 1}}),
     "'sed' is not a parameter of fixture_ok"),
    (lambda raw: raw["profiles"]["smoke"].update(notebooks={"nope": {}}), "unknown notebook"),
    (lambda raw: raw["profiles"]["smoke"].update(runs={"gamma": {}}), "unknown run 'gamma'"),
    (lambda raw: raw["profiles"]["smoke"].update(include=["alhpa"]), "'alhpa' matches no run"),
    (lambda raw: raw["profiles"]["smoke"].update(seeds=[0]), "unknown keys ['seeds']"),
    (lambda raw: raw.update(profiles={}), "defines none"),
    (lambda raw: raw.update(version=1), "version must be 2"),
    (lambda raw: raw["notebooks"]["fixture_ok"].update(keep=["../escape"]), "keep must be"),
    (lambda raw: raw["notebooks"]["fixture_ok"].update(outputs="metrics.json"), "outputs must"),
    (lambda raw: raw["notebooks"]["fixture_ok"].update(stage=-1), "stage must be"),
    (lambda raw: raw["notebooks"]["fixture_ok"].pop("path"), "missing ['path']"),
])
def test_manifest_errors_name_the_file_and_the_entry(tmp_path: Path, edit: Any,
                                                     message: str) -> None:
    path = manifest(tmp_path, edit)
    with pytest.raises(ValueError, match=r"^\S*m\.yml: ") as info:
        runner.load_manifest(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def _notebook_with(tmp_path: Path, source: str) -> Path:
    nb = nbformat.read(FIXTURES / "notebooks" / "ok.ipynb", as_version=4)
    next(c for c in nb.cells if "parameters" in c.metadata.get("tags", [])).source = source
    path = tmp_path / "odd.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("source, message", [
    ('seed: int = 0\nrun_name: str = "x"\nnum_threads: int = 1', "must declare ['results_dir']"),
    (('seed: int = 2 ** 3\nrun_name: str = "x"\nresults_dir: str = "scratch/x"\n'
     'num_threads: int = 1'), "seed = 2 ** 3, which is not a literal"),
])
def test_a_notebook_must_declare_the_injected_names_as_literals(tmp_path: Path, source: str,
                                                               message: str) -> None:
    odd = _notebook_with(tmp_path, source)
    path = manifest(tmp_path, lambda raw: raw["notebooks"]["fixture_ok"].update(path=str(odd)))
    with pytest.raises(ValueError, match=message.replace("*", r"\*").replace("[", r"\[")):
        runner.load_manifest(path)


def test_unreadable_manifests_are_one_line_errors_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("version: 2\nruns: {alpha: [unclosed\n")
    with pytest.raises(ValueError, match=r"bad\.yml is not valid YAML: .*line 2") as info:
        runner.load_manifest(bad)
    assert "\n" not in str(info.value)
    bad.write_bytes("version: 2 # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"bad\.yml is not UTF-8 text \(byte 0xe9"):
        runner.load_manifest(bad)
    with pytest.raises(FileNotFoundError, match="manifest not found"):
        runner.load_manifest(tmp_path)
    path = manifest(tmp_path, lambda raw: raw["notebooks"]["fixture_ok"].update(path="/no/x.ipynb"))
    with pytest.raises(FileNotFoundError, match="no notebook /no/x.ipynb"):
        runner.load_manifest(path)


def test_select_runs_by_name_notebook_or_glob() -> None:
    runs = runner.resolve_profile(runner.load_manifest(MANIFEST), "smoke")
    pick = lambda only: [r.name for r in runner.select_runs(runs, only, "smoke")]
    assert pick(["alpha"]) == ["alpha"]
    assert pick(["fixture_ok"]) == ["alpha", "beta"]
    assert pick(["*a"]) == ["alpha", "beta"]
    assert pick(None) == ["chapter", "alpha", "beta", "summary"]
    with pytest.raises(ValueError, match="'nope' matches no run of profile 'smoke'"):
        pick(["alpha", "nope"])
    with pytest.raises(ValueError, match="profile must be one of"):
        runner.resolve_profile(runner.load_manifest(MANIFEST), "gpu")


def test_run_hash_follows_parameters_source_and_inputs_only(tmp_path: Path) -> None:
    alpha = {r.name: r for r in runner.resolve_profile(runner.load_manifest(MANIFEST), "smoke")
             }["alpha"]
    base = runner.run_hash(alpha, {})
    assert runner.run_hash(alpha, {}) == base
    changed = runner.Run("alpha", alpha.notebook, {**alpha.params, "scale": 9.0})
    assert runner.run_hash(changed, {}) != base
    threads = runner.Run("alpha", alpha.notebook, {**alpha.params, "num_threads": 7})
    assert runner.run_hash(threads, {}) == base
    assert runner.run_hash(alpha, {"chapter": "x"}) != base
    nb = json.loads(alpha.notebook.path.read_text())
    nb["cells"][2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x"}]
    nb["metadata"]["foo"] = 1
    copy = tmp_path / "copy.ipynb"
    copy.write_text(json.dumps(nb))
    assert runner.notebook_hash(copy) == runner.notebook_hash(alpha.notebook.path)
    nb["cells"][2]["source"] = "print(1)"
    copy.write_text(json.dumps(nb))
    assert runner.notebook_hash(copy) != runner.notebook_hash(alpha.notebook.path)


def _published(root: Path, run: runner.Run, files: dict[str, str], **extra: Any) -> None:
    """A hand-made publication of ``run``: its page and a run.json listing ``files``."""
    folder = results(root, run.notebook.group, run.name, run.profile)
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"status": "ok", "files": files, **extra}))
    page(root, run.notebook.group, run.name, run.profile).parent.mkdir(parents=True,
                                                                       exist_ok=True)
    page(root, run.notebook.group, run.name, run.profile).write_text("{}")


def _named_summary(stage: int = 9, group: str = "book/results/smoke/fixture_ok/alpha, "
                   "tests/fixtures/experiments.yml"):
    def edit(raw: dict[str, Any]) -> None:
        raw["notebooks"]["fixture_summary"].update(stage=stage, reads="named")
        raw["runs"]["summary"]["params"] = {"group": group}
    return edit


def test_text_longer_than_a_file_name_names_no_file(tmp_path: Path) -> None:
    """Issue 52: a recipe written in a parameter is longer than a file name may be; asking the
    disk whether it is a file raised ENAMETOOLONG and broke `dyckbook pages`."""
    recipe = "lm@k3-L2-causal-learned-mean " + "objective:language_model " * 20
    runs = {r.name: r for r in runner.resolve_profile(runner.load_manifest(
        manifest(tmp_path, _named_summary(group=recipe))), "smoke")}
    assert runner.run_inputs(runs["summary"], list(runs.values()), tmp_path / "out") == {}


def test_a_run_depends_on_the_runs_and_files_its_parameters_name_only(tmp_path: Path) -> None:
    root = tmp_path / "out"
    runs = {r.name: r for r in runner.resolve_profile(
        runner.load_manifest(manifest(tmp_path, _named_summary())), "smoke")}
    every = list(runs.values())
    for name in ("chapter", "alpha", "beta"):
        _published(root, runs[name], {"metrics.json": name})
    inputs = runner.run_inputs(runs["summary"], every, root)
    committed = hashlib.sha256((FIXTURES / "experiments.yml").read_bytes()).hexdigest()
    assert set(inputs) == {"alpha", "file:tests/fixtures/experiments.yml"}
    assert inputs["file:tests/fixtures/experiments.yml"] == committed
    # a run it does not name republishes: nothing it reads changed
    (results(root, "fixture_ok", "beta") / "run.json").write_text(json.dumps(
        {"status": "ok", "files": {"metrics.json": "other"}}))
    assert runner.run_inputs(runs["summary"], every, root) == inputs
    # the run it names republishes: its digest changes, and so does the hash
    (results(root, "fixture_ok", "alpha") / "run.json").write_text(json.dumps(
        {"status": "ok", "files": {"metrics.json": "other"}}))
    changed = runner.run_inputs(runs["summary"], every, root)
    assert changed["alpha"] != inputs["alpha"]
    assert runner.run_hash(runs["summary"], changed) != runner.run_hash(runs["summary"], inputs)
    # `reads: every` (the fixture as written): every earlier-stage run, named or not
    every_runs = {r.name: r for r in runner.resolve_profile(runner.load_manifest(
        manifest(tmp_path, name="every.yml")), "smoke")}
    assert set(runner.run_inputs(every_runs["summary"], list(every_runs.values()), root)) == {
        "chapter", "alpha", "beta"}
    # stage-0 runs name nothing: they read nothing
    assert runner.run_inputs(runs["alpha"], every, root) == {}


def test_a_stale_run_says_what_changed(tmp_path: Path) -> None:
    run = {r.name: r for r in runner.resolve_profile(runner.load_manifest(MANIFEST), "smoke")
           }["summary"]
    record = {"results_version": runner.RESULTS_VERSION, "dyckbook": "0.0-any",
              "notebook_hash": runner.notebook_hash(
        run.notebook.path), "params_hash": runner._params_hash(run),
        "inputs": {"alpha": "a", "file:benchmarks/x.json": "x", "chapter": "c"}}
    now = {"alpha": "a2", "beta": "b", "chapter": "c"}
    assert runner._why(run, now, record) == [
        "alpha republished", "it now reads beta", "it no longer reads benchmarks/x.json"]
    assert runner._why(run, {**now, "file:benchmarks/x.json": "y"}, record) == [
        "alpha republished", "it now reads beta", "benchmarks/x.json changed"]
    changed = {**record, "results_version": 0, "notebook_hash": "n", "params_hash": "p"}
    assert runner._why(run, record["inputs"], changed) == [
        f"the results version changed (0 -> {runner.RESULTS_VERSION})",
        "its notebook changed (summary.ipynb)", "its parameters changed"]
    legacy = {k: v for k, v in record.items() if k != "inputs"}
    assert runner._why(run, now, legacy) == [
        "it was published before runs recorded what they read"]
    assert runner._why(run, {}, legacy) == [
        "what it depends on changed (its recorded hash differs)"]


def test_naming_a_run_that_does_not_run_earlier_is_an_error(tmp_path: Path) -> None:
    runs = {r.name: r for r in runner.resolve_profile(runner.load_manifest(
        manifest(tmp_path, _named_summary(stage=1))), "smoke")}
    with pytest.raises(ValueError, match=r"run 'summary': parameter 'group' names the results "
                                         r"of run 'alpha' \(stage 1\).*\(stage 1\)"):
        runner.run_inputs(runs["summary"], list(runs.values()), tmp_path)
    with pytest.raises(ValueError, match=r"notebooks.fixture_ok.reads must be one of"):
        runner.load_manifest(manifest(tmp_path, lambda raw: raw["notebooks"]["fixture_ok"]
                                      .update(reads="all"), name="bad.yml"))


def test_a_record_from_before_inputs_were_declared(tmp_path: Path) -> None:
    """Its hash covered every earlier-stage run: a run that reads nothing is up to date when its
    parameters, notebook and version are unchanged; one that reads something is stale."""
    root = tmp_path / "out"
    runs = {r.name: r for r in runner.resolve_profile(
        runner.load_manifest(manifest(tmp_path, _named_summary())), "smoke")}
    alpha, summary = runs["alpha"], runs["summary"]
    def legacy(run: runner.Run, **over: Any) -> dict[str, Any]:
        return {"hash": "from-before", "results_version": runner.RESULTS_VERSION,
                "notebook_hash": runner.notebook_hash(run.notebook.path),
                "params_hash": runner._params_hash(run), **over}
    _published(root, alpha, {}, **legacy(alpha))
    assert runner.run_status(alpha, {}, root) == "ok"
    assert runner.run_status(alpha, {"chapter": "x"}, root) == "stale"
    _published(root, summary, {}, **legacy(summary))
    assert runner.run_status(summary, runner.run_inputs(summary, list(runs.values()), root),
                             root) == "stale"
    for over in ({"params_hash": "x"}, {"notebook_hash": "x"}, {"results_version": 0},
                 {"inputs": {}}):
        (results(root, "fixture_ok", "alpha") / "run.json").write_text(json.dumps(
            {"status": "ok", "files": {}, **legacy(alpha, **over)}))
        assert runner.run_status(alpha, {}, root) == "stale", over


def _executed(*cells: Any) -> bytes:
    nb = nbformat.v4.new_notebook(cells=list(cells))
    nb.metadata["papermill"] = {"input_path": "/tmp/x/source.ipynb"}
    return nbformat.writes(nb).encode()


def _page(notebook: bytes, run: runner.Run, several: bool) -> bytes:
    return pages.prepare_for_book(
        notebook, name=run.name, source="/".join(run.notebook.path.parts[-2:]), params=run.params,
        profile=run.profile, chapter=run.notebook.group == runner.CHAPTERS_GROUP,
        several=several, hidden=runner.PAGE_HIDDEN)


def test_prepare_for_book_shows_parameters_and_hides_plumbing() -> None:
    alpha = runner.resolve_profile(runner.load_manifest(MANIFEST), "smoke")[1]
    out = nbformat.reads(_page(_executed(
        nbformat.v4.new_markdown_cell("# Title\n\nThe question."),
        nbformat.v4.new_code_cell("seed = 0", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("seed = 1", metadata={"tags": ["injected-parameters"]}),
        nbformat.v4.new_code_cell("x = seed * 2"),
        nbformat.v4.new_code_cell("y = 1", metadata={"tags": ["remove-input"]}),
    ), alpha, several=True).decode(), as_version=4)
    assert out.cells[0].source == "# Title · `alpha`\n\nThe question."
    block = out.cells[1].source
    assert "| `seed` | `1` |" in block and "num_threads" not in block and "`smoke`" in block
    tags = [c.metadata.get("tags", []) for c in out.cells]
    assert "remove-cell" in tags[2] and "remove-cell" in tags[3]  # both parameter cells
    assert tags[4] == ["hide-input"] and tags[5] == ["remove-input"]  # an author's tag is kept
    assert out.metadata["papermill"]["input_path"] == "notebooks/ok.ipynb"


def test_prepare_for_book_keeps_a_chapter_as_written() -> None:
    chapter = runner.resolve_profile(runner.load_manifest(MANIFEST), "smoke")[0]
    out = nbformat.reads(_page(_executed(
        nbformat.v4.new_markdown_cell("# Chapter"),
        nbformat.v4.new_code_cell("k = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print(k)")), chapter, several=False).decode(),
        as_version=4)
    assert out.cells[0].source == "# Chapter" and len(out.cells) == 3
    assert out.cells[1].metadata["tags"] == ["parameters", "remove-cell"]
    assert "tags" not in out.cells[2].metadata


def test_kernel_threads_share_the_cores_among_the_runs_that_run_at_once(monkeypatch) -> None:
    monkeypatch.setattr(runner, "cores", lambda: 8)
    assert runner.kernel_threads(None, 2, 12) == 4  # two at a time
    assert runner.kernel_threads(None, 2, 1) == 8  # alone in its stage: every core
    assert runner.kernel_threads("local", 0, 3) == 2  # jobs 0: one per core, 3 runs
    assert runner.kernel_threads(None, 16, 40) == 1
    assert runner.kernel_threads("tcp://host:8786", 2, 1) == 1  # a cluster's workers: one each
    with pytest.raises(ValueError, match="scheduler must be"):
        runner.kernel_threads("threads", 2, 1)


def test_a_stage_starts_unknown_runs_in_manifest_order_then_the_longest_first(
        tmp_path: Path) -> None:
    m = runner.load_manifest(manifest(tmp_path))
    runs = {r.name: r for r in runner.resolve_profile(m, "failing")
            + runner.resolve_profile(m, "killing") + runner.resolve_profile(m, "scaled")}
    stage = [runs[n] for n in ("alpha", "beta", "boom", "killed")]
    root = tmp_path / "out"
    order = lambda: [r.name for r in runner.longest_first(stage, root, "scaled")]  # noqa: E731
    assert order() == ["alpha", "beta", "boom", "killed"]  # nothing known: manifest order
    for name, seconds, profile in (("alpha", 5.0, "scaled"), ("beta", 50.0, "scaled"),
                                   ("boom", 20.0, "scaled"), ("killed", 900.0, "smoke")):
        folder = results(root, runs[name].notebook.group, name, runs[name].profile)
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps({"duration_s": seconds, "profile": profile}))
    # killed's only duration is another profile's: unknown, so it goes first
    assert order() == ["killed", "beta", "boom", "alpha"]
    # a run that resumed (5 s this time) is ordered by the longest it ever took
    folder = results(root, runs["alpha"].notebook.group, "alpha", "scaled")
    (folder / "run.json").write_text(json.dumps({"duration_s": 5.0, "longest_s": 500.0,
                                                 "profile": "scaled"}))
    assert order() == ["killed", "alpha", "beta", "boom"]


def test_publish_keeps_the_longest_duration_of_the_profile(tmp_path: Path) -> None:
    m = runner.load_manifest(manifest(tmp_path))
    root = tmp_path / "out"

    def publish(seconds: float, profile: str = "scaled") -> float | None:
        run = {r.name: r for r in runner.resolve_profile(m, profile)}["alpha"]
        runner._publish(run, {"files": {}, "notebook": b"{}"},
                        {"status": "failed", "duration_s": seconds}, root, m, [run])
        return record(root, run.notebook.group, "alpha", profile)["longest_s"]

    assert publish(900.0) == 900.0
    assert publish(6.5) == 900.0  # resumed: the cost stays the fresh run's
    assert publish(7.0, "smoke") == 7.0  # another profile's tree: its own durations


def test_large_records_publish_compressed_and_resume_from_it(tmp_path: Path, monkeypatch) -> None:
    from dyckbook.pipeline import layout
    monkeypatch.setattr(layout, "GZIP_FROM", 100)
    m = runner.load_manifest(manifest(tmp_path))
    root = tmp_path / "out"
    run = {r.name: r for r in runner.resolve_profile(m, "smoke")}["alpha"]
    cache = b"".join(b'{"step": %d}\n' % i for i in range(20))  # 260 bytes: compressed
    runner._publish(run, {"files": {"cache.jsonl": cache, "metrics.json": b"{}"},
                          "notebook": nbformat.writes(nbformat.v4.new_notebook()).encode()},
                    {"status": "ok"}, root, m, [run])
    rdir = results(root, "fixture_ok", "alpha")
    assert sorted(p.name for p in rdir.iterdir()) == ["cache.jsonl.gz", "metrics.json", "run.json"]
    assert set(record(root, "fixture_ok", "alpha")["files"]) == {"cache.jsonl.gz", "metrics.json"}
    assert runner._task(run, 1, root, {}).files == {"cache.jsonl": cache}  # a rerun resumes


# ------------------------------------------------------------------------ executing (kernels)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.notebook
def test_publish_skip_then_rerun_what_changed(tmp_path: Path, pool, caplog) -> None:
    caplog.set_level(logging.INFO, logger="dyckbook")
    root, m = tmp_path / "out", manifest(tmp_path, lambda raw: raw["profiles"].update(
        extra={"include": ["beta"]}, smoke={"exclude": ["beta", "boom", "killed", "resumed"]}))
    assert runner.run("smoke", manifest=m, out_root=root, executor=pool) == 0
    assert ran(caplog) == {"chapter", "alpha", "summary"}
    rdir = results(root, "fixture_ok", "alpha")
    rec = record(root, "fixture_ok", "alpha")
    assert rec["status"] == "ok" and rec["params"]["seed"] == 1 and rec["profile"] == "smoke"
    assert rec["files"] == {p.relative_to(rdir).as_posix(): _sha(p)
                            for p in rdir.rglob("*") if p.is_file() and p.name != "run.json"}
    assert set(rec["files"]) == {"metrics.json", "sub/table.csv", "cache.jsonl"}
    metrics = json.loads((rdir / "metrics.json").read_text())
    assert metrics["omp_num_threads"] == str(metrics["num_threads"])
    assert not metrics["cwd"].startswith(str(root))  # executed in a private folder
    assert "book/results/smoke/fixture_ok/alpha" in page(root, "fixture_ok", "alpha").read_text()
    summary = results(root, "fixture_summary", "summary") / "summary.json"
    assert json.loads(summary.read_text())["runs"] == ["alpha"]
    assert set(record(root, "fixture_summary", "summary")["inputs"]) == {"chapter", "alpha"}
    assert not [p for p in (root / "book").rglob(".*")]  # no staging folders left
    stamp = page(root, "fixture_ok", "alpha").stat().st_mtime_ns

    caplog.clear()
    assert runner.run("smoke", manifest=m, out_root=root, executor=pool) == 0
    assert ran(caplog) == set() and page(root, "fixture_ok", "alpha").stat().st_mtime_ns == stamp

    # a result file edited by hand (an interactive run writing into the published tree): the
    # run is redone and the kept cache survives
    (rdir / "metrics.json").write_text('{"value": 99}')
    assert runner.statuses("smoke", m, root)[1][1] == "edited"
    caplog.clear()
    assert runner.run("smoke", ["alpha"], manifest=m, out_root=root, executor=pool) == 0
    assert ran(caplog) == {"alpha"}
    assert (rdir / "cache.jsonl").read_text().count("\n") == 2
    assert json.loads((rdir / "metrics.json").read_text())["value"] == 1.0

    # beta: excluded by smoke, published by `extra`, then listed and read by smoke's summary,
    # which reruns because its inputs changed
    assert runner.run("extra", manifest=m, out_root=root, executor=pool) == 0
    # (alpha reran alone above, so the summary also read an older alpha)
    assert runner.stale_reasons("smoke", m, root) == {
        "summary": ["alpha republished", "it now reads beta"]}
    runner.assemble_pages("smoke", m, root)  # the stale page says what changed
    assert "What changed: alpha republished; it now reads beta." in (
        root / "book/pages/fixture_summary/summary.ipynb").read_text()
    caplog.clear()
    assert runner.run("smoke", manifest=m, out_root=root, executor=pool) == 0
    assert ran(caplog) == {"summary"}
    assert json.loads(summary.read_text())["runs"] == ["alpha", "beta"]
    assert set(record(root, "fixture_summary", "summary")["inputs"]) == {"chapter", "alpha",
                                                                         "beta"}
    index = json.loads((root / "book" / "results" / "smoke" / "index.json").read_text())
    assert index["profile"] == "smoke" and index["runs"]["beta"]["profile"] == "extra"
    assert not results(root, "fixture_ok", "beta").exists()  # beta stays in extra's tree
    states = runner.assemble_pages("smoke", m, root)
    assert states == {"chapter": "ok", "alpha": "ok", "summary": "ok", "beta": "ok"}
    assert (root / "book/pages/fixture_ok/alpha.ipynb").read_bytes() == page(
        root, "fixture_ok", "alpha").read_bytes()
    assert "comes from profile `extra`" in (root / "book/pages/fixture_ok/beta.ipynb").read_text()

    caplog.clear()
    assert runner.run("smoke", ["chapter"], force=True, manifest=m, out_root=root,
                      executor=pool) == 0
    assert ran(caplog) == {"chapter"}


@pytest.mark.notebook
def test_a_failure_never_published_is_reported_and_blocks_later_stages(tmp_path: Path, pool,
                                                                       caplog) -> None:
    caplog.set_level(logging.INFO, logger="dyckbook")
    root, m = tmp_path / "out", manifest(tmp_path)
    assert runner.run("failing", manifest=m, out_root=root, executor=pool) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "FAILED boom: cell 3 [# cell: explode] raised ValueError: boom at seed 0" in errors
    assert "[block] summary (missing): not run, it reads boom, which did not run" in errors
    rdir = results(root, "fixture_fail", "boom", "failing")
    rec = record(root, "fixture_fail", "boom", "failing")
    assert rec["status"] == "failed" and rec["error"]["ename"] == "ValueError"
    assert rec["hash"] is None
    assert {p.name for p in rdir.iterdir()} == {"run.json", "failed.ipynb"}
    # the failed attempt's resume cache waits beside it, never in the published folder
    assert (rdir.parent / ".boom.attempt" / "cache.jsonl").is_file()
    assert record(root, "fixture_summary", "summary", "failing")["status"] == "blocked"
    assert not page(root, "fixture_summary", "summary", "failing").exists()
    assert [s for _, s, _ in runner.statuses("failing", m, root)] == ["failed", "blocked"]
    assert not (root / "book/results/failing/index.json").exists()  # nothing published
    # the book still builds: each page says what happened
    states = runner.assemble_pages("failing", m, root)
    assert states == {"boom": "not published (failed)", "summary": "not published (blocked)"}
    text = (root / "book/pages/fixture_fail/boom.ipynb").read_text()
    assert "Not published" in text and "boom at seed 0" in text
    # a later run that does not read the failed one runs and publishes
    other = manifest(tmp_path, _named_summary(group="fixture_ok"), name="named.yml")
    assert runner.run("failing", manifest=other, out_root=tmp_path / "named",
                      executor=pool) == 1
    assert record(tmp_path / "named", "fixture_summary", "summary", "failing")["status"] == "ok"


@pytest.mark.notebook
def test_a_failed_run_keeps_the_last_good_publication_and_every_other_page(
        tmp_path: Path, pool, caplog) -> None:
    """Publication is a transaction: break one run of a built tree; every page and result
    file stays byte for byte, the broken page is marked in the book and in list."""
    caplog.set_level(logging.INFO, logger="dyckbook")
    root, m = tmp_path / "out", manifest(tmp_path)
    assert runner.run("smoke", manifest=m, out_root=root, executor=pool) == 0
    tree = {p: p.read_bytes() for p in sorted((root / "book").rglob("*"))
            if p.is_file() and p.name != "run.json"}
    broken = manifest(tmp_path, lambda raw: raw["runs"]["alpha"]["params"].update(
        work_s="not a number"), name="broken.yml")  # alpha's setup cell raises a TypeError
    caplog.clear()
    assert runner.run("smoke", manifest=broken, out_root=root, executor=pool) == 1
    assert ran(caplog) == {"alpha"}  # chapter and summary: inputs unchanged, left alone
    assert not [e for e in caplog.records if e.getMessage().startswith("[block]")]
    after = {p: p.read_bytes() for p in sorted((root / "book").rglob("*"))
             if p.is_file() and p.name not in ("run.json", "failed.ipynb")
             and ".alpha.attempt" not in p.parts}
    assert after == tree
    rec = record(root, "fixture_ok", "alpha")
    assert rec["status"] == "ok" and rec["attempt"]["status"] == "failed"
    assert rec["attempt"]["error"]["ename"] == "TypeError"
    assert (results(root, "fixture_ok", "alpha") / "failed.ipynb").is_file()
    listed = {r.name: s for r, s, _ in runner.statuses("smoke", broken, root)}
    assert listed == {"chapter": "ok", "alpha": "failed", "beta": "ok", "summary": "ok"}
    states = runner.assemble_pages("smoke", broken, root)
    assert states == listed
    marked = (root / "book/pages/fixture_ok/alpha.ipynb").read_text()
    assert "Its last run failed" in marked and "TypeError" in marked
    assert "last good" in marked
    for name, group in (("chapter", "chapters"), ("beta", "fixture_ok"),
                        ("summary", "fixture_summary")):
        assert (root / "book/pages" / group / f"{name}.ipynb").read_bytes() == page(
            root, group, name).read_bytes()
    assert json.loads((root / "book/pages/index.json").read_text())["states"]["alpha"] == "failed"
    # the next good run replaces the publication whole and clears the attempt
    caplog.clear()
    assert runner.run("smoke", manifest=m, out_root=root, executor=pool) == 0
    assert ran(caplog) == {"alpha", "summary"}  # alpha's cache grew: summary's inputs changed
    assert "attempt" not in record(root, "fixture_ok", "alpha")
    assert not (results(root, "fixture_ok", "alpha") / "failed.ipynb").exists()
    assert not (results(root, "fixture_ok", "alpha").parent / ".alpha.attempt").exists()


def test_orphaned_temporary_folders_are_removed(tmp_path: Path) -> None:
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    gone, mine = (tmp_path / f"dyckbook-run-{dead}-x1", tmp_path / f"dyckbook-run-{os.getpid()}-x2")
    other = tmp_path / "dyckbook-run-abc"  # not ours to judge: left alone
    for folder in (gone, mine, other):
        (folder / "root").mkdir(parents=True)
    assert runner.remove_orphaned_folders(tmp_path) == [gone]
    assert mine.is_dir() and other.is_dir() and not gone.exists()


def test_a_tree_of_the_layout_before_profiles_moves_under_its_profile(tmp_path: Path) -> None:

    old = tmp_path / "book/results/g/r"
    old.mkdir(parents=True)
    (old / "run.json").write_text("{}")
    (tmp_path / "book/runs/g").mkdir(parents=True)
    (tmp_path / "book/runs/g/r.ipynb").write_text("{}")
    (tmp_path / "book/results/index.json").write_text('{"profile": "cpu", "runs": {}}')
    assert layout.migrate_legacy_tree(tmp_path) == "cpu"
    assert (tmp_path / "book/results/cpu/g/r/run.json").is_file()
    assert (tmp_path / "book/runs/cpu/g/r.ipynb").is_file()
    assert (tmp_path / "book/results/cpu/index.json").is_file()
    assert layout.migrate_legacy_tree(tmp_path) is None  # once


@pytest.mark.notebook
def test_a_killed_pool_worker_fails_its_run_and_publishes_nothing(tmp_path: Path,
                                                                 caplog) -> None:
    marker = tmp_path / "attempts"
    m = manifest(tmp_path, lambda raw: raw["profiles"]["killing"].update(
        runs={"killed": {"marker": str(marker), "kills": 5}}))
    root = tmp_path / "out"
    assert runner.run("killing", manifest=m, out_root=root) == 1
    assert record(root, "fixture_kill", "killed", "killing")["error"]["ename"] == \
        "BrokenProcessPool"
    assert not page(root, "fixture_kill", "killed", "killing").exists()
    from dyckbook.pipeline.executors import _alive

    left = [f for f in Path(tempfile.gettempdir()).glob("dyckbook-run-*-*")  # other tests' are
            if not _alive(int(f.name.split("-")[2]))]  # alive: only a dead worker's count
    assert not left
    assert len(marker.read_text().splitlines()) == 1  # the process pool does not retry


@pytest.mark.notebook
def test_a_run_stopped_while_it_trains_reuses_its_trained_seeds(tmp_path: Path, monkeypatch
                                                                ) -> None:
    """What `make book` does (issue 54): the run cache named by a relative path, a run stopped
    after it trained seed 0 (its worker killed), the same command again."""
    marker = tmp_path / "attempts"
    m = manifest(tmp_path, lambda raw: raw["profiles"]["resuming"].update(
        runs={"resumed": {"marker": str(marker)}}))
    root = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DYCKBOOK_RUN_CACHE", ".cache/runs")  # the Makefile's RUN_CACHE
    assert runner.run("resuming", manifest=m, out_root=root) == 1  # stopped
    assert not page(root, "fixture_resume", "resumed", "resuming").exists()
    cached = sorted(p.name for p in (tmp_path / ".cache" / "runs").rglob("*") if p.is_file())
    assert cached  # seed 0, written as soon as it trained
    assert runner.run("resuming", manifest=m, out_root=root) == 0
    text = page(root, "fixture_resume", "resumed", "resuming").read_text()
    assert "resumed 1 of 1 seed(s)" in text and "resumed 1 of 2 seed(s)" in text
    metrics = results(root, "fixture_resume", "resumed", "resuming") / "metrics.json"
    assert json.loads(metrics.read_text()) == {"seeds": [0, 1]}
    assert len(marker.read_text().splitlines()) == 2


@pytest.mark.notebook
def test_papermill_directly_defaults_to_scratch_and_takes_typed_parameters(
        tmp_path: Path, monkeypatch) -> None:
    """The path a user takes without the runner (papermill's own command line, in process):
    defaults never touch published results, ``-p`` overrides, ``--help-notebook`` shows types."""
    from click.testing import CliRunner
    from papermill.cli import papermill

    source = str(FIXTURES / "notebooks" / "ok.ipynb")
    monkeypatch.setenv("DYCKBOOK_ROOT", str(tmp_path))
    published = results(tmp_path, "fixture_ok", "alpha")
    published.mkdir(parents=True)
    (published / "metrics.json").write_text("published")
    done = CliRunner().invoke(papermill, [source, str(tmp_path / "a.ipynb"), "-p", "seed", "3",
                                          "-p", "scale", "2.0", "--no-progress-bar"])
    assert done.exit_code == 0, done.output
    assert json.loads((tmp_path / "scratch/fixture/metrics.json").read_text())["value"] == 6.0
    assert (published / "metrics.json").read_text() == "published"
    helptext = CliRunner().invoke(papermill, ["--help-notebook", source]).output
    assert "seed: int (default 0)" in helptext and "Unknown type" not in helptext


def test_a_line_names_the_runs_still_going(tmp_path: Path, caplog) -> None:
    import concurrent.futures as cf
    import threading

    caplog.set_level(logging.INFO, logger="dyckbook")
    run = runner.resolve_profile(runner.load_manifest(MANIFEST), "smoke")[1]
    release = threading.Event()
    with cf.ThreadPoolExecutor(1) as pool:
        future = pool.submit(release.wait, 5)
        gen = runner._as_completed({future: run}, tmp_path, every=0.05)
        timer = threading.Timer(0.3, release.set)
        timer.start()
        assert list(gen) == [future]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[running]")]
    assert lines and "alpha" in lines[0]


@pytest.mark.notebook
def test_profiles_publish_apart_and_the_index_changes_only_on_publication(
        tmp_path: Path, pool) -> None:
    """A smoke run after a built profile leaves that profile's results, pages and index byte for
    byte; a run that publishes nothing (all up to date, or refused) rewrites no index."""
    root, m = tmp_path / "out", manifest(tmp_path)
    assert runner.run("scaled", manifest=m, out_root=root, executor=pool) == 0

    def tree(profile: str) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes()
                for base in ("results", "runs") for p in (root / "book" / base / profile).rglob("*")
                if p.is_file()}

    scaled = tree("scaled")
    assert "book/results/scaled/index.json" in scaled
    assert runner.run("smoke", manifest=m, out_root=root, executor=pool) == 0
    assert tree("scaled") == scaled
    smoke = tree("smoke")
    assert runner.run("smoke", manifest=m, out_root=root, executor=pool) == 0  # up to date
    with pytest.raises(ValueError, match="matches no run"):
        runner.run("smoke", ["nothing*"], manifest=m, out_root=root, executor=pool)
    assert tree("smoke") == smoke and tree("scaled") == scaled
    assert json.loads(scaled["book/results/scaled/index.json"])["profile"] == "scaled"


def test_a_long_temporary_folder_makes_the_kernel_use_tcp(tmp_path: Path) -> None:
    short = runner._kernel_manager({}, tmp_path, tmp_path / "s")(kernel_name="python3")
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    long = runner._kernel_manager({}, deep, deep / "s")(kernel_name="python3")
    assert short.transport == "ipc" and long.transport == "tcp"


def test_a_blocked_run_keeps_the_caches_of_an_earlier_failed_attempt(tmp_path: Path) -> None:
    m = runner.load_manifest(manifest(tmp_path))
    boom = {r.name: r for r in runner.resolve_profile(m, "failing")}["boom"]
    root = tmp_path / "out"
    runner._publish(boom, {"files": {"cache.jsonl": b"{}\n", "metrics.json": b"{}"},
                           "notebook": b"{}"}, {"status": "failed"}, root, m, [boom])
    cache = results(root, "fixture_fail", "boom", "failing").parent / ".boom.attempt"
    assert (cache / "cache.jsonl").read_bytes() == b"{}\n"
    assert not (cache / "metrics.json").exists()  # only what the manifest keeps
    runner._publish(boom, None, {"status": "blocked"}, root, m, [boom])
    assert (cache / "cache.jsonl").read_bytes() == b"{}\n"
    assert record(root, "fixture_fail", "boom", "failing")["status"] == "blocked"


def test_a_table_placed_by_the_text_is_shown_there_and_not_at_its_cell() -> None:
    chapter = runner.resolve_profile(runner.load_manifest(MANIFEST), "smoke")[0]
    shown = nbformat.v4.new_output("display_data", {"text/markdown": "| a |\n|---|\n| 1 |"},
                                   metadata={"scrapbook": {"name": "placed", "mime_prefix": ""}})
    kept = nbformat.v4.new_output("display_data", {"text/markdown": "| b |\n|---|\n| 2 |"},
                                  metadata={"scrapbook": {"name": "inline", "mime_prefix": ""}})
    cell = nbformat.v4.new_code_cell("book.glue_table(...)")
    cell.outputs = [shown, kept]
    out = nbformat.reads(_page(_executed(
        nbformat.v4.new_markdown_cell("# Chapter"), cell,
        nbformat.v4.new_markdown_cell("Text.\n\n```{glue:table} placed\n```\n")),
        chapter, several=False).decode(), as_version=4)
    assert out.cells[2].source == "Text.\n\n```{glue:md} placed\n:format: myst\n```\n"
    placed, inline = out.cells[1].outputs
    assert list(placed.data) == ["application/papermill.record/text/markdown"]
    assert placed.metadata["scrapbook"]["mime_prefix"] == "application/papermill.record/"
    assert list(inline.data) == ["text/markdown"]  # a table the text does not place stays


def test_a_page_stored_before_tables_were_placed_gets_them_at_assembly() -> None:
    from dyckbook.pipeline import pages

    shown = nbformat.v4.new_output("display_data", {"text/markdown": "| a |\n|---|\n| 1 |"},
                                   metadata={"scrapbook": {"name": "t", "mime_prefix": ""}})
    cell = nbformat.v4.new_code_cell("book.glue_table('t', rows)")
    cell.outputs = [shown]
    stored = nbformat.writes(nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Page"), cell,
        nbformat.v4.new_markdown_cell("```{glue:table} t\n```")]))
    out = nbformat.reads(pages.marked_page(stored, "Page", None), as_version=4)
    assert out.cells[2].source == "```{glue:md} t\n:format: myst\n```"
    assert list(out.cells[1].outputs[0].data) == ["application/papermill.record/text/markdown"]
    again = pages.marked_page(nbformat.writes(out), "Page", None)  # idempotent
    assert nbformat.reads(again, as_version=4).cells == out.cells


@pytest.mark.parametrize("path, committed", [
    ("book/results/cpu/01_dyck1/dyck1/run.json", True),
    ("book/runs/cpu/01_dyck1/dyck1.ipynb", True),
    ("book/results/cpu/05_explainability/explainability/model_Dyck-1_s0.pt", True),
    ("book/results/thesis/01_dyck1/dyck1/run.json", True),
    ("book/runs/thesis/01_dyck1/dyck1.ipynb", True),
    ("book/results/thesis/05_explainability/explainability/model_Dyck-1_s0.pt", True),
    ("book/results/smoke/01_dyck1/dyck1/run.json", False),
    ("book/runs/smoke/01_dyck1/dyck1.ipynb", False),
    ("checkpoints/model.pt", False),
    ("scratch/01_dyck1.ipynb", False),
])
def test_the_cpu_and_thesis_profiles_are_committed_and_previews_are_not(path, committed):
    """Issue 51: the cpu profile's published runs and the thesis profile's are part of the
    repository (results, pages and the weights a later run reads); the smoke profile's, a
    preview, and a user's scratch and checkpoints stay on the machine."""
    import subprocess

    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path],
                             cwd=Path(__file__).resolve().parents[1], check=False).returncode == 0
    assert ignored is not committed, (path, "ignored" if ignored else "committed")


def test_a_kernel_whose_parent_died_says_nothing(tmp_path: Path) -> None:
    """Issue 65 item 13: an interrupted `dyckbook run` left each kernel to find its parent gone
    and print "[IPKernelApp] WARNING | Parent appears to have exited" on the terminal. A
    process starts a kernel as the runner does and dies; the kernel's stderr stays empty."""
    import subprocess
    import sys
    import time

    script = f"""
import asyncio, os
from pathlib import Path
from dyckbook.pipeline import runner
folder = Path({str(tmp_path)!r})
Manager = runner._kernel_manager(dict(os.environ), folder, folder / "k")
async def main():
    km = Manager(kernel_name="python3")
    await km.start_kernel()
    kc = km.client(); kc.start_channels(); await kc.wait_for_ready(timeout=60)
    print(km.provisioner.process.pid, flush=True)
    os._exit(0)  # as a run killed mid-way: no kernel shutdown
asyncio.run(main())
"""
    err = tmp_path / "stderr"
    with err.open("w") as stderr:
        done = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              stderr=stderr, text=True, timeout=120, check=True)
    pid = int(done.stdout.split()[-1])
    for _ in range(100):  # the kernel polls its parent every second, then exits
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    time.sleep(0.5)
    assert "Parent appears to have exited" not in err.read_text(), err.read_text()
