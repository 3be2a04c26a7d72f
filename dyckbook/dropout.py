"""Dropout with one mask per model, made where the activations are and only at their shape.

Several models train in one network (``blocks.Stacked``); each draws its masks from its own
generator (its *stream*), so a model's training never depends on the models beside it. A
mask is not drawn element by element: one key is drawn from the stream per call and every
element's bit is a hash of (key, the element's index in the model's full shape), so a batch
padded wider for another model keeps this model's bits, a GPU run gets a CPU run's masks, and
the cost is that of the batch's shape (``benchmarks/bench_dropout.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["Streams", "apply", "keep"]

Streams = Sequence[torch.Generator]  # one dropout generator per model


def apply(x: torch.Tensor, p: float, streams: Streams, training: bool,
          full: tuple[int, ...] | None = None) -> torch.Tensor:
    """Dropout with one mask per model, each keyed by a draw from that model's generator.

    Args:
        x: (S, ...) activations.
        p: drop probability.
        streams: S generators.
        training: apply only in training mode.
        full: the per-model shape the masks are indexed in, ``x.shape[1:]`` at least along every
            axis (positions at the model's n_positions): an element keeps its mask bit however
            much wider another model's batch padded it, so a model's dropout never depends on
            the others'.
    """
    if not training or p == 0.0:
        return x
    return x * keep(x.shape, p, streams, full, x.device) / (1.0 - p)


# splitmix64 (Steele, Lea and Flood 2014): its increment and multipliers as signed int64
_GAMMA, _MIX1, _MIX2 = (c - 2**64 for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9,
                                             0x94D049BB133111EB))


def _shift(z: torch.Tensor, bits: int) -> torch.Tensor:
    """``z >> bits`` as unsigned 64-bit integers (torch shifts int64 arithmetically)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def keep(shape: torch.Size | tuple[int, ...], p: float, streams: Streams,
         full: tuple[int, ...] | None, device: torch.device | str | None = None
         ) -> torch.Tensor:
    """The 0/1 masks of :func:`apply`, (S, *shape[1:]) float32 on ``device``.

    One 63-bit key is drawn from each model's generator per call; element i of model s is kept
    when splitmix64 of (key_s + (i + 1) * gamma), i its flat index in the per-model shape
    ``full``, has its top 24 bits below (1 - p) * 2**24. The masks are made where they are used
    and only at ``shape`` (drawing them at ``full``, n_positions^2 a row for attention, cost
    long inputs most of a training step), and are the same on every device.
    """
    dims = tuple(full or shape[1:])
    if len(dims) != len(shape) - 1 or any(n > m for n, m in zip(shape[1:], dims)):
        raise ValueError(f"dropout's full shape must cover the activations' {tuple(shape[1:])}, "
                         f"got {dims}")
    keys = torch.stack([torch.empty((), dtype=torch.int64).random_(generator=g)
                        for g in streams]).to(device)
    index = torch.zeros((), dtype=torch.int64, device=device)
    stride = 1
    for n, m in zip(reversed(shape[1:]), reversed(dims)):  # the flat index in ``full``
        index = index + stride * torch.arange(n, device=device).view(n, *[1] * index.dim())
        stride *= m
    z = keys.view(-1, *[1] * index.dim()) + (index + 1) * _GAMMA
    z = (z ^ _shift(z, 30)) * _MIX1
    z = (z ^ _shift(z, 27)) * _MIX2
    z = z ^ _shift(z, 31)
    return (_shift(z, 40) < round((1.0 - p) * 2**24)).float()
