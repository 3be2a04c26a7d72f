"""A catalogue of bad input to the command line, each case run as a user runs it: in a process
of its own (``python -m dyckbook ...``).

Every case must end with its exit status (2 for bad input), exactly one line on stderr that
names the offending parameter or value (no traceback, no usage block), nothing on stdout, and
nothing changed on disk: the files of the working folder (a private file, a link to it, a
broken link, a folder, a pipe) keep their names, modes and bytes, and the output root
(``$DYCKBOOK_ROOT``) is not even created. The working folder is a stand-in repository (it holds
``notebooks/experiments.yml``), so the registry and the default manifest are its own, never
the checkout's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE = str(REPO / "tests" / "fixtures" / "experiments.yml")
MAN = ["--manifest", FIXTURE]
LONG = "a" * 300
GEN = ["generate", "--n", "10", "--max-length", "8"]  # the arguments of a valid generate
OUT = [*GEN, "--out", "x.jsonl"]


def _world(tmp: Path) -> None:
    """The files a failing command must leave as they are."""
    (tmp / "private.jsonl").write_text("secret\n")
    (tmp / "private.jsonl").chmod(0o600)
    (tmp / "link.jsonl").symlink_to("private.jsonl")
    (tmp / "broken.jsonl").symlink_to("nowhere/x.jsonl")
    (tmp / "folder").mkdir()
    (tmp / "folder" / "inside.txt").write_text("kept\n")
    (tmp / "linkdir").symlink_to("folder")
    (tmp / "afile").write_text("x")
    os.mkfifo(tmp / "fifo")
    (tmp / "notebooks").mkdir()  # the stand-in repository's default manifest: an old version
    (tmp / "notebooks" / "experiments.yml").write_text("version: 1\n")
    (tmp / "bad.yml").write_text("version: 2\nruns: {alpha: [unclosed\n")
    (tmp / "latin1.yml").write_bytes("version: 2  # caf\xe9\n".encode("latin-1"))
    (tmp / "v1.yml").write_text(Path(FIXTURE).read_text().replace("version: 2", "version: 1"))
    (tmp / "list.yml").write_text("- version: 2\n")
    (tmp / "empty.yml").write_text("")
    (tmp / "bare.yml").write_text("version: 2\n")
    # valid, and quick to load: a profile, but no notebook for papermill to inspect
    (tmp / "tiny.yml").write_text("version: 2\nprofiles:\n  cpu: {description: nothing}\n")


def _snapshot(tmp: Path) -> dict[str, tuple]:
    """Every entry under ``tmp`` (links not followed): its mode, and its bytes or target."""
    out = {}
    for folder, dirs, files in os.walk(tmp):
        for name in dirs + files:
            path = Path(folder, name)
            st = path.lstat()
            body = (os.readlink(path) if path.is_symlink() else
                    path.read_bytes() if path.is_file() else None)
            out[path.relative_to(tmp).as_posix()] = (st.st_mode, body)
    return out


# (arguments, the text the error line must hold); {tmp} is the working folder. Exit status 2.
CATALOGUE = [
    # ---------------------------------------------------------------- no command, global flags
    ([], "dyckbook: error: the following arguments are required: command"),
    (["-v"], "the following arguments are required: command"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["List"], "invalid choice: 'List'"),
    (["--frob", "list"], "unrecognized arguments: --frob"),
    (["-v", "-q", "list"], "argument -q/--quiet: not allowed with argument -v/--verbose"),
    (["-v", "list", "-q"], "argument -q/--quiet: not allowed with argument -v/--verbose"),
    (["-q", "check", "--verbose", "()"], "not allowed with argument -v/--verbose"),
    (["list", "-v", "-q"], "not allowed with argument"),
    (["--verbose=yes", "list"], "argument -v/--verbose: ignored explicit argument 'yes'"),
    ([*OUT, "--version"], "dyckbook generate: error: unrecognized arguments: --version"),
    # ---------------------------------------------------------------- generate: numbers
    ([*OUT, "--k", "0"], "--k must be in 1..8, got 0"),
    ([*OUT, "--k", "-1"], "--k must be in 1..8, got -1"),
    ([*OUT, "--k", "9"], "--k must be in 1..8, got 9"),
    ([*OUT, "--k", "two"], "--k must be an integer, got 'two'"),
    ([*OUT, "--k", "1.5"], "--k must be an integer, got '1.5'"),
    ([*OUT, "--k", ""], "--k must be an integer, got ''"),
    ([*OUT, "--k"], "argument --k: expected one argument"),
    (["generate", "--n", "0", "--max-length", "8", "--out", "x"], "--n must be in 1..1000000"),
    (["generate", "--n", "-3", "--max-length", "8", "--out", "x"], "got -3"),
    (["generate", "--n", "1000000000", "--max-length", "8", "--out", "x"], "got 1000000000"),
    (["generate", "--n", "abc", "--max-length", "8", "--out", "x"], "--n must be an integer"),
    (["generate", "--n", "11", "--max-length", "12", "--out", "x"], "--n must be even"),
    ([*GEN[:4], "40000", "--out", "x"], "--max-length must be in 0..10000, got 40000"),
    ([*GEN[:4], "1e8", "--out", "x"], "--max-length must be an integer, got '1e8'"),
    ([*GEN[:4], "-4", "--out", "x"], "--max-length must be in 0..10000, got -4"),
    ([*OUT, "--min-length", "9"], "--min-length 9 .. --max-length 8 holds no even length"),
    ([*GEN[:4], "3", "--min-length", "3", "--out", "x"], "--min-length 3 .. --max-length 3"),
    ([*OUT, "--min-length", "-2"], "--min-length must be in 0..10000, got -2"),
    (["generate", "--n", "10000", "--max-length", "4000", "--out", "x"],
     "--n 10000 x --max-length 4000 = 40,000,000 symbols exceeds the limit of 20,000,000"),
    ([*OUT, "--negatives", "nope"], "argument --negatives: invalid choice: 'nope'"),
    ([*GEN[:4], "4", "--out", "x"], ("Dyck-1 has no such non-member at lengths 0..4 with "
                                     "--window 4; the shortest length that has them is 10")),
    ([*OUT, "--negatives", "stack"], "--negatives stack: Dyck-1 has no such non-member"),
    ([*OUT, "--window", "1"], "--window must be >= 2, got 1"),
    ([*OUT, "--window", "four"], "--window must be an integer, got 'four'"),
    ([*OUT, "--k", "3", "--window", "16"], "--window 16: k=3 and width=16"),
    ([*OUT, "--window", "4", "--negatives", "random"], "--window applies to --negatives hard"),
    ([*OUT, "--seed", "-1"], "--seed must be in 0..9223372036854775807, got -1"),
    ([*OUT, "--seed", str(2**63)], f"got {2**63}"),
    ([*OUT, "--seed", "x"], "--seed must be an integer, got 'x'"),
    # ---------------------------------------------------------------- generate: what is missing
    (["generate"], "the following arguments are required: --n, --max-length, --out"),
    (GEN, "the following arguments are required: --out"),
    (["generate", "--max-length", "8", "--out", "x"], "the following arguments are required: --n"),
    ([*OUT, "--frob"], "dyckbook generate: error: unrecognized arguments: --frob"),
    ([*OUT, "extra"], "dyckbook generate: error: unrecognized arguments: extra"),
    # ---------------------------------------------------------------- generate: --out
    ([*GEN, "--out", ""], "--out must name a file, got ''"),
    ([*GEN, "--out", "   "], "--out must name a file, got '   '"),
    ([*GEN, "--out", "{tmp}"], "(a folder)"),
    ([*GEN, "--out", "folder"], "--out must name a file, got 'folder' (a folder)"),
    ([*GEN, "--out", "linkdir"], "--out must name a file, got 'linkdir' (a folder)"),
    ([*GEN, "--out", "sub/"], "--out must name a file, got 'sub/'"),
    ([*GEN, "--out", "fifo"], "--out 'fifo' is not a regular file"),
    ([*GEN, "--out", "/dev/null"], "--out '/dev/null' is not a regular file"),
    ([*GEN, "--out", "/dev/full"], "--out '/dev/full' is not a regular file"),
    (["generate", "--n", "10", "--max-length", "12", "--out", "broken.jsonl"],  # valid but for
     "--out 'broken.jsonl' is a broken symbolic link (to 'nowhere/x.jsonl')"),  # the link
    ([*GEN, "--out", "{tmp}/nofolder/x.jsonl"], "{tmp}/nofolder is not an existing folder"),
    ([*GEN, "--out", "afile/x.jsonl"], "afile is not an existing folder"),
    ([*GEN, "--out", "/proc/x.jsonl"], "--out '/proc/x.jsonl': cannot write there"),
    ([*GEN, "--out", f"{LONG}.jsonl"], "cannot write there (File name too long)"),
    # bad input next to an existing target: the private file and the link to it stay as they are
    (["generate", "--n", "11", "--max-length", "12", "--out", "private.jsonl"], "got 11"),
    (["generate", "--n", "10", "--max-length", "4", "--out", "link.jsonl"], "shortest length"),
    ([*GEN, "--out", "link.jsonl", "--k", "0"], "--k must be in 1..8"),
    # ---------------------------------------------------------------- check
    (["check"], "the following arguments are required: STRING"),
    (["check", "--k", "1"], "the following arguments are required: STRING"),
    (["check", "(x)"], "'x' (U+0078) at position 1, which is not in the alphabet '()'"),
    (["check", "--k", "2", "()", "(]", "<>"], "strings[2] has '<' (U+003C) at position 0"),
    (["check", "--k", "0", "()"], "--k must be in 1..8, got 0"),
    (["check", "--max-depth", "0", "()"], "--max-depth must be >= 1, got 0"),
    (["check", "--max-depth", "x", "()"], "--max-depth must be an integer, got 'x'"),
    (["check", "-()"], ("'-()' is not an option; a string that starts with '-' goes after --, "
                        "as in: dyckbook check -- '-()'")),
    (["check", "()", "-("], "dyckbook check -- '-('"),
    (["-v", "check", "--k", "2", "-[]"], "dyckbook check -- '-[]'"),
    (["check", "--frob", "()"], "'--frob' is not an option"),
    (["check", "--", "-()"], "strings[0] has '-' (U+002D) at position 0"),
    (["check", "-1"], "strings[0] has '-' (U+002D) at position 0"),
    # ---------------------------------------------------------------- list
    (["list"], "experiments.yml: version must be 2, got 1"),  # the working folder's manifest
    (["list", "--profile", "nope", *MAN], "'scaled', 'smoke'], got 'nope'"),
    (["list", "--profile"], "argument --profile: expected one argument"),
    (["list", "--manifest"], "argument --manifest: expected one argument"),
    (["list", "--manifest", "{tmp}/missing.yml"], "manifest not found: {tmp}/missing.yml"),
    (["list", "--manifest", "nofolder/x.yml"], "manifest not found: nofolder/x.yml"),
    (["list", "--manifest", "folder"], "manifest not found: folder (a folder)"),
    (["list", "--manifest", "fifo"], "--manifest 'fifo' is not a regular file"),
    (["list", "--manifest", "/dev/null"], "--manifest '/dev/null' is not a regular file"),
    (["list", "--manifest", ""], "--manifest '' is not a regular file"),
    (["list", "--manifest", "bad.yml"], "bad.yml is not valid YAML"),
    (["list", "--manifest", "latin1.yml"], "latin1.yml is not UTF-8 text (byte 0xe9"),
    (["list", "--manifest", "v1.yml"], "v1.yml: version must be 2, got 1"),
    (["list", "--manifest", "empty.yml"], "empty.yml: version must be 2, got None"),
    (["list", "--manifest", "list.yml"], "list.yml: the manifest must be a mapping, got list"),
    (["list", "--manifest", "bare.yml"], "bare.yml: profiles: the manifest defines none"),
    (["list", "smoke"], "dyckbook list: error: unrecognized arguments: smoke"),
    # ---------------------------------------------------------------- run
    (["run", "--manifest", "v1.yml"], "v1.yml: version must be 2, got 1"),
    (["run", "--manifest", "fifo"], "--manifest 'fifo' is not a regular file"),
    (["run", "--profile", "nope", "--manifest", "tiny.yml"], "profile must be one of ['cpu']"),
    (["run", "--only", "nope", "--manifest", "tiny.yml"], "--only 'nope' matches no run of"),
    (["run", "--only", *MAN], "argument --only: expected at least one argument"),
    (["run", "--jobs", "-1", *MAN], "--jobs must be in 0..512, got -1"),
    (["run", "--jobs", "100000", *MAN], "--jobs must be in 0..512, got 100000"),
    (["run", "--jobs", "many", *MAN], "--jobs must be an integer, got 'many'"),
    (["run", "--profile", "smoke", "--scheduler", "threads", *MAN], "got 'threads'"),
    (["run", "--profile", "smoke", "--scheduler", "tcp://nohost", *MAN],
     "scheduler must be 'processes', 'local' or 'tcp://HOST:PORT', got 'tcp://nohost'"),
    (["run", "--profile", "smoke", "--scheduler", "", *MAN], "scheduler must be"),
    (["run", "--force=yes", *MAN], "argument --force: ignored explicit argument 'yes'"),
    (["run", "-v", "-q", *MAN], "not allowed with argument"),
    # ---------------------------------------------------------------- register
    (["register", *MAN], "the following arguments are required: --note"),
    (["register", "--note", " ", *MAN], "note must say why the recipe is registered, got ' '"),
    (["register", "--note", "x", "--profile", "nope", "--manifest", "tiny.yml"],
     "profile must be one of ['cpu'], got 'nope'"),
    (["register", "--note", "x", "--manifest", "fifo"], "--manifest 'fifo' is not a regular"),
    (["register", "--note", "x", "--only", "a", *MAN], "unrecognized arguments: --only a"),
]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DYCKBOOK_ROOT": str(cwd / "out"), "DYCKBOOK_QUIET": "1",
           "PYTHONPATH": str(REPO)}  # this checkout, whatever the install points at
    return subprocess.run([sys.executable, "-m", "dyckbook", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("argv, needle", CATALOGUE, ids=[" ".join(a)[:50] for a, _ in CATALOGUE])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(argv: list[str], needle: str,
                                                          tmp_path: Path) -> None:
    _world(tmp_path)
    before = _snapshot(tmp_path)
    proc = _run([a.replace("{tmp}", str(tmp_path)) for a in argv], tmp_path)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("dyckbook"), proc.stderr
    assert needle.replace("{tmp}", str(tmp_path)) in lines[0]
    assert proc.stdout == ""
    assert _snapshot(tmp_path) == before  # nothing written, replaced or removed
    assert not (tmp_path / "out").exists()  # not even the output root


def test_the_catalogue_is_long_and_has_no_duplicates() -> None:
    assert len(CATALOGUE) >= 60
    assert len({tuple(argv) for argv, _ in CATALOGUE}) == len(CATALOGUE)


def test_the_fast_failures_load_neither_torch_nor_papermill(tmp_path: Path) -> None:
    """Bad arguments are refused before the heavy imports (a second, not ten)."""
    _world(tmp_path)
    code = ("import sys\nfrom dyckbook.pipeline.cli import main\n"
            "for argv in [a.split('|') for a in sys.argv[1:]]:\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('torch', 'papermill', 'dask') if m in sys.modules))")
    cases = ["generate|--n|10|--max-length|8|--out|folder", "generate|--n|4|--max-length|4|--out|x",
             "check|(x)", "check|-()", "run|--scheduler|threads", "run|--jobs|-1",
             "list|--manifest|fifo", "register|--note| "]
    proc = subprocess.run([sys.executable, "-c", code, *cases], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "DYCKBOOK_ROOT": str(tmp_path / "out")})
    assert proc.stdout.strip() == "[]", proc.stderr
    assert len(proc.stderr.splitlines()) == len(cases), proc.stderr
