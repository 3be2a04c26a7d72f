"""The options a model config names, each declared once with what belongs to it: positional
encodings, attention masks, readouts.

Torch-free, so that the grid, the recipe keys, the command line and the docs' tables read them
without loading torch; ``nn.positions`` and ``nn.blocks`` implement them. A new encoding is one
entry in :data:`POSITIONS` and its branch in ``positions.PositionalEncoding``; the views
(:data:`POS_ENCODINGS`, ...) read the declaration anew each time.
"""

from __future__ import annotations

from dataclasses import dataclass

from dyckbook.data.config import Declared

__all__ = ["EXTENDING", "LENGTH_ENCODINGS", "MASKS", "MASK_DECLARATION", "POSITIONS",
           "POS_ENCODINGS", "READOUTS", "READOUT_DECLARATION", "RELATIVE", "Position"]


@dataclass(frozen=True)
class Position:
    """One positional encoding and what belongs to it."""

    name: str  # the ``pos_encoding`` of a model config
    description: str  # one line: what it adds (the docs' table)
    #: a string longer than every training string gets positions the model has learned to
    #: read: relative distances, positions drawn from the whole range in training, or none
    extends: bool
    relative: bool = False  # applied inside self-attention, not added to the embeddings
    for_length: bool = False  # made for length generalisation: the length study's, not the
    #                           reduced grid's
    decodable: bool = True  # a decoder (and a decoder-only model) can read it


POSITIONS: dict[str, Position] = {p.name: p for p in (
    Position("none", "nothing: attention alone is blind to order; under a causal mask a model "
             "can still count (NoPE, Kazemnejad et al.)", extends=True),
    Position("absolute", "(i / n)·u: the token's fraction of the string times a learned "
             "direction (Yao et al.)", extends=True, decodable=False),
    Position("absolute_ctx", "(i / n_ctx)·u: the thesis' constant denominator; fractions past "
             "the training lengths are never seen", extends=False),
    Position("sinusoidal", "Vaswani et al.'s fixed table; rows past the training lengths are "
             "never seen", extends=False),
    Position("learned", "a trained table of n_ctx + 2 rows; rows past the training lengths are "
             "never trained", extends=False),
    Position("rope", "queries and keys rotated by their positions, so a score depends on the "
             "distance alone (Su et al.)", extends=True, relative=True, for_length=True),
    Position("alibi", "−m_h·|i − j| added to the scores, head slopes m_h = 2^(−8h/H) "
             "(Press et al.)", extends=True, relative=True, for_length=True),
    Position("randomized", "the sinusoidal table read at a sorted random subset of all "
             "positions, so a short string sees the positions of long ones (Ruoss et al.)",
             extends=True, for_length=True, decodable=False),
)}
#: every encoding's name: the one list the grid, the length study, the completion chapter and
#: the models read
POS_ENCODINGS = Declared(POSITIONS)
#: encodings made for length generalisation: the reduced grid leaves them to the length study
LENGTH_ENCODINGS = Declared(POSITIONS, lambda p: p.for_length)
#: encodings that act inside self-attention on the distance between query and key, not on the
#: embeddings (cross-attention ignores them: source and target positions do not compare)
RELATIVE = Declared(POSITIONS, lambda p: p.relative)
#: encodings with which a model can be read beyond its training lengths
EXTENDING = Declared(POSITIONS, lambda p: p.extends)


#: the attention masks, each with what a query sees (``MASKS``: their names)
MASK_DECLARATION = {
    "bidirectional": "every real token of the string (pads hidden)",
    "causal": "the tokens up to itself: the last token alone sees the whole string",
}
MASKS = Declared(MASK_DECLARATION)
#: where a classifier reads its decision (``READOUTS``: their names)
READOUT_DECLARATION = {
    "start": "the [start] token, the thesis' readout (under a causal mask it sees nothing else)",
    "end": "the [end] token (under a causal mask the one token that sees the whole string)",
    "mean": "the mean over the real tokens",
}
READOUTS = Declared(READOUT_DECLARATION)
