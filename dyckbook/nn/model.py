"""The encoder-only Transformer classifier, with S independent models in one network."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dyckbook.data.config import Config
from dyckbook.data.dataset import Dataset
from dyckbook.data.vocab import PAD, PAD_CODE
from dyckbook.nn import blocks, dropout, options, positions, tokenizer
from dyckbook.nn.options import MASKS, READOUTS

__all__ = ["MASKS", "OBJECTIVES", "READOUTS", "ClassificationTask", "Classifier", "ModelConfig",
           "seed_for"]

#: membership alone, or with an auxiliary loss at every position of a causal model (FLaRe,
#: Butoi et al. 2024): ``next_symbols``, which symbols (and the end) may follow the prefix
#: (multi-label); ``language_model``, the next symbol of the members
OBJECTIVES = ("membership", "next_symbols", "language_model")


def seed_for(seed: int, purpose: str) -> int:
    """A 63-bit seed for one use (``"init"``, ``"dropout"``, ``"order"``, ...) of a run seed."""
    tag = int.from_bytes(purpose.encode()[:8].ljust(8, b"\0"), "little")
    return int(np.random.SeedSequence([int(seed), tag]).generate_state(2, np.uint64)[0] >> 1)


@dataclass(frozen=True)
class ModelConfig(Config, tokenizer.TokenShape):
    """Architecture of a :class:`Classifier`. Defaults: the thesis' experiment-1 shape."""

    k: int = 1  # bracket types; the vocabulary is 3 specials + 2k symbols
    n_ctx: int = 16  # longest string accepted; the model sees n_ctx + 2 positions
    d_model: int = 256  # width of the residual stream
    n_heads: int = 1  # attention heads per layer (d_model divisible by it)
    d_mlp: int = 512  # hidden width of the MLP (the thesis' d_ff)
    n_layers: int = 2  # encoder blocks
    dropout: float = 0.1  # on embeddings, attention weights and sub-block outputs
    mask: str = "bidirectional"  # one of options.MASK_DECLARATION
    pos_encoding: str = "none"  # one of options.POSITIONS
    readout: str = "start"  # one of options.READOUT_DECLARATION
    norm: str = "post"  # post (the thesis, torch's default) | pre
    act_fn: str = "relu"  # MLP non-linearity: relu | gelu
    objective: str = "membership"  # membership | next_symbols | language_model (OBJECTIVES)
    attention: str = "softmax"  # softmax | sigmoid: how a query weighs its keys (blocks)

    kind = "classifier"  # RunConfig tells model configs apart by this
    # added after the grid's records: out of to_dict at their defaults (digests unchanged)
    LATER_FIELDS = ("objective", "attention")

    def __post_init__(self) -> None:
        for name in ("k", "n_ctx", "d_model", "n_heads", "d_mlp", "n_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"ModelConfig.d_model ({self.d_model}) must be divisible by "
                             f"n_heads ({self.n_heads})")
        if (isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float))
                or not 0.0 <= self.dropout < 1.0):
            raise ValueError(f"ModelConfig.dropout must be in [0, 1), got {self.dropout!r}")
        for name, allowed in (("mask", MASKS), ("pos_encoding", options.POS_ENCODINGS),
                              ("readout", READOUTS), ("norm", blocks.NORMS),
                              ("act_fn", blocks.ACTIVATIONS), ("objective", OBJECTIVES),
                              ("attention", blocks.ATTENTION_WEIGHTS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"ModelConfig.{name} must be one of {allowed}, "
                                 f"got {getattr(self, name)!r}")
        if self.objective != "membership" and self.mask != "causal":
            raise ValueError(f"ModelConfig.objective {self.objective!r} predicts from each "
                             f"prefix: it needs mask='causal', got {self.mask!r}")


class Classifier(blocks.Stacked):
    """Embedding, positional encoding, ``n_layers`` blocks, a readout and a linear head.

    One network holds ``len(seeds)`` independent models (see ``dyckbook.nn.blocks``). Readouts:
    ``start`` reads position 0 (``[start]``; under a causal mask it sees only itself, so the
    output is the same for every input), ``end`` the ``[end]`` token, ``mean`` the average over
    real tokens.
    """

    def __init__(self, config: ModelConfig, seeds: Sequence[int] = (0,)) -> None:
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
        seeds = [int(s) for s in seeds]
        if not seeds:
            raise ValueError("seeds must name at least one model, got an empty sequence")
        self.config, self.seeds, n = config, seeds, len(seeds)
        self.streams = [torch.Generator().manual_seed(seed_for(s, "dropout")) for s in seeds]
        c = config
        self.embed = blocks.Embedding(n, c.d_vocab, c.d_model)
        self.pos = positions.PositionalEncoding(c.pos_encoding, n, c.n_positions, c.d_model,
                                             c.n_ctx, self.streams)
        self.blocks = nn.ModuleList(
            blocks.Block(n, c.d_model, c.n_heads, c.d_mlp, c.dropout, c.norm, c.act_fn,
                         self.streams, n_positions=c.n_positions, relative=self.pos.relative,
                         weights=c.attention)
            for _ in range(c.n_layers))
        self.ln_final = blocks.LayerNorm(n, c.d_model) if c.norm == "pre" else None
        self.classifier = blocks.Linear(n, c.d_model, 2)
        # the auxiliary objective's head: symbols and the end, at every position
        self.aux = (blocks.Linear(n, c.d_model, 2 * c.k + 1) if c.objective != "membership"
                    else None)
        blocks.init_models(self, [seed_for(s, "init") for s in seeds])

    def _check(self, tokens: torch.Tensor) -> torch.Tensor:
        c = self.config
        return tokenizer.check_tokens(tokens, self.n_models, c.n_positions, c.d_vocab)

    def _run(self, tokens: torch.Tensor, record: blocks.Recorder | None,
             aux: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        real = tokens != PAD  # (S, batch, pos)
        n_tokens = real.sum(-1)  # (S, batch)
        x = self.embed(tokens)  # (S, batch, pos, d_model)
        if record is not None:
            record("hook_embed", x)
        pe = self.pos(tokens.shape[2], n_tokens)
        if pe is not None:
            if record is not None:  # patchable: chapters.references_objectives moves positions
                pe = record("hook_pos_embed", pe.expand_as(x))
            x = x + pe
        x = dropout.apply(x, c.dropout, self.streams, self.training,
                           (x.shape[1], c.n_positions, c.d_model))
        causal = c.mask == "causal"  # right padding: a causal query never sees a pad
        mask = None  # on a device always given: asking whether a row has pads would sync
        if not causal and (tokens.device.type != "cpu" or not bool(real.all())):
            mask = real.flatten(0, 1)[:, None, None, :]  # (S * batch, 1, 1, key)
        # The last block is needed at the readout position only (start / end readouts, and no
        # dropout mask to keep in step): computing it there alone gives the same logits.
        single = (record is None and c.readout != "mean" and not aux
                  and not (self.training and c.dropout > 0))
        at = (n_tokens - 1).clamp(min=0) if c.readout == "end" else torch.zeros_like(n_tokens)
        last = len(self.blocks) - 1
        for layer, block in enumerate(self.blocks):
            x = block(x, mask, causal, record=record, prefix=f"blocks.{layer}",
                      query=at if single and layer == last else None)
        if self.ln_final is not None:
            x = self.ln_final(x)
        if single or c.readout == "start":
            out = x[:, :, 0]
        elif c.readout == "end":
            index = at[..., None, None].expand(-1, -1, 1, x.shape[-1])
            out = x.gather(2, index)[:, :, 0]
        else:
            w = real.to(x.dtype)[..., None]
            out = (x * w).sum(2) / w.sum(2).clamp(min=1.0)
        if record is not None:
            record("hook_readout", out)
        logits = self.classifier(out)  # (S, batch, 2)
        if record is not None:
            record("hook_logits", logits)
        if aux:
            return logits, self.aux(x)  # (S, batch, pos, 2k + 1)
        return logits

    def with_auxiliary(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (S, batch, 2) and the auxiliary head's (S, batch, pos, 2k + 1) at every
        position (a model trained with an auxiliary ``objective``)."""
        if self.aux is None:
            raise ValueError("with_auxiliary needs a model with an auxiliary objective, this one "
                             "has objective='membership'")
        return self._run(self._check(tokens), None, aux=True)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (S, batch, 2) of tokens (S, batch, pos); a single model also takes (batch,
        pos) and then returns (batch, 2)."""
        squeeze = tokens.dim() == 2
        logits = self._run(self._check(tokens), None)
        return logits[0] if squeeze else logits

    def run_with_cache(self, tokens: torch.Tensor,
                       names: Iterable[str] | Callable[[str], bool] | blocks.Recorder | None
                       = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Logits (batch, 2) and the activations of the same forward pass (single model only);
        ``names`` may be a :class:`~dyckbook.nn.blocks.Recorder` itself (one that patches
        activations: ``dyckbook.interp.patching``).

        Hook names follow TransformerLens: ``hook_embed``, ``hook_pos_embed``,
        ``blocks.{l}.hook_resid_pre|mid|post``, ``blocks.{l}.attn.hook_q|k|v|z`` (batch, pos,
        head, d_head), ``blocks.{l}.attn.hook_attn_scores|hook_pattern`` (batch, head, query,
        key; pattern rows sum to 1), ``blocks.{l}.hook_attn_out|hook_mlp_out``,
        ``blocks.{l}.mlp.hook_post`` (batch, pos, d_mlp), ``hook_readout``, ``hook_logits``.
        """
        if self.n_models != 1:
            raise ValueError(f"run_with_cache needs a single model, this network holds "
                             f"{self.n_models}; use split()")
        record = names if isinstance(names, blocks.Recorder) else blocks.Recorder(names)
        return self._run(self._check(tokens), record)[0], record.cache


class ClassificationTask:
    """How :func:`~dyckbook.experiment.train.train` feeds a classifier: tokens in, member /
    non-member out; with an auxiliary ``objective`` (``OBJECTIVES``) also its per-position
    targets."""

    def __init__(self, objective: str = "membership") -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        self.objective = objective

    def tensors(self, dataset: Dataset, width: int) -> dict[str, torch.Tensor]:
        """``tokens`` (batch, width + 2) and ``labels`` (batch,) of a dataset; with an auxiliary
        objective ``aux`` (batch, width + 2, 2k + 1) float targets and ``aux_mask`` (batch,
        width + 2): at token position i (i symbols read), the symbols that may follow
        (``next_symbols``) or the one that does in a member (``language_model``, one-hot)."""
        out = {"tokens": tokenizer.encode(dataset.codes, dataset.lengths, width),
               "labels": torch.from_numpy(dataset.labels.astype(np.int64)),
               "lengths": torch.from_numpy(dataset.lengths)}
        if self.objective == "membership":
            return out
        allowed = dataset.language.next_symbols(dataset.codes, dataset.lengths)
        n, k2 = len(dataset), allowed.shape[2]
        target = np.zeros((n, width + 2, k2), dtype=np.float32)
        target[:, :allowed.shape[1]] = allowed[:, :width + 2]
        mask = target.any(-1)
        if self.objective == "language_model":  # the next symbol of each member, then the end
            target[:] = 0.0
            positions = np.arange(width + 2)
            lengths = dataset.lengths
            inside = positions[None, :] < lengths[:, None]
            codes = np.zeros((n, width + 2), dtype=np.int64)
            m = min(dataset.codes.shape[1], width + 2)
            codes[:, :m] = np.where(dataset.codes[:, :m] == PAD_CODE, 0, dataset.codes[:, :m])
            nxt = np.where(inside, codes, k2 - 1)  # at i: symbol i + 1, or the end at i = n
            rows, cols = np.nonzero(positions[None, :] <= lengths[:, None])
            target[rows, cols, nxt[rows, cols]] = 1.0
            mask = (positions[None, :] <= lengths[:, None]) & (dataset.labels[:, None] == 1)
        out["aux"], out["aux_mask"] = torch.from_numpy(target), torch.from_numpy(mask)
        return out

    def batch(self, data: dict[str, torch.Tensor], rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The ``rows`` (S, batch) of ``data`` (every model's :meth:`tensors`, concatenated):
        tokens (S, batch, pos), labels (S, batch); pos fits the longest selected string."""
        pos = int(data["lengths"][rows].max()) + 2
        out = {"tokens": data["tokens"][rows, :pos], "labels": data["labels"][rows]}
        if "aux" in data:
            out["aux"], out["aux_mask"] = data["aux"][rows, :pos], data["aux_mask"][rows, :pos]
        return out

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(S,) mean cross-entropy of every model on its own rows, plus the auxiliary loss (mean
        over the positions that have targets) with an auxiliary objective."""
        if "aux" not in batch:
            logits = model(batch["tokens"])  # (S, batch, 2)
        else:
            logits, aux = model.with_auxiliary(batch["tokens"])
        ce = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), reduction="none")
        loss = ce.view(batch["labels"].shape).mean(1)
        if "aux" in batch:
            mask = batch["aux_mask"].to(aux.dtype)
            if self.objective == "next_symbols":
                per = F.binary_cross_entropy_with_logits(aux, batch["aux"], reduction="none")
                per = per.mean(-1)
            else:
                per = -(torch.log_softmax(aux, -1) * batch["aux"]).sum(-1)
            loss = loss + (per * mask).sum((1, 2)) / mask.sum((1, 2)).clamp(min=1.0)
        return loss

    def correct(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(S, batch) bool: which rows each model classifies correctly."""
        return model(batch["tokens"]).argmax(-1) == batch["labels"]
