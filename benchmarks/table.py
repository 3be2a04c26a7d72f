"""The benchmarks' results as one Markdown table (benchmarks/README.md) and README.md's times.

Every ``benchmarks/results/*.json`` holds a ``table`` (rows of :data:`ROW_KEYS`), its raw
numbers, the ``load_average`` at its start and the ``date``. ``python benchmarks/table.py``
rewrites the text between the markers; ``--check`` exits 1 when either file is stale.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TABLE_FILE, TIMES_FILE = ROOT / "benchmarks" / "README.md", ROOT / "README.md"
TABLE_MARKERS = ("<!-- table:start -->", "<!-- table:end -->")
TIMES_MARKERS = ("<!-- times:start -->", "<!-- times:end -->")
ROW_KEYS = ("benchmark", "measure", "dyckbook", "reference", "ratio", "target")
MAKE_TARGETS = ("test", "book")  # the make targets bench_make.py times (make.json's "runs")


def before_after(code: str, argv: Sequence[str], before: str, after: str = "HEAD",
                 repeats: int = 3) -> dict[str, Any]:
    """``code`` (a script printing one JSON object of numbers) run with the package of commit
    ``before`` and of ``after`` (each a git worktree on ``PYTHONPATH``, one torch thread),
    ``repeats`` rounds with the two interleaved so that the machine's load meets both alike:
    ``{"before": ref, "after": ref, "rounds": [{"before": {...}, "after": {...}}, ...],
    "median": {"before": {...}, "after": {...}}}``."""
    import statistics
    import subprocess
    import tempfile

    refs = {"before": before, "after": after}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for name, ref in refs.items():
            trees[name] = Path(tmp) / name
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach",
                            str(trees[name]), ref], capture_output=True, text=True, check=True)
        try:
            rounds = []
            for _ in range(repeats):
                out = {}
                for name, tree in trees.items():
                    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
                    done = subprocess.run([sys.executable, "-c", code, *argv], env=env,
                                          cwd=tmp, capture_output=True, text=True, check=False)
                    if done.returncode:
                        raise RuntimeError(f"{name} ({refs[name]}): {done.stderr[-800:]}")
                    out[name] = json.loads(done.stdout.strip().splitlines()[-1])
                rounds.append(out)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(tree)], capture_output=True, check=False)
    median = {name: {key: statistics.median(r[name][key] for r in rounds)
                     for key in rounds[0][name]} for name in refs}
    ratios = {key: statistics.median(r["after"][key] / r["before"][key] for r in rounds)
              for key in rounds[0]["after"]}  # each round's after over its before
    return {**{name: commit(ref) for name, ref in refs.items()}, "rounds": rounds,
            "median": median, "median_ratio": ratios}


def commit(ref: str) -> str:
    """The short hash of ``ref`` in the repository."""
    import subprocess

    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref],
                          capture_output=True, text=True, check=True).stdout.strip()


def row(benchmark: str, measure: str, dyckbook: float | str | None,
        reference: float | None = None, target: str | None = None,
        lower_is_better: bool = False) -> dict[str, Any]:
    """One table row; ``ratio`` is how many times better dyckbook does than the reference
    (``dyckbook / reference`` for rates, ``reference / dyckbook`` for times and sizes)."""
    ratio = None
    if isinstance(dyckbook, (int, float)) and reference and dyckbook:
        ratio = reference / dyckbook if lower_is_better else dyckbook / reference
    return {"benchmark": benchmark, "measure": measure, "dyckbook": dyckbook,
            "reference": reference, "ratio": ratio, "target": target}


def save(name: str, rows: Sequence[dict[str, Any]], raw: dict[str, Any],
         load_average: Sequence[float], sizes: str) -> Path:
    """Write ``results/<name>.json``: the table, the raw numbers, the load average at the start
    (1, 5, 15 min), the date and the sizes (``full`` or ``small``); the file is checked first."""
    data = {"table": list(rows), "raw": raw, "load_average": [round(x, 2) for x in load_average],
            "date": time.strftime("%Y-%m-%d %H:%M"), "sizes": sizes}
    path = RESULTS / f"{name}.json"
    check_result(data, path.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def save_or_write(out: Path, name: str, rows: Sequence[dict[str, Any]], raw: dict[str, Any],
                  load_average: Sequence[float], sizes: str) -> Path:
    """:func:`save` when ``out`` is ``results/<name>.json``; elsewhere (a trial run) the table
    and the raw numbers only, as plain JSON."""
    if Path(out).resolve() == (RESULTS / f"{name}.json").resolve():
        return save(name, rows, raw, load_average, sizes)
    Path(out).write_text(json.dumps({"raw": raw, "table": list(rows)}, indent=1) + "\n")
    return Path(out)


def check_result(data: Any, name: str) -> None:
    """Raise ValueError naming ``name`` and the field if ``data`` lacks the results schema."""
    if not isinstance(data, dict):
        raise TypeError(f"{name}: must hold a JSON object, got {type(data).__name__}")
    for key in ("table", "load_average", "date"):
        if key not in data:
            raise ValueError(f"{name}: missing top-level key {key!r}")
    load = data["load_average"]
    if (not isinstance(load, list) or len(load) != 3
            or not all(isinstance(x, (int, float)) for x in load)):
        raise ValueError(f"{name}: load_average must be 3 numbers (1, 5, 15 min), got {load!r}")
    if not isinstance(data["table"], list) or not data["table"]:
        raise ValueError(f"{name}: table must be a non-empty list of rows")
    for i, r in enumerate(data["table"]):
        if not isinstance(r, dict) or tuple(r) != ROW_KEYS:
            raise ValueError(f"{name}: table[{i}] must have exactly the keys {ROW_KEYS}, got {r!r}")
        for key in ("reference", "ratio"):
            if r[key] is not None and not isinstance(r[key], (int, float)):
                raise ValueError(f"{name}: table[{i}].{key} must be a number or null, "
                                 f"got {r[key]!r}")


def read_results(folder: Path) -> dict[str, dict[str, Any]]:
    """``{file stem: data}`` of every results file, checked, in name order."""
    out = {}
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path.name} is not JSON: {error}") from None
        check_result(data, path.name)
        out[path.stem] = data
    return out


def number(value: Any) -> str:
    """A cell: thousands separators for large numbers, three significant digits for small."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def render_table(results: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of every row, then when and under which load each file was measured."""
    lines = ["| benchmark | measure | dyckbook | reference | ratio | target |",
             "|---|---|--:|--:|--:|---|"]
    for data in results.values():
        for r in data["table"]:
            ratio = "–" if r["ratio"] is None else f"{number(r['ratio'])}×"
            lines.append(f"| {r['benchmark']} | {r['measure']} | {number(r['dyckbook'])} | "
                         f"{number(r['reference'])} | {ratio} | {r['target'] or ''} |")
    lines.append("")
    for name, data in results.items():
        load = " / ".join(f"{x:.2f}" for x in data["load_average"])
        sizes = f", {data['sizes']} sizes" if "sizes" in data else ""
        lines.append(f"- `{name}.json`: {data['date']}, load average {load} (1 / 5 / 15 min)"
                     f"{sizes}")
    return "\n".join(lines)


def _resumed(cost: dict[str, Any]) -> str:
    """How a cost counted runs resumed from a cache: at their full (longest) duration, or, in
    a cost measured before ``bench_profile_cost`` read ``longest_s``, at their last one; a run
    whose models all came from a cache, at its models' training alone."""
    runs = cost["raw"]["runs"]
    if not all(r.get("resumed_at_full_duration") for r in runs):
        return (", each run at its last recorded duration: a run resumed from the run cache "
                "counts only its resume, so a lower bound")
    cached = [r["run"] for r in runs if r.get("resumed_models")]
    return ", each run at its longest recorded duration" + (
        f" ({', '.join(cached)}: {'its' if len(cached) == 1 else 'their'} models' training "
        "alone, resumed from a cache: a lower bound)" if cached else "")


def render_times(make: dict[str, Any] | None, cost: dict[str, Any] | None = None,
                 defaults: dict[str, Any] | None = None) -> str:
    """README.md's sentences on how long ``make test`` and ``make book`` take, what the
    profiles' runs cost (``bench_profile_cost.py``; a ``make book`` measured before the cost
    was estimated is marked with what its runs take now), and what each notebook's defaults
    take (``bench_defaults.py``)."""
    return _make_and_cost(make, cost) + _defaults(defaults)


def _defaults(defaults: dict[str, Any] | None) -> str:
    if defaults is None:
        return ""
    runs = defaults["raw"]["notebooks"]
    each = [f"{stem} {_duration(r['cpu_seconds'])}" if r["status"] == "ok"
            else f"{stem} not measured ({r['status'].split(':')[0]})" for stem, r in runs.items()]
    return (f" A notebook's defaults (`papermill` without `-p`), CPU time on "
            f"{defaults['raw']['cores']} cores: {', '.join(each)} "
            f"(`bench_defaults.py`, {defaults['date'][:10]}).")


def _duration(seconds: float) -> str:
    """``40 s`` under a minute and a half, else ``3 min``."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _make_and_cost(make: dict[str, Any] | None, cost: dict[str, Any] | None) -> str:
    runs = (make or {}).get("raw", {}).get("runs", {})
    cpu = cost and sum(r["cpu_seconds"] or 0 for r in cost["raw"]["runs"]) / 3600
    parts = []
    for target in MAKE_TARGETS:
        r = runs.get(target)
        if r is None:
            parts.append(f"`make {target}`: not measured yet")
            continue
        parts.append(f"`make {target}` about {_duration(r['target_seconds'])} "
                     f"(measured {r['date']}, {r['cores']} cores, load "
                     f"{r['load_average'][0]:.1f})")
    setup = [runs[t]["venv_seconds"] for t in MAKE_TARGETS if t in runs]
    tail = (f"; `.venv` adds about {_duration(max(setup))} the first time" if setup else "")
    text = ("Expected times on a fresh clone (`benchmarks/bench_make.py`): "
            + "; ".join(parts) + tail + ".")
    if cost is None:
        return text
    text += (f" A full recompute of the cpu profile (`make book RERUN=all`): about {cpu:.1f} h of"
             f" runs on 2 cores{_resumed(cost)}.")
    long = {r["run"]: r for r in cost["raw"]["runs"]}.get("long", {}).get("thesis_seconds")
    uncosted = [r["run"] for r in cost["raw"]["runs"] if r.get("thesis_seconds") is None]
    rows = cost["raw"].get("gpu", [])
    gpu = {g["run"]: g["gpu_seconds"] / 3600 for g in rows if g["gpu_seconds"] is not None}
    card = " ".join(rows[0]["gpu"].split()[1:2]) if rows else ""
    short = [g["run"] for g in rows if g["gpu_seconds"] is None or g.get("lower_bound")]
    whole = (f"; on one {card}: at least {sum(gpu.values()):,.1f} h ({len(short)} of its runs "
             "costed by their training alone or not at all)" if short else
             f"; on one {card}: about {sum(gpu.values()):,.1f} h") if len(rows) > 1 else ""
    return (f"{text} `PROFILE=thesis`: about "
            f"{cost['raw']['total_seconds'] / 3600:,.0f} h here"
            + (f" without {', '.join(uncosted)}" if uncosted else "")
            + (f", {long / 3600:,.0f} h of it long context" if long else "")
            + (f" (about {gpu['long']:,.1f} h on an {card})" if "long" in gpu else "")
            + whole + f" (`bench_profile_cost.py`, {cost['date'][:10]}).")


def between(text: str, markers: tuple[str, str], body: str, path: Path) -> str:
    """``text`` with the lines between the two markers replaced by ``body``."""
    start, end = markers
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"{path}: needs the markers {start} and {end}, in that order")
    return f"{text[:i + len(start)]}\n{body}\n{text[j:]}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the README tables are not those of results/*.json")
    args = parser.parse_args(argv)
    results = read_results(RESULTS)
    wanted = {TABLE_FILE: (TABLE_MARKERS, render_table(results)),
              TIMES_FILE: (TIMES_MARKERS, render_times(results.get("make"),
                                                     results.get("profile_cost"),
                                                     results.get("defaults")))}
    stale = []
    for path, (markers, body) in wanted.items():
        text = path.read_text(encoding="utf-8")
        new = between(text, markers, body, path)
        if new != text:
            stale.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print("stale (run python benchmarks/table.py): " + ", ".join(map(str, stale)),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
