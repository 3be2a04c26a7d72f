"""Benchmark: training on a GPU through the same ``train()`` (a lent device machine only).

Usage: ``python benchmarks/bench_gpu.py [--parts check,speed,dropout,lengths] [--out PATH]
[--lengths-params FILE]``; writes
``benchmarks/results/gpu.json`` (or ``--out``) and prints a table. Needs CUDA; CI never runs it.

- ``check``: the same seeded networks (the grid's classifier, exp. 1's shape, and seed 001's
  encoder-decoder, two models each) trained 20 steps on the CPU and on the GPU with float32
  products (TF32 off): the relative difference of their weights and their validation
  accuracies. Measured on an H100: 1.2e-5 for the encoder-decoder (no dropout) and 1.2e-3 for
  the classifier (dropout 0.1; the same validation accuracies); 7.8e-2 before
  ``Attention._kernel`` stopped drawing masks for a kernel that then declined (on a GPU it
  always does), which gave the GPU run other dropout masks than the CPU run.
- ``speed``, all wall-clock with the device synchronised, float32:
  exp. 1's classifier (``run.thesis_config(1, literal=False)``, Dyck-1, lengths <= 16) at batch
  32 (the thesis' batch: launch-bound) and batch 4096 (FLOP/s over the measured float32 matrix
  rate of this GPU); exp. 7's shape (d_model 384, Dyck-3, lengths up to 4096, batch 8, banded):
  seconds per 1000 training sequences and peak GPU memory; seed 001's encoder-decoder on
  Dyck-3 completion (batch 64): milliseconds a step for one model and for five trained together.
- ``dropout``: exp. 1 at batch 4096 with its dropout 0.1 and with none, and the profiler's top
  operations. Measured on an H100 (``gpu.json``, 2026-11-26): 3,293 vs 251,402 examples/s;
  ``aten::bernoulli_`` on the CPU (the masks drawn from each model's CPU stream, so that a GPU
  run draws a CPU run's masks) took 93% of the CPU time. Since 2026-11-27 the masks are hashed
  on the device (``dropout.keep``; ``bench_dropout.py`` on the CPU); not measured on a GPU since.
- ``lengths``: 07's length-study configurations at the thesis profile's size (10 seeds trained
  together, batch 64, lengths <= 16, Dyck-3): milliseconds a step each, and the seconds its
  10,000 steps would take for all of them, one after another (training only: the data are
  generated on the CPU, and most configurations stop early on Dyck-1).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import table
from bench_completion_recipe import BASE_MODEL, BASE_TRAIN
from bench_training import labelled

from dyckbook.checkpoint import build_model
from dyckbook.completion import CompletionDataConfig, make_completion_splits
from dyckbook.model import ClassificationTask
from dyckbook.run import thesis_config
from dyckbook.seq2seq import CompletionTask, Seq2SeqConfig, build_seq2seq
from dyckbook.train import TrainConfig, train

CUDA = torch.device("cuda")


def _relative(a: torch.nn.Module, b: torch.nn.Module) -> float:
    """‖a − b‖ / ‖b‖ over all parameters (b the CPU reference)."""
    diff = sum(float((p.detach().cpu() - q.detach()).double().pow(2).sum())
               for p, q in zip(a.parameters(), b.parameters()))
    norm = sum(float(q.detach().double().pow(2).sum()) for q in b.parameters())
    return (diff / norm) ** 0.5


def part_check() -> tuple[dict[str, Any], list[dict]]:
    raw, rows = {}, []
    config = TrainConfig(lr=1e-3, batch_size=32, max_steps=20, eval_every=10, grad_clip=1.0)
    data = [labelled(1, 512, 16, seed) for seed in (0, 1)]
    val = [labelled(1, 256, 16, seed + 10) for seed in (0, 1)]
    splits = [make_completion_splits(CompletionDataConfig(k=3, n_train=512, n_val=128,
                                                          n_test=1), seed=s) for s in (0, 1)]
    cases = {
        "exp. 1 classifier": (build_model(thesis_config(1, literal=False).model, [0, 1]),
                              ClassificationTask(), data, val),
        "seed 001 encoder-decoder": (build_seq2seq(Seq2SeqConfig(**BASE_MODEL), [0, 1]),
                                     CompletionTask(), [s.train for s in splits],
                                     [s.val for s in splits])}
    for name, (cpu_model, task, train_sets, val_sets) in cases.items():
        gpu_model = copy.deepcopy(cpu_model).to(CUDA)
        on_cpu = train(cpu_model, task, train_sets, val_sets, config)
        on_gpu = train(gpu_model, task, train_sets, val_sets, config)
        raw[name] = {"relative_weight_difference": _relative(gpu_model, cpu_model),
                     "val_accuracy_cpu": on_cpu.history[-1]["val_accuracy"],
                     "val_accuracy_gpu": on_gpu.history[-1]["val_accuracy"],
                     "train_loss_cpu": on_cpu.history[-1]["train_loss"],
                     "train_loss_gpu": on_gpu.history[-1]["train_loss"]}
        rows.append(table.row(f"GPU check, {name}", "relative weight difference, GPU vs CPU, "
                              "after 20 steps", raw[name]["relative_weight_difference"]))
        rows.append(table.row(f"GPU check, {name}", "validation accuracies equal, GPU vs CPU",
                              str(on_gpu.history[-1]["val_accuracy"]
                                  == on_cpu.history[-1]["val_accuracy"])))
    return raw, rows


def _timed(model: torch.nn.Module, task: Any, train_sets: list, config: TrainConfig) -> float:
    """Wall seconds of ``train`` (the device synchronised before and after)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    train(model, task, train_sets, None, config)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def matmul_rate(size: int = 8192, repeats: int = 10) -> float:
    """float32 matrix-product FLOP/s of this GPU now (TF32 off; median of ``repeats``)."""
    g = torch.Generator(CUDA).manual_seed(0)
    a, b = (torch.randn(size, size, device=CUDA, generator=g) for _ in range(2))
    a @ b
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 2 * size**3 / statistics.median(times)


def part_speed() -> tuple[dict[str, Any], list[dict]]:
    raw: dict[str, Any] = {}
    rows = []
    exp1 = thesis_config(1, literal=False)
    data = labelled(1, 8192, 16, 0)
    task = ClassificationTask()
    for batch, steps in ((32, 100), (4096, 10)):
        model = build_model(exp1.model, [0]).to(CUDA)
        config = TrainConfig(lr=1e-5, batch_size=batch, max_steps=steps)
        _timed(model, task, [data], TrainConfig(lr=1e-5, batch_size=batch, max_steps=3))
        seconds = statistics.median(_timed(model, task, [data], config) for _ in range(3))
        print(f"exp. 1, batch {batch}: {steps * batch / seconds:.0f} examples/s", flush=True)
        rate = steps * batch / seconds
        flops = 6 * model.n_params * (float(data.lengths.mean()) + 2) * rate
        raw[f"exp1_batch_{batch}"] = {"examples_per_s": rate, "training_flops_per_s": flops,
                                      "parameters": model.n_params, "steps": steps}
        rows.append(table.row("GPU training, exp. 1", f"examples/s, batch {batch}", rate))
    measured = matmul_rate()
    raw["matmul_fp32_flops_per_s"] = measured
    rows.append(table.row("GPU training, exp. 1", "fraction of the measured float32 matmul "
                          "rate, batch 4096", raw["exp1_batch_4096"]["training_flops_per_s"]
                          / measured))
    exp7 = thesis_config(7, literal=False)
    long = labelled(3, 32, 4096, 0)
    model = build_model(exp7.model, [0]).to(CUDA)
    torch.cuda.reset_peak_memory_stats()
    seconds = _timed(model, task, [long], TrainConfig(lr=1e-5, batch_size=8, epochs=1,
                                                      bucket=True))
    print(f"exp. 7 shape: {seconds:.1f} s for {len(long)} sequences", flush=True)
    raw["exp7_long"] = {"sequences": len(long), "mean_length": float(long.lengths.mean()),
                        "seconds_per_1000": 1000 * seconds / len(long),
                        "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20}
    rows += [table.row("GPU training, exp. 7 shape, lengths ≤ 4096", "seconds per 1000 "
                       "sequences, batch 8, banded", raw["exp7_long"]["seconds_per_1000"],
                       lower_is_better=True),
             table.row("GPU training, exp. 7 shape, lengths ≤ 4096", "peak GPU memory MiB",
                       raw["exp7_long"]["peak_gpu_mib"], lower_is_better=True)]
    splits = [make_completion_splits(CompletionDataConfig(k=3, n_train=4096, n_val=1,
                                                          n_test=1), seed=s) for s in range(5)]
    for n_models in (1, 5):
        model = build_seq2seq(Seq2SeqConfig(**BASE_MODEL), list(range(n_models))).to(CUDA)
        sets = [s.train for s in splits[:n_models]]
        config = TrainConfig(**{**BASE_TRAIN, "max_steps": 100, "bucket": True})
        _timed(model, CompletionTask(), sets, TrainConfig(lr=1e-5, max_steps=3, batch_size=64))
        ms = 1000 * statistics.median(_timed(model, CompletionTask(), sets, config)
                                      for _ in range(3)) / config.max_steps
        raw[f"completion_{n_models}_models_ms_per_step"] = ms
        print(f"encoder-decoder, {n_models} model(s): {ms:.1f} ms a step", flush=True)
        rows.append(table.row("GPU training, seed 001 encoder-decoder (Dyck-3 completion)",
                              f"ms a step, batch 64, {n_models} model(s) together", ms,
                              lower_is_better=True))
    return raw, rows


def part_dropout() -> tuple[dict[str, Any], list[dict]]:
    """Where the classifier's GPU time goes: exp. 1 at batch 4096 with its dropout (0.1, masks
    drawn on the CPU from each model's stream) and without, and the profiler's top operations."""
    from dataclasses import replace

    exp1 = thesis_config(1, literal=False)
    data, task, raw = labelled(1, 8192, 16, 0), ClassificationTask(), {}
    for p in (0.1, 0.0):
        model = build_model(replace(exp1.model, dropout=p), [0]).to(CUDA)
        config = TrainConfig(lr=1e-5, batch_size=4096, max_steps=10)
        _timed(model, task, [data], TrainConfig(lr=1e-5, batch_size=4096, max_steps=2))
        seconds = statistics.median(_timed(model, task, [data], config) for _ in range(3))
        raw[f"examples_per_s_dropout_{p}"] = 10 * 4096 / seconds
        print(f"dropout {p}: {10 * 4096 / seconds:.0f} examples/s", flush=True)
    model = build_model(exp1.model, [0]).to(CUDA)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        train(model, task, [data], None, TrainConfig(lr=1e-5, batch_size=4096, max_steps=3))
        torch.cuda.synchronize()
    top = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
    print(top, flush=True)
    raw["profile_top_self_cpu"] = top
    rows = [table.row("GPU training, exp. 1, batch 4096", "examples/s with dropout 0.1 vs 0",
                      raw["examples_per_s_dropout_0.1"], raw["examples_per_s_dropout_0.0"])]
    return raw, rows


def part_lengths(params_path: str | None = None) -> tuple[dict[str, Any], list[dict]]:
    """07's length-study configurations at a profile's size (``--lengths-params``: the file
    ``dyckbook train-lengths --write-params`` writes; default the thesis profile's, read from
    the manifest): milliseconds an optimiser step of all its seeds trained together on
    Dyck-``k`` (the last of ``ks``), after three warm-up steps, and what the profile's
    ``max_steps`` would then take per configuration."""
    from dataclasses import replace

    from dyckbook.chapters import generalisation
    from dyckbook.model import ClassificationTask as Task

    if params_path is None:
        from dyckbook.pipeline import runner

        runs = runner.resolve_profile(runner.load_manifest(), "thesis")
        params = dict(next(r for r in runs if r.name == "generalisation").params)
    else:
        params = json.loads(Path(params_path).read_text())
    k, seeds, steps = int(str(params["ks"]).split(",")[-1]), int(params["n_seeds"]), 100
    data = labelled(k, int(params["n_train"]), int(params["max_length"]), 0)
    raw: dict[str, Any] = {"k": k, "seeds": seeds, "steps_timed": steps,
                           "max_steps": params["max_steps"], "per_configuration": {}}
    rows = []
    for label, config in generalisation.study(params).lengths.items():
        if not label.startswith(f"Dyck-{k} "):
            continue
        task = Task(getattr(config.model, "objective", "membership"))
        model = build_model(config.model, list(range(seeds))).to(CUDA)
        train_config = replace(config.train, max_steps=3)  # no validation sets: no early stop
        _timed(model, task, [data] * seeds, train_config)
        seconds = _timed(model, task, [data] * seeds, replace(train_config, max_steps=steps))
        ms = 1000 * seconds / steps
        raw["per_configuration"][label] = {"ms_per_step": ms, "n_params": model.n_params}
        print(f"{label}: {ms:.1f} ms a step of {seeds} models", flush=True)
        rows.append(table.row(f"GPU training, 07 at the thesis size (Dyck-{k}, {seeds} seeds "
                              f"together, batch {config.train.batch_size})",
                              f"{label.split(' ', 1)[1]}: ms a step", ms))
    total = sum(v["ms_per_step"] for v in raw["per_configuration"].values())
    raw["seconds_for_max_steps_all_configurations"] = total * params["max_steps"] / 1000
    rows.append(table.row(f"GPU training, 07 at the thesis size (Dyck-{k})",
                          f"seconds for {params['max_steps']:,} steps of every configuration, "
                          "one after another (training only)",
                          raw["seconds_for_max_steps_all_configurations"]))
    return raw, rows


PARTS = {"check": part_check, "speed": part_speed, "dropout": part_dropout,
         "lengths": part_lengths}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--out", default=str(table.RESULTS / "gpu.json"))
    parser.add_argument("--lengths-params", default=None,
                        help="part lengths: 07's parameters (dyckbook train-lengths "
                             "--write-params); default the thesis profile's")
    args = parser.parse_args()
    parts = args.parts.split(",")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"--parts: {unknown[0]!r} is not one of {list(PARTS)}")
    if not torch.cuda.is_available():
        sys.exit("bench_gpu: no CUDA device here (this benchmark runs on a lent GPU machine)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    load = list(os.getloadavg())
    raw: dict[str, Any] = {"device": torch.cuda.get_device_name(),
                           "torch": torch.__version__, "platform": platform.platform(),
                           "cpu_count_visible": os.cpu_count()}
    rows: list[dict] = []
    for part in parts:
        start = time.perf_counter()
        try:
            raw[part], part_rows = (PARTS[part](args.lengths_params) if part == "lengths"
                                    else PARTS[part]())
            rows += part_rows
        except Exception as error:  # noqa: BLE001 - a failed part is reported, the others run
            raw[part] = {"error": repr(error)}
            print(f"part {part} failed: {error!r}", file=sys.stderr)
        raw[f"{part}_wall_s"] = round(time.perf_counter() - start, 1)
        print(json.dumps({part: raw[part]}, default=str)[:3000], flush=True)
    out = Path(args.out)
    if out.resolve() == (table.RESULTS / "gpu.json").resolve():
        table.save("gpu", rows, raw, load, "full")
    else:  # the same schema, elsewhere (a device machine's $OUT)
        out.write_text(json.dumps({"table": rows, "raw": raw, "load_average": load,
                                   "date": time.strftime("%Y-%m-%d %H:%M"), "sizes": "full"},
                                  indent=1, default=str) + "\n")
    for r in rows:
        print(f"{r['benchmark']:<58} {r['measure']:<60} {r['dyckbook']}")


if __name__ == "__main__":
    main()
