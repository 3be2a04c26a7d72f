"""Dropout masks: the previous release's (drawn at n_positions^2 a row, then cut) vs the current.

Until 2026-11-27 ``blocks._keep`` (now ``dropout.keep``) drew every model's dropout mask with
``bernoulli_`` at the per-model shape ``full`` (for attention: batch x heads x n_positions x
n_positions) on the CPU and cut it to the batch, so that a batch padded wider for another model
kept this model's masks. With experiment 7's n_ctx of 4096, each attention dropout drew 16.7
million numbers a row whatever the batch's length: profiled on 32 sequences of lengths <= 512
(mean 264), 82% of the training time went to ``aten::bernoulli_``. The current masks hash (a key
drawn from the model's generator, the element's index in ``full``) with murmur3's 32-bit
finaliser, in place, at the batch's shape and on the activations' device, with the same
guarantee (``tests/test_model.py``). A first version hashed with splitmix64 on int64
temporaries: at the full shape (lengths <= 4096) one mask took 10.1 s against ``bernoulli_``'s
1.06 s, and training ran 0.61 times as fast as before (``results/dropout.json`` as committed in
ddfbcd4); the int32 hash replaced it.

Measured here, on one torch thread in process CPU seconds, the previous implementation (kept
below as ``previous_keep``) and the current one interleaved round by round:

- one mask of experiment 7's attention shape (batch 8, one head, L x L cut from 4096 x 4096);
- training experiment 7's architecture (``run.thesis_config(7, literal=False)``: d_model 384,
  dropout 0.1, n_ctx 4096), Dyck-3 lengths <= L, batch 8 in length bands as in the long-context
  chapter: CPU seconds per 1000 training sequences;
- training experiment 1's (n_ctx 16, batch 32), where the cut was small: no loss expected;
- the fraction of one core's fp32 peak (160 GFLOP/s) each training reaches, counting 6 x
  parameters FLOPs per real token (attention's products uncounted: a lower bound).

Writes benchmarks/results/dropout.json and prints a table.

    python benchmarks/bench_dropout.py [--lengths 256,1024,4096] [--n 32] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from dyckbook.experiment.checkpoint import build_model
from dyckbook.experiment.run import thesis_config
from dyckbook.experiment.train import TrainConfig, train
from dyckbook.nn import dropout
from dyckbook.nn.model import ClassificationTask

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table
from bench_training import labelled


def previous_keep(shape: Any, p: float, streams: Any, full: Any, device: Any = None
                  ) -> torch.Tensor:
    """The masks as the previous release drew them: ``bernoulli_`` at ``full``, then cut."""
    cut = tuple(slice(0, n) for n in shape[1:])
    return torch.stack([torch.empty(full or shape[1:]).bernoulli_(1.0 - p, generator=g)[cut]
                        for g in streams]).to(device)


IMPLEMENTATIONS = {"previous": previous_keep, "current": dropout.keep}


def timed(fn: Any) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def with_keep(name: str, fn: Any) -> float:
    """CPU seconds of ``fn`` with ``dropout.keep`` set to implementation ``name``."""
    saved = dropout.keep
    dropout.keep = IMPLEMENTATIONS[name]
    try:
        return timed(fn)
    finally:
        dropout.keep = saved


PEAK = 160e9  # fp32 FLOP/s of one core of the development machine (benchmarks/README.md)


def peak_fraction(per_1000: float, mean_length: float, n_params: int) -> float:
    """Training FLOPs (6 x parameters a real token) per CPU-second over one core's peak."""
    return 6 * n_params * (mean_length + 2) * 1000 / per_1000 / PEAK


def train_seconds(experiment: int, length: int, n: int, batch: int, seed: int) -> Any:
    """A closure training a fresh model of ``experiment``'s shape one epoch over ``n`` strings,
    the mean length of its strings and the model's parameter count."""
    config = thesis_config(experiment, literal=False)
    data = labelled(config.data.k, n, length, seed)

    def go() -> None:
        model = build_model(config.model, [seed])
        train(model, ClassificationTask(), [data], None,
              TrainConfig(lr=1e-5, batch_size=batch, epochs=1, bucket=True))
    n_params = sum(p.numel() for p in build_model(config.model, [seed]).parameters())
    return go, float(data.lengths.mean()), n_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="256,1024,4096", help="longest training strings")
    parser.add_argument("--n", type=int, default=32, help="training strings per timing")
    parser.add_argument("--rounds", type=int, default=2, help="timings per implementation")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        raise ValueError(f"--lengths must be comma-separated integers, got {args.lengths!r}"
                         ) from None
    if args.n < 1 or args.rounds < 1:
        raise ValueError(f"--n and --rounds must be >= 1, got {args.n} and {args.rounds}")
    torch.set_num_threads(1)
    load = os.getloadavg()
    raw: dict[str, Any] = {"torch": torch.__version__, "threads": 1, "n": args.n,
                           "rounds": args.rounds}
    rows = []
    for length in lengths:
        g = [torch.Generator().manual_seed(args.seed)]
        shape, full = (1, 8, length, length), (8, 4096, 4096)
        masks = {name: statistics.median(
            timed(lambda: keep(shape, 0.1, g, full)) for _ in range(args.rounds))
            for name, keep in IMPLEMENTATIONS.items()}
        go, mean_length, n_params = train_seconds(7, length, args.n, 8, args.seed)
        go()  # warm-up: the first step allocates
        seconds: dict[str, list[float]] = {name: [] for name in IMPLEMENTATIONS}
        for _ in range(args.rounds):
            for name in IMPLEMENTATIONS:
                seconds[name].append(with_keep(name, go))
        per_1000 = {name: 1000 * statistics.median(s) / args.n for name, s in seconds.items()}
        peak = {name: peak_fraction(t, mean_length, n_params) for name, t in per_1000.items()}
        raw[f"exp7_{length}"] = {"mask_seconds": masks, "train_seconds": seconds,
                                 "per_1000": per_1000, "mean_length": mean_length,
                                 "n_params": n_params, "peak_fraction": peak}
        name = f"dropout masks, exp. 7 shape (n_ctx 4096), lengths ≤ {length}"
        rows += [table.row(name, "CPU-s for one attention mask (batch 8), current vs previous",
                           masks["current"], masks["previous"], lower_is_better=True),
                 table.row(name, "training CPU-s per 1000 sequences, current vs previous",
                           per_1000["current"], per_1000["previous"], lower_is_better=True),
                 table.row(name, "fraction of one core's fp32 peak (6 x parameters a token), "
                           "current vs previous", peak["current"], peak["previous"])]
    go, mean_length, n_params = train_seconds(1, 16, 8 * args.n, 32, args.seed)
    go()
    seconds = {name: [] for name in IMPLEMENTATIONS}
    for _ in range(args.rounds):
        for name in IMPLEMENTATIONS:
            seconds[name].append(with_keep(name, go))
    per_1000 = {name: 1000 * statistics.median(s) / (8 * args.n) for name, s in seconds.items()}
    raw["exp1"] = {"train_seconds": seconds, "per_1000": per_1000, "mean_length": mean_length,
                   "n_params": n_params}
    rows.append(table.row("dropout masks, exp. 1 shape (n_ctx 16, batch 32)",
                          "training CPU-s per 1000 sequences, current vs previous",
                          per_1000["current"], per_1000["previous"], lower_is_better=True))
    path = table.save("dropout", rows, raw, load,
                      "full" if (args.lengths, args.n, args.rounds) == ("256,1024,4096", 32, 2)
                      else "small")
    for r in rows:
        print(f"{r['benchmark']}: {r['measure']}: {table.number(r['dyckbook'])} vs "
              f"{table.number(r['reference'])} ({table.number(r['ratio'])}x)")
    print(f"load average at start {load}; wrote {path}")


if __name__ == "__main__":
    main()
