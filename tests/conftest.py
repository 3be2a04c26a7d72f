"""Shared pytest set-up: quiet, single-threaded torch per worker, a non-interactive plot backend."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("DYCKBOOK_QUIET", "1")

try:  # torch is a core dependency, but keep collection working if a module is numpy-only
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    pass
