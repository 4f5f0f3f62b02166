"""Where tensors live: CUDA when present (and allowed), else CPU."""

from __future__ import annotations

import os

import torch


def default_device() -> torch.device:
    """CUDA if available unless ``LETHE_DEVICE`` says otherwise (e.g. ``cpu`` or ``cuda:1``)."""
    forced = os.environ.get("LETHE_DEVICE")
    if forced:
        return torch.device(forced)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
