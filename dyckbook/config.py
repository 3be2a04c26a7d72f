"""The round trip of the configuration dataclasses: ``to_dict`` and ``from_dict``."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

__all__ = ["Config"]


class Config:
    """Base of a frozen config dataclass: JSON-ready ``to_dict`` (tuples as lists, plus the
    class's ``kind`` if it has one) and ``from_dict``, which refuses unknown keys by name."""

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]
        data = {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}
        kind = getattr(type(self), "kind", None)
        return {"kind": kind, **data} if kind else data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        if getattr(cls, "kind", None):
            data = {k: v for k, v in data.items() if k != "kind"}
        unknown = sorted(set(data) - {f.name for f in fields(cls)})  # type: ignore[arg-type]
        if unknown:
            raise ValueError(f"{cls.__name__}.from_dict got unknown keys {unknown}")
        return cls(**data)
