"""Benchmark the explain/plotting layer: attention grid, 4096-token cache + summary, matching scores.

Run: ``.venv/bin/python benchmarks/bench_explain.py`` (writes benchmarks/results/explain.json).
Every memory figure is measured in a fresh subprocess so peaks do not mix: ``peak_rss_delta`` is
the growth of the process' resident high-water mark during the operation (torch and numpy
allocations alike); ``numpy_peak`` is tracemalloc's peak for numpy-only work.
"""

from __future__ import annotations

import io
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "explain.json"
MIB = 1024 * 1024


def rss_peak() -> int:
    """Resident-set high-water mark of this process, bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


CPU: dict[str, float] = {}  # median CPU seconds (all threads) per measured label


def median_time(fn, repeats: int, label: str | None = None) -> tuple[float, list[float]]:
    """Median wall time; the median CPU time goes to ``CPU[label]`` (robust to a busy machine)."""
    times, cpus = [], []
    for _ in range(repeats):
        c = time.process_time()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    if label:
        CPU[label] = statistics.median(cpus)
    return statistics.median(times), times


def build_model(k: int, n_ctx: int, d_model: int, d_mlp: int, seed: int = 0):
    import torch

    from dyckbook.model import ModelConfig, TransformerClassifier

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    cfg = ModelConfig(
        d_vocab=3 + 2 * k, n_ctx=n_ctx, d_model=d_model, d_mlp=d_mlp, n_heads=1, n_layers=2
    )
    model = TransformerClassifier(cfg, generator=torch.Generator().manual_seed(seed)).eval()
    return model


def part_grid() -> dict:
    """One 16-character string through the experiment-1 model, then its attention grid."""
    from dyckbook import explain as E
    from dyckbook import plotting as P
    from dyckbook.languages import Dyck
    from dyckbook.tokenizer import DyckTokenizer

    lang = Dyck(1)
    tok = DyckTokenizer(lang)
    model = build_model(1, 16, 256, 512)
    s = lang.sample(np.random.default_rng(0), [16])[0]
    tokens = tok.encode([s])
    labels = P.token_labels(tokens[0].numpy(), lang.alphabet, len(s))

    def full():
        pats = E.attention_patterns(model, tokens)
        fig = P.plot_attention_grid(pats[:, 0], labels)
        fig.savefig(io.BytesIO(), format="png", dpi=100)

    full()  # warm-up: font cache, first draw
    pats = E.attention_patterns(model, tokens)
    t_extract, _ = median_time(lambda: E.attention_patterns(model, tokens), 5, "extract")
    t_build, _ = median_time(lambda: P.plot_attention_grid(pats[:, 0], labels), 5, "figure_build")
    fig = P.plot_attention_grid(pats[:, 0], labels)
    t_save, _ = median_time(
        lambda: fig.savefig(io.BytesIO(), format="png", dpi=100), 5, "png_render"
    )
    t_full, times = median_time(full, 5, "total")
    t_plain, _ = median_time(
        lambda: P.plot_attention_grid(pats[:, 0], labels, annotate=False).savefig(
            io.BytesIO(), format="png", dpi=100
        ),
        5,
        "total_without_cell_values",
    )
    return {
        "string": s,
        "extract_s": t_extract,
        "figure_build_s": t_build,
        "png_render_s": t_save,
        "total_s": t_full,
        "total_runs_s": times,
        "total_without_cell_values_s": t_plain,
        "thesis_s": 0.8,
        "cpu_s": dict(CPU),
    }


def part_long() -> dict:
    """A 4096-token input through the experiment-7 shape: cache, then the long-input summary."""
    import torch

    from dyckbook import explain as E
    from dyckbook.languages import Dyck
    from dyckbook.tokenizer import DyckTokenizer

    lang = Dyck(3)
    model = build_model(3, 4096, 384, 768)
    s = lang.sample(np.random.default_rng(1), [4096])[0]
    tokens = DyckTokenizer(lang).encode([s])
    out: dict = {"n_tokens": int(tokens.shape[1])}
    base = rss_peak()
    t, c = time.perf_counter(), time.process_time()
    pats = E.attention_patterns(model, tokens)  # patterns only (names filter)
    out["patterns_only_s"] = time.perf_counter() - t
    out["patterns_only_cpu_s"] = time.process_time() - c
    out["patterns_only_peak_rss_delta_mib"] = (rss_peak() - base) / MIB
    base = rss_peak()
    t = time.perf_counter()
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)  # every hook
    out["full_cache_s"] = time.perf_counter() - t
    out["full_cache_peak_rss_delta_mib"] = (rss_peak() - base) / MIB
    out["full_cache_tensor_mib"] = sum(v.numel() * v.element_size() for v in cache.values()) / MIB
    del cache
    with torch.no_grad():
        t = time.perf_counter()
        model(tokens)
        out["forward_fast_path_s"] = time.perf_counter() - t
    match = E.to_token_positions(np.asarray(lang.matching(s)))
    tracemalloc.start()
    t, c = time.perf_counter(), time.process_time()
    summ = E.long_input_summary(pats[1, 0, 0], matching=match)
    out["summary_s"] = time.perf_counter() - t
    out["summary_cpu_s"] = time.process_time() - c
    out["summary_numpy_peak_mib"] = tracemalloc.get_traced_memory()[1] / MIB
    tracemalloc.stop()
    out["summary_block_shape"] = list(summ.block_max.shape)
    out["pattern_mib_per_layer"] = pats[0].nbytes / MIB
    os.environ.setdefault("MPLBACKEND", "Agg")
    from dyckbook import plotting as P

    t = time.perf_counter()
    P.plot_attention_summary(summ).savefig(io.BytesIO(), format="png", dpi=100)
    out["summary_plot_s"] = time.perf_counter() - t
    return out


def part_matching() -> dict:
    """matching_attention over 1000 Dyck-3 strings of lengths 2..16 (experiment-3 data shape)."""
    import torch

    from dyckbook import explain as E
    from dyckbook.languages import Dyck, sample_lengths
    from dyckbook.tokenizer import DyckTokenizer

    lang = Dyck(3)
    rng = np.random.default_rng(2)
    strings = lang.sample(rng, sample_lengths(rng, 1000, 2, 16))
    tokens = DyckTokenizer(lang).encode(strings)
    lengths = torch.tensor([len(x) for x in strings])
    model = build_model(3, 16, 256, 512)
    t = time.perf_counter()
    pats = E.attention_patterns(model, tokens)
    t_pat = time.perf_counter() - t
    t_arr, _ = median_time(
        lambda: E.matching_attention(pats, tokens, lengths), 3, "matching_attention"
    )
    batches = [
        {"tokens": tokens[i : i + 100], "lengths": lengths[i : i + 100]}
        for i in range(0, 1000, 100)
    ]
    t_model, _ = median_time(
        lambda: E.matching_attention_for_model(model, batches), 3, "model_level_10_batches"
    )
    return {
        "n_strings": 1000,
        "patterns_s": t_pat,
        "matching_attention_s": t_arr,
        "model_level_10_batches_s": t_model,
        "cpu_s": dict(CPU),
    }


PARTS = {"grid": part_grid, "long": part_long, "matching": part_matching}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--part":
        print(json.dumps(PARTS[sys.argv[2]]()))
        return
    results: dict = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "threads": int(os.environ.get("BENCH_THREADS", "2")),
            "loadavg_at_start": os.getloadavg(),
        },
    }
    for name in PARTS:
        proc = subprocess.run(
            [sys.executable, __file__, "--part", name],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        if proc.returncode != 0:
            results[name] = {"error": proc.stderr.strip().splitlines()[-1:]}
            continue
        results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"{'measure':48s} value")
    for part, vals in results.items():
        if part == "machine":
            continue
        for key, v in vals.items():
            if isinstance(v, float):
                print(f"{part + '.' + key:48s} {v:10.3f}")
            elif isinstance(v, dict):
                for k2, v2 in v.items():
                    print(f"{part + '.cpu.' + k2:48s} {v2:10.3f}")
            elif key == "error":
                print(f"{part + '.' + key:48s} {v}")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
