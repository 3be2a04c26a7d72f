"""Throughput of the language layer (sampling, hard negatives, membership) against the thesis library."""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import random
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from dyckbook.languages import Dyck, iter_length_chunks, sample_lengths
from dyckbook.negatives import sample_negative_codes

RESULTS = Path(__file__).parent / "results" / "languages.json"
# ANCHORS.md, same machine kind: thesis library strings (or checks) per second
ANCHOR = {
    "positives": {16: 250e3, 128: 36e3, 1024: 4.2e3},
    "negatives": {16: 44e3, 128: 16e3, 1024: 2.5e3},
    "membership": {16: 92e3, 128: 52e3, 1024: 13e3},
}
TARGET = {"positives": {16: 5, 128: 10, 1024: 10}, "negatives": 10, "membership": 20}


def load_thesis(path: str | None):
    """Import the thesis' generator module by file path (its package __init__ needs wandb)."""
    if not path:
        return None
    pkg = Path(path)
    if not (pkg / "generator.py").exists():
        return None
    sys.path.insert(0, str(pkg.parent))
    spec = importlib.util.spec_from_file_location(
        f"{pkg.name}.generator", pkg / "generator.py", submodule_search_locations=None
    )
    try:
        import importlib as il

        return il.import_module(f"{pkg.name}.generator")
    except Exception as err:  # noqa: BLE001 - benchmark only: report and go on
        print(f"thesis library not usable: {err}", file=sys.stderr)
        return None
    finally:
        del spec


def rate(fn, n: int, repeats: int) -> float:
    """Median items per second over ``repeats`` runs of ``fn`` (which processes ``n`` items)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller batches and dataset")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument(
        "--thesis-lib",
        default="/tmp/tclib/dyck_k_generator",
        help="folder holding the thesis' dyck_k_generator package (optional)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    quick = args.quick
    lang = Dyck(args.k)
    thesis = load_thesis(args.thesis_lib)
    rng = np.random.default_rng(0)
    repeats = 3 if quick else 5
    sizes = {16: 20000, 128: 5000, 1024: 1000} if quick else {16: 100000, 128: 20000, 1024: 4000}
    rows = []
    for L, n in sizes.items():
        lengths = np.full(n, L)
        row: dict[str, float | int | None] = {"L": L, "n": n}
        row["positives_per_s"] = rate(lambda: lang.sample(rng, lengths), n, repeats)
        row["positive_codes_per_s"] = rate(lambda: lang.sample_codes(rng, lengths), n, repeats)
        row["hard_negatives_per_s"] = rate(
            lambda: lang.decode(*sample_negative_codes(lang, rng, lengths)[:2]), n, repeats
        )
        words = lang.sample(rng, lengths[: n // 2]) + lang.decode(
            *sample_negative_codes(lang, rng, lengths[: n - n // 2])[:2]
        )
        codes = lang.encode(words)
        row["membership_str_per_s"] = rate(lambda: lang.is_member_batch(words), n, repeats)
        row["membership_codes_per_s"] = rate(lambda: lang.is_member_batch(codes), n, repeats)
        if thesis is not None:
            m = max(200, n // 20)
            r = random.Random(0)
            random.seed(0)
            row["thesis_positives_per_s"] = rate(
                lambda: [thesis._generate_balanced_string(args.k, L) for _ in range(m)], m, 3
            )
            row["thesis_negatives_per_s"] = rate(
                lambda: [thesis._generate_unbalanced_string(args.k, L) for _ in range(m)], m, 3
            )
            sub = words[: m // 2] + words[-(m - m // 2) :]
            row["thesis_membership_per_s"] = rate(
                lambda: [thesis.is_dyck_word(w, args.k) for w in sub], m, 3
            )
            del r
        rows.append(row)

    # a full-size mixed-length set: uniform even lengths 0..4096, half positives, half hard
    n_set = 50_000 if quick else 500_000
    t0 = time.perf_counter()
    lengths = sample_lengths(rng, n_set, 0, 4096)
    pos_len, neg_len = lengths[: n_set // 2], lengths[n_set // 2 :]
    neg_len = neg_len[neg_len >= 4]  # no hard negative exists below length 4
    stored = 0
    for idx in iter_length_chunks(pos_len, 1 << 23):
        codes, ls = lang.sample_codes(rng, pos_len[idx])
        stored += int(ls.sum())
    for idx in iter_length_chunks(neg_len, 1 << 23):
        codes, ls, _ = sample_negative_codes(lang, rng, neg_len[idx])
        stored += int(ls.sum())
    set_seconds = time.perf_counter() - t0
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def ratio(ours, key, L):
        base = None
        for row in rows:
            if row["L"] == L and row.get(f"thesis_{key}_per_s"):
                base = row[f"thesis_{key}_per_s"]
        return ours / base if base else None

    print(
        f"{lang.name}; thesis library {'measured side by side' if thesis else 'not found: ANCHORS.md figures'}"
    )
    header = f"{'L':>5} {'positives/s':>12} {'x':>6} {'hard neg/s':>11} {'x':>6} {'member/s':>10} {'x':>6} {'(codes)':>10}"
    print(header)
    for row in rows:
        L = row["L"]
        xs = []
        for key, ours in (
            ("positives", row["positives_per_s"]),
            ("negatives", row["hard_negatives_per_s"]),
            ("membership", row["membership_str_per_s"]),
        ):
            base = row.get(f"thesis_{key}_per_s") or ANCHOR[key][L]
            row[f"{key}_speedup"] = ours / base
            xs.append(ours / base)
        print(
            f"{L:>5} {row['positives_per_s']:>12,.0f} {xs[0]:>6.1f} {row['hard_negatives_per_s']:>11,.0f} {xs[1]:>6.1f} {row['membership_str_per_s']:>10,.0f} {xs[2]:>6.1f} {row['membership_codes_per_s']:>10,.0f}"
        )
    print(
        f"set of {n_set:,} strings (lengths 0..4096, half hard negatives): {set_seconds:.1f} s, "
        f"{stored / 1e6:.0f} M symbols, peak RSS {peak_rss_mib:.0f} MiB"
    )
    result = {
        "language": lang.name,
        "quick": quick,
        "thesis_library": "measured" if thesis else "ANCHORS.md",
        "anchors": {k: {str(L): v for L, v in d.items()} for k, d in ANCHOR.items()},
        "targets": {
            "positives": {str(L): v for L, v in TARGET["positives"].items()},
            "negatives": 10,
            "membership": 20,
        },
        "rows": rows,
        "dataset": {
            "n": n_set,
            "min_length": 0,
            "max_length": 4096,
            "seconds": set_seconds,
            "symbols": stored,
            "peak_rss_mib": peak_rss_mib,
        },
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "processor": platform.processor() or platform.machine(),
        },
    }
    del ratio
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
