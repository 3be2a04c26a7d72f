"""The references on the long-range sets (issue 50: a set only a stack can solve must be
solvable by one): the package's stack RNN and LSTM trained by ``run.run`` on the training mix
(half members; hard, local, random and stack negatives, the stack ones with matched members),
lengths 2-48, ``--steps`` steps, scored on the stack test set (``far`` for Dyck-1) at lengths
30-48 beside the hand-set construction (``constructions.dyck_kd`` / ``dyck1_counter``, nothing
trained). Balanced accuracy (the test sets are balanced per length), the CPU seconds of each
training. Writes benchmarks/results/references.json and prints the table.

    python benchmarks/bench_references.py [--ks 1 2 3] [--steps 1000] [--lr 3e-3] [--seed 0]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import table
import torch

from dyckbook.data.protocol import DataConfig
from dyckbook.experiment import evaluate
from dyckbook.experiment.run import RunConfig, run
from dyckbook.experiment.train import TrainConfig
from dyckbook.interp import constructions
from dyckbook.nn.recurrent import RecurrentConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--n-train", type=int, default=8000)
    parser.add_argument("--n-test", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=table.RESULTS / "references.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load = os.getloadavg()
    raw: dict = {"steps": args.steps, "seed": args.seed, "lr": args.lr, "n_train": args.n_train,
                 "n_test": args.n_test, "languages": {}}
    rows = []
    for k in args.ks:
        data = DataConfig(k=k, min_length=2, max_length=48, test_min_length=30,
                          test_max_length=48, n_train=args.n_train, n_test=args.n_test,
                          test_sets=("stack",))
        out: dict = {}
        for cell in ("stack", "lstm"):
            config = RunConfig(data=data, model=RecurrentConfig(k=k, n_ctx=48, cell=cell),
                               train=TrainConfig(max_steps=args.steps, lr=args.lr,
                                                 batch_size=32),
                               seed=args.seed, baselines=())
            start = time.process_time()
            result = run(config)
            seconds = time.process_time() - start
            out[f"{cell} rnn" if cell == "stack" else cell] = {
                "accuracy": round(result.record.accuracy("stack"), 4),
                "cpu_seconds": round(seconds, 1), "status": result.record.status}
            print(f"Dyck-{k} {cell}: {out[list(out)[-1]]}", flush=True)
            splits = result.splits
        model = constructions.dyck1_counter(48) if k == 1 else constructions.dyck_kd(k, 24, 48)
        test = splits.tests["stack"]
        scored = evaluate.score(evaluate.predict(model, test), test)
        out["construction"] = {"accuracy": round(scored.correct / scored.n, 4),
                               "strings": int(scored.n)}
        print(f"Dyck-{k} construction: {out['construction']}", flush=True)
        raw["languages"][f"Dyck-{k}"] = out
        for name, r in out.items():
            rows.append(table.row("references on the stack sets",
                                  f"Dyck-{k}: {name}, accuracy (lengths 30-48)", r["accuracy"],
                                  target=">= 0.99" if name != "lstm" else None))
    print(table.save_or_write(args.out, "references", rows, raw, load, "full"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
