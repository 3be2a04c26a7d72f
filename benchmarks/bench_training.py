"""Training throughput, fraction of the fp32 peak, long inputs, the activation cache, time to 99%.

Parts (``--parts``), all on one torch thread, timed in process CPU seconds (the machine is
shared: a CPU-second is what one dedicated core delivers, against a peak of 160 GFLOP/s per core):

- ``models``: the thesis' experiment-1 architecture (``run.thesis_config(1, literal=False)``;
  2 layers, d_model 256, 1 head, no PE), Dyck-1, lengths <= 16, batch 32: training examples per
  CPU-second of dyckbook's ``Classifier``, of the thesis' model (``ThesisClassifier``, the
  library's model bit for bit) and of a plain ``torch.nn.TransformerEncoder`` stand-in, all
  through ``dyckbook.experiment.train`` (same batches, same Adam), interleaved round by round.
- ``peak``: the Classifier at batch 256: FLOPs (6 x parameters per real token) per CPU-second
  over 160 GFLOP/s, and over the fp32 matmul rate measured now on one thread.
- ``long``: experiment 7's shape (d_model 384, d_mlp 768, Dyck-3, lengths up to 4096, batch 8
  as in the long-context chapter): CPU-seconds per 1000 training sequences with and without
  ``TrainConfig(bucket=True)``, each in its own process (peak RSS is its own).
- ``cache``: ``run_with_cache`` of one 4096-token input through that model: time and memory.
- ``solve``: ``run.run`` on the grid's recipe (2 layers, causal, learned positions, mean
  readout) at the Dyck-3 budget chapter's larger CPU budget (5000 steps, 32,000 strings), for
  Dyck-1 and Dyck-3: CPU-seconds of the whole run (data, training until validation >= 99.5% or
  the budget, evaluation) and the hard-test accuracy it reaches.

``--before REF`` adds exp. 1's training and a whole ``run.run`` with the package of commit
REF against HEAD's, each in its own process, interleaved round by round (a change's ratios).

Writes benchmarks/results/training.json (the parts run; ``raw`` names them). Small sizes:
``--steps 20 --repeats 1 --long-n 8 --long-max 512 --solve-steps 100``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np
import table
import torch
from torch import nn

from dyckbook.chapters.ablation_grid import Cell, GridSpec
from dyckbook.data.dataset import Dataset
from dyckbook.data.languages import Dyck, sample_lengths
from dyckbook.data.negatives import sample_negatives
from dyckbook.data.vocab import PAD
from dyckbook.experiment.checkpoint import build_model
from dyckbook.experiment.run import run, thesis_config
from dyckbook.experiment.train import TrainConfig, train
from dyckbook.nn import tokenizer
from dyckbook.nn.model import ClassificationTask

PEAK_PER_CORE = 160e9  # fp32 matmul FLOP/s of one core of the development machine


def labelled(k: int, n: int, max_length: int, seed: int) -> Dataset:
    """n strings: uniform Dyck-k words of even lengths 0..max_length, hard negatives of 6.."""
    rng, lang = np.random.default_rng(seed), Dyck(k)
    members = Dataset.from_codes(lang, *lang.sample_codes(
        rng, sample_lengths(rng, n // 2, 0, max_length)))
    negatives = sample_negatives(lang, rng, sample_lengths(rng, n - n // 2, 6, max_length),
                                 window=None)
    return Dataset.concat([members, Dataset.from_codes(lang, *negatives)])


class StandIn(nn.Module):
    """A plain ``torch.nn.TransformerEncoder`` classifier of the same shape (post-LN, ReLU,
    [start] readout), with the ``n_models`` / ``seeds`` that ``experiment.train`` reads. Its
    dropout draws from torch's global generator, as torch's modules do."""

    n_models, seeds = 1, [0]

    def __init__(self, d_vocab: int, d_model: int, n_heads: int, d_mlp: int, n_layers: int,
                 dropout: float) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):  # seeded weights, the caller's state kept
            torch.manual_seed(0)
            self.embed = nn.Embedding(d_vocab, d_model)
            layer = nn.TransformerEncoderLayer(d_model, n_heads, d_mlp, dropout,
                                               batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
            self.head = nn.Linear(d_model, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (1, batch, 2) of tokens (1, batch, pos)."""
        x = self.encoder(self.embed(tokens[0]), src_key_padding_mask=tokens[0] == PAD)
        return self.head(x[:, 0])[None]


def examples_per_cpu_s(model: nn.Module, data: Dataset, config: TrainConfig) -> float:
    """Training examples per process CPU-second of ``config.max_steps`` steps of train()."""
    start = time.process_time()
    train(model, ClassificationTask(), [data], None, config)
    return config.max_steps * config.batch_size / (time.process_time() - start)


def part_models(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict]]:
    config = thesis_config(1, literal=False)
    literal = thesis_config(1, literal=True)
    m = config.model
    models = {"dyckbook Classifier": build_model(m, [0]),
              "thesis port (ThesisClassifier)": build_model(literal.model, [0]),
              "nn.TransformerEncoder stand-in": StandIn(m.d_vocab, m.d_model, m.n_heads,
                                                        m.d_mlp, m.n_layers, m.dropout)}
    data = labelled(1, 4000, 16, args.seed)
    steps = TrainConfig(lr=config.train.lr, batch_size=32, max_steps=args.steps)
    for model in models.values():  # warm-up
        train(model, ClassificationTask(), [data], None, TrainConfig(lr=1e-5, max_steps=5))
    rates: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.repeats):  # interleaved, so every model meets the same load
        for name, model in models.items():
            rates[name].append(examples_per_cpu_s(model, data, steps))
    raw = {name: {"examples_per_cpu_s": statistics.median(r), "all": r,
                  "parameters": sum(p.numel() for p in models[name].parameters())}
           for name, r in rates.items()}
    raw["steps_per_timing"], raw["load_average_1min"] = args.steps, os.getloadavg()[0]
    ours = raw["dyckbook Classifier"]["examples_per_cpu_s"]
    rows = [table.row("training, exp. 1", f"examples/CPU-s, batch 32 vs {name}", ours,
                      raw[name]["examples_per_cpu_s"], "≥ 1×")
            for name in list(models)[1:]]
    return raw, rows


def matmul_flops(size: int = 1024, repeats: int = 5) -> float:
    """fp32 matmul FLOP per CPU-second on this thread now (median)."""
    a, b = torch.randn(2, size, size, generator=torch.Generator().manual_seed(0))
    a @ b
    times = []
    for _ in range(repeats):
        start = time.process_time()
        a @ b
        times.append(time.process_time() - start)
    return 2 * size**3 / statistics.median(times)


def part_peak(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict]]:
    config = thesis_config(1, literal=False)
    model = build_model(config.model, [0])
    data = labelled(1, 4096, 16, args.seed)
    batch = 256
    steps = max(2, args.steps // 4)
    train(model, ClassificationTask(), [data], None, TrainConfig(lr=1e-5, max_steps=2,
                                                                 batch_size=batch))
    rate = statistics.median(
        examples_per_cpu_s(model, data, TrainConfig(lr=1e-5, batch_size=batch, max_steps=steps))
        for _ in range(args.repeats))
    tokens_per_example = float(data.lengths.mean()) + 2  # [start] and [end] are real tokens
    flops = 6 * model.n_params * tokens_per_example * rate
    measured = matmul_flops()
    raw = {"batch": batch, "steps_per_timing": steps, "examples_per_cpu_s": rate,
           "parameters": model.n_params, "real_tokens_per_example": tokens_per_example,
           "training_flops_per_cpu_s": flops, "matmul_flops_per_cpu_s_now": measured,
           "fraction_of_160_gflops": flops / PEAK_PER_CORE,
           "fraction_of_matmul_now": flops / measured, "load_average_1min": os.getloadavg()[0]}
    rows = [table.row("training, exp. 1", "fraction of the fp32 peak (160 GFLOP/s per core), "
                      "batch 256", flops / PEAK_PER_CORE),
            table.row("training, exp. 1", "fraction of the fp32 matmul rate measured now",
                      flops / measured)]
    return raw, rows


def child_long(spec: dict[str, Any]) -> dict[str, Any]:
    """One epoch over ``n`` exp.-7-shaped sequences; CPU seconds and peak RSS."""
    config = thesis_config(7, literal=False)
    data = labelled(3, spec["n"], spec["max_length"], spec["seed"])
    model = build_model(config.model, [0])
    start = time.process_time()
    train(model, ClassificationTask(), [data], None,
          TrainConfig(lr=1e-5, batch_size=spec["batch"], epochs=1, bucket=spec["bucket"]))
    seconds = time.process_time() - start
    return {"cpu_seconds": seconds, "cpu_seconds_per_1000": 1000 * seconds / spec["n"],
            "mean_length": float(data.lengths.mean()),
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def child_cache(spec: dict[str, Any]) -> dict[str, Any]:
    """Forward pass and ``run_with_cache`` of one input of ``max_length`` symbols."""
    config = thesis_config(7, literal=False)
    model = build_model(config.model, [0]).eval()
    lang = Dyck(3)
    codes, lengths = lang.sample_codes(np.random.default_rng(spec["seed"]), [spec["max_length"]])
    tokens = tokenizer.encode(codes, lengths)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with torch.inference_mode():
        model(tokens[:, :64])  # warm-up
        start = time.process_time()
        model(tokens)
        forward = time.process_time() - start
        start = time.process_time()
        _, cache = model.run_with_cache(tokens)
        seconds = time.process_time() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"positions": tokens.shape[1], "forward_cpu_seconds": forward,
            "cache_cpu_seconds": seconds, "hooks": len(cache),
            "cache_mib": sum(t.numel() * t.element_size() for t in cache.values()) / 2**20,
            "peak_rss_growth_mib": (peak - before) / 1024, "peak_rss_mib": peak / 1024}


CHILDREN = {"long": child_long, "cache": child_cache}


def in_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``CHILDREN[spec['part']]`` in a fresh process (its own peak RSS)."""
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                         capture_output=True, text=True, check=False)
    if out.returncode:
        raise RuntimeError(f"child {spec} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def part_long(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict]]:
    spec = {"part": "long", "n": args.long_n, "max_length": args.long_max, "batch": 8,
            "seed": args.seed}
    raw = {name: in_child({**spec, "bucket": bucket})
           for name, bucket in (("unbucketed", False), ("bucketed", True))}
    raw.update(spec, load_average_1min=os.getloadavg()[0])
    name = f"training, exp. 7 shape, lengths ≤ {args.long_max}"
    rows = [table.row(name, "CPU-s per 1000 sequences, bucket=True vs False",
                      raw["bucketed"]["cpu_seconds_per_1000"],
                      raw["unbucketed"]["cpu_seconds_per_1000"], lower_is_better=True),
            table.row(name, "peak RSS MiB, bucket=True vs False", raw["bucketed"]["peak_rss_mib"],
                      raw["unbucketed"]["peak_rss_mib"], lower_is_better=True)]
    return raw, rows


def part_cache(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict]]:
    raw = in_child({"part": "cache", "max_length": args.long_max, "seed": args.seed})
    raw["load_average_1min"] = os.getloadavg()[0]
    name = f"activation cache, {raw['positions']} tokens"
    rows = [table.row(name, "run_with_cache CPU-s vs a forward pass", raw["cache_cpu_seconds"],
                      raw["forward_cpu_seconds"], lower_is_better=True),
            table.row(name, "cache MiB (every hook)", raw["cache_mib"]),
            table.row(name, "peak RSS growth MiB (forward pass and cache)",
                      raw["peak_rss_growth_mib"])]
    return raw, rows


def part_solve(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict]]:
    raw, rows = {}, []
    # the grid's recipe at the larger CPU budget of the Dyck-3 budget chapter (5000 steps over
    # 32,000 strings); a model stops once its validation accuracy reaches 99.5%
    spec = GridSpec(max_steps=args.solve_steps, n_train=32_000)
    for k in (1, 3):
        cell = Cell(k, 2, "causal", "learned", "mean")
        start_cpu, start = time.process_time(), time.perf_counter()
        record = run(spec.config(cell, args.seed)).record
        seconds = time.process_time() - start_cpu
        raw[f"dyck{k}"] = {
            "cell": cell.name, "spec": spec.to_dict(), "hard_accuracy": record.accuracy("hard"),
            "accuracies": {name: s.accuracy for name, s in record.scores.items()},
            "steps": record.steps, "stopped_at": record.stopped_at,
            "train_wall_seconds": record.seconds, "run_cpu_seconds": seconds,
            "run_wall_seconds": time.perf_counter() - start,
            "load_average_1min": os.getloadavg()[0]}
        r, name = raw[f"dyck{k}"], f"time to 99%, Dyck-{k}"
        reached = "reached" if r["hard_accuracy"] >= 0.99 else "NOT reached"
        rows += [table.row(name, f"run.run CPU-s, {cell.name} (99% {reached})",
                           r["run_cpu_seconds"], target="≤ 60 s"),
                 table.row(name, "hard-test accuracy", r["hard_accuracy"], target="≥ 0.99")]
    return raw, rows


PARTS = {"models": part_models, "peak": part_peak, "long": part_long, "cache": part_cache,
         "solve": part_solve}


_NOW = """
import json, sys, time, torch
from dyckbook.chapters.ablation_grid import Cell, GridSpec
from dyckbook.experiment.checkpoint import build_model
from dyckbook.nn.model import ClassificationTask
from dyckbook.data.protocol import DataConfig, make_splits
from dyckbook.experiment.run import run, thesis_config
from dyckbook.experiment.train import TrainConfig, train
torch.set_num_threads(1)
steps, solve = int(sys.argv[1]), int(sys.argv[2])
data = make_splits(DataConfig(k=1, max_length=16, n_train=4000), seed=0).train
out = {}
for name, literal in (("dyckbook Classifier", False), ("thesis port", True)):
    model = build_model(thesis_config(1, literal=literal).model, [0])
    train(model, ClassificationTask(), [data], None, TrainConfig(lr=1e-5, max_steps=5))
    start = time.process_time()
    train(model, ClassificationTask(), [data], None,
          TrainConfig(lr=1e-5, batch_size=32, max_steps=steps))
    out[name] = steps * 32 / (time.process_time() - start)
config = GridSpec(max_steps=solve, target_accuracy=None, n_train=2000, n_val=200,
                  n_test=500).config(Cell.from_name("k3-L2-causal-learned-mean"))
run(config)  # its data and fitted rules, cached in this process
start = time.process_time()
run(config)
out["run.run"] = time.process_time() - start
print(json.dumps(out))
"""


def before_after(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict]]:
    """Exp. 1's training (the Classifier and the thesis' port, batch 32: examples/CPU-s) and a
    whole ``run.run`` of a grid cell (its data cached: training, scoring, the rules; CPU-s)
    with the package of commit ``--before`` and of HEAD, in their own processes, interleaved
    round by round (at least 5)."""
    steps, solve = max(args.steps, 100), max(args.solve_steps, 300)
    got = table.before_after(_NOW, [str(steps), str(solve)], args.before, table.commit("HEAD"),
                             repeats=max(args.repeats, 5))
    after, before = got["median"]["after"], got["median"]["before"]
    name = f"after ({got['after']}) vs before ({got['before']}), median of 5+ rounds"
    rows = [table.row("training, exp. 1", f"examples/CPU-s, batch 32, {model}: {name}",
                      after[model], before[model])
            for model in ("dyckbook Classifier", "thesis port")]
    rows.append(table.row(f"run.run, k3-L2-causal-learned-mean, {solve} steps",
                          f"CPU-s (data cached): {name}", after["run.run"], before["run.run"],
                          lower_is_better=True))
    return got, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--steps", type=int, default=200, help="training steps per timing")
    parser.add_argument("--repeats", type=int, default=3, help="timings per model (median)")
    parser.add_argument("--long-n", type=int, default=32, help="sequences of the long part")
    parser.add_argument("--long-max", type=int, default=4096, help="longest long sequence")
    parser.add_argument("--solve-steps", type=int, default=5000, help="step budget of solve")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", default=None, metavar="REF",
                        help="also exp. 1's training and a run.run with the package of commit "
                             "REF vs HEAD, each in its own process, interleaved")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(CHILDREN[spec["part"]](spec)))
        return
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {unknown}; known {list(PARTS)}")
    load = os.getloadavg()
    raw: dict[str, Any] = {"torch": torch.__version__, "threads": 1, "parts": parts}
    rows: list[dict] = []
    for part in parts:
        raw[part], part_rows = PARTS[part](args)
        rows += part_rows
        for r in part_rows:
            print(f"{r['benchmark']}: {r['measure']}: {table.number(r['dyckbook'])}"
                  + (f" vs {table.number(r['reference'])}" if r["reference"] else ""), flush=True)
    if args.before:
        raw["before_after"], more = before_after(args)
        rows += more
        for r in more:
            print(f"{r['benchmark']}: {r['measure']}: {table.number(r['dyckbook'])} vs "
                  f"{table.number(r['reference'])}", flush=True)
    full = ((args.steps, args.long_n, args.long_max, args.solve_steps) == (200, 32, 4096, 5000)
            and sorted(parts) == sorted(PARTS))
    path = table.save("training", rows, raw, load, "full" if full else "small")
    print(f"load average at start {load}; wrote {path}")


if __name__ == "__main__":
    main()
