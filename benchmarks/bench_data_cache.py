"""The data cache (``experiment.cache``) on 07's data: made once, or once per configuration.

07's length study trains its configurations of one k on the same splits of each seed; a worker
process that has not made them makes them again, and on a GPU machine that is CPU time the
device waits through. This measures, for 07's parameters in a profile (default ``thesis``) and
each k, one seed's splits: the seconds to make them (what each configuration pays without the
cache), to make and write an entry, and to read it back; the entry's size; and how many of 07's
configurations share those data (process CPU seconds, one torch thread). Writes
benchmarks/results/data_cache.json and prints a table.

    python benchmarks/bench_data_cache.py [--profile thesis] [--ks 1,3] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from dyckbook.chapters import generalisation
from dyckbook.experiment import cache

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table
from bench_length_reach import recipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="thesis")
    parser.add_argument("--ks", default="1,3")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        ks = [int(k) for k in args.ks.split(",")]
    except ValueError:
        raise ValueError(f"--ks must be comma-separated integers, got {args.ks!r}") from None
    import torch

    torch.set_num_threads(1)
    params = recipe(profile=args.profile)
    configs = generalisation.study(params).lengths
    load = os.getloadavg()
    raw: dict = {"profile": args.profile, "seed": args.seed, "ks": {}}
    rows = []
    for k in ks:
        mine = [c for label, c in configs.items() if label.startswith(f"Dyck-{k} ")]
        if not mine:
            raise ValueError(f"--ks: 07's {args.profile} parameters train no Dyck-{k}")
        data = mine[0].data
        sharing = sum(c.data == data for c in mine)
        start = time.process_time()
        cache.make_splits(data, args.seed)
        make = time.process_time() - start
        with tempfile.TemporaryDirectory() as folder:
            os.environ[cache.DATA_ENV] = folder
            start = time.process_time()
            cache.load_or_make(data, args.seed)
            write = time.process_time() - start
            size = sum(p.stat().st_size for p in Path(folder).iterdir())
            start = time.process_time()
            cache.load_or_make(data, args.seed, lambda *a: sys.exit("made, not read"))
            read = time.process_time() - start
            del os.environ[cache.DATA_ENV]
        raw["ks"][k] = {"make_seconds": round(make, 3), "make_and_write_seconds": round(write, 3),
                        "read_seconds": round(read, 4), "entry_bytes": size,
                        "configurations_sharing": sharing, "configurations": len(mine),
                        "n_train": data.n_train, "n_test": data.n_test,
                        "test_max_length": data.test_max_length}
        what = f"07's Dyck-{k} data, one seed ({args.profile} profile)"
        rows += [table.row(what, "seconds to read them from the cache vs to make them",
                           round(read, 4), round(make, 2), lower_is_better=True),
                 table.row(what, "seconds to make and write the entry", round(write, 3)),
                 table.row(what, "entry size (MB, gzip-compressed pickle)",
                           round(size / 2**20, 2)),
                 table.row(what, "configurations that share them (made once each without the "
                                 "cache)", f"{sharing} of {len(mine)}")]
        print(f"Dyck-{k}: make {make:.1f} s, make+write {write:.1f} s, read {read:.3f} s, "
              f"{size / 2**20:.2f} MB, shared by {sharing} of {len(mine)}", flush=True)
    raw["cores"] = os.cpu_count()
    table.save("data_cache", rows, raw, load, "full")
    for r in rows:
        print(f"  {r['benchmark']}: {r['measure']}: {r['dyckbook']}"
              + (f" (x{r['ratio']:.0f})" if r["ratio"] else ""))


if __name__ == "__main__":
    main()
