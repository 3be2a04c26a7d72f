"""Transformer parts with a leading model dimension: linear maps, attention, MLP, blocks, positions.

Every parameter has a leading dimension ``S`` (models): a module built for S models computes S
independent models at once, each initialised from its own generator, so S = 1 is the ordinary
single model and S > 1 trains several seeds as one computation (``experiment.train``). Activations
are ``(S, batch, pos, d_model)``. This is the package's one attention implementation: the
classifier, the encoder–decoder and the decoder-only model are built from it.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from dyckbook.nn import dropout, kernels
from dyckbook.nn.dropout import Streams
from dyckbook.nn.options import MASKS, READOUTS, RELATIVE
from dyckbook.nn.positions import PositionalEncoding, alibi_slopes, rotate

__all__ = ["ACTIVATIONS", "ATTENTION_WEIGHTS", "MASKS", "MATMUL", "NORMS", "READOUTS",
           "Attention", "Block", "Embedding", "LayerNorm", "Linear", "Recorder", "affine",
           "evaluating", "init_models"]

NORMS = ("post", "pre")
ACTIVATIONS = ("relu", "gelu")
#: how a query weighs its keys: ``softmax`` (weights sum to one: a mean over the keys) or
#: ``sigmoid`` (each key's weight on its own, in (0, 1): a sum, which a longer prefix does not
#: dilute; Ramapuram et al. 2024, here without their -log(n) bias, which would)
ATTENTION_WEIGHTS = ("softmax", "sigmoid")

#: Precision of the matrix products of every Linear: "float32", or "bfloat16" (inputs rounded to
#: bfloat16, sums in float32, outputs rounded to bfloat16 and back). ``train`` sets it while it
#: runs (``TrainConfig.matmul``); a context variable, so each thread has its own.
MATMUL: contextvars.ContextVar[str] = contextvars.ContextVar("dyckbook_matmul",
                                                             default="float32")



@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """Within the block the model is in eval mode and autograd is off; its mode is restored."""
    was = model.training
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        model.train(was)


class Recorder:
    """Collects activations of a single model (S = 1) by TransformerLens-style hook name.

    At ``hook_pos_embed`` (the classifier's), ``hook_z``, ``hook_attn_out``, ``hook_mlp_out``
    and ``hook_resid_pre|mid|post`` the forward pass continues with what the call returns:
    :meth:`replace` (here: nothing) lets a subclass patch an activation (``interp.patching``).
    """

    def __init__(self, names: Iterable[str] | Callable[[str], bool] | None = None) -> None:
        self.cache: dict[str, torch.Tensor] = {}
        if names is None:
            self.wants: Callable[[str], bool] = lambda name: True
        elif callable(names):
            self.wants = names
        else:
            self.wants = set(names).__contains__

    def __call__(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """Store ``value[0]`` (the model dimension dropped) under ``name`` if it is wanted;
        return the activation the model goes on with (:meth:`replace`'s)."""
        if self.wants(name):
            self.cache[name] = value[0].detach()
        return self.replace(name, value)

    def replace(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """The activation to continue with, (S, ...) like ``value``: ``value`` itself."""
        return value


class Stacked(nn.Module):
    """A network holding ``len(self.seeds)`` independent models along a leading model
    dimension (the base of the classifier and the sequence-to-sequence models)."""

    seeds: list[int]

    @property
    def n_models(self) -> int:
        return len(self.seeds)

    @property
    def n_params(self) -> int:
        """Trainable parameters of one model."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad) // self.n_models

    def split(self) -> list:
        """The S models as separate single-model networks (copies of their parameters), in
        this network's mode and on its device; a subclass is built as
        ``type(self)(self.config, [seed])``."""
        out = []
        device = next(self.parameters()).device
        for s, seed in enumerate(self.seeds):
            single = type(self)(self.config, [seed]).to(device)  # type: ignore[call-arg, attr-defined]
            single.load_state_dict({k: v[s:s + 1] for k, v in self.state_dict().items()})
            out.append(single.train(self.training))
        return out


class _BFloat16Product(torch.autograd.Function):
    """``bias + x @ weight`` (batched) with bfloat16 inputs and float32 sums, its output in
    float32 (or left in bfloat16 for a consumer that reads it, ``out``); the gradients'
    products the same way, x's in x's type (about 2x float32's speed with AVX512-BF16)."""

    @staticmethod
    def forward(ctx, bias, x, weight, out: torch.dtype):
        xb, wb = x.bfloat16(), weight.bfloat16()
        ctx.save_for_backward(xb, wb)
        ctx.x_dtype = x.dtype
        return torch.baddbmm(bias.bfloat16(), xb, wb).to(out)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        xb, wb = ctx.saved_tensors
        gb = grad.bfloat16()
        need = ctx.needs_input_grad
        grad_x = torch.bmm(gb, wb.transpose(1, 2)).to(ctx.x_dtype) if need[1] else None
        grad_w = torch.bmm(xb.transpose(1, 2), gb).float() if need[2] else None
        # the bias's gradient: a bfloat16 output (fc_in's, the fused qkv's) summed in float32
        # and rounded to bfloat16 like the weight's (a float32 copy first costs ~3x the sum)
        grad_bias = grad.sum(1, keepdim=True).float() if need[0] else None
        return grad_bias, grad_x, grad_w, None


def affine(bias: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
           out: torch.dtype = torch.float32) -> torch.Tensor:
    """``bias + x @ weight`` for (S, rows, d_in) x (S, d_in, d_out), in :data:`MATMUL`'s
    precision; ``out`` bfloat16 leaves a bfloat16 product's output in bfloat16 (float32
    products ignore it)."""
    if MATMUL.get() == "bfloat16":
        return _BFloat16Product.apply(bias, x, weight, out)
    return torch.baddbmm(bias, x, weight)


class Linear(nn.Module):
    """S independent affine maps: weight (S, d_in, d_out), bias (S, 1, d_out)."""

    def __init__(self, n_models: int, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_models, d_in, d_out))
        self.bias = nn.Parameter(torch.empty(n_models, 1, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(S, ..., d_in) -> (S, ..., d_out)."""
        n, d_in, d_out = self.weight.shape
        y = affine(self.bias, x.reshape(n, -1, d_in), self.weight)
        return y.view(*x.shape[:-1], d_out)

    @torch.no_grad()
    def reset(self, s: int, g: torch.Generator) -> None:
        """torch's ``nn.Linear`` distribution: weight and bias U(-1/sqrt(d_in), 1/sqrt(d_in))."""
        bound = 1.0 / math.sqrt(self.weight.shape[1])
        self.weight[s].uniform_(-bound, bound, generator=g)
        self.bias[s].uniform_(-bound, bound, generator=g)


class LayerNorm(nn.Module):
    """LayerNorm over d_model with a per-model affine map (weight 1, bias 0 at start)."""

    def __init__(self, n_models: int, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n_models, d_model))
        self.bias = nn.Parameter(torch.zeros(n_models, d_model))

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """LayerNorm of ``x`` (plus ``residual``): (S, ..., d_model) -> same shape."""
        fused = kernels.layer_norm(x, residual, self.weight, self.bias)
        if fused is not None:
            return fused
        if residual is not None:
            x = x + residual
        n, d = self.weight.shape  # one code path for any S: S = 1 rounds like model s of S
        shape = (n,) + (1,) * (x.dim() - 2) + (d,)
        return F.layer_norm(x, (d,)) * self.weight.view(shape) + self.bias.view(shape)

    @torch.no_grad()
    def reset(self, s: int, g: torch.Generator) -> None:
        self.weight[s].fill_(1.0)
        self.bias[s].zero_()


class Embedding(nn.Module):
    """S token embeddings: weight (S, d_vocab, d_model), N(0, 1) at start."""

    def __init__(self, n_models: int, d_vocab: int, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_models, d_vocab, d_model))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(S, batch, pos) int64 -> (S, batch, pos, d_model)."""
        n, vocab, d = self.weight.shape
        offsets = torch.arange(n, device=tokens.device).view(n, *(1,) * (tokens.dim() - 1))
        return _Lookup.apply(self.weight.view(n * vocab, d), tokens + offsets * vocab)

    @torch.no_grad()
    def reset(self, s: int, g: torch.Generator) -> None:
        self.weight[s].normal_(0.0, 1.0, generator=g)


class _Lookup(torch.autograd.Function):
    """Rows of a table; the backward pass adds the gradients up with ``index_add_`` (3.5x
    faster than ``F.embedding``'s on the grid's tables of 90 rows)."""

    @staticmethod
    def forward(ctx, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.rows = table.shape[0]
        return table.index_select(0, index.flatten()).view(*index.shape, table.shape[1])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        out = grad.new_zeros(ctx.rows, grad.shape[-1])
        return out.index_add_(0, index.flatten(), grad.reshape(-1, grad.shape[-1])), None


def _to_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(rows, pos, d_model) -> (rows, head, pos, d_head)."""
    rows, pos, d = x.shape
    return x.reshape(rows, pos, n_heads, d // n_heads).transpose(1, 2)


def _key_mask(mask: torch.Tensor | None, rows: int, n_keys: int) -> torch.Tensor | None | bool:
    """A (rows, 1, 1, key) mask as (rows, key); None for None; False for any other shape."""
    if mask is None:
        return None
    return mask.reshape(rows, n_keys) if mask.shape == (rows, 1, 1, n_keys) else False


class Attention(nn.Module):
    """Multi-head attention: self-attention, or cross-attention to a memory.

    One fused projection ``qkv`` (S, d_model, 3 d_model): columns [0, d) are W_Q, then W_K, then
    W_V; heads are contiguous blocks of d_head columns. Cross-attention takes queries from ``x``
    and keys and values from ``memory`` with the same layout. ``relative`` (self-attention)
    rotates queries and keys by their positions (``rope``; ``hook_q`` / ``hook_k`` record them
    rotated) or adds ``-slope_h * |i - j|`` to the scores (``alibi``). Short rows on the CPU
    go through ``dyckbook.nn.kernels`` (one pass per row and head, dropout included; not with
    ``relative``); otherwise torch's fused ``scaled_dot_product_attention``, or, when recording
    activations or dropping attention weights, the explicit path (same arithmetic).
    ``weights="sigmoid"`` (:data:`ATTENTION_WEIGHTS`) always takes the explicit path.
    """

    def __init__(self, n_models: int, d_model: int, n_heads: int, p_drop: float,
                 streams: Streams, n_positions: int | None = None,
                 relative: str | None = None, weights: str = "softmax") -> None:
        super().__init__()
        if weights not in ATTENTION_WEIGHTS:
            raise ValueError(f"weights must be one of {ATTENTION_WEIGHTS}, got {weights!r}")
        self.weights = weights
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        if relative not in (None, *RELATIVE):
            raise ValueError(f"relative must be one of {(None, *RELATIVE)}, got {relative!r}")
        if relative == "rope" and (d_model // n_heads) % 2:
            raise ValueError(f"rope rotates pairs of dimensions: d_model / n_heads "
                             f"({d_model} / {n_heads}) must be even")
        self.n_heads, self.p_drop, self.streams = n_heads, p_drop, streams
        self.relative = relative  # rope | alibi | None (self-attention only)
        if relative == "alibi":
            self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)
        self.n_positions = n_positions  # dropout masks are indexed at this many positions
        # (S, head) multipliers of each head's output, e.g. 0 to ablate a head; None: all 1
        self.head_scale: torch.Tensor | None = None
        self.qkv = Linear(n_models, d_model, 3 * d_model)
        self.out = Linear(n_models, d_model, d_model)

    def _q_kv(self, queries: torch.Tensor, keys: torch.Tensor | None,
              out: torch.dtype = torch.float32):
        """Queries (rows, q_pos, d) of ``queries`` (S, batch, q_pos, d) and keys and values
        (rows, k_pos, 2 d) of ``keys`` (None: not computed), rows = S * batch."""
        d, rows = queries.shape[-1], queries.shape[0] * queries.shape[1]
        w, b = self.qkv.weight, self.qkv.bias
        q = affine(b[..., :d], queries.flatten(1, -2), w[..., :d], out).view(rows, -1, d)
        if keys is None:
            return q, None
        kv = affine(b[..., d:], keys.flatten(1, -2), w[..., d:], out)
        return q, kv.view(rows, -1, 2 * d)

    def _project(self, x: torch.Tensor, memory: torch.Tensor | None, cache: dict | None,
                 x_q: torch.Tensor | None, positions: torch.Tensor | None = None,
                 query: torch.Tensor | None = None):
        """q, k, v (rows, head, pos, d_head) for torch's path: queries from ``x`` (or from
        ``x_q``, a few positions of it); keys and values from ``x`` or ``memory``, appended to
        or read from ``cache`` (``{"k", "v"}``) when decoding step by step. With ``relative``
        (self-attention) also the queries' and keys' positions, (rows or 1, pos), else None."""
        d, rows, h = x.shape[-1], x.shape[0] * x.shape[1], self.n_heads
        rel = self.relative if memory is None else None
        if memory is None and x_q is None:
            q, k, v = (_to_heads(t, h) for t in self.qkv(x).view(rows, -1, 3 * d).split(d, -1))
            pos = None
            if rel is not None:
                pos = (positions.reshape(rows, -1) if positions is not None else
                       torch.arange(q.shape[2], device=x.device)[None]
                       + (cache["k"].shape[2] if cache is not None and "k" in cache else 0))
                if rel == "rope":
                    q, k = rotate(q, pos), rotate(k, pos)
            key_pos = pos
            if cache is not None:
                if "k" in cache:
                    k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
                    if pos is not None:
                        key_pos = torch.cat([cache["pos"].expand(rows, -1),
                                             pos.expand(rows, -1)], 1)
                cache["k"], cache["v"], cache["pos"] = k, v, key_pos
            return q, k, v, pos, key_pos
        if rel is not None:  # one query per row (``query``) over every position of x
            q, kv = self._q_kv(x_q, x)
            q, k, v = _to_heads(q, h), *(_to_heads(t, h) for t in kv.split(d, -1))
            q_pos = query.reshape(rows, 1)
            key_pos = torch.arange(k.shape[2], device=x.device)[None]
            if rel == "rope":
                q, k = rotate(q, q_pos), rotate(k, key_pos)
            return q, k, v, q_pos, key_pos
        cached = memory is not None and cache is not None and "k" in cache
        q, kv = self._q_kv(x if x_q is None else x_q, None if cached else
                           x if memory is None else memory)
        if cached:
            return _to_heads(q, h), cache["k"], cache["v"], None, None
        k, v = (_to_heads(t, h) for t in kv.split(d, -1))
        if memory is not None and cache is not None:
            cache["k"], cache["v"] = k, v
        return _to_heads(q, h), k, v, None, None

    def _kernel(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                memory: torch.Tensor | None, x_q: torch.Tensor | None,
                query: torch.Tensor | None) -> torch.Tensor | None:
        """The attention (rows, q_pos, d) through ``dyckbook.nn.kernels``, or None where they do
        not apply (the caller then takes torch's path)."""
        n, batch, n_pos, d = x.shape
        keys = x if memory is None else memory
        mask = _key_mask(mask, n * batch, keys.shape[2])
        if (mask is False or x.device.type != "cpu" or not kernels.available()
                or self.weights != "softmax" or (self.relative and memory is None)
                or not kernels.fits(d, self.n_heads, 1 if x_q is not None else n_pos,
                                    keys.shape[2])):
            return None  # before the projection and the masks: torch's path makes its own
        out = torch.bfloat16  # a bfloat16 product's output goes to the kernel as it is
        if memory is None and x_q is None:
            q = affine(self.qkv.bias, x.reshape(n, -1, d), self.qkv.weight, out)
            q, kv = q.view(n * batch, n_pos, 3 * d), None
        else:
            q, kv = self._q_kv(x if x_q is None else x_q, keys, out)
        drop, drawn_from = None, []
        if self.training and self.p_drop > 0:  # the explicit path's masks, as multipliers
            drawn_from = [g.get_state() for g in self.streams]
            full = (None if self.n_positions is None
                    else (batch * self.n_heads, self.n_positions, self.n_positions))
            shape = (n, batch * self.n_heads, q.shape[1], keys.shape[2])
            drop = (dropout.keep(shape, self.p_drop, self.streams, full, q.device)
                    / (1.0 - self.p_drop)
                    ).view(n * batch, self.n_heads, q.shape[1], keys.shape[2])
        qpos = None if query is None else query.reshape(-1)
        z = kernels.attention(q, kv, self.n_heads, mask, causal, qpos, drop)
        if z is None and drop is not None:  # declined: torch's path draws these masks again
            for g, state in zip(self.streams, drawn_from):
                g.set_state(state)
        return z

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool = False, *,
                memory: torch.Tensor | None = None, cache: dict | None = None,
                record: Recorder | None = None, prefix: str = "",
                query: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """Attend.

        Args:
            x: (S, batch, query, d_model).
            mask: bool, True where a query may see a key, broadcastable to
                (S * batch, 1, query, key); None when every key is visible.
            causal: also hide later keys (self-attention; combined with ``mask``).
            memory: (S, batch, key, d_model) for cross-attention, else None.
            cache: decoding cache of this layer (see ``_project``), or None.
            record: activation recorder (S = 1), or None.
            prefix: hook prefix, e.g. ``blocks.0.attn``.
            query: (S, batch) int64: attend from this one position of every row only (the
                last block of a classifier read at one position; self-attention, no cache).
            positions: (S, batch, query) int64 positions of ``x``'s tokens for ``relative``
                (default 0, 1, ... after the cached keys).

        Returns:
            (S, batch, query, d_model), or (S, batch, 1, d_model) with ``query``.
        """
        n, batch, _, d = x.shape
        x_q = None
        if query is not None:
            x_q = x.gather(2, query[..., None, None].expand(n, batch, 1, d))  # (S, batch, 1, d)
        z = None
        if record is None and cache is None:
            z = self._kernel(x, mask, causal, memory, x_q, query)
        if z is None:
            z = self._torch(x, mask, causal, memory, cache, record, prefix, x_q, query, positions)
        if self.head_scale is not None:
            heads = self.head_scale.repeat_interleave(batch, 0)[:, None, :, None]
            z = (z.view(n * batch, -1, self.n_heads, d // self.n_heads) * heads).flatten(2)
        return self.out(z.view(n, batch, -1, d))

    def _torch(self, x, mask, causal, memory, cache, record, prefix, x_q, query,
               positions=None) -> torch.Tensor:
        """:meth:`forward` with torch's ops: the attention in row layout (rows, q_pos, d)."""
        n, batch, n_pos, d = x.shape
        if query is not None and causal:  # the query at position p sees keys 0..p
            later = torch.arange(n_pos, device=x.device) > query.reshape(-1, 1, 1, 1)
            mask = ~later if mask is None else mask & ~later
            causal = False
        # (S * batch, head, pos, d_head); positions (rows or 1, pos) with ``relative``
        q, k, v, q_pos, k_pos = self._project(x, memory, cache, x_q, positions, query)
        n_q, n_k = q.shape[2], k.shape[2]
        if causal:
            future = torch.ones(n_q, n_k, dtype=torch.bool, device=x.device).tril(n_k - n_q)
            mask = future if mask is None else mask & future
        if mask is not None:  # a query that sees no key (an all-pad row) may see every key
            mask = mask | ~mask.any(dim=-1, keepdim=True)
        bias = None  # ALiBi: -slope_h * |i - j|, (rows or 1, head, q, k)
        if self.relative == "alibi" and q_pos is not None:
            distance = (q_pos[:, None, :, None] - k_pos[:, None, None, :]).abs().to(q.dtype)
            bias = -self.slopes.to(q.dtype)[None, :, None, None] * distance
        p = self.p_drop if self.training else 0.0
        if record is None and p == 0.0 and self.weights == "softmax":
            if bias is not None:
                mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
            z = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (S*batch, head, q, k)
            if bias is not None:
                scores = scores + bias
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            # a hidden key's score is -inf: weight 0 under either
            pattern = scores.softmax(dim=-1) if self.weights == "softmax" else scores.sigmoid()
            if record is not None:
                heads = (n, batch, self.n_heads)
                record(f"{prefix}.hook_q", q.view(*heads, n_q, -1).transpose(2, 3))
                record(f"{prefix}.hook_k", k.view(*heads, n_k, -1).transpose(2, 3))
                record(f"{prefix}.hook_v", v.view(*heads, n_k, -1).transpose(2, 3))
                record(f"{prefix}.hook_attn_scores", scores.view(*heads, n_q, n_k))
                record(f"{prefix}.hook_pattern", pattern.view(*heads, n_q, n_k))
            full = (None if self.n_positions is None
                    else (batch * self.n_heads, self.n_positions, self.n_positions))
            pattern = dropout.apply(pattern.view(n, -1, n_q, n_k), p, self.streams, self.training,
                                    full)
            z = pattern.view(n * batch, self.n_heads, n_q, n_k) @ v
            if record is not None:  # (S, batch, pos, head, d_head) in and out
                z = record(f"{prefix}.hook_z", z.view(n, batch, self.n_heads, n_q, -1)
                           .transpose(2, 3)).transpose(2, 3).reshape(z.shape)
        return z.transpose(1, 2).reshape(n * batch, n_q, d)


class MLP(nn.Module):
    """Position-wise feed-forward network: d_model -> d_mlp -> d_model."""

    def __init__(self, n_models: int, d_model: int, d_mlp: int, act_fn: str) -> None:
        super().__init__()
        if act_fn not in ACTIVATIONS:
            raise ValueError(f"act_fn must be one of {ACTIVATIONS}, got {act_fn!r}")
        self.fc_in = Linear(n_models, d_model, d_mlp)
        self.fc_out = Linear(n_models, d_mlp, d_model)
        self.relu = act_fn == "relu"

    def forward(self, x: torch.Tensor, record: Recorder | None, prefix: str) -> torch.Tensor:
        """(S, batch, pos, d_model) -> same shape."""
        n, d = x.shape[0], x.shape[-1]
        # (S, rows, d_mlp); fc_in's backward needs x, not hidden. A bfloat16 product's output
        # is rounded and fc_out's product rounds its input, so the activation between them
        # reads and writes bfloat16 (in place, not on a view: autograd would copy it back).
        hidden = affine(self.fc_in.bias, x.reshape(n, -1, d), self.fc_in.weight, torch.bfloat16)
        hidden = F.relu_(hidden) if self.relu else F.gelu(hidden)
        if record is not None:
            record(f"{prefix}.hook_post", hidden.view(*x.shape[:-1], -1).float())
        return self.fc_out(hidden).view(x.shape)


class Block(nn.Module):
    """Self-attention, optional cross-attention to a memory, MLP; each with a residual and
    LayerNorm after it (``post``, the original Transformer and the thesis) or before (``pre``)."""

    def __init__(self, n_models: int, d_model: int, n_heads: int, d_mlp: int, p_drop: float,
                 norm: str, act_fn: str, streams: Streams, cross: bool = False,
                 n_positions: int | None = None, relative: str | None = None,
                 weights: str = "softmax") -> None:
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        self.norm, self.p_drop, self.streams = norm, p_drop, streams
        self.n_positions = n_positions  # dropout masks are indexed at this many positions
        self.attn = Attention(n_models, d_model, n_heads, p_drop, streams, n_positions, relative,
                              weights)
        self.cross_attn = (Attention(n_models, d_model, n_heads, p_drop, streams, n_positions)
                           if cross else None)
        self.mlp = MLP(n_models, d_model, d_mlp, act_fn)
        self.ln1 = LayerNorm(n_models, d_model)
        self.ln_cross = LayerNorm(n_models, d_model) if cross else None
        self.ln2 = LayerNorm(n_models, d_model)

    def _sub(self, x: torch.Tensor, ln: LayerNorm, fn: Callable[[torch.Tensor], torch.Tensor],
             record: Recorder | None, name: str,
             residual: torch.Tensor | None = None) -> torch.Tensor:
        """One residual sub-block ``residual + dropout(fn(x))`` (residual: x) with its LayerNorm."""
        full = None if self.n_positions is None else (x.shape[1], self.n_positions, x.shape[3])
        out = dropout.apply(fn(ln(x) if self.norm == "pre" else x), self.p_drop, self.streams,
                            self.training, full)
        if record is not None:
            out = record(name, out)
        x = x if residual is None else residual
        return ln(x, out) if self.norm == "post" else x + out

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool = False, *,
                memory: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                cache: dict | None = None, record: Recorder | None = None,
                prefix: str = "blocks.0", query: torch.Tensor | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        """(S, batch, pos, d_model) -> same shape, or (S, batch, 1, d_model) with ``query``.

        ``cache`` (decoding) is ``{"self": {...}, "cross": {...}}`` for this layer. ``query``
        ((S, batch) int64, self-attention only, no dropout) computes the block at one position
        per row: every position is still a key, so this equals the full block at that position.
        With post-LN, ``hook_resid_mid`` / ``hook_resid_post`` are taken after the LayerNorm,
        i.e. exactly the next sub-block's input.
        """
        cache = {} if cache is None else cache
        if record is not None:
            x = record(f"{prefix}.hook_resid_pre", x)
        residual = None
        if query is not None:
            residual = x.gather(2, query[..., None, None].expand(*query.shape, 1, x.shape[-1]))
        x = self._sub(x, self.ln1, lambda h: self.attn(
            h, mask, causal, cache=cache.get("self"), record=record, prefix=f"{prefix}.attn",
            query=query, positions=positions), record, f"{prefix}.hook_attn_out", residual)
        if self.cross_attn is not None:
            x = self._sub(x, self.ln_cross, lambda h: self.cross_attn(
                h, memory_mask, memory=memory, cache=cache.get("cross"), record=record,
                prefix=f"{prefix}.cross_attn"), record, f"{prefix}.hook_cross_out")
        if record is not None:
            x = record(f"{prefix}.hook_resid_mid", x)
        x = self._sub(x, self.ln2, lambda h: self.mlp(h, record, f"{prefix}.mlp"), record,
                      f"{prefix}.hook_mlp_out")
        if record is not None:
            x = record(f"{prefix}.hook_resid_post", x)
        return x


def init_models(root: nn.Module, seeds: Sequence[int]) -> None:
    """Initialise model ``s`` of every sub-module from a generator seeded with ``seeds[s]``.

    Sub-modules are visited in registration order, so model s of an S-model network gets
    exactly the parameters a single model built with ``seeds[s]`` gets.
    """
    for s, seed in enumerate(seeds):
        g = torch.Generator().manual_seed(int(seed))
        for module in root.modules():
            if isinstance(module, _RESETTABLE):
                module.reset(s, g)


_RESETTABLE = (Linear, LayerNorm, Embedding, PositionalEncoding)
