"""Benchmark of seed 001's encoder–decoder on Dyck completion: decoding and sizes (issue 14).

Usage: ``python benchmarks/bench_seq2seq.py [--parts decode,budgets] [--threads 2]``; writes
``benchmarks/results/seq2seq.json`` (parts run earlier are kept) and prints a table. Wall clock,
with the load average at start stored. Parts:

- ``decode``: greedy decoding of 50 tokens for 256 prefixes (``<eos>`` suppressed so every row
  runs 50 steps), with the key/value cache and by recomputing the output so far; medians of 3.
- ``budgets``: parameters of the two architectures.

Time to 99% exact match is measured by ``bench_completion_recipe.py`` (a sweep, then registered
recipes over 5 seeds); BIG-Bench Hard is scored on its 250 real items in the completion chapter
(an earlier ``bbh`` part here scored synthetic BBH-style items against the language model's
score on the real ones: not comparable, removed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import table

from dyckbook.data.completion import (
    CompletionDataConfig,
    make_completion_splits,
)
from dyckbook.data.vocab import EOS
from dyckbook.nn.seq2seq import (
    Seq2SeqConfig,
    build_seq2seq,
    greedy_decode,
    source_tokens,
)

ED = {"k": 3, "n_ctx": 100, "d_model": 64, "n_heads": 4, "d_mlp": 256, "pos_encoding": "learned"}
DO = {**ED, "arch": "decoder_only", "n_encoder_layers": 0, "n_decoder_layers": 4}


def decode_part(batch: int, steps: int) -> dict:
    """Seconds to decode ``steps`` tokens for ``batch`` prefixes, cached and recomputed (the
    weights do not matter for the time: an untrained model with ``<eos>`` suppressed)."""
    tests = make_completion_splits(CompletionDataConfig(n_train=10, n_val=10, n_test=batch),
                                   seed=0).tests["in_distribution"]
    source = source_tokens(tests.codes, tests.lengths, int(tests.lengths.max()))
    out = {}
    for name, kw in (("encoder_decoder", ED), ("decoder_only", DO)):
        model = build_seq2seq(Seq2SeqConfig(**kw), [0])
        with torch.no_grad():
            model.unembed.bias[..., EOS] = -1e9  # every row runs all the steps
        times = {}
        for cached in (True, False):
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                tokens = greedy_decode(model, source, steps, use_cache=cached)
                runs.append(time.perf_counter() - start)
            assert tokens.shape == (batch, steps)
            times["cached" if cached else "recomputed"] = statistics.median(runs)
        out[name] = {"seconds": times, "speedup": times["recomputed"] / times["cached"]}
    return {"batch": batch, "target_tokens": steps, **out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="decode,budgets")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = table.RESULTS / "seq2seq.json"
    report = json.loads(out.read_text())["raw"] if out.is_file() else {}
    parts = args.parts.split(",")
    report["machine"] = {"platform": platform.platform(), "torch": torch.__version__,
                         "cpu_count_visible": os.cpu_count(), "threads": args.threads,
                         "load_average_at_start": list(os.getloadavg())}
    if "decode" in parts:
        report["decode"] = decode_part(256, 50)
    if "budgets" in parts:
        report["budgets"] = {"encoder_decoder_2+2": build_seq2seq(Seq2SeqConfig(**ED)).n_params,
                             "decoder_only_4": build_seq2seq(Seq2SeqConfig(**DO)).n_params}
    for gone in ("train", "bbh"):  # parts removed (see the module's docstring)
        report.pop(gone, None)
    load = report["machine"]["load_average_at_start"]
    table.save("seq2seq", table_rows(report), report, load, "full")
    print_table(report)
    print(f"wrote {table.RESULTS / 'seq2seq.json'}")


def table_rows(report: dict) -> list[dict]:
    """The rows of the benchmarks' table for whatever parts the report holds."""
    rows = []
    if "decode" in report:
        for name in ("encoder_decoder", "decoder_only"):
            d = report["decode"][name]["seconds"]
            rows.append(table.row(f"greedy decoding, {name.replace('_', '-')}",
                                  "seconds for 256 x 50 tokens, key/value cache vs recomputing",
                                  d["cached"], d["recomputed"], target="≥ 3×",
                                  lower_is_better=True))
    return rows


def print_table(report: dict) -> None:
    """The headline numbers against the issue's targets."""
    rows = [("load average at start", report["machine"]["load_average_at_start"], "")]
    if "decode" in report:
        for name in ("encoder_decoder", "decoder_only"):
            d = report["decode"][name]
            rows.append((f"decode 256 x 50, {name}: cached | recomputed s",
                         f"{d['seconds']['cached']:.2f} | {d['seconds']['recomputed']:.2f}", ""))
            rows.append(("  speed-up", d["speedup"], ">= 3"))
    if "budgets" in report:
        rows.append(("parameters: encoder-decoder 2+2 | decoder-only 4",
                     " | ".join(str(v) for v in report["budgets"].values()), "comparable"))
    for name, value, target in rows:
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"{name:<48} {shown:>22}   {target}")


if __name__ == "__main__":
    main()
