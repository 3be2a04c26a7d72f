"""Hardness layer throughput: profiles, long-range negatives, the oracle's slowest fit.

- ``hardness.profile`` (w* from the string's structure) vs finding w* by trying widths with the
  window tables of ``languages.locally_valid`` (w = 2..9, as far as Dyck-3's tables go), on
  Dyck-3 hard negatives (window None) of length 16 and 48: profiles per CPU-second.
- Long-range negatives and their matched members per CPU-second: ``stack`` (Dyck-3, length 48)
  and ``far`` (Dyck-1, length 40).
- The n-gram baseline's fit (1..4-grams, Dyck-3, 4,000 training strings of length 4..48), the
  slowest rule of the oracle: Newton's Hessian in float64 (before) vs float32 (the default).
- ``baselines.attack_regime`` on the Dyck-3 stack set (1,500 pairs to fit, 1,500 to score).
- The sets' construction against training: the grid's Dyck-3 data at the cpu profile's size
  (one seed; all 36 cells of k = 3 share it) as a share of the grid's training CPU per seed and
  k, as ``profile_cost.json`` records it (issue 50: under 20%).

Process CPU time, one thread, median of the repeats. Writes benchmarks/results/hardness.json.
``--scale 0.1`` is a quick run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
import table
import torch

from dyckbook.data import hardness
from dyckbook.data import negatives as N
from dyckbook.data.languages import Dyck, locally_valid
from dyckbook.data.protocol import DataConfig, make_splits, regime_lengths
from dyckbook.rules import baselines as B

WIDTHS = range(2, 10)  # (2k)^w <= 2^24 for k = 3


def cpu(fn: Callable[[], object], repeats: int) -> float:
    """Median process CPU seconds of ``fn`` over ``repeats`` calls (after one warm-up)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def w_star_by_tables(lang: Dyck, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The reference: the smallest width in ``WIDTHS`` whose enumerated windows reject."""
    out = np.zeros(lengths.size, np.int64)
    for w in WIDTHS:
        rejects = ~locally_valid(lang, codes, lengths, w) & (out == 0)
        out[rejects] = w
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not 0 < args.scale <= 1:
        parser.error(f"--scale must be in (0, 1], got {args.scale}")
    torch.set_num_threads(1)
    load = os.getloadavg()
    rng = np.random.default_rng(0)
    lang3, lang1 = Dyck(3), Dyck(1)
    n = max(200, int(20_000 * args.scale))
    raw, rows = {}, []
    for length in (16, 48):
        codes, lengths, _ = N.sample_negatives(lang3, rng, [length] * n, "hard", None)
        ours = hardness.profile(lang3, codes, lengths).w_star
        theirs = w_star_by_tables(lang3, codes, lengths)
        seen = ours <= WIDTHS[-1]
        if not np.array_equal(ours[seen], theirs[seen]) or (theirs[~seen] != 0).any():
            raise RuntimeError(f"w* disagrees with the window tables at length {length}")
        a = cpu(lambda c=codes, n=lengths: hardness.profile(lang3, c, n), args.repeats)
        b = cpu(lambda c=codes, n=lengths: w_star_by_tables(lang3, c, n), args.repeats)
        raw[f"profile_{length}"] = {"n": n, "seconds": a, "tables_seconds": b}
        rows.append(table.row(f"hardness, L = {length}", "profiles/s (Dyck-3 hard negatives) vs "
                              "trying w = 2..9 with window tables", n / a, n / b))
    m = max(100, int(4_000 * args.scale))
    for lang, kind, length in ((lang3, "stack", 48), (lang1, "far", 40)):
        draw = [lang, rng, [length] * m, kind]
        neg = cpu(lambda a=draw: N.sample_negatives(*a), args.repeats)
        mem = cpu(lambda a=draw: N.sample_matched_members(*a), args.repeats)
        raw[kind] = {"n": m, "length": length, "negatives_seconds": neg, "members_seconds": mem}
        rows.append(table.row(f"long-range, {lang.name}, L = {length}",
                              f"{kind} negatives/s", m / neg))
        rows.append(table.row(f"long-range, {lang.name}, L = {length}",
                              f"{kind} matched members/s", m / mem))
    config = DataConfig(k=3, min_length=4, max_length=48, n_train=8000, test_sets=("hard",))
    train = make_splits(config, 0).train
    fit_rows = np.arange(min(4000, len(train)))
    data = (train.codes[fit_rows], train.lengths[fit_rows], train.labels[fit_rows])
    fits = {}
    for dtype in (np.float64, np.float32):
        B._HESSIAN_DTYPE = dtype
        fits[np.dtype(dtype).name] = cpu(lambda: B.NGrams(lang3).fit(*data), args.repeats)
    B._HESSIAN_DTYPE = np.float32
    raw["ngrams_fit"] = {"strings": int(fit_rows.size), "seconds": fits}
    rows.append(table.row("oracle, Dyck-3, L = 4..48", "1..4-gram fit seconds, float32 vs "
                          "float64 Hessian", fits["float32"], fits["float64"],
                          lower_is_better=True))
    pairs = max(200, int(1_500 * args.scale))
    lengths = regime_lengths(lang3, "stack", 4, 48)
    attack = cpu(lambda: B.attack_regime(lang3, "stack", lengths, pairs), 1)
    raw["attack_stack"] = {"pairs": pairs, "seconds": attack}
    kept = [name for name in B.STACK_FREE if name not in B.recognisers(lang3)]
    rows.append(table.row("oracle, Dyck-3, L = 30..48", f"attack_regime seconds ({pairs} + "
                          f"{pairs} pairs, {len(kept)} rules)", attack, lower_is_better=True))
    # the sets' construction against a run's training (issue 50: under 20%): the grid's Dyck-3
    # data at the cpu profile's size (hard and stack test sets; every cell of k = 3 shares them,
    # per seed) against the grid's recorded training CPU per seed and k (profile_cost.json)
    grid = DataConfig(k=3, min_length=4, max_length=48, n_train=int(8000 * args.scale),
                      n_val=500, n_test=2000, test_sets=("hard", "stack"))
    start = time.process_time()
    make_splits(grid, 0)
    splits = time.process_time() - start
    cost = {r["run"]: r for r in json.loads((table.RESULTS / "profile_cost.json").read_text())[
        "raw"]["runs"]}.get("ablation-grid", {})
    per_seed = (cost.get("cpu_seconds") or 0) / 20  # 10 seeds, k = 1 and 3
    raw["grid_splits"] = {"seconds": splits, "training_per_seed_and_k": per_seed}
    rows.append(table.row("construction vs training", "the grid's Dyck-3 splits (cpu size, "
                          "one seed), share of its training per seed and k", splits / per_seed
                          if per_seed else None, target="< 0.2", lower_is_better=True))
    path = table.save("hardness", rows, raw, load, "full" if args.scale == 1 else "small")
    for r in rows:
        ratio = f" ({r['ratio']:.1f}x)" if r["ratio"] else ""
        print(f"  {r['benchmark']}: {r['measure']}: {table.number(r['dyckbook'])}{ratio}")
    print(f"1 torch thread; load average at the start {load[0]:.2f}; wrote {path}")


if __name__ == "__main__":
    main()
