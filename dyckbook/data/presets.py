"""The thesis' seven experiments as data: Tables 4.2, 5.1, 5.2 and what its notebook ran."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["GENERATORS", "SPLITS", "THESIS_EXPERIMENTS", "THESIS_RESULTS", "ReportedResult",
           "ThesisData", "ThesisExperiment", "thesis_experiment", "thesis_result"]

#: "0.1.8": the library as released (``dyckbook.data.thesis.thesis_samples``); "pre-2024-09-03": the
#: library before that day's fix, whose negatives are uniform strings (not ported).
GENERATORS = ("0.1.8", "pre-2024-09-03")
#: "thesis": one random_split into int(0.8 n), int(0.15 int(0.8 n)) and the rest;
#: "80/20": random_split(data, [0.8, 0.2]) into train and validation, the test set apart.
SPLITS = ("thesis", "80/20")


@dataclass(frozen=True)
class ThesisData:
    """One ``generate_dataset`` call of the thesis' notebook (the library's seed is always 42)."""

    n: int  # strings
    k: int  # bracket types
    min_length: int  # shortest length drawn
    max_length: int  # longest length drawn
    balanced: float = 0.5  # share of members
    generator: str = "0.1.8"  # library version that wrote the (cached) file, one of GENERATORS

    def __post_init__(self) -> None:
        if self.generator not in GENERATORS:
            raise ValueError(f"ThesisData.generator must be one of {GENERATORS}, "
                             f"got {self.generator!r}")


@dataclass(frozen=True)
class ThesisExperiment:
    """One experiment: the thesis' tables, its stated data, and the notebook's literal recipe.

    Architecture fields carry ``ThesisModelConfig``'s names (see :meth:`architecture`).
    """

    experiment: int  # row of Tables 4.2, 5.1, 5.2
    # --- Table 4.2 ---
    n_layers: int  # N
    d_model: int  # d_model
    d_mlp: int  # d_ff
    n_heads: int  # h
    dropout: float  # P_drop
    mask: str  # masking: "bidirectional" (pad keys hidden) or "causal"
    pos_encoding: str  # PE: "none", or "absolute" for the table's i/n (pos / (n_ctx + 2))
    n_ctx: int  # context length (the library's max_seq_len)
    k: int  # |Σ| / 2: bracket types of the model's vocabulary
    # --- Table 5.1 (Adam, cross-entropy) ---
    lr: float  # learning rate
    epochs: int  # passes over the training split
    # --- the data as the thesis describes it (Section 4.1) ---
    stated_lengths: tuple[int, int]  # (min, max) training length
    # --- what the notebook ran (notes/thesis_experiments.md) ---
    data: ThesisData  # the dataset object the training cell used
    split: str  # how it was split, one of SPLITS
    seeded_split: bool  # the split was torch's first draw after torch.manual_seed(42)
    batch_sizes: tuple[int, int, int] | None  # (train, val, test) loaders; None: not recorded
    test_data: ThesisData | None = None  # a separate test set (experiment 6), else None
    stated_test_lengths: tuple[int, int] | None = None  # (min, max) of that test set, as stated
    reuses: int | None = None  # experiment whose dataset object the cell reused, else None
    note: str = ""  # where the notebook departs from the text

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"ThesisExperiment.split must be one of {SPLITS}, got {self.split!r}")

    def architecture(self) -> dict[str, Any]:
        """Keyword arguments of the thesis' model (``ThesisModelConfig``)."""
        names = ("k", "n_ctx", "d_model", "n_heads", "d_mlp", "n_layers", "pos_encoding",
                 "mask", "dropout")
        return {name: getattr(self, name) for name in names}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ThesisExperiment:
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"ThesisExperiment.from_dict got unknown keys {unknown}")
        data = {key: ThesisData(**value) if key in ("data", "test_data") and value is not None
                else tuple(value) if isinstance(value, list) else value
                for key, value in data.items()}
        return cls(**data)


@dataclass(frozen=True)
class ReportedResult:
    """One row of Table 5.2: accuracy in percent; loss as printed (the last batch's W&B value)."""

    experiment: int  # row
    train_acc: float  # training accuracy, %
    train_loss: float  # training loss
    val_acc: float  # validation accuracy, %
    val_loss: float  # validation loss
    test_acc: float  # test accuracy, %
    test_loss: float  # test loss


_ARCH = {"n_layers": 2, "d_model": 256, "d_mlp": 512, "n_heads": 1, "dropout": 0.1,
         "pos_encoding": "none", "n_ctx": 16}
_DYCK1, _DYCK3 = ThesisData(10_000, 1, 0, 16), ThesisData(15_000, 3, 0, 16)

#: Tables 4.2 + 5.1 and the notebook's recipes, keyed by experiment number.
THESIS_EXPERIMENTS: dict[int, ThesisExperiment] = {e.experiment: e for e in (
    ThesisExperiment(1, **_ARCH, mask="bidirectional", k=1, lr=1e-5, epochs=20,
                     stated_lengths=(0, 16), data=_DYCK1, split="thesis", seeded_split=True,
                     batch_sizes=(32, 8, 4)),
    ThesisExperiment(2, **_ARCH, mask="causal", k=1, lr=1e-4, epochs=10, stated_lengths=(0, 16),
                     data=_DYCK1, split="thesis", seeded_split=True, batch_sizes=(32, 8, 4),
                     reuses=1, note="trained on experiment 1's split and loaders"),
    ThesisExperiment(3, **_ARCH, mask="bidirectional", k=3, lr=1e-5, epochs=15,
                     stated_lengths=(0, 16), data=_DYCK3, split="thesis", seeded_split=False,
                     batch_sizes=(32, 32, 8), note="split after experiments 1-2 in one session"),
    ThesisExperiment(4, **_ARCH, mask="causal", k=3, lr=1e-5, epochs=15, stated_lengths=(0, 16),
                     data=_DYCK3, split="thesis", seeded_split=True, batch_sizes=None,
                     note="its notebook cells are lost; the data match the seeded split"),
    ThesisExperiment(5, **{**_ARCH, "n_layers": 3, "pos_encoding": "absolute"}, mask="causal",
                     k=3, lr=1e-5, epochs=15, stated_lengths=(0, 16), data=_DYCK3,
                     split="thesis", seeded_split=False, batch_sizes=None,
                     note="cells lost; 49.72% / 50.58% = 895/1800, 607/1200: another permutation"),
    ThesisExperiment(6, **{**_ARCH, "d_mlp": 384, "n_ctx": 128}, mask="bidirectional", k=3,
                     lr=1e-5, epochs=25, stated_lengths=(0, 96),
                     data=ThesisData(50_000, 3, 96, 96, generator="pre-2024-09-03"),
                     split="80/20", seeded_split=False, batch_sizes=(64, 64, 8),
                     test_data=ThesisData(10_000, 3, 32, 128, generator="pre-2024-09-03"),
                     stated_test_lengths=(32, 128),
                     note="the cache (named without min_length) served the length-96 file of "
                          "2024-09-01 to the 0-96 call"),
    ThesisExperiment(7, **{**_ARCH, "d_model": 384, "d_mlp": 768, "n_ctx": 4096},
                     mask="bidirectional", k=3, lr=1e-5, epochs=100, stated_lengths=(0, 4096),
                     data=_DYCK1, split="thesis", seeded_split=False, batch_sizes=(32, 8, 4),
                     reuses=1, note="split experiment 1's Dyck-1 dataset again; the 500k "
                                    "strings of length 0-4096 were loaded, never used"),
)}

#: Table 5.2, keyed by experiment number ("0.0000" is 0.0).
THESIS_RESULTS: dict[int, ReportedResult] = {r.experiment: r for r in (
    ReportedResult(1, 100.0, 6e-5, 100.0, 1e-5, 100.0, 1e-5),
    ReportedResult(2, 50.425, 0.7087, 49.42, 0.6860, 52.25, 0.7005),
    ReportedResult(3, 100.0, 2e-5, 100.0, 1e-5, 100.0, 1e-5),
    ReportedResult(4, 49.62, 0.6875, 50.61, 0.6933, 49.92, 0.6891),
    ReportedResult(5, 49.47, 0.6725, 49.72, 0.6941, 50.58, 0.6941),
    ReportedResult(6, 100.0, 1e-5, 100.0, 0.0, 74.98, 3.0529),
    ReportedResult(7, 100.0, 2e-5, 100.0, 0.0, 100.0, 0.0),
)}


def _check(experiment: Any) -> int:
    if type(experiment) is not int or experiment not in THESIS_EXPERIMENTS:
        raise ValueError(f"experiment must be one of {sorted(THESIS_EXPERIMENTS)}, "
                         f"got {experiment!r}")
    return experiment


def thesis_experiment(experiment: int) -> ThesisExperiment:
    """The preset of thesis experiment 1-7 (ValueError for any other number)."""
    return THESIS_EXPERIMENTS[_check(experiment)]


def thesis_result(experiment: int) -> ReportedResult:
    """The thesis' Table 5.2 row of experiment 1-7 (ValueError for any other number)."""
    return THESIS_RESULTS[_check(experiment)]
