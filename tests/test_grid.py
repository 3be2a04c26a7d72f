"""Tests for grid: cell names and sets, the spec's run configs, resuming and executors."""

import json
from concurrent.futures import ThreadPoolExecutor
from itertools import product
from pathlib import Path

import pytest

from dyckbook.chapters import ablation_grid
from dyckbook.chapters.ablation_grid import (
    Cell,
    GridSpec,
    cell_of,
    cells_named,
    run_grid,
    summarise,
)
from dyckbook.experiment import results
from dyckbook.experiment.evaluate import Score, wilson
from dyckbook.experiment.record import RunRecord
from dyckbook.experiment.run import RunConfig
from dyckbook.nn.options import LENGTH_ENCODINGS, MASKS, POS_ENCODINGS, READOUTS

TINY = GridSpec(d_model=8, n_heads=1, d_mlp=16, max_length=12, max_length_k1=12, n_train=128,
                n_val=32, n_test=64, batch_size=32, warmup_steps=2, max_steps=8, eval_every=4,
                test_sets=("hard", "local", "random"))


def test_cell_names_round_trip():
    cells = cells_named("full")
    assert len(cells) == len(set(cells)) == 2 * 3 * 2 * len(POS_ENCODINGS) * 3
    assert set(cells) == {Cell(*c) for c in product((1, 3), (1, 2, 3), MASKS, POS_ENCODINGS,
                                                     READOUTS)}
    for cell in cells:
        assert Cell.from_name(cell.name) == cell
    assert Cell(3, 2, "causal", "learned", "end").name == "k3-L2-causal-learned-end"


@pytest.mark.parametrize("name", ["k1-L2-causal", "kx-L2-causal-none-start",
                                  "k1-L2-causal-xpos-start", "k1-L2-left-none-start",
                                  "k1-L2-causal-none-max", "k1-L2-causal-none-start-extra", "",
                                  42])
def test_cell_from_name_errors(name):
    with pytest.raises(ValueError, match=repr(name)):
        Cell.from_name(name)


def test_named_cell_sets():
    reduced = cells_named("reduced")
    # per (k, layers) at 1 and 2 layers: every mask x readout that can see the string with the
    # encodings that are neither absolute_ctx nor made for length, and the thesis' start cells
    kept = [pe for pe in POS_ENCODINGS if pe != "absolute_ctx" and pe not in LENGTH_ENCODINGS]
    per = sum(1 for m, pe, r in product(MASKS, kept, READOUTS)
              if (m == "causal" and r != "start") or (m == "bidirectional" and r != "end")
              or (pe in ("none", "absolute") and r == "start"))
    assert len(reduced) == len(set(reduced)) == 4 * per
    assert {(c.k, c.n_layers) for c in reduced} == {(1, 1), (1, 2), (3, 1), (3, 2)}
    assert all(c.pos_encoding not in ("absolute_ctx", *LENGTH_ENCODINGS) for c in reduced)
    for c in reduced:  # what it keeps: the thesis' cells, readouts that can see the string
        thesis = c.pos_encoding in ("none", "absolute") and c.readout == "start"
        assert thesis or (c.mask == "causal") == (c.readout == "end") or c.readout == "mean"
    for k, layers in product((1, 3), (1, 2)):
        for mask, pe in product(MASKS, ("none", "absolute")):
            assert Cell(k, layers, mask, pe, "start") in reduced
        assert Cell(k, layers, "causal", "learned", "start") not in reduced
        assert Cell(k, layers, "bidirectional", "sinusoidal", "end") not in reduced
    smoke = cells_named("smoke")
    assert len(smoke) == 3 and set(smoke) <= set(cells_named("full"))
    listed = cells_named("k1-L1-causal-none-end, k3-L2-bidirectional-learned-mean")
    assert listed == [Cell(1, 1, "causal", "none", "end"),
                      Cell(3, 2, "bidirectional", "learned", "mean")]
    with pytest.raises(ValueError, match="cells must be one of .*'tiny'"):
        cells_named("tiny")


def test_spec_gives_valid_run_configs():
    spec = GridSpec()
    for cell in cells_named("full"):
        config = spec.config(cell, seed=4)
        assert RunConfig.from_dict(config.to_dict()) == config and config.seed == 4
        m, d = config.model, config.data
        assert (d.k, m.k, m.n_layers, m.mask, m.pos_encoding, m.readout) == (
            cell.k, cell.k, cell.n_layers, cell.mask, cell.pos_encoding, cell.readout)
        assert d.max_length == m.n_ctx == (40 if cell.k == 1 else 48) and d.min_length == 4
        assert d.test_sets[0] == "stack"  # the verdict-bearing set
        assert config.train.max_steps == 1000 and config.train.target_accuracy == 0.995
    assert GridSpec.from_dict(spec.to_dict()) == spec
    assert GridSpec.from_flat({"d_model": 8, "n_heads": 1, "run_name": "x"}) == GridSpec(
        d_model=8, n_heads=1)
    with pytest.raises(ValueError, match="unknown keys \\['colour'\\]"):
        GridSpec.from_dict({"colour": 1})
    with pytest.raises(ValueError, match="d_model \\(10\\) must be divisible by n_heads \\(3\\)"):
        GridSpec(d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="schedule"):
        GridSpec(schedule="step")


def _numbers(record):
    """A record's JSON without wall times."""
    data = record.to_dict()
    data.pop("seconds")
    data["history"] = [{k: v for k, v in h.items() if k != "seconds"} for h in data["history"]]
    return json.dumps(data, sort_keys=True)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("grid") / "records.jsonl"
    finished = []
    records = run_grid(cells_named("smoke"), TINY, [0, 1], records_path=path,
                       on_cell=lambda cell, rs: finished.append((cell, [r.seed for r in rs])))
    return path, records, finished


def _copy_records(src, dest):
    """A records file with its companion (the baselines it names by digest)."""
    for a, b in ((src, dest), (results.baselines_path(src), results.baselines_path(dest))):
        b.write_bytes(a.read_bytes())


def test_run_grid_gives_a_record_per_cell_and_seed(first_run):
    path, records, finished = first_run
    cells = cells_named("smoke")
    assert [(cell_of(r), r.seed) for r in records] == [(c, s) for c in cells for s in (0, 1)]
    assert finished == [(c, [0, 1]) for c in cells]
    for r in records:
        assert RunConfig.from_dict(r.config) == TINY.config(cell_of(r), r.seed)
        assert set(r.scores) == {"hard", "local", "random"}
    assert [_numbers(r) for r in results.read_records(path)] == [_numbers(r) for r in records]


def test_run_grid_resumes_without_training(first_run, monkeypatch):
    path, records, _ = first_run

    def no_training(*args, **kwargs):
        raise AssertionError("run_grid trained a cell whose records were on file")

    monkeypatch.setattr(ablation_grid, "run_seeds", no_training)
    again = run_grid(cells_named("smoke"), TINY, [0, 1], records_path=path)
    assert [_numbers(r) for r in again] == [_numbers(r) for r in records]
    assert len(path.read_text().splitlines()) == 6
    with pytest.raises(AssertionError, match="trained a cell"):  # a new seed must train
        run_grid(cells_named("smoke")[:1], TINY, [2], records_path=path)


def test_a_new_recipe_replaces_the_old_records_in_the_file(first_run, tmp_path):
    path = tmp_path / "records.jsonl"
    _copy_records(first_run[0], path)  # 3 smoke cells x 2 seeds at TINY
    longer = GridSpec(**{**TINY.to_dict(), "max_steps": 9})
    cells = cells_named("smoke")[:1]
    records = run_grid(cells, longer, [0], records_path=path)
    on_file = results.read_records(path)
    assert len(on_file) == 1 and _numbers(on_file[0]) == _numbers(records[0])
    assert RunConfig.from_dict(on_file[0].config).train.max_steps == 9


def test_a_record_written_before_a_field_existed_is_not_reused(first_run, tmp_path,
                                                             monkeypatch):
    """A record lacking a field the recipe now has (e.g. ``target_window``, added with a
    default) was trained under another rule: read back with today's default it would look
    identical, so it is compared as stored and retrained."""
    path = tmp_path / "records.jsonl"
    lines = []
    for line in first_run[0].read_text().splitlines():
        data = json.loads(line)
        del data["config"]["train"]["target_window"]
        lines.append(json.dumps(data))
    path.write_text("\n".join(lines) + "\n")
    results.baselines_path(path).write_bytes(results.baselines_path(first_run[0]).read_bytes())

    def no_training(*args, **kwargs):
        raise AssertionError("trained")

    monkeypatch.setattr(ablation_grid, "run_seeds", no_training)
    with pytest.raises(AssertionError, match="trained"):
        run_grid(cells_named("smoke")[:1], TINY, [0], records_path=path)


def test_executor_results_equal_serial_results(first_run, tmp_path):
    _, records, _ = first_run
    with ThreadPoolExecutor(max_workers=2) as pool:
        threaded = run_grid(cells_named("smoke"), TINY, [0, 1], executor=pool,
                            records_path=tmp_path / "r.jsonl")
    assert [_numbers(r) for r in threaded] == [_numbers(r) for r in records]
    assert len(results.read_records(tmp_path / "r.jsonl")) == 6


def test_a_grid_on_workers_makes_each_data_split_once_before_the_cells(tmp_path, monkeypatch):
    """With an executor, each distinct (data config, seed) is made once, into the data cache
    (a temporary folder where none is set), and the cells read it there: a cell that made its
    own splits fails here."""
    from dyckbook.chapters import page
    from dyckbook.experiment import cache
    from dyckbook.experiment import run as R

    monkeypatch.delenv(cache.DATA_ENV, raising=False)
    cells = cells_named("smoke")
    configs = {c.name: TINY.config(c) for c in cells}
    pairs = {(c.data, s) for c in configs.values() for s in (0, 1)}
    made = []
    real = cache.make_splits

    def counted(data, seed):
        made.append((data, seed))
        return real(data, seed)

    monkeypatch.setattr(cache, "make_splits", counted)
    R.data_splits.cache_clear()
    with ThreadPoolExecutor(max_workers=2) as pool, page.shared_data(configs, [0, 1],
                                                                     pool) as folder:
        assert len(list(Path(folder).glob("*.pkl.gz"))) == len(pairs) == len(made)
        R.data_splits.cache_clear()  # the cells read the folder, not this process's memory
        monkeypatch.setattr(cache, "make_splits", lambda *a: pytest.fail("made again"))
        got = ablation_grid.run_cell(TINY.config(cells[0]).to_dict(), [0, 1], "cpu", folder)
    assert len(got) == 2 and not Path(folder).exists()  # the temporary folder is removed
    monkeypatch.setenv(cache.DATA_ENV, str(tmp_path / "data"))  # one set: kept and used
    monkeypatch.setattr(cache, "make_splits", real)
    R.data_splits.cache_clear()
    with page.shared_data(configs, [0], ThreadPoolExecutor(1)) as folder:
        assert folder == str(tmp_path / "data")
    assert len(list((tmp_path / "data").glob("*.pkl.gz"))) == len({d for d, s in pairs})
    with page.shared_data(configs, [0], None) as folder:
        assert folder is None  # no workers: made where needed
    R.data_splits.cache_clear()


def _record(cell, seed, accuracy, status="ok"):
    config = GridSpec().config(cell, seed).to_dict()
    n = 100
    score = Score(n, round(accuracy * n), {}, {"member": [n, round(accuracy * n)]}, {})
    return RunRecord(config=config, status=status, failure=None if status == "ok" else "chance",
                     train_accuracy=1.0, margin_std=1.0, scores={"hard": score},
                     baselines={"hard": {}}, baseline_train={}, data={}, steps=1,
                     stopped_at=None, seconds=0.0, n_params=1, history=[])


def test_summarise_solved_share_and_interval():
    a, b = Cell(3, 1, "causal", "none", "end"), Cell(1, 2, "bidirectional", "learned", "mean")
    records = ([_record(a, s, acc) for s, acc in enumerate([0.995, 1.0, 0.9, 0.5])]
               + [_record(a, 9, 0.3, "failed")]
               + [_record(b, s, 1.0) for s in range(3)])
    rows = summarise(records, "hard")
    assert [r["cell"] for r in rows] == [b.name, a.name]  # cells in sorted order
    rb, ra = rows
    assert (ra["seeds"], ra["failed"], ra["solved"]) == (5, 1, 2)
    # one denominator: the failed seed counts as a seed that did not solve it
    assert ra["solved_share"] == 0.4 and ra["solved_interval"] == wilson(2, 5)
    assert (ra["k"], ra["n_layers"], ra["mask"]) == (3, 1, "causal")
    assert rb["solved_share"] == 1.0 and rb["solved_interval"] == wilson(3, 3)
    assert rb["solved_interval"][0] < 1.0 == rb["solved_interval"][1]
