"""The package root and the layers: exports resolve, imports only go down the floors."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import dyckbook

PACKAGE = Path(dyckbook.__file__).parent
# ARCHITECTURE.md's floors; a module may import only from its own floor or below
FLOORS = {
    1: {"vocab", "config", "languages", "presets", "intervals", "version", "params"},
    2: {"hardness", "thesis", "negatives", "dataset", "protocol", "completion"},
    3: {"tokenizer", "kernels", "dropout", "blocks", "model", "thesis_model", "seq2seq", "train",
        "evaluate", "baselines", "recurrent"},
    4: {"run", "results", "data_cache", "run_cache", "explain", "probes", "verdicts", "registry",
        "constructions", "patching", "length_break"},
    5: {"grid", "figure_style", "attention_plots", "plotting", "book", "verdict_tables",
        "completion_tables", "length_study", "pages"},
    6: {"executors", "manifest", "runner", "__main__"},
}
FLOOR_OF = {m: f for f, mods in FLOORS.items() for m in mods}
NO_TORCH = FLOORS[1] | FLOORS[2] | {"baselines"}


def _imports(module: str) -> tuple[set[str], set[str]]:
    """(dyckbook modules, other top-level packages) imported anywhere in ``module``."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    own, other = set(), set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "dyckbook":
            names = [f"dyckbook.{a.name}" for a in node.names]  # a submodule, or a root name
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] != "dyckbook":
                other.add(parts[0])
            elif len(parts) > 1 and parts[1] in FLOOR_OF:
                own.add(parts[1])
            elif len(parts) > 1:
                own.add("__init__")  # e.g. ``from dyckbook import __version__``
    return own, other


def test_every_module_has_a_floor():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert modules == set(FLOOR_OF), modules ^ set(FLOOR_OF)


@pytest.mark.parametrize("module", sorted(FLOOR_OF))
def test_imports_go_down_the_floors(module):
    own, other = _imports(module)
    assert "__init__" not in own, f"{module} imports the package root"
    for target in own - {module}:
        if module != "__main__":  # the CLI is the runner's one user
            assert target not in ("runner", "__main__"), f"{module} imports {target}"
        assert FLOOR_OF[target] <= FLOOR_OF[module], f"{module} (floor {FLOOR_OF[module]}) " \
            f"imports {target} (floor {FLOOR_OF[target]})"
    if FLOOR_OF[module] < 5:
        assert "plotting" not in own and "matplotlib" not in other, module
    if module in NO_TORCH:
        assert "torch" not in other, module


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
            "import dyckbook; print(dyckbook.__version__, dyckbook.verdicts.LABELS[0])")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [dyckbook.__version__, "reproduced"]
