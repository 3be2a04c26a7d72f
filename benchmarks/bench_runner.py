"""Measure the papermill runner: wall time of a fixture workload with --jobs 1 vs --jobs 2.

Usage: .venv/bin/python benchmarks/bench_runner.py [--runs 8] [--work 2.0] [--repeats 1]

Each run executes tests/fixtures/notebooks/ok.ipynb, which spends ``work`` seconds of CPU time
(``work = 0`` measures pure runner + kernel start-up overhead). Writes
benchmarks/results/runner.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from dyckbook import runner

REPO = Path(__file__).resolve().parent.parent
OK = REPO / "tests" / "fixtures" / "notebooks" / "ok.ipynb"


def manifest(path: Path, runs: int, work: float) -> Path:
    data = {
        "version": 1,
        "notebooks": {"bench": {"path": str(OK), "stage": 1,
                                "outputs": ["metrics.json", "per_length.csv", "config.json"],
                                "params": {"seed": 0, "scale": 1.0, "work_s": work}}},
        "runs": {"bench": {"notebook": "bench", "params": {}}},
        "profiles": {"bench": {"seeds": list(range(runs))}},
    }
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def measure(runs: int, work: float, jobs: int, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            m = manifest(Path(tmp) / "m.yml", runs, work)
            t0 = time.perf_counter()
            rc = runner.run(profile="bench", jobs=jobs, force=True, manifest=m,
                            out_root=Path(tmp) / "out", echo=lambda line: None)
            times.append(time.perf_counter() - t0)
            if rc != 0:
                raise RuntimeError(f"benchmark runs failed (jobs={jobs})")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--work", type=float, nargs="+", default=[0.0, 2.0],
                        help="CPU seconds per run (several values: one row each)")
    args = parser.parse_args()
    rows = []
    load_before = os.getloadavg()
    for work in args.work:
        t1 = measure(args.runs, work, 1, args.repeats)
        t2 = measure(args.runs, work, 2, args.repeats)
        m1, m2 = statistics.median(t1), statistics.median(t2)
        rows.append({"runs": args.runs, "work_s_per_run": work, "jobs1_s": round(m1, 2),
                     "jobs2_s": round(m2, 2), "speedup": round(m1 / m2, 2),
                     "jobs1_per_run_s": round(m1 / args.runs, 2),
                     "jobs2_per_run_s": round(m2 / args.runs, 2),
                     "jobs1_all_s": [round(t, 2) for t in t1],
                     "jobs2_all_s": [round(t, 2) for t in t2]})
    out = {"benchmark": "runner --jobs 1 vs --jobs 2 on fixture notebooks",
           "cores": len(os.sched_getaffinity(0)), "machine": platform.machine(),
           "python": platform.python_version(), "repeats": args.repeats, "rows": rows,
           "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
           "note": "the machine may be shared with other processes; compare ratios, not times"}
    target = REPO / "benchmarks" / "results" / "runner.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(f"{'runs':>4} {'work/run':>8} {'jobs=1':>8} {'jobs=2':>8} {'speed-up':>8}")
    for r in rows:
        print(f"{r['runs']:>4} {r['work_s_per_run']:>7.1f}s {r['jobs1_s']:>7.1f}s "
              f"{r['jobs2_s']:>7.1f}s {r['speedup']:>7.2f}x")
    print(f"wrote {target.relative_to(REPO)}")


if __name__ == "__main__":
    main()
