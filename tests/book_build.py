"""Build the Jupyter Book from a copy of the current sources, once per source state, for its tests.

`tests/test_book.py` and `tests/test_browser.py` both need a built book. Under
`pytest -n 2 --dist loadfile` they run in different worker processes, so the build is shared
through a cache directory keyed by a hash of every input (book sources, notebooks, package code)
and guarded by a file lock: the first worker builds, the other waits and reuses the result.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
CACHE = ARTIFACTS / "book-build"

#: Chapter notebooks (book/<name>.ipynb, committed without outputs) are executed into
#: book/runs/<profile>/chapters; _toc.yml lists the copies `dyckbook pages` makes here.
CHAPTERS_DIR = Path("book/pages/chapters")

#: What the book build reads: copied into the build's private source tree.
SOURCE_ITEMS = ("_config.yml", "_toc.yml", "book", "notebooks")
#: Generated or local-only paths never copied (chapters are re-executed from their sources).
SKIP_PARTS = {".ipynb_checkpoints", "__pycache__", "_build"}

BUILD_FLAGS = ("-W", "-n", "--keep-going")


def mathjax_source_dir() -> Path:
    """The es5 folder of MathJax 3 shipped by the pip package ``django-static-mathjax``."""
    import mathjax

    return Path(mathjax.__file__).resolve().parent / "static" / "mathjax" / "es5"


def ensure_mathjax(static_dir: Path) -> Path:
    """Copy MathJax (tex-svg.js and its autoloadable TeX extensions) into ``static_dir/mathjax``.

    Returns:
        The path of the copied ``tex-svg.js``.
    """
    src = mathjax_source_dir()
    dest = static_dir / "mathjax"
    if not (dest / "tex-svg.js").is_file():
        (dest / "input" / "tex").mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / "tex-svg.js", dest / "tex-svg.js")
    ext = dest / "input" / "tex" / "extensions"
    if not ext.is_dir():
        shutil.copytree(src / "input" / "tex" / "extensions", ext)
    return dest / "tex-svg.js"


def toc_files(root: Path = REPO, globs_in: Path | None = None) -> list[str]:
    """Every document listed in ``_toc.yml`` (without extension), root first, in reading order.

    Args:
        root: where ``_toc.yml`` is.
        globs_in: a built HTML folder (or a source tree); when given, ``glob:`` entries (the
            seeded runs) are expanded to the pages found there, so every page is listed.
    """
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    found: list[str] = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries or []:
            if "file" in entry:
                found.append(entry["file"])
            if "glob" in entry and globs_in is not None:
                pages = {p.with_suffix("").relative_to(globs_in).as_posix()
                         for p in globs_in.glob(entry["glob"])
                         if p.suffix in (".html", ".ipynb", ".md")}
                found.extend(sorted(pages))
            for key in ("parts", "chapters", "sections"):
                walk(entry.get(key, []))

    walk(toc.get("parts", []))
    walk(toc.get("chapters", []))
    return [str(Path(f).with_suffix("")) if f.endswith((".md", ".ipynb")) else f for f in found]


def chapter_sources(root: Path = REPO) -> dict[str, Path]:
    """Map executed chapter path (as listed in the toc) -> source notebook under ``book/``."""
    out = {}
    for doc in toc_files(root):
        path = Path(doc)
        if path.parent == CHAPTERS_DIR:
            out[doc] = root / "book" / f"{path.name}.ipynb"
    return out


def _iter_inputs(root: Path) -> Iterator[Path]:
    for item in SOURCE_ITEMS:
        p = root / item
        if p.is_file():
            yield p
        elif p.is_dir():
            for f in sorted(p.rglob("*")):
                rel = f.relative_to(root)
                if f.is_file() and not (SKIP_PARTS & set(rel.parts)) and not _generated(rel):
                    yield f
    for f in sorted((root / "dyckbook").rglob("*.py")):
        yield f


def _generated(rel: Path) -> bool:
    """Paths the runner or the build regenerate: executed runs, their results, the MathJax copy."""
    s = rel.as_posix()
    return s.startswith(("book/runs/", "book/results/", "book/pages/", "book/_static/mathjax/")) \
        or s in ("book/runs", "book/results", "book/pages")


def source_hash(root: Path = REPO) -> str:
    """SHA-256 over the names and bytes of every input of the build."""
    h = hashlib.sha256()
    for f in _iter_inputs(root):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes())
        h.update(b"\1")
    return h.hexdigest()[:16]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _venv_bin(name: str) -> str:
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


class BookBuildError(RuntimeError):
    """The book did not build; the message holds the tail of the build log."""


SMOKE_CACHE = ARTIFACTS / "smoke-runs"
SMOKE_PROFILE = "smoke"


class SmokeRunError(RuntimeError):
    """The smoke profile did not run cleanly; the message holds the runner's log."""


def smoke_root() -> Path:
    """An output root holding every run of the ``smoke`` profile, executed from the current sources.

    The whole manifest (chapters, experiments, summary) is executed once per source state by the
    real runner (``dyckbook.runner.run``, two jobs) into ``test-artifacts/smoke-runs/<hash>``; the
    notebook tests and the book build share it across pytest workers through a file lock.

    Raises:
        SmokeRunError: if any run failed (the log names each failed run and cell).
    """
    import logging

    from dyckbook.pipeline import runner

    key = source_hash()
    dest = SMOKE_CACHE / key
    with _locked(SMOKE_CACHE / ".lock"):
        if not (dest / "ok").is_file():
            for old in SMOKE_CACHE.iterdir():
                if old.is_dir() and old.name != key:
                    shutil.rmtree(old, ignore_errors=True)
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir(parents=True)
            log = logging.getLogger("dyckbook")
            handler = logging.FileHandler(dest / "runner.log")
            log.addHandler(handler)
            log.setLevel(logging.INFO)
            try:
                rc = runner.run(SMOKE_PROFILE, out_root=dest, jobs=2)
            finally:
                log.removeHandler(handler)
                handler.close()
            if rc != 0:
                lines = (dest / "runner.log").read_text().splitlines()
                raise SmokeRunError("the smoke profile failed:\n" + "\n".join(lines[-60:]))
            (dest / "ok").write_text(key)
    return dest


def build_book(dest: Path) -> Path:
    """Copy the sources to ``dest/src`` with the smoke profile's executed runs, build into ``dest``.

    Returns:
        The HTML folder ``dest/_build/html``.

    Raises:
        BookBuildError: if a notebook fails or the build emits any warning (``-W``).
    """
    src = dest / "src"
    if dest.exists():
        shutil.rmtree(dest)
    src.mkdir(parents=True)
    for item in SOURCE_ITEMS:
        p = REPO / item
        if p.is_file():
            shutil.copy2(p, src / item)
        elif p.is_dir():
            shutil.copytree(
                p, src / item,
                ignore=lambda d, names: [
                    n for n in names
                    if n in SKIP_PARTS or _generated((Path(d) / n).relative_to(REPO))
                ],
            )
    ensure_mathjax(src / "book" / "_static")
    runs = smoke_root()
    for generated in ("book/runs", "book/results"):
        shutil.copytree(runs / generated, src / generated, dirs_exist_ok=True)
    return build_tree(src, dest)


def build_tree(src: Path, dest: Path, profile: str = SMOKE_PROFILE) -> Path:
    """``dyckbook pages`` for ``profile`` in the source tree ``src`` (its runs and results
    copied in), then the book build into ``dest``; returns the HTML folder."""
    from dyckbook.pipeline import runner

    runner.assemble_pages(profile, REPO / "notebooks" / "experiments.yml", src)
    proc = subprocess.run(
        [_venv_bin("jupyter-book"), "build", str(src), *BUILD_FLAGS, "--path-output", str(dest)],
        capture_output=True, text=True, check=False,
    )
    log = proc.stdout + proc.stderr
    (dest / "build.log").write_text(log)
    if proc.returncode != 0:
        raise BookBuildError(f"jupyter-book build failed (exit {proc.returncode}):\n{log[-6000:]}")
    html = dest / "_build" / "html"
    if not (html / "index.html").is_file():
        raise BookBuildError(f"no index.html in {html}:\n{log[-3000:]}")
    return html


def built_book_html() -> Path:
    """The HTML folder of a book built from the current sources (cached by source hash)."""
    key = source_hash()
    dest = CACHE / key
    with _locked(CACHE / ".lock"):
        if not (dest / "ok").is_file():
            for old in CACHE.iterdir():
                if old.is_dir() and old.name != key:
                    shutil.rmtree(old, ignore_errors=True)
            build_book(dest)
            (dest / "ok").write_text(key)
    return dest / "_build" / "html"
