"""Positional encodings: the tables, the randomized draw, RoPE's rotation and ALiBi's slopes.

What each encoding is and what belongs to it is declared once, in ``nn.options.POSITIONS``
(whether it extends past the training lengths, acts inside attention, was made for length, a
decoder reads it); this module implements them. A new encoding is one entry there and its
branch in :class:`PositionalEncoding`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from dyckbook.nn import tokenizer
from dyckbook.nn.dropout import Streams
from dyckbook.nn.options import POS_ENCODINGS, RELATIVE

__all__ = ["PositionalEncoding", "alibi_slopes", "random_positions", "rotate", "sinusoidal_table"]


def sinusoidal_table(n_positions: int, d_model: int) -> torch.Tensor:
    """Vaswani et al.'s table: dims 2j and 2j + 1 share frequency 1 / 10000^(2j / d_model).

    Returns:
        (pos, d_model) float32.
    """
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64)
                     / d_model)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : d_model // 2]
    return table.float()


class PositionalEncoding(nn.Module):
    """Position information added to the embeddings.

    ``none`` adds nothing (attention alone is then blind to order; under a causal mask the
    model can still count, Kazemnejad et al.'s NoPE); ``absolute`` adds ``(i / n) * u`` with n
    the number of tokens of the string and u a learned direction (Yao et al.'s i/n);
    ``absolute_ctx`` the same with n = n_ctx (the thesis' constant denominator); ``sinusoidal``
    the fixed table of Vaswani et al.; ``learned`` a trained table; ``randomized`` the
    sinusoidal table read at a sorted random subset of ``0 .. n_positions - 1`` per row (Ruoss et
    al.: a short training string sees the positions of long ones), drawn from each model's
    stream in training and from a fixed seed in evaluation. ``rope`` (Su et al.) and ``alibi``
    (Press et al.) add nothing here: :class:`Attention` applies them (see :data:`RELATIVE`).
    """

    def __init__(self, kind: str, n_models: int, n_positions: int, d_model: int,
                 n_ctx: int, streams: Streams = ()) -> None:
        super().__init__()
        if kind not in POS_ENCODINGS:
            raise ValueError(f"pos_encoding must be one of {POS_ENCODINGS}, got {kind!r}")
        if kind == "randomized" and len(streams) != n_models:
            raise ValueError(f"pos_encoding 'randomized' needs one stream per model "
                             f"({n_models}), got {len(streams)}")
        self.kind, self.n_ctx, self.streams = kind, n_ctx, streams
        if kind == "learned":
            self.table = nn.Parameter(torch.empty(n_models, n_positions, d_model))
        elif kind in ("absolute", "absolute_ctx"):
            self.direction = nn.Parameter(torch.empty(n_models, d_model))
        elif kind in ("sinusoidal", "randomized"):
            self.register_buffer("fixed", sinusoidal_table(n_positions, d_model), persistent=False)

    @property
    def relative(self) -> str | None:
        """``rope`` or ``alibi`` (for the blocks' self-attention), else None."""
        return self.kind if self.kind in RELATIVE else None

    def forward(self, n_pos: int, n_tokens: torch.Tensor) -> torch.Tensor | None:
        """Encoding broadcastable to (S, batch, pos, d_model), or None for ``none``.

        Args:
            n_pos: positions in the batch.
            n_tokens: (S, batch) real tokens per row (for ``absolute``).
        """
        if self.kind in ("none", *RELATIVE):
            return None
        if self.kind == "randomized":
            return self.fixed[random_positions(n_tokens, n_pos, self.fixed.shape[0],
                                               self.streams if self.training else None)]
        if self.kind == "learned":
            return self.table[:, None, :n_pos]
        if self.kind == "sinusoidal":
            return self.fixed[None, None, :n_pos]
        positions = torch.arange(n_pos, device=n_tokens.device, dtype=self.direction.dtype)
        if self.kind == "absolute":
            frac = positions / n_tokens[..., None].to(positions.dtype)  # (S, batch, pos)
        else:
            frac = (positions / self.n_ctx)[None, None]  # (1, 1, pos)
        return frac[..., None] * self.direction[:, None, None, :]

    @torch.no_grad()
    def reset(self, s: int, g: torch.Generator) -> None:
        if self.kind == "learned":
            self.table[s].normal_(0.0, 1.0, generator=g)
        elif self.kind in ("absolute", "absolute_ctx"):
            self.direction[s].normal_(0.0, 1.0, generator=g)


def random_positions(n_tokens: torch.Tensor, n_pos: int, n_positions: int,
                     streams: Streams | None) -> torch.Tensor:
    """Randomized positions, int64 (S, batch, n_pos): for every row a sorted random subset of
    ``0 .. n_positions - 1``, one position per real token (``n_tokens``, (S, batch): the row's
    own length, so its positions never depend on its batch's padding; pads get
    ``n_positions - 1``). ``streams``: S generators (model s draws from its own), or None
    (evaluation): one seeded with the row's length, so a row's positions depend on its length
    alone (under a causal mask they leak the length to earlier tokens)."""
    (n, batch), on = n_tokens.shape, n_tokens.device
    # training on a device: nothing read back (check_tokens bounds the counts), keys sent over
    lengths = n_tokens if streams is not None and on.type != "cpu" else n_tokens.cpu()
    if lengths.device.type == "cpu" and lengths.numel() and int(lengths.max()) > n_positions:
        raise ValueError(f"a row has {int(lengths.max())} tokens, more than the "
                         f"{n_positions} positions randomized positions draw from")
    if streams is not None:
        keys = tokenizer.to_device(torch.stack([torch.rand(batch, n_positions, generator=g)
                                                for g in streams]), lengths.device)
    else:  # evaluation: a row's positions depend on its length alone
        keys = torch.empty(n, batch, n_positions)
        for length in lengths.unique().tolist():
            g = torch.Generator().manual_seed(int(length))
            keys[lengths == length] = torch.rand(n_positions, generator=g)
    chosen = keys.argsort(-1).argsort(-1) < lengths[..., None]  # the n_tokens smallest keys
    every = torch.arange(n_positions, device=lengths.device)
    return torch.where(chosen, every, n_positions - 1).sort(-1).values[..., :n_pos].to(on)


def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """RoPE (Su et al.): rotate dims (2i, 2i + 1) of every head by ``position * 10000^(-2i /
    d_head)``, so a query's dot product with a key depends on their positions' difference only.

    Args:
        x: (rows, head, pos, d_head) queries or keys, d_head even.
        positions: int (rows or 1, pos).
    """
    half = x.shape[-1] // 2
    freq = torch.exp(-math.log(10000.0) * torch.arange(half, device=x.device) * 2 / x.shape[-1])
    angle = positions[:, None, :, None].to(x.dtype) * freq.to(x.dtype)  # (rows, 1, pos, half)
    cos, sin = angle.cos(), angle.sin()
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), -1).flatten(-2)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's head slopes (Press et al.): the geometric sequence 2^(-8 i / n_heads), i = 1..h."""
    return torch.pow(2.0, -8.0 * torch.arange(1, n_heads + 1, dtype=torch.float64) / n_heads
                     ).float()
