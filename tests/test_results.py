"""Tests for results: safe atomic writes, JSON, run records, datasets and model files."""

import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from dyckbook.data.dataset import Dataset
from dyckbook.data.languages import Dyck
from dyckbook.experiment import checkpoint, results
from dyckbook.experiment.evaluate import Score
from dyckbook.experiment.record import RunRecord
from dyckbook.nn.model import Classifier, ModelConfig
from dyckbook.nn.recurrent import RecurrentClassifier, RecurrentConfig
from dyckbook.nn.thesis_model import ThesisClassifier, ThesisModelConfig
from dyckbook.pipeline import layout


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_write_bytes_refuses_what_is_not_a_regular_file(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(ValueError, match=f"refusing to replace {folder}"):
        results.write_bytes(folder, b"x")
    with pytest.raises(ValueError, match="refusing to replace /dev/null"):
        results.write_bytes("/dev/null", b"x")
    plain = tmp_path / "plain.txt"
    plain.write_text("keep")
    with pytest.raises(ValueError, match=f"{plain} is not a folder"):
        results.write_bytes(plain / "inside.txt", b"x")
    link = tmp_path / "link"
    link.symlink_to(folder)
    with pytest.raises(ValueError, match="refusing"):
        results.write_bytes(link, b"x")
    assert plain.read_text() == "keep" and list(folder.iterdir()) == []


def test_write_bytes_replaces_a_file_and_makes_folders(tmp_path):
    path = tmp_path / "a" / "b" / "c.bin"
    assert results.write_bytes(path, b"one") == path
    results.write_bytes(path, b"two")
    assert path.read_bytes() == b"two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["c.bin"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_get_the_permissions_of_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        path = results.write_text(tmp_path / "f.txt", "x")
        again = results.write_json(path, {"a": 1})  # replacing keeps to the umask too
    finally:
        os.umask(old)
    assert _mode(path) == _mode(again) == mode


def test_nothing_is_left_behind_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "f.txt"
    results.write_text(path, "old")
    with pytest.raises(TypeError):
        results.write_bytes(path, "not bytes")

    def broken(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        results.write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_json_round_trip_and_errors(tmp_path):
    path = tmp_path / "x.json"
    results.write_json(path, {"b": np.float32(0.5), "a": np.arange(3), "n": math.nan,
                              "t": (1, np.int64(2)), 3: "key"})
    assert results.read_json(path) == {"a": [0, 1, 2], "b": 0.5, "n": None, "t": [1, 2],
                                       "3": "key"}
    assert path.read_text().endswith("\n")
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "none.json")):
        results.read_json(tmp_path / "none.json")
    path.write_text("{oops")
    with pytest.raises(ValueError, match=f"{path} is not a UTF-8 JSON file"):
        results.read_json(path)


def _record(seed, accuracy=0.75):
    score = Score(4, round(4 * accuracy), {2: [4, round(4 * accuracy)]}, {"member": [4, 3]},
                  {1: [4, 3]})
    return RunRecord(config={"seed": seed, "data": {"k": 1}}, status="ok", failure=None,
                     train_accuracy=0.9, margin_std=0.1, scores={"hard": score},
                     baselines={"hard": {"counts": score}}, baseline_train={"counts": 0.5},
                     data={"train": {"n": 4}}, steps=3, stopped_at=None, seconds=0.1,
                     n_params=10, history=[{"step": 3, "train_loss": 0.5}], label="x")


def _json(data):
    return json.dumps(data, sort_keys=True)  # NaN compares equal as text


def test_records_append_and_read_back(tmp_path):
    path = tmp_path / "records.jsonl"
    assert results.read_records(path) == []
    results.append_records(path, [_record(0), _record(1)])
    results.append_records(path, [_record(2, 0.5).to_dict()])
    back = results.read_records(path)
    assert [r.seed for r in back] == [0, 1, 2]
    for r, seed, acc in zip(back, [0, 1, 2], [0.75, 0.75, 0.5]):
        assert _json(r.to_dict()) == _json(_record(seed, acc).to_dict())
        assert r.scores["hard"].per_length == {2: [4, round(4 * acc)]}
    assert len(path.read_text().splitlines()) == 3
    with path.open("a") as f:
        f.write('{"config": {}}\n')
    with pytest.raises(ValueError, match=f"{path}:4 is not a run record"):
        results.read_records(path)


LANG = Dyck(2, max_depth=3, pairs=("⟨⟩", "[]"))


def _dataset():
    return Dataset.from_strings(LANG, ["⟨⟩", "[⟨⟩]", "⟩⟨", "", "[[[[]]]]"],
                                ["member", "member", "dip", "member", "random"])


def test_dataset_round_trip(tmp_path):
    path = results.write_dataset(tmp_path / "d.jsonl", _dataset())
    back = results.read_dataset(path)
    ds = _dataset()
    assert back.language == LANG and back.strings() == ds.strings()
    assert back.labels.tolist() == ds.labels.tolist() == [1, 1, 0, 1, 0]  # depth 4 is out
    assert back.kinds.tolist() == ds.kinds.tolist()
    assert "⟨" in path.read_text(encoding="utf-8")  # written as text, not escapes


def test_dataset_errors_name_the_file_and_line(tmp_path):
    path = results.write_dataset(tmp_path / "d.jsonl", _dataset())
    lines = path.read_text(encoding="utf-8").splitlines()
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text("\n".join(lines[:3] + [lines[3].replace("false", "true")] + lines[4:]),
                     encoding="utf-8")
    with pytest.raises(ValueError, match=f"{wrong}: line 4 says member=True for '⟩⟨'"):
        results.read_dataset(wrong)
    header = tmp_path / "header.jsonl"
    header.write_text("\n".join(['{"format": "other"}'] + lines[1:]), encoding="utf-8")
    with pytest.raises(ValueError, match=f"{header} is not a dyckbook dataset: first line"):
        results.read_dataset(header)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines[:4] + ["{not json"] + lines[5:]), encoding="utf-8")
    with pytest.raises(ValueError, match=f"{broken} is not a dyckbook dataset: line 5 is not"):
        results.read_dataset(broken)
    blank = tmp_path / "blank.jsonl"  # blank lines are skipped but still counted
    blank.write_text("\n".join(lines[:2] + ["", lines[2], lines[3].replace("false", "true")]),
                     encoding="utf-8")
    with pytest.raises(ValueError, match=f"{blank}: line 5 says member=True"):
        results.read_dataset(blank)
    listed = tmp_path / "list.jsonl"
    listed.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"{listed} is not a dyckbook dataset: first line"):
        results.read_dataset(listed)
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "none.jsonl")):
        results.read_dataset(tmp_path / "none.jsonl")


def _models():
    tokens = torch.tensor([[0, 3, 5, 6, 4, 2, 1], [0, 3, 4, 2, 1, 1, 1]])
    classifier = Classifier(ModelConfig(k=2, n_ctx=6, d_model=8, n_heads=2, d_mlp=8,
                                        n_layers=1, pos_encoding="learned"), [5])
    thesis = ThesisClassifier(ThesisModelConfig(k=2, n_ctx=6, d_model=8, d_mlp=8, n_layers=1,
                                                pos_encoding="absolute"), seed=6)
    lstm, stack = (RecurrentClassifier(RecurrentConfig(k=2, n_ctx=6, cell=cell, d_hidden=8,
                                                       d_embed=4, d_stack=2), [7])
                   for cell in ("lstm", "stack"))
    return tokens, {"classifier": classifier, "thesis": thesis, "lstm": lstm, "stack": stack}


@pytest.mark.parametrize("kind", ["classifier", "thesis", "lstm", "stack"])
def test_model_round_trip(tmp_path, kind):
    tokens, models = _models()
    model = models[kind]
    with torch.no_grad():
        for p in model.parameters():  # not the initial weights, which the seed rebuilds
            p.add_(0.01)
    path = checkpoint.save_model(tmp_path / f"{kind}.pt", model)
    back = checkpoint.load_model(path)
    assert type(back) is type(model) and back.config == model.config
    assert back.seeds == model.seeds and not back.training
    with torch.no_grad():
        assert torch.equal(back(tokens), model.eval()(tokens))


def test_model_file_errors(tmp_path):
    _, models = _models()
    missing = tmp_path / "none.pt"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        checkpoint.load_model(missing)
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"PK\x03\x04 truncated zip, not a torch file")
    with pytest.raises(ValueError, match=f"{corrupt} is not a dyckbook model file"):
        checkpoint.load_model(corrupt)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, foreign)
    with pytest.raises(ValueError, match=f"{foreign} is not a dyckbook model file"):
        checkpoint.load_model(foreign)
    path = checkpoint.save_model(tmp_path / "m.pt", models["classifier"])
    payload = torch.load(path, weights_only=True)
    payload["config"]["d_model"] = 16
    torch.save(payload, path)
    with pytest.raises(ValueError, match=f"the weights in {path} do not fit its config"):
        checkpoint.load_model(path)
    payload["config"]["kind"] = "rnn"
    torch.save(payload, path)
    with pytest.raises(ValueError, match=f"{path} holds an unknown model kind 'rnn'"):
        checkpoint.load_model(path)
    with pytest.raises(ValueError, match="single model, got one holding 2"):
        checkpoint.save_model(tmp_path / "two.pt", Classifier(models["classifier"].config, [1, 2]))


def test_result_paths(tmp_path, monkeypatch):
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path))
    assert results.repo_root() == tmp_path.resolve()
    assert layout.run_results_dir("cpu", "g", "r") == tmp_path.resolve() / "book/results/cpu/g/r"
    assert layout.run_notebook_path("cpu", "g", "r", root="/x") == results.resolve(
        "book/runs/cpu/g/r.ipynb", "/x")
    assert layout.profile_index("smoke") == tmp_path.resolve() / "book/results/smoke/index.json"
    assert results.resolve("/abs/p") == results.resolve("/abs/p", "/elsewhere")
    for bad in ("", "a/b", ".hidden"):
        for args in ((bad, "g", "r"), ("cpu", bad, "r"), ("cpu", "g", bad)):
            with pytest.raises(ValueError, match="must be a plain file name"):
                layout.run_results_dir(*args)


def test_write_bytes_writes_through_a_link_and_keeps_permissions(tmp_path):
    import os
    import stat

    target = tmp_path / "data.jsonl"
    target.write_bytes(b"old")
    os.chmod(target, 0o600)
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    results.write_bytes(link, b"new")
    assert link.is_symlink() and target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_keep_records_drops_the_others_and_rewrites_only_then(tmp_path):
    """The resume caches of the grid and of the learning study keep the records of the recipe
    they run; the file is rewritten only when it held another's."""
    path = tmp_path / "records.jsonl"
    results.append_records(path, [_record(0), _record(1), _record(2)])
    before = path.stat().st_mtime_ns
    assert [r.seed for r in results.keep_records(path, lambda r: True)] == [0, 1, 2]
    assert path.stat().st_mtime_ns == before  # nothing dropped: untouched
    kept = results.keep_records(path, lambda r: r.seed != 1)
    assert [r.seed for r in kept] == [0, 2]
    assert [r.seed for r in results.read_records(path)] == [0, 2]
    assert results.keep_records(tmp_path / "absent.jsonl", lambda r: True) == []


def _with_baselines(seed, rule_accuracy):
    record = _record(seed)
    score = Score(4, round(4 * rule_accuracy), {2: [4, round(4 * rule_accuracy)]}, {}, {})
    record.baselines = {"hard": {"counts": score}}
    return record


def test_records_hold_each_baselines_blob_once(tmp_path):
    """Records trained on the same strings share their baselines' scores: the companion file
    holds each distinct blob once, every record names its blob, and reading puts it back."""
    path = tmp_path / "records.jsonl"
    companion = results.baselines_path(path)
    assert companion == tmp_path / "records.baselines.jsonl"
    written = [_with_baselines(s, 0.5) for s in range(4)] + [_with_baselines(9, 0.25)]
    results.append_records(path, written[:3])
    results.append_records(path, written[3:])
    assert len(companion.read_text().splitlines()) == 2  # two distinct blobs, once each
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(isinstance(line["baselines"], str) for line in lines)
    assert len({line["baselines"] for line in lines}) == 2
    back = results.read_records(path)
    assert [_json(r.to_dict()) for r in back] == [_json(r.to_dict()) for r in written]
    # a record with no baselines keeps its empty mapping inline
    bare = _record(5)
    bare.baselines = {}
    results.append_records(path, [bare])
    assert results.read_records(path)[-1].baselines == {}
    assert len(companion.read_text().splitlines()) == 2


def test_records_written_inline_before_the_companion_still_read(tmp_path):
    path = tmp_path / "records.jsonl"
    record = _with_baselines(0, 0.5)
    path.write_text(json.dumps(record.to_dict(), sort_keys=True) + "\n")
    assert _json(results.read_records(path)[0].to_dict()) == _json(record.to_dict())
    results.append_records(path, [_with_baselines(1, 0.5)])  # a mixed file reads too
    assert [r.baselines["hard"]["counts"].accuracy for r in results.read_records(path)] \
        == [0.5, 0.5]


def test_a_missing_or_broken_companion_is_named(tmp_path):
    path = tmp_path / "records.jsonl"
    results.append_records(path, [_with_baselines(0, 0.5)])
    digest = json.loads(path.read_text())["baselines"]
    companion = results.baselines_path(path)
    companion.write_text("")
    with pytest.raises(ValueError,
                       match=f"{path}:1 names baselines {digest}, which .*records.baselines"):
        results.read_records(path)
    companion.write_text('{"digest": "x"}\n')
    with pytest.raises(ValueError, match=f"{companion}:1 is not a baselines line"):
        results.read_records(path)


def test_keep_records_prunes_the_companion_too(tmp_path):
    path = tmp_path / "records.jsonl"
    results.append_records(path, [_with_baselines(0, 0.5), _with_baselines(1, 0.25)])
    kept = results.keep_records(path, lambda r: r.seed == 1)
    assert [r.seed for r in kept] == [1]
    assert len(results.baselines_path(path).read_text().splitlines()) == 1
    assert results.read_records(path)[0].baselines["hard"]["counts"].accuracy == 0.25
    assert results.record_files("references/records.jsonl") == [
        "references/records.jsonl", "references/records.baselines.jsonl"]
    assert results.record_files("evidence.json") == ["evidence.json"]


def test_every_committed_model_file_still_loads():
    """A file format's name is not a module path: moving the package into concept packages once
    renamed ``dyckbook.model/2`` and left every committed weight file unreadable (08's rerun
    failed). Every model the cpu profile publishes must load, and score a string."""
    import torch

    from dyckbook.experiment import checkpoint

    files = sorted((Path(__file__).resolve().parents[1] / "book" / "results" / "cpu").rglob("*.pt"))
    assert files, "the cpu profile publishes model files (05_explainability)"
    for path in files:
        model = checkpoint.load_model(path)
        assert model.seeds and not model.training, path
    assert checkpoint._MODEL_FORMAT == "dyckbook.model/2"
    assert torch.is_tensor(next(model.parameters()))
