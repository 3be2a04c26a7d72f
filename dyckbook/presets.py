"""The thesis' seven experiments as data: architecture (Table 4.2), training (Table 5.1), results (Table 5.2).

Source: the 2024 thesis behind ``transformer-checker`` (Tables 4.2, 5.1, 5.2 and Section 5.5.1),
as summarised in ``ANCHORS.md``. Values the thesis does not state are marked ``# not stated`` with
the choice we made. ``notebooks/experiments.yml`` repeats these numbers in its ``runs`` section
(the manifest is the single place a run's parameters are read from); ``tests/test_presets.py``
checks that the manifest's ``thesis`` profile equals these presets, so the two cannot drift.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class ThesisExperiment:
    """One row of the thesis' experiment tables, named with this package's field names."""

    experiment: int  # row number in Tables 4.2 / 5.1 / 5.2
    # --- architecture: Table 4.2 ---
    n_layers: int  # N
    d_model: int  # d_model
    d_mlp: int  # d_ff
    n_heads: int  # h
    dropout: float  # P_drop (0.1 in every row)
    mask: str  # "bidirectional" (the thesis' pad-token mask) or "causal"
    pos_encoding: str  # "none", or "absolute" = i/n (Yao et al.'s encoding, row 5)
    n_ctx: int  # context length: the longest string the model accepts
    alphabet_size: int  # |Σ| = 2k
    # --- training: Table 5.1 (Adam, cross-entropy everywhere) ---
    lr: float
    epochs: int
    # --- data: ANCHORS.md (from the thesis' notebooks) and Section 5.5.1 ---
    n_strings: int  # dataset size before the split
    min_length: int  # shortest training string
    max_length: int  # longest training string
    test_n_strings: int | None = None  # a separate test set (experiment 6 only), else None
    test_min_length: int | None = None
    test_max_length: int | None = None
    # Section 5.5.1 gives 32/8/4 for experiment 1 only; the thesis reuses them (not stated
    # otherwise), so every row carries them.
    batch_size: int = 32
    val_batch_size: int = 8
    test_batch_size: int = 4
    readout: str = "start"  # the thesis classifies from the [start] token's final state
    positive_fraction: float = 0.5  # share of balanced strings in the generated data

    @property
    def k(self) -> int:
        """Number of bracket types (|Σ| / 2)."""
        return self.alphabet_size // 2

    def split_sizes(self) -> tuple[int, int, int]:
        """``(n_train, n_val, n_test)`` as the thesis' notebook splits ``n_strings``.

        ``train = int(0.8 n)``, ``val = int(0.15 train)``, ``test = n - train - val`` (the
        validation set is carved from the remaining 20%, not from the training 80%).
        """
        n_train = int(0.8 * self.n_strings)
        n_val = int(0.15 * n_train)
        return n_train, n_val, self.n_strings - n_train - n_val

    def to_dict(self) -> dict[str, Any]:
        """All fields as a plain dict (plus the derived ``k``)."""
        out = asdict(self)
        out["k"] = self.k
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ThesisExperiment:
        """Inverse of :meth:`to_dict` (ignores the derived ``k``)."""
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names - {"k"}
        if unknown:
            raise ValueError(f"data has unknown ThesisExperiment fields: {sorted(unknown)}")
        return cls(**{key: value for key, value in data.items() if key in names})

    def manifest_params(self) -> dict[str, Any]:
        """The papermill parameters of this experiment's thesis run, named as in the manifest.

        The test split of experiment 6 is the separate out-of-distribution test set.
        """
        n_train, n_val, n_test = self.split_sizes()
        if self.test_n_strings is not None:
            n_test = self.test_n_strings
        return {
            "experiment": self.experiment,
            "k": self.k,
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "d_mlp": self.d_mlp,
            "n_heads": self.n_heads,
            "dropout": self.dropout,
            "mask": self.mask,
            "pos_encoding": self.pos_encoding,
            "readout": self.readout,
            "n_ctx": self.n_ctx,
            "lr": self.lr,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "val_batch_size": self.val_batch_size,
            "test_batch_size": self.test_batch_size,
            "n_train": n_train,
            "n_val": n_val,
            "n_test": n_test,
            "min_length": self.min_length,
            "max_length": self.max_length,
            "test_min_length": (self.test_min_length if self.test_min_length is not None
                                else self.min_length),
            "test_max_length": (self.test_max_length if self.test_max_length is not None
                                else self.max_length),
            "positive_fraction": self.positive_fraction,
        }


@dataclass(frozen=True)
class ReportedResult:
    """One row of the thesis' Table 5.2: accuracy in percent, loss as printed."""

    experiment: int
    train_acc: float
    train_loss: float
    val_acc: float
    val_loss: float
    test_acc: float
    test_loss: float

    def to_dict(self) -> dict[str, Any]:
        """All fields as a plain dict."""
        return asdict(self)


_COMMON: dict[str, Any] = {"n_heads": 1, "dropout": 0.1}

#: Tables 4.2 + 5.1 (+ data protocol), keyed by experiment number.
THESIS_EXPERIMENTS: dict[int, ThesisExperiment] = {
    # Dyck-1 (|Σ| = 2), 10k strings of length 0-16.
    1: ThesisExperiment(1, n_layers=2, d_model=256, d_mlp=512, mask="bidirectional",
                        pos_encoding="none", n_ctx=16, alphabet_size=2, lr=1e-5, epochs=20,
                        n_strings=10_000, min_length=0, max_length=16, **_COMMON),
    2: ThesisExperiment(2, n_layers=2, d_model=256, d_mlp=512, mask="causal",
                        pos_encoding="none", n_ctx=16, alphabet_size=2, lr=1e-4, epochs=10,
                        n_strings=10_000, min_length=0, max_length=16, **_COMMON),
    # Dyck-3 (|Σ| = 6), 15k strings of length 0-16.
    3: ThesisExperiment(3, n_layers=2, d_model=256, d_mlp=512, mask="bidirectional",
                        pos_encoding="none", n_ctx=16, alphabet_size=6, lr=1e-5, epochs=15,
                        n_strings=15_000, min_length=0, max_length=16, **_COMMON),
    4: ThesisExperiment(4, n_layers=2, d_model=256, d_mlp=512, mask="causal",
                        pos_encoding="none", n_ctx=16, alphabet_size=6, lr=1e-5, epochs=15,
                        n_strings=15_000, min_length=0, max_length=16, **_COMMON),
    # Yao et al.'s architecture: 3 layers, causal, i/n positions.
    5: ThesisExperiment(5, n_layers=3, d_model=256, d_mlp=512, mask="causal",
                        pos_encoding="absolute", n_ctx=16, alphabet_size=6, lr=1e-5, epochs=15,
                        n_strings=15_000, min_length=0, max_length=16, **_COMMON),
    # Out-of-distribution lengths: train 50k of length 0-96, test 10k of length 32-128.
    6: ThesisExperiment(6, n_layers=2, d_model=256, d_mlp=384, mask="bidirectional",
                        pos_encoding="none", n_ctx=128, alphabet_size=6, lr=1e-5, epochs=25,
                        n_strings=50_000, min_length=0, max_length=96, test_n_strings=10_000,
                        test_min_length=32, test_max_length=128, **_COMMON),
    # Long context: lengths 0-4096. The dataset size is not stated (the thesis' cell reused
    # experiment 1's 10k short strings); we take 10k strings of length 0-4096.
    7: ThesisExperiment(7, n_layers=2, d_model=384, d_mlp=768, mask="bidirectional",
                        pos_encoding="none", n_ctx=4096, alphabet_size=6, lr=1e-5, epochs=100,
                        n_strings=10_000, min_length=0, max_length=4096, **_COMMON),
}

#: Table 5.2, keyed by experiment number (accuracy in %, loss as printed; "0.0000" is 0.0).
THESIS_RESULTS: dict[int, ReportedResult] = {
    1: ReportedResult(1, 100.0, 6e-5, 100.0, 1e-5, 100.0, 1e-5),
    2: ReportedResult(2, 50.425, 0.7087, 49.42, 0.6860, 52.25, 0.7005),
    3: ReportedResult(3, 100.0, 2e-5, 100.0, 1e-5, 100.0, 1e-5),
    4: ReportedResult(4, 49.62, 0.6875, 50.61, 0.6933, 49.92, 0.6891),
    5: ReportedResult(5, 49.47, 0.6725, 49.72, 0.6941, 50.58, 0.6941),
    6: ReportedResult(6, 100.0, 1e-5, 100.0, 0.0, 74.98, 3.0529),
    7: ReportedResult(7, 100.0, 2e-5, 100.0, 0.0, 100.0, 0.0),
}


def thesis_experiment(experiment: int) -> ThesisExperiment:
    """The preset of one thesis experiment (1-7).

    Raises:
        ValueError: ``experiment`` is not a thesis experiment number.
    """
    if experiment not in THESIS_EXPERIMENTS:
        raise ValueError(f"experiment must be one of {sorted(THESIS_EXPERIMENTS)}, "
                         f"got {experiment!r}")
    return THESIS_EXPERIMENTS[experiment]


def thesis_result(experiment: int) -> ReportedResult:
    """The thesis' reported results (Table 5.2) for one experiment (1-7)."""
    if experiment not in THESIS_RESULTS:
        raise ValueError(f"experiment must be one of {sorted(THESIS_RESULTS)}, got {experiment!r}")
    return THESIS_RESULTS[experiment]
