"""Benchmark of the encoder–decoder of seed 001 on Dyck completion (issue 14's targets).

Usage: ``python benchmarks/bench_seq2seq.py [--threads 2] [--quick]``; writes
``benchmarks/results/seq2seq.json`` and prints a table. Parts:

- ``train``: time to >= 99% exact match (validation, greedy = teacher-forced exactness) on
  in-distribution Dyck-3 suffix completion (prefix lengths 4-50), learned positions; then exact
  match on the in-distribution and the HELM-style OOD (52-100) test sets. Wall clock, with the
  load average at start stored: on a shared machine two threads wait for each other.
- ``decode``: greedy decoding of 50 target tokens for 256 prefixes (``<eos>`` suppressed so every
  row runs 50 steps), with the key/value cache and by recomputing the prefix; medians of 3.
- ``bbh``: Dyck-4, 1-3 final closers removed (BIG-Bench Hard's format), scored through a
  BIG-bench JSON file written and parsed back, against code-davinci-002's 56.8% (CoT).
- ``budgets``: parameters of the encoder–decoder and of the decoder-only model compared.
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

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dyckbook.completion import (CompletionDataConfig, make_completion_splits,
                                 parse_bigbench, to_bigbench_json)
from dyckbook.seq2seq import (CompletionTask, DecoderOnly, EncoderDecoder,
                              Seq2SeqConfig, evaluate_completions, greedy_decode, source_tokens)
from dyckbook.train import TrainConfig, train
from dyckbook.vocab import EOS

BBH_COT = 0.568  # code-davinci-002, chain of thought, BBH dyck_languages (Suzgun et al., 2022)
BBH_DIRECT = 0.468  # the same model, direct answer
MODEL = {"k": 3, "n_ctx": 100, "d_model": 64, "n_heads": 4, "d_mlp": 256, "norm": "pre",
         "pos_encoding": "learned"}
TRAIN = {"lr": 3e-3, "batch_size": 64, "warmup_steps": 200, "grad_clip": 1.0, "eval_every": 100,
         "target_accuracy": 0.99}


def train_part(k: int, regime: str, max_steps: int, n_test: int) -> tuple[dict, EncoderDecoder,
                                                                         dict]:
    """Train one encoder–decoder until 99% validation exact match (or ``max_steps``)."""
    data = make_completion_splits(CompletionDataConfig(k=k, regime=regime, n_train=100_000,
                                                       n_val=500, n_test=n_test), seed=0)
    model = EncoderDecoder(Seq2SeqConfig(**{**MODEL, "k": k}), [0])
    result = train(model, CompletionTask(), [data.train], [data.val],
                   TrainConfig(**TRAIN, max_steps=max_steps))
    stop = result.stopped_at[0]
    seconds = next((h["seconds"] for h in result.history if h["step"] == stop), None)
    out = {"k": k, "regime": regime, "n_params": model.n_params, "steps": result.steps,
           "stopped_at": stop, "seconds_to_99": seconds, "seconds": result.seconds,
           "val_curve": [[h["step"], round(h["seconds"], 1), h["val_accuracy"][0]]
                         for h in result.history]}
    return out, model, data.tests


def decode_part(model: EncoderDecoder, tests: dict, batch: int, steps: int) -> dict:
    """Seconds to decode ``steps`` tokens for ``batch`` prefixes, cached and recomputed."""
    prefixes = tests["in_distribution"].subset(np.arange(batch))
    source = source_tokens(prefixes.codes, prefixes.lengths, int(prefixes.lengths.max()))
    with torch.no_grad():
        model.unembed.bias[..., EOS] = -1e9  # every row runs all the steps
    times = {}
    for cached in (True, False):
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            out = greedy_decode(model, source, steps, use_cache=cached)
            runs.append(time.perf_counter() - start)
        assert out.shape == (batch, steps)
        times["cached" if cached else "recomputed"] = statistics.median(runs)
    return {"batch": batch, "target_tokens": steps, "seconds": times,
            "speedup": times["recomputed"] / times["cached"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a few steps, to check the script")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "seq2seq.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    max_steps, n_test = (30, 200) if args.quick else (4000, 2000)
    report = {"machine": {"platform": platform.platform(), "torch": torch.__version__,
                          "cpu_count_visible": os.cpu_count(), "threads": args.threads},
              "load_average_at_start": list(os.getloadavg()), "quick": args.quick,
              "model": MODEL, "train_config": TRAIN}

    dyck3, model, tests = train_part(3, "suffix", max_steps, n_test)
    dyck3["exact_match"] = {name: evaluate_completions(model, s)[0].accuracy
                            for name, s in tests.items()}
    report["dyck3_suffix"] = dyck3
    report["decode"] = decode_part(model, tests, 256, 50)

    bbh, model, tests = train_part(4, "bbh", max_steps, n_test)
    scored = parse_bigbench(to_bigbench_json(tests["in_distribution"]), "bbh-style test set")
    bbh["exact_match"] = {"bigbench_file": evaluate_completions(model, scored)[0].accuracy,
                          "ood": evaluate_completions(model, tests["ood"])[0].accuracy}
    bbh["code_davinci_002"] = {"cot": BBH_COT, "direct": BBH_DIRECT}
    report["bbh_dyck4"] = bbh

    base = {**MODEL, "norm": "post"}
    report["budgets"] = {
        "encoder_decoder_2+2": EncoderDecoder(Seq2SeqConfig(**base)).n_params,
        "decoder_only_4": DecoderOnly(Seq2SeqConfig(**base, arch="decoder_only",
                                                    n_encoder_layers=0,
                                                    n_decoder_layers=4)).n_params}

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    rows = [
        ("Dyck-3 suffix: seconds to 99% val exact match", dyck3["seconds_to_99"], "<= 120"),
        ("Dyck-3 suffix: steps", dyck3["stopped_at"] or dyck3["steps"], ""),
        ("Dyck-3 suffix: exact match, in-distribution (4-50)",
         dyck3["exact_match"]["in_distribution"], ">= 0.99"),
        ("Dyck-3 suffix: exact match, OOD (52-100)", dyck3["exact_match"]["ood"], "report"),
        ("decode 50 tokens x 256: cached s", report["decode"]["seconds"]["cached"], ""),
        ("decode 50 tokens x 256: recomputed s", report["decode"]["seconds"]["recomputed"], ""),
        ("decode speed-up", report["decode"]["speedup"], ">= 3"),
        ("BBH-style Dyck-4: seconds to 99%", bbh["seconds_to_99"], ""),
        ("BBH-style Dyck-4: exact match (BIG-bench file)", bbh["exact_match"]["bigbench_file"],
         f"> {BBH_COT}"),
        ("BBH-style Dyck-4: exact match, OOD (52-100)", bbh["exact_match"]["ood"], "report"),
        ("parameters: encoder-decoder 2+2 | decoder-only 4",
         f"{report['budgets']['encoder_decoder_2+2']} | {report['budgets']['decoder_only_4']}",
         "comparable"),
    ]
    print(f"load average at start: {report['load_average_at_start']}")
    for name, value, target in rows:
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"{name:<52} {shown:>16}   {target}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
