"""The command line: what good input writes, and a catalogue of bad input (one line, exit 2)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from reference_checker import is_dyck

from dyckbook.__main__ import main

REPO = Path(__file__).resolve().parents[1]
FIXTURE_MANIFEST = REPO / "tests" / "fixtures" / "experiments.yml"


def call(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's errors
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def _tree(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


# ------------------------------------------------------------------------------ good input


def test_generate_writes_a_verified_balanced_dataset(tmp_path: Path, capsys) -> None:
    from dyckbook.results import read_dataset

    out = tmp_path / "d.jsonl"
    old = os.umask(0o022)
    try:
        code, stdout, err = call(["generate", "--k", "3", "--n", "300", "--min-length", "2",
                                  "--max-length", "16", "--seed", "5", "--out", str(out)], capsys)
    finally:
        os.umask(old)
    assert code == 0, err
    assert stdout.strip() == f"wrote 300 strings (150 members) to {out}"
    assert "lengths 2..6 have no hard negatives for Dyck-3: left out" in err
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    pairs = json.loads(out.read_text().splitlines()[0])["pairs"]
    assert len(rows) == 300 and sum(r["member"] for r in rows) == 150
    assert all(is_dyck(r["s"], pairs) == r["member"] for r in rows)  # an independent checker
    assert all(8 <= len(r["s"]) <= 16 and len(r["s"]) % 2 == 0 for r in rows)
    for length in {len(r["s"]) for r in rows}:  # as many members as non-members per length
        assert sum(r["member"] for r in rows if len(r["s"]) == length) * 2 == sum(
            len(r["s"]) == length for r in rows)
    assert {r["kind"] for r in rows if not r["member"]} <= {
        "dip", "rotation", "swap", "crossing", "deep_mismatch"}
    assert all(r["w_star"] > 4 and r["bin"] != "w<=4" for r in rows if not r["member"])
    assert all(r["bin"] == "member" and "w_star" not in r for r in rows if r["member"])
    assert len(read_dataset(out)) == 300  # the package's reader agrees with the labels
    first = out.read_bytes()
    assert call(["generate", "--k", "3", "--n", "300", "--min-length", "2", "--max-length", "16",
                 "--seed", "5", "--out", str(out)], capsys)[0] == 0
    assert out.read_bytes() == first  # same seed, same bytes
    assert _tree(tmp_path) == {"d.jsonl"}  # no temporary file left


def test_generate_random_negatives_and_the_module_entry_point(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    proc = subprocess.run([sys.executable, "-m", "dyckbook", "generate", "--n", "40",
                           "--max-length", "12", "--negatives", "random", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    kinds = {json.loads(line)["kind"] for line in out.read_text().splitlines()[1:]}
    assert kinds == {"member", "random"}


def test_generate_stack_sets(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.jsonl"
    code, _, err = call(["generate", "--k", "2", "--n", "200", "--min-length", "30",
                         "--max-length", "40", "--negatives", "stack", "--out", str(out)], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert {r["kind"] for r in rows} == {"member", "stack"}
    assert all(r["w_star"] > max(8, len(r["s"]) // 4) and not r["counter"]
               for r in rows if not r["member"])
    assert call(["generate", "--n", "20", "--max-length", "20", "--negatives", "stack",
                 "--out", str(out)], capsys)[2].strip().endswith(
        "Dyck-1 has no such non-member at lengths 0..20; the shortest length that has them is 30")


def test_check_prints_a_verdict_per_string(capsys) -> None:
    code, out, _ = call(["check", "--k", "2", "()", "([])", ""], capsys)
    assert code == 0 and out.count("not a member") == 0 and out.count("member") == 3
    code, out, _ = call(["check", "--k", "2", "()", "([)]"], capsys)
    assert code == 1 and "not a member\t'([)]'" in out
    assert call(["check", "--max-depth", "1", "(())"], capsys)[0] == 1


def test_list_shows_each_run_status_and_parameters(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("DYCKBOOK_ROOT", str(tmp_path))
    code, out, _ = call(["list", "--profile", "scaled", "--manifest", str(FIXTURE_MANIFEST)],
                        capsys)
    assert code == 0
    lines = out.splitlines()
    assert [line.split()[:2] for line in lines[1:-1:2]] == [
        ["chapter", "missing"], ["alpha", "missing"], ["beta", "missing"], ["summary", "missing"]]
    assert "scale=7.0" in lines[6] and "seed=2" in lines[6]
    assert lines[-1] == "profile scaled: 4 missing"
    assert _tree(tmp_path) == set()  # listing writes nothing


# ------------------------------------------------------------------------------ bad input

LONG = "a" * 300


def _bad_manifests(tmp: Path) -> None:
    (tmp / "bad.yml").write_text("version: 2\nruns: {alpha: [unclosed\n")
    (tmp / "latin1.yml").write_bytes("version: 2  # caf\xe9\n".encode("latin-1"))
    (tmp / "v1.yml").write_text(FIXTURE_MANIFEST.read_text().replace("version: 2", "version: 1"))
    (tmp / "afile").write_text("x")


GEN = ["generate", "--n", "10", "--max-length", "8"]
K = ["generate", "--n", "10", "--max-length", "8", "--out", "x", "--k"]
MAN = ["--manifest", str(FIXTURE_MANIFEST)]
CATALOGUE = [
    ([*K, "0"], "--k must be in 1..8, got 0"),
    ([*K, "-1"], "got -1"),
    ([*K, "9"], "got 9"),
    ([*K, "two"], "--k must be an integer, got 'two'"),
    ([*K, "1.5"], "got '1.5'"),
    (["generate", "--n", "0", "--max-length", "8", "--out", "x"], "--n must be in 1..1000000"),
    (["generate", "--n", "-3", "--max-length", "8", "--out", "x"], "got -3"),
    (["generate", "--n", "1000000000", "--max-length", "8", "--out", "x"], "got 1000000000"),
    (["generate", "--n", "abc", "--max-length", "8", "--out", "x"], "'abc'"),
    ([*GEN[:4], "40000", "--out", "x"], "--max-length must be in 0..10000, got 40000"),
    ([*GEN[:4], "100000", "--out", "x"], "got 100000"),
    ([*GEN[:4], "1e8", "--out", "x"], "--max-length must be an integer, got '1e8'"),
    ([*GEN[:4], "-4", "--out", "x"], "got -4"),
    ([*GEN, "--min-length", "9", "--out", "x"], "--min-length 9 .. --max-length 8 holds no even"),
    ([*GEN[:4], "3", "--min-length", "3", "--out", "x"], "holds no even length"),
    (["generate", "--n", "10000", "--max-length", "4000", "--out", "x"],
     "exceeds the limit of 20,000,000"),
    ([*GEN, "--negatives", "nope", "--out", "x"], "invalid choice: 'nope'"),
    ([*GEN[:4], "4", "--out", "x"], ("Dyck-1 has no such non-member at lengths 0..4 with "
                                     "--window 4; the shortest length that has them is 10")),
    (["generate", "--n", "11", "--max-length", "12", "--out", "x"], "--n must be even"),
    ([*GEN, "--window", "1", "--out", "x"], "--window must be >= 2, got 1"),
    ([*GEN, "--k", "3", "--window", "16", "--out", "x"], "--window 16: k=3 and width=16"),
    ([*GEN, "--window", "4", "--negatives", "random", "--out", "x"], "applies to --negatives hard"),
    ([*GEN, "--seed", "-1", "--out", "x"], "--seed must be in 0.."),
    ([*GEN, "--seed", "x", "--out", "x"], "--seed must be an integer"),
    (GEN, "the following arguments are required: --out"),
    (["generate", "--max-length", "8", "--out", "x"], "required: --n"),
    ([*GEN, "--out", ""], "--out must name a file, got ''"),
    ([*GEN, "--out", "{tmp}"], "(a folder)"),
    ([*GEN, "--out", "sub/"], "--out must name a file, got 'sub/'"),
    ([*GEN, "--out", "/dev/null"], "'/dev/null' is not a regular file"),
    ([*GEN, "--out", "/dev/full"], "'/dev/full' is not a regular file"),
    ([*GEN, "--out", "{tmp}/nofolder/x.jsonl"], "nofolder is not an existing folder"),
    ([*GEN, "--out", "{tmp}/afile/x.jsonl"], "afile is not an existing folder"),
    ([*GEN, "--out", "/proc/x.jsonl"], "cannot write there"),
    ([*GEN, "--out", f"{{tmp}}/{LONG}.jsonl"], "cannot write there (File name too long)"),
    ([*GEN, "--out", "x", "--frob"], "unrecognized arguments: --frob"),
    (["check", "(x)"], "'x' (U+0078) at position 1, which is not in the alphabet '()'"),
    (["check", "--k", "0", "()"], "--k must be in 1..8, got 0"),
    (["check", "--k", "1"], "required: STRING"),
    (["check", "--max-depth", "0", "()"], "--max-depth must be >= 1, got 0"),
    (["check", "--max-depth", "x", "()"], "--max-depth must be an integer"),
    (["list", "--profile", "nope", *MAN], "profile must be one of"),
    (["list", "--manifest", "{tmp}/missing.yml"], "manifest not found"),
    (["list", "--manifest", "{tmp}"], "(a folder)"),
    (["list", "--manifest", "{tmp}/bad.yml"], "bad.yml is not valid YAML"),
    (["list", "--manifest", "{tmp}/latin1.yml"], "latin1.yml is not UTF-8 text (byte 0xe9"),
    (["run", "--manifest", "{tmp}/v1.yml"], "v1.yml: version must be 2, got 1"),
    (["run", "--profile", "smoke", "--only", "nope", *MAN], "'nope' matches no run"),
    (["run", "--jobs", "-1", *MAN], "--jobs must be in 0..512"),
    (["run", "--jobs", "100000", *MAN], "got 100000"),
    (["run", "--profile", "smoke", "--scheduler", "threads", *MAN], "scheduler must be"),
    (["run", "--profile", "smoke", "--scheduler", "tcp://nohost", *MAN], "'tcp://nohost'"),
    (["run", "-v", "-q", *MAN], "not allowed with argument"),
    ([], "the following arguments are required: command"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
]


@pytest.mark.parametrize("argv, needle", CATALOGUE, ids=[" ".join(a)[:60] for a, _ in CATALOGUE])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(argv: list[str], needle: str,
                                                         tmp_path: Path, capsys,
                                                         monkeypatch) -> None:
    _bad_manifests(tmp_path)
    before = _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DYCKBOOK_ROOT", str(tmp_path / "out"))
    code, out, err = call([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys)
    assert code == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dyckbook"), err
    assert needle.replace("{tmp}", str(tmp_path)) in lines[0]
    assert "Traceback" not in err and out == ""
    assert _tree(tmp_path) == before  # nothing written, not even the output root


def test_the_catalogue_is_long_enough() -> None:
    assert len(CATALOGUE) >= 40


def test_register_reports_what_is_registered_and_rejects_bad_input(capsys) -> None:
    from dyckbook import registry

    before = registry.registry_path().read_text()
    code, out, _ = call(["register", "--profile", "cpu", "--note", "nothing changed"], capsys)
    assert code == 0 and "already registered" in out
    assert registry.registry_path().read_text() == before  # nothing appended
    code, _, err = call(["register", "--profile", "nope", "--note", "x"], capsys)
    assert code == 2 and "profile must be one of" in err
    code, _, err = call(["register", "--profile", "cpu", "--note", "  "], capsys)
    assert code == 2 and "note must say why" in err


def test_version(capsys) -> None:
    from importlib.metadata import version

    code, out, _ = call(["--version"], capsys)
    assert code == 0 and out.strip() == f"dyckbook {version('dyckbook')}"


def test_generate_to_standard_output(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = call(["generate", "--k", "2", "--n", "6", "--max-length", "8",
                           "--out", "-"], capsys)
    lines = out.splitlines()
    assert code == 0 and len(lines) == 7 and json.loads(lines[0])["n"] == 6
    assert "to standard output" in err and not (tmp_path / "-").exists()
