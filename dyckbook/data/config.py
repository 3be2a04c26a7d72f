"""The round trip of the configuration dataclasses (``to_dict`` and ``from_dict``), and the
declarative argument checks of the public entry points (:func:`check_fields`).

A check is ``(predicate, what it expects)``; :func:`check_fields` runs a table of them and
raises a ValueError that names the field, what it expects and the value given, e.g.
``RunConfig.seed must be an int >= 0, got '2' (str)``. Bools are never ints here.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, fields
from typing import Any

import numpy as np

__all__ = ["Check", "Config", "Declared", "check_fields", "describe", "flag", "instance",
           "integer", "is_int", "mapping", "names", "required_keys"]

Check = tuple[Callable[[Any], bool], str]  # (does the value pass, what the field expects)
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60


def describe(value: object) -> str:
    """A value as error messages show it: a short repr and its type, ``'2' (str)``."""
    return f"{_SHORT.repr(value)} ({type(value).__name__})"


def is_int(value: object, low: int | None = None) -> bool:
    """An int (numpy's too, never a bool) of at least ``low``."""
    return (isinstance(value, (int, np.integer)) and not isinstance(value, bool)
            and (low is None or value >= low))


def integer(low: int) -> Check:
    return (lambda v: is_int(v, low)), f"an int >= {low}"


def instance(*types: type) -> Check:
    return (lambda v: isinstance(v, types)), "a " + " or ".join(t.__name__ for t in types)


def mapping() -> Check:
    return (lambda v: isinstance(v, Mapping)), "a mapping (a dict)"


def flag() -> Check:
    return (lambda v: isinstance(v, bool)), "True or False"


def names(what: str) -> Check:
    """A sequence (not a single string, not a mapping) of ``what``."""
    return ((lambda v: isinstance(v, Iterable) and not isinstance(v, (str, bytes, Mapping))),
            f"a sequence of {what}")


def check_fields(owner: str, values: Mapping[str, Any], table: Mapping[str, Check]) -> None:
    """Raise ``ValueError("<owner><field> must be <expected>, got <value> (<type>)")`` for the
    first field of ``table`` whose value in ``values`` fails its check."""
    for name, (ok, expected) in table.items():
        if not ok(values[name]):
            raise ValueError(f"{owner}{name} must be {expected}, got {describe(values[name])}")


def required_keys(owner: str, data: object, required: Iterable[str],
                  optional: Iterable[str] = ()) -> Mapping[str, Any]:
    """``data`` if it is a mapping with every ``required`` key and no key but those and the
    ``optional`` ones, else a ValueError naming the unknown or missing keys."""
    check_fields("", {owner: data}, {owner: mapping()})
    required = list(required)
    unknown = sorted(set(map(str, data)) - set(required) - set(optional))
    if unknown:
        raise ValueError(f"{owner} got unknown keys {unknown}; known: "
                         f"{sorted({*required, *optional})}")
    missing = [k for k in required if k not in data]
    if missing:
        raise ValueError(f"{owner} is missing keys {missing}")
    return data


class Config:
    """Base of a frozen config dataclass: JSON-ready ``to_dict`` (tuples as lists, plus the
    class's ``kind`` if it has one) and ``from_dict``, which refuses a non-mapping and unknown
    or missing keys by name."""

    #: fields added after records were written: left out of ``to_dict`` at their default, so a
    #: configuration that does not use one keeps its digest (and its stored records match)
    LATER_FIELDS: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        later = {f.name: f.default for f in fields(self)  # type: ignore[arg-type]
                 if f.name in self.LATER_FIELDS}
        data = {f.name: getattr(self, f.name) for f in fields(self)  # type: ignore[arg-type]
                if f.name not in later or getattr(self, f.name) != later[f.name]}
        data = {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}
        kind = getattr(type(self), "kind", None)
        return {"kind": kind, **data} if kind else data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        check_fields(f"{cls.__name__}.from_dict: ", {"data": data}, {"data": mapping()})
        if getattr(cls, "kind", None):
            data = {k: v for k, v in data.items() if k != "kind"}
        every = fields(cls)  # type: ignore[arg-type]
        needed = [f.name for f in every if f.default is MISSING and f.default_factory is MISSING]
        required_keys(f"{cls.__name__}.from_dict", data, needed, [f.name for f in every])
        return cls(**data)


class Declared(Sequence[str]):
    """The names of a declaration (``{name: what belongs to it}``) that pass ``keep``, read
    from the declaration each time: a name added there reaches every reader of this view (the
    grid, the length study, the command line, the checks of a config) with nothing else
    edited. It reads like the tuple of those names (``in``, iteration, indexing, ``==`` a
    tuple, ``repr``)."""

    def __init__(self, declaration: Mapping[str, Any],
                 keep: Callable[[Any], bool] | None = None) -> None:
        self._declaration, self._keep = declaration, keep

    def _names(self) -> tuple[str, ...]:
        return tuple(name for name, entry in self._declaration.items()
                     if self._keep is None or self._keep(entry))

    def __getitem__(self, index):  # type: ignore[override]
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and not isinstance(other, str) and \
            self._names() == tuple(other)

    def __hash__(self) -> int:
        return hash(self._names())

    def __add__(self, other: Iterable[str]) -> tuple[str, ...]:
        return self._names() + tuple(other)

    def __repr__(self) -> str:
        return repr(self._names())
