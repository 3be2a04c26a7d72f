"""`dyckbook verify`: a published run recomputed in a scratch folder, compared number by number."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from dyckbook.experiment import results as R
from dyckbook.pipeline import cli, manifest
from dyckbook.pipeline.verify import (
    Report,
    Tolerance,
    compare_files,
    compare_text,
    compare_values,
    glued_texts,
    published_files,
    verify,
)

ROOT = R.repo_root()
EXACT = Tolerance()


def report_of(a, b, tol: Tolerance = EXACT) -> Report:
    report = Report("r")
    compare_values(a, b, "x", tol, report)
    return report


def test_equal_values_are_counted_once_each() -> None:
    report = report_of({"a": 1, "b": [0.5, "s", None], "c": {"d": math.nan}},
                       {"a": 1, "b": [0.5, "s", None], "c": {"d": math.nan}})
    assert (report.equal, report.differences, report.ok) == (5, [], True)


@pytest.mark.parametrize(("tol", "verdict"), [(EXACT, "different"), (Tolerance(abs=0.01), "within"),
                                              (Tolerance(rel=0.001), "within"),
                                              (Tolerance(rel=1e-5), "different")])
def test_a_number_is_within_the_declared_tolerance_or_different(tol, verdict) -> None:
    report = report_of({"acc": 0.9731}, {"acc": 0.9736}, tol)
    (d,) = report.differences
    assert (d.where, d.published, d.recomputed, d.verdict) == ("x.acc", 0.9731, 0.9736, verdict)
    assert report.ok is (verdict == "within")


def test_shapes_keys_and_types_that_differ_are_different() -> None:
    report = report_of({"a": [1, 2], "b": 1, "c": "x", "d": True},
                       {"a": [1, 2, 3], "e": 1, "c": "y", "d": 1}, Tolerance(abs=10))
    assert sorted(d.where for d in report.different) == [
        "x.a (length)", "x.b", "x.c", "x.d", "x.e"]  # True is no number: not within abs=10


def test_keys_that_time_or_place_a_run_and_declared_names_are_ignored() -> None:
    report = report_of({"seconds": 1, "duration_s": 2, "host": "a", "loss": 0.1, "extra": 1},
                       {"seconds": 9, "duration_s": 3, "host": "b", "loss": 0.1, "extra": 2},
                       Tolerance(ignore=("ext*",)))
    assert (report.equal, report.ignored, report.ok) == (1, 4, True)


def test_text_is_compared_word_for_word_and_number_by_number() -> None:
    report = Report("r")
    compare_text("accuracy 97.5% on 1,000 strings", "accuracy 97.6% on 1,000 strings", "t",
                 Tolerance(abs=0.5), report)
    assert [d.verdict for d in report.differences] == ["within"] and report.equal == 2
    report = Report("r")
    compare_text("accuracy 97.5%", "error 97.5%", "t", Tolerance(abs=10), report)
    assert [d.verdict for d in report.different] == ["different"]
    report = Report("r")
    compare_text("took 9 s", "took 10 s", "t", EXACT, report)
    assert [(d.where, d.verdict) for d in report.differences] == [("t number 1", "different")]


def test_files_json_lines_and_figures() -> None:
    published = {"a.json": b'{"x": 1}', "r.jsonl": b'{"y": 1}\n{"y": 2}\n', "f.png": b"png1",
                 "m.pt": b"w", "gone.json": b"{}"}
    recomputed = {"a.json": b'{"x": 1}', "r.jsonl": b'{"y": 1}\n{"y": 3}\n', "f.png": b"png2",
                  "m.pt": b"w", "new.txt": b""}
    report = Report("r")
    compare_files(published, recomputed, EXACT, report)
    assert sorted(d.where for d in report.different) == ["gone.json", "new.txt", "r.jsonl[1].y"]
    assert report.figures == {"f.png": "different"}  # reported; the numbers decide
    assert report.equal == 3  # a.json's x, r.jsonl's first y, m.pt's bytes


def test_records_are_compared_with_their_baselines_put_back(tmp_path: Path) -> None:
    """A baseline that moved within the tolerance changes its digest in the records file but
    reads as equal; one that moved beyond it is named at its place in the record."""
    def written(rule_accuracy: float) -> dict[str, bytes]:
        folder = tmp_path / str(rule_accuracy)
        R.append_records(folder / "records.jsonl", [{"seed": 0, "baselines": {
            "stack": {"cnn": rule_accuracy}}}])
        return {p.name: p.read_bytes() for p in folder.iterdir()}

    published, close, far = written(0.5), written(0.5000001), written(0.6)
    assert set(published) == {"records.jsonl", "records.baselines.jsonl"}
    assert published["records.jsonl"] != close["records.jsonl"]  # the digest moved
    report = Report("r")
    compare_files(published, close, Tolerance(abs=1e-3), report)
    assert report.ok and report.equal == 1 and [d.verdict for d in report.differences] == [
        "within"]  # the seed equal, the rule within: the digest is no number
    report = Report("r")
    compare_files(published, far, Tolerance(abs=1e-3), report)
    assert [d.where for d in report.different] == ["records.jsonl[0].baselines.stack.cnn"]


def test_glued_texts_are_read_and_images_left_out() -> None:
    nb = {"cells": [{"outputs": [
        {"metadata": {"scrapbook": {"name": "s", "mime_prefix": "application/papermill.record/"}},
         "data": {"application/papermill.record/text/markdown": "It ran 5 steps.",
                  "application/papermill.record/text/plain": "<Markdown>"}},
        {"metadata": {"scrapbook": {"name": "t", "mime_prefix": ""}},
         "data": {"text/markdown": ["| a |\n", "| 1 |"]}},
        {"metadata": {"scrapbook": {"name": "fig", "mime_prefix": ""}},
         "data": {"image/png": "...", "text/plain": "<Image>"}},
        {"metadata": {}, "data": {"text/plain": "not glued"}}]}]}
    assert glued_texts(nb) == {"s": "It ran 5 steps.", "t": "| a |\n| 1 |"}


@pytest.mark.parametrize(("value", "message"), [
    ({"abs": -1}, "tolerance.abs must be a number >= 0, got -1"),
    ({"rel": "1"}, "tolerance.rel must be a number >= 0, got '1'"),
    ({"ignore": "x"}, "tolerance.ignore must be a list"),
    ({"slack": 1}, "unknown keys ['slack']"),
])
def test_a_bad_tolerance_in_the_manifest_is_named(value, message) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        manifest._tolerance(value, "notebooks.x.tolerance")


def _tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(folder).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


def test_verify_reproduces_a_committed_training_run(tmp_path: Path, monkeypatch) -> None:
    """Issue 51: CI recomputes the cpu profile's `models_training` (it trains a classifier) and
    finds its numbers within the tolerance its notebook declares, without touching the
    published tree."""
    monkeypatch.setenv("DYCKBOOK_RUN_CACHE", str(tmp_path / "never read"))  # emptied for it
    published = [ROOT / "book/results/cpu/chapters/models_training",
                 ROOT / "book/runs/cpu/chapters/models_training.ipynb"]
    before = [_tree_digest(published[0]), published[1].read_bytes()]
    (report,) = verify("cpu", ["models_training"], tmp_path / "out")
    assert report.ok, [vars(d) for d in report.different]
    assert report.equal >= 50 and report.ignored >= 1  # the run's time is not compared
    saved = json.loads((tmp_path / "out/models_training/report.json").read_text())
    assert saved["ok"] and saved["equal"] == report.equal
    assert (tmp_path / "out/models_training/files/fig_training_curves.png").is_file()
    assert [_tree_digest(published[0]), published[1].read_bytes()] == before
    assert not (tmp_path / "never read").exists()


def test_the_command_line_names_a_run_that_is_not_there(capsys) -> None:
    assert cli.main(["verify", "--profile", "cpu", "--only", "no-such-run"]) == 2
    assert "--only 'no-such-run' matches no run of profile 'cpu'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["verify", "--profile", "cpu"])  # --only is required


def test_a_compressed_records_file_is_compared_as_its_json(tmp_path: Path) -> None:
    import gzip

    text = b'{"loss": 0.5, "label": "a"}\n'
    (tmp_path / "sub").mkdir()
    (tmp_path / "records.jsonl.gz").write_bytes(gzip.compress(text))
    (tmp_path / "sub" / "fig.png").write_bytes(b"png")
    (tmp_path / "run.json").write_text("{}")
    published = published_files(tmp_path, {"run.json"})
    assert published == {"records.jsonl": text, "sub/fig.png": b"png"}
    report = report_of(published, {"records.jsonl": text, "sub/fig.png": b"png"})
    assert report.ok and report.equal == 2  # the loss and the label
    assert not report_of(published, {"records.jsonl": text.replace(b"0.5", b"0.6"),
                                      "sub/fig.png": b"png"}).ok


def test_out_is_checked_before_any_recomputation(tmp_path, monkeypatch):
    """Issue 65 item 1 and 7: ``--out`` inside the published tree, empty, a file or an
    unwritable folder is refused at once, naming ``--out``; a fresh folder is fine."""
    from dyckbook.pipeline.verify import check_out

    root = tmp_path / "repo"
    (root / "book" / "results" / "cpu" / "90_summary" / "summary").mkdir(parents=True)
    monkeypatch.chdir(root)
    for bad in ("book/results/cpu/90_summary/summary", "book/runs/cpu", "book/pages",
                str(root / "book" / "results")):
        with pytest.raises(ValueError, match="--out must lie outside the published tree"):
            check_out(bad, root, "cpu")
    with pytest.raises(ValueError, match="--out must name a folder, got ''"):
        check_out("", root, "cpu")
    (root / "a_file").write_text("x")
    with pytest.raises(ValueError, match="--out must name a folder, got 'a_file' \\(a file\\)"):
        check_out("a_file", root, "cpu")
    with pytest.raises(ValueError, match="--out 'a_file/below' cannot be written"):
        check_out("a_file/below", root, "cpu")
    assert check_out("elsewhere/new", root, "cpu") == root / "elsewhere" / "new"
    assert check_out(None, root, "cpu") == root / "scratch" / "verify" / "cpu"


def test_verify_says_at_its_start_what_the_recompute_will_cost(tmp_path) -> None:
    """Issue 65 item 4: a run republished from its records in seconds is recomputed from
    nothing; verify says what its models' training took, not its last run's seconds."""
    from dyckbook.pipeline.verify import cost_sentence

    record = {"duration_s": 7.3, "longest_s": 3996.0, "machine": "Intel Xeon, 2 cores",
              "finished": "2026-12-07T12:36:31+00:00", "commit": "b93c136c2574"}
    said = cost_sentence("generalisation", record, tmp_path, 1, 2, here=16)
    assert said == ("verify: recomputing generalisation (1 of 2) from nothing, the run cache "
                    "off: its models' training took 66.6 min on Intel Xeon, 2 cores (its last "
                    "run, 7.3 s, resumed); this machine has 16 cores")
    assert "its training time is not recorded" in cost_sentence("x", {}, None, here=2)
