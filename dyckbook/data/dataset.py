"""A labelled set of bracket strings: codes, lengths, labels and the kind of every string."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dyckbook.data.hardness import Hardness, profile
from dyckbook.data.languages import Dyck
from dyckbook.data.vocab import PAD_CODE

__all__ = ["MEMBER", "Dataset", "string_hash"]

MEMBER = "member"  # the kind of every member; non-members carry their negative kind


@dataclass(frozen=True)
class Dataset:
    """Strings of one language with their labels, as padded code matrices.

    Attributes:
        language: the language the labels refer to.
        codes: uint8 (batch, pos), right-padded with ``PAD_CODE``.
        lengths: int64 (batch,).
        labels: int8 (batch,), 1 for a member.
        kinds: (batch,) str: ``MEMBER`` or the negative kind of the string.
    """

    language: Dyck
    codes: np.ndarray
    lengths: np.ndarray
    labels: np.ndarray
    kinds: np.ndarray

    def __post_init__(self) -> None:
        n = self.lengths.shape[0]
        if self.codes.ndim != 2 or self.codes.shape[0] != n:
            raise ValueError(f"codes must be (batch, pos) with batch={n}, got {self.codes.shape}")
        for name in ("labels", "kinds"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} must have shape ({n},), got {getattr(self, name).shape}")

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def __repr__(self) -> str:
        lo, hi = self.length_range()
        return (f"Dataset({self.language.name}, n={len(self)}, members={int(self.labels.sum())}, "
                f"lengths {lo}..{hi})")

    def length_range(self) -> tuple[int, int]:
        """Shortest and longest length (0, 0 when empty)."""
        if not len(self):
            return 0, 0
        return int(self.lengths.min()), int(self.lengths.max())

    @classmethod
    def empty(cls, language: Dyck) -> Dataset:
        """A dataset with no strings."""
        return cls(language, np.zeros((0, 0), np.uint8), np.zeros(0, np.int64),
                   np.zeros(0, np.int8), np.zeros(0, dtype=object))

    @classmethod
    def from_codes(cls, language: Dyck, codes: np.ndarray, lengths: np.ndarray,
                   kinds: Sequence[str] | np.ndarray | None = None) -> Dataset:
        """Label ``(codes, lengths)`` by membership; ``kinds`` default to member /
        ``"unlabelled"``."""
        lengths = np.asarray(lengths, dtype=np.int64)
        width = int(lengths.max(initial=0))
        codes = np.ascontiguousarray(codes[:, :width], dtype=np.uint8)
        labels = language.is_member((codes, lengths)).astype(np.int8)
        if kinds is None:
            kinds = np.where(labels == 1, MEMBER, "unlabelled")
        return cls(language, codes, lengths, labels, np.asarray(kinds, dtype=object))

    @classmethod
    def from_strings(cls, language: Dyck, strings: Sequence[str],
                     kinds: Sequence[str] | None = None) -> Dataset:
        """Encode and label ``strings`` (membership decides each label)."""
        codes, lengths = language.alphabet.encode(strings)
        return cls.from_codes(language, codes, lengths, kinds)

    @staticmethod
    def concat(datasets: Sequence[Dataset]) -> Dataset:
        """Rows of every dataset in order (all of one language)."""
        if not datasets:
            raise ValueError("datasets must hold at least one Dataset, got an empty sequence")
        language = datasets[0].language
        for d in datasets[1:]:
            if d.language != language:
                raise ValueError(f"cannot concatenate {d.language.name} with {language.name}")
        width = max(d.codes.shape[1] for d in datasets)
        codes = np.full((sum(len(d) for d in datasets), width), PAD_CODE, np.uint8)
        start = 0
        for d in datasets:
            codes[start:start + len(d), :d.codes.shape[1]] = d.codes
            start += len(d)
        return Dataset(language, codes, np.concatenate([d.lengths for d in datasets]),
                       np.concatenate([d.labels for d in datasets]),
                       np.concatenate([d.kinds for d in datasets]))

    def subset(self, index: np.ndarray | Sequence[int]) -> Dataset:
        """The rows ``index`` (int positions or a bool mask), trimmed to their longest string."""
        index = np.asarray(index)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        lengths = self.lengths[index]
        width = int(lengths.max(initial=0))
        return Dataset(self.language, np.ascontiguousarray(self.codes[index, :width]), lengths,
                       self.labels[index], self.kinds[index])

    def strings(self) -> list[str]:
        """The strings as text."""
        return self.language.alphabet.decode(self.codes, self.lengths)

    def hashes(self) -> np.ndarray:
        """One uint64 per row that depends on the string only (see :func:`string_hash`)."""
        return string_hash(self.codes, self.lengths)

    def first_copies(self) -> np.ndarray:
        """Positions of the first copy of every distinct string, in order."""
        _, first = np.unique(self.hashes(), return_index=True)
        return np.sort(first)

    def unique(self) -> Dataset:
        """One copy of every string (the first, with its label and kind)."""
        return self.subset(self.first_copies())

    def without(self, other: Dataset) -> Dataset:
        """The rows whose string does not occur in ``other``."""
        return self.subset(~np.isin(self.hashes(), other.hashes()))

    def hardness(self) -> Hardness:
        """The hardness profile of every string (``dyckbook.data.hardness``): what short of a stack
        rejects each non-member."""
        return profile(self.language, self.codes, self.lengths)

    def hardness_bins(self) -> np.ndarray:
        """str ``(batch,)``: each string's hardness bin (``"member"`` for members)."""
        return self.hardness().bins()

    def depths(self) -> np.ndarray:
        """(batch,) maximum nesting depth of every string (its highest prefix height)."""
        return self.language.max_depths(self.codes, self.lengths)

    def kind_counts(self) -> dict[str, int]:
        """``{kind: number of strings}``, members first."""
        names, counts = np.unique(self.kinds.astype(str), return_counts=True)
        table = dict(zip(names.tolist(), counts.tolist()))
        return {k: table[k] for k in sorted(table, key=lambda k: (k != MEMBER, k))}

    def summary(self) -> dict[str, object]:
        """Size, members, distinct strings, length range and kinds, for tables and records."""
        lo, hi = self.length_range()
        return {"n": len(self), "members": int(self.labels.sum()),
                "distinct": int(self.first_copies().size), "min_length": lo, "max_length": hi,
                "kinds": self.kind_counts()}


_MIX = np.uint64(0x9E3779B97F4A7C15)


def _splitmix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser: a bijection of uint64 that spreads every input bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def string_hash(codes: np.ndarray, lengths: np.ndarray, salt: int = 0) -> np.ndarray:
    """A 64-bit hash of each string, independent of the padding width.

    A polynomial over the symbols (wrapping uint64 arithmetic) mixed with the length and ``salt``
    by splitmix64. Used to deduplicate (collisions among a few million strings have probability
    below 1e-6) and to assign strings to the training, validation or test pool of a seed.

    Args:
        codes: uint8 (batch, pos).
        lengths: int (batch,).
        salt: any int; different salts give independent hashes.

    Returns:
        uint64 (batch,).
    """
    n, width = codes.shape
    with np.errstate(over="ignore"):
        h = np.zeros(n, np.uint64)
        for start in range(0, width, 1024):  # bounded temporaries for long strings
            block = codes[:, start:start + 1024].astype(np.uint64) + np.uint64(1)
            block[np.arange(start, start + block.shape[1])[None, :] >= lengths[:, None]] = 0
            powers = _splitmix(np.arange(start, start + block.shape[1], dtype=np.uint64) + _MIX)
            h = h + (block * powers[None, :]).sum(axis=1, dtype=np.uint64)
        h = _splitmix(h ^ _splitmix(lengths.astype(np.uint64) + np.uint64(salt) * _MIX))
    return h
