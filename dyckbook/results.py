"""The files dyckbook writes or reads: JSON, run records, datasets, BIG-bench tasks.

Paths are relative to the output root (the repository, or ``$DYCKBOOK_ROOT``: :func:`resolve`);
the published tree's layout is the pipeline's (``pipeline.manifest``). Models are saved and
loaded by ``checkpoint``.

Writes are atomic (a temporary file in the same folder, then a rename), refuse to replace
anything but a regular file, and leave files with the permissions the umask gives (0644 as a
rule).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dyckbook.dataset import Dataset
from dyckbook.languages import Dyck

if TYPE_CHECKING:  # torch loads only when records are touched
    from dyckbook.record import RunRecord

__all__ = ["ROOT_ENV", "append_records", "dataset_text", "read_bigbench", "read_dataset",
           "read_json", "read_records", "repo_root", "resolve", "source_root", "write_bytes",
           "write_dataset", "write_json", "write_text"]

ROOT_ENV = "DYCKBOOK_ROOT"
_DATASET_FORMAT = "dyckbook.dataset/2"


def source_root() -> Path:
    """The repository: the first folder upward from here holding ``notebooks/experiments.yml``
    (so a notebook opened from ``notebooks/`` finds it), else the package's parent folder."""
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / "notebooks" / "experiments.yml").is_file():
            return candidate
    return Path(__file__).resolve().parent.parent


def repo_root() -> Path:
    """The output root: ``$DYCKBOOK_ROOT`` if set, else the repository."""
    env = os.environ.get(ROOT_ENV)
    return Path(env).resolve() if env else source_root()


def resolve(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """An absolute path for ``path`` (relative paths are relative to the output root)."""
    p = Path(path)
    return p if p.is_absolute() else (Path(root) if root else repo_root()).resolve() / p


# ------------------------------------------------------------------------------ safe writes
def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; only a regular file (or nothing) may be replaced.
    A symbolic link to a file is written through (the link stays); an existing file keeps its
    permissions.

    Raises:
        ValueError: ``path`` is a directory, a device, a socket, a link to one, or its folder
            is a file.
        OSError: the folder cannot be written (the message names the path).
    """
    path = Path(path)
    if path.is_symlink() and path.is_file():  # write through a link, never replace it
        path = path.resolve()
    if path.exists() and not path.is_file():
        raise ValueError(f"refusing to replace {path}: it is not a regular file")
    # an existing file keeps its permissions (a private 0600 file stays private)
    mode = path.stat().st_mode & 0o777 if path.is_file() else None
    if path.parent.exists() and not path.parent.is_dir():
        raise ValueError(f"cannot write {path}: {path.parent} is not a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    umask = os.umask(0)
    os.umask(umask)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode if mode is not None else 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def _plain(obj: Any) -> Any:
    """JSON-ready values: numpy scalars and arrays become Python ones, non-finite floats null."""
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, np.generic):
        return _plain(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json(path: str | os.PathLike[str], obj: Any, sort_keys: bool = True) -> Path:
    """Write ``obj`` as indented JSON, key-sorted unless ``sort_keys`` is False (a record read
    back must keep its order) (atomically, see :func:`write_bytes`)."""
    return write_text(path, json.dumps(_plain(obj), indent=1, sort_keys=sort_keys) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    """Parse a JSON file; errors name the file."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {path}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not a UTF-8 JSON file: {error}") from None


# ------------------------------------------------------------------------------ records
def append_records(path: str | os.PathLike[str], records: Iterable[RunRecord | dict]) -> Path:
    """Append run records to a JSONL file, one per line (the file is rewritten atomically)."""
    from dyckbook.record import RunRecord

    path = Path(path)
    old = path.read_bytes() if path.is_file() else b""
    lines = [json.dumps(_plain(r.to_dict() if isinstance(r, RunRecord) else r), sort_keys=True)
             for r in records]
    return write_bytes(path, old + "".join(line + "\n" for line in lines).encode())


def keep_records(path: str | os.PathLike[str], keep: Callable[[RunRecord], bool]
                 ) -> list[RunRecord]:
    """The records of a JSONL file that ``keep`` accepts; the file is rewritten to hold only
    those when it held others (a resume cache of another recipe's records)."""
    found = read_records(path)
    kept = [r for r in found if keep(r)]
    if len(kept) < len(found):
        write_bytes(path, b"")
        append_records(path, kept)
    return kept


def read_records(path: str | os.PathLike[str]) -> list[RunRecord]:
    """Run records of a JSONL file (a missing file holds none)."""
    from dyckbook.record import RunRecord

    path = Path(path)
    if not path.is_file():
        return []
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(RunRecord.from_dict(json.loads(line)))
            except (json.JSONDecodeError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{i} is not a run record: {error}") from None
    return out


# ------------------------------------------------------------------------------ datasets
def write_dataset(path: str | os.PathLike[str], dataset: Dataset) -> Path:
    """:func:`dataset_text` to ``path``."""
    return write_text(path, dataset_text(dataset))


def dataset_text(dataset: Dataset) -> str:
    """JSONL: a header line (format, language), then per string ``{"s", "member", "kind"}`` and
    its hardness profile (``dyckbook.hardness``): ``bin``, ``w_star``, ``counter`` and
    ``end_distance`` (the last three null for members)."""
    lang = dataset.language
    header = {"format": _DATASET_FORMAT, "k": lang.k, "max_depth": lang.max_depth,
              "pairs": list(lang.pairs), "n": len(dataset)}
    lines = [json.dumps(header, ensure_ascii=False)]
    h = dataset.hardness()
    bins = h.bins()
    for i, (s, m, k) in enumerate(zip(dataset.strings(), dataset.labels, dataset.kinds)):
        row = {"s": s, "member": bool(m), "kind": str(k), "bin": str(bins[i])}
        if not h.member[i]:
            row.update(w_star=int(h.w_star[i]), counter=bool(h.counter[i]),
                       end_distance=int(h.end_distance[i]))
        lines.append(json.dumps(row, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def read_dataset(path: str | os.PathLike[str]) -> Dataset:
    """Read a file written by :func:`write_dataset`; labels are checked against the language."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        header = json.loads(lines[0]) if lines else {}
        if not isinstance(header, dict) or header.get("format") != _DATASET_FORMAT:
            raise ValueError(f"first line is not a {_DATASET_FORMAT} header")
        numbers, rows = [], []  # file line of every row (blank lines skipped)
        for number, line in enumerate(lines[1:], 2):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(f"line {number} is not JSON ({error})") from None
                numbers.append(number)
        language = Dyck(header["k"], header["max_depth"], header["pairs"])
        data = Dataset.from_strings(language, [r["s"] for r in rows], [r["kind"] for r in rows])
        stated = np.array([bool(r["member"]) for r in rows], dtype=bool)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {path}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path} is not a dyckbook dataset: {error}") from None
    if (stated != data.labels.astype(bool)).any():
        bad = int(np.flatnonzero(stated != data.labels.astype(bool))[0])
        raise ValueError(f"{path}: line {numbers[bad]} says member={stated[bad]} for "
                         f"{rows[bad]['s']!r}, which is wrong for {language.name}")
    return data




# ------------------------------------------------------------------------------ BIG-bench


def read_bigbench(path: str | os.PathLike[str], k: int = 4) -> Any:
    """Read a ``dyck_languages`` file into a ``CompletionSet``: BIG-Bench Hard's, or the
    original BIG-bench task's (``target_scores``, ``task_prefix``; see
    ``completion.parse_bigbench``); errors name the path and the example."""
    from dyckbook.completion import parse_bigbench

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such BIG-bench file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error})") from None
    return parse_bigbench(text, str(path), k)
