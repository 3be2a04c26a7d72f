"""Tests for dyckbook.grid: a micro grid runs, is deterministic, resumes; summaries from records."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from dyckbook import grid as G
from dyckbook.negatives import HARD_KINDS
from dyckbook.runner import load_manifest, resolve_profile

TINY = G.GridSpec(
    d_model=16,
    n_heads=2,
    d_mlp=32,
    max_length=10,
    n_train=200,
    n_val=40,
    n_test=120,
    n_random_test=60,
    batch_size=32,
    warmup_steps=5,
    max_steps=20,
    eval_every=10,
)
CELLS = [
    G.GridCell(1, 1, "bidirectional", "learned", "start"),
    G.GridCell(1, 1, "causal", "none", "end"),
]


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _strip(record):
    return {k: v for k, v in record.items() if k != "seconds"}


def test_cell_sets_and_names():
    full = G.cells_named("full")
    assert len(full) == 180 == len({c.name for c in full})
    reduced = G.cells_named("reduced")
    assert set(reduced) <= set(full) and len(reduced) == 76
    assert {(c.mask, c.pos_encoding, c.readout) for c in reduced if c.n_layers == 2} == {
        (c.mask, c.pos_encoding, c.readout) for c in full
    }
    assert G.GridCell.from_dict(CELLS[0].to_dict()) == CELLS[0]
    with pytest.raises(ValueError, match="cells must be one of"):
        G.cells_named("huge")
    with pytest.raises(ValueError, match="GridCell.readout"):
        G.GridCell(readout="first")
    with pytest.raises(ValueError, match="set has no members or no non-members unseen"):
        G.make_grid_data(1, 3, G.GridSpec(**{**TINY.to_dict(), "max_length": 6}))


def test_grid_data_is_disjoint_and_balanced():
    data = G.make_grid_data(1, 0, TINY)
    rows = {
        name: {tuple(t) for t in getattr(data, name).tokens.tolist()}
        for name in ("train", "val", "hard", "random")
    }
    assert not rows["train"] & rows["hard"] and not rows["val"] & rows["hard"]
    assert not rows["train"] & rows["random"]
    assert data.hard.labels.float().mean().item() == pytest.approx(0.5)
    assert data.random.labels.float().mean().item() == pytest.approx(0.5)
    hard_kinds = {data.kind_names[i] for i in np.unique(data.hard.kinds)}
    assert hard_kinds <= {"positive", *HARD_KINDS}
    assert "random" in {data.kind_names[i] for i in np.unique(data.train.kinds)}


def test_micro_grid_records_complete_deterministic_and_resumed(tmp_path):
    out = tmp_path / "grid.jsonl"
    records = G.run_grid(TINY, CELLS, seeds=[0, 1], jobs=1, out_path=out)
    assert [(r["name"], r["seed"]) for r in records] == [(c.name, s) for c in CELLS for s in (0, 1)]
    for r in records:
        assert r["spec_hash"] == TINY.spec_hash
        assert 1 <= r["steps"] <= TINY.max_steps
        assert 0 <= r["hard"]["accuracy"] <= 1 and 0 <= r["random"]["accuracy"] <= 1
        n_kind = r["hard"]["n_per_kind"]
        assert sum(n_kind.values()) == r["hard"]["n"]
        weighted = sum(n_kind[k] * a for k, a in r["hard"]["per_kind"].items()) / r["hard"]["n"]
        assert weighted == pytest.approx(r["hard"]["accuracy"])
        assert set(r["seconds"]) == {"data", "train", "eval", "total"}
    lines = out.read_text().splitlines()
    assert len(lines) == 4 and [json.loads(x)["name"] for x in lines]
    # same seed, same record (timings aside), whether run alone or within the grid
    again = G.run_cell(CELLS[0], 1, TINY)
    assert _strip(again) == _strip(records[1])
    # resume: nothing new is trained or written; a new seed adds exactly its records
    calls = []
    resumed = G.run_grid(
        TINY, CELLS, seeds=[0, 1], out_path=out, progress=lambda i, n, r: calls.append(r["name"])
    )
    assert calls == [] and len(out.read_text().splitlines()) == 4
    assert [_strip(r) for r in resumed] == [_strip(r) for r in records]
    G.run_grid(TINY, CELLS[:1], seeds=[2], out_path=out, progress=lambda i, n, r: calls.append(i))
    assert calls == [1] and len(out.read_text().splitlines()) == 5
    # records of another spec are not resumed
    other = G.GridSpec(**{**TINY.to_dict(), "max_steps": 10})
    assert G.load_records(out, other) == []


def test_causal_start_readout_is_constant():
    r = G.run_cell(G.GridCell(1, 1, "causal", "learned", "start"), 0, TINY)
    # position 0 sees only [start]: one answer for every input, so exactly one class is right
    assert r["hard"]["accuracy"] == pytest.approx(0.5)
    assert r["hard"]["per_kind"]["positive"] in (0.0, 1.0)


def _record(name_cell, seed, hard, kinds):
    return {
        "name": name_cell.name,
        "cell": name_cell.to_dict(),
        "seed": seed,
        "steps": 10,
        "hard": {"accuracy": hard, "per_kind": kinds},
        "random": {"accuracy": 1.0},
        "seconds": {"total": 2.0},
    }


def test_summarise_fractions_and_t_intervals():
    a, b = CELLS
    records = [
        _record(a, 0, 1.0, {"dip": 1.0}),
        _record(a, 1, 0.99, {"dip": 0.98}),
        _record(a, 2, 0.5, {"dip": 0.2}),
        _record(a, 3, 0.985, {"dip": 0.9}),
        _record(b, 0, 0.7, {"dip": 0.4}),
    ]
    rows = {row["name"]: row for row in G.summarise(records)}
    assert rows[a.name]["frac_solved"] == 0.5 and rows[a.name]["n_seeds"] == 4
    x = np.array([1.0, 0.99, 0.5, 0.985])
    half = 3.182446305284263 * x.std(ddof=1) / 2  # t_{0.975, 3}
    hard = rows[a.name]["hard"]
    assert hard["mean"] == pytest.approx(x.mean())
    assert (hard["low"], hard["high"]) == pytest.approx((x.mean() - half, x.mean() + half))
    assert rows[a.name]["per_kind"]["dip"]["mean"] == pytest.approx(0.77)
    one = rows[b.name]["hard"]
    assert one["mean"] == 0.7 and math.isnan(one["low"]) and math.isnan(one["high"])
    assert G.t_interval([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)


def test_manifest_grid_runs_resolve_under_smoke():
    specs = [s for s in resolve_profile(load_manifest(), "smoke") if s.base == "ablation-grid"]
    assert len(specs) == 1
    params = specs[0].params
    assert params["cells"] == "smoke" and params["max_steps"] <= 100


def test_bucketed_batches_train_and_stay_deterministic():
    spec = G.GridSpec(**{**TINY.to_dict(), "bucket": True})
    a, b = (G.run_cell(CELLS[0], 0, spec) for _ in range(2))
    assert _strip(a) == _strip(b) and a["spec_hash"] != TINY.spec_hash
    with pytest.raises(ValueError, match="GridSpec.bucket"):
        G.GridSpec(bucket=1)


def test_summary_comes_from_the_records_file_alone(tmp_path):
    out = tmp_path / "grid.jsonl"
    records = G.run_grid(TINY, CELLS[1:], seeds=[0, 3], out_path=out)
    with open(out, "a") as handle:
        handle.write('{"truncated": ')  # an interrupted write is ignored
    from_file = G.summarise(G.load_records(out, TINY))
    assert from_file == G.summarise(records)
    assert from_file[0]["n_seeds"] == 2


def test_plot_grid_marks_missing_cells():
    a, _ = CELLS
    summary = G.summarise([_record(a, 0, 0.9, {"dip": 0.8})])
    matrix, rows, cols = G.grid_matrix(summary, 1, 1, lambda s: s["hard"]["mean"])
    assert matrix.shape == (6, 5) and np.isfinite(matrix).sum() == 1
    assert matrix[rows.index("bidir / start"), cols.index("learned")] == 0.9
    fig = G.plot_grid(summary, "hard")
    assert len(fig.axes) == 2  # one panel and the colour bar
    with pytest.raises(ValueError, match="value must be one of"):
        G.plot_grid(summary, "loss")


def test_learning_rate_warms_up_then_follows_the_schedule():
    cosine = G.GridSpec(lr=2e-3, warmup_steps=10, max_steps=110, schedule="cosine")
    assert cosine.learning_rate(5) == pytest.approx(1e-3)  # linear warm-up
    assert cosine.learning_rate(10) == pytest.approx(2e-3)  # peak at the end of warm-up
    assert cosine.learning_rate(60) == pytest.approx(1e-3)  # half-way through the decay
    assert cosine.learning_rate(110) == pytest.approx(0.0, abs=1e-12)  # zero at max_steps
    steps = [cosine.learning_rate(s) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(steps, steps[1:]))  # monotone after warm-up
    flat = G.GridSpec(lr=2e-3, warmup_steps=0, schedule="constant")
    assert {flat.learning_rate(s) for s in (1, 500, 1000)} == {2e-3}


@pytest.mark.parametrize("field, value, message", [
    ("schedule", "linear", "GridSpec.schedule must be one of"),
    ("grad_clip", -1.0, "GridSpec.grad_clip must be >= 0"),
    ("grad_clip", "1", "GridSpec.grad_clip must be >= 0"),
    ("grad_clip", True, "GridSpec.grad_clip must be >= 0"),
])
def test_bad_schedule_or_clip_is_named(field, value, message):
    with pytest.raises(ValueError, match=message):
        G.GridSpec(**{field: value})


def test_clipping_changes_training_and_is_part_of_the_spec():
    clipped = G.GridSpec(**{**TINY.to_dict(), "grad_clip": 1e-3, "target_accuracy": 1.0})
    free = G.GridSpec(**{**TINY.to_dict(), "grad_clip": 0.0, "target_accuracy": 1.0})
    assert clipped.spec_hash != free.spec_hash
    a, b = (G.run_cell(CELLS[0], 0, spec) for spec in (clipped, free))
    assert a["steps"] == b["steps"] == TINY.max_steps
    assert _strip(a)["hard"] != _strip(b)["hard"] or a["val_accuracy"] != b["val_accuracy"]


def test_published_grid_prefers_the_run_with_most_records(tmp_path, monkeypatch):
    from dyckbook import results as R

    def publish(run, n_records, cells):
        rdir = R.run_results_dir(G.GRID_GROUP, run, tmp_path)
        rdir.mkdir(parents=True)
        (rdir / "summary.json").write_text(json.dumps(
            {"cells": cells, "seeds": list(range(n_records // 2)), "n_records": n_records,
             "spec": TINY.to_dict()}))
        (rdir / "grid_summary.json").write_text(json.dumps([{"name": f"{run}-cell"}]))
        # a stale record of another spec in the records file must not matter
        (rdir / "grid_records.jsonl").write_text('{"name": "old", "spec_hash": "x"}\n')
        R.run_notebook_path(G.GRID_GROUP, run, tmp_path).parent.mkdir(parents=True, exist_ok=True)
        R.run_notebook_path(G.GRID_GROUP, run, tmp_path).write_text("{}")
        R.write_run_record(G.GRID_GROUP, run, {"status": "ok", "hash": "h", "params": {}}, tmp_path)

    assert G.published_grid(tmp_path) is None
    publish("ablation-grid", 4, "reduced")
    publish("ablation-grid-full", 20, "full")
    grid = G.published_grid(tmp_path)
    assert grid["run"] == "ablation-grid-full" and grid["cell_set"] == "full"
    assert grid["cells"] == [{"name": "ablation-grid-full-cell"}] and grid["n_records"] == 20


def test_order_blind_ceiling_is_the_majority_vote_per_multiset():
    # "(())" / "()()" (members) and "())(" (a hard negative) share one multiset: a model blind
    # to order answers alike for all three and gets at most 2 of 3; the lone "((" is its own group
    t = lambda s: [0] + [3 if c == "(" else 4 for c in s] + [2]
    tokens = torch.tensor([t("(())"), t("()()"), t("())("), t("((") + [1, 1]])
    labels = torch.tensor([1, 1, 0, 0])
    assert G.order_blind_ceiling(tokens, labels) == pytest.approx(3 / 4)
    # the same strings with both labels in every group: chance, whatever the model
    assert G.order_blind_ceiling(tokens[:2], torch.tensor([1, 0])) == pytest.approx(0.5)
    assert math.isnan(G.order_blind_ceiling(tokens[:0], labels[:0]))
    with pytest.raises(ValueError, match="tokens must be"):
        G.order_blind_ceiling(tokens[0], labels)


def test_order_blind_held_out_is_chance_without_a_count_cue_and_exact_with_one():
    rng = np.random.default_rng(0)
    # 200 groups (a distinct count of symbol 3 per group, width 200), two strings each
    n_groups = 200
    row = lambda g, width=n_groups: [3] * g + [4] * (n_groups - g) + [1] * (width - n_groups)
    group = np.repeat(np.arange(n_groups), 2)
    tokens = torch.tensor([row(g) for g in group])
    by_group = torch.tensor((group % 2 == 0).astype(np.int64))
    # labels that are a function of the group: found on an independent set, even a wider one
    # (the extra columns are padding, counted as such)
    wide = torch.tensor([row(g, n_groups + 5) for g in group])
    assert G.order_blind_held_out(tokens, by_group, wide, by_group) == pytest.approx(1.0)
    # groups unseen by the fitting set score a coin
    assert G.order_blind_held_out(tokens[:200], by_group[:200], tokens[200:], by_group[200:]) == 0.5
    # labels independent of the groups: the in-sample ceiling is inflated by the small groups,
    # the held-out vote is not
    coin = lambda: torch.tensor(rng.integers(0, 2, len(group)))
    fit, scored = coin(), coin()
    assert G.order_blind_ceiling(tokens, scored) >= 0.7
    assert abs(G.order_blind_held_out(tokens, fit, tokens, scored) - 0.5) < 0.08
    # every group exactly balanced in the fitting set: every vote is a tie, exactly chance
    balanced = torch.tensor(np.tile([1, 0], n_groups))
    assert G.order_blind_held_out(tokens, balanced, tokens, scored) == 0.5
    assert math.isnan(G.order_blind_held_out(tokens[:0], fit[:0], tokens, scored))
    with pytest.raises(ValueError, match="tokens must be"):
        G.order_blind_held_out(tokens, fit, tokens[0], scored)


def test_no_pe_bidirectional_cells_never_beat_the_order_blind_ceiling():
    data = G.make_grid_data(1, 0, TINY)
    ceiling = G.order_blind_ceiling(data.hard.tokens, data.hard.labels)
    for readout in ("start", "end", "mean"):
        r = G.run_cell(G.GridCell(1, 1, "bidirectional", "none", readout), 0, TINY, data)
        assert r["hard"]["accuracy"] <= ceiling + 1e-9


def test_per_length_balance_leaves_no_length_cue_and_old_records_keep_their_hash():
    spec = G.GridSpec(**{**TINY.to_dict(), "max_length": 12})
    data = G.make_grid_data(1, 0, spec)
    for split in (data.hard, data.random):
        for L in np.unique(split.lengths):
            y = split.labels.numpy()[split.lengths == L]
            assert (y == 1).sum() == (y == 0).sum()  # as many members as non-members per length
    # Dyck-1: members and hard negatives of a length share one multiset, so with the classes
    # balanced at every length no order-blind classifier beats chance
    assert G.order_blind_ceiling(data.hard.tokens, data.hard.labels) == pytest.approx(0.5)
    other = G.make_grid_data(1, 1, spec).hard  # another seed's test set: every group a tie
    held_out = G.order_blind_held_out(other.tokens, other.labels, data.hard.tokens, data.hard.labels)
    assert held_out == 0.5
    old = G.GridSpec(**{**spec.to_dict(), "test_balance": "overall"})
    assert old.spec_hash != spec.spec_hash
    # records made before the field existed hashed every other field only: still resumable
    legacy = {k: v for k, v in old.to_dict().items() if k != "test_balance"}
    import hashlib

    assert old.spec_hash == hashlib.sha256(
        json.dumps(legacy, sort_keys=True).encode()).hexdigest()[:12]
    with pytest.raises(ValueError, match="GridSpec.test_balance must be one of"):
        G.GridSpec(test_balance="per_kind")


def test_cell_names_round_trip_and_bad_names_are_named():
    for cell in G.all_cells():
        assert G.GridCell.from_name(cell.name) == cell
    for bad in ("k3-L2-causal-learned", "x3-L2-causal-learned-end", "k3-L0-causal-learned-end",
                "k3-L2-causal-rope-end", 3):
        with pytest.raises(ValueError, match=repr(bad) if not isinstance(bad, str) else "got"):
            G.GridCell.from_name(bad)
