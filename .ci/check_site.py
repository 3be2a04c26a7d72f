#!/usr/bin/env python3
"""Refuse to deploy a site whose pages are all stand-ins.

`make site` of a profile with no published run (the smoke profile on a fresh clone, "Run
workflow" with `run` false) builds a site of "Not published" pages and exits 0. The Pages
workflow runs this before it uploads the site: exit 1, with one line saying why, when
`book/pages/index.json` (written by `dyckbook pages`) lists no page with published results.

    python .ci/check_site.py [REPOSITORY_ROOT]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

INDEX = Path("book") / "pages" / "index.json"


def problem(root: Path) -> str | None:
    """Why the site under ``root`` must not be deployed, or None."""
    index = root / INDEX
    if not index.is_file():
        return f"{INDEX} is missing: build the site first (make site)"
    built = json.loads(index.read_text(encoding="utf-8"))
    states = built.get("states") or {}
    if not states:
        return f"{INDEX} lists no page: nothing to deploy"
    real = [name for name, state in states.items()
            if not str(state).startswith("not published")]
    if not real:
        return (f"every one of the {len(states)} pages of profile {built.get('profile')!r} is a "
                "'Not published' stand-in: run the profile first (make book, or the workflow's "
                "'run' input) or build the cpu profile, whose results are committed")
    return None


def main(argv: list[str]) -> int:
    why = problem(Path(argv[0]) if argv else Path.cwd())
    if why:
        print(f"check_site: not deploying: {why}", file=sys.stderr)
        return 1
    print("check_site: the site has published pages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
