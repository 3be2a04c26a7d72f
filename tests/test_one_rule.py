"""One rule for what determines a number (issue 66): a refactor keeps every key.

A copy of the package has the long-range window (its constant and its two functions) moved out
of ``data/negatives.py`` into a module of its own, as a refactor would. Read through the copy,
every published cpu run is still ``ok``, every verdict run still judged against its
registration, and the cache keys of a run and its data are the same; read through the
package itself, the same. ``tests/test_results_version.py`` holds the other half: an edit that
moves a number without a bump fails there.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dyckbook

PACKAGE = Path(dyckbook.__file__).parent
ROOT = PACKAGE.parent
MOVED = ("LONG_RANGE_MIN_WINDOW", "long_range_window", "long_range_windows")

SNAPSHOT = """
import glob, json
from dyckbook import DataConfig, ModelConfig, RunConfig, TrainConfig
from dyckbook.claims import registry
from dyckbook.data import negatives
from dyckbook.experiment import cache
from dyckbook.pipeline import runner

status = {run.name: state for run, state, _ in runner.statuses("cpu")}
registrations = registry.load()
judged = {}
for path in sorted(glob.glob("book/results/cpu/*/*/run.json")):
    record = json.load(open(path))
    if record["run"] in registry.verdict_runs():
        judged[record["run"]] = registry.check(record, registrations)[1]
config = RunConfig(DataConfig(k=2, min_length=4, max_length=10, n_train=64, n_val=16,
                              n_test=32), ModelConfig(k=2, n_ctx=10), TrainConfig(max_steps=2))
print(json.dumps({"status": status, "judged": judged, "run_key": cache.run_key(config, 0),
                  "data_key": cache.data_key(config.data, 0),
                  "window_lives_in": negatives.long_range_window.__module__,
                  "window_at_90": negatives.long_range_window(90)}))
"""


def snapshot(package_parent: Path) -> dict:
    """What the three stores say, read through the package under ``package_parent``."""
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    env.pop("DYCKBOOK_ROOT", None)
    out = subprocess.run([sys.executable, "-P", "-c", SNAPSHOT], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def move_the_window(package: Path) -> None:
    """Move the long-range window out of ``negatives`` into ``data/windows.py``."""
    path = package / "data" / "negatives.py"
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    spans = []
    for node in ast.parse(source).body:
        names = [node.name] if isinstance(node, ast.FunctionDef) else [
            t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
        if set(names) & set(MOVED):
            spans.append((node.lineno - 1, node.end_lineno))
    assert len(spans) == len(MOVED), spans
    moved = "".join("".join(lines[a:b]) + "\n\n" for a, b in spans)
    for a, b in sorted(spans, reverse=True):
        del lines[a:b]
    (package / "data" / "windows.py").write_text(
        '"""The long-range window (moved here by a refactor)."""\n\nimport numpy as np\n\n'
        + moved, encoding="utf-8")
    text = "".join(lines).replace(
        "from dyckbook.data.hardness import profile\n",
        "from dyckbook.data.hardness import profile\nfrom dyckbook.data.windows import "
        + ", ".join(MOVED) + "\n", 1)
    path.write_text(text, encoding="utf-8")


def test_moving_a_function_between_modules_keeps_runs_registrations_and_cache_keys(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "dyckbook", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    move_the_window(tmp_path / "dyckbook")
    before, after = snapshot(ROOT), snapshot(tmp_path)
    assert before["window_lives_in"] == "dyckbook.data.negatives"
    assert after["window_lives_in"] == "dyckbook.data.windows"  # the refactor took place
    assert after["window_at_90"] == before["window_at_90"] == 30
    assert "stale" not in before["status"].values() and "ok" in before["status"].values()
    assert before["judged"] and set(before["judged"].values()) == {""}
    for field in ("status", "judged", "run_key", "data_key"):
        assert after[field] == before[field], field
