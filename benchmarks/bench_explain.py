"""Attention read-out cost: the long-context chapter's path on a 4,096-symbol input, and one figure.

- ``long``: the long-context chapter's last cell on one Dyck-3 word of ``--length`` symbols
  through experiment 7's shape (``run.thesis_config(7, literal=False)``, causal, ``[end]``
  readout, as the chapter trains it): ``explain.attention_patterns`` (the real forward pass),
  ``explain.long_input_summary`` of one head, ``plotting.plot_attention_summary`` rendered to
  PNG; CPU seconds of each, and the process' peak RSS.
- ``figure``: one 16-symbol string through the experiment-1 model: patterns, the attention grid
  (``plotting.plot_attention_grid``) and its PNG, against the thesis library's ~0.8 s for the
  same figure (ANCHORS.md; it cannot run here, so the reference is that figure, not this run).

One torch thread, process CPU time. Writes benchmarks/results/explain.json; ``--length 512`` is
a quick run.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import table
import torch

from dyckbook.chapters import plotting
from dyckbook.data.dataset import Dataset
from dyckbook.data.languages import Dyck
from dyckbook.experiment.checkpoint import build_model
from dyckbook.experiment.run import thesis_config
from dyckbook.interp import explain

THESIS_FIGURE_SECONDS = 0.8  # ANCHORS.md: the thesis library plots one 16-symbol string's attention


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and its process CPU seconds."""
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def png(figure) -> bytes:
    """The figure as the book saves it (PNG, 120 dpi, tight box)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    return buffer.getvalue()


def word(k: int, length: int, seed: int) -> Dataset:
    """A dataset holding one uniform Dyck-k word of ``length`` symbols."""
    lang = Dyck(k)
    return Dataset.from_codes(lang, *lang.sample_codes(np.random.default_rng(seed), [length]))


def part_figure(seed: int) -> dict[str, float]:
    model = build_model(thesis_config(1, literal=False).model, [0])
    one = word(1, 16, seed)
    png(plotting.plot_attention_grid(explain.attention_patterns(model, one)[:, 0],
                                     one.strings()[0]))  # warm-up: fonts, caches
    patterns, extract = timed(lambda: explain.attention_patterns(model, one))
    figure, build = timed(lambda: plotting.plot_attention_grid(patterns[:, 0], one.strings()[0]))
    _, render = timed(lambda: png(figure))
    return {"patterns_cpu_s": extract, "figure_cpu_s": build, "png_cpu_s": render,
            "total_cpu_s": extract + build + render}


def part_long(length: int, seed: int) -> dict[str, float]:
    config = thesis_config(7, literal=False, mask="causal", readout="end",
                           n_ctx=length, max_length=length, test_max_length=length)
    model = build_model(config.model, [0])
    member = word(3, length, seed)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    patterns, extract = timed(lambda: explain.attention_patterns(model, member))
    summary, summarise = timed(lambda: explain.long_input_summary(patterns[0, 0, 0], member, 0,
                                                                  mask="causal"))
    _, draw = timed(lambda: png(plotting.plot_attention_summary(summary)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"length": length, "patterns_cpu_s": extract, "summary_cpu_s": summarise,
            "figure_png_cpu_s": draw, "total_cpu_s": extract + summarise + draw,
            "patterns_mib": patterns.nbytes / 2**20, "peak_rss_mib": peak / 1024,
            "rss_before_mib": rss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=4096, help="symbols of the long input")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()
    figure = part_figure(args.seed)
    long = part_long(args.length, args.seed)
    name = f"attention, {args.length} symbols"
    rows = [table.row("attention, 16 symbols", "patterns + grid figure + PNG, CPU-s vs the thesis "
                      "library (ANCHORS.md, not this run)", figure["total_cpu_s"],
                      THESIS_FIGURE_SECONDS, lower_is_better=True),
            table.row(name, "attention_patterns CPU-s (2 layers, 1 head)", long["patterns_cpu_s"]),
            table.row(name, "long_input_summary CPU-s", long["summary_cpu_s"]),
            table.row(name, "summary figure + PNG CPU-s", long["figure_png_cpu_s"]),
            table.row(name, "peak RSS MiB (whole process)", long["peak_rss_mib"])]
    raw = {"figure": figure, "long": long, "load_average_end": os.getloadavg(), "threads": 1}
    path = table.save("explain", rows, raw, load, "full" if args.length == 4096 else "small")
    for r in rows:
        print(f"{r['benchmark']}: {r['measure']}: {table.number(r['dyckbook'])}")
    print(f"load average at start {load}; wrote {path}")


if __name__ == "__main__":
    main()
