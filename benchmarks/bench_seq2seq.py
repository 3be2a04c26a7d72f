"""Benchmark of the encoder–decoder of seed 001 on Dyck completion (issue 14's targets).

Usage: ``python benchmarks/bench_seq2seq.py [--parts train,decode,bbh,budgets] [--full]
[--threads 2]``; writes ``benchmarks/results/seq2seq.json`` (parts run earlier are kept) and
prints a table. Wall clock, with the load average at start stored: on a shared machine two
threads wait for each other at every step, so compare only runs on an idle machine. Parts:

- ``train``: Dyck-3 suffix completion, prefixes 4-50 (HELM), 2 + 2 layers, d_model 64, learned
  positions: seconds and steps to >= 99% validation exact match (teacher-forced exactness,
  which equals greedy exact match), then exact match on the in-distribution and the OOD
  (52-100) test sets; the decoder-only model (4 layers, fewer parameters) on the same data
  beside it. By default each trains with a budget of ``--steps`` (cosine decay over it, so
  the part stays within minutes); ``--full`` gives the encoder–decoder 8,000 steps (it reaches
  99% near 6,500: a quarter of an hour on two idle cores) and the decoder-only model 3,000.
- ``decode``: greedy decoding of 50 tokens for 256 prefixes (``<eos>`` suppressed so every row
  runs 50 steps), with the key/value cache and by recomputing the output so far; medians of 3.
- ``bbh``: Dyck-4 with 1-3 final closers removed (BIG-Bench Hard's format), scored through a
  BIG-bench JSON file written and parsed back, against code-davinci-002's 56.8% (CoT).
- ``budgets``: parameters of the two architectures.
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

from dyckbook.completion import (
    CompletionDataConfig,
    make_completion_splits,
    parse_bigbench,
    to_bigbench_json,
)
from dyckbook.seq2seq import (
    CompletionTask,
    Seq2SeqConfig,
    build_seq2seq,
    evaluate_completions,
    greedy_decode,
    source_tokens,
)
from dyckbook.train import TrainConfig, train
from dyckbook.vocab import EOS

BBH_COT, BBH_DIRECT = 0.568, 0.468  # code-davinci-002 on BBH dyck_languages (Suzgun et al.)
ED = {"k": 3, "n_ctx": 100, "d_model": 64, "n_heads": 4, "d_mlp": 256, "pos_encoding": "learned"}
DO = {**ED, "arch": "decoder_only", "n_encoder_layers": 0, "n_decoder_layers": 4}
TRAIN = {"lr": 2e-3, "batch_size": 64, "warmup_steps": 200, "schedule": "cosine",
         "grad_clip": 1.0, "target_accuracy": 0.99}
FULL_STEPS = 8000  # --full: the encoder–decoder's schedule (it reaches 99% near 6,500)


def fit(model_kw: dict, data_kw: dict, max_steps: int, eval_every: int = 250) -> dict:
    """Train one model (cosine decay over ``max_steps``) until 99% validation exact match;
    score its tests."""
    data = make_completion_splits(CompletionDataConfig(n_train=50_000, n_val=500, n_test=2000,
                                                       **data_kw), seed=0)
    model = build_seq2seq(Seq2SeqConfig(**model_kw), [0])
    config = TrainConfig(**TRAIN, max_steps=max_steps, eval_every=eval_every)
    result = train(model, CompletionTask(), [data.train], [data.val], config)
    stop = result.stopped_at[0]
    return {"model": model_kw, "data": data_kw, "n_params": model.n_params,
            "steps": result.steps, "stopped_at": stop, "seconds": result.seconds,
            "seconds_to_99": next((h["seconds"] for h in result.history if h["step"] == stop),
                                  None),
            "val_curve": [[h["step"], round(h["seconds"], 1), h["val_accuracy"][0]]
                          for h in result.history],
            "exact_match": {name: evaluate_completions(model, s)[0].accuracy
                            for name, s in data.tests.items()},
            "_model": model, "_tests": data.tests}


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
    parser.add_argument("--parts", default="train,decode,bbh,budgets")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=1500, help="cap of the train part")
    parser.add_argument("--full", action="store_true",
                        help="train the encoder-decoder to 99%% exact match")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = table.RESULTS / "seq2seq.json"
    report = json.loads(out.read_text())["raw"] if out.is_file() else {}
    parts = args.parts.split(",")
    report["machine"] = {"platform": platform.platform(), "torch": torch.__version__,
                         "cpu_count_visible": os.cpu_count(), "threads": args.threads,
                         "load_average_at_start": list(os.getloadavg())}
    if "train" in parts:
        ed = fit(ED, {"k": 3}, FULL_STEPS if args.full else args.steps)
        do = fit(DO, {"k": 3}, min(args.steps, 3000) if not args.full else 3000)
        report["train"] = {"full": args.full, "encoder_decoder": ed, "decoder_only": do}
    if "decode" in parts:
        report["decode"] = decode_part(256, 50)
    if "bbh" in parts:
        bbh = fit({**ED, "k": 4}, {"k": 4, "regime": "bbh"}, args.steps)
        scored = parse_bigbench(to_bigbench_json(bbh["_tests"]["in_distribution"]), "bbh file")
        bbh["exact_match"]["bigbench_file"] = evaluate_completions(bbh["_model"],
                                                                   scored)[0].accuracy
        report["bbh"] = {**bbh, "code_davinci_002": {"cot": BBH_COT, "direct": BBH_DIRECT}}
    if "budgets" in parts:
        report["budgets"] = {"encoder_decoder_2+2": build_seq2seq(Seq2SeqConfig(**ED)).n_params,
                             "decoder_only_4": build_seq2seq(Seq2SeqConfig(**DO)).n_params}
    trained = [report["bbh"]] if "bbh" in report else []
    if "train" in report:
        trained += [report["train"]["encoder_decoder"], report["train"]["decoder_only"]]
    for entry in trained:  # the model and test sets are not JSON
        entry.pop("_model", None)
        entry.pop("_tests", None)
    load = report["machine"]["load_average_at_start"]
    table.save("seq2seq", table_rows(report), report, load, "full" if args.full else "small")
    print_table(report)
    print(f"wrote {table.RESULTS / 'seq2seq.json'}")


def table_rows(report: dict) -> list[dict]:
    """The rows of the benchmarks' table for whatever parts the report holds."""
    rows = []
    if "train" in report:
        for name in ("encoder_decoder", "decoder_only"):
            r = report["train"][name]
            label = f"completion, Dyck-3 suffix, {name.replace('_', '-')}"
            rows += [table.row(label, f"seconds to 99% validation exact match "
                               f"({r['n_params']} parameters, budget {r['steps']} steps)",
                               r["seconds_to_99"] or "not reached", target="≤ 120 s"),
                     table.row(label, "exact match, prefixes 4-50",
                               r["exact_match"]["in_distribution"], target="≥ 0.99"),
                     table.row(label, "exact match, prefixes 52-100 (OOD)",
                               r["exact_match"]["ood"])]
    if "decode" in report:
        for name in ("encoder_decoder", "decoder_only"):
            d = report["decode"][name]["seconds"]
            rows.append(table.row(f"greedy decoding, {name.replace('_', '-')}",
                                  "seconds for 256 x 50 tokens, key/value cache vs recomputing",
                                  d["cached"], d["recomputed"], target="≥ 3×",
                                  lower_is_better=True))
    if "bbh" in report:
        b = report["bbh"]
        rows.append(table.row("completion, BBH-style Dyck-4",
                              "exact match via a BIG-bench file vs code-davinci-002 (CoT)",
                              b["exact_match"]["bigbench_file"], BBH_COT))
    return rows


def print_table(report: dict) -> None:
    """The headline numbers against the issue's targets."""
    rows = [("load average at start", report["machine"]["load_average_at_start"], "")]
    if "train" in report:
        for name in ("encoder_decoder", "decoder_only"):
            r = report["train"][name]
            rows += [(f"Dyck-3 suffix, {name}: seconds to 99% val", r["seconds_to_99"], "<= 120"),
                     ("  steps (stopped at | taken), parameters",
                      f"{r['stopped_at']} | {r['steps']}, {r['n_params']}", ""),
                     ("  exact match in-distribution (4-50)",
                      r["exact_match"]["in_distribution"], ">= 0.99"),
                     ("  exact match OOD (52-100)", r["exact_match"]["ood"], "report")]
    if "decode" in report:
        for name in ("encoder_decoder", "decoder_only"):
            d = report["decode"][name]
            rows.append((f"decode 256 x 50, {name}: cached | recomputed s",
                         f"{d['seconds']['cached']:.2f} | {d['seconds']['recomputed']:.2f}", ""))
            rows.append(("  speed-up", d["speedup"], ">= 3"))
    if "bbh" in report:
        b = report["bbh"]
        rows += [("BBH-style Dyck-4: seconds to 99% val", b["seconds_to_99"], ""),
                 ("  exact match (BIG-bench file, 4-50)", b["exact_match"]["bigbench_file"],
                  f"> {BBH_COT} (code-davinci-002, CoT)"),
                 ("  exact match OOD (52-100)", b["exact_match"]["ood"], "report")]
    if "budgets" in report:
        rows.append(("parameters: encoder-decoder 2+2 | decoder-only 4",
                     " | ".join(str(v) for v in report["budgets"].values()), "comparable"))
    for name, value, target in rows:
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"{name:<48} {shown:>22}   {target}")


if __name__ == "__main__":
    main()
