"""The package's three parts and the library's floors, as ARCHITECTURE.md states them.

The library (the modules at the top of ``dyckbook/``) imports only from its own floor or below
and never from ``chapters/`` or ``pipeline/``; a chapter module imports the library, the
chapters and of the pipeline only its judging modules (registry, verdicts); nothing imports the
command line. No import, function-local ones
included, closes a circle. The floors are read from ARCHITECTURE.md's table, so the map and the
code cannot drift apart.
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dyckbook

PACKAGE = Path(dyckbook.__file__).parent
ROOT = PACKAGE.parent
LIBRARY_LINES, MODULE_LINES = 10_500, 700  # issue 49's bounds
#: what every page shares: a chapter module named after no notebook
SHARED = {"page", "plotting", "attention_plots", "figure_style"}
#: the pipeline's judging modules, which the verdict chapter shows: the only ones a chapter reads
JUDGING = {"dyckbook.pipeline", "dyckbook.claims.registry", "dyckbook.claims.verdicts"}


def module_names() -> dict[str, Path]:
    """Every module of the package, by dotted name (``dyckbook.chapters.page``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = module_names()


def part(name: str) -> str:
    """``library``, ``chapters``, ``pipeline`` or ``root`` (the package's ``__init__``)."""
    if name == "dyckbook":
        return "root"
    if name.startswith("dyckbook.chapters"):
        return "chapters"
    if name.startswith("dyckbook.pipeline") or name == "dyckbook.__main__":
        return "pipeline"
    return "library"


def architecture_floors(text: str | None = None) -> dict[str, int]:
    """``{module: floor}`` from the floors table of ARCHITECTURE.md: each row ``| N | ... |``
    names its modules in backticks, each followed by its description in parentheses."""
    text = text if text is not None else (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    floors = {}
    for line in text.splitlines():
        row = re.match(r"\|\s*(\d+)\s*\|(.*)\|[^|]*\|\s*$", line)
        if row:
            for name in re.findall(r"`(\w+)` \(", row.group(2)):
                floors[f"dyckbook.{name}"] = int(row.group(1))
    return floors


FLOORS = architecture_floors()
NO_TORCH = {m for m, f in FLOORS.items() if f <= 2} | {"dyckbook.rules.baselines"}


def imports(name: str) -> tuple[set[str], set[str]]:
    """(package modules, other top-level packages) that module ``name`` imports anywhere in it,
    function bodies included. ``from M import x`` imports M, and also M.x where that is a
    module; ``from dyckbook import x`` counts the root only for a name that is no module
    (``__version__``): the root runs before any submodule anyway."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    own, other = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                (own.add(alias.name) if top == "dyckbook" else other.add(top))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "dyckbook":
                other.add(node.module.split(".")[0])
                continue
            assert node.module in MODULES, f"{name} imports {node.module}: not in the package"
            subs = {f"{node.module}.{a.name}" for a in node.names} & set(MODULES)
            own |= subs
            if node.module != "dyckbook" or len(subs) < len(node.names):
                own.add(node.module)
    return own - {name}, other


GRAPH = {name: imports(name)[0] for name in MODULES}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself):
    each one is an import circle."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_floors_table_is_read_and_covers_every_library_module():
    library = {m for m in MODULES if part(m) == "library"}
    assert library == set(FLOORS), library ^ set(FLOORS)
    assert architecture_floors("| 3 | `a` (x, `b.c` d), `e` (f) | floors 1-2 |") == {
        "dyckbook.a": 3, "dyckbook.e": 3}


def test_no_import_closes_a_circle():
    assert circles(GRAPH) == []
    # the check can fail: the circle of issue 49 (run -> data cache -> results -> run)
    assert circles({"run": {"cache"}, "cache": {"results"}, "results": {"run"}, "x": {"run"}}) \
        == [["cache", "results", "run"]]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_keep_to_the_parts_and_go_down_the_floors(name):
    own, other = imports(name)
    assert "dyckbook.__main__" not in own and "dyckbook.pipeline.cli" not in own or \
        name == "dyckbook.__main__", f"{name} imports the command line"
    if part(name) == "library":
        assert "dyckbook" not in own, f"{name} imports the package root"
        for target in own:
            assert part(target) == "library", f"library module {name} imports {target}"
            assert FLOORS[target] <= FLOORS[name], \
                f"{name} (floor {FLOORS[name]}) imports {target} (floor {FLOORS[target]})"
        if FLOORS[name] < 5:
            assert "dyckbook.chapters.plotting" not in own and "matplotlib" not in other, name
        if name in NO_TORCH:
            assert "torch" not in other, name
    elif part(name) == "chapters":
        wrong = {t for t in own if part(t) == "pipeline"} - JUDGING
        assert not wrong, f"{name} imports the pipeline's {sorted(wrong)}"


def test_sizes_stay_thin():
    lines = {name: len(path.read_text(encoding="utf-8").splitlines())
             for name, path in MODULES.items()}
    library = sum(n for name, n in lines.items() if part(name) in ("library", "root"))
    assert library <= LIBRARY_LINES, f"the library is {library} lines"
    over = {name: n for name, n in lines.items() if n > MODULE_LINES}
    assert not over, over


def test_every_chapter_module_serves_a_page_that_uses_it():
    """A chapter module is named after its notebook (``page`` serves every page), the notebook
    imports it, and every public function of it is used: by a notebook, by another chapter
    module, or within its own module (no dead code)."""
    import json

    notebooks = {p.stem.split("_", 1)[1] if p.stem[:2].isdigit() else p.stem: p
                 for p in [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("book/*.ipynb")]}
    sources = {stem: "\n".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"]
                               if c["cell_type"] == "code") for stem, p in notebooks.items()}
    chapter_code = {n: p.read_text() for n, p in MODULES.items() if part(n) == "chapters"}
    for name, path in MODULES.items():
        if part(name) != "chapters" or name == "dyckbook.chapters":
            continue
        short = name.rsplit(".", 1)[1]
        if short not in SHARED:
            assert short in notebooks, f"{name} is named after no notebook"
            assert re.search(rf"from dyckbook\.chapters import [^\n]*\b{short}\b",
                             sources[short]), f"{notebooks[short].name} does not import {name}"
        tree = ast.parse(path.read_text())
        public = [n.name for n in tree.body
                  if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")]
        users = "\n".join(sources.values()) + "\n".join(
            code for other, code in chapter_code.items() if other != name)
        own = chapter_code[name]
        unused = [f for f in public if not re.search(rf"\b{f}\b", users)
                  and len(re.findall(rf"\b{f}\b", own)) < 2]
        assert not unused, f"{name}: {unused} used by no notebook or other chapter module"


def test_every_export_resolves():
    for name in dyckbook.__all__:
        assert getattr(dyckbook, name) is not None, name
    with pytest.raises(AttributeError, match="NotAThing"):
        dyckbook.NotAThing  # noqa: B018


def test_language_floor_does_not_load_torch():
    code = ("import sys, dyckbook; assert dyckbook.Dyck(3).is_member(['([]){}']).all();"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_imports_from_a_checkout_without_installation(tmp_path):
    """A copied tree (a GPU machine, a tarball) imports without ``pip install``: the version
    comes from pyproject.toml, and submodules resolve from the top level."""
    import shutil

    shutil.copytree(PACKAGE, tmp_path / "dyckbook", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PACKAGE.parent / "pyproject.toml", tmp_path / "pyproject.toml")
    code = ("import importlib.metadata as m\n"
            "def missing(name): raise m.PackageNotFoundError(name)\n"
            "m.version = missing\n"
            "import dyckbook; from dyckbook.pipeline import verdicts\n"
            "print(dyckbook.__version__, verdicts.LABELS[0])\n"
            "from dyckbook.chapters import page; from dyckbook.pipeline import manifest")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [dyckbook.__version__, "reproduced"]
