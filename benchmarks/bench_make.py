"""Wall time of ``make test`` and ``make book`` on a fresh clone: README.md's expected times.

Each target runs in its own ``git clone`` of this repository's HEAD (uncommitted changes are
not in it) in a temporary folder: ``make venv`` first (timed apart: creating ``.venv``, with
pip's download cache as this machine has it), then ``make <target>``; the last run's times
(``make book`` takes over an hour on 2 cores) are in make.json. Results are merged into
benchmarks/results/make.json, so ``--what test`` keeps the last ``book`` time;
``python benchmarks/table.py`` then writes them into README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import table

TARGETS = {"test": ("test",), "book": ("book",), "both": table.MAKE_TARGETS}


def timed(command: list[str], cwd: Path, log: Path) -> tuple[float, float]:
    """Run ``command`` (output appended to ``log``); wall and child CPU seconds, or exit with
    the log's tail if it fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with log.open("a") as out:
        code = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                              env=env, check=False).returncode
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if code:
        tail = log.read_text(errors="replace")[-4000:]
        sys.exit(f"{' '.join(command)} failed (exit {code}) in {cwd}:\n{tail}")
    return wall, (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)


def time_target(target: str, root: Path, keep: Path | None = None) -> dict[str, Any]:
    """Clone ``root`` into a temporary folder (or into ``keep``, which is left in place with
    its results and built book), then time ``make venv`` and ``make <target>``."""
    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="dyckbook-make-") as tmp:
        base = keep or Path(tmp)
        clone, log = base / f"dyckbook-{target}", base / f"make-{target}.log"
        subprocess.run(["git", "clone", "--quiet", str(root), str(clone)], check=True)
        venv_wall, venv_cpu = timed(["make", "venv"], clone, log)
        print(f"make venv: {venv_wall / 60:.1f} min", flush=True)
        wall, cpu = timed(["make", target], clone, log)
    print(f"make {target}: {wall / 60:.1f} min", flush=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M"), "commit": commit, "cores": os.cpu_count(),
            "load_average": [round(x, 2) for x in load],
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
            "venv_seconds": venv_wall, "venv_cpu_seconds": venv_cpu,
            "target_seconds": wall, "target_cpu_seconds": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", required=True, choices=sorted(TARGETS),
                        help="which make target(s) to time")
    parser.add_argument("--keep", type=Path, default=None,
                        help="an empty or new folder to clone into and keep (default: deleted)")
    args = parser.parse_args()
    root = table.ROOT
    if args.keep is not None:
        if args.keep.exists() and any(args.keep.iterdir()):
            parser.error(f"--keep must name an empty or new folder, got {str(args.keep)!r}")
        args.keep.mkdir(parents=True, exist_ok=True)
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True,
                           text=True, check=True).stdout.strip()
    if dirty:
        print("note: uncommitted changes are not in the clone; HEAD is timed", file=sys.stderr)
    load = os.getloadavg()
    path = table.RESULTS / "make.json"
    runs = json.loads(path.read_text())["raw"]["runs"] if path.exists() else {}
    for target in TARGETS[args.what]:
        runs[target] = time_target(target, root, args.keep)
    rows = []
    for target in table.MAKE_TARGETS:
        if target in runs:
            rows += [table.row("make, fresh clone", f"`make {target}` minutes",
                               runs[target]["target_seconds"] / 60),
                     table.row("make, fresh clone", f"`make venv` minutes (before {target})",
                               runs[target]["venv_seconds"] / 60)]
    table.save("make", rows, {"runs": runs}, load, "full")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
