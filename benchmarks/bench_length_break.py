"""Why Dyck-1 models break beyond 4N: the violation's position, or the string's length?

07 finds that its Dyck-1 configurations hold the far set to 3N-4N and then accept most
negatives (NoPE, end readout: beyond 4N it keeps 81% of the members and rejects 26% of the
negatives). Two explanations predict different things, and an intervention on the input tells
them apart. The intervention, the two hypotheses ("position": the running count is diluted, so a dip
moved later is missed; "length": the model fails with the string's length wherever the dip is)
and the per-seed rule are ``dyckbook.length_break``'s; they were stated on 2026-11-26 before any
number of this file was computed.

Configurations (07's cpu recipe, N = 16, tested to 16N = 256), seeds 100-102 (no page uses
them): NoPE with the end readout (07's ``causal-none-end``), with the language-model loss, and
randomized positions with the mean readout and that loss (3N in ``bench_length_reach``). Tasks
(one per configuration and seed) train and test on a process pool of one torch thread each.
The hand-set Dyck-1 counter (``constructions.dyck1_counter``), which recognises Dyck-1 at every
length, is scored first on the same kind of sets: it must hold. Each trained model is then
patched inside (``length_break.patch_scores``, rule stated 2026-11-26 before any patched number):
layer 0's output at the dip of the *before* negatives at the largest pad, taken from the
unpadded core's run, with its controls; then again from the core's run at the padded string's
positions (``move_positions``; rule and prediction stated 2026-11-27 before any number of it:
randomized positions break by the pad's symbols, not the indices). A mean-readout model is also
read with its average over the core's tokens only (``length_break.readout_scores``; stated
2026-11-27 after seeds 100-102's positions-matched numbers, so its test is the fresh seeds
103-107 of the randomized configuration, ``--more-seeds``). A mean-readout model is last
patched at its last layer over the core's symbols (``length_break.last_verdict``; stated
2026-11-27 after the readout test's numbers, so its test is the fresh seeds 108-110). Writes
benchmarks/results/length_break.json and prints a table.

    python benchmarks/bench_length_break.py [--configs C,C] [--seeds 100,101,102]
        [--more-seeds C=S,S] [--workers 2] [--pads 0,32,96,224] [--n-items 300]
        [--max-steps S] [--out PATH] [--keep-others]

``--keep-others`` reruns only ``--configs`` and keeps the other configurations' tasks from the
results file as they are (training is deterministic: two full reruns reproduced every field).
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

import torch

from dyckbook.chapters import generalisation
from dyckbook.chapters import references_objectives as length_break
from dyckbook.chapters.references_objectives import balanced
from dyckbook.experiment import run
from dyckbook.interp import constructions
from dyckbook.pipeline import executors

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table
from bench_length_reach import THRESHOLD, base_config, bins, recipe

CONFIGS = ("causal-none-end", "causal-none-end+language_model",
           "causal-randomized-mean+language_model")
# the readout test's fresh seeds (103-107), then the last-layer test's (108-110)
MORE_SEEDS = "causal-randomized-mean+language_model=103,104,105,106,107,108,109,110"
LAST_FRESH = (108, 109, 110)
RESULTS = Path(__file__).resolve().parent / "results" / "length_break.json"
TEST_MAX_LENGTH = 256


def task(config: run.RunConfig, seed: int, n_items: int, pads: list[int]) -> dict[str, Any]:
    """Train one seed, then score every padded set (one pool task)."""
    result = run.run_seeds(config, [seed])[0]
    sets = length_break.padded_sets(n_items, 2 * config.data.max_length, pads, 1000 + seed)
    last = length_break.last_layer(result.model)
    readout = ({"readout": length_break.readout_scores(result.model, sets, pads[-1],
                                                       TEST_MAX_LENGTH, 3000 + seed),
                **{key: length_break.patch_scores(result.model, sets, pads[-1], TEST_MAX_LENGTH,
                                                  4000 + seed, hook=last, move_positions=moved)
                   for key, moved in (("patch_last", False), ("patch_last_moved", True))}}
               if config.model.readout == "mean" else {})
    return {**readout, "seed": seed, "status": result.record.status, "steps": result.record.steps,
            "stack": round(result.record.scores["stack"].accuracy, 4),
            "stack_bins": bins(result.record.scores["stack"], config.data.max_length),
            "reach_xN": generalisation.reach(result.record.scores["stack"], config.data.max_length,
                                           THRESHOLD) / config.data.max_length,
            "scores": length_break.scores(result.model, sets, TEST_MAX_LENGTH),
            "patch": length_break.patch_scores(result.model, sets, pads[-1], TEST_MAX_LENGTH,
                                               2000 + seed),
            "patch_moved": length_break.patch_scores(result.model, sets, pads[-1],
                                                     TEST_MAX_LENGTH, 2000 + seed,
                                                     move_positions=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--seeds", default="100,101,102")
    parser.add_argument("--more-seeds", default=MORE_SEEDS,
                        help="CONFIG=S,S,...: further seeds of one configuration ('' for none)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pads", default="0,32,96,224")
    parser.add_argument("--n-items", type=int, default=300)
    parser.add_argument("--max-steps", type=int, default=None, help="a check only (default: 07's)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--keep-others", action="store_true",
                        help="keep the results file's tasks of configurations not in --configs")
    args = parser.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
        pads = [int(p) for p in args.pads.split(",")]
        more = {c: [int(s) for s in ss.split(",")] for c, ss in
                (item.split("=") for item in filter(None, args.more_seeds.split(";")))}
    except ValueError:
        raise ValueError(f"--seeds and --pads must be comma-separated integers and --more-seeds "
                         f"CONFIG=S,S, got {args.seeds!r}, {args.pads!r} and "
                         f"{args.more_seeds!r}") from None
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    if not names:
        raise ValueError(f"--configs must name at least one configuration, got {args.configs!r}")
    if set(more) - set(names):
        raise ValueError(f"--more-seeds names configurations not in --configs: "
                         f"{sorted(set(more) - set(names))}")
    seeds_of = {c: seeds + [s for s in more.get(c, []) if s not in seeds] for c in names}
    if args.workers < 1 or args.n_items < 1:
        raise ValueError(f"--workers and --n-items must be >= 1, got {args.workers} and "
                         f"{args.n_items}")
    params = recipe()
    if args.max_steps is not None:
        params["max_steps"] = args.max_steps
    n = int(params["max_length"])
    if 2 * n + pads[-1] > TEST_MAX_LENGTH:
        raise ValueError(f"--pads: 2N + {pads[-1]} exceeds the tested {TEST_MAX_LENGTH}")
    configs = {c: generalisation.config(base_config(params, 1, TEST_MAX_LENGTH), c) for c in names}
    kept: list[str] = []
    if args.keep_others:  # read first: a bad file fails before any training
        earlier = json.loads(Path(args.out).read_text())["raw"]
        if (earlier["pads"], earlier["n_items"], earlier["recipe"]["max_steps"]) != (
                pads, args.n_items, params["max_steps"]):
            raise ValueError(f"--keep-others: {args.out} was run with other pads, items or steps")
        kept = [c for c in earlier["tasks"] if c not in configs]
    load, start = os.getloadavg(), time.perf_counter()
    # the control: the hand-set counter recognises Dyck-1 at every length, so it must hold
    control = length_break.scores(constructions.dyck1_counter(TEST_MAX_LENGTH),
                                  length_break.padded_sets(args.n_items, 2 * n, pads, 999),
                                  TEST_MAX_LENGTH)
    print(f"hand-set counter (control): {length_break.verdict(control, pads)} "
          f"{json.dumps(control)}")
    os.environ["DYCKBOOK_QUIET"] = "1"
    done: dict[str, dict[int, dict[str, Any]]] = {}
    n_tasks = sum(map(len, seeds_of.values()))
    with executors.make_executor(None, min(args.workers, n_tasks)) as pool:
        futures = {pool.submit(task, c, s, args.n_items, pads): (label, s)
                   for label, c in configs.items() for s in seeds_of[label]}
        for future in cf.as_completed(futures):
            label, seed = futures[future]
            got = done.setdefault(label, {})[seed] = future.result()
            got["verdict"] = length_break.verdict(got["scores"], pads)
            got["patch_verdict"] = length_break.patch_verdict(got["patch"])
            got["moved_verdicts"] = [length_break.moved_verdict(got["patch_moved"]),
                                     length_break.patch_verdict(got["patch_moved"])]
            if "readout" in got:
                got["readout_verdict"] = length_break.readout_verdict(got["readout"])
                got["last_verdicts"] = [length_break.last_verdict(got[k])
                                        for k in ("patch_last", "patch_last_moved")]
            print(f"{label} seed {seed}: {got['verdict']} {json.dumps(got['scores'])}; patched: "
                  f"{got['patch_verdict']} {json.dumps(got['patch'])}; positions moved: "
                  f"{got['moved_verdicts']} {json.dumps(got['patch_moved'])}; readout: "
                  f"{got.get('readout_verdict')} {json.dumps(got.get('readout'))}; last layer: "
                  f"{got.get('last_verdicts')} {json.dumps(got.get('patch_last'))} "
                  f"{json.dumps(got.get('patch_last_moved'))}", flush=True)
    rows, tasks = [], {}
    for label in kept:
        done[label] = {t["seed"]: t for t in earlier["tasks"][label]}
        seeds_of[label] = [t["seed"] for t in earlier["tasks"][label]]
    for label in [*kept, *configs]:
        per_seed = [done[label][s] for s in seeds_of[label]]
        tasks[label] = per_seed
        counts = {v: sum(t["verdict"] == v for t in per_seed) for v in length_break.VERDICTS}
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
        patched = [t["patch_verdict"] for t in per_seed]
        rows.append(table.row(
            f"Patching layer 0's output at the dip (before, m = {pads[-1]})",
            f"{label}: " + ", ".join(f"{patched.count(v)} {v}" for v in length_break.PATCH_VERDICTS
                                     if patched.count(v)) + " (negatives rejected core / padded "
            "/ dips / other positions / whole core: " + "; ".join(
                "/".join(f"{t['patch']['negatives rejected'][k]:.2f}"
                         for k in ("core", "padded", *length_break.PATCHES)) for t in per_seed)
            + ")", patched.count("the dips carry it"), target="verdicts per seed"))
        moved = [t["moved_verdicts"] for t in per_seed]
        rows.append(table.row(
            f"The core at the padded string's positions, then patched from (m = {pads[-1]})",
            f"{label}: " + "; ".join(f"seed {t['seed']}: {a}, {b}" for t, (a, b) in
                                     zip(per_seed, moved)) + " (negatives rejected core / moved "
            "/ padded / dips patched: " + "; ".join(
                "/".join(f"{t['patch_moved']['negatives rejected'][k]:.2f}"
                         for k in ("core", length_break.MOVED, "padded", "dips"))
                for t in per_seed) + ")",
            sum(b == "the dips carry it" for _, b in moved), target="verdicts per seed"))
        read = [t for t in per_seed if "readout" in t]
        if read:
            rows.append(table.row(
                f"The mean readout over the core's tokens only (m = {pads[-1]})",
                f"{label}: " + "; ".join(
                    f"seed {t['seed']}: {t['readout_verdict']} ("
                    + "/".join(f"{t['readout']['negatives rejected'][k]:.2f}"
                               for k in ("core", "padded", *length_break.READOUTS)) + ")"
                    for t in read) + " (negatives rejected core / padded / over core tokens / "
                "over pad tokens)",
                sum(t["readout_verdict"] == "the average carries it" for t in read),
                target="verdicts per seed"))
        last = [t for t in per_seed if "patch_last" in t]
        if last:
            rows.append(table.row(
                f"The last layer patched over the core's symbols (m = {pads[-1]})",
                f"{label}: " + "; ".join(
                    f"seed {t['seed']}: {', '.join(t['last_verdicts'])} (" + "/".join(
                        f"{t[k]['negatives rejected'][w]:.2f}" for k, w in (
                            ("patch_last", "core"), ("patch_last", "padded"),
                            ("patch_last", "whole core"), ("patch_last_moved", "whole core")))
                    + ")" for t in last) + " (from the core, from the moved core; negatives "
                "rejected core / padded / patched / patched from moved)",
                sum(t["last_verdicts"][1] == "the pad's tokens in the average" for t in last),
                target="verdicts per seed"))
    raw = {"tasks": tasks, "control": {"scores": control,
                                             "verdict": length_break.verdict(control, pads)},
           "pads": pads, "n_items": args.n_items, "seeds": seeds,
           "more_seeds": more, "kept_from_earlier_run": kept,
           "recipe": {k: params[k] for k in ("max_length", "n_train", "max_steps", "lr",
                                             "d_model", "n_layers", "batch_size")},
           # of the stack and hard test sets (until 2026-11-27 they were nested <= 6: see
           # bench_length_reach.base_config); the padded sets are not bounded
           "test_max_depth": configs[names[0]].data.test_max_depth,
           "thresholds": length_break.RULE, "patch_thresholds": length_break.PATCH_RULE,
           "moved_thresholds": length_break.MOVED_RULE,
           "readout_thresholds": length_break.READOUT_RULE,
           "last_thresholds": length_break.LAST_RULE, "last_fresh_seeds": list(LAST_FRESH),
           "workers": args.workers, "seconds": round(time.perf_counter() - start, 1),
           "cores": os.cpu_count(), "torch": torch.__version__}
    out_path = Path(args.out)
    table.save_or_write(out_path, "length_break", rows, raw, load, "full")
    for r in rows:
        print(f"  {r['measure']}")


if __name__ == "__main__":
    main()
