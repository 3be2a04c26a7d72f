"""Networks by their config: build one, save one to a file, load it back.

Every network the package trains (the classifier, the thesis' port, the recurrent references,
the encoder-decoder and the decoder-only model) is built from its config here, so that a saved
model needs only its config, its seed and its weights to come back.
"""

from __future__ import annotations

import functools
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dyckbook.experiment.results import write_bytes
from dyckbook.nn import seq2seq, tokenizer
from dyckbook.nn.model import Classifier, ModelConfig
from dyckbook.nn.recurrent import RecurrentClassifier, RecurrentConfig
from dyckbook.nn.seq2seq import Seq2SeqConfig
from dyckbook.nn.thesis_model import ThesisClassifier, ThesisModelConfig

__all__ = ["CONTEXT_BYTES", "MEMORY_ENV", "MODEL_CONFIGS", "build_model", "device_memory",
           "load_model", "save_model", "training_bytes"]

_MODEL_FORMAT = "dyckbook.model/2"  # a file format's name, not a module path: never renamed
#: bytes of device memory this process may fill (the runner gives each kernel its share; a test
#: fakes a card with it); unset: the card's free memory
MEMORY_ENV = "DYCKBOOK_DEVICE_MEMORY"
#: what a CUDA process holds before its first tensor: its context, cuBLAS's workspace, slack
CONTEXT_BYTES = 768 * 2**20

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
        >>> from dyckbook.nn.model import Classifier, ModelConfig
        >>> from dyckbook.experiment.checkpoint import load_model, save_model
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


@functools.lru_cache(maxsize=64)
def _n_params(model: ModelConfig | ThesisModelConfig | Seq2SeqConfig | RecurrentConfig) -> int:
    return sum(p.numel() for p in build_model(model, [0]).parameters())


def training_bytes(config: Any, n_models: int = 1) -> int:
    """Device memory of training ``n_models`` seeds of a run's ``config`` (its ``model``,
    ``train``, ``data``) as one network and scoring them, with a process's
    :data:`CONTEXT_BYTES`: an upper estimate, float32. Weights, gradients, Adam's moments and
    the early stop's copy (5 per parameter); the activations a step keeps, twice (per token and
    layer 12 d_model + 3 d_mlp; per head and layer 4 per key: scores, pattern, mask, gradient;
    a stack RNN's stack per step); an evaluation batch (``tokenizer.eval_rows``), its scores
    too where they are materialised (the thesis' port, sigmoid weights)."""
    m, t, d = config.model, config.train, config.data
    width = getattr(m, "d_model", getattr(m, "d_hidden", 64))
    d_mlp, heads = getattr(m, "d_mlp", 4 * width), getattr(m, "n_heads", 1)
    layers = getattr(m, "n_layers", 0) or (getattr(m, "n_encoder_layers", 0)
                                           + getattr(m, "n_decoder_layers", 0)) or 1
    pos = d.lengths()[1] + 2
    test = max(pos, d.lengths(test=True)[1] + 2)
    rows = n_models * t.batch_size
    attention = 0 if isinstance(m, RecurrentConfig) else 4 * heads * pos ** 2
    stack = pos ** 2 * m.d_stack if isinstance(m, RecurrentConfig) and m.cell == "stack" else 0
    step = rows * layers * (pos * (12 * width + 3 * d_mlp) + attention) + rows * stack
    evaluated = tokenizer.eval_rows(n_models, test, width, "cuda")
    scores = heads * test if isinstance(m, ThesisModelConfig) or \
        getattr(m, "attention", "softmax") != "softmax" else 0
    scoring = n_models * evaluated * test * (4 * width + d_mlp + scores)
    return CONTEXT_BYTES + 4 * (5 * _n_params(m) * n_models + 2 * step + scoring)


def device_memory(device: str | torch.device) -> int:
    """Bytes of ``device`` this process may fill: :data:`MEMORY_ENV` where it is set, else the
    CUDA device's free memory and what torch's cache here holds unused."""
    given = os.environ.get(MEMORY_ENV, "").strip()
    if given:
        if not given.isdigit():
            raise ValueError(f"{MEMORY_ENV} must be a number of bytes, got {given!r}")
        return int(given)
    device = torch.device(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(torch.cuda.mem_get_info(device)[0] + cached)
