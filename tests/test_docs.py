"""Every command the docs show parses: make targets and variables exist, dyckbook's flags exist,
papermill's ``-p`` names are parameters of the notebook it runs. A doc that sends users wrong
fails here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import papermill
import pytest

from dyckbook.pipeline.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "CONTRIBUTING.md", REPO / "ARCHITECTURE.md",
        REPO / "benchmarks" / "README.md", *sorted((REPO / "book").glob("*.md"))]
PREFIXES = ("make ", "python -m dyckbook", "dyckbook ", ".venv/bin/python -m dyckbook",
            "papermill ", ".venv/bin/papermill ")


def commands(path: Path) -> list[str]:
    """The commands of a doc: each line of its ``bash`` blocks (continuations joined, comments
    dropped) and each inline code span that starts like a command."""
    text = path.read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line.startswith(PREFIXES) or " -m dyckbook " in line:
                found.append(line)
    for span in re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S)):
        if span.startswith(PREFIXES) and "..." not in span and "<" not in span:
            found.append(span)
    return found


ALL = [(path, command) for path in DOCS for command in commands(path)]


def test_the_docs_show_commands_of_every_kind() -> None:
    kinds = {next(p for p in ("make", "dyckbook", "papermill") if p in c) for _, c in ALL}
    assert kinds == {"make", "dyckbook", "papermill"} and len(ALL) >= 20


def _makefile() -> tuple[set[str], set[str]]:
    text = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", text, flags=re.M))
    variables = set(re.findall(r"\$\((\w+)\)", text)) | set(re.findall(r"^(\w+) \?=", text,
                                                                     flags=re.M))
    return targets, variables


@pytest.mark.parametrize(("path", "command"), ALL,
                         ids=[f"{p.name}:{c[:40]}" for p, c in ALL])
def test_a_documented_command_parses(path: Path, command: str) -> None:
    words = [w.strip("[]") for w in shlex.split(command) if w.strip("[]")]
    if words[0] == "make":
        targets, variables = _makefile()
        for word in words[1:]:
            if "=" in word:
                assert word.split("=")[0] in variables, f"{path.name}: make has no {word}"
            elif not word.startswith("-"):
                assert word in targets, f"{path.name}: make has no target {word!r}"
    elif "papermill" in words[0]:
        notebook = next(w for w in words if w.endswith(".ipynb"))
        declared = papermill.inspect_notebook(str(REPO / notebook))
        names = [words[i + 1] for i, w in enumerate(words) if w in ("-p", "--parameters")]
        unknown = [n for n in names if n not in declared]
        assert not unknown, f"{path.name}: {notebook} has no parameter {unknown}"
    else:
        args = words[words.index("dyckbook") + 1:] if "dyckbook" in words else words[1:]
        try:
            build_parser().parse_args(args)
        except SystemExit as exit_:
            pytest.fail(f"{path.name}: `{command}` does not parse (exit {exit_.code})")


def test_every_cross_reference_names_a_page_of_the_toc() -> None:
    """``{doc}`` links in the chapters and notebooks point at pages the toc lists (the build's
    -n finds them too, but only after every notebook has run)."""
    import json

    from book_build import toc_files

    listed = set(toc_files())
    texts = {p: p.read_text(encoding="utf-8") for p in (REPO / "book").rglob("*.md")}
    for p in [*(REPO / "book").glob("*.ipynb"), *(REPO / "notebooks").glob("*.ipynb")]:
        cells = json.loads(p.read_text(encoding="utf-8"))["cells"]
        texts[p] = "\n".join("".join(c["source"]) for c in cells)
    for path, text in texts.items():
        for target in re.findall(r"\{doc\}`(?:[^<`]*<)?/?([^>`]+)>?`", text):
            assert target in listed or target.startswith("book/pages/06_ablation_grid/"), (
                f"{path.relative_to(REPO)} links to {target}, which the toc does not list")


TINY = {"n_train": 100, "n_val": 10, "n_test": 10, "bbh_max_steps": 2}


def _methods_snippet(path: Path) -> str:
    """The methods page's snippet, on ``path``, at the TINY budget."""
    text = (REPO / "book" / "methods.md").read_text(encoding="utf-8")
    code = re.search(r"## Scoring a BIG-bench completion file.*?```python\n(.*?)```", text,
                     re.S).group(1)
    assert '"my_dyck_file.json"' in code and "bbh_configs(chapter.params," in code
    code = code.replace('"my_dyck_file.json"', repr(str(path)))
    return code.replace("bbh_configs(chapter.params,",
                        f"bbh_configs({{**chapter.params, **{TINY!r}}},")


def test_the_methods_page_trains_the_completion_chapters_recipe(capsys, monkeypatch) -> None:
    """The methods page's snippet runs as written (on the BBH file, at a tiny budget) and trains
    the chapter's recipe: every field of every config it trains equals the one the published cpu
    run of the completion chapter trained (its records), but the sizes the test shrinks."""
    import json

    from dyckbook.data import completion
    from dyckbook.experiment import run as run_module
    from dyckbook.pipeline.manifest import load_manifest, resolve_profile

    published = REPO / "book" / "results" / "cpu" / "10_completion" / "completion"
    chapter = next(r for r in resolve_profile(load_manifest(), "cpu") if r.name == "completion")
    recorded = json.loads((published / "run.json").read_text(encoding="utf-8"))["params"]
    assert {k: v for k, v in recorded.items() if k not in ("device", "num_threads")} == {
        k: v for k, v in chapter.params.items() if k not in ("device", "num_threads")}, (
        "the published completion run is not the manifest's: republish it")
    chapter_configs = {}
    for line in (published / "records.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["label"].startswith("BBH") and record["config"]["seed"] == 0:
            chapter_configs[record["label"]] = record["config"]
    trained = {}
    real_run = run_module.run

    def spy(config, *args, **kwargs):
        trained[len(trained)] = config.to_dict()
        return real_run(config, *args, **kwargs)

    monkeypatch.setattr(run_module, "run", spy)
    space: dict = {}
    exec(compile(_methods_snippet(completion.BBH_DYCK_FILE), "methods.md", "exec"), space)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.endswith("items missed") for line in lines)
    labels = list(space["configs"])  # in the order the snippet trains them
    assert sorted(labels) == sorted(chapter_configs) and len(trained) == 2, labels
    shrunk = {("data", "n_train"): 100, ("data", "n_val"): 10, ("data", "n_test"): 10,
              ("train", "max_steps"): 2}
    for label, config in zip(labels, trained.values()):
        want = chapter_configs[label]
        for part in ("data", "model", "train"):
            assert set(config[part]) == set(want[part]), (label, part)
            for name, value in config[part].items():
                expected = shrunk.get((part, name), want[part][name])
                assert value == expected, f"{label}: {part}.{name} is {value!r}, the chapter's " \
                                          f"{expected!r}"
        assert config["baselines"] == want["baselines"]


def test_the_methods_snippet_takes_a_file_of_two_symbol_prefixes(tmp_path) -> None:
    """A file whose longest prefix is 2 symbols gets the chapter's models (they accept it), not
    an error naming no file; a file of no item, an error naming the file."""
    import json

    from dyckbook.chapters.completion import bbh_configs
    from dyckbook.data import completion
    from dyckbook.experiment import results
    from dyckbook.pipeline.manifest import load_manifest, resolve_profile

    path = tmp_path / "short.json"
    path.write_text(json.dumps({"examples": [{"input": "( [", "target": "] )"}]}))
    code = _methods_snippet(path).split("for label, config")[0]
    space: dict = {}
    exec(compile(code, "methods.md", "exec"), space)
    chapter = space["chapter"]
    full = bbh_configs(chapter.params, completion.to_items(
        results.read_bigbench(completion.BBH_DYCK_FILE)))
    assert set(space["configs"]) == set(full)
    for label, config in space["configs"].items():
        assert config.model.n_ctx >= 2
        assert config.data.max_length == full[label].data.max_length  # the chapter's lengths
    resolved = next(r for r in resolve_profile(load_manifest(), "cpu") if r.name == "completion")
    with pytest.raises(ValueError, match="empty.json: no items"):
        bbh_configs(resolved.params, [], source="empty.json")
    with pytest.raises(ValueError, match="bbh_lengths"):
        from dyckbook.chapters.completion import chapter_configs
        from dyckbook.experiment.run import config_fields
        chapter_configs(config_fields(resolved.params), "3", "none", bbh_lengths=(2, 2))
