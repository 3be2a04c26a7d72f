"""`dyckbook compact`: a run published before records shared their baselines is rewritten in
today's form, every value as it was, and its run.json says so."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml

from dyckbook.experiment import results as R
from dyckbook.experiment.evaluate import Score
from dyckbook.experiment.record import RunRecord
from dyckbook.pipeline import cli, compact, layout, runner

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _manifest(tmp_path: Path) -> Path:
    raw = yaml.safe_load((FIXTURES / "experiments.yml").read_text())
    for section in ("chapters", "notebooks"):
        for entry in raw[section].values():
            entry["path"] = str(FIXTURES / entry["path"])
    path = tmp_path / "m.yml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _record(seed: int, rule: float) -> RunRecord:
    score = Score(4, 3, {2: [4, 3]}, {"member": [4, 3]}, {1: [4, 3]})
    rule_score = Score(8, round(8 * rule), {30: [8, round(8 * rule)]}, {}, {})
    return RunRecord(config={"seed": seed, "data": {"k": 3}}, status="ok", failure=None,
                     train_accuracy=0.9, margin_std=0.1, scores={"stack": score},
                     baselines={"stack": {"cnn": rule_score, "window": rule_score}},
                     baseline_train={"cnn": 0.5}, data={"train": {"n": 4}}, steps=3,
                     stopped_at=None, seconds=0.1, n_params=10,
                     history=[{"step": 3, "train_loss": 0.5}], label=f"c{seed}")


def _publish_inline(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """The fixture run `alpha` published with records written the old way (inline)."""
    manifest, root = _manifest(tmp_path), tmp_path / "out"
    run = {r.name: r for r in runner.resolve_profile(runner.load_manifest(manifest), "smoke")
           }["alpha"]
    folder = runner._folder(run, root)
    lines = [json.dumps(R._plain(_record(s, rule).to_dict()), sort_keys=True)  # the old writer
             for s, rule in ((0, 0.5), (1, 0.5), (2, 0.75))]
    (folder / "sub").mkdir(parents=True)
    (folder / "records.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "sub" / "records.jsonl").write_text(lines[0] + "\n" + lines[1] + "\n")
    (folder / "metrics.json").write_text("{}")
    R.write_json(folder / "run.json", {"status": "ok", "files": runner.file_hashes(folder)})
    page = runner._page(run, root)
    page.parent.mkdir(parents=True)
    page.write_text("{}")
    return manifest, root, lines


def test_compact_keeps_every_value_and_records_what_it_did(tmp_path: Path) -> None:
    manifest, root, lines = _publish_inline(tmp_path)
    folder = root / "book" / "results" / "smoke" / "fixture_ok" / "alpha"
    before = {rel: (folder / rel).stat().st_size for rel in ("records.jsonl",
                                                            "sub/records.jsonl")}
    changed = compact.compact("smoke", None, manifest, root)
    assert set(changed) == {"alpha"}
    assert {rel: sizes[0] for rel, sizes in changed["alpha"].items()} == before
    # every record reads back exactly as written, from the compact file and its companion
    back = R.read_records(folder / "records.jsonl")
    assert [json.dumps(R._plain(r.to_dict()), sort_keys=True) for r in back] == lines
    assert len(R.baselines_path(folder / "records.jsonl").read_text().splitlines()) == 2
    assert R.read_records(folder / "sub" / "records.jsonl")[0].label == "c0"
    # run.json: the files as they now are, and what was done to them
    record = json.loads((folder / "run.json").read_text())
    assert record["files"] == runner.file_hashes(folder)
    [entry] = record["compacted"]
    assert entry["files"] == changed["alpha"] and "values unchanged" in entry["by"]
    # a second pass finds nothing to do
    assert compact.compact("smoke", None, manifest, root) == {}


def test_a_file_whose_blobs_never_repeat_is_left_inline(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(R._plain(_record(0, 0.5).to_dict()), sort_keys=True) + "\n")
    assert compact.compact_folder(tmp_path) == {}
    assert not R.baselines_path(path).exists()


def test_an_edited_publication_is_refused_by_name(tmp_path: Path, capsys) -> None:
    manifest, root, _ = _publish_inline(tmp_path)
    folder = root / "book" / "results" / "smoke" / "fixture_ok" / "alpha"
    (folder / "metrics.json").write_text('{"edited": 1}')
    with pytest.raises(ValueError, match="run 'alpha' of profile 'smoke' is edited"):
        compact.compact("smoke", ["alpha"], manifest, root)
    assert compact.compact("smoke", None, manifest, root) == {}  # skipped when not named
    assert json.loads((folder / "records.jsonl").read_text().splitlines()[0])["baselines"]


def test_the_command_line_reports_sizes(tmp_path: Path, capsys, monkeypatch) -> None:
    manifest, root, _ = _publish_inline(tmp_path)
    monkeypatch.setenv(R.ROOT_ENV, str(root))
    assert cli.main(["compact", "--profile", "smoke", "--manifest", str(manifest),
                     "--only", "alpha"]) == 0
    out = capsys.readouterr().out
    assert "alpha: records.jsonl" in out and "1 run(s) compacted" in out


def test_large_records_are_stored_compressed_and_read_back_exactly(tmp_path: Path,
                                                                   monkeypatch) -> None:
    manifest, root, lines = _publish_inline(tmp_path)
    folder = root / "book" / "results" / "smoke" / "fixture_ok" / "alpha"
    monkeypatch.setattr(layout, "GZIP_FROM", 1_500)  # compacted: the top file 1,920, sub 1,280
    changed = compact.compact("smoke", None, manifest, root)["alpha"]
    assert "records.jsonl -> .gz" in changed and "sub/records.jsonl -> .gz" not in changed
    assert not (folder / "records.jsonl").exists() and (folder / "sub" / "records.jsonl").exists()
    assert R.stored(folder / "records.jsonl") == folder / "records.jsonl.gz"
    back = R.read_records(folder / "records.jsonl")
    assert [json.dumps(R._plain(r.to_dict()), sort_keys=True) for r in back] == lines
    record = json.loads((folder / "run.json").read_text())
    assert record["files"] == runner.file_hashes(folder) and "gzip" in record["compacted"][0]["by"]
    run = {r.name: r for r in runner.resolve_profile(runner.load_manifest(manifest), "smoke")
           }["alpha"]
    assert runner.run_status(run, runner.run_inputs(run, [run], root), root) != "edited"
    # deterministic: the same bytes compress to the same file (no time stamp in it)
    again = tmp_path / "again"
    again.mkdir()
    (again / "records.jsonl").write_bytes(R.read_stored(folder / "records.jsonl"))
    layout.gzip_folder(again)
    assert (again / "records.jsonl.gz").read_bytes() == (folder / "records.jsonl.gz").read_bytes()


def test_appending_to_a_compressed_file_keeps_its_records(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    R.append_records(path, [_record(0, 0.5), _record(1, 0.25)])
    for p in (path, R.baselines_path(path)):
        p.with_name(p.name + ".gz").write_bytes(gzip.compress(p.read_bytes()))
        p.unlink()
    R.append_records(path, [_record(2, 0.75)])
    assert [r.label for r in R.read_records(path)] == ["c0", "c1", "c2"]
    assert not path.with_name("records.jsonl.gz").exists()  # one form, the plain one
    R.write_records(path, [_record(3, 0.5)])  # replacing drops the compressed companion too
    assert [r.label for r in R.read_records(path)] == ["c3"]
    assert not list(tmp_path.glob("*.gz")) and R.read_records(tmp_path / "none.jsonl") == []


def test_training_groups_read_plain_and_compressed_records_alike(tmp_path: Path) -> None:
    """What a run's models took to train, from its records, whichever form they are published
    in (bench_profile_cost found no groups in the four runs published compressed), keeping
    each group's time once (its seeds share it) and skipping the baselines' companion."""
    def lines(label: str, k: int, seconds: float, n: int) -> bytes:
        one = {"label": label, "config": {"data": {"k": k}}, "seconds": seconds, "steps": 50.0}
        return b"".join(json.dumps(one).encode() + b"\n" for _ in range(n))

    plain, packed = tmp_path / "plain", tmp_path / "packed"
    for folder in (plain, packed):
        folder.mkdir()
        (folder / "records.jsonl").write_bytes(lines("a", 1, 40.0, 5) + lines("a", 3, 60.0, 5))
        (folder / "records_extra.jsonl").write_bytes(lines("b", 3, 7.0, 2))
        (folder / "records.baselines.jsonl").write_bytes(b'{"digest": "x", "baselines": {}}\n')
    data = (packed / "records.jsonl").read_bytes()
    (packed / "records.jsonl.gz").write_bytes(gzip.compress(data))
    (packed / "records.jsonl").unlink()
    expected = {"records|a|k1": {"seconds": 40.0, "steps": 50.0},
                "records|a|k3": {"seconds": 60.0, "steps": 50.0},
                "records_extra|b|k3": {"seconds": 7.0, "steps": 50.0}}
    assert layout.training_groups(plain) == expected
    assert layout.training_groups(packed) == expected
    assert layout.training_groups(tmp_path / "none") == {}
    # a run's references keep their records in a subfolder: their training counts too, a
    # resume folder's (hidden) does not (beyond-lengths' page said 249.8 min, not 344.6)
    (plain / "references").mkdir()
    (plain / "references" / "records.jsonl").write_bytes(lines("LSTM", 3, 90.0, 5))
    (plain / ".attempt").mkdir()
    (plain / ".attempt" / "records.jsonl").write_bytes(lines("c", 3, 1000.0, 1))
    assert layout.training_groups(plain) == {**expected, "references/records|LSTM|k3": {
        "seconds": 90.0, "steps": 50.0}}
    # unlabelled records (the grid's cells) are grouped by their configuration, less the seed:
    # they collapsed into one group per k, and the grid's 72 cells counted as 2
    cells = tmp_path / "cells"
    cells.mkdir()
    rows = [{"label": "", "seconds": s, "steps": 40.0,
             "config": {"seed": seed, "data": {"k": 3}, "model": {"n_layers": n}}}
            for n, s in ((1, 10.0), (2, 30.0)) for seed in (0, 1)]
    (cells / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert sorted(g["seconds"] for g in layout.training_groups(cells).values()) == [10.0, 30.0]
    assert layout.training_seconds(cells, {"params": {"workers": 0},
                                           "machine": "AMD EPYC, 2 cores"}) == 20.0
    assert layout.training_seconds(cells, {}) == 40.0
