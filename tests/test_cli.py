"""Tests for the CLI (``python -m dyckbook generate|check``), run as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "dyckbook", *args], capture_output=True,
                          text=True, env=env, cwd=cwd or ROOT, timeout=120)


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.slow  # a subprocess that imports torch
def test_generate_writes_a_verified_dataset(tmp_path):
    out = tmp_path / "data.jsonl"
    result = run("generate", "--k", "3", "--n", "200", "--min-length", "0", "--max-length", "16",
                 "--negatives", "hard", "--seed", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "200" in result.stdout
    from dyckbook.data import DatasetSpec, generate_dataset, load_jsonl

    loaded = load_jsonl(out)
    spec = DatasetSpec(language="dyck", k=3, n=200, min_length=0, max_length=16,
                       negatives="hard", seed=1)
    assert loaded.spec == spec
    assert loaded.strings() == generate_dataset(spec).strings()  # same seed, same data
    meta = json.loads((tmp_path / "data.jsonl.meta.json").read_text())
    assert meta["n_lines"] == 200


@pytest.mark.slow  # a subprocess that imports torch
def test_generate_shuffle_dyck_with_random_negatives(tmp_path):
    from dyckbook.data import load_jsonl

    out = tmp_path / "s.jsonl"
    result = run("generate", "--language", "shuffle-dyck", "--k", "2", "--n", "50",
                 "--max-length", "12", "--negatives", "random", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert load_jsonl(out).spec.language == "shuffle_dyck"


@pytest.mark.slow  # a subprocess that imports torch
def test_generate_comma_separated_kinds(tmp_path):
    from dyckbook.data import load_jsonl
    from dyckbook.negatives import HARD_KINDS

    kinds = HARD_KINDS[:2]
    out = tmp_path / "h.jsonl"
    result = run("generate", "--k", "2", "--n", "60", "--max-length", "12", "--negatives",
                 ",".join(kinds), "--out", str(out))
    assert result.returncode == 0, result.stderr
    loaded = load_jsonl(out)
    assert loaded.spec.negatives == tuple(kinds)
    assert set(loaded.kinds) <= {"positive", *kinds}


def test_check_verdicts():
    ok = run("check", "--k", "2", "()", "([])", "")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("not a member") == 0 and ok.stdout.count("member") == 3
    bad = run("check", "--k", "2", "()", "([)]")
    assert bad.returncode == 1
    assert "not a member\t'([)]'" in bad.stdout
    depth = run("check", "--k", "1", "--max-depth", "1", "(())")
    assert depth.returncode == 1
    shuffle = run("check", "--language", "shuffle-dyck", "--k", "2", "([)]")
    assert shuffle.returncode == 0


@pytest.mark.parametrize("args, needles", [
    (["check", "--k", "1", "(x)"], ["'x'"]),
    (["check", "--k", "0", "()"], ["k"]),
    (["check", "--k", "two", "()"], ["--k must be an integer"]),
    (["check", "--language", "shuffle-dyck", "--max-depth", "2", "()"], ["--max-depth"]),
    (["check", "--k", "1"], ["STRING"]),
    (["generate", "--n", "10", "--max-length", "8", "--out", "x.jsonl", "--negatives", "nope"],
     ["negatives"]),
    (["generate", "--n", "0", "--max-length", "8", "--out", "x.jsonl"], ["n must be >= 1"]),
    (["generate", "--n", "10", "--min-length", "9", "--max-length", "8", "--out", "x.jsonl"],
     ["min_length"]),
    (["generate", "--n", "10", "--max-length", "8", "--out", "x.jsonl",
      "--positive-fraction", "2"], ["positive_fraction"]),
    (["generate", "--n", "10", "--max-length", "2", "--out", "x.jsonl"], ["no negative"]),
    (["generate", "--n", "10", "--max-length", "-4", "--out", "x.jsonl"], ["--max-length"]),
    (["generate", "--n", "10", "--max-length", "8"], ["--out"]),
    (["frobnicate"], ["invalid choice"]),
])
def test_bad_arguments_give_one_line_and_status_2(tmp_path, args, needles):
    result = run(*args, cwd=tmp_path)
    assert_one_line_error(result, *needles)
    assert not (tmp_path / "x.jsonl").exists()
