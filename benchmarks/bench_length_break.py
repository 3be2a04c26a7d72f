"""Why Dyck-1 models break beyond 4N: the violation's position, or the string's length?

07 finds that its Dyck-1 configurations hold the far set to 3N-4N and then accept most
negatives (NoPE, end readout: beyond 4N it keeps 81% of the members and rejects 26% of the
negatives). Two explanations predict different things, and an intervention on the input tells
them apart. Take a far negative of length 2N (``core``; its running count dips below zero far
from both ends) and a uniform Dyck-1 word of length m (``pad``), and concatenate:

- ``core + pad`` (**after**): the dip stays where it was, the string grows by m;
- ``pad + core`` (**before**): the dip moves m symbols later, the string grows alike.

Both are non-members with the same single dip (checked by ``Dyck(1).is_member``); the core's
matched member, padded the same ways, is the member control. Hypotheses, stated on 2026-11-26
before any number of this file was computed:

- **position** (the running count is diluted): a causal model reads the count as a share of the
  prefix (as the hand-set counter does, depth / (t + 1)), so a dip of one at a late position t
  moves it by 1 / (t + 1), below what training at lengths <= N calibrated. Then *before* breaks
  as m grows and *after* does not.
- **length** (the flag is diluted on its way to the readout): the dip is seen where it happens,
  but the readout, which averages or attends over the whole string, loses it as the string
  grows. Then *after* and *before* break alike.

Rule, per seed, on the balanced accuracy b (the mean of the share of members kept and of
negatives rejected; 0.5 is chance), b0 that of the unpadded cores: a seed whose b0 < 0.8 does
not solve the cores and is counted as such; otherwise, at the largest m, **position** when
b0 - b(before) >= 0.2 and b0 - b(after) <= 0.1, **length** when both drops are >= 0.2, **holds**
when both are <= 0.1, and **mixed** otherwise. Members and negatives are reported apart too
(07's models break by accepting negatives; a model can also break by rejecting members).

Configurations (07's cpu recipe, N = 16, tested to 16N = 256), seeds 100-102 (no page uses
them): NoPE with the end readout (07's ``causal-none-end``), with the language-model loss, and
randomized positions with the mean readout and that loss (3N in ``bench_length_reach``). Tasks
(one per configuration and seed) train and test on a process pool of one torch thread each.
The hand-set Dyck-1 counter (``constructions.dyck1_counter``), which recognises Dyck-1 at every
length, is scored first on the same kind of sets: it must hold. Writes
benchmarks/results/length_break.json and prints a table.

    python benchmarks/bench_length_break.py [--configs C,C] [--seeds 100,101,102]
        [--workers 2] [--pads 0,32,96,224] [--n-items 300] [--max-steps S] [--out PATH]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dyckbook import constructions, executors, length_study, run, tokenizer
from dyckbook.languages import Dyck
from dyckbook.negatives import sample_minimal_pairs

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table
from bench_length_reach import base_config, recipe

CONFIGS = ("causal-none-end", "causal-none-end+language_model",
           "causal-randomized-mean+language_model")
RESULTS = Path(__file__).resolve().parent / "results" / "length_break.json"
SOLVES, BREAKS, HOLDS = 0.8, 0.2, 0.1  # the rule's thresholds (module docstring)
TEST_MAX_LENGTH = 256


def padded_sets(n_items: int, core_length: int, pads: list[int], seed: int
                ) -> dict[str, dict[int, tuple[np.ndarray, np.ndarray, int]]]:
    """``{condition: {m: (codes, lengths, label)}}`` for the negatives and members padded
    after and before, every string checked against the language."""
    rng = np.random.default_rng(seed)
    dyck = Dyck(1)
    members, negatives, lengths = sample_minimal_pairs(dyck, rng, [core_length] * n_items, "far")
    out: dict[str, dict[int, tuple[np.ndarray, np.ndarray, int]]] = {}
    for m in pads:
        pad, _ = dyck.sample_codes(rng, [m] * n_items)
        for core, label, name in ((negatives, 0, "negatives"), (members, 1, "members")):
            for side, parts in (("after", (core, pad)), ("before", (pad, core))):
                codes = np.concatenate(parts, axis=1)
                total = np.full(n_items, core_length + m)
                if not (dyck.is_member((codes, total)) == bool(label)).all():
                    raise AssertionError(f"{name} {side} m={m}: membership changed")
                out.setdefault(f"{name} {side}", {})[m] = (codes, total, label)
    return out


@torch.no_grad()
def accuracy(model: Any, codes: np.ndarray, lengths: np.ndarray, label: int) -> float:
    model.eval()
    right = 0
    for i in range(0, len(lengths), 100):
        tokens = tokenizer.encode(codes[i:i + 100], lengths[i:i + 100], TEST_MAX_LENGTH)
        right += int((model(tokens).argmax(-1) == label).sum())
    return right / len(lengths)


def scored(model: Any, sets: dict[str, dict[int, tuple[np.ndarray, np.ndarray, int]]],
           pads: list[int]) -> dict[str, dict[str, float]]:
    return {cond: {str(m): round(accuracy(model, *sets[cond][m]), 4) for m in pads}
            for cond in sets}


def task(config: run.RunConfig, seed: int, n_items: int, pads: list[int]) -> dict[str, Any]:
    """Train one seed, then score every padded set (one pool task)."""
    result = run.run_seeds(config, [seed])[0]
    sets = padded_sets(n_items, 2 * config.data.max_length, pads, 1000 + seed)
    scores = scored(result.model, sets, pads)
    return {"seed": seed, "status": result.record.status, "steps": result.record.steps,
            "stack": round(result.record.scores["stack"].accuracy, 4), "scores": scores}


def balanced(scores: dict[str, dict[str, float]], side: str, m: int) -> float:
    return (scores[f"members {side}"][str(m)] + scores[f"negatives {side}"][str(m)]) / 2


def verdict(scores: dict[str, dict[str, float]], pads: list[int]) -> str:
    """The module docstring's rule on one seed's scores."""
    b0 = balanced(scores, "after", pads[0])
    if b0 < SOLVES:
        return "does not solve the cores"
    after = b0 - balanced(scores, "after", pads[-1])
    before = b0 - balanced(scores, "before", pads[-1])
    if before >= BREAKS and after <= HOLDS:
        return "position"
    if before >= BREAKS and after >= BREAKS:
        return "length"
    if before <= HOLDS and after <= HOLDS:
        return "holds"
    return "mixed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--seeds", default="100,101,102")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pads", default="0,32,96,224")
    parser.add_argument("--n-items", type=int, default=300)
    parser.add_argument("--max-steps", type=int, default=None, help="a check only (default: 07's)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
        pads = [int(p) for p in args.pads.split(",")]
    except ValueError:
        raise ValueError(f"--seeds and --pads must be comma-separated integers, got "
                         f"{args.seeds!r} and {args.pads!r}") from None
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    if not names:
        raise ValueError(f"--configs must name at least one configuration, got {args.configs!r}")
    if pads[0] != 0 or pads != sorted(set(pads)) or any(p % 2 for p in pads):
        raise ValueError(f"--pads must be increasing even lengths from 0, got {args.pads!r}")
    if args.workers < 1 or args.n_items < 1:
        raise ValueError(f"--workers and --n-items must be >= 1, got {args.workers} and "
                         f"{args.n_items}")
    params = recipe()
    if args.max_steps is not None:
        params["max_steps"] = args.max_steps
    n = int(params["max_length"])
    if 2 * n + pads[-1] > TEST_MAX_LENGTH:
        raise ValueError(f"--pads: 2N + {pads[-1]} exceeds the tested {TEST_MAX_LENGTH}")
    configs = {c: length_study.config(base_config(params, 1, TEST_MAX_LENGTH), c) for c in names}
    load, start = os.getloadavg(), time.perf_counter()
    # the control: the hand-set counter recognises Dyck-1 at every length, so it must hold
    control = scored(constructions.dyck1_counter(TEST_MAX_LENGTH),
                     padded_sets(args.n_items, 2 * n, pads, 999), pads)
    print(f"hand-set counter (control): {verdict(control, pads)} {json.dumps(control)}")
    os.environ["DYCKBOOK_QUIET"] = "1"
    done: dict[str, dict[int, dict[str, Any]]] = {}
    with executors.make_executor(None, min(args.workers, len(configs) * len(seeds))) as pool:
        futures = {pool.submit(task, c, s, args.n_items, pads): (label, s)
                   for label, c in configs.items() for s in seeds}
        for future in cf.as_completed(futures):
            label, seed = futures[future]
            got = done.setdefault(label, {})[seed] = future.result()
            got["verdict"] = verdict(got["scores"], pads)
            print(f"{label} seed {seed}: {got['verdict']} {json.dumps(got['scores'])}", flush=True)
    rows, tasks = [], {}
    for label in configs:
        per_seed = [done[label][s] for s in seeds]
        tasks[label] = per_seed
        counts = {v: sum(t["verdict"] == v for t in per_seed) for v in
                  ("position", "length", "holds", "mixed", "does not solve the cores")}
        top = str(pads[-1])
        shown = "; ".join(
            f"seed {t['seed']} ({t['verdict']}): balanced {balanced(t['scores'], 'after', 0):.2f} "
            f"-> after {balanced(t['scores'], 'after', pads[-1]):.2f}, before "
            f"{balanced(t['scores'], 'before', pads[-1]):.2f}; negatives rejected "
            f"{t['scores']['negatives after']['0']:.2f} "
            f"-> after {t['scores']['negatives after'][top]:.2f}, before "
            f"{t['scores']['negatives before'][top]:.2f}; members kept after "
            f"{t['scores']['members after'][top]:.2f}, before "
            f"{t['scores']['members before'][top]:.2f}" for t in per_seed)
        rows.append(table.row(
            f"Why Dyck-1 breaks beyond 4N (07's cpu recipe, N = {n}, cores of 2N padded by "
            f"up to {pads[-1]})",
            f"{label}: " + ", ".join(f"{c} {v}" for v, c in counts.items() if c) + f" ({shown})",
            counts["position"], target="verdicts per seed"))
    raw = {"tasks": tasks, "control": {"scores": control, "verdict": verdict(control, pads)},
           "pads": pads, "n_items": args.n_items, "seeds": seeds,
           "recipe": {k: params[k] for k in ("max_length", "n_train", "max_steps", "lr",
                                             "d_model", "n_layers", "batch_size")},
           "thresholds": {"solves": SOLVES, "breaks": BREAKS, "holds": HOLDS},
           "workers": args.workers, "seconds": round(time.perf_counter() - start, 1),
           "cores": os.cpu_count(), "torch": torch.__version__}
    out_path = Path(args.out)
    if out_path.resolve() == RESULTS.resolve():
        table.save("length_break", rows, raw, load, "full")
    else:
        out_path.write_text(json.dumps({"raw": raw, "table": rows}, indent=1) + "\n")
    for r in rows:
        print(f"  {r['measure']}")


if __name__ == "__main__":
    main()
