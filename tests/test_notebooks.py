"""The real notebooks: clean, typed parameters cells that default to scratch, and the smoke profile.

The whole manifest's smoke profile is executed once (the runner into a cached output root shared
with the book test); every run must be published with its promised files, and nbval re-executes
the executed copy of every notebook that has cells tagged ``nbval-check-output`` and compares
their printouts with the runner's (a determinism check). The other notebooks are not executed a
second time: the runner has just executed each in this environment, so a rerun would only repeat
that check. The runner itself is tested on fixture notebooks in
``tests/test_runner.py``.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import papermill
import pytest

from dyckbook.pipeline import runner

pytestmark = pytest.mark.notebook

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent  # tests/: where the nbval_ipc plugin lives
MANIFEST = REPO / "notebooks" / "experiments.yml"
PROFILE = "smoke"
CHECK_TAG = "nbval-check-output"  # cells whose printout nbval compares
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SOURCES = sorted([*(REPO / "notebooks").glob("*.ipynb"), *(REPO / "book").glob("*.ipynb")])


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


@pytest.fixture(scope="module")
def smoke() -> SimpleNamespace:
    """Every run of the smoke profile, executed once per source state (shared with the book)."""
    from book_build import SmokeRunError, smoke_root

    try:
        root = smoke_root()
    except SmokeRunError as error:
        pytest.fail(str(error))
    return SimpleNamespace(root=root, runs=runner.resolve_profile(
        runner.load_manifest(MANIFEST), PROFILE))


# ------------------------------------------------------------------------ sources (no kernels)


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_source_notebook_is_clean(path: Path) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    dirty = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
             and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs or execution counts"


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_parameters_cell_is_typed_commented_and_defaults_to_scratch(path: Path) -> None:
    """Every line ``name: type = literal  # what it is`` (so ``papermill --help-notebook`` shows
    types), the injected names declared, and ``results_dir`` outside the published tree: running
    the notebook by hand never overwrites what the book shows."""
    tagged = [c for c in _cells(path) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: {len(tagged)} cells tagged 'parameters'"
    body = ast.parse(_source(tagged[0])).body
    assert all(isinstance(node, ast.AnnAssign) for node in body), path.name
    defaults = {node.target.id: ast.literal_eval(node.value) for node in body}
    assert set(runner.INJECTED) <= set(defaults), path.name
    assert defaults["results_dir"] == f"scratch/{path.stem}"
    lines = [line for line in _source(tagged[0]).splitlines() if line.strip()]
    assert all("  # " in line for line in lines), [line for line in lines if "  # " not in line]
    # papermill reads each line by a pattern (no `X | None` annotations): what it cannot read,
    # the runner cannot override and `papermill --help-notebook` does not show
    seen = papermill.inspect_notebook(str(path))
    assert set(seen) == set(defaults), sorted(set(defaults) - set(seen))
    assert all(info["inferred_type_name"] != "None" for info in seen.values())


def test_manifest_names_every_notebook_and_every_profile_resolves() -> None:
    man = runner.load_manifest(MANIFEST)
    assert {nb.path for nb in man.notebooks.values()} == set(SOURCES)
    for profile in man.profiles:
        assert runner.resolve_profile(man, profile), profile
    smoke = runner.resolve_profile(man, PROFILE)
    assert {r.notebook.key for r in smoke} == set(man.notebooks)  # smoke runs every notebook


def test_the_contributing_template_executes_as_it_stands(tmp_path: Path) -> None:
    """CONTRIBUTING's notebook template (``notebooks/templates/experiment.ipynb``) is a file
    that runs: its parameters cell typed, commented and defaulting to scratch, then
    ``params.check``, ``chapters.page`` and a training on ``device``, its table glued."""
    template = REPO / "notebooks" / "templates" / "experiment.ipynb"
    test_source_notebook_is_clean(template)
    tagged = [c for c in _cells(template) if "parameters" in c.get("metadata", {}).get("tags", [])]
    defaults = {n.target.id: ast.literal_eval(n.value) for n in ast.parse(_source(tagged[0])).body}
    assert set(runner.INJECTED) <= set(defaults) and defaults["results_dir"] == "scratch/NN_slug"
    assert set(papermill.inspect_notebook(str(template))) == set(defaults)
    code = "\n".join(_source(c) for c in _cells(template) if c["cell_type"] == "code")
    assert "params.check(" in code and "from dyckbook.chapters import page" in code
    out = tmp_path / "results"
    papermill.execute_notebook(str(template), str(tmp_path / "executed.ipynb"),
                               parameters={"results_dir": str(out), "num_threads": 1},
                               cwd=str(tmp_path), kernel_name="python3", progress_bar=False)
    executed = json.loads((tmp_path / "executed.ipynb").read_text(encoding="utf-8"))
    glued = [o["metadata"]["scrapbook"]["name"] for c in executed["cells"]
             for o in c.get("outputs", []) if "scrapbook" in o.get("metadata", {})]
    assert glued == ["table"], glued
    assert any(out.rglob("records.jsonl*")), sorted(p.name for p in out.rglob("*"))


# ------------------------------------------------------------------------ the smoke execution


def test_every_smoke_run_is_published_with_its_promised_files(smoke: SimpleNamespace) -> None:
    for run in smoke.runs:
        rdir = smoke.root / run.params["results_dir"]
        record = json.loads((rdir / "run.json").read_text())
        assert record["status"] == "ok", (run.name, record.get("error"))
        page = smoke.root / "book" / "runs" / PROFILE / run.notebook.group / f"{run.name}.ipynb"
        executed = json.loads(page.read_text())
        errors = [o for c in executed["cells"] for o in c.get("outputs", [])
                  if o.get("output_type") == "error"]
        assert not errors, run.name
        for output in run.notebook.outputs:
            assert (rdir / output).is_file(), f"{run.name} did not write {output}"
            if output.endswith(".json"):
                json.loads((rdir / output).read_text(encoding="utf-8"))
        for fig in rdir.glob("fig_*.png"):
            assert fig.read_bytes()[:8] == PNG_MAGIC and fig.stat().st_size > 1000, fig.name


def test_notebooks_rerun_under_nbval_with_stable_checked_cells(smoke: SimpleNamespace,
                                                               tmp_path: Path) -> None:
    """Re-execute, with nbval (``--nbval-lax``, two workers), the smoke copy of every notebook
    that has cells tagged ``nbval-check-output`` (deterministic printouts of the chapters):
    every cell must run again and every tagged cell print what the runner's run printed."""
    pytest.importorskip("nbval")
    work = tmp_path / "smoke"  # a private copy: the shared root stays as the runner left it
    shutil.copytree(smoke.root, work)
    pages: dict[str, Path] = {}  # one executed copy per notebook
    for run in smoke.runs:
        pages.setdefault(run.notebook.key,
                         work / "book" / "runs" / PROFILE / run.notebook.group
                         / f"{run.name}.ipynb")
    checked = {p: sum(CHECK_TAG in c.get("metadata", {}).get("tags", []) for c in _cells(p))
               for p in pages.values()}
    chosen = [p for p, n in checked.items() if n]
    assert sum(checked.values()) >= 4, f"too few cells tagged {CHECK_TAG}: {checked}"
    env = {**os.environ, "DYCKBOOK_ROOT": str(work), "MPLBACKEND": "Agg", "DYCKBOOK_QUIET": "1",
           "OMP_NUM_THREADS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    # nbval_ipc: the kernels talk over IPC sockets, not TCP ports two kernels may both pick
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-p",
           "no:cacheprovider", "-p", "nbval_ipc",
           "-c", os.devnull, "--rootdir", str(work), "--nbval-lax", "--nbval-current-env",
           *map(str, chosen)]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_nbval_ipc_plugin_starts_kernels_over_ipc_and_retries_a_dead_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin the nbval rerun loads makes nbval's kernels talk over IPC sockets (no TCP
    port two kernels could both pick), such a kernel runs code, and a start that dies is tried
    once more, never twice."""
    import importlib.util  # deferred: only this test loads the plugin, in this process

    kernel = pytest.importorskip("nbval.kernel")
    for name in ("KernelManager", "start_new_kernel"):  # restored at teardown
        monkeypatch.setattr(kernel, name, getattr(kernel, name))
    spec = importlib.util.spec_from_file_location("nbval_ipc", HERE / "nbval_ipc.py")
    assert spec is not None and spec.loader is not None
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    running = kernel.RunningKernel(kernel.CURRENT_ENV_KERNEL_NAME)
    try:
        assert running.km.transport == "ipc"
        assert Path(running.km.ip).parent.is_dir()
        printed: list[str] = []
        reply = running.kc.execute_interactive(
            "print(6 * 7)", timeout=30,
            output_hook=lambda m: printed.append(m["content"].get("text", "")))
        assert reply["content"]["status"] == "ok"
        assert "".join(printed) == "42\n"
    finally:
        running.stop()

    # a start that dies once is tried once more, with a warning; one that dies twice fails
    tries: list[int] = []

    def dies(times: int) -> object:
        def start(**_: object) -> str:
            tries.append(1)
            if len(tries) <= times:
                raise RuntimeError("Kernel died before replying to kernel_info")
            return "started"
        return start

    monkeypatch.setattr(plugin, "_start_new_kernel", dies(1))
    with pytest.warns(UserWarning, match="died while starting"):
        assert kernel.start_new_kernel(kernel_name="x") == "started"
    tries.clear()
    monkeypatch.setattr(plugin, "_start_new_kernel", dies(2))
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="kernel_info"):
        kernel.start_new_kernel(kernel_name="x")
    assert len(tries) == 2
