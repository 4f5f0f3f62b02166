"""safetensors encoding of model weights (never pickle), and the header reader shared with buckets."""

from __future__ import annotations

import json
import struct
from typing import Any

import torch
from safetensors.torch import load as torch_load
from safetensors.torch import save as torch_save

_ALIGN = 8  # safetensors pads its header with spaces so that the data starts 8-byte aligned


def _header(blob: bytes) -> tuple[int, dict[str, Any]]:
    """A safetensors blob's header: its length in bytes and its JSON (the format: u64 length, JSON)."""
    (size,) = struct.unpack("<Q", blob[:8])
    return size, json.loads(blob[8 : 8 + size])


def canonical(blob: bytes) -> bytes:
    """The blob with a deterministic header, so equal content gets an equal digest."""
    size, header = _header(blob)
    if "__metadata__" in header:
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % _ALIGN)
    return struct.pack("<Q", len(text)) + text + blob[8 + size :]


def read_metadata(blob: bytes) -> dict[str, str]:
    return dict(_header(blob)[1].get("__metadata__") or {})


def encode_weights(weights: torch.Tensor, spec: dict[str, Any]) -> bytes:
    """One flat tensor ``weights``; the model spec in the metadata, so the file is self-describing."""
    return canonical(
        torch_save({"weights": weights.detach().contiguous().cpu()}, metadata={"spec": json.dumps(spec)})
    )


def decode_weights(blob: bytes) -> torch.Tensor:
    return torch_load(blob)["weights"]


def encode_artifact(name: str, tensor: torch.Tensor) -> bytes:
    """A method's own tensor (``MethodState.artifacts``), under its name."""
    return canonical(torch_save({name: tensor.detach().contiguous().cpu()}))


def decode_artifact(blob: bytes) -> torch.Tensor:
    (tensor,) = torch_load(blob).values()
    return tensor
