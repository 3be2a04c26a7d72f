"""What a run measured (``RunRecord``, plain data) and what it returns (``RunResult``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dyckbook.experiment.evaluate import Score

if TYPE_CHECKING:
    from torch import nn

    from dyckbook.data.protocol import Splits

__all__ = ["RunRecord", "RunResult"]


@dataclass
class RunRecord:
    """What a run measured: plain data, written and read by ``dyckbook.experiment.results``.

    Attributes:
        config: ``RunConfig.to_dict()``.
        status: ``"ok"`` or ``"failed"`` (see ``FAILURE_RULES``); ``failure`` names the rule.
        train_accuracy: accuracy on (up to 4,000 of) the training strings, eval mode.
        margin_std: spread of the output margin over the test strings.
        scores: ``{test set: Score}`` of the model.
        baselines: ``{test set: {baseline: Score}}``, each fitted on the same training set's
            members and its negatives of that test set's kinds (``baselines.fit_negatives``).
        baseline_train: ``{baseline: accuracy on the training sample}``, fitted for the first
            test set.
        data: realised sizes of every set (``Splits.summary()``).
        steps / stopped_at / seconds / history: from training.
    """

    config: dict[str, Any]
    status: str
    failure: str | None
    train_accuracy: float
    margin_std: float
    scores: dict[str, Score]
    baselines: dict[str, dict[str, Score]]
    baseline_train: dict[str, float]
    data: dict[str, Any]
    steps: int
    stopped_at: int | None
    seconds: float
    n_params: int
    history: list[dict[str, Any]]
    versions: dict[str, str] = field(default_factory=dict)
    label: str = ""  # the configuration's name on the page that ran it
    measures: dict[str, Any] = field(default_factory=dict)  # completion runs: per test set

    @property
    def seed(self) -> int:
        return int(self.config["seed"])

    def accuracy(self, test: str = "hard") -> float:
        """The model's accuracy on one test set."""
        return self.scores[test].accuracy

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k not in ("scores", "baselines")}
        data["scores"] = {k: v.to_dict() for k, v in self.scores.items()}
        data["baselines"] = {k: {b: s.to_dict() for b, s in v.items()}
                             for k, v in self.baselines.items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        data = dict(data)
        data["scores"] = {k: Score.from_dict(v) for k, v in data["scores"].items()}
        data["baselines"] = {k: {b: Score.from_dict(s) for b, s in v.items()}
                             for k, v in data["baselines"].items()}
        return cls(**data)


@dataclass
class RunResult:
    """A record with the trained model and its data, for notebooks that look further."""

    record: RunRecord
    model: nn.Module
    splits: Splits
