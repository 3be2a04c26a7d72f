"""The files dyckbook writes or reads: JSON, run records, datasets, BIG-bench tasks.

Paths are relative to the output root (the repository, or ``$DYCKBOOK_ROOT``: :func:`resolve`);
the published tree's layout is the pipeline's (``pipeline.manifest``). Models are saved and
loaded by ``checkpoint``.

Writes are atomic (a temporary file in the same folder, then a rename), refuse to replace
anything but a regular file, and leave files with the permissions the umask gives (0644 as a
rule).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dyckbook.data.completion import parse_bigbench
from dyckbook.data.dataset import Dataset
from dyckbook.data.languages import Dyck

if TYPE_CHECKING:  # torch loads only when records are touched
    from dyckbook.experiment.record import RunRecord

__all__ = ["ROOT_ENV", "append_records", "baselines_path", "dataset_text", "expand_records",
           "keep_records", "read_bigbench", "read_dataset", "read_json", "read_records",
           "read_stored", "record_files", "repo_root", "resolve", "shown", "source_root",
           "stored", "write_bytes", "write_dataset", "write_json", "write_records", "write_text"]

ROOT_ENV = "DYCKBOOK_ROOT"
_DATASET_FORMAT = "dyckbook.dataset/2"  # a file format's name, not a module path: never renamed


def source_root() -> Path:
    """The repository: the first folder upward from here holding ``notebooks/experiments.yml``
    (so a notebook opened from ``notebooks/`` finds it), else the package's parent folder."""
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / "notebooks" / "experiments.yml").is_file():
            return candidate
    return Path(__file__).resolve().parents[2]


def repo_root() -> Path:
    """The output root: ``$DYCKBOOK_ROOT`` if set, else the repository."""
    env = os.environ.get(ROOT_ENV)
    return Path(env).resolve() if env else source_root()


def shown(path: str | os.PathLike[str]) -> str:
    """``path`` as a page may print it: relative to the output root or the repository
    (``book/results/cpu/...``, ``.cache/runs``), else its last two parts; never a machine's
    temporary or home folders."""
    path = Path(path).resolve()
    for base in (repo_root(), source_root()):
        try:
            return path.relative_to(base.resolve()).as_posix()
        except ValueError:
            continue
    return Path(*path.parts[-2:]).as_posix()


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
# A run record carries the shortcut baselines' scores on its test sets (``RunRecord.baselines``,
# about 40 KB with every per-length count). They depend on the data alone, so every
# configuration trained on the same strings repeats them (07: eight records a blob, 9.4 MB).
# The file therefore holds each distinct blob once, in a companion ``<stem>.baselines.jsonl``
# (lines ``{"digest", "baselines"}``), and a record names it by digest; reading puts it back.
_SHARED = ".baselines.jsonl"


def baselines_path(path: str | os.PathLike[str]) -> Path:
    """The companion of a records file that holds its baselines' scores once each
    (``records.jsonl`` -> ``records.baselines.jsonl``)."""
    path = Path(path)
    return path.with_name(path.name[:-len(".jsonl")] + _SHARED if path.name.endswith(".jsonl")
                          else path.name + _SHARED)


def record_files(name: str) -> list[str]:
    """A records file's relative name and its companion's (what a resume cache must keep)."""
    return [name, baselines_path(name).as_posix()] if name.endswith(".jsonl") else [name]


def _digest_baselines(blob: Any) -> str:
    text = json.dumps(blob, sort_keys=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:20]


def stored(path: str | os.PathLike[str]) -> Path | None:
    """The file that holds ``path``: itself, else ``path.gz`` (large published records are
    committed gzip-compressed: ``pipeline.compact``), else None."""
    path = Path(path)
    return next((p for p in (path, path.with_name(path.name + ".gz")) if p.is_file()), None)


def read_stored(path: str | os.PathLike[str]) -> bytes:
    """The bytes :func:`stored` holds for ``path``, decompressed (b"" where none is)."""
    data = (found := stored(path)) and found.read_bytes() or b""
    return gzip.decompress(data) if found and found.suffix == ".gz" else data


def _json_lines(path: Path) -> list[tuple[int, Any]]:
    out = []
    for i, line in enumerate(read_stored(path).decode("utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append((i, json.loads(line)))
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{i} is not JSON: {error}") from None
    return out


def _read_shared(path: Path) -> dict[str, Any]:
    shared = baselines_path(path)
    out = {}
    for i, row in _json_lines(shared):
        if not isinstance(row, dict) or set(row) != {"digest", "baselines"}:
            raise ValueError(f"{shared}:{i} is not a baselines line ({{digest, baselines}})")
        out[row["digest"]] = row["baselines"]
    return out


def expand_records(lines: Iterable[Mapping[str, Any]], shared: Iterable[Mapping[str, Any]],
                   where: str = "records", companion: str = "its companion", first: int = 1
                   ) -> list[dict[str, Any]]:
    """Record dicts with the baselines they name by digest put back (``shared``: the
    companion's lines); a digest the companion lacks is a ValueError naming it, the file
    ``where`` and the line (``first``: the first record's)."""
    table = {row["digest"]: row["baselines"] for row in shared}
    out = []
    for i, line in enumerate(lines, first):
        if not isinstance(line, Mapping):  # not a record: as it is
            out.append(line)
            continue
        line = dict(line)
        ref = line.get("baselines")
        if isinstance(ref, str):
            if ref not in table:
                raise ValueError(f"{where}:{i} names baselines {ref}, which "
                                 f"{companion} does not hold")
            line["baselines"] = table[ref]
        out.append(line)
    return out


def append_records(path: str | os.PathLike[str], records: Iterable[RunRecord | dict]) -> Path:
    """Append run records to a JSONL file, one per line, their baselines' scores to its
    companion (:func:`baselines_path`) once per distinct blob (both rewritten atomically, the
    companion first; a file stored compressed is read, then replaced by the plain one)."""
    from dyckbook.experiment.record import (  # deferred: start-up: torch (~0.8 s) off the CLI path
        RunRecord,
    )

    path = Path(path)
    old = read_stored(path)
    known = _read_shared(path)
    new_shared, lines = [], []
    for r in records:
        data = _plain(r.to_dict() if isinstance(r, RunRecord) else dict(r))
        blob = data.get("baselines")
        if isinstance(blob, dict) and blob:
            digest = _digest_baselines(blob)
            if digest not in known:
                known[digest] = blob
                new_shared.append(json.dumps({"digest": digest, "baselines": blob},
                                             sort_keys=True))
            data["baselines"] = digest
        lines.append(json.dumps(data, sort_keys=True))
    if new_shared:
        shared = baselines_path(path)
        write_bytes(shared, read_stored(shared) + "".join(x + "\n" for x in new_shared).encode())
    write_bytes(path, old + "".join(line + "\n" for line in lines).encode())
    for p in [p for p in (baselines_path(path), path) if p.is_file()]:  # holds its .gz now
        p.with_name(p.name + ".gz").unlink(missing_ok=True)
    return path


def write_records(path: str | os.PathLike[str], records: Iterable[RunRecord | dict]) -> Path:
    """Replace a records file (and its companion) by ``records``."""
    path = Path(path)
    records = list(records)
    for p in (baselines_path(path), path):
        if stored(p):
            write_bytes(p, b"")
    return append_records(path, records)


def keep_records(path: str | os.PathLike[str], keep: Callable[[RunRecord], bool]
                 ) -> list[RunRecord]:
    """The records of a JSONL file that ``keep`` accepts; the file is rewritten to hold only
    those when it held others (a resume cache of another recipe's records)."""
    found = read_records(path)
    kept = [r for r in found if keep(r)]
    if len(kept) < len(found):
        write_records(path, kept)
    return kept


def read_records(path: str | os.PathLike[str]) -> list[RunRecord]:
    """Run records of a JSONL file (a missing file holds none), with the baselines' scores
    its companion holds put back (a file written before there was one holds them inline)."""
    from dyckbook.experiment.record import (  # deferred: start-up: torch (~0.8 s) off the CLI path
        RunRecord,
    )

    path = Path(path)  # a missing file holds no lines
    shared = [{"digest": d, "baselines": b} for d, b in _read_shared(path).items()]
    out = []
    for i, line in _json_lines(path):
        try:
            [data] = expand_records([line], shared, str(path), str(baselines_path(path)), i)
            out.append(RunRecord.from_dict(data))
        except (KeyError, TypeError, AttributeError) as error:
            raise ValueError(f"{path}:{i} is not a run record: {error}") from None
    return out


# ------------------------------------------------------------------------------ datasets
def write_dataset(path: str | os.PathLike[str], dataset: Dataset) -> Path:
    """:func:`dataset_text` to ``path``."""
    return write_text(path, dataset_text(dataset))


def dataset_text(dataset: Dataset) -> str:
    """JSONL: a header line (format, language), then per string ``{"s", "member", "kind"}`` and
    its hardness profile (``dyckbook.data.hardness``): ``bin``, ``w_star``, ``counter`` and
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
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such BIG-bench file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error})") from None
    return parse_bigbench(text, str(path), k)
