"""The command line: what good input writes, and a catalogue of bad input (one line, exit 2)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from reference_checker import is_dyck

from dyckbook.pipeline.cli import main

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
    from dyckbook.experiment.results import read_dataset

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
    assert all(r["w_star"] > max(8, -(-len(r["s"]) // 3)) and not r["counter"]
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


def test_list_names_what_a_publication_read(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("DYCKBOOK_ROOT", str(tmp_path))
    folder = tmp_path / "book/results/scaled/fixture_summary/summary"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(
        {"status": "ok", "inputs": {"alpha": "x", "file:benchmarks/results/b.json": "y"}}))
    code, out, _ = call(["list", "--profile", "scaled", "--manifest", str(FIXTURE_MANIFEST)],
                        capsys)
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("summary"))
    assert lines[at + 1] == "    read alpha, benchmarks/results/b.json"
    assert not any(line.startswith("    read") for line in lines[:at])
    # with its page in place the publication is stale, and list says why
    page = tmp_path / "book/runs/scaled/fixture_summary/summary.ipynb"
    page.parent.mkdir(parents=True)
    page.write_text("{}")
    code, out, _ = call(["list", "--profile", "scaled", "--manifest", str(FIXTURE_MANIFEST)],
                        capsys)
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("summary"))
    assert lines[at].split()[1] == "stale"
    assert lines[at + 1].startswith("    stale: the results version changed (None -> ")
    assert "it no longer reads benchmarks/results/b.json" in " ".join(
        " ".join(lines[at + 1:at + 5]).split())  # wrapped at 100 columns


def test_list_shows_compute_beside_republish_with_commit_machine_and_registration(
        tmp_path: Path, capsys, monkeypatch) -> None:
    """Issue 65 items 4 and 8: a run republished from its records in seconds shows what its
    models' training took, and every run its commit, machine and registration."""
    monkeypatch.setenv("DYCKBOOK_ROOT", str(tmp_path))
    folder = tmp_path / "book/results/scaled/fixture_summary/summary"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(
        {"status": "ok", "duration_s": 7.3, "longest_s": 3996.0, "commit": "b93c136c2574",
         "machine": "Intel Xeon, 2 cores", "finished": "2026-12-07T12:36:31+00:00"}))
    code, out, _ = call(["list", "--profile", "scaled", "--manifest", str(FIXTURE_MANIFEST)],
                        capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["run", "status", "republish", "compute",
                                              "finished", "commit", "judged", "notebook",
                                              "machine"]
    row = next(line for line in lines if line.startswith("summary"))
    assert "7.3 s" in row and "66.6 min" in row and "2026-12-07 12:36" in row
    assert "b93c136c2574" in row and row.endswith("Intel Xeon, 2 cores")
    assert row.index("7.3 s") < row.index("66.6 min")  # republish, then compute


# ------------------------------------------------------------------------------ -v, -q, logging
# (the catalogue of bad input, each case in a process of its own: tests/test_cli_catalogue.py)


@pytest.fixture(autouse=True)
def _restore_logging(monkeypatch) -> Iterator[None]:
    """main() sets the level of the 'dyckbook' logger and, with -q, DYCKBOOK_QUIET: undo both."""
    import logging

    logger = logging.getLogger("dyckbook")
    level = logger.level
    monkeypatch.setenv("DYCKBOOK_QUIET", os.environ.get("DYCKBOOK_QUIET", ""))
    yield
    logger.setLevel(level)


def test_verbose_and_quiet_go_before_or_after_the_command(tmp_path: Path, capsys,
                                                          monkeypatch) -> None:
    monkeypatch.setenv("DYCKBOOK_ROOT", str(tmp_path))
    argv = ["list", "--profile", "smoke", "--manifest", str(FIXTURE_MANIFEST)]
    plain, first, last, long, quiet = (call(a, capsys) for a in (
        argv, ["-v", *argv], [*argv, "-v"], ["--verbose", *argv], [*argv, "--quiet"]))
    assert {r[0] for r in (plain, first, last, long, quiet)} == {0}
    assert plain[1] == first[1] == last[1] == quiet[1]  # the same table on stdout
    roots = f"manifest {FIXTURE_MANIFEST}; output root {tmp_path} (from $DYCKBOOK_ROOT)"
    assert plain[2].splitlines() == [roots]  # one line: the repository and the output root
    assert quiet[2] == ""
    for err in (first[2], last[2], long[2]):
        lines = err.splitlines()
        assert roots in lines and f"debug: dyckbook.cli: manifest {FIXTURE_MANIFEST}" in lines
        assert all(line.startswith("debug: dyckbook.") for line in lines if line != roots)
    assert _tree(tmp_path) == set()


def test_verbose_generate_says_what_it_writes(tmp_path: Path, capsys) -> None:
    out = tmp_path / "d.jsonl"
    argv = ["generate", "--k", "2", "--n", "8", "--max-length", "12", "--out", str(out)]
    code, _, err = call(["-v", *argv], capsys)
    assert code == 0, err
    assert f"debug: dyckbook.cli: --out {out}: a new file in {tmp_path}" in err
    assert "debug: dyckbook.cli: Dyck-2, 8 strings, lengths 0..12, hard negatives (window 4)" in err
    assert "drew 8 strings at " in err and "left out" in err  # debug and info lines
    code, _, err = call([*argv, "-v"], capsys)
    assert code == 0 and f"--out {out}: replaces {out}, keeping its permissions" in err
    code, _, err = call(["-q", *argv], capsys)
    assert code == 0 and err == ""  # warnings and errors only
    code, _, err = call(argv, capsys)
    assert code == 0 and "debug" not in err and "left out" in err


def test_the_constants_the_parser_copies_match_their_modules() -> None:
    """The parser repeats them so that bad arguments fail before numpy is imported."""
    from dyckbook.data.protocol import REGIMES as PROTOCOL_REGIMES
    from dyckbook.data.vocab import DEFAULT_PAIRS
    from dyckbook.pipeline.cli import MAX_K, REGIMES

    assert MAX_K == len(DEFAULT_PAIRS) and REGIMES == PROTOCOL_REGIMES


def test_generate_writes_through_a_link_and_keeps_a_private_file_private(tmp_path: Path,
                                                                         capsys) -> None:
    private = tmp_path / "private.jsonl"
    private.write_text("old\n")
    private.chmod(0o600)
    (tmp_path / "link.jsonl").symlink_to("private.jsonl")
    code, _, err = call(["generate", "--n", "10", "--max-length", "12", "--out",
                         str(tmp_path / "link.jsonl")], capsys)
    assert code == 0, err
    assert (tmp_path / "link.jsonl").is_symlink() and stat.S_IMODE(private.stat().st_mode) == 0o600
    assert len(private.read_text().splitlines()) == 11 and _tree(tmp_path) == {
        "private.jsonl", "link.jsonl"}


def test_register_reports_what_is_registered_and_rejects_bad_input(capsys, tmp_path,
                                                                   monkeypatch) -> None:
    from dyckbook.claims import registry

    copy = tmp_path / "registrations.yml"  # a failing run must not append to the real one
    copy.write_text(registry.registry_path().read_text())
    monkeypatch.setattr(registry, "registry_path", lambda: copy)
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


def test_train_lengths_writes_07s_parameters_and_resumes_its_records(tmp_path: Path,
                                                                     capsys) -> None:
    """What a GPU machine runs for 07 (README): the parameters written where the notebook
    packages are, then records trained from them, which a second call resumes."""
    from dyckbook.pipeline import runner

    params = tmp_path / "params.json"
    code, out, _ = call(["train-lengths", "--profile", "smoke", "--write-params", str(params)],
                        capsys)
    expected = next(r for r in runner.resolve_profile(runner.load_manifest(), "smoke")
                    if r.name == "generalisation").params
    assert code == 0 and json.loads(params.read_text()) == dict(expected)
    small = {**expected, "ks": "1", "configs": "causal-rope-end", "depth_configs": "lstm",
             "n_seeds": 1, "n_train": 120, "n_test": 40, "max_steps": 4, "test_max_length": 32}
    params.write_text(json.dumps(small))
    argv = ["-q", "train-lengths", "--params", str(params), "--out", str(tmp_path / "r")]
    code, out, _ = call(argv, capsys)
    lines = (tmp_path / "r" / "records.jsonl").read_text().splitlines()
    assert code == 0 and "2 records in" in out and len(lines) == 2
    assert {json.loads(line)["label"] for line in lines} == {"Dyck-1 causal-rope-end",
                                                             "depth lstm"}
    code, out, _ = call(argv, capsys)
    assert code == 0 and "resumed 2 of 2" in out
    assert (tmp_path / "r" / "records.jsonl").read_text().splitlines() == lines


def test_profile_has_help_naming_the_manifests_profiles_and_verbose_says_what_it_reads(
        capsys) -> None:
    """Issue 54: --profile had no help text (no default, no choices shown); -v promised what is
    read, written and skipped and `list -v` printed one line."""
    import yaml

    from dyckbook.pipeline import cli

    root = Path(__file__).resolve().parents[1]
    manifest = yaml.safe_load((root / "notebooks" / "experiments.yml").read_text())
    assert cli.PROFILES.split("|") == list(manifest["profiles"])
    for command, default in (("list", "cpu"), ("run", "cpu"), ("pages", "cpu"),
                             ("register", "cpu"), ("train-lengths", "thesis")):
        text = " ".join(cli.build_parser().commands[command].format_help().split())
        assert f"--profile PROFILE a profile of the manifest ({cli.PROFILES}; default: " \
            f"{default})" in text, command
    code, out, err = call(["-v", "list", "--profile", "smoke"], capsys)
    lines = out.splitlines()
    rows = lines[next(i for i, line in enumerate(lines) if line.startswith("run ")) + 1:-1]
    runs = [line.split()[0] for line in rows if not line.startswith(" ")]
    read = [line for line in err.splitlines() if line.endswith("/run.json")]
    assert code == 0 and len(read) == len(runs) > 1 and all(
        f"debug: dyckbook.cli: {name}: " in line for name, line in zip(runs, read))


def test_train_lengths_checks_out_and_params_before_anything_trains(tmp_path: Path, capsys,
                                                                    monkeypatch) -> None:
    """Issue 54: --out naming a file failed only once a configuration had trained (and threw
    the training away); a --params file that is not JSON said only "Expecting value"."""
    from dyckbook.chapters import generalisation

    def trains(*args, **kwargs):
        raise AssertionError("trained before the arguments were checked")

    monkeypatch.setattr(generalisation, "run_records", trains)
    params = tmp_path / "params.json"
    assert call(["train-lengths", "--profile", "smoke", "--write-params", str(params)],
                capsys)[0] == 0
    taken = tmp_path / "taken"
    taken.write_text("a file")
    code, _, err = call(["train-lengths", "--params", str(params), "--out", str(taken)], capsys)
    assert code == 2 and f"--out must name a folder (records.jsonl is written into it), got " \
        f"'{taken}', which is a file" in err and len(err.strip().splitlines()) == 1
    code, _, err = call(["train-lengths", "--params", str(params), "--out",
                         str(taken / "below")], capsys)
    assert code == 2 and "records.jsonl cannot be written there" in err
    bad = tmp_path / "bad.json"
    bad.write_text("not json\n")
    code, _, err = call(["train-lengths", "--params", str(bad), "--out", str(tmp_path / "r")],
                        capsys)
    assert code == 2 and f"--params {bad} is not a JSON file of parameters" in err
    assert "line 1 column 1" in err and len(err.strip().splitlines()) == 1
    code, _, err = call(["train-lengths", "--params", str(tmp_path / "none.json"), "--out",
                         str(tmp_path / "r")], capsys)
    assert code == 2 and f"--params {tmp_path / 'none.json'}: no such file" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("extra, says", [
    (["--run", "ood"], "--run must name a run of 07_generalisation in profile smoke, got 'ood'"),
    ([], "--out must name the folder of records.jsonl"),
    (["--out", "x", "--device", "gpu0"], "device must be a torch.device or its name"),
])
def test_train_lengths_rejects_bad_input_naming_it(extra, says, capsys) -> None:
    code, _, err = call(["train-lengths", "--profile", "smoke", *extra], capsys)
    assert code == 2 and says in err
