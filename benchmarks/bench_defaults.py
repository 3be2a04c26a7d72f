"""What each notebook's defaults cost: ``papermill notebooks/NN.ipynb out.ipynb`` with no ``-p``,
as a JupyterLab user or README's papermill line runs it (issue 54: the README promised about a
minute; 10_completion's took 1,129 CPU-s).

Each notebook runs in a fresh kernel in a temporary output root (``DYCKBOOK_ROOT``: its
``scratch/`` outputs go there, never into the published results), in the manifest's stage
order so a notebook whose defaults read another's scratch outputs (08 reads 05's models, 90
reads 00-04 and 10) finds them. Measured: wall seconds and the CPU seconds of the kernel and
everything it started (``RUSAGE_CHILDREN``). Writes benchmarks/results/defaults.json;
``python benchmarks/table.py`` puts the numbers into README.md.

    python benchmarks/bench_defaults.py [--only 01_dyck1 10_completion] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import table

ROOT = Path(__file__).resolve().parent.parent


def notebooks() -> list[str]:
    """The manifest's notebooks (not its chapters), in stage order."""
    sys.path.insert(0, str(ROOT))
    from dyckbook.pipeline import runner

    man = runner.load_manifest(ROOT / "notebooks" / "experiments.yml")
    found = [nb for nb in man.notebooks.values() if nb.group != "chapters"]
    return [nb.key for nb in sorted(found, key=lambda nb: nb.stage)]


def timed(stem: str, root: Path, limit: float) -> dict[str, Any]:
    """One notebook's defaults in a fresh kernel: wall and CPU seconds, and whether it ran."""
    env = {**os.environ, "DYCKBOOK_ROOT": str(root), "DYCKBOOK_QUIET": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", "papermill", "--no-progress-bar",
                               str(ROOT / "notebooks" / f"{stem}.ipynb"),
                               str(root / f"{stem}.out.ipynb")], cwd=root, env=env,
                              capture_output=True, text=True, timeout=limit, check=False)
        status = "ok" if done.returncode == 0 else f"failed: {done.stderr.strip()[-300:]}"
    except subprocess.TimeoutExpired:
        status = f"stopped after {limit:.0f} s"
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"{stem}: {wall:.0f} s wall, {cpu:.0f} CPU-s, {status}", flush=True)
    return {"wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1), "status": status}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=None, metavar="NOTEBOOK")
    parser.add_argument("--limit-s", type=float, default=3600.0, help="per notebook")
    parser.add_argument("--out", type=Path, default=table.RESULTS / "defaults.json")
    args = parser.parse_args(argv)
    chosen = [n for n in notebooks() if args.only is None or n in args.only]
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="dyckbook-defaults-") as tmp:
        raw = {stem: timed(stem, Path(tmp), args.limit_s) for stem in chosen}
    rows = [table.row("notebook defaults, papermill", f"{stem} CPU seconds", r["cpu_seconds"])
            for stem, r in raw.items() if r["status"] == "ok"]
    raw = {"notebooks": raw, "cores": os.cpu_count()}
    print(table.save_or_write(args.out, "defaults", rows, raw, load, "full"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
