"""The adversary's attack on the long-range (``stack`` regime) sets: every stack-free rule of
``dyckbook.rules.adversary.ADVERSARY`` and ``baselines.BASELINES`` (those that do not recognise the
language outright) fitted on ``--n`` members and ``--n`` negatives of a length bin
(``protocol.balanced_sample``: matched members) and scored on a fresh sample of the same size,
balanced accuracy, for Dyck-1 (``far``), Dyck-2 and Dyck-3 (``stack``) at lengths 30-36, 38-42
and 44-48 (issue 50: the target is <= 0.55 for every rule and bin). Also each rule's fit and
predict seconds. Writes benchmarks/results/adversary.json and prints the table.

    python benchmarks/bench_adversary.py [--n 4000] [--ks 1 2 3] [--out FILE]
        [--before FILE --before-sets COMMIT]

``--before`` folds in the table this script wrote on the sets of an older commit (run there,
the rules' reach set to today's W), so that one JSON holds the sets before and after a change.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import table

from dyckbook.data.languages import Dyck
from dyckbook.rules import adversary as A
from dyckbook.rules import baselines as B

BINS = ((30, 36), (38, 42), (44, 48))
TARGET = 0.55


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4000, help="members (and negatives) per sample")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=table.RESULTS / "adversary.json")
    parser.add_argument("--before", type=Path, default=None,
                        help="this script's JSON on the sets of an older commit")
    parser.add_argument("--before-sets", default=None, metavar="COMMIT",
                        help="the commit whose sets --before measured")
    args = parser.parse_args(argv)
    if (args.before is None) != (args.before_sets is None):
        parser.error("--before and --before-sets go together")
    load = os.getloadavg()
    names = (*A.ADVERSARY, *B.BASELINES)
    raw: dict = {"n": args.n, "seed": args.seed, "target": TARGET, "languages": {}}
    rows = []
    for k in args.ks:
        language = Dyck(k)
        scores: dict[str, dict[str, float]] = {}
        seconds: dict[str, list[float]] = {}
        for lo, hi in BINS:
            start = time.perf_counter()
            timings: dict[str, tuple[float, float]] = {}
            out = A.attack_regime(language, "stack", range(lo, hi + 1, 2), args.n,
                                  seed=args.seed, bins=[(lo, hi)], names=names, timings=timings)
            for name, row in out.items():
                scores.setdefault(name, {})[f"{lo}-{hi}"] = round(row[f"{lo}-{hi}"], 4)
                seconds.setdefault(name, []).append(round(sum(timings[name]), 2))
            print(f"Dyck-{k} {lo}-{hi}: {time.perf_counter() - start:.0f} s", flush=True)
        raw["languages"][language.name] = {"balanced_accuracy": scores, "seconds": seconds}
        worst = max((v, name, b) for name, row in scores.items() for b, v in row.items())
        rows.append(table.row("adversary on the stack sets",
                              f"{language.name}: strongest stack-free rule, balanced accuracy "
                              f"({worst[1]}, {worst[2]})", worst[0], target=f"<= {TARGET}",
                              lower_is_better=True))
        print(f"{language.name}:")
        for name, row in scores.items():
            flag = " <-- above target" if max(row.values()) > TARGET else ""
            print(f"  {name:14s} " + " ".join(f"{v:.3f}" for v in row.values()) + flag)
    if args.before is not None:
        before = json.loads(args.before.read_text())["raw"]
        raw["before"] = {"sets_commit": args.before_sets, **before}
    print(table.save_or_write(args.out, "adversary", rows, raw, load, "full"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
