"""Every file dyckbook writes or reads: result folders, run records, datasets and models.

Layout, relative to the output root (the repository, or ``$DYCKBOOK_ROOT``)::

    book/runs/<profile>/<group>/<run>.ipynb   executed notebook, published only after success
    book/results/<profile>/<group>/<run>/     what the run wrote (records.jsonl, fig_*.png, ...)
        run.json                              the runner's record (hashes, status, last attempt)
    book/results/<profile>/index.json         the profile's runs, rewritten when a run publishes
    book/pages/                               the pages of the profile a book build shows
    scratch/<notebook>/               where a notebook run by hand writes (never published)

Writes are atomic (a temporary file in the same folder, then a rename), refuse to replace
anything but a regular file, and leave files with the permissions the umask gives (0644 as a
rule).
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dyckbook.dataset import Dataset
from dyckbook.languages import Dyck

if TYPE_CHECKING:  # torch and the run module load only when records or models are touched
    import torch

    from dyckbook.run import RunRecord

__all__ = ["PAGES_DIR", "RESULTS_DIR", "ROOT_ENV", "RUNS_DIR", "SCRATCH_DIR", "append_records",
           "dataset_text", "load_model", "migrate_legacy_tree", "profile_index", "read_bigbench",
           "read_dataset", "read_json", "read_records", "repo_root", "resolve",
           "run_notebook_path", "run_results_dir", "save_model", "write_bigbench", "write_bytes",
           "write_dataset", "write_json", "write_text"]

ROOT_ENV = "DYCKBOOK_ROOT"
RUNS_DIR = Path("book") / "runs"
RESULTS_DIR = Path("book") / "results"
PAGES_DIR = Path("book") / "pages"
SCRATCH_DIR = Path("scratch")
RUN_RECORD = "run.json"  # the runner's record of a run, in its results folder
_DATASET_FORMAT = "dyckbook.dataset/2"
_MODEL_FORMAT = "dyckbook.model/2"


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


def _check_name(what: str, name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(f"{what} must be a plain file name, got {name!r}")


def run_notebook_path(profile: str, group: str, run: str,
                      root: str | os.PathLike[str] | None = None) -> Path:
    """``book/runs/<profile>/<group>/<run>.ipynb`` under the output root: a run's published page."""
    for what, name in (("profile", profile), ("group", group), ("run", run)):
        _check_name(what, name)
    return resolve(RUNS_DIR / profile / group / f"{run}.ipynb", root)


def run_results_dir(profile: str, group: str, run: str,
                    root: str | os.PathLike[str] | None = None) -> Path:
    """``book/results/<profile>/<group>/<run>/`` under the output root: a run's published files."""
    for what, name in (("profile", profile), ("group", group), ("run", run)):
        _check_name(what, name)
    return resolve(RESULTS_DIR / profile / group / run, root)


def profile_index(profile: str, root: str | os.PathLike[str] | None = None) -> Path:
    """``book/results/<profile>/index.json``: the runs a profile has published (for the book)."""
    _check_name("profile", profile)
    return resolve(RESULTS_DIR / profile / "index.json", root)


def migrate_legacy_tree(root: str | os.PathLike[str]) -> str | None:
    """Move a tree of the layout before profiles (``book/results/<group>``, one profile for all)
    under the profile its ``index.json`` names; returns that profile, or None if nothing moved.
    Its runs then show as stale (their results folders moved) until rerun; none is deleted."""
    root = Path(root)
    legacy = root / RESULTS_DIR / "index.json"
    if not legacy.is_file():
        return None
    try:
        profile = str(read_json(legacy)["profile"])
    except (ValueError, KeyError, TypeError):
        return None
    for base in (root / RESULTS_DIR, root / RUNS_DIR):
        dest = base / profile
        dest.mkdir(parents=True, exist_ok=True)
        for child in list(base.iterdir()):
            if child.is_dir() and not (child / RUN_RECORD).exists() and any(
                    (g / RUN_RECORD).is_file() or g.suffix == ".ipynb" for g in child.iterdir()):
                if not (dest / child.name).exists():
                    os.replace(child, dest / child.name)
    os.replace(legacy, profile_index(profile, root))
    logging.getLogger(__name__).warning(
        "moved the results of profile %s into %s and %s (results are kept per profile now)",
        profile, RESULTS_DIR / profile, RUNS_DIR / profile)
    return profile



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


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as indented, key-sorted JSON (atomically, see :func:`write_bytes`)."""
    return write_text(path, json.dumps(_plain(obj), indent=1, sort_keys=True) + "\n")


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
    from dyckbook.run import RunRecord

    path = Path(path)
    old = path.read_bytes() if path.is_file() else b""
    lines = [json.dumps(_plain(r.to_dict() if isinstance(r, RunRecord) else r), sort_keys=True)
             for r in records]
    return write_bytes(path, old + "".join(line + "\n" for line in lines).encode())


def read_records(path: str | os.PathLike[str]) -> list[RunRecord]:
    """Run records of a JSONL file (a missing file holds none)."""
    from dyckbook.run import RunRecord

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


# ------------------------------------------------------------------------------ models
def save_model(path: str | os.PathLike[str], model: torch.nn.Module) -> Path:
    """Write a single model's config, seed and weights (tensors and plain containers only, so
    :func:`load_model` reads it with ``weights_only=True``: nothing in the file is executed)."""
    import torch

    seeds = list(model.seeds)
    if len(seeds) != 1:
        raise ValueError(f"save_model takes a single model, got one holding {len(seeds)}")
    payload = {"format": _MODEL_FORMAT, "config": model.config.to_dict(), "seed": seeds[0],
               "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()}}
    path = Path(path)
    if path.exists() and not path.is_file():
        raise ValueError(f"refusing to replace {path}: it is not a regular file")
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return write_bytes(path, buffer.getvalue())


def load_model(path: str | os.PathLike[str]) -> torch.nn.Module:
    """Rebuild a model saved by :func:`save_model`: its config, seed and weights.

    The file is read with ``torch.load(weights_only=True)``, so nothing in it is executed.

    Args:
        path: A ``str`` or ``os.PathLike`` (a ``pathlib.Path``): the file ``save_model`` wrote.

    Returns:
        The single model (a ``Classifier``, ``ThesisClassifier``, ``EncoderDecoder`` or
        ``DecoderOnly``) on the CPU, in eval mode, with ``config`` and ``seeds`` as saved.

    Raises:
        FileNotFoundError: no such file.
        ValueError: ``path`` is not a str or path, the file is not a dyckbook model, or its
            weights do not fit its config.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from dyckbook.model import Classifier, ModelConfig
        >>> from dyckbook.results import load_model, save_model
        >>> model = Classifier(ModelConfig(k=2, n_ctx=10, d_model=8, d_mlp=16), seeds=[7])
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     loaded = load_model(save_model(Path(folder) / "model.pt", model))
        >>> loaded.config == model.config, list(loaded.seeds), loaded.training
        (True, [7], False)
        >>> load_model(7)
        Traceback (most recent call last):
        ...
        ValueError: load_model: path must be a str or os.PathLike, got 7 (int)
    """
    import torch

    from dyckbook.run import MODEL_CONFIGS, build_model

    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"load_model: path must be a str or os.PathLike, "
                         f"got {path!r} ({type(path).__name__})")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such model file: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many types for foreign or corrupt files
        raise ValueError(f"{path} is not a dyckbook model file ({type(error).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != _MODEL_FORMAT:
        raise ValueError(f"{path} is not a dyckbook model file (format {_MODEL_FORMAT})")
    config = dict(payload["config"])
    kind = config.get("kind")
    if kind not in MODEL_CONFIGS:
        raise ValueError(f"{path} holds an unknown model kind {kind!r}")
    model = build_model(MODEL_CONFIGS[kind].from_dict(config), [int(payload["seed"])])
    try:
        model.load_state_dict(payload["state_dict"])
    except RuntimeError as error:
        raise ValueError(f"the weights in {path} do not fit its config: {error}") from None
    return model.eval()


# ------------------------------------------------------------------------------ BIG-bench
def write_bigbench(path: str | os.PathLike[str], completions: Any) -> Path:
    """A BIG-Bench (Hard) ``dyck_languages`` JSON file of a completion set (atomic)."""
    from dyckbook.completion import to_bigbench_json

    return write_text(path, to_bigbench_json(completions))


def read_bigbench(path: str | os.PathLike[str], k: int = 4) -> Any:
    """Read a BIG-bench / BBH ``dyck_languages`` file into a ``CompletionSet``; errors name the
    path and the example."""
    from dyckbook.completion import parse_bigbench

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such BIG-bench file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text ({error})") from None
    return parse_bigbench(text, str(path), k)
