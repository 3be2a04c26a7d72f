"""Benchmark: training on a GPU through the same ``train()`` (a lent device machine only).

Usage: ``python benchmarks/bench_gpu.py [--parts check,speed,runs] [--out PATH]
[--budget-s 300] [--plan]``; writes ``benchmarks/results/gpu.json`` (or ``--out``) with the
card's name and prints a table. Needs CUDA (``--plan`` does not); CI never runs it. A lent
machine's whole session is prepared in ``gpu_session.sh`` (``prepare`` here; ``check``, then
``runs`` through the runner, there). By hand, from the repository root (the package imported
from the tree; torch, numpy, matplotlib, seaborn and pyyaml suffice)::

    PYTHONUNBUFFERED=1 python3 benchmarks/bench_gpu.py --out $OUT/gpu.json

then ``python benchmarks/bench_gpu.py --adopt PATH/gpu.json`` here (the parts it did not measure
stay, under ``raw.earlier`` with their card and date) and run ``bench_profile_cost.py``, whose GPU
column is made from its ``runs`` part. Measured on an H200 on 2026-11-28 with ``--budget-s 60``:
check 9 s, speed 17 s, runs 60 s of timing (39 of the ablation grid's 72 groups and the first
group of every other run timed, the rest at their run's mean); the package's tests marked for
CUDA passed there.

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
- ``runs`` (the default's third part): every run that trains (:data:`HEAVY`), at the ``cpu``
  and ``thesis`` profiles' sizes, through the package's own path. Each run's training groups
  are what its notebook trains: its own code cells run with the manifest's parameters for the
  profile, up to its training calls (``page.run_all``, ``ablation_grid.run_grid``,
  ``generalisation.run_records``), which record their configurations instead of training
  (:func:`plan`). Each distinct group (its model, batch, lengths and seeds as one network, as
  ``run.run_seeds`` trains it: as many as fit on the card; the thesis' port one seed at a
  time) trains on the card for a
  few steps after three warm-up steps, on strings of its training lengths; its seconds are its
  profile's optimiser steps (``max_steps``: an upper bound, early stops end sooner; else
  epochs x batches) x the measured time of a step. The groups are timed in turns (the first of
  every run and profile, then the others) until ``--budget-s`` is spent; a group left untimed
  takes the mean step time of its run's timed ones (``raw.runs[run][profile].estimated``).
  ``bench_profile_cost.py`` reads ``raw.runs[run].thesis.training_seconds``.
- ``lengths``: 07's length-study configurations at the thesis profile's size (10 seeds trained
  together, batch 64, lengths <= 16, Dyck-3): milliseconds a step each, and the seconds its
  10,000 steps would take for all of them, one after another (training only: the data are
  generated on the CPU, and most configurations stop early on Dyck-1).
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import table
from bench_completion_recipe import BASE_MODEL, BASE_TRAIN
from bench_training import labelled

from dyckbook.data.completion import CompletionDataConfig, make_completion_splits
from dyckbook.experiment.checkpoint import build_model
from dyckbook.experiment.run import thesis_config
from dyckbook.experiment.train import TrainConfig, train
from dyckbook.nn.model import ClassificationTask
from dyckbook.nn.seq2seq import CompletionTask, Seq2SeqConfig, build_seq2seq

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
    from dyckbook.nn.model import ClassificationTask as Task

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


#: the runs that train, by the manifest's names (bench_profile_cost's runs that train)
HEAVY = ("thesis-literal", "dyck1", "dyck3", "ood", "long", "explainability", "ablation-grid",
         "generalisation", "dyck3-budget", "intervention", "completion", "learning-dyck3")
PROFILES = ("thesis", "cpu")
_TRAINING_CALLS = ("run_all", "run_grid", "run_records", "run_recipes", "run_seeds", "run.run(")


def _declared(path: Path, where: str) -> dict[str, Any]:
    """A notebook's parameters cell read with ``ast`` (``manifest._declared`` without
    papermill, which a GPU machine may lack): ``name: type = literal`` lines."""
    import ast

    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    cell = next(c for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
    return {n.target.id: ast.literal_eval(n.value)
            for n in ast.parse("".join(cell["source"])).body if isinstance(n, ast.AnnAssign)}


def profile_runs(profile: str) -> dict[str, Any]:
    """``{run name: manifest.Run}`` of a profile (papermill not needed)."""
    from dyckbook.pipeline import manifest

    try:
        import papermill  # noqa: F401 - the manifest's own reader where there is one
    except ImportError:
        manifest._declared = _declared
    return {r.name: r for r in manifest.resolve_profile(manifest.load_manifest(), profile)}


def training_groups(run: Any, scratch: Path) -> list[tuple[str, Any, int]]:
    """``(label, RunConfig, seeds)`` of every group of seeds that ``run``'s notebook trains: its
    code cells executed with the run's parameters (``results_dir`` in ``scratch``) up to its
    last training call, the training entry points recording what they are given instead."""
    import ast
    import contextlib

    from dyckbook.chapters import ablation_grid, generalisation, learning_dyck3, page
    from dyckbook.pipeline import devices, executors

    found: list[tuple[str, Any, int]] = []

    def run_all(configs, seeds, out, batched=True, device="cpu", executor=None, splits=True):
        found.extend((label, c, len(list(seeds[label] if isinstance(seeds, dict) else seeds)))
                     for label, c in configs.items())
        return {label: [] for label in configs}

    def run_grid(cells, spec, seeds, executor=None, records_path=None, on_cell=None,
                 device="cpu"):
        tag = f"{Path(records_path).stem}|" if records_path else ""
        found.extend((tag + c.name, spec.config(c), len(list(seeds))) for c in cells)
        return []

    def run_records(configs, seeds, out, executor=None, device="cpu"):
        return run_all(configs, seeds, out)

    def nothing(*args: Any, **kwargs: Any) -> Any:
        return contextlib.nullcontext(SimpleNamespace(update=lambda *a: None))

    patched = [(page, "run_all", run_all), (learning_dyck3, "run_all", run_all),
               (ablation_grid, "run_grid", run_grid),
               (generalisation, "run_records", run_records), (devices, "executor", nothing),
               (executors, "make_executor", nothing), (executors, "progress", nothing),
               (page, "glue", lambda *args, **kwargs: None)]  # myst_nb: not on a GPU machine
    saved = [(module, name, getattr(module, name)) for module, name, _ in patched]
    cells = [c for c in json.loads(run.notebook.path.read_text(encoding="utf-8"))["cells"]
             if c["cell_type"] == "code"
             and "parameters" not in c.get("metadata", {}).get("tags", [])]
    sources = ["".join(c["source"]) for c in cells]
    last = max((i for i, src in enumerate(sources) if any(t in src for t in _TRAINING_CALLS)),
               default=-1)
    namespace = {**run.params, "results_dir": str(scratch / run.name), "num_threads": 0,
                 "device": "cpu", "__name__": "__main__"}
    try:
        for module, name, fake in patched:
            setattr(module, name, fake)
        for i, src in enumerate(sources[:last + 1]):
            body = ast.parse(src).body
            if i == last:  # up to its last statement that trains
                body = body[:1 + max(j for j, node in enumerate(body) if any(
                    t in (ast.get_source_segment(src, node) or "") for t in _TRAINING_CALLS))]
            for node in body:
                try:
                    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # figures of the empty records
                        exec(compile(ast.Module([node], []), run.notebook.path.name, "exec"),
                             namespace)
                except Exception:  # noqa: BLE001 - past its training calls: the analysis
                    if not found:
                        raise
                    break
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
    return found


def optimiser_steps(config: Any) -> int:
    """The optimiser steps a group trains for: ``max_steps`` (an upper bound: a model that
    reaches its target stops sooner), else epochs x batches of its training set."""
    t = config.train
    return t.max_steps or t.epochs * -(-config.data.n_train // t.batch_size)


def plan(profiles: Any = PROFILES, runs: Any = HEAVY) -> dict[str, dict[str, Any]]:
    """``{run: {profile: [group, ...]}}``, each group a dict: ``label``, ``config`` (a
    ``RunConfig``), ``seeds``, ``steps``, ``key`` (what its step time depends on)."""
    import tempfile

    from dyckbook.nn.thesis_model import ThesisModelConfig

    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for profile in profiles:
            chosen = profile_runs(profile)
            for name in runs:
                if name not in chosen:
                    continue
                groups = []
                for label, config, seeds in training_groups(chosen[name], Path(scratch)):
                    network = 1 if isinstance(config.model, ThesisModelConfig) else seeds
                    t = config.train
                    key = json.dumps([config.model.to_dict(), config.data.lengths(),
                                      type(config.data).__name__, t.batch_size, t.matmul,
                                      t.bucket, network], sort_keys=True, default=str)
                    groups.append({"label": label, "config": config, "seeds": seeds,
                                   "network": network, "steps": optimiser_steps(config),
                                   "key": key})
                out.setdefault(name, {})[profile] = groups
    return out


def _timing_data(config: Any, rows: int) -> Any:
    """``rows`` training strings of the group's lengths (the content does not change the
    time of a step): random bracket strings for a classifier, completion pairs for seq2seq."""
    import numpy as np

    from dyckbook.data.completion import CompletionDataConfig
    from dyckbook.data.dataset import Dataset

    d = config.data
    if isinstance(d, CompletionDataConfig):
        from dataclasses import replace

        from dyckbook.data.completion import make_completion_splits

        return make_completion_splits(replace(d, n_train=rows, n_val=1, n_test=1), seed=0).train
    rng = np.random.default_rng(0)
    lo, hi = d.lengths()
    lengths = rng.integers(max(lo, 1), hi + 1, rows)
    codes = rng.integers(0, 2 * d.k, (rows, hi)).astype(np.uint8)
    return Dataset.from_codes(d.language(), codes, lengths)


def _time_group(group: dict[str, Any], steps: int = 10) -> tuple[float, int]:
    """Seconds of one optimiser step of the group's network on the card (after 3 warm-up
    steps; more steps where 10 take under half a second), and how many models that network
    holds: as ``run.run_seeds`` groups them, as many as fit in the card's memory."""
    from dataclasses import replace

    from dyckbook.data.completion import CompletionDataConfig
    from dyckbook.experiment.run import _group_size

    config = group["config"]
    task = (CompletionTask() if isinstance(config.data, CompletionDataConfig)
            else ClassificationTask(getattr(config.model, "objective", "membership")))
    network = _group_size(config, group["network"], CUDA)
    model = build_model(config.model, list(range(network))).to(CUDA)
    base = replace(config.train, eval_every=0, target_accuracy=None)
    data = _timing_data(config, config.train.batch_size * 64)
    sets = [data] * network
    _timed(model, task, sets, replace(base, max_steps=3))
    seconds = _timed(model, task, sets, replace(base, max_steps=steps))
    if seconds < 0.5:
        steps = min(60, max(steps, int(steps * 1.0 / max(seconds, 1e-3))))
        seconds = _timed(model, task, sets, replace(base, max_steps=steps))
    del model
    torch.cuda.empty_cache()
    return seconds / steps, network


def part_runs(budget_s: float = 300.0) -> tuple[dict[str, Any], list[dict]]:
    """Every heavy run's training groups at the cpu and thesis sizes, timed on the card."""
    start = time.perf_counter()
    planned = plan()
    print(f"planned {sum(len(g) for p in planned.values() for g in p.values())} groups in "
          f"{time.perf_counter() - start:.0f} s", flush=True)
    order = []  # the first distinct group of every run and profile, then the rest
    for turn in (0, 1):
        for name, profiles in planned.items():
            for profile, groups in profiles.items():
                keys = list(dict.fromkeys(g["key"] for g in groups))
                order += [(name, profile, k) for k in (keys[:1] if turn == 0 else keys[1:])]
    timed: dict[str, float] = {}
    networks: dict[str, int] = {}  # models a network held (run_seeds' group on this card)
    for name, profile, key in order:
        if key in timed or time.perf_counter() - start > budget_s:
            continue
        group = next(g for g in planned[name][profile] if g["key"] == key)
        try:
            timed[key], networks[key] = _time_group(group)
        except Exception as error:  # noqa: BLE001 - one group's failure is reported
            print(f"{name} ({profile}) {group['label']}: {error!r}", file=sys.stderr)
            continue
        print(f"{name} ({profile}) {group['label']}: {1000 * timed[key]:.1f} ms a step of "
              f"{networks[key]} model(s)", flush=True)
    raw: dict[str, Any] = {"budget_s": budget_s, "wall_s": time.perf_counter() - start}
    rows = []
    for name, profiles in planned.items():
        for profile, groups in profiles.items():
            known = [timed[g["key"]] for g in groups if g["key"] in timed]
            mean = statistics.mean(known) if known else None
            out = []
            for g in groups:
                per_step = timed.get(g["key"], mean)
                network = networks.get(g["key"], g["network"])
                runs_of_network = -(-g["seeds"] // network)  # the port: a seed at a time
                out.append({"label": g["label"], "seeds": g["seeds"], "network": network,
                            "steps": g["steps"], "timed": g["key"] in timed,
                            "ms_per_step": None if per_step is None else 1000 * per_step,
                            "seconds": None if per_step is None
                            else per_step * g["steps"] * runs_of_network})
            total = (None if mean is None else sum(o["seconds"] for o in out))
            raw.setdefault(name, {})[profile] = {
                "groups": out, "training_seconds": total,
                "timed": sum(o["timed"] for o in out),
                "estimated": sum(not o["timed"] for o in out)}
            if total is not None:
                rows.append(table.row(f"GPU training, {profile} profile, every group one after "
                                      "another", f"{name}: hours of training on the card "
                                      f"({len(out)} groups, {raw[name][profile]['timed']} "
                                      "timed)", total / 3600, lower_is_better=True))
    for profile in PROFILES:  # the whole profile's training (bench_profile_cost adds the rest)
        totals = [raw[name][profile]["training_seconds"] for name in planned
                  if profile in raw[name]]
        if totals and None not in totals:
            rows.append(table.row(f"GPU training, {profile} profile, every group one after "
                                  "another", "every run that trains: hours of training on "
                                  "the card", sum(totals) / 3600, lower_is_better=True))
    return raw, rows


PARTS = {"check": part_check, "speed": part_speed, "dropout": part_dropout,
         "lengths": part_lengths, "runs": part_runs}
DEFAULT_PARTS = "check,speed,runs"


def adopt(new_path: Path, out: Path) -> None:
    """``out`` becomes the gpu.json at ``new_path``; each part of the old ``out`` that the new
    one did not measure is kept under ``raw.earlier[part]`` with its card and date."""
    new = json.loads(new_path.read_text(encoding="utf-8"))
    if "raw" not in new or "device" not in new["raw"]:
        raise SystemExit(f"--adopt: {new_path} is not a gpu.json of bench_gpu (no raw.device)")
    earlier = {}
    if out.exists():
        old = json.loads(out.read_text(encoding="utf-8"))
        raw = old.get("raw", {})
        earlier = dict(raw.get("earlier", {}))
        header = ("device", "torch", "platform", "cpu_count_visible", "earlier")
        for part, value in raw.items():
            if part not in header and part not in new["raw"]:
                earlier[part] = {"device": raw.get("device"), "date": old.get("date"),
                                 "value": value}
    new["raw"]["earlier"] = {k: v for k, v in earlier.items() if k not in new["raw"]}
    out.write_text(json.dumps(new, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"wrote {out} ({new['raw']['device']}, {new.get('date')}); kept earlier parts: "
          f"{sorted(new['raw']['earlier']) or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=DEFAULT_PARTS, help=f"of {list(PARTS)}")
    parser.add_argument("--budget-s", type=float, default=300.0,
                        help="part runs: seconds of timing before the rest are estimated")
    parser.add_argument("--adopt", default=None, metavar="PATH",
                        help="make the gpu.json a device machine wrote at PATH this one, the "
                             "parts it did not measure kept from this one (no CUDA)")
    parser.add_argument("--plan", action="store_true",
                        help="print every heavy run's training groups and stop (no CUDA)")
    parser.add_argument("--out", default=str(table.RESULTS / "gpu.json"))
    parser.add_argument("--lengths-params", default=None,
                        help="part lengths: 07's parameters (dyckbook train-lengths "
                             "--write-params); default the thesis profile's")
    args = parser.parse_args()
    parts = args.parts.split(",")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"--parts: {unknown[0]!r} is not one of {list(PARTS)}")
    if args.adopt:
        adopt(Path(args.adopt), Path(args.out))
        return
    if args.plan:
        for name, profiles in plan().items():
            for profile, groups in profiles.items():
                keys = {g["key"] for g in groups}
                print(f"{name} ({profile}): {len(groups)} groups, {len(keys)} distinct, "
                      f"{sum(g['steps'] for g in groups):,} steps")
        return
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
                                    else PARTS[part](args.budget_s) if part == "runs"
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
