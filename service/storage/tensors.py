"""safetensors encoding of model weights (never pickle), the header reader shared with buckets, and the
tensor dtypes the stores hold (bfloat16, which numpy lacks, travels through numpy as its 16 bits)."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as torch_load
from safetensors.torch import save as torch_save

_ALIGN = 8  # safetensors pads its header with spaces so that the data starts 8-byte aligned

TORCH_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
_BITS = {torch.bfloat16: torch.int16}  # numpy holds these as their bits


def dtype_name(dtype: torch.dtype) -> str:
    for name, value in TORCH_DTYPES.items():
        if value == dtype:
            return name
    raise ValueError(f"unsupported tensor dtype {dtype}")


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype holding values of the dtype ``name`` (its bits where numpy lacks it)."""
    bits = _BITS.get(TORCH_DTYPES.get(name, torch.float32))
    return np.dtype(np.int16) if bits is not None else np.dtype(name)


def array_of(t: torch.Tensor) -> np.ndarray:
    """``t`` on the CPU as a numpy array (bfloat16 as its bits: :func:`tensor_of` with its dtype name inverts)."""
    t = t.detach().contiguous().cpu()
    bits = _BITS.get(t.dtype)
    return (t if bits is None else t.view(bits)).numpy()


def tensor_of(array: np.ndarray, dtype: str) -> torch.Tensor:
    """The tensor of dtype ``dtype`` whose values :func:`array_of` gave as ``array`` (shares its memory)."""
    tensor = torch.from_numpy(array)
    wanted = TORCH_DTYPES[dtype]
    return tensor.view(wanted) if wanted in _BITS else tensor


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
