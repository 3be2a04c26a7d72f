"""The length study's configurations, matched recurrent widths, parallel runs and reach."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from dyckbook.chapters import generalisation, plotting
from dyckbook.experiment.checkpoint import build_model
from dyckbook.experiment.evaluate import Score
from dyckbook.experiment.run import RunConfig
from dyckbook.nn.model import ModelConfig
from dyckbook.nn.recurrent import RecurrentClassifier, RecurrentConfig


def _base(**kw) -> RunConfig:
    return RunConfig.from_flat(dict(
        k=2, max_length=10, test_max_length=40, n_train=160, n_val=40, n_test=80, max_steps=6,
        d_model=16, n_heads=2, d_mlp=32, eval_every=3, **kw)).override(
        test_min_length=2, n_ctx=40, test_sets=("hard", "stack"))


@pytest.mark.parametrize("name, expected", [
    ("lstm", {"cell": "lstm"}),
    ("stack-rnn", {"cell": "stack"}),
    ("causal-rope-end", {"mask": "causal", "pos_encoding": "rope", "readout": "end"}),
    ("causal-none-end+next_symbols", {"mask": "causal", "pos_encoding": "none",
                                      "readout": "end", "objective": "next_symbols"}),
    ("causal-none-end+sigmoid", {"mask": "causal", "pos_encoding": "none", "readout": "end",
                                 "attention": "sigmoid"}),
    ("causal-none-end+sigmoid+language_model", {
        "mask": "causal", "pos_encoding": "none", "readout": "end", "attention": "sigmoid",
        "objective": "language_model"}),
])
def test_fields_parse_every_kind_of_name(name, expected):
    assert generalisation.fields(name) == expected


@pytest.mark.parametrize("name, says", [
    ("gru", "'gru'"), ("causal-rope", "'causal-rope'"), ("causal-xpos-end", "'causal-xpos-end'"),
    ("causal-none-end+contrastive", "'contrastive'"), (3, "got 3"),
    ("causal-none-end+softmax", "'softmax'"),  # the default is not named
    ("causal-none-end+sigmoid+sigmoid", "each at most once"),
    ("stack", "'stack'"),  # the stack test set's name, not a configuration
])
def test_fields_reject_a_bad_name_naming_it(name, says):
    with pytest.raises(ValueError, match=says):
        generalisation.fields(name)


@pytest.mark.parametrize("cell", ["lstm", "stack"])
def test_matched_hidden_is_the_closest_parameter_count(cell):
    target = build_model(ModelConfig(k=3, n_ctx=64, d_model=64, n_heads=2, d_mlp=128), [0]).n_params

    def size(width):
        return RecurrentClassifier(RecurrentConfig(k=3, n_ctx=64, cell=cell,
                                                   d_hidden=width)).n_params

    width = generalisation.matched_hidden(cell, 3, 64, target)
    assert abs(size(width) - target) <= min(abs(size(width - 1) - target),
                                            abs(size(width + 1) - target))
    assert abs(size(width) - target) / target < 0.05


def test_config_gives_each_kind_its_model_on_the_same_data_and_training():
    base = _base()
    lstm = generalisation.config(base, "lstm")
    assert isinstance(lstm.model, RecurrentConfig) and lstm.model.cell == "lstm"
    assert (lstm.model.k, lstm.model.n_ctx) == (base.model.k, base.model.n_ctx)
    assert lstm.data == base.data and lstm.train == base.train
    aux = generalisation.config(base, "causal-alibi-end+language_model")
    assert (aux.model.pos_encoding, aux.model.objective) == ("alibi", "language_model")
    with pytest.raises(ValueError, match="causal"):  # an objective needs a causal mask
        generalisation.config(base, "bidirectional-none-mean+next_symbols")


def test_run_records_on_two_processes_equals_running_them_here(tmp_path):
    from dyckbook.pipeline.executors import make_executor

    configs = {"Dyck-2 lstm": generalisation.config(_base(), "lstm"),
               "Dyck-2 causal-rope-end": generalisation.config(_base(), "causal-rope-end")}
    here = generalisation.run_records(configs, [0, 1], tmp_path / "a")
    with make_executor(None, 2) as pool:
        there = generalisation.run_records(configs, [0, 1], tmp_path / "b", pool)
    assert list(there) == list(configs)
    for label in configs:
        assert [r.label for r in there[label]] == [label, label]
        assert ([r.scores["stack"].to_dict() for r in here[label]]
                == [r.scores["stack"].to_dict() for r in there[label]])
    assert len((tmp_path / "b" / "records.jsonl").read_text().splitlines()) == 4
    with pytest.raises(ValueError, match="executor"):
        generalisation.run_records(configs, [0], tmp_path / "c", executor=2)


def _study_params(**kw) -> dict:
    return dict(ks="1,2", configs="causal-rope-end,lstm", depth_configs="causal-none-end",
                n_seeds=2, max_length=10, test_max_length=40, depth_k=2, train_max_depth=2,
                test_max_depth=4, depth_length=16, n_train=160, n_val=40, n_test=80,
                max_steps=6, d_model=16, n_heads=2, d_mlp=32, eval_every=3, **kw)


def test_study_bounds_depth_only_in_the_depth_study():
    """test_max_depth is the depth study's: the length study's test strings have any depth
    (it leaked into them, at 6, until 2026-11-27)."""
    study = generalisation.study(_study_params())
    assert list(study.lengths) == ["Dyck-1 causal-rope-end", "Dyck-1 lstm",
                                   "Dyck-2 causal-rope-end", "Dyck-2 lstm"]
    assert list(study.depths) == ["depth causal-none-end"]
    assert list(study.every) == [*study.lengths, *study.depths]
    for c in study.lengths.values():
        assert (c.data.test_max_depth, c.data.max_depth) == (None, None)
        assert (c.data.test_min_length, c.data.test_max_length, c.data.test_sets) == (
            2, 40, ("hard", "stack"))
    depth = study.depths["depth causal-none-end"].data
    assert (depth.k, depth.max_depth, depth.test_max_depth, depth.max_length) == (2, 2, 4, 16)
    assert "of any depth" in generalisation.recipe_sentence(study.base, 2)
    assert "at most 4 deep" in generalisation.recipe_sentence(study.depths["depth causal-none-end"],
                                                            2)
    with pytest.raises(ValueError, match=r"07's parameters lack \['depth_k'\]"):
        generalisation.study({k: v for k, v in _study_params().items() if k != "depth_k"})


def test_run_records_resumes_from_its_records_and_keeps_only_this_recipes(tmp_path,
                                                                          monkeypatch):
    configs = {"a": generalisation.config(_base(), "causal-rope-end"),
               "b": generalisation.config(_base(), "lstm")}
    first = generalisation.run_records({"a": configs["a"]}, [0, 1], tmp_path)
    other = generalisation.run_records({"x": generalisation.config(_base(window=3), "lstm")},
                                     [0], tmp_path / "other")
    path = tmp_path / "records.jsonl"
    for name in ("records.jsonl", "records.baselines.jsonl"):  # the records and their companion
        (tmp_path / name).write_text((tmp_path / name).read_text()
                                     + (tmp_path / "other" / name).read_text())
    trained = []
    real = generalisation._records

    def spy(config, seeds, device="cpu"):
        trained.append(list(seeds))
        return real(config, seeds, device)

    monkeypatch.setattr(generalisation, "_records", spy)
    again = generalisation.run_records(configs, [0, 1], tmp_path)
    assert trained == [[0, 1]]  # b's two seeds; a's came from the file
    assert [r.to_dict() for r in again["a"]] == [r.to_dict() for r in first["a"]]
    assert [r.label for r in again["b"]] == ["b", "b"]
    lines = path.read_text().splitlines()  # x's record (another recipe) is gone
    assert len(lines) == 4 and other["x"][0].to_dict() not in map(json.loads, lines)
    # and its baselines with it: the companion holds only blobs the kept records name
    named = {json.loads(line)["baselines"] for line in lines}
    assert {json.loads(line)["digest"] for line in (tmp_path / "records.baselines.jsonl")
            .read_text().splitlines()} == named
    trained.clear()
    more = generalisation.run_records(configs, [0, 1, 2], tmp_path)  # a third seed only
    assert trained == [[2], [2]] and [r.seed for r in more["b"]] == [0, 1, 2]


def test_run_records_rejects_a_bad_device(tmp_path):
    with pytest.raises(ValueError, match="device must be"):
        generalisation.run_records({"a": _base()}, [0], tmp_path, device="gpu0")


def _score(per_length: dict[int, tuple[int, int]]) -> Score:
    table = {k: list(v) for k, v in per_length.items()}
    return Score(sum(v[0] for v in table.values()), sum(v[1] for v in table.values()), table,
                 {}, {})


def test_reach_is_the_last_consecutive_bin_that_holds():
    # bins of 16: [17, 32] 100%, [33, 48] 95%, [49, 64] 50%, [65, 80] 100% (after a break)
    score = _score({30: (10, 10), 32: (10, 10), 40: (20, 19), 60: (10, 5), 70: (10, 10)})
    assert generalisation.reach(score, 16, 0.9) == 48
    assert generalisation.reach(score, 16, 0.96) == 32
    assert generalisation.reach(_score({30: (10, 8)}), 16, 0.9) == 0  # the first bin fails
    with pytest.raises(ValueError, match="bin_width"):
        generalisation.reach(score, 0)


def test_reach_rows_count_failed_seeds_and_say_what_was_not_tested():
    def record(per_length, status="ok"):
        return SimpleNamespace(scores={"stack": _score(per_length)}, status=status, steps=100,
                               stopped_at=None, n_params=10, config={"train": {"batch_size": 8}})

    far = {k: (10, 10) for k in range(30, 257, 2)}
    groups = {"Dyck-1 a": [record(far), record(far), record({30: (10, 1)}, "failed")],
              "Dyck-1 b": [record({30: (10, 10), 40: (10, 2)})] * 3}
    rows = generalisation.reach_rows(groups, "stack", 16)
    assert rows[0]["seeds"] == "3 (1 failed)" and rows[0][">= 16N"] == "2/3"
    assert rows[0]["holds to (each seed, xN)"] == "16 16 0"
    assert rows[1][">= 8N"] == "0/3" and rows[1][">= 16N"] == "not tested"  # strings to 40
    # no string of length 256 (Dyck-2's longest stack strings can stop short of it), but the
    # last bin, [241, 256], has strings and holds: the seed reaches 16N, and that was tested
    short_of_16n = {k: (10, 10) for k in range(30, 247, 2)}
    row = generalisation.reach_rows({"Dyck-2 a": [record(short_of_16n)]}, "stack", 16)[0]
    assert row["holds to (each seed, xN)"] == "16" and row[">= 16N"] == "1/1"
    sentence = generalisation.reach_sentence(rows, 0.9)
    assert "Dyck-1 a (2/3 seeds)" in sentence and "Dyck-1 b" not in sentence
    short = generalisation.reach_rows({"Dyck-1 b": groups["Dyck-1 b"]}, "stack", 16)
    assert "not tested" in generalisation.reach_sentence(short, 0.9)
    assert "2N, by Dyck-1 b" in generalisation.reach_sentence(short, 0.9)


def test_probe_rows_read_the_moonshot_probe_and_count_every_seed():
    raw = {"recipe": {"max_length": 16, "batch_size": 64, "target_accuracy": 0.995},
           "test_max_length": 256,
           "tasks": {"Dyck-1 a": {"seeds": [200, 201, 202], "reach_xN": [16.0, 16.0, 3.0],
                                  "status": ["ok", "ok", "failed"], "steps": [3000] * 3,
                                  "test_max_depth": None, "target_accuracy": None},
                     "Dyck-1 b": {"seeds": [100], "reach_xN": [2.0], "status": ["ok"],
                                  "steps": [400], "test_max_depth": 6}}}
    a, b = generalisation.probe_rows(raw)
    assert a["seeds"] == "3 (200-202), 1 failed" and a[">= 16N"] == "2/3"
    assert a["early stop"] == "none" and a["test depth"] == "any" and a["median"] == "16N"
    assert a["strings trained (median)"] == "192,000"
    assert b["early stop"] == "at 99.5% validation" and b["test depth"] == "<= 6"
    assert b["seeds"] == "1 (seed 100)"
    apart = {**raw, "tasks": {"Dyck-1 a": {**raw["tasks"]["Dyck-1 a"], "seeds": [200, 205, 209]}}}
    assert generalisation.probe_rows(apart)[0]["seeds"] == "3 (200, 205, 209), 1 failed"
    assert b["holds to (each seed, xN)"] == "2" and b[">= 16N"] == "0/1"
    assert "Dyck-1 a (2/3 seeds)" in generalisation.reach_sentence([a, b], 0.9)
    a_fails = generalisation.probe_rows({**raw, "tasks": {"Dyck-1 a": {
        **raw["tasks"]["Dyck-1 a"], "reach_xN": [16.0, 3.0, 3.0]}}})
    sentence = generalisation.reach_sentence(a_fails, 0.9)
    assert "no configuration holds it to 16N in a majority" in sentence
    assert "the most seeds held to 16N: 1/3 by Dyck-1 a" in sentence
    # a one-seed row beside a three-seed one: each named with its seeds
    one = generalisation.probe_rows({**raw, "tasks": {
        "Dyck-1 a": {**raw["tasks"]["Dyck-1 a"], "reach_xN": [4.0, 3.0, 3.0]},
        "Dyck-1 b": {**raw["tasks"]["Dyck-1 b"], "reach_xN": [7.0]}}})
    assert ("the furthest median reach is 7N, by Dyck-1 b (1 seed)."
            in generalisation.reach_sentence(one, 0.9))
    assert generalisation.probe_rows({**raw, "test_max_length": 128})[0][">= 16N"] == "not tested"


def test_check_sentence_gives_each_registered_check_its_verdict():
    raw = {"recipe": {"max_length": 16, "batch_size": 64}, "test_max_length": 256,
           "tasks": {f"Dyck-1 {name}": {"seeds": [1, 2, 3], "reach_xN": reach, "status": ["ok"] * 3,
                                        "steps": [400] * 3}
                     for name, reach in (("held", [16.0, 16.0, 2.0]), ("not", [16.0, 2.0, 3.0]))}}
    rows = generalisation.probe_rows(raw)
    sentence = generalisation.check_sentence(rows, ["Dyck-1 held", "Dyck-1 not"])
    assert "Dyck-1 held: 2 of 3 seeds hold to 16N (median 16N), predicted a majority: " \
           "**confirmed**." in sentence
    assert "Dyck-1 not: 1 of 3 seeds hold to 16N (median 3N)" in sentence
    assert sentence.endswith("**rejected**.")
    with pytest.raises(ValueError, match="'Dyck-1 gone' has no row"):
        generalisation.check_sentence(rows, ["Dyck-1 gone"])
    short = generalisation.probe_rows({**raw, "test_max_length": 128})
    with pytest.raises(ValueError, match="tested to 16N"):
        generalisation.check_sentence(short, ["Dyck-1 held"])


def test_probe_rows_of_the_committed_results_agree_with_their_own_seeds():
    import json
    from pathlib import Path

    raw = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "results"
                      / "length_reach.json").read_text())["raw"]
    for row, task in zip(generalisation.probe_rows(raw), raw["tasks"].values(), strict=True):
        assert row[">= 16N"] == f"{sum(x >= 16 for x in task['reach_xN'])}/{len(task['seeds'])}"
        assert row[">= 16N"] == task[">= 16N"]  # the benchmark's own count


def test_length_panels_draw_a_panel_per_language():
    score = _score({10: (200, 200), 30: (200, 120)})
    fig = plotting.plot_length_panels({"Dyck-1": {"a": score}, "Dyck-2": {"a": score}}, 16)
    assert len(fig.axes) == 2 and [ax.get_title() for ax in fig.axes] == ["Dyck-1", "Dyck-2"]
    with pytest.raises(ValueError, match="panels"):
        plotting.plot_length_panels({})


def test_theme_rows_pick_each_theme_and_the_best_transformer_per_language():
    names = ["causal-none-end", "causal-rope-end", "lstm", "stack-rnn",
             "causal-none-end+next_symbols", "causal-none-end+language_model"]
    accuracy = {"causal-none-end": 0.6, "causal-rope-end": 0.7, "lstm": 0.8, "stack-rnn": 0.9,
                "causal-none-end+next_symbols": 0.65, "causal-none-end+language_model": 0.55}
    labels = [f"Dyck-{k} {n}" for k in (1, 2) for n in names]
    stack = [{"label": la, "accuracy": accuracy[la.split(" ")[1]], "low": 0.5, "high": 1.0}
             for la in labels]
    split = [{"configuration": la, "within": "w", "beyond": "b"} for la in labels]
    reaches = [{"configuration": la, "median": "2N", "strings trained (median)": "8"}
               for la in labels]
    refs = generalisation.theme_rows(split, stack, reaches, "references")
    assert [r["configuration"] for r in refs] == ["lstm", "stack-rnn", "causal-rope-end"] * 2
    objectives = generalisation.theme_rows(split, stack, reaches, "objectives")
    assert [r["configuration"] for r in objectives][:3] == names[:1] + names[4:]
    sentence = generalisation.theme_sentence(objectives)
    assert sentence.startswith("Dyck-1: highest on the stack set causal-none-end+next_symbols")
    with pytest.raises(ValueError, match="theme"):
        generalisation.theme_rows(split, stack, reaches, "positions")


def _sided(cells: dict[str, tuple[int, int]]) -> SimpleNamespace:
    table = {key: list(v) for key, v in cells.items()}
    score = Score(sum(v[0] for v in table.values()), sum(v[1] for v in table.values()), {}, {},
                  {}, cells=table)
    return SimpleNamespace(scores={"stack": score})


def test_side_rows_say_on_which_side_each_configuration_errs():
    # N = 16, split at 4N = 64: lengths 40 (near) and 100 (far)
    groups = {
        "Dyck-1 accepts": [_sided({"member|member|40": (10, 10), "far|w>8|40": (10, 9),
                                   "member|member|100": (10, 10), "far|w>8|100": (10, 1)})] * 2,
        "Dyck-1 rejects": [_sided({"member|member|100": (10, 2), "far|w>8|100": (10, 10)})],
        "Dyck-1 holds": [_sided({"member|member|100": (10, 10), "far|w>8|100": (10, 9)})],
        "Dyck-1 guesses": [_sided({"member|member|100": (10, 5), "far|w>8|100": (10, 6)})],
        "Dyck-1 short": [_sided({"member|member|40": (10, 10), "far|w>8|40": (10, 10)})],
    }
    rows = {r["configuration"]: r for r in generalisation.side_rows(groups, "stack", 16)}
    assert [rows[k]["beyond 4N"] for k in groups] == [
        "accepts the negatives", "rejects the members", "holds", "errs both ways",
        "not tested beyond"]
    accepts = rows["Dyck-1 accepts"]
    assert (accepts["members right, to 4N"], accepts["negatives right, to 4N"],
            accepts["negatives right, beyond 4N"]) == ("100.0%", "90.0%", "10.0%")
    sentence = generalisation.side_sentence(list(rows.values()))
    assert sentence.startswith("Beyond 4N: 1 of 5 accepts the negatives (Dyck-1 accepts)")
    twice = generalisation.side_sentence([rows["Dyck-1 accepts"]] * 2 + [rows["Dyck-1 holds"]])
    assert twice.startswith("Beyond 4N: 2 of 3 accept the negatives (Dyck-1 accepts, Dyck-1 "
                            "accepts); 1 of 3 holds (Dyck-1 holds)")
    both = generalisation.side_sentence([rows["Dyck-1 guesses"]] * 2)
    assert both == "Beyond 4N: 2 of 2 err both ways (Dyck-1 guesses, Dyck-1 guesses)."
    with pytest.raises(ValueError, match="split_at"):
        generalisation.side_rows(groups, "stack", 16, split_at=0)
