"""The thesis' classifier, ``transformer-checker`` 0.1.8's TransformerClassifier, ported."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from dyckbook.data.config import Config
from dyckbook.data.thesis import thesis_split_sizes
from dyckbook.data.vocab import N_SPECIAL, PAD
from dyckbook.nn import tokenizer

__all__ = ["MASKS", "POS_ENCODINGS", "READOUTS", "ThesisClassifier", "ThesisModelConfig",
           "thesis_permutation", "thesis_split_sizes"]

POS_ENCODINGS = ("none", "sinusoidal", "absolute")
MASKS = ("bidirectional", "causal")
READOUTS = ("start", "end", "mean")

Dropout = Callable[[torch.Tensor], torch.Tensor]


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


@dataclass(frozen=True)
class ThesisModelConfig(Config):
    """Architecture of a ``ThesisClassifier`` in the library's terms; defaults: experiment 1."""

    k: int  # bracket types; the vocabulary is 3 specials + 2k symbols
    n_ctx: int  # the library's max_seq_len: longest string; its tables hold n_ctx + 2 positions
    d_model: int = 256  # embedding width
    n_heads: int = 1  # attention heads (d_model divisible by it)
    d_mlp: int = 512  # feed-forward width (the library's dim_ff)
    n_layers: int = 2  # encoder blocks
    pos_encoding: str = "none"  # none | sinusoidal | absolute (pos / (n_ctx + 2), every dim)
    mask: str = "bidirectional"  # bidirectional: pad keys hidden | causal: later keys hidden
    readout: str = "start"  # start (the library) | end ([end] token) | mean (real tokens)
    embed_twice: bool = True  # with a PE, add the raw embedding again (the library); False: once
    dropout: float = 0.1  # every dropout site (the library fixes it at 0.1)

    kind = "thesis"  # RunConfig tells model configs apart by this

    def __post_init__(self) -> None:
        for name in ("k", "n_ctx", "d_model", "n_heads", "d_mlp", "n_layers"):
            _check_int(f"ThesisModelConfig.{name}", getattr(self, name), 1)
        for name, allowed in (("pos_encoding", POS_ENCODINGS), ("mask", MASKS),
                              ("readout", READOUTS), ("embed_twice", (True, False))):
            # type() check: 1 == True would pass as embed_twice
            if getattr(self, name) not in allowed or type(getattr(self, name)) is int:
                raise ValueError(f"ThesisModelConfig.{name} must be one of {allowed}, "
                                 f"got {getattr(self, name)!r}")
        if self.d_model % self.n_heads or (self.pos_encoding == "sinusoidal" and self.d_model % 2):
            raise ValueError(f"ThesisModelConfig.d_model ({self.d_model}) must be divisible by "
                             f"n_heads ({self.n_heads}), and even for sinusoidal positions")
        if isinstance(self.dropout, bool) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"ThesisModelConfig.dropout must be in [0, 1), got {self.dropout!r}")

    @property
    def d_vocab(self) -> int:
        return N_SPECIAL + 2 * self.k


def _position_table(kind: str, n_positions: int, d_model: int) -> torch.Tensor:
    """The library's (n_positions, d_model) float32 table, computed with its operations."""
    if kind == "absolute":  # the library fills pe[pos, i] = pos / max_seq_len one by one
        column = (torch.arange(n_positions, dtype=torch.float64) / n_positions).float()
        return column[:, None].expand(n_positions, d_model).clone()
    table = torch.zeros(n_positions, d_model)
    position = torch.arange(0, n_positions, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    table[:, 0::2] = torch.sin(position * div_term)
    table[:, 1::2] = torch.cos(position * div_term)
    return table


class _Block(nn.Module):
    """A post-LN encoder block with the library's initialisation and dropout sites."""

    def __init__(self, d_model: int, n_heads: int, d_mlp: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.q, self.k, self.v, self.out = (nn.Linear(d_model, d_model) for _ in range(4))
        with torch.no_grad():  # after torch's own init, as the library does (same draws)
            for linear in (self.q, self.k, self.v, self.out):
                nn.init.xavier_uniform_(linear.weight)
                linear.bias.zero_()
        self.mlp_in, self.mlp_out = nn.Linear(d_model, d_mlp), nn.Linear(d_mlp, d_model)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def attend(self, x: torch.Tensor, mask: torch.Tensor,
               drop: Dropout) -> tuple[torch.Tensor, torch.Tensor]:
        """Output (batch, pos, d_model) and pattern (batch, head, query, key) of attention over
        x (batch, pos, d_model); mask is 0 where hidden. Dropout on the heads' output and on
        the projection's (the library's sites)."""
        batch, _, d_model = x.shape
        d_head = d_model // self.n_heads
        q, k, v = (f(x).view(batch, -1, self.n_heads, d_head).transpose(1, 2)
                   for f in (self.q, self.k, self.v))  # (batch, head, pos, d_head)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_head)
        pattern = torch.softmax(scores.masked_fill(mask == 0, float("-1e9")), dim=-1)
        z = torch.matmul(pattern, v).transpose(1, 2).contiguous().view(batch, -1, d_model)
        return drop(self.out(drop(z))), pattern

    def forward(self, x: torch.Tensor, mask: torch.Tensor,
                drop: Dropout) -> tuple[torch.Tensor, torch.Tensor]:
        a, pattern = self.attend(x, mask, drop)
        x = self.ln1(x + drop(a))
        # the library drops out before the ReLU
        return self.ln2(x + drop(self.mlp_out(torch.relu(drop(self.mlp_in(x)))))), pattern


class ThesisClassifier(nn.Module):
    """The library's classifier: parameters, forward pass and attention read-out, defects kept.

    Built from the seed exactly as the library builds its model after ``torch.manual_seed``
    (same draws, same order, so the same initial weights) without touching the caller's random
    state. Dropout masks come from the model's own stream, not torch's global generator.
    """

    n_models = 1  # dyckbook.experiment.train's interface: one model, seeded by seeds[0]

    def __init__(self, config: ThesisModelConfig, seed: int) -> None:
        super().__init__()
        if not isinstance(config, ThesisModelConfig):
            raise ValueError(f"config must be a ThesisModelConfig, got {type(config).__name__}")
        _check_int("seed", seed, 0)
        self.config, self.seeds, c = config, [seed], config
        self._stream_seed = int(np.random.SeedSequence([seed, 1]).generate_state(1)[0])
        self._stream: torch.Generator | None = None  # dropout's, made on the data's device
        # torch.manual_seed would also reseed CUDA; the library builds on the CPU generator only
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            self.embed = nn.Embedding(c.d_vocab, c.d_model)
            if c.pos_encoding != "none":
                self.register_buffer("pe", _position_table(c.pos_encoding, c.n_ctx + 2, c.d_model))
            self.blocks = nn.ModuleList(_Block(c.d_model, c.n_heads, c.d_mlp)
                                        for _ in range(c.n_layers))
            self.classifier = nn.Linear(c.d_model, 2)

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        p = self.config.dropout
        if not self.training or p == 0.0:
            return x
        if self._stream is None or self._stream.device != x.device:  # (re)start on x's device
            self._stream = torch.Generator(x.device).manual_seed(self._stream_seed)
        return x * torch.empty_like(x).bernoulli_(1.0 - p, generator=self._stream) / (1.0 - p)

    def _check(self, tokens: torch.Tensor) -> torch.Tensor:
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long:
            raise ValueError(f"tokens must be an int64 torch.Tensor, got {tokens!r:.60}")
        tokens = tokens[0] if tokens.dim() == 3 and tokens.shape[0] == 1 else tokens
        if tokens.dim() != 2 or 0 in tokens.shape or tokens.shape[1] > self.config.n_ctx + 2:
            raise ValueError(f"tokens must be (batch, pos) or (1, batch, pos) with pos <= n_ctx "
                             f"+ 2 = {self.config.n_ctx + 2}, got shape {tuple(tokens.shape)}")
        tokenizer.check_ids(tokens, self.config.d_vocab)
        return tokens

    def _mask(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.config.mask == "causal":  # pads stay visible to the queries after them
            n = tokens.shape[1]
            return torch.tril(torch.ones(n, n, device=tokens.device))[None, None]  # (1,1,q,k)
        return (tokens != PAD)[:, None, None, :]  # (batch, 1, 1, key)

    def _run(self, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        c = self.config
        x = e = self.embed(tokens)  # (batch, pos, d_model)
        if c.pos_encoding != "none":  # the library's encoder scales, adds, drops; then + e again
            x = self._drop(e * math.sqrt(c.d_model) + self.pe[:tokens.shape[1]])
            x = x + e if c.embed_twice else x
        mask, patterns = self._mask(tokens), []
        for block in self.blocks:
            x, pattern = block(x, mask, self._drop)
            patterns.append(pattern)
        real = tokens != PAD
        if c.readout == "start":
            out = x[:, 0]
        elif c.readout == "end":
            out = x[torch.arange(len(x), device=x.device), real.sum(1) - 1]
        else:
            out = (x * real[..., None]).sum(1) / real.sum(1, keepdim=True)
        return self.classifier(out), patterns

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (batch, 2) of tokens (batch, pos), or (1, batch, 2) of (1, batch, pos); the
        ids are dyckbook's and the library's (``[start]=0, [pad]=1, [end]=2``, symbols 3..)."""
        logits = self._run(self._check(tokens))[0]
        return logits[None] if tokens.dim() == 3 else logits

    def attention_patterns(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Per layer, the (batch, head, query, key) pattern of the real forward pass (eval mode)."""
        tokens, was = self._check(tokens), self.training
        with torch.no_grad():
            patterns = self.eval()._run(tokens)[1]
        self.train(was)
        return patterns

    def thesis_attention_patterns(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Per layer, the pattern the library plots (``get_attn_matrices``): every layer's
        attention applied to the raw embedding, without positions. Right in layer 0 only, and
        there only without a positional encoding."""
        tokens = self._check(tokens)
        with torch.no_grad():
            e, mask = self.embed(tokens), self._mask(tokens)
            return [block.attend(e, mask, lambda t: t)[1] for block in self.blocks]


def thesis_permutation(n: int, seed: int = 42) -> np.ndarray:
    """int64 (n,): the order in which the thesis' ``random_split`` deals out ``n`` strings after
    ``torch.manual_seed(seed)``; train, validation and test are consecutive slices of it, sized
    by :func:`thesis_split_sizes`."""
    _check_int("n", n, 0)
    _check_int("seed", seed, 0)
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed)).numpy()
