"""Dropout with one mask per model, made where the activations are and only at their shape.

Several models train in one network (``blocks.Stacked``); each draws its masks from its own
generator (its *stream*), so a model's training never depends on the models beside it. A
mask is not drawn element by element: one key is drawn from the stream per call and every
element's bit is a hash of (key, the element's index in the model's full shape), so a batch
padded wider for another model keeps this model's bits, a GPU run gets a CPU run's masks, and
the cost is that of the batch's shape (``benchmarks/bench_dropout.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from dyckbook.nn.tokenizer import to_device

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


# murmur3's 32-bit finaliser (Appleby 2008) after a Weyl step by the golden ratio, as int32
_GOLDEN, _MIX1, _MIX2 = (c - 2**32 for c in (0x9E3779B1, 0x85EBCA6B, 0xC2B2AE35))
_ROUNDS = ((16, None), (13, _MIX1), (16, _MIX2))  # (shift, multiplier before the shift)


def _index(shape: tuple[int, ...], dims: tuple[int, ...],
           device: torch.device | str | None) -> torch.Tensor:
    """Each element's flat index in ``dims``, int32 (a larger ``dims`` folds its high half in)."""
    wide = math.prod(dims) >= 2**31
    index = torch.zeros((), dtype=torch.int64 if wide else torch.int32, device=device)
    stride = 1
    for n, m in zip(reversed(shape), reversed(dims)):
        index = index + stride * torch.arange(n, dtype=index.dtype, device=device).view(
            n, *[1] * index.dim())
        stride *= m
    if wide:  # the high 32 bits, scrambled, xor the low ones
        index = (index ^ ((index >> 32) * _MIX2)).to(torch.int32)
    return index


def keep(shape: torch.Size | tuple[int, ...], p: float, streams: Streams,
         full: tuple[int, ...] | None, device: torch.device | str | None = None
         ) -> torch.Tensor:
    """The 0/1 masks of :func:`apply`, (S, *shape[1:]) float32 on ``device``.

    One 32-bit key is drawn from each model's generator per call; element i of model s is kept
    when murmur3's finaliser of (i * golden + key_s), i its flat index in the per-model shape
    ``full``, has its top 24 bits below (1 - p) * 2**24. The masks are made where they are used
    and only at ``shape`` (drawing them at ``full``, n_positions^2 a row for attention, cost
    long inputs most of a training step), in place on 32-bit integers (as fast as
    ``bernoulli_`` an element), and are the same on every device.
    """
    dims = tuple(full or shape[1:])
    if len(dims) != len(shape) - 1 or any(n > m for n, m in zip(shape[1:], dims)):
        raise ValueError(f"dropout's full shape must cover the activations' {tuple(shape[1:])}, "
                         f"got {dims}")
    keys = torch.stack([torch.randint(-2**31, 2**31, (), dtype=torch.int32, generator=g)
                        for g in streams])
    keys = to_device(keys, device)
    index = _index(tuple(shape[1:]), dims, device)
    z = torch.empty((len(streams), *shape[1:]), dtype=torch.int32, device=device)
    z.copy_(index.expand_as(z)).mul_(_GOLDEN).add_(keys.view(-1, *[1] * index.dim()))
    t = torch.empty_like(z)
    for bits, multiplier in _ROUNDS:  # z ^= z >> bits (logical), z *= multiplier
        if multiplier is not None:
            z.mul_(multiplier)
        torch.bitwise_right_shift(z, bits, out=t)
        z.bitwise_xor_(t.bitwise_and_((1 << (32 - bits)) - 1))
    torch.bitwise_right_shift(z, 8, out=t)  # the top 24 bits
    return (t.bitwise_and_(0xFFFFFF) < round((1.0 - p) * 2**24)).float()
