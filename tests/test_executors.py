"""Executors (process pool, Dask) and progress: the same results on either, retries, cancel."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from test_runner import manifest, page, record, results

from dyckbook.pipeline import runner
from dyckbook.pipeline.executors import Progress, make_executor

pytest.importorskip("distributed")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dask():
    executor = make_executor("local", 1)
    yield executor
    executor.shutdown()


@pytest.fixture(scope="module")
def pool():
    executor = make_executor(None, 1)
    yield executor
    executor.shutdown()


def _tree(root: Path) -> dict[str, object]:
    """Every published file's content, run records and run-specific paths left out."""
    out: dict[str, object] = {}
    for path in sorted((root / "book" / "results").rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.name in ("run.json", "index.json") or not path.is_file():
            continue
        out[rel] = path.read_bytes()
        if path.name == "metrics.json":
            out[rel] = {k: v for k, v in json.loads(path.read_bytes()).items() if k != "cwd"}
    return out


@pytest.mark.notebook
def test_a_dask_run_publishes_what_a_process_pool_run_publishes(tmp_path: Path, dask,
                                                                pool) -> None:
    m = manifest(tmp_path, lambda raw: raw["profiles"]["smoke"].update(  # a run and a summary
        exclude=["chapter", "beta", "boom", "killed", "resumed"]))  # that reads it
    for name, executor in (("dask", dask), ("pool", pool)):
        assert runner.run("smoke", manifest=m, out_root=tmp_path / name, executor=executor) == 0
    assert _tree(tmp_path / "dask") == _tree(tmp_path / "pool")
    assert len(_tree(tmp_path / "dask")) == 4  # alpha's 3 files and the summary's
    for name in ("dask", "pool"):
        assert page(tmp_path / name, "fixture_summary", "summary").is_file()


@pytest.mark.slow
def test_a_smoke_grid_on_dask_equals_the_process_pool(dask, pool) -> None:
    from dyckbook.chapters.ablation_grid import GridSpec, cells_named, run_grid

    spec = GridSpec(max_steps=20, eval_every=10, n_train=400, n_val=64, n_test=200)
    scores = [[r.to_dict()["scores"] for r in run_grid(cells_named("smoke"), spec, [0],
                                                       executor=executor)]
              for executor in (dask, pool)]
    assert scores[0] == scores[1] and len(scores[0]) == len(cells_named("smoke"))


@pytest.mark.notebook
def test_a_killed_dask_worker_is_retried_once_then_reported(tmp_path: Path, dask) -> None:
    marker = tmp_path / "attempts"  # one line per attempt; each attempt kills its worker
    m = manifest(tmp_path, lambda raw: raw["profiles"]["killing"].update(
        runs={"killed": {"marker": str(marker), "kills": 2}}))
    root = tmp_path / "out"
    assert runner.run("killing", manifest=m, out_root=root, executor=dask) == 1
    assert len(marker.read_text().splitlines()) == 2  # retried once on a fresh worker
    rec = record(root, "fixture_kill", "killed", "killing")
    assert rec["status"] == "failed" and rec["error"]["ename"] == "KilledWorker"
    assert {p.name for p in results(root, "fixture_kill", "killed", "killing").iterdir()} == {
        "run.json"}
    assert not page(root, "fixture_kill", "killed", "killing").exists()


@pytest.mark.notebook
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_kill_cancels_outstanding_runs_and_leaves_nothing_behind(
        tmp_path: Path, signum: int) -> None:
    marker = tmp_path / "started"
    m = manifest(tmp_path, lambda raw: raw["profiles"]["smoke"].update(
        notebooks={"fixture_ok": {"work_s": 60.0, "marker": str(marker)}}))
    root = tmp_path / "out"
    tmp = Path(tempfile.mkdtemp(prefix="dk"))  # a private $TMPDIR, short (socket paths)
    for name in ("alpha", "beta"):  # big resume caches: a queued task no pipe buffer holds
        cache = root / "book/results/smoke/fixture_ok" / name / "cache.jsonl"
        cache.parent.mkdir(parents=True)
        cache.write_text('{"seed": 0}\n' * 400_000)
    # a shell's background job (`make test &`) ignores SIGINT, and a Python started with SIGINT
    # ignored never raises KeyboardInterrupt: the CLI is exec'd with the default, as on a terminal
    argv = [sys.executable, "-m", "dyckbook", "run", "--profile", "smoke", "--only", "alpha",
            "beta", "--jobs", "1", "--manifest", str(m)]
    launch = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
              "os.execv(sys.executable, sys.argv[1:])")
    proc = subprocess.Popen([sys.executable, "-c", launch, *argv], cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DYCKBOOK_ROOT": str(root), "TMPDIR": str(tmp)})
    deadline = time.monotonic() + 120
    while not marker.is_file() and time.monotonic() < deadline:  # the first run has started
        time.sleep(0.2)
    proc.send_signal(signum)
    start = time.monotonic()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert time.monotonic() - start < 30  # the 60 s run was stopped, not waited for
    assert "interrupted: 2 outstanding run(s) cancelled" in stderr
    assert "dyckbook run: interrupted" in stderr.splitlines()
    assert len(marker.read_text().splitlines()) == 1  # the second run never started
    assert not list((root / "book").rglob("*.ipynb"))
    assert not (results(root, "fixture_ok", "alpha") / "metrics.json").exists()
    time.sleep(1)  # the stopped worker's kernel
    assert not list(tmp.glob("dyckbook-run-*")), "a temporary folder was left behind"
    shutil.rmtree(tmp)


def test_make_executor_rejects_bad_arguments() -> None:
    for scheduler, workers, message in [("threads", 1, "scheduler must be"),
                                        ("tcp://", 1, "scheduler must be"),
                                        (None, -1, "workers must be"),
                                        (None, 10_000, "workers must be"),
                                        (None, True, "workers must be")]:
        with pytest.raises(ValueError, match=message):
            make_executor(scheduler, workers)


# ------------------------------------------------------------------------------ progress


def test_progress_is_plain_lines_off_a_terminal(monkeypatch) -> None:
    monkeypatch.delenv("DYCKBOOK_QUIET", raising=False)
    stream = io.StringIO()
    with Progress(4, "grid", "cell", stream=stream, every=0.0) as bar:
        bar.skip()
        for _ in range(3):
            bar.update()
    lines = stream.getvalue().splitlines()
    assert bar.mode == "lines" and "\r" not in stream.getvalue()
    assert [line.split(",")[0] for line in lines] == ["grid: 1/3 cells", "grid: 2/3 cells",
                                                      "grid: 3/3 cells"]
    assert lines[-1].endswith("ETA 0:00")
    quiet = io.StringIO()
    with Progress(100, "grid", stream=quiet, every=3600.0) as bar:
        for _ in range(99):
            bar.update()  # throttled: nothing until the last item
        assert quiet.getvalue() == ""
        bar.update()
    assert quiet.getvalue().startswith("grid: 100/100 items")


def test_progress_is_a_bar_on_a_terminal_and_silent_when_quiet(monkeypatch) -> None:
    monkeypatch.delenv("DYCKBOOK_QUIET", raising=False)
    leader, follower = pty.openpty()
    with os.fdopen(follower, "w") as tty:
        with Progress(2, "runs", "run", stream=tty) as bar:
            bar.update(2)
        assert bar.mode == "bar"
    chunks = []  # a pty hands over what was written in pieces: read until it is drained
    while select.select([leader], [], [], 0.5)[0]:
        try:
            chunks.append(os.read(leader, 4096))
        except OSError:  # EIO: drained, and the follower side is closed
            break
    os.close(leader)
    shown = b"".join(chunks).decode()
    assert "\r" in shown and "2/2" in shown
    monkeypatch.setenv("DYCKBOOK_QUIET", "1")
    stream = io.StringIO()
    with Progress(2, "runs", stream=stream, every=0.0) as bar:
        bar.update(2)
    assert bar.mode == "off" and stream.getvalue() == ""


def test_pool_workers_run_one_torch_thread_even_when_the_script_imported_torch(tmp_path) -> None:
    """A script that imports torch at its top is re-imported by every spawned worker before the
    pool's initializer runs; the worker must still run one torch thread (torch otherwise keeps
    the thread count it read at import: here 3; by default one per core, so that N workers on
    N cores oversubscribe them N-fold)."""
    import subprocess

    script = tmp_path / "threads.py"
    script.write_text(
        "import torch\n"
        "from dyckbook.pipeline import executors\n\n"
        "def threads(_):\n"
        "    return torch.get_num_threads()\n\n"
        "if __name__ == '__main__':\n"
        "    with executors.make_executor(None, 2) as pool:\n"
        "        print(sorted(pool.map(threads, range(4))))\n")
    env = {**os.environ, "OMP_NUM_THREADS": "3"}  # what a worker's torch starts with, unfixed
    env["PYTHONPATH"] = str(Path(runner.__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=300, check=True)
    assert out.stdout.strip() == "[1, 1, 1, 1]", out.stdout + out.stderr
