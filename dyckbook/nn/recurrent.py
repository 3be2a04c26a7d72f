"""Recurrent references: an LSTM and a stack-augmented RNN that classify strings like the
Transformer classifier, S independent models in one network, trained by the same ``train()``.

Both read the classifier's tokens (``[start] symbols [end] [pad]...``, ``dyckbook.nn.tokenizer``)
left to right and classify from the state after ``[end]``. ``lstm`` is Hochreiter &
Schmidhuber's cell (torch's gate order and equations). ``stack`` is the stack-augmented RNN of
Joulin & Mikolov (2015) as Suzgun et al. (2019) use it on Dyck languages: an Elman cell that
also reads the top of a differentiable stack, and after each symbol a softmax over push / pop /
no-op mixes three candidate stacks (the pushed vector is ``sigmoid(D h)``), so a stack of depth
``n_ctx + 2`` can hold every opener.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dyckbook.data.config import Config
from dyckbook.data.vocab import PAD
from dyckbook.nn import blocks, tokenizer
from dyckbook.nn.model import seed_for

__all__ = ["CELLS", "RecurrentClassifier", "RecurrentConfig"]

CELLS = ("lstm", "stack")


@dataclass(frozen=True)
class RecurrentConfig(Config, tokenizer.TokenShape):
    """Architecture of a :class:`RecurrentClassifier`."""

    k: int = 1  # bracket types; the vocabulary is 3 specials + 2k symbols
    n_ctx: int = 16  # longest string accepted (the stack's depth is n_ctx + 2)
    cell: str = "lstm"  # lstm | stack (an Elman cell with a differentiable stack)
    d_hidden: int = 64  # width of the recurrent state
    d_embed: int = 32  # width of the token embedding
    d_stack: int = 8  # width of a stack element (stack only)

    kind = "recurrent"  # RunConfig tells model configs apart by this

    def __post_init__(self) -> None:
        for name in ("k", "n_ctx", "d_hidden", "d_embed", "d_stack"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"RecurrentConfig.{name} must be a positive int, got {value!r}")
        if self.cell not in CELLS:
            raise ValueError(f"RecurrentConfig.cell must be one of {CELLS}, got {self.cell!r}")


class RecurrentClassifier(blocks.Stacked):
    """Embedding, a recurrent cell over the tokens, a linear head on the state after ``[end]``;
    ``len(seeds)`` independent models along a leading dimension (as ``model.Classifier``)."""

    def __init__(self, config: RecurrentConfig, seeds: Sequence[int] = (0,)) -> None:
        super().__init__()
        if not isinstance(config, RecurrentConfig):
            raise ValueError(f"config must be a RecurrentConfig, got {type(config).__name__}")
        seeds = [int(s) for s in seeds]
        if not seeds:
            raise ValueError("seeds must name at least one model, got an empty sequence")
        self.config, self.seeds, n, c = config, seeds, len(seeds), config
        self.embed = blocks.Embedding(n, c.d_vocab, c.d_embed)
        gates = 4 if c.cell == "lstm" else 1
        self.input = blocks.Linear(n, c.d_embed, gates * c.d_hidden)  # W_x x + b
        self.recur = blocks.Linear(n, c.d_hidden, gates * c.d_hidden)  # W_h h (+ b)
        if c.cell == "stack":
            self.read = blocks.Linear(n, c.d_stack, c.d_hidden)  # the top of the stack
            self.action = blocks.Linear(n, c.d_hidden, 3)  # push, pop, no-op
            self.push = blocks.Linear(n, c.d_hidden, c.d_stack)
        self.classifier = blocks.Linear(n, c.d_hidden, 2)
        blocks.init_models(self, [seed_for(s, "init") for s in seeds])

    def _check(self, tokens: torch.Tensor) -> torch.Tensor:
        c = self.config
        return tokenizer.check_tokens(tokens, self.n_models, c.n_positions, c.d_vocab)

    def states(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """The final state of every row (S, batch, d_hidden) under ``"hidden"``; the stack cell
        also gives the actions taken, ``"actions"`` (S, batch, pos, 3: push, pop, no-op; zero
        on pads) and the final stack, ``"stack"`` (S, batch, depth, d_stack)."""
        c = self.config
        n, batch, n_pos = tokens.shape
        real = (tokens != PAD)[..., None].float()  # a pad leaves every state as it was
        x = self.input(self.embed(tokens))  # (S, batch, pos, gates * d_hidden)
        h = x.new_zeros(n, batch, c.d_hidden)
        cell = x.new_zeros(n, batch, c.d_hidden)
        stack = x.new_zeros(n, batch, c.n_positions, c.d_stack) if c.cell == "stack" else None
        actions = []
        for t in range(n_pos):
            keep = real[:, :, t]
            pre = x[:, :, t] + self.recur(h)
            if c.cell == "lstm":
                i, f, g, o = pre.chunk(4, -1)
                new_cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
                new_h = torch.sigmoid(o) * torch.tanh(new_cell)
                cell = keep * new_cell + (1 - keep) * cell
            else:
                new_h = torch.tanh(pre + self.read(stack[:, :, 0]))
                act = torch.softmax(self.action(new_h), -1) * keep  # pads: all zero
                top = torch.sigmoid(self.push(new_h))[:, :, None]  # (S, batch, 1, d_stack)
                pushed = torch.cat([top, stack[:, :, :-1]], 2)
                popped = torch.cat([stack[:, :, 1:], torch.zeros_like(stack[:, :, :1])], 2)
                stay = act[..., 2:3] + (1 - keep)  # a pad keeps the stack
                stack = (act[..., 0:1, None] * pushed + act[..., 1:2, None] * popped
                         + stay[..., None] * stack)
                actions.append(act)
            h = keep * new_h + (1 - keep) * h
        out = {"hidden": h}
        if stack is not None:
            out["actions"], out["stack"] = torch.stack(actions, 2), stack
        return out

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (S, batch, 2) of tokens (S, batch, pos); a single model also takes (batch,
        pos) and then returns (batch, 2)."""
        squeeze = tokens.dim() == 2
        logits = self.classifier(self.states(self._check(tokens))["hidden"])
        return logits[0] if squeeze else logits
