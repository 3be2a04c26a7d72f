"""Labelled Dyck datasets: generation, compact storage, splits, batching and JSONL files."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dyckbook.languages import PAD_CODE, Dyck, ShuffleDyck, iter_length_chunks
from dyckbook.tokenizer import AlphabetError, AlphabetIndex, DyckTokenizer

__all__ = [
    "DatasetSpec",
    "DyckDataset",
    "generate_dataset",
    "split_dataset",
    "split_indices",
    "split_by_length",
    "THESIS_SPLIT",
    "collate",
    "BatchSampler",
    "LengthBucketSampler",
    "BatchLoader",
    "make_loader",
    "save_jsonl",
    "load_jsonl",
    "load_or_generate",
]

LANGUAGES = ("dyck", "shuffle_dyck")
NEGATIVE_MIXTURES = ("hard", "random", "thesis_literal")
SHORT_LENGTH_MODES = ("drop", "keep")
POSITIVE = "positive"  # the kind of every member

#: The thesis' split: 80% train / 20% test, then 15% of train as validation -> 68 / 12 / 20.
THESIS_SPLIT = (0.68, 0.12, 0.20)

# Cells (symbols) handled at once when generating, hashing or decoding: bounds temporary memory.
_CHUNK_CELLS = 1 << 22
_JSONL_FORMAT = "dyckbook.jsonl"
_JSONL_FORMAT_VERSION = 1


def _version() -> str:
    from dyckbook import __version__

    return __version__


def _check_int(name: str, value: Any, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _short(s: str, limit: int = 40) -> str:
    return repr(s) if len(s) <= limit else repr(s[:limit]) + f"... ({len(s)} characters)"


# ============================================================================================
# the generation parameters
# ============================================================================================


@dataclass(frozen=True)
class DatasetSpec:
    """Everything that determines a generated dataset; equal specs give byte-identical datasets.

    Length matching: every negative has the length of a positive (pairs are drawn together), so
    neither length nor parity tells the classes apart. Hard negatives do not exist below length 4
    (and random ones not at length 0); ``short_lengths`` says what happens to such lengths.
    """

    # "dyck" (Dyck-k, or Dyck-(k, D) with max_depth) or "shuffle_dyck" (Shuffle-Dyck-k)
    language: str = "dyck"
    # number of bracket types
    k: int = 1
    # depth bound D of Dyck-(k, D); None = unbounded (must be None for shuffle_dyck)
    max_depth: int | None = None
    # the k bracket pairs, e.g. ("()", "[]"); None = the first k of languages.DEFAULT_PAIRS
    pairs: tuple[str, ...] | None = None
    # total number of strings, members and non-members together
    n: int = 10_000
    # shortest string length (inclusive; only even lengths are drawn)
    min_length: int = 0
    # longest string length (inclusive)
    max_length: int = 16
    # share of members; n_pos = round(n * positive_fraction), the rest are negatives
    positive_fraction: float = 0.5
    # negative kinds: "hard" (mixture counting cannot reject), "random" (uniform random strings,
    # the thesis' intent), "thesis_literal", or a tuple of kind names from negatives.NEGATIVE_KINDS
    # (a single kind name such as "swap" is stored as the tuple ("swap",))
    negatives: str | tuple[str, ...] = "hard"
    # lengths where no negative of the requested kinds exists: "drop" them for both classes, or
    # "keep" positives there unpaired (their negatives are drawn at other lengths)
    short_lengths: str = "drop"
    # seed of the numpy Generator that draws everything
    seed: int = 0

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise ValueError(f"language must be one of {LANGUAGES}, got {self.language!r}")
        _check_int("k", self.k, 1)
        if self.max_depth is not None:
            _check_int("max_depth", self.max_depth, 1)
            if self.language != "dyck":
                raise ValueError(
                    f"max_depth applies to language='dyck' only, got max_depth={self.max_depth} "
                    f"with language={self.language!r}")
        if self.pairs is not None:
            if isinstance(self.pairs, str) or not isinstance(self.pairs, Sequence):
                raise ValueError(f"pairs must be a sequence of 2-character strings, got {self.pairs!r}")
            # JSON gives lists; store a tuple so that specs hash and compare by value.
            object.__setattr__(self, "pairs", tuple(self.pairs))
        _check_int("n", self.n, 1)
        _check_int("min_length", self.min_length, 0)
        _check_int("max_length", self.max_length, 0)
        if self.min_length > self.max_length:
            raise ValueError(
                f"min_length must be <= max_length, got min_length={self.min_length} > "
                f"max_length={self.max_length}")
        if (self.min_length + 1) // 2 > self.max_length // 2:
            raise ValueError(
                f"the length range min_length={self.min_length}..max_length={self.max_length} "
                f"holds no even length, and every member has even length")
        fraction = self.positive_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float, np.floating)):
            raise ValueError(f"positive_fraction must be a number, got {fraction!r}")
        if not 0.0 <= float(fraction) <= 1.0:
            raise ValueError(f"positive_fraction must lie in [0, 1], got {fraction}")
        object.__setattr__(self, "positive_fraction", float(fraction))
        self._check_negatives()
        if self.short_lengths not in SHORT_LENGTH_MODES:
            raise ValueError(
                f"short_lengths must be one of {SHORT_LENGTH_MODES}, got {self.short_lengths!r}")
        _check_int("seed", self.seed, 0)
        self.make_language()  # validates k against pairs, and the pairs themselves

    def _check_negatives(self) -> None:
        negatives = self.negatives
        if isinstance(negatives, str) and negatives not in NEGATIVE_MIXTURES:
            from dyckbook.negatives import NEGATIVE_KINDS

            if negatives in NEGATIVE_KINDS:  # one kind name: the one-element tuple
                negatives = (negatives,)
        if isinstance(negatives, str):
            if negatives not in NEGATIVE_MIXTURES:
                raise ValueError(
                    f"negatives must be one of {NEGATIVE_MIXTURES} or a tuple of kind names, got "
                    f"{negatives!r}")
            return
        if not isinstance(negatives, Sequence) or len(negatives) == 0:
            raise ValueError(
                f"negatives must be one of {NEGATIVE_MIXTURES} or a non-empty tuple of kind "
                f"names, got {negatives!r}")
        from dyckbook.negatives import NEGATIVE_KINDS

        for kind in negatives:
            if kind not in NEGATIVE_KINDS:
                raise ValueError(
                    f"negatives holds {kind!r}, which is not a negative kind; known kinds: "
                    f"{', '.join(sorted(NEGATIVE_KINDS))}")
        if len(set(negatives)) != len(negatives):
            raise ValueError(f"negatives repeats a kind: {tuple(negatives)!r}")
        object.__setattr__(self, "negatives", tuple(negatives))

    def make_language(self) -> Dyck | ShuffleDyck:
        """The language object this spec samples from."""
        if self.language == "dyck":
            return Dyck(self.k, max_depth=self.max_depth, pairs=self.pairs)
        return ShuffleDyck(self.k, pairs=self.pairs)

    @property
    def n_positive(self) -> int:
        """Number of members: ``round(n * positive_fraction)`` (halves round up)."""
        return int(math.floor(self.n * self.positive_fraction + 0.5))

    @property
    def n_negative(self) -> int:
        """Number of non-members: ``n - n_positive``."""
        return self.n - self.n_positive

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every field (tuples become lists)."""
        out = dataclasses.asdict(self)
        if out["pairs"] is not None:
            out["pairs"] = list(out["pairs"])
        if not isinstance(out["negatives"], str):
            out["negatives"] = list(out["negatives"])
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DatasetSpec:
        """Inverse of :meth:`to_dict`; unknown keys are an error (they would be ignored silently)."""
        if not isinstance(data, dict):
            raise ValueError(f"data must be a dict, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown DatasetSpec field(s) {unknown}; known: {sorted(names)}")
        data = dict(data)
        if isinstance(data.get("negatives"), list):
            data["negatives"] = tuple(data["negatives"])
        return cls(**data)

    def spec_hash(self) -> str:
        """sha256 (hex) of every field plus the dyckbook version: the cache key of the data."""
        payload = json.dumps({"spec": self.to_dict(), "dyckbook": _version()}, sort_keys=True)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _language_to_dict(language: Dyck | ShuffleDyck) -> dict[str, Any]:
    if isinstance(language, ShuffleDyck):
        return {"language": "shuffle_dyck", "k": language.k, "max_depth": None,
                "pairs": list(language.pairs)}
    if isinstance(language, Dyck):
        return {"language": "dyck", "k": language.k, "max_depth": language.max_depth,
                "pairs": list(language.pairs)}
    raise ValueError(f"language must be a Dyck or ShuffleDyck, got {type(language).__name__}")


def _language_from_dict(data: dict[str, Any]) -> Dyck | ShuffleDyck:
    if data.get("language") == "dyck":
        return Dyck(data["k"], max_depth=data.get("max_depth"), pairs=data.get("pairs"))
    if data.get("language") == "shuffle_dyck":
        return ShuffleDyck(data["k"], pairs=data.get("pairs"))
    raise ValueError(f"language must be one of {LANGUAGES}, got {data.get('language')!r}")


# ============================================================================================
# compact storage
# ============================================================================================


def _unpack(buffer: np.ndarray, packed: bool, positions: np.ndarray) -> np.ndarray:
    """Symbol codes at symbol positions of the buffer (two 4-bit symbols per byte if packed)."""
    if not packed:
        return buffer[positions]
    byte = buffer[positions >> 1]
    return np.where(positions & 1, byte >> 4, byte & 0x0F).astype(np.uint8)


def _segment_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Buffer positions of the concatenated segments ``[starts[i], starts[i] + lengths[i])``."""
    total = int(lengths.sum())
    seg_begin = np.cumsum(lengths) - lengths  # where each segment begins in the flat output
    return np.arange(total, dtype=np.int64) + np.repeat(starts - seg_begin, lengths)


def _max_depths(flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Max over prefixes of (#openers - #closers), all types together; 0 for the empty string."""
    out = np.zeros(len(lengths), dtype=np.int16)
    if len(flat) == 0:
        return out
    step = 1 - 2 * (flat & 1).astype(np.int32)  # opener codes are even
    height = np.cumsum(step)
    ends = np.cumsum(lengths)
    begins = ends - lengths
    before = np.where(begins > 0, height[np.maximum(begins - 1, 0)], 0)
    nonempty = lengths > 0
    peaks = np.maximum.reduceat(height, begins[nonempty])
    out[nonempty] = np.maximum(peaks - before[nonempty], 0)
    return out


class _Builder:
    """Appends chunks of flat codes to a compact buffer (byte-aligned per chunk)."""

    def __init__(self, packed: bool) -> None:
        self.packed = packed
        self.parts: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        self.depths: list[np.ndarray] = []
        self.cursor = 0  # in symbols

    def add(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        flat = flat.astype(np.uint8, copy=False)
        self.starts.append(self.cursor + np.cumsum(lengths) - lengths)
        self.depths.append(_max_depths(flat, lengths))
        if self.packed:
            padded = np.zeros(len(flat) + (len(flat) & 1), dtype=np.uint8)
            padded[: len(flat)] = flat
            part = padded[0::2] | (padded[1::2] << 4)
            self.cursor += 2 * len(part)
        else:
            part = flat.copy()
            self.cursor += len(part)
        self.parts.append(part)

    def finish(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        buffer = np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.uint8)
        starts = np.concatenate(self.starts) if self.starts else np.zeros(0, dtype=np.int64)
        depths = np.concatenate(self.depths) if self.depths else np.zeros(0, dtype=np.int16)
        return buffer, starts.astype(np.int64), depths


class DyckDataset(torch.utils.data.Dataset):
    """Labelled bracket strings stored compactly (no padding to the longest string).

    Storage: one flat ``uint8`` buffer of symbol codes, two symbols per byte when the alphabet
    has at most 16 symbols (k <= 8), plus per string an int64 start (in symbols), int32 length,
    int8 label, int8 kind index into :attr:`kind_names` and int16 maximum depth. About half a
    byte per character for k <= 8. Subsets (:meth:`subset`, the splits) share the buffer.

    Items (``dataset[i]``) are dicts with ``index``, ``codes`` (uint8 ``(length,)``), ``string``,
    ``label`` (1 member / 0 not), ``kind`` (``"positive"`` or the negative kind), ``length`` and
    ``depth``. For training use :meth:`batch` / :func:`make_loader`, which gather whole batches
    at once.

    Build one with :func:`generate_dataset`, :func:`load_jsonl` or :meth:`from_strings`.
    """

    def __init__(self, *, buffer: np.ndarray, packed: bool, starts: np.ndarray,
                 lengths: np.ndarray, labels: np.ndarray, kind_codes: np.ndarray,
                 kind_names: Sequence[str], depths: np.ndarray, language: Dyck | ShuffleDyck,
                 spec: DatasetSpec | None = None) -> None:
        n = len(starts)
        for name, array in (("lengths", lengths), ("labels", labels), ("kind_codes", kind_codes),
                            ("depths", depths)):
            if len(array) != n:
                raise ValueError(f"{name} has {len(array)} entries, starts has {n}")
        if packed and len(language.alphabet) > 16:
            raise ValueError(
                f"packed storage holds 16 symbols at most, the alphabet has {len(language.alphabet)}")
        self._buffer = buffer
        self.packed = bool(packed)
        self._starts = np.asarray(starts, dtype=np.int64)
        self._lengths = np.asarray(lengths, dtype=np.int32)
        self._labels = np.asarray(labels, dtype=np.int8)
        self._kind_codes = np.asarray(kind_codes, dtype=np.int8)
        self.kind_names: tuple[str, ...] = tuple(kind_names)
        self._depths = np.asarray(depths, dtype=np.int16)
        self.language = language
        self.spec = spec

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_strings(cls, strings: Sequence[str], labels: Sequence[int] | np.ndarray,
                     language: Dyck | ShuffleDyck, kinds: Sequence[str] | None = None,
                     spec: DatasetSpec | None = None) -> DyckDataset:
        """Build a dataset from strings (labels are taken as given; see :func:`load_jsonl`).

        Args:
            strings: ``n`` strings over the language's alphabet.
            labels: ``(n,)`` ints, 1 for members and 0 for non-members.
            language: the language the strings belong to (or not).
            kinds: ``n`` kind names; default ``"positive"`` for label 1 and ``"negative"`` for 0.
            spec: the generation parameters, if known.
        """
        labels = np.asarray(labels)
        if labels.shape != (len(strings),):
            raise ValueError(f"labels must have shape ({len(strings)},), got {labels.shape}")
        if len(labels) and not np.isin(labels, (0, 1)).all():
            bad = int(np.flatnonzero(~np.isin(labels, (0, 1)))[0])
            raise ValueError(f"labels[{bad}] must be 0 or 1, got {labels[bad]!r}")
        if kinds is None:
            kinds = [POSITIVE if label else "negative" for label in labels.tolist()]
        if len(kinds) != len(strings):
            raise ValueError(f"kinds has {len(kinds)} entries, strings has {len(strings)}")
        kind_names, kind_codes = _kind_table(kinds)
        packed = len(language.alphabet) <= 16
        index = AlphabetIndex(language.alphabet)
        builder = _Builder(packed)
        try:
            lengths = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
        except TypeError:
            index.flat(strings, what="strings")  # raises naming the non-str element
            raise
        for chunk in _chunks_by_cells(lengths):
            part = [strings[i] for i in range(chunk.start, chunk.stop)]
            try:
                flat, part_lengths = index.flat(part)
            except ValueError:
                index.flat(strings)  # re-raise naming the caller's index
                raise
            builder.add(flat.astype(np.uint8), part_lengths)
        buffer, starts, depths = builder.finish()
        return cls(buffer=buffer, packed=packed, starts=starts, lengths=lengths, labels=labels,
                   kind_codes=kind_codes, kind_names=kind_names, depths=depths,
                   language=language, spec=spec)

    # ---------------------------------------------------------------- access

    def __len__(self) -> int:
        return len(self._starts)

    def __repr__(self) -> str:
        return (f"DyckDataset({self.language.name}, n={len(self)}, "
                f"positives={int(self._labels.sum())}, lengths={self._length_range()}, "
                f"nbytes={self.nbytes})")

    def _length_range(self) -> str:
        if len(self) == 0:
            return "none"
        return f"{int(self._lengths.min())}..{int(self._lengths.max())}"

    @property
    def alphabet(self) -> str:
        """The language's alphabet; symbol code = index in this string."""
        return self.language.alphabet

    @property
    def labels(self) -> np.ndarray:
        """int8 ``(n,)``: 1 for members, 0 for non-members (read-only view)."""
        return _readonly(self._labels)

    @property
    def lengths(self) -> np.ndarray:
        """int32 ``(n,)`` string lengths (read-only view)."""
        return _readonly(self._lengths)

    @property
    def depths(self) -> np.ndarray:
        """int16 ``(n,)`` maximum prefix depth (openers minus closers, all types; read-only)."""
        return _readonly(self._depths)

    @property
    def kind_codes(self) -> np.ndarray:
        """int8 ``(n,)`` index of each string's kind in :attr:`kind_names` (read-only view)."""
        return _readonly(self._kind_codes)

    @property
    def kinds(self) -> list[str]:
        """Kind name of every string (``"positive"`` for members)."""
        names = self.kind_names
        return [names[c] for c in self._kind_codes.tolist()]

    def kind_counts(self) -> dict[str, int]:
        """Number of strings of each kind present."""
        counts = np.bincount(self._kind_codes, minlength=len(self.kind_names))
        return {name: int(c) for name, c in zip(self.kind_names, counts) if c}

    @property
    def nbytes(self) -> int:
        """Bytes held by the storage arrays (a subset counts the shared buffer in full)."""
        return int(self._buffer.nbytes + self._starts.nbytes + self._lengths.nbytes
                   + self._labels.nbytes + self._kind_codes.nbytes + self._depths.nbytes)

    def _check_index(self, i: Any) -> int:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"index must be an int, got {type(i).__name__}")
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for a dataset of {n} strings")
        return int(i) % n

    def _check_indices(self, indices: Any) -> np.ndarray:
        array = np.asarray(indices)
        if array.ndim != 1:
            raise ValueError(f"indices must be one-dimensional, got shape {array.shape}")
        if array.size == 0:
            return np.zeros(0, dtype=np.int64)
        if array.dtype == bool or not np.issubdtype(array.dtype, np.integer):
            raise ValueError(f"indices must be integers, got dtype {array.dtype}")
        array = array.astype(np.int64, copy=False)
        n = len(self)
        if array.min() < -n or array.max() >= n:
            bad = array[(array < -n) | (array >= n)][0]
            raise IndexError(f"index {int(bad)} out of range for a dataset of {n} strings")
        return array % n if array.min() < 0 else array

    def codes_of(self, i: int) -> np.ndarray:
        """uint8 ``(length,)`` symbol codes of string ``i``."""
        i = self._check_index(i)
        start, length = int(self._starts[i]), int(self._lengths[i])
        return _unpack(self._buffer, self.packed, np.arange(start, start + length))

    def string(self, i: int) -> str:
        """String ``i``."""
        return self.language.decode(self.codes_of(i)[None, :],
                                    np.array([self._lengths[self._check_index(i)]]))[0]

    def __getitem__(self, i: int) -> dict[str, Any]:
        i = self._check_index(i)
        codes = self.codes_of(i)
        return {
            "index": i,
            "codes": codes,
            "string": self.language.decode(codes[None, :], np.array([len(codes)]))[0],
            "label": int(self._labels[i]),
            "kind": self.kind_names[self._kind_codes[i]],
            "length": int(self._lengths[i]),
            "depth": int(self._depths[i]),
        }

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self[i]

    def codes(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gather strings as a padded code matrix (vectorised).

        Args:
            indices: ``(batch,)`` dataset indices.

        Returns:
            ``(codes, lengths)``: uint8 ``(batch, pos)`` padded with ``PAD_CODE`` (``pos`` = the
            longest selected length) and int64 ``(batch,)``.
        """
        indices = self._check_indices(indices)
        lengths = self._lengths[indices].astype(np.int64)
        width = int(lengths.max()) if len(lengths) else 0
        inside = np.arange(width) < lengths[:, None]  # (batch, pos)
        positions = self._starts[indices][:, None] + np.arange(width)
        out = np.full((len(indices), width), PAD_CODE, dtype=np.uint8)
        out[inside] = _unpack(self._buffer, self.packed, positions[inside])
        return out, lengths

    def _flat_codes(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lengths = self._lengths[indices].astype(np.int64)
        positions = _segment_positions(self._starts[indices], lengths)
        return _unpack(self._buffer, self.packed, positions), lengths

    def strings(self, indices: Sequence[int] | np.ndarray | None = None) -> list[str]:
        """The strings at ``indices`` (default: all, in order)."""
        indices = (np.arange(len(self)) if indices is None else self._check_indices(indices))
        points = np.array([ord(c) for c in self.alphabet], dtype=np.uint32)
        out: list[str] = []
        for chunk in _chunks_by_cells(self._lengths[indices].astype(np.int64)):
            flat, lengths = self._flat_codes(indices[chunk])
            text = points[flat].tobytes().decode("utf-32-le")
            ends = np.cumsum(lengths).tolist()
            out.extend(text[a:b] for a, b in zip([0] + ends[:-1], ends))
        return out

    def subset(self, indices: Sequence[int] | np.ndarray) -> DyckDataset:
        """A dataset of the strings at ``indices`` (in that order), sharing this one's buffer."""
        indices = self._check_indices(indices)
        return DyckDataset(buffer=self._buffer, packed=self.packed, starts=self._starts[indices],
                           lengths=self._lengths[indices], labels=self._labels[indices],
                           kind_codes=self._kind_codes[indices], kind_names=self.kind_names,
                           depths=self._depths[indices], language=self.language, spec=self.spec)

    def batch(self, indices: Sequence[int] | np.ndarray,
              tokenizer: DyckTokenizer | None = None) -> dict[str, Any]:
        """A training batch of the strings at ``indices``, built without per-item Python work.

        Args:
            indices: ``(batch,)`` dataset indices.
            tokenizer: default ``DyckTokenizer(self.alphabet)``.

        Returns:
            The batch dict of the package contract: ``tokens`` int64 ``(batch, pos)`` padded per
            batch, ``labels`` / ``lengths`` int64 ``(batch,)``, ``kinds`` list[str]; plus
            ``depths`` int64 ``(batch,)`` and ``indices`` int64 ``(batch,)``.
        """
        indices = self._check_indices(indices)
        if len(indices) == 0:
            raise ValueError("indices must not be empty (an empty batch has no shape to pad to)")
        tokenizer = tokenizer if tokenizer is not None else DyckTokenizer(self.alphabet)
        codes, lengths = self.codes(indices)
        names = self.kind_names
        return {
            "tokens": tokenizer.encode_codes(codes, lengths),
            "labels": torch.from_numpy(self._labels[indices].astype(np.int64)),
            "lengths": torch.from_numpy(lengths),
            "kinds": [names[c] for c in self._kind_codes[indices].tolist()],
            "depths": torch.from_numpy(self._depths[indices].astype(np.int64)),
            "indices": torch.from_numpy(indices.copy()),
        }


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


def _kind_table(kinds: Sequence[str]) -> tuple[tuple[str, ...], np.ndarray]:
    """("positive", *sorted other kinds) and the int8 index of each kind."""
    unique = sorted(set(kinds) - {POSITIVE})
    names = (POSITIVE, *unique)
    if len(names) > 127:
        raise ValueError(f"at most 127 kinds fit an int8 index, got {len(names)}")
    lookup = {name: i for i, name in enumerate(names)}
    return names, np.fromiter((lookup[k] for k in kinds), dtype=np.int8, count=len(kinds))


def _chunks_by_cells(lengths: np.ndarray, cells: int = _CHUNK_CELLS) -> list[slice]:
    """Consecutive slices of the batch holding about ``cells`` symbols each (at least one row)."""
    ends = np.cumsum(lengths)
    out, start = [], 0
    while start < len(lengths):
        base = ends[start - 1] if start else 0
        stop = int(np.searchsorted(ends, base + cells, side="right"))
        stop = max(stop, start + 1)
        out.append(slice(start, stop))
        start = stop
    return out


# ============================================================================================
# generation
# ============================================================================================


def allowed_lengths(spec: DatasetSpec) -> np.ndarray:
    """Even lengths of the spec's range at which a negative of the requested kinds exists."""
    from dyckbook.negatives import available_kinds

    language = spec.make_language()
    evens = np.arange(spec.min_length + (spec.min_length & 1), spec.max_length + 1, 2)
    keep = [len(available_kinds(language, int(length), spec.negatives)) > 0 for length in evens]
    return evens[np.asarray(keep, dtype=bool)]


def generate_dataset(spec: DatasetSpec) -> DyckDataset:
    """Draw a labelled dataset: exact-uniform members and verified, length-matched non-members.

    Positive lengths are uniform over the even lengths of ``min_length..max_length``
    (``short_lengths="drop"``: only over lengths where a negative of the requested kinds exists).
    Negative ``i`` gets the length of positive ``i``, so for ``positive_fraction=0.5`` every length
    holds as many negatives as positives (with an odd ``n`` one positive is unpaired). Extra
    negatives (``positive_fraction < 0.5``) draw lengths uniformly from the allowed lengths.
    The order of the strings is a uniform random permutation.

    Args:
        spec: the generation parameters; ``numpy.random.default_rng(spec.seed)`` draws everything,
            so the same spec gives the same bytes.

    Returns:
        The dataset, with ``dataset.spec = spec``.

    Raises:
        ValueError: no length of the range admits a negative of the requested kinds.
    """
    if not isinstance(spec, DatasetSpec):
        raise ValueError(f"spec must be a DatasetSpec, got {type(spec).__name__}")
    from dyckbook import negatives

    language = spec.make_language()
    rng = np.random.default_rng(spec.seed)
    evens = np.arange(spec.min_length + (spec.min_length & 1), spec.max_length + 1, 2)
    n_pos, n_neg = spec.n_positive, spec.n_negative
    allowed = allowed_lengths(spec) if n_neg else evens
    if len(allowed) == 0:
        raise ValueError(
            f"no negative of kinds negatives={spec.negatives!r} exists for {language.name} at "
            f"any even length in min_length={spec.min_length}..max_length={spec.max_length}; "
            f"raise max_length (hard kinds need length >= 4)")
    pool = allowed if spec.short_lengths == "drop" else evens
    pos_lengths = pool[rng.integers(len(pool), size=n_pos)]
    paired = min(n_pos, n_neg)
    neg_lengths = np.empty(n_neg, dtype=np.int64)
    neg_lengths[:paired] = pos_lengths[:paired]
    if spec.short_lengths == "keep":
        unpaired = np.flatnonzero(~np.isin(neg_lengths[:paired], allowed))
        neg_lengths[unpaired] = allowed[rng.integers(len(allowed), size=len(unpaired))]
    neg_lengths[paired:] = allowed[rng.integers(len(allowed), size=n_neg - paired)]

    # Item i < n_pos is positive i, item n_pos + j is negative j. Items are stored in the order
    # they are generated (chunk after chunk, no scatter); the dataset's position p holds item
    # order[p], a uniform random permutation, through the per-string start offsets.
    item_lengths = np.concatenate([pos_lengths, neg_lengths]).astype(np.int64)
    pos_chunks = list(iter_length_chunks(pos_lengths, _CHUNK_CELLS))
    neg_chunks = list(iter_length_chunks(neg_lengths, _CHUNK_CELLS))
    packed = len(language.alphabet) <= 16
    total = int(item_lengths.sum())
    # Each chunk starts on a byte boundary: at most one spare nibble per chunk.
    capacity = (total + len(pos_chunks) + len(neg_chunks) + 1) // 2 if packed else total
    buffer = np.zeros(capacity, dtype=np.uint8)
    item_starts = np.zeros(spec.n, dtype=np.int64)
    item_depths = np.zeros(spec.n, dtype=np.int16)
    item_kinds: list[str] = [POSITIVE] * spec.n
    cursor = 0  # next free symbol position (even when packed)

    def append(items: np.ndarray, flat: np.ndarray, flat_lengths: np.ndarray) -> None:
        nonlocal cursor
        item_starts[items] = cursor + np.cumsum(flat_lengths) - flat_lengths
        item_depths[items] = _max_depths(flat, flat_lengths)
        size = len(flat)
        if packed:
            out = buffer[cursor // 2:cursor // 2 + (size + 1) // 2]
            half = size // 2
            np.bitwise_or(flat[0:2 * half:2], flat[1::2] << 4, out=out[:half])
            if size & 1:
                out[half] = flat[-1]
            cursor += size + (size & 1)
        else:
            buffer[cursor:cursor + size] = flat
            cursor += size

    for chunk in pos_chunks:
        codes, chunk_lengths = language.sample_codes(rng, pos_lengths[chunk])
        append(chunk, codes[np.arange(codes.shape[1]) < chunk_lengths[:, None]], chunk_lengths)

    index = AlphabetIndex(language.alphabet)
    sample_codes = getattr(negatives, "sample_negative_codes", None)
    for chunk in neg_chunks:
        if sample_codes is not None:  # codes fast path: no Python strings
            codes, chunk_lengths, kinds = sample_codes(language, rng, neg_lengths[chunk],
                                                       kinds=spec.negatives)
            flat = codes[np.arange(codes.shape[1]) < chunk_lengths[:, None]]
        else:
            strings, kinds = negatives.sample_negatives(language, rng, neg_lengths[chunk],
                                                        kinds=spec.negatives)
            flat, chunk_lengths = index.flat(strings)
            flat = flat.astype(np.uint8)
        if not np.array_equal(chunk_lengths, neg_lengths[chunk]):
            raise RuntimeError("the negative sampler returned other lengths than requested")
        append(n_pos + chunk, flat, chunk_lengths)
        for item, kind in zip((n_pos + chunk).tolist(), kinds):
            item_kinds[item] = kind

    order = rng.permutation(spec.n)
    labels = (order < n_pos).astype(np.int8)
    kind_names, item_kind_codes = _kind_table(item_kinds)
    used = (cursor // 2) if packed else cursor
    return DyckDataset(buffer=buffer[:used], packed=packed, starts=item_starts[order],
                       lengths=item_lengths[order], labels=labels,
                       kind_codes=item_kind_codes[order], kind_names=kind_names,
                       depths=item_depths[order], language=language, spec=spec)


# ============================================================================================
# splits
# ============================================================================================


def _as_rng(rng: np.random.Generator | int) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0:
        return np.random.default_rng(int(rng))
    raise ValueError(f"rng must be a numpy.random.Generator or a seed >= 0, got {rng!r}")


def _string_keys(dataset: DyckDataset) -> np.ndarray:
    """A 64-bit polynomial hash of each string (length mixed in): equal strings, equal keys.

    Two different strings may collide (probability ~2^-64 per pair); that only puts them in the
    same group, which never breaks split disjointness.
    """
    lengths = dataset._lengths.astype(np.int64)
    n = len(lengths)
    keys = np.zeros(n, dtype=np.uint64)
    if n == 0:
        return keys
    powers = np.full(max(int(lengths.max()), 1), 0x9E3779B97F4A7C15, dtype=np.uint64)
    powers = np.cumprod(powers, dtype=np.uint64)  # wraps modulo 2**64 by design
    for chunk in _chunks_by_cells(lengths):
        idx = np.arange(chunk.start, chunk.stop)
        flat, chunk_lengths = dataset._flat_codes(idx)
        if len(flat) == 0:
            continue
        begins = np.cumsum(chunk_lengths) - chunk_lengths
        within = np.arange(len(flat)) - np.repeat(begins, chunk_lengths)
        terms = (flat.astype(np.uint64) + np.uint64(1)) * powers[within]
        nonempty = chunk_lengths > 0
        sums = np.add.reduceat(terms, begins[nonempty], dtype=np.uint64)
        keys[idx[nonempty]] = sums
    return keys ^ (lengths.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F))


def _largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to ``weights`` that sum to ``total``."""
    raw = weights / weights.sum() * total if weights.sum() > 0 else np.zeros(len(weights))
    base = np.floor(raw).astype(np.int64)
    short = total - int(base.sum())
    base[np.argsort(-(raw - base), kind="stable")[:short]] += 1
    return base


def split_indices(dataset: DyckDataset, fractions: Sequence[float] = THESIS_SPLIT,
                  rng: np.random.Generator | int = 0) -> tuple[np.ndarray, ...]:
    """Index arrays of a random split in which no string appears in two parts.

    All copies of a string form one group and go to one part. The groups are laid end to end in a
    uniformly random order and cut at the target sizes (a group straddling a cut goes to the part
    holding its midpoint), so every group lands in a part with probability proportional to that
    part's share: the parts have the same composition in expectation (lengths, kinds, labels).
    Sizes then match the targets exactly, by moving randomly chosen single-copy strings out of
    parts over target, unless there are too few of them. (Placing large duplicate groups
    first, as an earlier version did, sent every heavily repeated short string to the training
    part and skewed the others.)

    Args:
        dataset: the dataset to split.
        fractions: one share per part, summing to 1. The default is the thesis' split: 80% train /
            20% test, then 15% of the training part as validation, i.e. (0.68, 0.12, 0.20).
        rng: a numpy Generator, or a seed for one.

    Returns:
        One sorted int64 index array per part.
    """
    fractions = np.asarray(fractions, dtype=np.float64)
    if fractions.ndim != 1 or len(fractions) == 0:
        raise ValueError(f"fractions must be a non-empty sequence of numbers, got {fractions!r}")
    if (fractions < 0).any() or abs(fractions.sum() - 1.0) > 1e-6:
        raise ValueError(f"fractions must be >= 0 and sum to 1, got {fractions.tolist()}")
    rng = _as_rng(rng)
    n = len(dataset)
    targets = _largest_remainder(fractions, n)
    _, group_of, sizes = np.unique(_string_keys(dataset), return_inverse=True, return_counts=True)
    group_of = group_of.reshape(-1)
    order = rng.permutation(len(sizes))
    midpoints = np.cumsum(sizes[order]) - sizes[order] / 2.0
    part_of_group = np.empty(len(sizes), dtype=np.int64)
    part_of_group[order] = np.minimum(
        np.searchsorted(np.cumsum(targets), midpoints, side="right"), len(targets) - 1)
    # A group straddling a cut leaves parts a few strings off target: move randomly chosen
    # single-copy strings from parts over target to parts under it (exact sizes whenever there
    # are enough singles; they are a random sample, so the composition stays unbiased).
    singles = np.flatnonzero(sizes == 1)
    sizes_now = np.bincount(part_of_group, weights=sizes, minlength=len(targets)).astype(np.int64)
    for over in range(len(targets)):
        for under in range(len(targets)):
            move = min(sizes_now[over] - targets[over], targets[under] - sizes_now[under])
            if over == under or move <= 0:
                continue
            candidates = singles[part_of_group[singles] == over]
            chosen = rng.permutation(candidates)[:move]
            part_of_group[chosen] = under
            sizes_now[over] -= len(chosen)
            sizes_now[under] += len(chosen)
    part_of_item = part_of_group[group_of]
    return tuple(np.flatnonzero(part_of_item == p) for p in range(len(targets)))


def split_dataset(dataset: DyckDataset, fractions: Sequence[float] = THESIS_SPLIT,
                  rng: np.random.Generator | int = 0) -> tuple[DyckDataset, ...]:
    """Split into parts (default train / val / test = 0.68 / 0.12 / 0.20) with no shared string.

    See :func:`split_indices`; the parts share the dataset's buffer.
    """
    return tuple(dataset.subset(idx) for idx in split_indices(dataset, fractions, rng))


def split_by_length(dataset: DyckDataset, max_train_length: int) -> tuple[DyckDataset, DyckDataset]:
    """Out-of-distribution split: lengths ``<= max_train_length`` vs lengths above it.

    Returns:
        ``(short, long)``; no string can be in both since their lengths differ.
    """
    _check_int("max_train_length", max_train_length, 0)
    short = dataset._lengths <= max_train_length
    return dataset.subset(np.flatnonzero(short)), dataset.subset(np.flatnonzero(~short))


# ============================================================================================
# batching
# ============================================================================================


def collate(items: Sequence[dict[str, Any]], tokenizer: DyckTokenizer) -> dict[str, Any]:
    """Batch dataset items (``dataset[i]`` dicts): tokens padded to this batch's longest string.

    Vectorised: the items' codes are concatenated once and laid out by
    :meth:`DyckTokenizer.encode_codes`. Use with ``functools.partial(collate, tokenizer=tok)`` as a
    DataLoader ``collate_fn``; :func:`make_loader` is faster still (no per-item dicts).

    Returns:
        ``tokens`` int64 ``(batch, pos)``, ``labels`` / ``lengths`` / ``depths`` / ``indices``
        int64 ``(batch,)``, ``kinds`` list[str].
    """
    if len(items) == 0:
        raise ValueError("items must not be empty (an empty batch has no shape to pad to)")
    lengths = np.fromiter((len(item["codes"]) for item in items), dtype=np.int64, count=len(items))
    width = int(lengths.max())
    codes = np.full((len(items), width), PAD_CODE, dtype=np.uint8)
    if width:
        codes[np.arange(width) < lengths[:, None]] = np.concatenate([item["codes"] for item in items])
    return {
        "tokens": tokenizer.encode_codes(codes, lengths),
        "labels": torch.tensor([item["label"] for item in items], dtype=torch.int64),
        "lengths": torch.from_numpy(lengths),
        "kinds": [item["kind"] for item in items],
        "depths": torch.tensor([item.get("depth", 0) for item in items], dtype=torch.int64),
        "indices": torch.tensor([item.get("index", -1) for item in items], dtype=torch.int64),
    }


class BatchSampler(torch.utils.data.Sampler):
    """Batches of indices, shuffled per epoch from ``default_rng((seed, epoch))``.

    Each ``iter()`` is one epoch and advances :attr:`epoch`; :meth:`set_epoch` replays an epoch
    (e.g. when resuming), so the order depends only on ``(seed, epoch)``.

    Args:
        n: number of items.
        batch_size: items per batch (the last batch may be smaller unless ``drop_last``).
        shuffle: random order per epoch; otherwise ``0..n-1`` in order.
        seed: seed of the per-epoch order.
        drop_last: drop a final batch smaller than ``batch_size``.
    """

    def __init__(self, n: int, batch_size: int, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False) -> None:
        self.n = _check_int("n", n, 0)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.shuffle = bool(shuffle)
        self.seed = _check_int("seed", seed, 0)
        self.drop_last = bool(drop_last)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` produce epoch ``epoch``'s order."""
        self.epoch = _check_int("epoch", epoch, 0)

    def __len__(self) -> int:
        full, rest = divmod(self.n, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def _epoch_batches(self, rng: np.random.Generator) -> list[np.ndarray]:
        order = rng.permutation(self.n) if self.shuffle else np.arange(self.n)
        return _cut(order, self.batch_size, self.drop_last)

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng((self.seed, self.epoch))
        self.epoch += 1
        for batch in self._epoch_batches(rng):
            yield batch.tolist()


def _cut(order: np.ndarray, batch_size: int, drop_last: bool) -> list[np.ndarray]:
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    return batches


class LengthBucketSampler(BatchSampler):
    """Batches of similar lengths, so per-batch padding stays small.

    Shuffled: each epoch permutes the indices, sorts them by length within chunks of
    ``chunk_batches * batch_size``, cuts batches, then shuffles the order of the batches.
    Not shuffled: all indices sorted by length (stable), cut into consecutive batches.

    Args:
        lengths: ``(n,)`` string lengths.
        batch_size, shuffle, seed, drop_last: as in :class:`BatchSampler`.
        chunk_batches: batches per sorting chunk (larger = tighter lengths, less randomness).
    """

    def __init__(self, lengths: Sequence[int] | np.ndarray, batch_size: int, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False, chunk_batches: int = 50) -> None:
        self.lengths = np.asarray(lengths, dtype=np.int64)
        if self.lengths.ndim != 1:
            raise ValueError(f"lengths must be one-dimensional, got shape {self.lengths.shape}")
        super().__init__(len(self.lengths), batch_size, shuffle, seed, drop_last)
        self.chunk_batches = _check_int("chunk_batches", chunk_batches, 1)

    def _epoch_batches(self, rng: np.random.Generator) -> list[np.ndarray]:
        if not self.shuffle:
            order = np.argsort(self.lengths, kind="stable")
            return _cut(order, self.batch_size, self.drop_last)
        order = rng.permutation(self.n)
        chunk = self.chunk_batches * self.batch_size
        batches: list[np.ndarray] = []
        for begin in range(0, self.n, chunk):
            part = order[begin:begin + chunk]
            part = part[np.argsort(self.lengths[part], kind="stable")]
            batches.extend(_cut(part, self.batch_size, False))
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()  # only the final chunk can end in a short batch
        return [batches[i] for i in rng.permutation(len(batches))]


class BatchLoader:
    """Iterable of batch dicts (one pass = one epoch), built by :meth:`DyckDataset.batch`.

    A lightweight stand-in for a ``DataLoader(num_workers=0)``: each batch is gathered from the
    compact storage with a few numpy operations, with no per-item dicts.
    """

    def __init__(self, dataset: DyckDataset, sampler: BatchSampler,
                 tokenizer: DyckTokenizer) -> None:
        self.dataset = dataset
        self.sampler = sampler
        self.tokenizer = tokenizer

    @property
    def batch_size(self) -> int:
        return self.sampler.batch_size

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for indices in self.sampler:
            yield self.dataset.batch(np.asarray(indices, dtype=np.int64), self.tokenizer)

    def set_epoch(self, epoch: int) -> None:
        """Replay epoch ``epoch``'s order on the next pass."""
        self.sampler.set_epoch(epoch)


def make_loader(dataset: DyckDataset, batch_size: int, shuffle: bool = False,
                bucket: bool = False, seed: int = 0, drop_last: bool = False,
                tokenizer: DyckTokenizer | None = None) -> BatchLoader:
    """Batches of a dataset, padded per batch.

    Args:
        dataset: the data.
        batch_size: strings per batch.
        shuffle: a new random order each epoch (reproducible from ``seed`` and the epoch).
        bucket: group similar lengths (:class:`LengthBucketSampler`); otherwise plain batches.
        seed: seed of the order.
        drop_last: drop a final short batch.
        tokenizer: default ``DyckTokenizer(dataset.alphabet)``.

    Returns:
        A :class:`BatchLoader`; iterate it once per epoch.
    """
    if not isinstance(dataset, DyckDataset):
        raise ValueError(f"dataset must be a DyckDataset, got {type(dataset).__name__}")
    if bucket:
        sampler: BatchSampler = LengthBucketSampler(dataset._lengths, batch_size, shuffle, seed,
                                                    drop_last)
    else:
        sampler = BatchSampler(len(dataset), batch_size, shuffle, seed, drop_last)
    tokenizer = tokenizer if tokenizer is not None else DyckTokenizer(dataset.alphabet)
    return BatchLoader(dataset, sampler, tokenizer)


# ============================================================================================
# JSONL files
# ============================================================================================


def _meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")


def _atomic_writer(path: Path) -> tuple[Any, str]:
    """A binary temp file in ``path``'s directory (so that os.replace is atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    return os.fdopen(fd, "wb"), temp


def _commit(handle: Any, temp: str, path: Path) -> None:
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()
    os.replace(temp, path)


def _meta_digest(meta: dict[str, Any]) -> str:
    body = {key: value for key, value in meta.items() if key != "meta_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode("utf-8")).hexdigest()


def save_jsonl(dataset: DyckDataset, path: str | os.PathLike, spec: DatasetSpec | None = None
               ) -> Path:
    """Write one JSON object per line plus a sidecar ``<path>.meta.json``, both atomically.

    Lines are ``{"string": ..., "label": 1|0, "kind": ..., "length": ...}``. The sidecar records
    the language, the generation parameters (``spec``, default ``dataset.spec``), the number of
    lines and the sha256 of the JSONL bytes, and a digest of itself.

    Returns:
        The JSONL path.
    """
    if not isinstance(dataset, DyckDataset):
        raise ValueError(f"dataset must be a DyckDataset, got {type(dataset).__name__}")
    path = Path(path)
    spec = spec if spec is not None else dataset.spec
    digest = hashlib.sha256()
    handle, temp = _atomic_writer(path)
    try:
        labels = dataset._labels.tolist()
        lengths = dataset._lengths.tolist()
        names = [json.dumps(name) for name in dataset.kind_names]
        kinds = dataset._kind_codes.tolist()
        for chunk in _chunks_by_cells(dataset._lengths.astype(np.int64)):
            strings = dataset.strings(np.arange(chunk.start, chunk.stop))
            lines = [
                f'{{"string": {json.dumps(s, ensure_ascii=False)}, "label": {labels[i]}, '
                f'"kind": {names[kinds[i]]}, "length": {lengths[i]}}}\n'
                for i, s in zip(range(chunk.start, chunk.stop), strings)
            ]
            data = "".join(lines).encode("utf-8")
            digest.update(data)
            handle.write(data)
        _commit(handle, temp, path)
    except BaseException:
        handle.close()
        Path(temp).unlink(missing_ok=True)
        raise
    label_counts = np.bincount(dataset._labels.astype(np.int64), minlength=2)
    meta: dict[str, Any] = {
        "format": _JSONL_FORMAT,
        "format_version": _JSONL_FORMAT_VERSION,
        "dyckbook_version": _version(),
        "data_file": path.name,
        "language": _language_to_dict(dataset.language),
        "spec": spec.to_dict() if spec is not None else None,
        "spec_hash": spec.spec_hash() if spec is not None else None,
        "n_lines": len(dataset),
        "sha256": digest.hexdigest(),
        "label_counts": {"1": int(label_counts[1]), "0": int(label_counts[0])},
        "kind_counts": dataset.kind_counts(),
    }
    meta["meta_sha256"] = _meta_digest(meta)
    meta_path = _meta_path(path)
    handle, temp = _atomic_writer(meta_path)
    try:
        handle.write((json.dumps(meta, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
        _commit(handle, temp, meta_path)
    except BaseException:
        handle.close()
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def _read_meta(path: Path) -> dict[str, Any]:
    meta_path = _meta_path(path)
    if not meta_path.exists():
        raise FileNotFoundError(f"{meta_path}: the sidecar of {path} is missing")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{meta_path}: not valid JSON ({error})") from None
    if not isinstance(meta, dict) or meta.get("format") != _JSONL_FORMAT:
        raise ValueError(f"{meta_path}: not a {_JSONL_FORMAT} sidecar")
    if meta.get("meta_sha256") != _meta_digest(meta):
        raise ValueError(
            f"{meta_path}: the sidecar was edited after it was written (its meta_sha256 does "
            f"not match its contents)")
    return meta


def load_jsonl(path: str | os.PathLike) -> DyckDataset:
    """Read a dataset written by :func:`save_jsonl`, verifying it end to end.

    Checks, in order: the sidecar exists and is unedited; the JSONL has the recorded number of
    lines and sha256; every record has exactly the fields ``string``, ``label``, ``kind``,
    ``length`` with consistent values; every label agrees with membership in the sidecar's
    language.

    Raises:
        FileNotFoundError: the JSONL or its sidecar is missing.
        ValueError: any mismatch; the message names the file and what disagrees (with the line
            number for a bad record).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such JSONL file")
    meta = _read_meta(path)
    meta_path = _meta_path(path)
    digest, n_lines = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            n_lines += block.count(b"\n")
    if n_lines != meta["n_lines"]:
        raise ValueError(
            f"{path}: has {n_lines} lines but {meta_path.name} records {meta['n_lines']} "
            f"(truncated or extended after writing)")
    if digest.hexdigest() != meta["sha256"]:
        raise ValueError(
            f"{path}: sha256 {digest.hexdigest()[:16]}... does not match "
            f"{meta['sha256'][:16]}... recorded in {meta_path.name} (the file was edited "
            f"after writing)")
    language = _language_from_dict(meta["language"])
    spec = DatasetSpec.from_dict(meta["spec"]) if meta.get("spec") is not None else None
    index = AlphabetIndex(language.alphabet)
    builder = _Builder(len(language.alphabet) <= 16)
    labels: list[int] = []
    kinds: list[str] = []
    all_lengths: list[int] = []

    def flush(strings: list[str], first_line: int) -> None:
        try:
            flat, lengths = index.flat(strings)
        except AlphabetError as error:
            raise ValueError(
                f"{path}: line {first_line + error.index}: character {error.char!r} "
                f"(U+{ord(error.char):04X}) at position {error.position} is not in the alphabet "
                f"{language.alphabet!r} of {language.name}") from None
        width = int(lengths.max()) if len(lengths) else 0
        codes = np.full((len(strings), width), PAD_CODE, dtype=np.uint8)
        codes[np.arange(width) < lengths[:, None]] = flat
        member = language.is_member_batch((codes, lengths))
        chunk_labels = np.asarray(labels[len(labels) - len(strings):], dtype=bool)
        wrong = np.flatnonzero(member != chunk_labels)
        if len(wrong):
            i = int(wrong[0])
            verdict = "is not a member" if chunk_labels[i] else "is a member"
            raise ValueError(
                f"{path}: line {first_line + i}: label {int(chunk_labels[i])} but the string "
                f"{_short(strings[i])} {verdict} of {language.name}")
        builder.add(flat.astype(np.uint8), lengths)

    expected = {"string", "label", "kind", "length"}
    pending: list[str] = []
    pending_cells, first = 0, 1
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}: line {number}: not valid JSON ({error.msg})") from None
            if not isinstance(record, dict) or set(record) != expected:
                found = sorted(record) if isinstance(record, dict) else type(record).__name__
                raise ValueError(
                    f"{path}: line {number}: expected the fields {sorted(expected)}, got {found}")
            string, label, kind, length = (record["string"], record["label"], record["kind"],
                                           record["length"])
            if not isinstance(string, str):
                raise ValueError(f"{path}: line {number}: string must be a str, got {string!r}")
            if isinstance(label, bool) or label not in (0, 1):
                raise ValueError(f"{path}: line {number}: label must be 1 or 0, got {label!r}")
            if not isinstance(kind, str) or not kind:
                raise ValueError(f"{path}: line {number}: kind must be a non-empty str, got {kind!r}")
            if (kind == POSITIVE) != (label == 1):
                raise ValueError(
                    f"{path}: line {number}: kind {kind!r} contradicts label {label} (members "
                    f"have kind {POSITIVE!r}, non-members a negative kind)")
            if isinstance(length, bool) or length != len(string):
                raise ValueError(
                    f"{path}: line {number}: length {length!r} but the string has {len(string)} "
                    f"characters")
            pending.append(string)
            labels.append(label)
            kinds.append(kind)
            all_lengths.append(length)
            pending_cells += length
            if pending_cells >= _CHUNK_CELLS:
                flush(pending, first)
                first, pending, pending_cells = number + 1, [], 0
    if pending:
        flush(pending, first)
    buffer, starts, depths = builder.finish()
    kind_names, kind_codes = _kind_table(kinds)
    return DyckDataset(buffer=buffer, packed=builder.packed, starts=starts,
                       lengths=np.asarray(all_lengths, dtype=np.int32),
                       labels=np.asarray(labels, dtype=np.int8), kind_codes=kind_codes,
                       kind_names=kind_names, depths=depths, language=language, spec=spec)


def cache_path(spec: DatasetSpec, cache_dir: str | os.PathLike) -> Path:
    """Where :func:`load_or_generate` keeps the dataset of ``spec`` (named by its spec_hash)."""
    return Path(cache_dir) / f"{spec.language}-k{spec.k}-{spec.spec_hash()[:16]}.jsonl"


def load_or_generate(spec: DatasetSpec, cache_dir: str | os.PathLike) -> DyckDataset:
    """The dataset of ``spec``, from ``cache_dir`` when a verified copy exists, else generated.

    The cache key is :meth:`DatasetSpec.spec_hash`, over every parameter (min_length included,
    unlike the thesis' cache). A cached file that fails verification is regenerated with a
    warning.
    """
    if not isinstance(spec, DatasetSpec):
        raise ValueError(f"spec must be a DatasetSpec, got {type(spec).__name__}")
    path = cache_path(spec, cache_dir)
    if path.exists():
        try:
            dataset = load_jsonl(path)
            if dataset.spec == spec:
                return dataset
            warnings.warn(f"{path}: cached spec differs from the requested one; regenerating",
                          stacklevel=2)
        except (ValueError, FileNotFoundError) as error:
            warnings.warn(f"{path}: cached dataset failed verification ({error}); regenerating",
                          stacklevel=2)
    dataset = generate_dataset(spec)
    save_jsonl(dataset, path, spec=spec)
    return dataset
