"""Codes to model tokens and back: ``[start] s_1 ... s_n [end] [pad] ...`` as int64 tensors."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dyckbook.data.vocab import END, N_SPECIAL, PAD, PAD_CODE, START

__all__ = ["CPU_EVAL_ACTIVATIONS", "EVAL_ACTIVATIONS", "TokenShape", "attention_scores",
           "check_ids", "check_tokens", "decode", "encode", "eval_rows", "to_device"]
#: on a device, an evaluation batch holds at most this many activations of the model's width
EVAL_ACTIVATIONS = 2**27
#: on the CPU, an evaluation batch holds at most this many activations of the model's width and
#: attention scores (4 GiB of fp32 in one tensor; the default of 1,024 rows stays wherever it
#: fits, so only long strings of many models batch fewer)
CPU_EVAL_ACTIVATIONS = 2**30


class TokenShape:
    """The shape of the classifier's tokens for a config with ``k`` bracket types and strings
    of up to ``n_ctx`` symbols: a mixin of the classifiers' configs."""

    k: int
    n_ctx: int

    @property
    def d_vocab(self) -> int:
        """The specials and 2k symbols."""
        return N_SPECIAL + 2 * self.k

    @property
    def n_positions(self) -> int:
        """``[start]``, n_ctx symbols, ``[end]``."""
        return self.n_ctx + 2


def encode(codes: np.ndarray, lengths: np.ndarray, width: int | None = None) -> torch.Tensor:
    """Classifier tokens of strings given as codes.

    Args:
        codes: uint8 (batch, pos) padded with ``PAD_CODE``.
        lengths: int (batch,).
        width: longest string to make room for (default: the longest of the batch).

    Returns:
        int64 (batch, width + 2): ``[start]``, the symbols (code + 3), ``[end]``, then ``[pad]``.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    longest = int(lengths.max(initial=0))
    width = longest if width is None else width
    if width < longest:
        raise ValueError(f"width must be >= the longest string ({longest}), got {width}")
    n = lengths.size
    out = np.full((n, width + 2), PAD, dtype=np.int64)
    out[:, 0] = START
    body = codes[:, :longest].astype(np.int64) + N_SPECIAL
    inside = np.arange(longest)[None, :] < lengths[:, None]
    out[:, 1:longest + 1] = np.where(inside, body, PAD)
    out[np.arange(n), lengths + 1] = END
    return torch.from_numpy(out)


def decode(tokens: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`encode`: ``(codes uint8 (batch, pos), lengths int64 (batch,))``."""
    tokens = np.asarray(tokens.cpu() if isinstance(tokens, torch.Tensor) else tokens)
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(f"tokens must be (batch, pos >= 2), got shape {tokens.shape}")
    symbol = tokens[:, 1:] >= N_SPECIAL
    lengths = np.argmin(np.concatenate([symbol, np.zeros((len(tokens), 1), bool)], 1), axis=1)
    width = int(lengths.max(initial=0))
    codes = np.where(symbol[:, :width], tokens[:, 1:width + 1] - N_SPECIAL, PAD_CODE)
    inside = np.arange(width)[None, :] < lengths[:, None]
    return np.where(inside, codes, PAD_CODE).astype(np.uint8), lengths.astype(np.int64)


def check_ids(tokens: torch.Tensor, d_vocab: int, name: str = "tokens") -> None:
    """A ValueError naming ``name`` and the first id outside [0, d_vocab), if there is one.

    Only host tensors are read: reading a device's ids back would stop the host at every
    forward pass until the device caught up. Ids bound for a device are checked on the host
    where they cross over (``train`` checks its datasets, ``evaluate.margins`` each chunk)."""
    if tokens.device.type != "cpu":
        return
    low, high = (int(v) for v in torch.aminmax(tokens))
    if low < 0 or high >= d_vocab:
        raise ValueError(f"{name} holds id {low if low < 0 else high}, outside [0, {d_vocab})")


def check_tokens(tokens: torch.Tensor, n_models: int, n_positions: int,
                 d_vocab: int) -> torch.Tensor:
    """A classifier's input checked: int64 (S, batch, pos) with S = ``n_models`` (one model also
    takes (batch, pos)), at most ``n_positions`` positions, ids below ``d_vocab``; a ValueError
    names what is wrong. Returns the (S, batch, pos) tensor."""
    if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long:
        raise ValueError(f"tokens must be an int64 torch.Tensor, got {tokens!r:.60}")
    if tokens.dim() == 2 and n_models == 1:
        tokens = tokens[None]
    if tokens.dim() != 3 or tokens.shape[0] != n_models or 0 in tokens.shape:
        raise ValueError(f"tokens must be (models={n_models}, batch, pos), "
                         f"got shape {tuple(tokens.shape)}")
    if tokens.shape[2] > n_positions:
        raise ValueError(f"tokens has {tokens.shape[2]} positions, more than n_ctx + 2 = "
                         f"{n_positions}")
    check_ids(tokens, d_vocab)
    return tokens


def to_device(tensor: torch.Tensor, device: torch.device | str | None) -> torch.Tensor:
    """``tensor`` (on the host) copied to ``device`` without stopping the host: a CUDA copy
    goes from pinned memory, asynchronously; on the CPU (or ``None``) the tensor itself."""
    if device is None or torch.device(device).type == "cpu":
        return tensor
    if torch.device(device).type == "cuda":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


def eval_rows(n_models: int, positions: int, width: int, device: torch.device | str | None,
              most: int = 1024, scores: int = 0) -> int:
    """Rows of each model an evaluation batch takes, at most ``most`` and at least one: on a
    device as many as keep ``n_models x rows x positions x width`` within
    :data:`EVAL_ACTIVATIONS`; on the CPU as many as keep ``n_models x rows x positions x
    (width + scores)`` within :data:`CPU_EVAL_ACTIVATIONS`, where ``scores`` is the attention
    scores a row may hold per position (:func:`attention_scores`). Long strings of many models
    take fewer rows: ten models of experiment 7 at 514 positions filled 22 GB (and were killed)
    in one batch of 1,024 rows."""
    if device is None or torch.device(device).type == "cpu":
        return max(1, min(most, CPU_EVAL_ACTIVATIONS
                          // max(1, n_models * positions * (width + scores))))
    return max(1, min(most, EVAL_ACTIVATIONS // max(1, n_models * positions * width)))


def attention_scores(config: Any, positions: int) -> int:
    """Attention scores per position a model of ``config`` may hold at once while it runs on
    the CPU: heads x positions for a Transformer (masked attention there can take torch's
    path that forms every score), 0 for a recurrent model."""
    return int(getattr(config, "n_heads", 0) or 0) * positions
