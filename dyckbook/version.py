"""The package's version: the installed distribution's, else pyproject.toml's (a checkout used
without ``pip install``: a copied tree, a GPU machine)."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["__version__"]


def _version() -> str:
    try:
        return version("dyckbook")
    except PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        found = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M) \
            if pyproject.is_file() else None
        return found.group(1) if found else "0+unknown"


__version__ = _version()
