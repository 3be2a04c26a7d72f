"""dyckbook.params: the rules, and every notebook's check of its parameters before it trains.

The notebook tests execute only a notebook's parameters cell and the cell after it (its
``params.check`` call) in a plain namespace: no papermill, no kernel, nothing trained.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dyckbook.pipeline import params

REPO = Path(__file__).resolve().parent.parent
SOURCES = sorted([*(REPO / "notebooks").glob("*.ipynb"), *(REPO / "book").glob("*.ipynb")])


def _problems(**kw: Any) -> str:
    """The ValueError of ``params.check`` on the values and rules given as ``name=(value,
    rule)``, or "" when every value passes."""
    values = {k: v for k, (v, _) in kw.items()}
    try:
        params.check(values, **{k: r for k, (_, r) in kw.items()})
    except ValueError as error:
        return str(error)
    return ""


# ------------------------------------------------------------------------ the rules


@pytest.mark.parametrize(("rule", "good", "bad", "must"), [
    (params.positive_int, [1, 7, np.int64(3)], [0, -1, True, "3", 1.0, None], "an int >= 1"),
    (params.nonneg_int, [0, 5], [-1, False, "0", 0.5], "an int >= 0"),
    (params.integer(1, 7), [1, 7], [0, 8], "an int in 1..7"),
    (params.integer(2, multiple_of=2), [2, 64], [0, 11, "12"], "an int >= 2 and a multiple of 2"),
    (params.positive, [1, 1e-4, 3], [0, 0.0, -1e-3, math.nan, math.inf, True, "1e-3"],
     "a number > 0"),
    (params.nonneg, [0, 0.0, 2.5], [-0.1, "0", False], "a number >= 0"),
    (params.fraction, [0, 0.5, 1.0], [-0.01, 1.01, "0.5"], "a number in [0, 1]"),
    (params.number(above=0, high=1), [1, 0.995], [0, 0.0, 1.5], "a number in (0, 1]"),
    (params.number(0, below=1), [0.0, 0.9], [1, 1.0, -0.5], "a number in [0, 1)"),
    (params.one_of("mean", "zero"), ["mean", "zero"], ["Mean", "", 0, None, ["mean"]],
     "one of mean|zero"),
    (params.one_of(1, 2), [1, 2], ["1", True, 1.0], "one of 1|2"),
    (params.boolean, [True, False], [1, 0, "True", None], "True or False"),
    (params.text, ["a", "scratch/x"], ["", "   ", 3, None], "a non-empty string"),
    (params.comma_list("none", "learned", "sinusoidal"),
     ["none", "none,learned", " learned , sinusoidal"],
     ["xpos", "none,xpos", "", "none,,learned", "none,", 3, None, ["none"]],
     "a comma list of none|learned|sinusoidal"),
    (params.comma_list(), ["scratch/a", "a,b"], ["", "a,,b", 3],
     "a comma list of non-empty strings"),
    (params.int_list(1, 7), ["1", "1,3", 3, "2, 5"], ["0", "1,8", "1,x", "", 1.5, True, "1.0"],
     "a comma list of ints in 1..7"),
    (params.int_list(1), ["1,3,40"], ["0,1", "-1"], "a comma list of ints >= 1"),
    (params.comma_list(params.joined(("causal", "bidirectional"), ("none", "learned"),
                                     ("end", "mean"))),
     ["causal-none-end", "causal-none-end,bidirectional-learned-mean"],
     ["causal-xpos-end", "causal-none", "causal-none-end-x", "causal_none_end"],
     "a comma list of (causal|bidirectional)-(none|learned)-(end|mean)"),
])
def test_rule_accepts_good_values_and_names_the_allowed_ones_for_bad(rule, good, bad, must):
    for value in good:
        assert _problems(x=(value, rule)) == "", value
    for value in bad:
        assert _problems(x=(value, rule)).startswith(f"x must be {must}, got {value!r}"), value


def test_the_brief_example_message():
    rule = params.comma_list("none", "learned", "sinusoidal")
    assert _problems(pos_encodings=("xpos", rule)) == (
        "pos_encodings must be a comma list of none|learned|sinusoidal, got 'xpos'")


def test_comma_lists_refuse_repeated_items():
    message = _problems(ks=("1,3,3", params.int_list(1)))
    assert message == "ks must be a comma list of ints >= 1, each once, got '1,3,3' (repeated: 3)"
    assert "each once" in _problems(pe=("none, none", params.comma_list("none", "learned")))


def test_bounds_may_name_another_parameter():
    rule = params.integer(above="min_length")
    assert _problems(min_length=(4, params.integer(3)), max_length=(5, rule)) == ""
    assert _problems(min_length=(4, params.integer(3)), max_length=(4, rule)) == (
        "max_length must be an int > min_length (4), got 4")
    # the other parameter's own error is reported; the relation waits for a valid value
    assert _problems(min_length=("4", params.integer(3)), max_length=(4, rule)) == (
        "min_length must be an int >= 3, got '4'")
    both = params.integer("test_min_length", 512)  # a named low, a plain high
    assert _problems(test_min_length=(8, params.positive_int), t=(600, both)) == (
        "t must be an int >= test_min_length (8) and <= 512, got 600")
    heads = params.integer(1, multiple_of="n_heads")
    assert _problems(n_heads=(4, params.positive_int), d_model=(64, heads)) == ""
    assert _problems(n_heads=(3, params.positive_int), d_model=(64, heads)) == (
        "d_model must be an int >= 1 and a multiple of n_heads (3), got 64")
    with pytest.raises(ValueError, match="'nope', which is not a parameter"):
        params.check({"x": 1}, x=params.integer(low="nope"))


def test_a_name_papermill_injected_must_be_a_parameter():
    """Issue 54: `papermill ... -p n_trian 5` ran on the defaults after a warning. The
    kernel's history (IPython's In) holds papermill's injected cell."""
    history = ["", "n_train: int = 100  # strings\nrun_name: str = 'x'",
               "# Parameters\nn_trian = 5\nrun_name = \"r\"\nzzz = 1\n", "params.check(...)"]
    values = {"n_train": 100, "n_trian": 5, "zzz": 1, "run_name": "r", "In": history}
    assert params.injected(values) == ["n_trian", "run_name", "zzz"]
    with pytest.raises(ValueError) as error:
        params.check(values, n_train=params.positive_int)
    lines = str(error.value).splitlines()
    assert lines == [
        "n_trian is not a parameter of this notebook (given with papermill -p or the "
        "manifest), so it would be ignored: did you mean n_train?",
        "zzz is not a parameter of this notebook (given with papermill -p or the manifest), so "
        "it would be ignored; its parameters: run_name, n_train"]
    params.check({**values, "In": history[:2] + history[3:]}, n_train=params.positive_int)
    params.check({"n_train": 1, "In": "not a history"}, n_train=params.positive_int)
    assert params.injected({"In": ["# Parameters\nbroken = (\n"]}) == []


@pytest.mark.notebook
def test_papermill_with_a_misspelt_parameter_fails_before_anything_runs(tmp_path: Path) -> None:
    import papermill

    source = Path(__file__).resolve().parents[1] / "notebooks" / "90_summary.ipynb"
    with pytest.raises(papermill.PapermillExecutionError) as error:
        papermill.execute_notebook(str(source), str(tmp_path / "out.ipynb"),
                                   parameters={"literal_rnu": "x"}, progress_bar=False,
                                   cwd=str(tmp_path))
    assert error.value.ename == "ValueError"
    assert "literal_rnu is not a parameter of this notebook" in error.value.evalue
    assert "did you mean literal_run?" in error.value.evalue


def test_satisfies_reports_the_parser_message():
    def budget(text: str) -> None:
        _steps, _strings = (int(x) for x in text.split(":"))

    rule = params.comma_list(params.satisfies(budget, "max_steps:n_train"))
    assert _problems(budgets=("100:800,400:1600", rule)) == ""
    message = _problems(budgets=("100:800,400", rule))
    assert message.startswith("budgets must be a comma list of max_steps:n_train, "
                              "got '100:800,400' (")
    from dyckbook.chapters import ablation_grid

    cells = params.satisfies(ablation_grid.cells_named, "smoke|reduced|full or cell names")
    assert _problems(cells=("smoke", cells)) == _problems(cells=("k1-L1-causal-none-end", cells))
    message = _problems(cells=("k1-L1-causal-xpos-end", cells))
    assert message.startswith("cells must be smoke|reduced|full or cell names, got "
                              "'k1-L1-causal-xpos-end' (") and "unknown mask" in message
    assert _problems(cells=(3, cells)).startswith("cells must be smoke|reduced|full")


def test_check_reports_every_problem_and_the_runner_names():
    values = {"n_seeds": "2", "lr": 0, "ok": 1, "run_name": "r", "results_dir": "scratch/x",
              "num_threads": -1}
    with pytest.raises(ValueError) as caught:
        params.check(values, n_seeds=params.positive_int, lr=params.positive,
                     ok=params.positive_int)
    assert str(caught.value).splitlines() == [
        "num_threads must be an int >= 0, got -1", "n_seeds must be an int >= 1, got '2'",
        "lr must be a number > 0, got 0"]
    params.check({"x": 1})  # the runner's names are checked only where defined
    params.check({"num_threads": "any"}, free=("num_threads",))  # free: anything goes
    from dyckbook.pipeline import runner

    # and the device, which the runner hands only to the notebooks that declare it (they train)
    assert set(params.RUNNER) == set(runner.INJECTED) | {"device"}
    for good in ("cpu", "cuda", "cuda:1", "auto"):
        params.check({"device": good})
    with pytest.raises(ValueError, match=r"device must be cpu\|cuda\|cuda:N\|auto, got 'gpu'"):
        params.check({"device": "gpu"})


def test_check_refuses_a_spec_that_names_no_parameter_or_is_not_a_rule():
    with pytest.raises(ValueError, match=r"\['typo'\] name no parameter"):
        params.check({"x": 1}, typo=params.positive_int)
    with pytest.raises(ValueError, match=r"\['y'\] name no parameter"):
        params.check({"x": 1}, free=("y",))
    with pytest.raises(ValueError, match="both checked and free"):
        params.check({"x": 1}, x=params.positive_int, free=("x",))
    with pytest.raises(TypeError, match="the rule of x must be a params rule"):
        params.check({"x": 1}, x=int)


# ------------------------------------------------------------------------ every notebook


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _parameters_and_check(path: Path) -> tuple[str, str]:
    """The source of the parameters cell and of the code cell after it."""
    cells = _cells(path)
    at = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
    after = next(c for c in cells[at + 1:] if c["cell_type"] == "code")
    return _source(cells[at]), _source(after)


def _run(parameters: str, check: str, monkeypatch: pytest.MonkeyPatch,
         **changes: Any) -> dict[str, Any]:
    """Execute the parameters cell, ``changes`` (as papermill injects them) and the check cell
    in a fresh namespace; return what ``params.check`` was called with."""
    seen: dict[str, Any] = {}
    original = params.check

    def recording(values: Any, /, *, free: tuple[str, ...] = (), **rules: Any) -> None:
        seen.update(values=values, free=free, rules=rules)
        original(values, free=free, **rules)

    monkeypatch.setattr(params, "check", recording)
    namespace: dict[str, Any] = {"__name__": "__notebook__"}
    exec(compile(parameters, "<parameters>", "exec"), namespace)  # noqa: S102
    namespace.update(changes)
    exec(compile(check, "<check>", "exec"), namespace)  # noqa: S102
    return seen


def _bad_values(rule: params.Rule, default: Any, values: dict[str, Any]) -> list[Any]:
    """A value of the wrong type, and one of the right type outside what ``rule`` allows."""
    kind = type(rule).__name__
    wrong_type = [str(default)] if isinstance(default, (int, float)) else [1.5]
    if kind == "_Bounded":
        out = []
        for op, bound in rule.bounds:
            limit = values[bound] if isinstance(bound, str) else bound
            step = 1 if rule.ints else 1e-6
            out.append({">=": limit - step, ">": limit, "<=": limit + step, "<": limit}[op])
        if rule.multiple_of is not None:
            step = values[rule.multiple_of] if isinstance(rule.multiple_of, str) else \
                rule.multiple_of
            out.append(max(default, step) + 1 if step > 1 else None)
        return wrong_type + ([True] if rule.ints else []) + [v for v in out if v is not None]
    if kind == "_CommaList" and type(rule.item).__name__ != "_Text":
        wrong_type.append("no-such-value")
    return wrong_type + {"_OneOf": ["no-such-value"], "_Text": [""], "_Boolean": [1],
                         "_CommaList": ["", f"{default},,{default}", f"{default},{default}"],
                         "_Satisfies": ["no-such-value"]}[kind]


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_notebook_checks_its_parameters_before_anything_else(path: Path) -> None:
    """The cell after the parameters cell imports, names rules and makes one ``params.check``
    call: nothing runs before the check."""
    _, check = _parameters_and_check(path)
    body = ast.parse(check).body
    assert all(isinstance(n, (ast.Import, ast.ImportFrom, ast.Assign, ast.Expr)) for n in body)
    calls = [n for n in body if isinstance(n, ast.Expr)]
    assert len(calls) == 1 and ast.unparse(calls[0].value.func) == "params.check", path.name
    assert ast.unparse(calls[0].value.args[0]) == "globals()"


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_notebook_defaults_pass_and_every_bad_value_is_named(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parameters, check = _parameters_and_check(path)
    seen = _run(parameters, check, monkeypatch)
    defaults = {n.target.id: ast.literal_eval(n.value) for n in ast.parse(parameters).body}
    rules = {**{k: r for k, r in params.RUNNER.items() if k not in seen["free"] and k in defaults},
             **seen["rules"]}  # the device: where the notebook declares it (it trains)
    tried = 0
    for name, rule in rules.items():
        bad = _bad_values(rule, defaults[name], seen["values"])
        assert bad, name
        for value in bad:
            with pytest.raises(ValueError) as caught:
                _run(parameters, check, monkeypatch, **{name: value})
            lines = [x for x in str(caught.value).splitlines() if x.startswith(f"{name} must be ")]
            assert lines and f"got {value!r}" in lines[0], (name, value, str(caught.value))
            first = lines[0]
            choices = rule.item if type(rule).__name__ == "_CommaList" else rule
            if type(choices).__name__ == "_OneOf":  # the allowed values are spelled out
                assert all(str(a) in first for a in choices.allowed), first
            tried += 1
    assert tried >= 2 * len(rules)


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_every_declared_parameter_is_checked_or_free(path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A parameter added to a notebook without a rule (or a place in ``free``) fails here."""
    parameters, check = _parameters_and_check(path)
    declared = {n.target.id for n in ast.parse(parameters).body}
    seen = _run(parameters, check, monkeypatch)
    covered = set(seen["rules"]) | set(seen["free"]) | set(params.RUNNER)
    assert declared - covered == set(), f"{path.name}: no rule for {sorted(declared - covered)}"
    assert set(seen["rules"]) | set(seen["free"]) <= declared, path.name


def test_completion_accepts_every_documented_pos_encoding(monkeypatch: pytest.MonkeyPatch):
    parameters, check = _parameters_and_check(REPO / "notebooks" / "10_completion.ipynb")
    for value in ("none", "learned", "sinusoidal", "sinusoidal,none", "none,learned,sinusoidal"):
        _run(parameters, check, monkeypatch, pos_encodings=value)
    with pytest.raises(ValueError, match="none|learned|sinusoidal, got 'xpos'"):
        _run(parameters, check, monkeypatch, pos_encodings="xpos")


def test_every_run_of_every_profile_passes_its_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest's values (smoke, cpu, thesis, grid) are all allowed: the rules refuse only
    what no profile uses."""
    from dyckbook.pipeline import runner

    manifest = runner.load_manifest(REPO / "notebooks" / "experiments.yml")
    checked = 0
    for profile in manifest.profiles:
        for run in runner.resolve_profile(manifest, profile):
            parameters, check = _parameters_and_check(Path(run.notebook.path))
            _run(parameters, check, monkeypatch, **run.params)
            checked += 1
    assert checked >= len(SOURCES)
