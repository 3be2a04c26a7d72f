"""Encoder-only Transformer classifier for bracket strings, with a fast path and an activation cache."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

try:  # the tokenizer owns the special ids; fall back only while it has not landed
    from dyckbook.tokenizer import END, PAD, START
except ImportError:  # pragma: no cover - only before dyckbook.tokenizer exists
    START, PAD, END = 0, 1, 2

__all__ = [
    "EVAL_ATTENTIONS",
    "MASKS",
    "NORMS",
    "POS_ENCODINGS",
    "READOUTS",
    "ModelConfig",
    "TransformerClassifier",
    "load_model",
    "save_model",
]

MASKS = ("bidirectional", "causal")
POS_ENCODINGS = ("none", "absolute", "absolute_ctx", "sinusoidal", "learned")
READOUTS = ("start", "end", "mean")
NORMS = ("post", "pre", "none")
EVAL_ATTENTIONS = ("soft", "leftmost_hard", "average_hard")
ACT_FNS = ("relu", "gelu")


@dataclass
class ModelConfig:
    """Architecture of a :class:`TransformerClassifier`.

    The defaults are the thesis' experiment-1 model (2 layers, d_model 256, d_mlp 512, one head,
    dropout 0.1, bidirectional mask, no positional encoding, post-LN, `[start]` readout), which has
    1,056,002 parameters for Dyck-1 -- the same count as the thesis library.
    """

    d_vocab: int  # vocabulary size, special tokens included (DyckTokenizer.vocab_size)
    n_ctx: int  # longest string accepted, specials excluded; the model sees n_ctx + 2 positions
    d_model: int = 256  # width of the residual stream
    n_heads: int = 1  # attention heads per layer; d_model must be divisible by it
    d_mlp: int = 512  # hidden width of the MLP (the thesis' d_ff)
    n_layers: int = 2  # number of encoder blocks
    dropout: float = 0.1  # dropout on embeddings, attention weights and sub-block outputs
    n_classes: int = 2  # output classes (2: non-member / member)
    mask: str = "bidirectional"  # "bidirectional" (pad keys hidden) | "causal" (also future keys)
    pos_encoding: str = "none"  # "none" | "absolute" (i/n) | "absolute_ctx" (i/n_ctx) | "sinusoidal" | "learned"
    readout: str = "start"  # "start" ([start], the thesis) | "end" ([end] token) | "mean" (real tokens)
    norm: str = "post"  # "post" (the thesis, torch's default) | "pre" | "none"
    residual: bool = True  # add the residual connections around attention and MLP
    eval_attention: str = "soft"  # "soft" | "leftmost_hard" | "average_hard" (only in eval mode)
    act_fn: str = "relu"  # MLP non-linearity: "relu" (torch's default, the thesis) | "gelu"

    def __post_init__(self) -> None:
        for name in ("d_vocab", "n_ctx", "d_model", "n_heads", "d_mlp", "n_layers", "n_classes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if self.d_vocab <= END:
            raise ValueError(
                f"ModelConfig.d_vocab must exceed the special ids (> {END}), got {self.d_vocab!r}"
            )
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"ModelConfig.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not (
            0.0 <= self.dropout < 1.0
        ):
            raise ValueError(f"ModelConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if not isinstance(self.residual, bool):
            raise ValueError(f"ModelConfig.residual must be a bool, got {self.residual!r}")
        for name, allowed in (
            ("mask", MASKS),
            ("pos_encoding", POS_ENCODINGS),
            ("readout", READOUTS),
            ("norm", NORMS),
            ("eval_attention", EVAL_ATTENTIONS),
            ("act_fn", ACT_FNS),
        ):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"ModelConfig.{name} must be one of {allowed}, got {value!r}")
        if self.pos_encoding == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(
                f"ModelConfig.d_model must be even for sinusoidal encoding, got {self.d_model!r}"
            )

    @property
    def d_head(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads

    @property
    def n_positions(self) -> int:
        """Positions the model accepts: the longest string plus `[start]` and `[end]`."""
        return self.n_ctx + 2

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict of the fields (derived values excluded)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"ModelConfig.from_dict got unknown keys {unknown}")
        return cls(**data)


def sinusoidal_encoding(n_positions: int, d_model: int) -> torch.Tensor:
    """Vaswani et al.'s sinusoidal table (thesis eq. 3.4).

    Dimensions 2j and 2j + 1 share the frequency 1 / 10000^(2j / d_model) (Vaswani's form; the
    thesis' eq. 3.4 writes k / d_model for the odd dimension as well, a typo we do not copy).

    Returns:
        Tensor (pos, d_model).
    """
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table.float()


NamesFilter = Iterable[str] | Callable[[str], bool] | None


class _Recorder:
    """Collects activations whose hook name passes the filter."""

    def __init__(self, names: NamesFilter, detach: bool) -> None:
        self.cache: dict[str, torch.Tensor] = {}
        self.detach = detach
        if names is None:
            self.wants: Callable[[str], bool] = lambda name: True
        elif callable(names):
            self.wants = names
        else:
            chosen = set(names)
            self.wants = chosen.__contains__

    def __call__(self, name: str, value: torch.Tensor) -> None:
        if self.wants(name):
            self.cache[name] = value.detach() if self.detach else value


class Attention(nn.Module):
    """Multi-head self-attention with a fused Q/K/V projection.

    ``qkv.weight`` has shape (3 * d_model, d_model): rows ``[0:d_model]`` are W_Q, then W_K, then
    W_V (the layout of torch's ``in_proj_weight``); heads are contiguous blocks of d_head rows.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(
        self,
        x: torch.Tensor,
        allowed: torch.Tensor | None,
        is_causal: bool,
        record: _Recorder | None,
        prefix: str,
        hard: str | None,
        query: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Attend.

        Args:
            x: (batch, pos, d_model) input (already normalised for pre-LN).
            allowed: (batch, 1, query, key) bool, True where a query may see a key; None when every
                key is visible (or only the causal structure applies, see ``is_causal``).
            is_causal: the only restriction is the future mask (no pads in the batch).
            record: activation recorder, or None for the fused fast path.
            prefix: hook prefix, ``blocks.{l}.attn``.
            hard: None for softmax, else "leftmost_hard" / "average_hard".
            query: (batch,) int64: compute the output only at this query position of each row
                (fast path only: ``record`` and ``hard`` must be None).

        Returns:
            (batch, pos, d_model) attention output after the output projection, or
            (batch, 1, d_model) with ``query``.
        """
        cfg = self.cfg
        batch, n_pos, _ = x.shape
        p_drop = cfg.dropout if self.training else 0.0
        if query is not None:
            return self._single_query(x, query, allowed, is_causal, p_drop)
        q, k, v = self.qkv(x).view(batch, n_pos, 3, cfg.n_heads, cfg.d_head).permute(2, 0, 3, 1, 4)
        # q, k, v: (batch, head, pos, d_head)
        if record is None and hard is None:
            z = F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, dropout_p=p_drop, is_causal=is_causal and allowed is None
            )
        else:
            if record is not None:
                record(f"{prefix}.hook_q", q)
                record(f"{prefix}.hook_k", k)
                record(f"{prefix}.hook_v", v)
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(cfg.d_head)  # (batch, head, query, key)
            if allowed is None and is_causal:
                allowed = torch.ones(n_pos, n_pos, dtype=torch.bool, device=x.device).tril()
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            if record is not None:
                record(f"{prefix}.hook_attn_scores", scores)
            if hard is None:
                pattern = scores.softmax(dim=-1)
            else:
                top = scores.amax(dim=-1, keepdim=True)
                if hard == "leftmost_hard":
                    # torch.argmax returns the first maximal index: the leftmost-hard rule
                    pattern = F.one_hot(scores.argmax(dim=-1), n_pos).to(scores.dtype)
                else:
                    ties = scores == top
                    pattern = ties / ties.sum(dim=-1, keepdim=True)
            if record is not None:
                record(f"{prefix}.hook_pattern", pattern)
            if p_drop > 0.0:
                pattern = F.dropout(pattern, p_drop, training=True)
            z = pattern @ v  # (batch, head, query, d_head)
            if record is not None:
                record(f"{prefix}.hook_z", z.transpose(1, 2))  # (batch, pos, head, d_head)
        z = z.transpose(1, 2).reshape(batch, n_pos, cfg.d_model)
        return self.out(z)

    def _single_query(
        self,
        x: torch.Tensor,
        query: torch.Tensor,
        allowed: torch.Tensor | None,
        is_causal: bool,
        p_drop: float,
    ) -> torch.Tensor:
        """Attention output at one query position per row (fast path of the last block).

        Keys and values come from every position; the query projection, the attention row and
        the output projection only from ``query``. Same arithmetic as the full path for that row.

        Args:
            x: (batch, pos, d_model).
            query: (batch,) int64 query position of each row.
            allowed, is_causal: as in :meth:`forward` (full query dimension).
            p_drop: attention-weight dropout probability.

        Returns:
            (batch, 1, d_model).
        """
        cfg = self.cfg
        batch, n_pos, d_model = x.shape
        rows = torch.arange(batch, device=x.device)
        x_q = x[rows, query][:, None]  # (batch, 1, d_model)
        weight, bias = self.qkv.weight, self.qkv.bias
        q = F.linear(x_q, weight[:d_model], bias[:d_model])  # (batch, 1, d_model)
        kv = F.linear(x, weight[d_model:], bias[d_model:])  # (batch, pos, 2 * d_model)
        q = q.view(batch, 1, cfg.n_heads, cfg.d_head).transpose(1, 2)  # (batch, head, 1, d_head)
        k, v = kv.view(batch, n_pos, 2, cfg.n_heads, cfg.d_head).permute(2, 0, 3, 1, 4)
        if allowed is not None and allowed.shape[2] != 1:
            allowed = allowed[rows, :, query][:, :, None]  # (batch, 1, 1, key)
        elif allowed is None and is_causal:
            keys = torch.arange(n_pos, device=x.device)
            allowed = (keys[None, :] <= query[:, None])[:, None, None]  # (batch, 1, 1, key)
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p_drop)
        return self.out(z.transpose(1, 2).reshape(batch, 1, d_model))


class MLP(nn.Module):
    """Two-layer position-wise feed-forward network."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.fc_in = nn.Linear(cfg.d_model, cfg.d_mlp)
        self.fc_out = nn.Linear(cfg.d_mlp, cfg.d_model)
        self.act = F.relu if cfg.act_fn == "relu" else F.gelu

    def forward(self, x: torch.Tensor, record: _Recorder | None, prefix: str) -> torch.Tensor:
        """(batch, pos, d_model) -> (batch, pos, d_model)."""
        hidden = self.act(self.fc_in(x))  # (batch, pos, d_mlp)
        if record is not None:
            record(f"{prefix}.hook_post", hidden)
        return self.fc_out(hidden)


class Block(nn.Module):
    """One encoder block: attention then MLP, each with optional residual and LayerNorm."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.attn = Attention(cfg)
        self.mlp = MLP(cfg)
        norm = (lambda: nn.LayerNorm(cfg.d_model)) if cfg.norm != "none" else nn.Identity
        self.ln1 = norm()
        self.ln2 = norm()
        self.drop = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: torch.Tensor,
        allowed: torch.Tensor | None,
        is_causal: bool,
        record: _Recorder | None,
        layer: int,
        hard: str | None,
        query: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(batch, pos, d_model) -> (batch, pos, d_model).

        With ``query`` ((batch,) int64, fast path only) the block returns (batch, 1, d_model): its
        output at that position of each row only. Every position is still a key and value, so this
        is exact when nothing downstream reads the other positions (the last block under the
        ``start`` and ``end`` readouts).
        """
        cfg = self.cfg
        pre = f"blocks.{layer}"
        if record is not None:
            record(f"{pre}.hook_resid_pre", x)
        attn_in = self.ln1(x) if cfg.norm == "pre" else x
        if record is not None and cfg.norm == "pre":
            record(f"{pre}.ln1.hook_normalized", attn_in)
        attn_out = self.drop(
            self.attn(attn_in, allowed, is_causal, record, f"{pre}.attn", hard, query)
        )
        if record is not None:
            record(f"{pre}.hook_attn_out", attn_out)
        if query is not None:
            x = x[torch.arange(x.shape[0], device=x.device), query][:, None]  # (batch, 1, d_model)
        mid = x + attn_out if cfg.residual else attn_out
        if cfg.norm == "post":
            mid = self.ln1(mid)
        if record is not None:
            record(f"{pre}.hook_resid_mid", mid)
        mlp_in = self.ln2(mid) if cfg.norm == "pre" else mid
        if record is not None and cfg.norm == "pre":
            record(f"{pre}.ln2.hook_normalized", mlp_in)
        mlp_out = self.drop(self.mlp(mlp_in, record, f"{pre}.mlp"))
        if record is not None:
            record(f"{pre}.hook_mlp_out", mlp_out)
        post = mid + mlp_out if cfg.residual else mlp_out
        if cfg.norm == "post":
            post = self.ln2(post)
        if record is not None:
            record(f"{pre}.hook_resid_post", post)
        return post


class TransformerClassifier(nn.Module):
    """Encoder-only Transformer that classifies a tokenised string as member / non-member.

    Input tokens are laid out ``[start] s [end] [pad]...`` (right padding, see
    :class:`dyckbook.tokenizer.DyckTokenizer`). The token embedding and the positional encoding are
    added once (the thesis library added the embedding twice when a PE was on). The classifier head
    is ``classifier`` (a linear map d_model -> n_classes) applied to the readout vector.

    Positional encodings:
        - ``none``: nothing is added; with a bidirectional mask the encoder is then
          permutation-equivariant (order-blind).
        - ``absolute``: the thesis' eq. 3.3 (Yao et al.): the scalar i / n, with n the row's own
          token count (non-pad tokens, specials included), enters the residual stream along a
          learned direction ``pos_direction`` (d_model,): PE(i) = (i / n) * pos_direction. This is a
          learned linear map of the scalar -- equivalent, up to a learned rotation, to reserving
          one residual dimension for i / n -- and keeps the token embedding free.
        - ``absolute_ctx``: the same with i / n_ctx, what the thesis library actually computed.
        - ``sinusoidal``: the fixed table of Vaswani et al. (thesis eq. 3.4).
        - ``learned``: an ``nn.Embedding(n_positions, d_model)``.

    Readouts: ``start`` takes position 0 (`[start]`, the thesis' choice; under a causal mask it sees
    only itself, so the output is constant), ``end`` the last real token (`[end]`), ``mean`` the
    average over real tokens. For pre-LN a final LayerNorm ``ln_final`` precedes the readout.

    Attributes:
        single_query_readout: in :meth:`forward` (not :meth:`run_with_cache`), compute the last
            block only at the position the ``start`` / ``end`` readout reads (default True; the
            logits are the same, see ``_run``). Set False to run every position, e.g. to time
            the difference.
    """

    single_query_readout: bool = True

    def __init__(self, config: ModelConfig, generator: torch.Generator | None = None) -> None:
        """Build the model.

        Args:
            config: the architecture.
            generator: if given, all parameters are initialised from it (deterministic, global
                RNG untouched): linear weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in))
                (torch's Linear default), embeddings and ``pos_direction`` N(0, 1), LayerNorm
                weight 1 and bias 0. If None, torch's default initialisers (global RNG) are used.
        """
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
        self.config = config
        # torch's default initialisers draw from the global RNG; with a generator we re-draw
        # every parameter from it, so fork the global state to leave the caller's untouched
        with torch.random.fork_rng(devices=[], enabled=generator is not None):
            self._build(config)
        if generator is not None:
            self.reset_parameters(generator)

    def _build(self, cfg: ModelConfig) -> None:
        """Create the sub-modules (default initialisation)."""
        self.embed = nn.Embedding(cfg.d_vocab, cfg.d_model)
        if cfg.pos_encoding == "learned":
            self.pos_embed = nn.Embedding(cfg.n_positions, cfg.d_model)
        elif cfg.pos_encoding in ("absolute", "absolute_ctx"):
            self.pos_direction = nn.Parameter(torch.randn(cfg.d_model))
        elif cfg.pos_encoding == "sinusoidal":
            # fixed, recomputed on construction: not part of the state dict
            self.register_buffer(
                "pos_table", sinusoidal_encoding(cfg.n_positions, cfg.d_model), persistent=False
            )
        self.embed_drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_final = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        self.classifier = nn.Linear(cfg.d_model, cfg.n_classes)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator) -> None:
        """Re-initialise every parameter from ``generator`` (see ``__init__``)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                bound = 1.0 / math.sqrt(module.in_features)
                module.weight.uniform_(-bound, bound, generator=generator)
                module.bias.uniform_(-bound, bound, generator=generator)
            elif isinstance(module, nn.Embedding):
                module.weight.normal_(0.0, 1.0, generator=generator)
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
        if hasattr(self, "pos_direction"):
            self.pos_direction.normal_(0.0, 1.0, generator=generator)

    # ----------------------------------------------------------------- inputs
    def _check_tokens(self, tokens: torch.Tensor) -> None:
        cfg = self.config
        if not isinstance(tokens, torch.Tensor):
            raise ValueError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
        if tokens.dtype != torch.long:
            raise ValueError(f"tokens must have dtype torch.int64, got {tokens.dtype}")
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be 2-D (batch, pos), got shape {tuple(tokens.shape)}")
        if tokens.shape[1] > cfg.n_positions:
            raise ValueError(
                f"tokens has {tokens.shape[1]} positions (a string of length "
                f"{tokens.shape[1] - 2}), more than n_ctx={cfg.n_ctx} + 2 = {cfg.n_positions}"
            )
        if tokens.shape[1] == 0 or tokens.shape[0] == 0:
            raise ValueError(f"tokens must be non-empty, got shape {tuple(tokens.shape)}")
        low, high = (int(v) for v in torch.aminmax(tokens))  # one pass, one sync
        if low < 0 or high >= cfg.d_vocab:
            bad = low if low < 0 else high
            raise ValueError(f"tokens contains id {bad}, outside [0, d_vocab={cfg.d_vocab})")

    def _positional(self, tokens: torch.Tensor, real: torch.Tensor) -> torch.Tensor | None:
        """Positional encoding (batch or 1, pos, d_model), or None."""
        cfg = self.config
        n_pos = tokens.shape[1]
        if cfg.pos_encoding == "none":
            return None
        if cfg.pos_encoding == "learned":
            return self.pos_embed.weight[:n_pos][None]
        if cfg.pos_encoding == "sinusoidal":
            return self.pos_table[:n_pos][None]
        positions = torch.arange(n_pos, device=tokens.device, dtype=self.pos_direction.dtype)
        if cfg.pos_encoding == "absolute":
            n = real.sum(dim=1, keepdim=True).to(positions.dtype)  # (batch, 1)
            frac = positions[None, :] / n  # (batch, pos)
        else:
            frac = (positions / cfg.n_ctx)[None, :]  # (1, pos)
        return frac[..., None] * self.pos_direction  # (batch or 1, pos, d_model)

    def _attention_mask(
        self, real: torch.Tensor, n_pos: int, has_pad: bool
    ) -> tuple[torch.Tensor | None, bool]:
        """Boolean visibility (batch, 1, query or 1, key), or None plus the causal flag if that suffices."""
        causal = self.config.mask == "causal"
        if not has_pad:
            return None, causal
        allowed = real[:, None, None, :]  # (batch, 1, 1, key)
        if causal:
            future = torch.ones(n_pos, n_pos, dtype=torch.bool, device=real.device).tril()
            allowed = allowed & future  # (batch, 1, query, key)
        # (bidirectional: kept (batch, 1, 1, key) and broadcast, never materialised per query)
        # A query with no visible key (only an all-[pad] row) would give NaN; let it see every key.
        empty = ~allowed.any(dim=-1, keepdim=True)
        return allowed | empty, False

    # ----------------------------------------------------------------- forward
    def _run(self, tokens: torch.Tensor, record: _Recorder | None) -> torch.Tensor:
        self._check_tokens(tokens)
        cfg = self.config
        n_pos = tokens.shape[1]
        real = tokens != PAD  # (batch, pos)
        has_pad = not bool(real.all())
        # hard attention is an evaluation-time rule; training always uses softmax
        hard = cfg.eval_attention if (cfg.eval_attention != "soft" and not self.training) else None

        x = self.embed(tokens)  # (batch, pos, d_model)
        if record is not None:
            record("hook_embed", x)
        pe = self._positional(tokens, real)
        if pe is not None:
            pe = pe.expand(tokens.shape[0], -1, -1)
            if record is not None:
                record("hook_pos_embed", pe)
            x = x + pe
        x = self.embed_drop(x)
        allowed, is_causal = self._attention_mask(real, n_pos, has_pad)
        # Fast path: with the start/end readout only one position of the last block's output is
        # read, so that block attends from that query alone (its keys and values still cover
        # every position). The logits are the same function; the last block's query, output
        # projection, MLP and LayerNorms then cost one position per row instead of all of them.
        query = None
        if record is None and hard is None and cfg.readout != "mean" and self.single_query_readout:
            query = self._readout_positions(real)
        last = len(self.blocks) - 1
        for layer, block in enumerate(self.blocks):
            x = block(x, allowed, is_causal, record, layer, hard, query if layer == last else None)
        x = self.ln_final(x)
        if record is not None and cfg.norm == "pre":
            record("ln_final.hook_normalized", x)
        if query is not None:
            readout = x[:, 0]  # (batch, d_model): the last block returned (batch, 1, d_model)
        else:
            readout = self._readout(x, real)
        if record is not None:
            record("hook_readout", readout)
        logits = self.classifier(readout)
        if record is not None:
            record("hook_logits", logits)
        return logits

    def _readout_positions(self, real: torch.Tensor) -> torch.Tensor:
        """(batch,) int64 position read by the ``start`` / ``end`` readout."""
        if self.config.readout == "start":
            return torch.zeros(real.shape[0], dtype=torch.long, device=real.device)
        return (real.sum(dim=1) - 1).clamp(min=0)  # right padding: the last real token is [end]

    def _readout(self, x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """(batch, pos, d_model) -> (batch, d_model)."""
        readout = self.config.readout
        if readout == "start":
            return x[:, 0]
        if readout == "end":
            last = real.sum(dim=1) - 1  # right padding: the last real token is [end]
            return x[torch.arange(x.shape[0], device=x.device), last.clamp(min=0)]
        weights = real.to(x.dtype)
        return (x * weights[..., None]).sum(dim=1) / weights.sum(dim=1, keepdim=True).clamp(min=1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Classify.

        Args:
            tokens: LongTensor (batch, pos), pos <= n_ctx + 2, right-padded with PAD.

        Returns:
            logits (batch, n_classes). Soft attention uses the fused
            ``scaled_dot_product_attention``; eval-time hard attention uses the explicit path.
        """
        return self._run(tokens, None)

    def run_with_cache(
        self, tokens: torch.Tensor, names: NamesFilter = None, detach: bool = True
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Classify and record activations from the same forward pass (explicit attention math).

        Hook names (TransformerLens style; ``l`` is the layer):
            ``hook_embed``, ``hook_pos_embed`` (batch, pos, d_model; absent without PE),
            ``blocks.{l}.hook_resid_pre`` (batch, pos, d_model),
            ``blocks.{l}.ln1.hook_normalized`` / ``ln2.hook_normalized`` (pre-LN only),
            ``blocks.{l}.attn.hook_q|hook_k|hook_v`` (batch, head, pos, d_head),
            ``blocks.{l}.attn.hook_attn_scores`` (batch, head, query, key; hidden keys = -inf),
            ``blocks.{l}.attn.hook_pattern`` (batch, head, query, key; rows sum to 1),
            ``blocks.{l}.attn.hook_z`` (batch, pos, head, d_head),
            ``blocks.{l}.hook_attn_out``, ``blocks.{l}.hook_resid_mid`` (batch, pos, d_model),
            ``blocks.{l}.mlp.hook_post`` (batch, pos, d_mlp),
            ``blocks.{l}.hook_mlp_out``, ``blocks.{l}.hook_resid_post`` (batch, pos, d_model),
            ``ln_final.hook_normalized`` (pre-LN only), ``hook_readout`` (batch, d_model),
            ``hook_logits`` (batch, n_classes).

        With post-LN, ``hook_resid_mid``/``hook_resid_post`` are taken after the LayerNorm, i.e.
        they are exactly the next sub-block's input.

        Args:
            tokens: LongTensor (batch, pos).
            names: hook names to keep (an iterable, or a predicate); None keeps all.
            detach: detach cached tensors from the autograd graph.

        Returns:
            (logits (batch, n_classes), cache).
        """
        record = _Recorder(names, detach)
        logits = self._run(tokens, record)
        return logits, record.cache

    @property
    def n_params(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


# --------------------------------------------------------------------- persistence
_FORMAT = "dyckbook.model/1"


def save_model(model: TransformerClassifier, path: str | os.PathLike[str]) -> None:
    """Write config + weights to one file (atomically: a temporary file then a rename).

    The file is a torch pickle of plain containers and tensors only, so :func:`load_model` can
    read it with ``weights_only=True`` (no code from the file is executed).
    """
    if not isinstance(model, TransformerClassifier):
        raise ValueError(f"model must be a TransformerClassifier, got {type(model).__name__}")
    from dyckbook import __version__

    payload = {
        "format": _FORMAT,
        "dyckbook_version": __version__,
        "config": model.config.to_dict(),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
    }
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_model(
    path: str | os.PathLike[str], map_location: str | torch.device = "cpu"
) -> TransformerClassifier:
    """Read a file written by :func:`save_model` (``weights_only=True``) and rebuild the model.

    Raises:
        ValueError: the file is not a dyckbook model, or its weights do not fit its config
            (missing / unexpected keys and shape mismatches are named).
    """
    payload = torch.load(os.fspath(path), map_location=map_location, weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ValueError(f"{os.fspath(path)!r} is not a dyckbook model file (format {_FORMAT})")
    config = ModelConfig.from_dict(payload["config"])
    model = TransformerClassifier(config)
    state = payload["state_dict"]
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = [
        f"{k}: file {tuple(state[k].shape)} vs config {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and tuple(state[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or shapes:
        problems = []
        if missing:
            problems.append(f"missing keys {missing}")
        if unexpected:
            problems.append(f"unexpected keys {unexpected}")
        if shapes:
            problems.append("shape mismatches " + "; ".join(shapes))
        raise ValueError(
            f"weights in {os.fspath(path)!r} do not match its config: " + ", ".join(problems)
        )
    model.load_state_dict(state)
    model.eval()
    return model
