"""safetensors encoding of model weights (never pickle), and the header reader shared with buckets."""

from __future__ import annotations

import json
import struct
from typing import Any

import torch
from safetensors.torch import load as torch_load
from safetensors.torch import save as torch_save


def read_metadata(blob: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors blob (the format: u64 header length, JSON header)."""
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + size])
    return dict(header.get("__metadata__") or {})


def encode_weights(weights: torch.Tensor, spec: dict[str, Any]) -> bytes:
    """One flat tensor ``weights``; the model spec in the metadata, so the file is self-describing."""
    return torch_save({"weights": weights.detach().contiguous().cpu()}, metadata={"spec": json.dumps(spec)})


def decode_weights(blob: bytes) -> torch.Tensor:
    return torch_load(blob)["weights"]


def encode_artifact(name: str, tensor: torch.Tensor) -> bytes:
    """A method's own tensor (``MethodState.artifacts``), under its name."""
    return torch_save({name: tensor.detach().contiguous().cpu()})


def decode_artifact(blob: bytes) -> torch.Tensor:
    (tensor,) = torch_load(blob).values()
    return tensor
