"""Sphinx extension for the dyckbook: keep every page free of duplicate inline scripts."""

from __future__ import annotations

from typing import Any


def _dedupe_scripts(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
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


def setup(app: Any) -> dict[str, Any]:
    app.connect("html-page-context", _dedupe_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
