"""The package's concept packages and their order, as ``dyckbook.LAYERS`` declares them.

Each package holds one kind of thing (``data``, ``nn``, ``rules``, ``experiment``, ``interp``,
``claims``, ``chapters``, ``pipeline``); a module imports only from its own package or a lower
layer, so no arrow runs up and no import closes a circle. Every import counts, function bodies
included; an import may sit in a function only for an optional dependency or a measured
start-up cost, named on its line (``# deferred: optional dependency X`` or ``# deferred:
start-up: ...``). ARCHITECTURE.md's table of packages is read and must agree. There are no
line caps: a module is as long as its one concept needs.
"""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dyckbook

PACKAGE = Path(dyckbook.__file__).parent
ROOT = PACKAGE.parent
#: modules of the package root: below every package (``version``, the face, which imports
#: only ``version`` and reaches the rest lazily), or the command line's entry (``pipeline``'s)
ROOT_MODULES = {"dyckbook": 0, "dyckbook.version": 0, "dyckbook.__main__": 7}
#: what every page shares: a chapter module named after no notebook
SHARED = {"page", "plotting", "attention_plots", "figure_style"}
DEFERRED = re.compile(r"#\s*deferred:\s*(optional dependency \S+|start-up: .*\d.*)")


def module_names() -> dict[str, Path]:
    """Every module of the package, by dotted name (``dyckbook.chapters.page``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = module_names()


def package_of(name: str) -> str:
    """``data``, ``nn``, ... for a module of a package; the name itself for a root module."""
    if name == "dyckbook.__main__":
        return "pipeline"
    if name in ROOT_MODULES:
        return "root"
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in dyckbook.LAYERS) \
        else name


def layer(name: str) -> int:
    return dyckbook.LAYERS.get(package_of(name), ROOT_MODULES.get(name, 0))


def imports(name: str, source: str | None = None) -> list[tuple[str, int, bool]]:
    """``(target, line, in a function)`` for every import of a package module by ``name``
    (``from M import x`` imports M, and M.x where that is a module; ``from dyckbook import
    run`` names the module the face stands for)."""
    tree = ast.parse(source if source is not None else MODULES[name].read_text("utf-8"))
    inner = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
             for n in ast.walk(f) if isinstance(n, ast.Import | ast.ImportFrom)}
    out = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names if a.name.split(".")[0] == "dyckbook"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "dyckbook":
            subs = [f"{node.module}.{a.name}" for a in node.names]
            if node.module == "dyckbook":
                subs = [dyckbook.module_path(a.name) if a.name in dyckbook.MODULES
                        else f"dyckbook.{a.name}" for a in node.names]
            targets = [t for t in subs if t in MODULES] or [node.module]
        out += [(t, node.lineno, id(node) in inner) for t in targets if t != name]
    return out


GRAPH = {name: {t for t, _, _ in imports(name)} for name in MODULES}


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


def floors(graph: dict[str, set[str]]) -> int:
    """The longest chain of packages (each importing the next): how many floors the import
    graph has, read from the code, not from the declaration."""
    edges = {(package_of(a), package_of(b)) for a, ts in graph.items() for b in ts
             if package_of(a) != package_of(b)}
    nodes = {n for e in edges for n in e}
    depth: dict[str, int] = {}

    def height(n: str, seen: frozenset = frozenset()) -> int:
        if n not in depth:
            below = [height(b, seen | {n}) for a, b in edges if a == n and b not in seen]
            depth[n] = 1 + max(below, default=0)
        return depth[n]

    return max((height(n) for n in nodes), default=0)


def test_every_module_belongs_to_a_declared_package():
    stray = [m for m in MODULES if package_of(m) not in {*dyckbook.LAYERS, "root"}]
    assert stray == []
    assert set(dyckbook.MODULES) | {"completion_scores"} >= {
        m.rsplit(".", 1)[1] for m in MODULES
        if package_of(m) in dyckbook.LAYERS and dyckbook.LAYERS[package_of(m)] <= 5
        and not m.endswith(tuple(f".{p}" for p in dyckbook.LAYERS))}
    for short, pkg in dyckbook.MODULES.items():  # the face names real modules
        assert f"dyckbook.{pkg}.{short}" in MODULES, short


def test_architecture_md_lists_the_packages_in_their_layers():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")

    table = {pkg: int(n) for n, pkg in re.findall(r"^\|\s*(\d)\s*\|\s*`(\w+)/`", text, re.M)}
    assert table == dyckbook.LAYERS, table


def test_no_import_closes_a_circle():
    assert circles(GRAPH) == []
    # the check can fail: the circle of issue 49 (run -> data cache -> results -> run)
    assert circles({"run": {"cache"}, "cache": {"results"}, "results": {"run"}, "x": {"run"}}) \
        == [["cache", "results", "run"]]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_arrow_runs_up(name):
    """A module imports its own package or a lower layer (function bodies included); peers of
    one layer (``nn``, ``rules``) do not import each other; the command line is imported only
    by ``__main__``."""
    for target, line, _ in imports(name):
        if package_of(target) == package_of(name):
            continue
        assert layer(target) < layer(name), (
            f"{name}:{line} (layer {layer(name)}) imports {target} (layer {layer(target)})")
        assert target != "dyckbook.pipeline.cli" or name == "dyckbook.__main__"


def test_the_order_check_can_fail():
    """An import up (experiment from data) and one between peers (rules from nn) are caught."""
    up = imports("dyckbook.data.languages", "from dyckbook.experiment import run\n")
    assert [(t, layer(t) < layer("dyckbook.data.languages")) for t, _, _ in up] == [
        ("dyckbook.experiment.run", False)]
    peer = imports("dyckbook.nn.model", "def f():\n    from dyckbook import baselines\n")
    assert peer == [("dyckbook.rules.baselines", 2, True)]
    assert layer("dyckbook.rules.baselines") == layer("dyckbook.nn.model")


@pytest.mark.parametrize("name", sorted(MODULES))
def test_an_import_in_a_function_says_why(name):
    """Every import inside a function (the package's or another's) names an optional dependency
    or a measured start-up cost on its line."""
    source = MODULES[name].read_text("utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    unsaid = []
    for f in ast.walk(tree):
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(f):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    said = " ".join(lines[node.lineno - 1: node.end_lineno])
                    if not DEFERRED.search(said):
                        unsaid.append(f"{name}:{node.lineno}")
    assert not unsaid, f"imports in functions without '# deferred: <why>': {unsaid}"


def test_the_import_graph_has_at_most_eight_floors():
    assert floors(GRAPH) <= 8
    assert floors({"dyckbook.a.x": {"dyckbook.b.y"}, "dyckbook.b.y": {"dyckbook.c.z"}}) == 3


def test_data_and_stack_free_rules_load_no_torch_and_nothing_below_chapters_draws():
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text("utf-8"))
        top = {a.name.split(".")[0] for n in tree.body if isinstance(n, ast.Import)
               for a in n.names} | {n.module.split(".")[0] for n in tree.body
                                    if isinstance(n, ast.ImportFrom) and n.module}
        if package_of(name) == "data" or name == "dyckbook.rules.baselines":
            assert "torch" not in top, name
        if name not in ROOT_MODULES and layer(name) < dyckbook.LAYERS["chapters"]:
            assert not {"matplotlib", "seaborn"} & top, name


def test_every_chapter_module_serves_a_page_that_uses_it():
    """A chapter module is named after its notebook (``page`` serves every page), the notebook
    imports it, and every public function of it is used: by a notebook, by another chapter
    module, or within its own module (no dead code)."""
    notebooks = {p.stem.split("_", 1)[1] if p.stem[:2].isdigit() else p.stem: p
                 for p in [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("book/*.ipynb")]}
    sources = {stem: "\n".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"]
                               if c["cell_type"] == "code") for stem, p in notebooks.items()}
    chapter_code = {n: p.read_text() for n, p in MODULES.items() if package_of(n) == "chapters"}
    for name, path in MODULES.items():
        if package_of(name) != "chapters" or name == "dyckbook.chapters":
            continue
        short = name.rsplit(".", 1)[1]
        if short not in SHARED:
            assert short in notebooks, f"{name} is named after no notebook"
            assert re.search(rf"from dyckbook\.chapters import [^\n]*\b{short}\b",
                             sources[short]), f"{notebooks[short].name} does not import {name}"
        tree = ast.parse(path.read_text())
        public = [n.name for n in tree.body
                  if isinstance(n, ast.FunctionDef | ast.ClassDef) and not n.name.startswith("_")]
        users = "\n".join(sources.values()) + "\n".join(
            code for other, code in chapter_code.items() if other != name)
        own = chapter_code[name]
        unused = [f for f in public if not re.search(rf"\b{f}\b", users)
                  and len(re.findall(rf"\b{f}\b", own)) < 2]
        assert not unused, f"{name}: {unused} used by no notebook or other chapter module"


def test_every_export_resolves():
    for name in dyckbook.__all__:
        assert getattr(dyckbook, name) is not None, name
    for short in dyckbook.MODULES:
        assert getattr(dyckbook, short).__name__ == dyckbook.module_path(short)
    with pytest.raises(AttributeError, match="NotAThing"):
        dyckbook.NotAThing  # noqa: B018
    with pytest.raises(ValueError, match="name must be a library module"):
        dyckbook.module_path("nothing")


def test_language_floor_does_not_load_torch():
    code = ("import sys, dyckbook; assert dyckbook.Dyck(3).is_member(['([]){}']).all();"
            "from dyckbook import negatives, protocol;"
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
            "import dyckbook; from dyckbook.claims import verdicts\n"
            "print(dyckbook.__version__, verdicts.LABELS[0])\n"
            "from dyckbook.chapters import page; from dyckbook.pipeline import manifest\n"
            "from dyckbook import run; print(run.__name__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [dyckbook.__version__, "reproduced", "dyckbook.experiment.run"]
