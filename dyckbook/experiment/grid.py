"""The grid's cells and the named sets of configurations a parameter may stand for.

A :class:`Cell` is one architecture of the ablation grid (k, layers, mask, positional encoding,
readout); the named cell sets (``full``, ``reduced``, ``smoke``) and 07's ``positions`` are
read from ``blocks``' declarations, so a new encoding, mask or readout joins them. What a named
parameter expands to is part of its run's key (``recipe.EXPANSIONS``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product

from dyckbook.nn import options

__all__ = ["CELL_SETS", "EXPANSIONS", "KS", "LAYERS", "POSITIONS", "Cell", "all_cells",
           "cells_named", "expand_configs"]

LAYERS = (1, 2, 3)
KS = (1, 3)


@dataclass(frozen=True, order=True)
class Cell:
    """One architecture of the grid; everything else comes from the :class:`GridSpec`."""

    k: int
    n_layers: int
    mask: str
    pos_encoding: str
    readout: str

    @property
    def name(self) -> str:
        """e.g. ``k1-L2-causal-learned-mean``."""
        return f"k{self.k}-L{self.n_layers}-{self.mask}-{self.pos_encoding}-{self.readout}"

    @classmethod
    def from_name(cls, name: str) -> Cell:
        """Inverse of :attr:`name`; a malformed name raises ``ValueError`` naming it."""
        parts = name.split("-") if isinstance(name, str) else []
        try:
            k, layers = int(parts[0].removeprefix("k")), int(parts[1].removeprefix("L"))
            cell = cls(k, layers, *parts[2:])
        except (IndexError, ValueError, TypeError):
            raise ValueError(f"cell name must look like 'k3-L2-causal-learned-end', "
                             f"got {name!r}") from None
        if (cell.mask not in options.MASKS or cell.pos_encoding not in options.POS_ENCODINGS
                or cell.readout not in options.READOUTS):
            raise ValueError(f"cell name {name!r} names an unknown mask, encoding or readout")
        return cell


def all_cells() -> list[Cell]:
    """k x layers x mask x encoding x readout, every encoding of ``options.POS_ENCODINGS``
    (2 x 3 x 2 x 8 x 3 = 288 cells), in a fixed order."""
    return [Cell(*c) for c in product(KS, LAYERS, options.MASKS, options.POS_ENCODINGS,
                                      options.READOUTS)]


def _reduced() -> list[Cell]:
    """What the verdicts need at 1 and 2 layers, for both k: the thesis' configurations, every
    causal configuration with a readout that can see the string, and the bidirectional ones
    with a position encoding that can tell order; the encodings made for length
    generalisation (``options.LENGTH_ENCODINGS``) are the length study's."""
    keep = []
    for c in all_cells():
        if c.n_layers == 3 or c.pos_encoding in ("absolute_ctx", *options.LENGTH_ENCODINGS):
            continue
        causal_ok = c.mask == "causal" and c.readout != "start"
        bidirectional_ok = c.mask == "bidirectional" and c.readout != "end"
        thesis = c.pos_encoding in ("none", "absolute") and c.readout == "start"
        if causal_ok or bidirectional_ok or thesis:
            keep.append(c)
    return keep


def _smoke() -> list[Cell]:
    return [Cell(1, 1, "bidirectional", "learned", "start"), Cell(1, 1, "causal", "none", "start"),
            Cell(1, 1, "causal", "learned", "mean")]


CELL_SETS: dict[str, Callable[[], list[Cell]]] = {"full": all_cells, "reduced": _reduced,
                                                  "smoke": _smoke}


def cells_named(name: str) -> list[Cell]:
    """A named cell set (``full``, ``reduced``, ``smoke``) or comma-separated cell names."""
    if name in CELL_SETS:
        return CELL_SETS[name]()
    if "-" in name:
        return [Cell.from_name(part.strip()) for part in name.split(",")]
    raise ValueError(f"cells must be one of {sorted(CELL_SETS)} or cell names, got {name!r}")




#: in a list of configurations, every positional encoding (``options.POS_ENCODINGS``) at the
#: length study's mask and readout
POSITIONS = "positions"


def expand_configs(configs: str) -> list[str]:
    """The configuration names of a comma-separated list; :data:`POSITIONS` stands for
    ``causal-<encoding>-end`` of every encoding in ``options.POS_ENCODINGS`` (so a new encoding
    joins the length study where a profile asks for them all)."""
    out = []
    for name in (c.strip() for c in configs.split(",")):
        out += [f"causal-{pe}-end" for pe in options.POS_ENCODINGS] if name == POSITIONS \
            else [name]
    return list(dict.fromkeys(out))


def _cell_names(name: str) -> list[str]:
    return [c.name for c in cells_named(name)]


#: the parameters whose value names a set, and what it expands to (``recipe.expanded``)
EXPANSIONS: dict[str, Callable[[str], list[str]]] = {
    "cells": _cell_names, "configs": expand_configs, "depth_configs": expand_configs}
