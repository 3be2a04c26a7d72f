"""The benchmarks: results have the table schema, the README tables are current, scripts parse."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(BENCH.glob("bench_*.py")) + [BENCH / "table.py"]


def load_table():
    spec = importlib.util.spec_from_file_location("bench_table", BENCH / "table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


table = load_table()


def result(**changes) -> dict:
    """A well-formed results file, with ``changes`` applied."""
    data = {"table": [table.row("b", "m", 10.0, 2.0, "≥ 1×")], "raw": {},
            "load_average": [0.5, 0.4, 0.3], "date": "2025-01-01 00:00"}
    return {**data, **changes}


def test_committed_tables_are_current() -> None:
    out = subprocess.run([sys.executable, str(BENCH / "table.py"), "--check"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("path", sorted((BENCH / "results").glob("*.json")), ids=lambda p: p.name)
def test_results_have_the_table_schema(path: Path) -> None:
    table.check_result(json.loads(path.read_text(encoding="utf-8")), path.name)


@pytest.mark.parametrize("bad", [
    {"table": []}, {"load_average": [1.0]}, {"date": None} | {"table": [{"benchmark": "b"}]},
    {"table": [{**table.row("b", "m", 1.0), "extra": 1}]},
    {"table": [{**table.row("b", "m", 1.0), "reference": "fast"}]}])
def test_check_result_rejects_malformed_files(bad: dict) -> None:
    with pytest.raises(ValueError, match="x.json"):
        table.check_result(result(**bad), "x.json")
    data = result()
    del data["date"]
    with pytest.raises(ValueError, match="'date'"):
        table.check_result(data, "x.json")


def test_ratio_is_how_many_times_better() -> None:
    assert table.row("b", "rate", 10.0, 2.0)["ratio"] == 5.0
    assert table.row("b", "time", 2.0, 10.0, lower_is_better=True)["ratio"] == 5.0
    assert table.row("b", "no reference", 2.0)["ratio"] is None


def test_check_sees_a_stale_table_and_writing_fixes_it(tmp_path: Path, monkeypatch) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "demo.json").write_text(json.dumps(result()))
    readme, bench_readme = tmp_path / "README.md", tmp_path / "BENCH.md"
    readme.write_text("intro\n<!-- times:start -->\nold\n<!-- times:end -->\nrest\n")
    bench_readme.write_text("<!-- table:start -->\n<!-- table:end -->\n")
    monkeypatch.setattr(table, "RESULTS", results)
    monkeypatch.setattr(table, "TABLE_FILE", bench_readme)
    monkeypatch.setattr(table, "TIMES_FILE", readme)
    assert table.main(["--check"]) == 1
    assert table.main([]) == 0
    assert table.main(["--check"]) == 0
    text = bench_readme.read_text()
    assert "| b | m | 10 | 2 | 5× | ≥ 1× |" in text and "load average 0.50" in text
    assert readme.read_text().startswith("intro\n") and readme.read_text().endswith("rest\n")
    assert "`make test`: not measured yet" in readme.read_text()
    (results / "make.json").write_text(json.dumps(result(raw={"runs": {"test": {
        "target_seconds": 600, "venv_seconds": 120, "date": "d", "cores": 2,
        "load_average": [0.1, 0.1, 0.1]}}})))
    assert table.main(["--check"]) == 1
    table.main([])
    assert "`make test` about 10 min" in readme.read_text()
    assert "adds about 2 min" in readme.read_text()


def test_a_trial_run_writes_where_it_is_told_and_a_full_one_into_results(tmp_path: Path,
                                                                         monkeypatch) -> None:
    monkeypatch.setattr(table, "RESULTS", tmp_path / "results")
    rows, raw = result()["table"], {"seconds": 1}
    trial = table.save_or_write(tmp_path / "trial.json", "demo", rows, raw, (1, 1, 1), "small")
    assert json.loads(trial.read_text()) == {"raw": raw, "table": rows}
    assert not (tmp_path / "results").exists()
    full = table.save_or_write(tmp_path / "results" / "demo.json", "demo", rows, raw, (1, 1, 1),
                               "full")
    assert full == tmp_path / "results" / "demo.json"
    assert json.loads(full.read_text())["sizes"] == "full"


def test_markers_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="markers"):
        table.between("no markers here", table.TABLE_MARKERS, "body", tmp_path / "x.md")


def test_every_script_parses_its_arguments(monkeypatch, capsys) -> None:
    """Every script's ``main`` prints its usage for ``--help``, and running the file runs it.
    In this process (one import of torch; a subprocess per script took 30 s of make test's
    wall time on 2 cores, most of it importing torch 22 times)."""
    import ast

    failed = {}
    for script in SCRIPTS:
        tree = ast.parse(script.read_text(encoding="utf-8"))
        guard = [node for node in tree.body if isinstance(node, ast.If)
                 and ast.unparse(node.test) == "__name__ == '__main__'"]
        if not guard or "main(" not in ast.unparse(guard[-1]):
            failed[script.name] = "no `if __name__ == '__main__':` calling main()"
            continue
        module = load_bench(script.stem)
        monkeypatch.setattr(sys, "argv", [str(script), "--help"])
        with pytest.raises(SystemExit) as stopped:
            module.main()
        out = capsys.readouterr().out
        if stopped.value.code not in (0, None) or not out.startswith("usage:"):
            failed[script.name] = out[-1000:]
    assert len(SCRIPTS) >= 4 and not failed, failed


def load_bench(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_profile_cost_scales_training_work_by_the_profiles_parameters() -> None:
    cost = load_bench("bench_profile_cost")
    c = {"n_seeds": 3, "epochs": 1, "n_train": 4000, "max_length": 96, "max_steps": 3000}
    t = {"n_seeds": 10, "epochs": 10, "n_train": 40000, "max_length": 4096, "max_steps": 5000}
    assert cost.ratio_of("ood", c, t) == pytest.approx(10 / 3 * 10 * 10)
    assert cost.ratio_of("long", c, t) == pytest.approx(10 / 3 * 10 * 10 * 4096 / 96)
    assert cost.ratio_of("intervention", c, t) == pytest.approx(10 / 3 * 5000 / 3000)
    assert cost.ratio_of("dyck3-budget", {"budgets": "1000:8000"},
                         {"budgets": "1000:8000,5000:32000"}) == pytest.approx(6)
    assert cost.ratio_of("constructions", c, t) == 1.0


def test_profile_cost_counts_the_thesis_literal_steps_from_table_5_1() -> None:
    cost = load_bench("bench_profile_cost")
    from dyckbook.data import presets
    from dyckbook.experiment import run
    for n in range(1, 8):
        e, config = presets.thesis_experiment(n), run.thesis_config(n)
        batch = config.train.batch_size
        assert cost.literal_steps(n, {"max_strings": 10**9, "max_epochs": 10**9}) == (
            e.epochs * -(-config.data.n_train // batch))
        assert cost.literal_steps(n, {"max_strings": 64, "max_epochs": 1}) == -(-64 // batch)


def test_profile_cost_of_completion_is_the_cpu_time_when_the_budgets_agree() -> None:
    cost = load_bench("bench_profile_cost")
    found = {"records|Dyck-3, encoder-decoder, none|k3": {"seconds": 100.0, "steps": 1000.0},
             "records|Dyck-3, decoder-only, learned|k3": {"seconds": 40.0, "steps": 400.0},
             "records|Dyck-3, decoder-only, rope|k3": {"seconds": 20.0, "steps": 250.0},
             "records|BBH Dyck-4, encoder-decoder, learned|k4": {"seconds": 30.0,
                                                                  "steps": 250.0}}
    c = {"n_seeds": 3, "ks": "3", "pos_encodings": "none", "length_max_steps": 250,
         "bbh_max_steps": 250}
    assert cost.completion_seconds(found, c, c) == pytest.approx(190.0)
    # twice the seeds and ks, one more encoder-decoder position, the main budgets elsewhere
    t = {"n_seeds": 6, "ks": "1,3", "pos_encodings": "none,learned", "length_max_steps": 0,
         "bbh_max_steps": 0}
    main = 2 * 2 * (100 + 40) + 2 * 2 * 100
    assert cost.completion_seconds(found, c, t) == pytest.approx(
        main + 2 * 20 * 400 / 250 + 2 * 30 * 1000 / 250)


def test_readme_times_state_the_profiles_cost_from_its_numbers() -> None:
    cost = {"date": "2026-11-27 14:00", "raw": {
        "runs": [{"run": "a", "cpu_seconds": 3600.0, "thesis_seconds": 36000},
                 {"run": "long", "cpu_seconds": 1800.0, "thesis_seconds": 7200000},
                 {"run": "b", "cpu_seconds": None, "thesis_seconds": None}],
        "gpu": [{"run": "long", "gpu_seconds": 360000, "gpu": "NVIDIA H100 80GB HBM3"}],
        "total_seconds": 7236000}}
    text = table.render_times(None, cost)
    assert ("about 2,010 h here without b, 2,000 h of it long context (about 100.0 h on an H100)"
            " (`bench") in text  # one GPU row: no whole-profile figure
    cost["raw"]["gpu"] += [{"run": "a", "gpu_seconds": 7200, "gpu": "NVIDIA H100 80GB HBM3"}]
    assert "; on one H100: about 102.0 h (`bench" in table.render_times(None, cost)
    cost["raw"]["gpu"][1]["lower_bound"] = True
    assert ("; on one H100: at least 102.0 h (1 of its runs costed by their training alone or "
            "not at all)") in table.render_times(None, cost)
    cost["raw"]["gpu"][1]["lower_bound"] = False
    cost["raw"]["gpu"][1]["gpu_seconds"] = None
    assert "at least 100.0 h (1 of its runs" in table.render_times(None, cost)
    assert "2026-11-27" in text and table.render_times(None) in text
    make = {"raw": {"runs": {"book": {"target_seconds": 13.4, "date": "2026-11-25 10:00",
                                      "cores": 2, "load_average": [1.0], "venv_seconds": 74}}}}
    # issue 51: `make book` builds from the committed results in seconds (it said "about 0 min")
    assert ("`make book` about 13 s (measured 2026-11-25 10:00, 2 cores, load 1.0); `.venv` adds"
            " about 74 s the first time.") in table.render_times(make, cost)
    # a full recompute is its own sentence, from the runs' own records
    assert ("A full recompute of the cpu profile (`make book RERUN=all`): about 1.5 h of runs on"
            " 2 cores, each run at its last recorded duration: a run resumed from the run cache "
            "counts only its resume, so a lower bound.") in table.render_times(make, cost)
    full = {**cost, "raw": {**cost["raw"], "runs": [{**r, "resumed_at_full_duration": True}
                                                     for r in cost["raw"]["runs"]]}}
    assert "about 1.5 h of runs on 2 cores, each run at its longest recorded duration." in \
        table.render_times(make, full)
    full["raw"]["runs"][0]["resumed_models"] = True
    assert ("each run at its longest recorded duration (a: its models' training alone, resumed "
            "from a cache: a lower bound).") in table.render_times(make, full)
    make["raw"]["runs"]["book"]["target_seconds"] = 2907.2
    assert "`make book` about 48 min (measured" in table.render_times(make, cost)


def test_readme_times_state_what_each_notebooks_defaults_take() -> None:
    """Issue 54: README promised that a notebook's defaults finish in about a minute;
    10_completion's took 1,129 CPU-s."""
    defaults = {"date": "2026-11-28 09:00", "raw": {"cores": 2, "notebooks": {
        "01_dyck1": {"cpu_seconds": 163.0, "wall_seconds": 90.0, "status": "ok"},
        "10_completion": {"cpu_seconds": 1129.0, "wall_seconds": 600.0, "status": "ok"},
        "07_generalisation": {"cpu_seconds": 1800.0, "wall_seconds": 1800.0,
                              "status": "stopped after 1800 s"}}}}
    text = table.render_times(None, None, defaults)
    assert text.startswith(table.render_times(None))
    assert text.endswith(" A notebook's defaults (`papermill` without `-p`), CPU time on 2 "
                         "cores: 01_dyck1 3 min, 10_completion 19 min, 07_generalisation not "
                         "measured (stopped after 1800 s) (`bench_defaults.py`, 2026-11-28).")
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "defaults finish in about a minute" not in readme


def test_profile_cost_counts_a_resumed_run_at_its_full_duration() -> None:
    """Issue 54: the README's 9.4 h summed each run's last duration, so a run resumed from the
    run cache counted only its resume (models_training: 10.5 s on record, 175 s rerun)."""
    from dyckbook.pipeline import runner

    cost = load_bench("bench_profile_cost")
    m = runner.load_manifest()
    cpu, thesis = ({r.name: r for r in runner.resolve_profile(m, p)}["models_training"]
                   for p in ("cpu", "thesis"))
    resumed = {"status": "ok", "duration_s": 10.5, "longest_s": 175.0}
    row = cost.estimate("models_training", cpu, thesis, resumed, None)
    assert row["cpu_seconds"] == 175.0 and row["resumed_at_full_duration"]
    fresh = cost.estimate("models_training", cpu, thesis, {"duration_s": 12.0}, None)
    assert fresh["cpu_seconds"] == 12.0


def test_profile_cost_of_long_context_training_at_the_measured_rate(tmp_path, monkeypatch):
    cost = load_bench("bench_profile_cost")
    monkeypatch.setattr(cost.table, "RESULTS", tmp_path)

    class Run:
        params = {"n_seeds": 2, "epochs": 3, "n_train": 1000, "max_length": 4096}
    assert cost.long_training({"long": Run()}) is None  # nothing measured yet
    raw = {"exp7_4096": {"per_1000": {"current": 1500.0, "previous": 9000.0}}}
    (tmp_path / "dropout.json").write_text(json.dumps({"raw": raw, "date": "2026-11-27 15:00"}))
    got = cost.long_training({"long": Run()})
    assert got["sequences"] == 6000 and got["cpu_seconds"] == pytest.approx(9000.0)
    Run.params = {**Run.params, "max_length": 2048}  # another length: not measured
    assert cost.long_training({"long": Run()}) is None


def test_the_gpu_plan_is_what_each_notebook_trains(monkeypatch) -> None:
    """bench_gpu's ``runs`` part times what each heavy run's own notebook trains: its code cells
    run with the profile's parameters, the training calls recording their configurations, on a
    GPU machine without the book's packages (myst_nb: 12's first glue, before it trains)."""
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # import myst_nb: ModuleNotFoundError
    gpu = load_bench("bench_gpu")
    from dyckbook.experiment.run import RunConfig

    planned = gpu.plan(profiles=("smoke",))
    assert set(planned) == set(gpu.HEAVY)
    cost = load_bench("bench_profile_cost")
    assert set(gpu.HEAVY) == set(cost.TRAINING)  # the GPU column's runs are the timed ones
    for name, profiles in planned.items():
        groups = profiles["smoke"]
        assert groups, name
        for g in groups:
            assert isinstance(g["config"], RunConfig) and g["steps"] >= 1 and g["seeds"] >= 1
    grid = planned["ablation-grid"]["smoke"]  # the smoke cells, one seed each (the manifest)
    assert [g["label"] for g in grid] == ["records|k1-L1-bidirectional-learned-start",
                                          "records|k1-L1-causal-none-start",
                                          "records|k1-L1-causal-learned-mean"]
    assert {g["seeds"] for g in grid} == {1} and {g["steps"] for g in grid} == {40}
    literal = planned["thesis-literal"]["smoke"]  # 00 at smoke: experiments 1, 2, 6
    assert [g["label"] for g in literal] == ["experiment 1", "experiment 2", "experiment 6"]
    assert {g["network"] for g in literal} == {1}  # the port trains a seed at a time


def test_profile_cost_gpu_column_from_the_cards_rates() -> None:
    """Every run of the thesis profile gets a GPU figure from a ``gpu.json`` with a ``runs``
    part (a fabricated one here): training on the card plus its host work; none from an older
    file without it."""
    cost = load_bench("bench_profile_cost")
    thesis = ["long", "dyck1", "summary", "ood"]
    host = {"long": 100.0, "dyck1": 50.0, "summary": 20.0, "ood": 10.0}
    groups = [{"label": "a", "seconds": 3000.0, "timed": True},
              {"label": "b", "seconds": 600.0, "timed": False}]
    data = {"date": "2026-12-01 10:00", "raw": {"device": "NVIDIA H100 80GB HBM3", "runs": {
        "long": {"thesis": {"training_seconds": 3600.0, "groups": groups, "estimated": 1},
                 "cpu": {"training_seconds": 36.0, "groups": groups, "estimated": 1}},
        "dyck1": {"thesis": {"training_seconds": 900.0, "groups": groups[:1],
                             "estimated": 0}}}}}
    rows = {r["run"]: r for r in cost.gpu_rows(data, thesis, host)}
    assert rows["long"]["gpu_seconds"] == 3700 and rows["dyck1"]["gpu_seconds"] == 950
    assert rows["summary"]["gpu_seconds"] == 20 and "trains nothing" in rows["summary"]["how"]
    assert rows["ood"]["gpu_seconds"] is None  # trains, but the card did not time it
    assert {r["gpu"] for r in rows.values()} == {"NVIDIA H100 80GB HBM3"}
    assert "1 untimed" in rows["long"]["how"] and "2026-12-01" in rows["long"]["how"]
    old = {"date": "2026-11-26 10:00", "raw": {"device": "NVIDIA H200"}, "table": []}
    assert cost.gpu_rows(old, thesis, host) == [] and cost.gpu_rows(None, thesis, host) == []
    partial = {k: v for k, v in host.items() if k not in ("long", "summary")}  # --partial
    rows = {r["run"]: r for r in cost.gpu_rows(data, thesis, partial)}
    assert rows["long"]["gpu_seconds"] == 3600 and rows["long"]["lower_bound"]  # training alone
    assert "lower bound" in rows["long"]["how"] and not rows["dyck1"]["lower_bound"]
    assert rows["summary"]["gpu_seconds"] is None  # trains nothing, and no cpu time here


def test_profile_cost_partial_takes_unpublished_runs_from_the_earlier_record(tmp_path,
                                                                            monkeypatch):
    """``--partial``: a cpu run not published here is costed from the profile_cost.json
    already here, marked with that record's date; its host work is unknown where it trains."""
    cost = load_bench("bench_profile_cost")
    monkeypatch.setattr(cost.table, "RESULTS", tmp_path)
    assert cost.earlier_estimates(["ablation-grid"]) == {}  # no earlier record
    runs = [{"run": "ablation-grid", "cpu_seconds": 8442.5, "thesis_seconds": 14071,
             "how": "training work ratio", "measured_thesis_seconds": None},
            {"run": "summary", "cpu_seconds": 4.0, "thesis_seconds": 4,
             "how": "no training at a larger size: its cpu time"}]
    (tmp_path / "profile_cost.json").write_text(json.dumps(
        {"date": "2026-11-27 15:56", "raw": {"runs": runs}}))
    got = cost.earlier_estimates(["ablation-grid", "summary", "completion"])
    assert set(got) == {"ablation-grid", "summary"}  # completion: in no record
    grid = got["ablation-grid"]
    assert grid["thesis_seconds"] == 14071 and grid["host_seconds"] is None
    assert grid["from_record"] == "2026-11-27" and "costed on 2026-11-27" in grid["how"]
    assert got["summary"]["host_seconds"] == 4.0  # trains nothing: its cpu time is its cost
    (tmp_path / "profile_cost.json").write_text(json.dumps(  # carried again: one mark, first date
        {"date": "2026-11-30 10:00", "raw": {"runs": list(got.values())}}))
    again = cost.earlier_estimates(["ablation-grid"])["ablation-grid"]
    assert again["from_record"] == "2026-11-27" and again["how"].count("costed on") == 1


def test_profile_cost_groups_skip_the_baselines_companion(tmp_path, monkeypatch) -> None:
    """A run's records with their baselines' companion file (results.append_records): the
    groups are read from the records alone."""
    cost = load_bench("bench_profile_cost")
    monkeypatch.setattr(cost, "ROOT", tmp_path)
    record = {"label": "x", "seconds": 5.0, "steps": 10, "config": {"data": {"k": 3}}}
    (tmp_path / "records.jsonl").write_text(json.dumps(record) + "\n")
    (tmp_path / "records.baselines.jsonl").write_text(json.dumps({"digest": "d",
                                                                   "baselines": {}}) + "\n")

    class Run:
        params = {"results_dir": "."}
    assert cost.groups(Run()) == {"records|x|k3": {"seconds": 5.0, "steps": 10.0}}


def test_bench_gpu_adopts_a_device_file_keeping_the_parts_it_did_not_measure(tmp_path):
    gpu = load_bench("bench_gpu")
    old = {"date": "2026-11-26 10:54", "raw": {"device": "NVIDIA H100 80GB HBM3", "torch": "2",
                                               "speed": {"a": 1}, "dropout": {"b": 2}}}
    new = {"date": "2026-11-28 18:33", "table": [], "raw": {"device": "NVIDIA H200",
                                                            "speed": {"a": 3}, "runs": {}}}
    out, got = tmp_path / "gpu.json", tmp_path / "device.json"
    out.write_text(json.dumps(old))
    got.write_text(json.dumps(new))
    gpu.adopt(got, out)
    merged = json.loads(out.read_text())
    assert merged["raw"]["speed"] == {"a": 3} and merged["raw"]["device"] == "NVIDIA H200"
    assert merged["raw"]["earlier"] == {"dropout": {"device": "NVIDIA H100 80GB HBM3",
                                                    "date": "2026-11-26 10:54",
                                                    "value": {"b": 2}}}
    got.write_text(json.dumps({"raw": {}}))
    with pytest.raises(SystemExit, match="not a gpu.json"):
        gpu.adopt(got, out)
