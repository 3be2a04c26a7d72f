"""Benchmark of the tokenizer and data layer: throughput, bytes per character, generation at scale.

Usage: ``python benchmarks/bench_data.py [--quick]``; writes ``benchmarks/results/data.json``
and prints a table. Thesis figures are the medians in ``ANCHORS.md`` (same machine kind).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dyckbook.data import DatasetSpec, collate, generate_dataset, make_loader  # noqa: E402
from dyckbook.languages import Dyck  # noqa: E402
from dyckbook.tokenizer import DyckTokenizer  # noqa: E402

THESIS_TOKENIZER = {16: 493_000, 1024: 24_000}  # strings / s (ANCHORS.md)
TARGET_RATIO = {16: 5, 1024: 10}


def thesis_tokenize(char_to_token: np.ndarray, strings: list[str]) -> torch.Tensor:
    """The thesis' tokenizer (Annex 8.1) ported line for line, minus its tqdm bars (so the
    baseline is if anything faster than the original): a Python loop per string, float32."""
    max_len = max(max(len(s) for s in strings), 1)
    tokenized = np.full((len(strings), max_len + 2), 1, dtype=np.float32)
    tokenized[:, 0] = 0
    lengths = np.array([len(s) for s in strings])
    for i, s in enumerate(strings):
        tokenized[i, 1:lengths[i] + 1] = char_to_token[[ord(c) for c in s]]
    tokenized[np.arange(len(strings)), lengths + 1] = 2
    return torch.from_numpy(tokenized)


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_tokenizer(repeats: int) -> list[dict]:
    language = Dyck(3)
    tok = DyckTokenizer(language)
    rng = np.random.default_rng(0)
    rows = []
    for length, count in ((16, 100_000), (1024, 10_000)):
        codes, lengths = language.sample_codes(rng, np.full(count, length))
        strings = language.decode(codes, lengths)
        encode = median_seconds(lambda: tok.encode(strings), repeats)
        fast = median_seconds(lambda: tok.encode_codes(codes, lengths), repeats)
        tokens = tok.encode(strings)
        decode = median_seconds(lambda: tok.decode(tokens), repeats)
        char_to_token = np.zeros(256, dtype=np.float32)
        for i, char in enumerate(language.alphabet):
            char_to_token[ord(char)] = i + 3
        assert torch.equal(thesis_tokenize(char_to_token, strings).long(), tokens)
        thesis = median_seconds(lambda: thesis_tokenize(char_to_token, strings), repeats)
        rate = count / encode
        rows.append({
            "length": length, "strings": count,
            "encode_strings_per_s": rate,
            "encode_codes_strings_per_s": count / fast,
            "decode_strings_per_s": count / decode,
            "thesis_strings_per_s": THESIS_TOKENIZER[length],
            "ratio_vs_thesis": rate / THESIS_TOKENIZER[length],
            "thesis_port_same_run_strings_per_s": count / thesis,
            "ratio_vs_thesis_port_same_run": thesis / encode,
            "target_ratio": TARGET_RATIO[length],
        })
    return rows


def bench_batching(repeats: int) -> dict:
    # The thesis' experiment 1 data shape: Dyck-1, lengths 0..16, batch 32.
    spec = DatasetSpec(language="dyck", k=1, n=10_000, min_length=0, max_length=16, seed=0)
    data = generate_dataset(spec)
    tok = DyckTokenizer(data.language)

    def loader_epoch() -> int:
        return sum(1 for _ in make_loader(data, 32, shuffle=True, seed=0, tokenizer=tok))

    def bucket_epoch() -> int:
        return sum(1 for _ in make_loader(data, 32, shuffle=True, bucket=True, tokenizer=tok))

    items = [data[i] for i in range(len(data))]

    def collate_epoch() -> int:  # the per-item path (DataLoader-style list of dicts)
        return sum(1 for i in range(0, len(items), 32) if collate(items[i:i + 32], tok))

    n_batches = loader_epoch()
    out = {"dataset": "Dyck-1, n=10000, lengths 0..16", "batch_size": 32, "batches": n_batches}
    for name, fn in (("loader", loader_epoch), ("bucket_loader", bucket_epoch),
                     ("collate_items", collate_epoch)):
        seconds = median_seconds(fn, repeats)
        out[f"{name}_batches_per_s"] = n_batches / seconds
        out[f"{name}_examples_per_s"] = len(data) / seconds
    out["required_examples_per_s"] = 2700
    return out


def generate_child(n: int, max_length: int) -> None:
    """Run in a fresh process so that ru_maxrss is this generation's peak."""
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    spec = DatasetSpec(language="dyck", k=3, n=n, min_length=0, max_length=max_length, seed=0)
    start = time.perf_counter()
    data = generate_dataset(spec)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    chars = int(data.lengths.sum())
    print(json.dumps({
        "spec": spec.to_dict(), "seconds": seconds, "strings_per_s": n / seconds,
        "characters": chars, "nbytes": data.nbytes, "bytes_per_char": data.nbytes / chars,
        "buffer_bytes": int(data._buffer.nbytes), "peak_rss_mib": peak / 1024,
        "rss_after_imports_mib": base / 1024,
        "kinds": data.kind_counts(),
    }))


def bench_generation(n: int, max_length: int) -> dict:
    result = subprocess.run(
        [sys.executable, __file__, "--generate-child", str(n), str(max_length)],
        capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="fewer repeats and a 20k-string generation instead of 500k")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "data.json"))
    parser.add_argument("--generate-child", nargs=2, type=int, metavar=("N", "MAX_LENGTH"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate_child:
        generate_child(*args.generate_child)
        return
    torch.set_num_threads(1)
    repeats = 3 if args.quick else 7
    gen_n = 20_000 if args.quick else 500_000
    report = {
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "torch": torch.__version__, "numpy": np.__version__,
                    "cpu_count_visible": len(__import__("os").sched_getaffinity(0))},
        "quick": args.quick,
        "load_average_at_start": list(__import__("os").getloadavg()),
        "tokenizer": bench_tokenizer(repeats),
        "batching": bench_batching(repeats),
        "generation": bench_generation(gen_n, 4096),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")

    print(f"load average at start: {report['load_average_at_start']}")
    print(f"{'measure':<52}{'ours':>14}{'thesis':>12}{'ratio':>9}")
    for row in report["tokenizer"]:
        label = f"tokenizer encode, {row['strings']} x L={row['length']} (strings/s)"
        print(f"{label:<52}{row['encode_strings_per_s']:>14,.0f}{row['thesis_strings_per_s']:>12,}"
              f"{row['ratio_vs_thesis']:>8.1f}x  (ANCHORS figure; target >= {row['target_ratio']}x)")
        print(f"{'  thesis port, same run (strings/s)':<52}{'':>14}"
              f"{row['thesis_port_same_run_strings_per_s']:>12,.0f}"
              f"{row['ratio_vs_thesis_port_same_run']:>8.1f}x")
        print(f"{'  encode_codes (strings/s)':<52}{row['encode_codes_strings_per_s']:>14,.0f}")
        print(f"{'  decode (strings/s)':<52}{row['decode_strings_per_s']:>14,.0f}")
    b = report["batching"]
    for name in ("loader", "bucket_loader", "collate_items"):
        print(f"{name + ', batch 32, L 0..16 (batches/s)':<52}{b[name + '_batches_per_s']:>14,.0f}"
              f"{'':>12}  ({b[name + '_examples_per_s']:,.0f} examples/s; need 2,700)")
    g = report["generation"]
    print(f"{'generation, ' + str(g['spec']['n']) + ' strings L 0..4096 (s)':<52}{g['seconds']:>14.1f}")
    print(f"{'  peak RSS (MiB; after imports ' + format(g['rss_after_imports_mib'], '.0f') + ')':<52}"
          f"{g['peak_rss_mib']:>14.0f}")
    print(f"{'  dataset bytes (MiB) / bytes per character':<52}{g['nbytes'] / 2**20:>14.1f}"
          f"{g['bytes_per_char']:>12.4f}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
