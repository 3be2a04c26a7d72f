"""Sequence models that complete Dyck prefixes: seed 001's encoder–decoder and a decoder-only one.

Tokens (``vocab``): ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, symbol code c -> 3 + c; the
decoder-only model adds ``<sep>`` = 3 + 2k after the symbols. The encoder reads ``<bos> prefix
<eos>`` (the seed's source), the decoder ``<bos> completion`` and is scored against
``completion <eos>`` (teacher forcing). The decoder-only model reads ``<bos> prefix <sep>
completion`` as one causal sequence; its ``<sep>`` stands where the decoder reads ``<bos>``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dyckbook.data.completion import CompletionSet
from dyckbook.data.config import Config
from dyckbook.data.vocab import BOS, EOS, N_SPECIAL, SEQ_PAD
from dyckbook.nn import dropout, tokenizer
from dyckbook.nn.blocks import (
    ACTIVATIONS,
    NORMS,
    Block,
    Embedding,
    LayerNorm,
    Linear,
    Recorder,
    Stacked,
    evaluating,
    init_models,
)
from dyckbook.nn.model import seed_for
from dyckbook.nn.options import POS_ENCODINGS, POSITIONS
from dyckbook.nn.positions import PositionalEncoding

__all__ = ["ARCHS", "CompletionTask", "DecoderOnly", "EncoderDecoder",
           "Seq2SeqConfig", "SequenceModel", "build_seq2seq", "decodable", "greedy_decode",
           "source_tokens", "target_tokens"]

ARCHS = ("encoder_decoder", "decoder_only")
Hooks = Iterable[str] | Callable[[str], bool] | None


def decodable() -> tuple[str, ...]:
    """The encodings of ``options.POSITIONS`` a decoder (and a decoder-only model) can read:
    not those that are a function of the row's length, unknown while decoding (``absolute``'s
    i/n, ``randomized``'s draw)."""
    return tuple(name for name, p in POSITIONS.items() if p.decodable)


@dataclass(frozen=True)
class Seq2SeqConfig(Config):
    """Architecture of an :class:`EncoderDecoder` or a :class:`DecoderOnly` model."""

    arch: str = "encoder_decoder"  # encoder_decoder (seed 001) | decoder_only (prefix <sep> ...)
    k: int = 3  # bracket types; the vocabulary is 3 specials + 2k symbols (+ <sep>)
    n_ctx: int = 100  # longest prefix; a completion is never longer than its prefix
    n_encoder_layers: int = 2  # encoder blocks (decoder_only: 0)
    n_decoder_layers: int = 2  # decoder blocks (decoder_only: all its blocks)
    d_model: int = 64  # width of the residual stream
    n_heads: int = 4  # attention heads per attention layer
    d_mlp: int = 256  # hidden width of every MLP
    dropout: float = 0.0  # on embeddings, attention weights and sub-block outputs
    norm: str = "post"  # post (the seed: Add & Norm) | pre
    act_fn: str = "relu"  # MLP non-linearity: relu (the seed) | gelu
    pos_encoding: str = "none"  # of the source (decoder_only: of its sequence); none = the seed
    target_pos_encoding: str | None = None  # of the decoder's input; None: as pos_encoding

    kind = "seq2seq"  # RunConfig tells model configs apart by this

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"Seq2SeqConfig.arch must be one of {ARCHS}, got {self.arch!r}")
        for name in ("k", "n_ctx", "n_encoder_layers", "n_decoder_layers", "d_model", "n_heads",
                     "d_mlp"):
            value = getattr(self, name)
            low = int(name != "n_encoder_layers" or self.arch == "encoder_decoder")
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"Seq2SeqConfig.{name} must be an int >= {low}, got {value!r}")
        if self.arch == "decoder_only" and (self.n_encoder_layers or self.target_pos_encoding):
            raise ValueError("Seq2SeqConfig: decoder_only has no encoder and one sequence; set "
                             f"n_encoder_layers=0 and target_pos_encoding=None, got "
                             f"{self.n_encoder_layers} and {self.target_pos_encoding!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"Seq2SeqConfig.d_model ({self.d_model}) must be divisible by "
                             f"n_heads ({self.n_heads})")
        if isinstance(self.dropout, bool) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"Seq2SeqConfig.dropout must be in [0, 1), got {self.dropout!r}")
        for name, allowed in (("norm", NORMS), ("act_fn", ACTIVATIONS),
                              ("pos_encoding", POS_ENCODINGS),
                              ("target_pos_encoding", (None, *POS_ENCODINGS))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"Seq2SeqConfig.{name} must be one of {allowed}, "
                                 f"got {getattr(self, name)!r}")
        if self.decoder_pe == "randomized":
            raise ValueError("Seq2SeqConfig: the decoder cannot read 'randomized' positions: "
                             "they are drawn from a row's length, unknown while decoding; set "
                             "target_pos_encoding (decoder_only: pos_encoding) to another")
        if self.decoder_pe == "absolute":
            raise ValueError("Seq2SeqConfig: the decoder cannot read 'absolute' (i/n): n is "
                             "unknown while decoding; set target_pos_encoding to another")

    @property
    def decoder_pe(self) -> str:
        """The positional encoding the decoder (or decoder-only sequence) reads."""
        return self.target_pos_encoding or self.pos_encoding

    @property
    def sep(self) -> int:
        """The decoder-only model's ``<sep>`` token (first id after the symbols)."""
        return N_SPECIAL + 2 * self.k

    @property
    def d_vocab(self) -> int:
        return self.sep + (self.arch == "decoder_only")


def _tokens(codes: np.ndarray, lengths: np.ndarray, width: int, first: int | None,
            last: int | None) -> torch.Tensor:
    """int64 (batch, width + specials): ``first``, the symbols (code + 3), ``last``, pads."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and lengths.max() > width:
        raise ValueError(f"width must be >= the longest string ({lengths.max()}), got {width}")
    head = int(first is not None)
    out = np.full((lengths.size, width + head + int(last is not None)), SEQ_PAD, np.int64)
    if first is not None:
        out[:, 0] = first
    inside = np.arange(codes.shape[1]) < lengths[:, None]
    out[:, head:head + codes.shape[1]][inside] = codes[inside].astype(np.int64) + N_SPECIAL
    if last is not None:
        out[np.arange(lengths.size), lengths + head] = last
    return torch.from_numpy(out)


def source_tokens(codes: np.ndarray, lengths: np.ndarray, width: int) -> torch.Tensor:
    """Encoder input ``<bos> prefix <eos> <pad>...``: int64 (batch, width + 2)."""
    return _tokens(codes, lengths, width, BOS, EOS)


def target_tokens(codes: np.ndarray, lengths: np.ndarray,
                  width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder input ``<bos> completion`` and labels ``completion <eos>``: (batch, width + 1)."""
    return _tokens(codes, lengths, width, BOS, None), _tokens(codes, lengths, width, None, EOS)


class SequenceModel(Stacked):
    """What both architectures share: S models, embeddings + positions, the head, the checks."""

    def __init__(self, config: Seq2SeqConfig, seeds: Sequence[int], arch: str) -> None:
        super().__init__()
        if not isinstance(config, Seq2SeqConfig) or config.arch != arch:
            raise ValueError(f"config must be a Seq2SeqConfig with arch={arch!r}, got {config!r}")
        self.config, self.seeds = config, [int(s) for s in seeds]
        if not self.seeds:
            raise ValueError("seeds must name at least one model, got an empty sequence")
        self.streams = [torch.Generator().manual_seed(seed_for(s, "dropout")) for s in self.seeds]

    def _blocks(self, n_layers: int, cross: bool, pos: PositionalEncoding) -> nn.ModuleList:
        c = self.config
        return nn.ModuleList(Block(self.n_models, c.d_model, c.n_heads, c.d_mlp, c.dropout, c.norm,
                                   c.act_fn, self.streams, cross, relative=pos.relative)
                             for _ in range(n_layers))

    def _head(self) -> None:
        """The final LayerNorm (pre-LN only) and unembedding, then every initialisation."""
        c = self.config
        self.ln_final = LayerNorm(self.n_models, c.d_model) if c.norm == "pre" else None
        self.unembed = Linear(self.n_models, c.d_model, c.d_vocab)
        init_models(self, [seed_for(s, "init") for s in self.seeds])

    def _embed(self, embed: Embedding, pos: PositionalEncoding, tokens: torch.Tensor,
               record: Recorder | None, prefix: str,
               positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token embedding plus the encoding of ``positions`` (S, batch, pos) (default 0, 1..)."""
        x = embed(tokens)  # (S, batch, pos, d_model)
        if record is not None:
            record(f"{prefix}hook_embed", x)
        n_pos = tokens.shape[2] if positions is None else int(positions.max()) + 1
        pe = pos(n_pos, (tokens != SEQ_PAD).sum(-1))
        if pe is not None:
            pe = pe.expand(*x.shape[:2], n_pos, x.shape[-1])
            if positions is not None:
                pe = pe.gather(2, positions[..., None].expand(*positions.shape, x.shape[-1]))
            if record is not None:
                record(f"{prefix}hook_pos_embed", pe)
            x = x + pe
        return dropout.apply(x, self.config.dropout, self.streams, self.training)

    def _logits(self, x: torch.Tensor, record: Recorder | None) -> torch.Tensor:
        if self.ln_final is not None:
            x = self.ln_final(x)
        logits = self.unembed(x)  # (S, batch, pos, d_vocab)
        if record is not None:
            record("hook_logits", logits)
        return logits

    def _inputs(self, **tokens: torch.Tensor) -> list[torch.Tensor]:
        """Each of ``source`` / ``target`` as int64 (S, batch, pos) of vocabulary ids (one model
        may omit S), checked, with one (S, batch) for all."""
        out = []
        for name, x in tokens.items():
            if not isinstance(x, torch.Tensor) or x.dtype != torch.long:
                raise ValueError(f"{name} must be an int64 torch.Tensor, got {x!r:.60}")
            x = x[None] if x.dim() == 2 and self.n_models == 1 else x
            if x.dim() != 3 or x.shape[0] != self.n_models or 0 in x.shape:
                raise ValueError(f"{name} must be (models={self.n_models}, batch, pos), "
                                 f"got shape {tuple(x.shape)}")
            limit = self.config.n_ctx + (2 if name == "source" else 1)
            if x.shape[2] > limit:
                raise ValueError(f"{name} has {x.shape[2]} positions, more than {limit}")
            tokenizer.check_ids(x, self.config.d_vocab, name)
            out.append(x)
        if len({x.shape[:2] for x in out}) > 1:
            raise ValueError(f"source and target must share (models, batch), got "
                             f"{[tuple(x.shape) for x in out]}")
        return out

    def forward(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (S, batch, pos, d_vocab) of ``source`` (S, batch, src_pos)
        ``<bos> prefix <eos>`` and ``target`` (S, batch, pos) ``<bos> completion``: position i
        predicts token i of ``completion <eos>``. One model also takes (and gives) no S."""
        squeeze = source.dim() == 2
        logits = self._run(*self._inputs(source=source, target=target), None)
        return logits[0] if squeeze else logits

    def run_with_cache(self, source: torch.Tensor, target: torch.Tensor, names: Hooks = None
                       ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Logits (batch, pos, d_vocab) and the activations of the same pass (one model).

        TransformerLens names: ``hook_embed``, ``hook_pos_embed``, ``blocks.{l}.attn.hook_q|k|v|z|
        attn_scores|pattern`` (pattern: batch, head, query, key), ``blocks.{l}.hook_resid_pre|
        mid|post``, ``blocks.{l}.hook_attn_out|mlp_out``, ``blocks.{l}.mlp.hook_post``,
        ``hook_logits``; the encoder–decoder adds ``encoder.``-prefixed names for its encoder and
        ``blocks.{l}.cross_attn.hook_pattern`` (batch, head, target pos, source pos).
        """
        if self.n_models != 1:
            raise ValueError(f"run_with_cache needs a single model, this network holds "
                             f"{self.n_models}; use split()")
        record = Recorder(names)
        return self._run(*self._inputs(source=source, target=target), record)[0], record.cache


class EncoderDecoder(SequenceModel):
    """Seed 001: an encoder stack whose output (the memory) is computed once, a decoder stack
    (masked self-attention, cross-attention to the memory, MLP; each followed by Add & Norm),
    and a linear map to the vocabulary. ``config.pos_encoding="none"`` is the seed's."""

    def __init__(self, config: Seq2SeqConfig, seeds: Sequence[int] = (0,)) -> None:
        super().__init__(config, seeds, "encoder_decoder")
        c, n = config, self.n_models
        self.embed_source = Embedding(n, c.d_vocab, c.d_model)
        self.pos_source = PositionalEncoding(c.pos_encoding, n, c.n_ctx + 2, c.d_model, c.n_ctx,
                                             self.streams)
        self.encoder = self._blocks(c.n_encoder_layers, False, self.pos_source)
        self.ln_memory = LayerNorm(n, c.d_model) if c.norm == "pre" else None
        self.embed_target = Embedding(n, c.d_vocab, c.d_model)
        self.pos_target = PositionalEncoding(c.decoder_pe, n, c.n_ctx + 1, c.d_model, c.n_ctx)
        self.blocks = self._blocks(c.n_decoder_layers, True, self.pos_target)
        self._head()

    def encode(self, source: torch.Tensor, record: Recorder | None = None):
        """The memory (S, batch, src_pos, d_model) and the source pad mask (None: no pads)."""
        real = source != SEQ_PAD
        x = self._embed(self.embed_source, self.pos_source, source, record, "encoder.")
        mask = (None if source.device.type == "cpu" and bool(real.all())  # a device: no sync
                else real.flatten(0, 1)[:, None, None, :])
        for layer, block in enumerate(self.encoder):
            x = block(x, mask, record=record, prefix=f"encoder.{layer}")
        return (x if self.ln_memory is None else self.ln_memory(x)), mask

    def _decode(self, target: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None,
                record: Recorder | None, caches: list | None = None,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        x = self._embed(self.embed_target, self.pos_target, target, record, "", positions)
        for layer, block in enumerate(self.blocks):
            x = block(x, None, True, memory=memory, memory_mask=mask, record=record,
                      cache=None if caches is None else caches[layer], prefix=f"blocks.{layer}",
                      positions=positions)
        return self._logits(x, record)

    def _run(self, source, target, record):
        return self._decode(target, *self.encode(source, record), record)

    def _begin(self, source: torch.Tensor, cached: bool) -> dict:
        memory, mask = self.encode(source)
        return {"memory": memory, "mask": mask,
                "caches": [{"self": {}, "cross": {}} for _ in self.blocks] if cached else None}

    def _next(self, state: dict, target: torch.Tensor) -> torch.Tensor:
        """Logits (S, batch, d_vocab) after ``target`` (S, batch, t + 1); cached: only the last
        token is computed, at position t."""
        if state["caches"] is None:
            return self._decode(target, state["memory"], state["mask"], None)[:, :, -1]
        last = target[..., -1:]
        logits = self._decode(last, state["memory"], state["mask"], None, state["caches"],
                              torch.full_like(last, target.shape[2] - 1))
        return logits[:, :, -1]


class DecoderOnly(SequenceModel):
    """A causal Transformer over ``<bos> prefix <sep> completion``: what a reader would try
    instead of the encoder–decoder, trained on the same pairs."""

    def __init__(self, config: Seq2SeqConfig, seeds: Sequence[int] = (0,)) -> None:
        super().__init__(config, seeds, "decoder_only")
        c, n = config, self.n_models
        self.embed = Embedding(n, c.d_vocab, c.d_model)
        self.pos = PositionalEncoding(c.pos_encoding, n, 2 * c.n_ctx + 2, c.d_model, c.n_ctx)
        self.blocks = self._blocks(c.n_decoder_layers, False, self.pos)
        self._head()

    def _stack(self, tokens, record, caches=None, positions=None, mask=None) -> torch.Tensor:
        x = self._embed(self.embed, self.pos, tokens, record, "", positions)
        for layer, block in enumerate(self.blocks):
            x = block(x, mask, True, record=record, prefix=f"blocks.{layer}",
                      cache=None if caches is None else caches[layer], positions=positions)
        return self._logits(x, record)

    def _run(self, source, target, record):
        """Pack each row as ``<bos> prefix <sep> completion`` (right-padded); read the logits
        from ``<sep>`` on."""
        n = (source != SEQ_PAD).sum(-1) - 2  # (S, batch) prefix lengths
        seq = F.pad(torch.where(source == EOS, self.config.sep, source),
                    (0, target.shape[2] - 1), value=SEQ_PAD)
        steps = torch.arange(target.shape[2], device=source.device)
        seq = seq.scatter(2, (n + 2)[..., None] + steps[:-1], target[..., 1:])
        logits = self._stack(seq, record)
        read = ((n + 1)[..., None] + steps)[..., None].expand(-1, -1, -1, logits.shape[-1])
        return logits.gather(2, read)

    def _begin(self, source: torch.Tensor, cached: bool) -> dict:
        if not cached:
            return {"source": source, "caches": None}
        prompt = torch.where(source == EOS, SEQ_PAD, source)[..., :-1]  # <bos> prefix
        caches = [{"self": {}} for _ in self.blocks]
        self._stack(prompt, None, caches)
        return {"caches": caches, "keys": prompt != SEQ_PAD,
                "next": (prompt != SEQ_PAD).sum(-1, keepdim=True)}

    def _next(self, state: dict, target: torch.Tensor) -> torch.Tensor:
        """As :meth:`EncoderDecoder._next`; the cache holds the prompt's columns (pads masked)."""
        if state["caches"] is None:
            return self._run(state["source"], target, None)[:, :, -1]
        last = target[..., -1:] if target.shape[2] > 1 else torch.full_like(target,
                                                                             self.config.sep)
        state["keys"] = torch.cat([state["keys"], torch.ones_like(last, dtype=torch.bool)], -1)
        logits = self._stack(last, None, state["caches"], state["next"],
                             state["keys"].flatten(0, 1)[:, None, None, :])
        state["next"] = state["next"] + 1
        return logits[:, :, -1]


def build_seq2seq(config: Seq2SeqConfig, seeds: Sequence[int] = (0,)) -> SequenceModel:
    """The network of ``config.arch``, one model per seed."""
    if not isinstance(config, Seq2SeqConfig):
        raise ValueError(f"config must be a Seq2SeqConfig, got {type(config).__name__}")
    return (EncoderDecoder if config.arch == "encoder_decoder" else DecoderOnly)(config, seeds)


def greedy_decode(model: SequenceModel, source: torch.Tensor, max_new_tokens: int,
                  use_cache: bool = True) -> torch.Tensor:
    """Batched greedy decoding: from ``<bos>``, append the most probable token until ``<eos>``.

    With ``use_cache`` each step computes only the new position (earlier keys and values are
    kept); without, it recomputes the decoder over the whole output so far (the encoder's memory
    is computed once either way, as in the seed). Both give the same tokens. ``source`` is
    (S, batch, src_pos), or (batch, src_pos) for one model; eval mode is used.

    Returns:
        int64 (S, batch, steps) or (batch, steps): each row's tokens up to its ``<eos>``, then
        ``<pad>``; steps <= max_new_tokens (the loop ends when every row is done).
    """
    squeeze = source.dim() == 2
    (source,) = model._inputs(source=source)
    if (isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
            or not 1 <= max_new_tokens <= model.config.n_ctx + 1):
        raise ValueError(f"max_new_tokens must be an int in 1..n_ctx + 1 = "
                         f"{model.config.n_ctx + 1}, got {max_new_tokens!r}")
    with evaluating(model):
        state = model._begin(source, use_cache)
        target = torch.full((*source.shape[:2], 1), BOS, dtype=torch.long, device=source.device)
        done = torch.zeros(source.shape[:2], dtype=torch.bool, device=source.device)
        for _ in range(max_new_tokens):
            token = model._next(state, target).argmax(-1).masked_fill(done, SEQ_PAD)  # (S, batch)
            target = torch.cat([target, token[..., None]], -1)
            done |= token == EOS
            if bool(done.all()):
                break
    return target[0, :, 1:] if squeeze else target[..., 1:]


class CompletionTask:
    """How :func:`~dyckbook.experiment.train.train` feeds a sequence model: prefixes in,
    completions out."""

    def tensors(self, data: CompletionSet, width: int) -> dict[str, torch.Tensor]:
        """``source`` (batch, width + 2), ``target`` and ``labels`` (batch, width + 1)."""
        codes, lengths = data.targets()
        target, labels = target_tokens(codes, lengths, width)
        return {"source": source_tokens(data.codes, data.lengths, width), "target": target,
                "labels": labels, "lengths": torch.from_numpy(data.lengths),
                "target_lengths": torch.from_numpy(lengths)}

    def batch(self, data: dict[str, torch.Tensor], rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The ``rows`` (S, batch) of ``data`` (every model's :meth:`tensors`, concatenated):
        (S, batch, pos), pos fitting the longest selected row."""
        src = int(data["lengths"][rows].max()) + 2
        tgt = int(data["target_lengths"][rows].max()) + 1
        return {"source": data["source"][rows, :src], "target": data["target"][rows, :tgt],
                "labels": data["labels"][rows, :tgt]}

    def loss(self, model: SequenceModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(S,) mean cross-entropy per target token of every model on its own rows."""
        logits = model(batch["source"], batch["target"])  # (S, batch, pos, d_vocab)
        labels = batch["labels"]
        ce = F.cross_entropy(logits.flatten(0, 2), labels.flatten(), ignore_index=SEQ_PAD,
                             reduction="none").view(labels.shape)
        return ce.sum((1, 2)) / (labels != SEQ_PAD).sum((1, 2))

    def correct(self, model: SequenceModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(S, batch) bool: every position right under teacher forcing, which holds iff greedy
        decoding reproduces the completion and its ``<eos>`` exactly."""
        labels = batch["labels"]
        right = model(batch["source"], batch["target"]).argmax(-1) == labels
        return (right | (labels == SEQ_PAD)).all(-1)
