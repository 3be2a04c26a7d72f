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


def test_the_methods_page_scores_a_bigbench_file_as_it_says(capsys) -> None:
    """The methods page's snippet runs as written (on the BBH file, at a tiny budget)."""
    from dyckbook.data import completion

    text = (REPO / "book" / "methods.md").read_text(encoding="utf-8")
    code = re.search(r"## Scoring a BIG-bench completion file.*?```python\n(.*?)```", text,
                     re.S).group(1)
    assert '"my_dyck_file.json"' in code and '{"max_steps": 2500}' in code
    code = code.replace('"my_dyck_file.json"', repr(str(completion.BBH_DYCK_FILE))).replace(
        '{"max_steps": 2500}', '{"max_steps": 2, "n_train": 100, "n_val": 10, "n_test": 10}')
    exec(compile(code, "methods.md", "exec"), {})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(line.endswith("items missed") for line in lines)
