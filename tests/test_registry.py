"""Tests for dyckbook.claims.registry: every profile's verdict-bearing recipe is registered, a run
whose recipe differs from its registration is not judged, and the history says what changed."""

import json
from types import SimpleNamespace

import pytest

from dyckbook.chapters import re_examining_thesis
from dyckbook.claims import registry
from dyckbook.claims.verdicts import RULES, UNREGISTERED, Evidence, verdicts
from dyckbook.pipeline import runner

PROFILES = ("smoke", "cpu", "thesis")


@pytest.mark.parametrize("profile", PROFILES)
def test_every_verdict_bearing_recipe_is_registered(profile):
    """Fails when a recipe (experiments.yml, a notebook default, a rule's text or the interval
    method) changed without ``python -m dyckbook register``."""
    regs = registry.load()
    runs = {r.name: r.params for r in runner.resolve_profile(runner.load_manifest(), profile)}
    for run in registry.verdict_runs():
        latest = registry.current(regs, profile, run)
        assert latest is not None, f"{profile}/{run}: not registered"
        assert latest.digest == registry.digest(run, runs[run]), (
            f"{profile}/{run}: recipe differs from registration {latest.id}; register it anew")
        assert latest.claims == registry.claims_of(run)


def test_registrations_are_append_only_and_each_says_why():
    regs = registry.load()
    assert [r.id for r in regs] == list(range(1, len(regs) + 1))
    assert all(r.note.strip() and r.registered.endswith("Z") for r in regs)
    assert {r.run for r in regs} == set(registry.verdict_runs())


def _params(**changes):
    return {"n_seeds": 5, "lr": 0.003, "max_steps": 100, "run_name": "ablation-grid",
            "results_dir": "x", "num_threads": 2, "workers": 0, **changes}


def test_register_appends_only_what_changed(tmp_path):
    path = tmp_path / "registrations.yml"
    with pytest.raises(ValueError, match="note must say why"):
        registry.register("cpu", {"ablation-grid": _params()}, " ", path)
    first = registry.register("cpu", {"ablation-grid": _params(), "other": {}}, "first", path,
                              now="2026-01-01T00:00:00Z")
    assert [(r.id, r.run) for r in first] == [(1, "ablation-grid")]
    assert "num_threads" not in first[0].recipe and "workers" not in first[0].recipe
    # execution settings do not change the digest; the recipe does
    assert registry.register("cpu", {"ablation-grid": _params(workers=4, num_threads=1)},
                             "same", path) == []
    second = registry.register("cpu", {"ablation-grid": _params(n_seeds=10)}, "more seeds", path,
                               now="2026-01-02T00:00:00Z")
    assert [r.id for r in second] == [2] and second[0].digest != first[0].digest
    history = re_examining_thesis.history_rows(registry.load(path))
    assert history[0]["changed"] == "first registration" and history[0]["no."] == "1"
    assert history[1]["changed"] == "n_seeds: 5 -> 10" and history[1]["why"] == "more seeds"
    # registered together (same time, same note): one row
    registry.register("cpu", {"ablation-grid": _params(n_seeds=10, lr=0.1),
                              "generalisation": _params()}, "both", path,
                      now="2026-01-03T00:00:00Z")
    last = re_examining_thesis.history_rows(registry.load(path))[-1]
    # issue 65: a range never wraps at its hyphen (a non-breaking hyphen, U+2011)
    assert all("-" not in row["no."] and " " not in row["no."]
               for row in re_examining_thesis.history_rows(registry.load(path)))
    assert last["no."] == "3\u20114" and last["changed"] == "lr: 0.003 -> 0.1; first registration"
    assert last["runs (profile, run, digest)"].count("cpu `") == 2


def _run_json(folder, params, finished="2026-01-03T00:00:00+00:00", profile="cpu"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").write_text(json.dumps({"profile": profile, "run": "ablation-grid",
                                                 "params": params, "finished": finished}))
    return str(folder)


def test_check_names_every_reason_a_run_is_not_judged(tmp_path):
    path = tmp_path / "registrations.yml"
    (reg,) = registry.register("cpu", {"ablation-grid": _params()}, "first", path,
                               now="2026-01-02T00:00:00Z")
    regs = registry.load(path)
    record = {"profile": "cpu", "run": "ablation-grid", "params": _params(),
              "finished": "2026-01-03T00:00:00+00:00"}
    assert registry.check(record, regs) == (reg, "")
    moved = {**record, "params": _params(lr=0.001)}
    assert "not the registered" in registry.check(moved, regs)[1]
    early = {**record, "finished": "2026-01-01T12:00:00+00:00"}
    assert "before its registration" in registry.check(early, regs)[1]
    unfinished = {k: v for k, v in record.items() if k != "finished"}
    assert "does not say when it finished" in registry.check(unfinished, regs)[1]
    assert "does not say when it finished" in registry.check({**record, "finished": ""},
                                                             regs)[1]
    assert registry.check({**record, "profile": "smoke"}, regs) == (
        None, "run `ablation-grid` of profile `smoke` has no registered recipe")


def test_a_label_changes_when_the_recipe_changes_without_a_new_registration(tmp_path):
    """The same records, judged twice: once with the run's recipe as registered, once after a
    recipe change nobody registered. The second time the claims are not judged."""
    path = tmp_path / "registrations.yml"
    registry.register("cpu", {"ablation-grid": _params()}, "first", path,
                      now="2026-01-02T00:00:00Z")
    regs = registry.load(path)
    evidence = {name: Evidence(name, (0.9,) * 5) for r in RULES for name in r.needs}
    evidence.update(one_layer_k1=Evidence("one", (0.999,) * 5))
    ok = _run_json(tmp_path / "ok", _params())
    problems, registered = re_examining_thesis.registration_check([ok], regs)
    assert "layers_k1" not in problems and registered["layers_k1"].id == 1
    assert problems["bidirectional_k1"] == "no run record of `dyck1` among the folders read"
    before = {v.rule.claim: v.label for v in verdicts(evidence, problems)}
    changed = _run_json(tmp_path / "changed", _params(max_steps=50))
    problems, _ = re_examining_thesis.registration_check([changed], regs)
    after = {v.rule.claim: v.label for v in verdicts(evidence, problems)}
    assert before["layers_k1"] == "refuted" and after["layers_k1"] == UNREGISTERED
    assert "not the registered" in problems["layers_k1"]
    rows = re_examining_thesis.verdict_rows(verdicts(evidence, problems), evidence, registered)
    row = next(r for r in rows if r["claim"].endswith("(`layers_k1`)"))
    assert row["verdict"].startswith(UNREGISTERED) and row["recipe"].startswith("`")


def test_learned_sentence_reports_the_models_left_out():
    explain = {"partner_attention": [0.6, 0.7], "models": 3, "learned": 2, "learned_bar": 0.95,
               "not_learned": {"partner_attention": [0.1], "preview_auc": [0.5],
                               "head_reset_drop": [0.0], "previous_share": [0.4]}}
    text = re_examining_thesis.learned_sentence(explain)
    assert "pool the 2 of 3 explainability models that learned" in text
    assert "The attention verdicts read each language's own" in text
    assert text.endswith("The other 1, apart: partner attention 0.100, preview auc 0.500, "
                         "head reset drop 0.000 (means).")
    assert re_examining_thesis.learned_sentence({}) == ""


def test_learned_sentence_says_which_languages_learned_and_when_the_baselines_coincide():
    explain = {"models": 4, "learned": 2, "learned_bar": 0.95, "not_learned": {},
               "previous_share": [0.5, 0.6], "recent_share": [0.5, 0.6]}
    records = [SimpleNamespace(config={"data": {"k": k}}, accuracy=lambda test, a=a: a)
               for k, a in ((1, 0.99), (1, 0.97), (3, 0.6), (3, 0.7))]
    by = re_examining_thesis.learned_by_language(records, 0.95)
    assert by == {1: (2, 2), 3: (0, 2)}
    text = re_examining_thesis.learned_sentence(explain, by)
    assert "Dyck-1: 2 of 2; Dyck-3: 0 of 2" in text and "say nothing about Dyck-3" in text
    assert "two baselines coincide" in text
    apart = {**explain, "recent_share": [0.5, 0.4]}  # Dyck-3's can differ: no such sentence
    assert "coincide" not in re_examining_thesis.learned_sentence(apart, by)


def test_coverage_sentence_measures_at_the_builds_seed_counts():
    text = re_examining_thesis.coverage_sentence([10, 5, 5, 1], n_sim=300)
    assert text.startswith("Intervals: the hull of the Student-t")
    assert "5 seeds: 0." in text and "10 seeds: 0." in text and "1 seeds" not in text


def test_ceilings_regenerate_the_first_seeds_test_set():
    from types import SimpleNamespace

    from dyckbook.data.protocol import DataConfig, make_splits
    from dyckbook.experiment.run import RunConfig
    from dyckbook.nn.model import ModelConfig
    from dyckbook.rules.baselines import order_blind_ceiling

    data = DataConfig(k=3, min_length=2, max_length=10, n_train=200, n_val=40, n_test=200)
    records = [SimpleNamespace(label="exp. 3: bidirectional, [start]",
                               config=RunConfig(data=data, model=ModelConfig(k=3, n_ctx=10),
                                                seed=s).to_dict()) for s in (4, 2)]
    test = make_splits(data, 2).tests["hard"]
    assert re_examining_thesis.ceilings(records) == {
        3: order_blind_ceiling(test.codes, test.lengths, test.labels)}


def test_the_digest_follows_the_results_version_and_what_a_named_set_expands_to(monkeypatch):
    """The one rule (``recipe``): a registration's digest moves with the results version and
    with what ``cells: reduced`` expands to, and with no code (a refactor leaves it judged)."""
    from dyckbook.experiment import grid, recipe

    params = _params()
    before = registry.digest("ablation-grid", params)
    monkeypatch.setattr(recipe, "RESULTS_VERSION", recipe.RESULTS_VERSION + 1)
    assert registry.digest("ablation-grid", params) != before
    monkeypatch.undo()
    assert registry.digest("ablation-grid", params) == before
    named = {**params, "cells": "reduced"}
    fewer = grid.cells_named("reduced")[:-1]
    was = registry.digest("ablation-grid", named)
    monkeypatch.setitem(grid.CELL_SETS, "reduced", lambda: fewer)
    assert registry.digest("ablation-grid", named) != was


def test_a_carried_over_registration_keeps_the_time_of_the_one_it_carries(tmp_path):
    """An entry ``of`` an earlier registration judges runs finished after the earlier one."""
    reg = registry.Registration(1, "2026-01-01T00:00:00Z", "cpu", "dyck1", ("c",), "old", {})
    carried = registry.Registration(2, "2026-06-01T00:00:00Z", "cpu", "dyck1", ("c",),
                                    registry.digest("dyck1", {}), {}, "carried", of=1)
    record = {"profile": "cpu", "run": "dyck1", "params": {}, "finished": "2026-03-01T00:00:00Z"}
    assert registry.check(record, [reg, carried]) == (carried, "")
    assert registry.registered_at(carried, [reg, carried]) == reg.registered
    plain = registry.Registration(2, "2026-06-01T00:00:00Z", "cpu", "dyck1", ("c",),
                                  registry.digest("dyck1", {}), {}, "new")
    assert "before its registration 2" in registry.check(record, [reg, plain])[1]
    path = tmp_path / "r.yml"
    registry.write(path, [reg, carried])
    assert registry.load(path) == [reg, carried]
    assert "of:" not in path.read_text().split("- id: 2")[0]


def test_a_registration_written_after_its_results_is_judged_and_said_not_blind(tmp_path):
    """A run that finished before its registration is not judged, unless the design history
    names that registration among those judged after their results: then it is judged, and
    every place that shows the registration says it is not blind."""
    path = tmp_path / "registrations.yml"
    (reg,) = registry.register("cpu", {"ablation-grid": _params()}, "late", path,
                               now="2026-01-02T00:00:00Z")
    regs = registry.load(path)
    early = {"profile": "cpu", "run": "ablation-grid", "params": _params(),
             "finished": "2026-01-01T12:00:00+00:00"}
    assert "before its registration" in registry.check(early, regs, changes=[])[1]
    change = registry.DesignChange("2026-01-02T00:00:00Z", "abc1234", "a rule", "every result",
                                   "registration 1", judged_after=(reg.id,))
    assert registry.post_hoc(reg, [change]) is change
    assert registry.post_hoc(reg, [registry.DesignChange("d", "c", "x", "y", "z")]) is None
    assert registry.check(early, regs, changes=[change]) == (reg, "")
    bad = tmp_path / "design.yml"
    bad.write_text("- {date: d, commit: c, change: x, seen: y, registered: z, "
                   "judged_after: [one]}\n")
    with pytest.raises(ValueError, match="judged_after must be a list of registration ids"):
        registry.design(bad)
    # the repository's own history: the learning study's registrations are said not blind
    learning = [r for r in registry.load() if r.run == "learning-dyck3" and r.profile == "cpu"]
    assert learning and all(registry.post_hoc(r) is not None for r in learning)


def test_the_design_history_is_read_and_checked(tmp_path):
    assert all(c.commit and c.seen for c in registry.design())  # the repository's own file
    path = tmp_path / "design.yml"
    path.write_text("- {date: '2026-01-01', commit: abc, change: x, seen: y}\n")
    with pytest.raises(ValueError, match="must have the keys"):
        registry.design(path)


def test_held_out_sentence_names_a_choice_that_failed_on_its_own_seed():
    rule = RULES[0]
    failed = Evidence("causal k1", (1.0, 0.5, 0.99), chosen=("a", "b", "a"), n_failed=1)
    fine = Evidence("other", (1.0, 1.0), chosen=("a", "a"))
    text = re_examining_thesis.held_out_sentence([SimpleNamespace(rule=rule, evidence=(failed,)),
                                                  SimpleNamespace(rule=rule, evidence=(fine,))])
    assert f"`{rule.claim}` (causal k1: 1 of 3 seeds" in text
    assert "position 2, whose choice b scored 0.500" in text and "This is intended" in text
    assert re_examining_thesis.held_out_sentence(
        [SimpleNamespace(rule=rule, evidence=(fine,))]) == ""


# ------------------------------------------------------------------ blindness, from git
def _git(root, *args, when=None):
    import os
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    if when:
        env.update(GIT_AUTHOR_DATE=when, GIT_COMMITTER_DATE=when)
    return subprocess.run(["git", "-C", str(root), *args], check=True, env=env,
                          capture_output=True, text=True)


def _shallow_or_none() -> bool:
    import subprocess

    done = subprocess.run(["git", "-C", str(registry.R.source_root()), "rev-parse",
                           "--is-shallow-repository"], capture_output=True, text=True)
    return done.returncode != 0 or done.stdout.strip() != "false"


def test_blindness_is_read_from_a_synthetic_git_history(tmp_path):
    """Issue 64: a registration is blind only if no result of its run was in git before its
    recipe was fixed, the design history does not judge it after its results, and its note
    does not say otherwise."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "README").write_text("x\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "start", when="2026-01-01T00:00:00+00:00")
    folder = tmp_path / "book" / "results" / "cpu" / "06_ablation_grid" / "ablation-grid"
    folder.mkdir(parents=True)
    (folder / "records.jsonl").write_text("{}\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "results", when="2026-01-03T12:00:00+00:00")
    paths = ["book/results/cpu/06_ablation_grid/ablation-grid",
             "book/results/cpu/06_ablation_grid/.ablation-grid.attempt"]
    first = registry.first_commit(paths, tmp_path)
    assert first == "2026-01-03T12:00:00+00:00"
    assert registry.first_commit(["nothing/here"], tmp_path) is None
    assert registry.first_commit(paths, tmp_path / "README") is None  # not a checkout
    path = tmp_path / "registrations.yml"
    (before,) = registry.register("cpu", {"ablation-grid": _params()}, "first", path,
                                  now="2026-01-02T00:00:00Z")
    (after,) = registry.register("cpu", {"ablation-grid": _params(lr=0.001)}, "second", path,
                                 now="2026-01-04T00:00:00Z")
    (said,) = registry.register("cpu", {"ablation-grid": _params(lr=0.002)},
                                "rules changed with results known: not blind", path,
                                now="2026-01-02T06:00:00Z")
    regs = registry.load(path)
    assert registry.blind(before, regs, first, changes=[]) == (True, "")
    ok, why = registry.blind(after, regs, first, changes=[])
    assert not ok and "committed at 2026-01-03T12:00:00+00:00, before it" in why
    assert registry.blind(said, regs, first, changes=[]) == (
        False, "its note says it is not blind")
    change = registry.DesignChange("2026-01-02T00:00:00Z", "abc1234", "a rule", "all",
                                   "registration 1", judged_after=(before.id,))
    assert "design history judges it after its results (abc1234)" in registry.blind(
        before, regs, first, changes=[change])[1]


@pytest.mark.skipif(_shallow_or_none(), reason="needs the repository's full git history")
def test_every_registration_made_after_results_of_its_run_says_it_is_not_blind():
    """The repository's own registrations: where a result of the run was committed before a
    registration, the design history (or its note) must say so, so its page and verdict row
    read "not blind". Registrations superseded by a later one of the same run keep their
    history; the ones in force are checked."""
    from dyckbook.pipeline.manifest import load_manifest

    manifest, regs = load_manifest(), registry.load()
    in_force = {(r.profile, r.run): r for r in regs}.values()
    checked = []
    for r in in_force:
        if r.profile != "cpu" or r.run not in manifest.runs:
            continue
        group = manifest.notebooks[manifest.runs[r.run][0]].group
        first = registry.first_commit([f"book/results/cpu/{group}/{r.run}",
                                       f"book/results/cpu/{group}/.{r.run}.attempt"])
        ok, why = registry.blind(r, regs, first)
        committed_before = first is not None and registry._utc(first) < registry._utc(
            registry.registered_at(r, regs))
        if committed_before:
            assert registry.post_hoc(r) is not None or "not blind" in r.note.lower(), (
                f"registration {r.id} ({r.run}) came after its run's results ({first}) and "
                f"neither the design history nor its note says so")
        checked.append((r.run, ok))
    assert dict(checked)["beyond-lengths"] is True  # registered before any of its results
    assert dict(checked)["learning-dyck3"] is False and dict(checked)["ablation-grid"] is False


@pytest.mark.skipif(_shallow_or_none(), reason="needs the repository's full git history")
def test_the_design_history_matches_git():
    """Issue 64: every entry's commit exists and its date is that commit's, to the second
    (the history had dated 5325287 ten minutes late and named a results commit for
    learnable_k3's rule)."""
    import subprocess

    for change in registry.design():
        done = subprocess.run(["git", "-C", str(registry.R.source_root()), "show", "-s",
                               "--format=%cI", change.commit], capture_output=True, text=True)
        assert done.returncode == 0, f"design history names {change.commit}, not in git"
        assert registry._utc(done.stdout.strip()) == registry._utc(change.date), (
            f"{change.commit}: the design history says {change.date}, git {done.stdout.strip()}")
