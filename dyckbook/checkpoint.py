"""Networks by their config: build one, save one to a file, load it back.

Every network the package trains (the classifier, the thesis' port, the recurrent references,
the encoder-decoder and the decoder-only model) is built from its config here, so that a saved
model needs only its config, its seed and its weights to come back.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from dyckbook import seq2seq
from dyckbook.model import Classifier, ModelConfig
from dyckbook.recurrent import RecurrentClassifier, RecurrentConfig
from dyckbook.results import write_bytes
from dyckbook.seq2seq import Seq2SeqConfig
from dyckbook.thesis_model import ThesisClassifier, ThesisModelConfig

__all__ = ["MODEL_CONFIGS", "build_model", "load_model", "save_model"]

_MODEL_FORMAT = "dyckbook.model/2"

MODEL_CONFIGS = {"classifier": ModelConfig, "thesis": ThesisModelConfig, "seq2seq": Seq2SeqConfig,
                 "recurrent": RecurrentConfig}


def build_model(config: ModelConfig | ThesisModelConfig | Seq2SeqConfig | RecurrentConfig,
                seeds: Sequence[int]) -> nn.Module:
    """The network of a model config, one model per seed (the thesis' port: one seed only)."""
    if isinstance(config, Seq2SeqConfig):
        return seq2seq.build_seq2seq(config, seeds)
    if isinstance(config, RecurrentConfig):
        return RecurrentClassifier(config, seeds)
    if isinstance(config, ThesisModelConfig):
        if len(seeds) != 1:
            raise ValueError(f"the thesis' classifier holds one model, got seeds {list(seeds)}")
        return ThesisClassifier(config, seed=seeds[0])
    return Classifier(config, seeds)


def save_model(path: str | os.PathLike[str], model: torch.nn.Module) -> Path:
    """Write a single model's config, seed and weights (tensors and plain containers only, so
    :func:`load_model` reads it with ``weights_only=True``: nothing in the file is executed)."""
    seeds = list(model.seeds)
    if len(seeds) != 1:
        raise ValueError(f"save_model takes a single model, got one holding {len(seeds)}")
    payload = {"format": _MODEL_FORMAT, "config": model.config.to_dict(), "seed": seeds[0],
               "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()}}
    path = Path(path)
    if path.exists() and not path.is_file():
        raise ValueError(f"refusing to replace {path}: it is not a regular file")
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return write_bytes(path, buffer.getvalue())


def load_model(path: str | os.PathLike[str]) -> torch.nn.Module:
    """Rebuild a model saved by :func:`save_model`: its config, seed and weights.

    The file is read with ``torch.load(weights_only=True)``, so nothing in it is executed.

    Args:
        path: A ``str`` or ``os.PathLike`` (a ``pathlib.Path``): the file ``save_model`` wrote.

    Returns:
        The single model (a ``Classifier``, ``ThesisClassifier``, ``EncoderDecoder`` or
        ``DecoderOnly``) on the CPU, in eval mode, with ``config`` and ``seeds`` as saved.

    Raises:
        FileNotFoundError: no such file.
        ValueError: ``path`` is not a str or path, the file is not a dyckbook model, or its
            weights do not fit its config.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from dyckbook.model import Classifier, ModelConfig
        >>> from dyckbook.checkpoint import load_model, save_model
        >>> model = Classifier(ModelConfig(k=2, n_ctx=10, d_model=8, d_mlp=16), seeds=[7])
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     loaded = load_model(save_model(Path(folder) / "model.pt", model))
        >>> loaded.config == model.config, list(loaded.seeds), loaded.training
        (True, [7], False)
        >>> load_model(7)
        Traceback (most recent call last):
        ...
        ValueError: load_model: path must be a str or os.PathLike, got 7 (int)
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"load_model: path must be a str or os.PathLike, "
                         f"got {path!r} ({type(path).__name__})")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such model file: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many types for foreign or corrupt files
        raise ValueError(f"{path} is not a dyckbook model file ({type(error).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != _MODEL_FORMAT:
        raise ValueError(f"{path} is not a dyckbook model file (format {_MODEL_FORMAT})")
    config = dict(payload["config"])
    kind = config.get("kind")
    if kind not in MODEL_CONFIGS:
        raise ValueError(f"{path} holds an unknown model kind {kind!r}")
    model = build_model(MODEL_CONFIGS[kind].from_dict(config), [int(payload["seed"])])
    try:
        model.load_state_dict(payload["state_dict"])
    except RuntimeError as error:
        raise ValueError(f"the weights in {path} do not fit its config: {error}") from None
    return model.eval()
