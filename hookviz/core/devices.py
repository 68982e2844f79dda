"""Choosing where models run: CUDA, then Apple MPS, then the CPU, decided at run time."""

from __future__ import annotations

import torch


def choose_device(*, cuda: bool, mps: bool) -> torch.device:
    """Pick the best device from what is available (pure: easy to test for every combination).

    Args:
        cuda: whether a CUDA device can be used.
        mps: whether Apple's Metal backend can be used.

    Returns:
        ``cuda`` if available, else ``mps``, else ``cpu``.
    """
    if cuda:
        return torch.device("cuda")
    if mps:
        return torch.device("mps")
    return torch.device("cpu")


def default_device() -> torch.device:
    """The device this machine offers right now (CUDA, then MPS, then CPU)."""
    mps_backend = getattr(torch.backends, "mps", None)
    mps = bool(mps_backend is not None and mps_backend.is_available())
    return choose_device(cuda=torch.cuda.is_available(), mps=mps)


def describe_device(device: torch.device) -> str:
    """A human label, e.g. ``"CUDA (NVIDIA H200)"`` or ``"CPU"``."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"CUDA ({torch.cuda.get_device_name(index)})"
    if device.type == "mps":
        return "Apple MPS"
    return "CPU"
