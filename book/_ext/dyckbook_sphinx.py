"""Sphinx extension for the dyckbook: the profile a build shows, and no duplicate inline scripts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from docutils import nodes

INDEX = Path("book") / "pages" / "index.json"  # written by `dyckbook pages` (dyckbook.pages)


def _dedupe_scripts(app: Any, pagename: str, templatename: str, context: dict,
                    doctree: Any) -> None:
    # sphinx-thebe registers its inline configuration script once per build phase under
    # jupyter-book, so pages declared `const THEBE_JS_URL` twice and browsers raised a
    # SyntaxError on every page. Keep the first copy of each identical script.
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple[str, str]] = set()
    unique = []
    for js in scripts:
        # inline scripts are registered with filename None or "": compare by body
        filename = getattr(js, "filename", js) or ""
        key = (str(filename), str(getattr(js, "attributes", {}).get("body", "")))
        if key in seen:
            continue
        seen.add(key)
        unique.append(js)
    context["script_files"] = unique


def _profile_note(app: Any, doctree: nodes.document, docname: str) -> None:
    """Under the landing page's title: which manifest profile made the numbers of this build."""
    index = Path(app.srcdir) / INDEX
    if docname != app.config.root_doc or not index.is_file():
        return
    built = json.loads(index.read_text(encoding="utf-8"))
    para = nodes.paragraph()
    para += nodes.Text("This build's numbers come from the profile ")
    para += nodes.literal(text=built["profile"])
    para += nodes.Text(f" of notebooks/experiments.yml ({len(built['runs'])} runs)"
                       + (f": {built['description']}" if built.get("description") else "."))
    marked = sorted(name for name, state in built.get("states", {}).items() if state != "ok")
    if marked:
        para += nodes.Text(f" {len(marked)} of its pages {'is' if len(marked) == 1 else 'are'} "
                           f"not up to date, each marked on the page: {', '.join(marked)}.")
    note = nodes.note("", para, classes=["build-profile"])
    section = next(doctree.findall(nodes.section))
    section.insert(section.first_child_matching_class(nodes.title) + 1, note)


def _always_reread_root(app: Any, env: Any, added: set, changed: set, removed: set) -> list[str]:
    # the note depends on index.json, which Sphinx does not track
    return [app.config.root_doc] if (Path(app.srcdir) / INDEX).is_file() else []


def setup(app: Any) -> dict[str, Any]:
    app.connect("html-page-context", _dedupe_scripts)
    app.connect("doctree-resolved", _profile_note)
    app.connect("env-get-outdated", _always_reread_root)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
