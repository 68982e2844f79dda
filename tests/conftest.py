"""Shared fixtures. Tests never touch the network: weight downloads are switched off and the
torch hub cache points at an empty temporary folder, so only bundled weights and files a test
places itself can load."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch

# Set before any test imports hookviz or torchvision so nothing sees the real hub cache.
os.environ["HOOKVIZ_OFFLINE"] = "1"
os.environ["TORCH_HOME"] = tempfile.mkdtemp(prefix="hookviz-torch-home-")

import hookviz


@pytest.fixture(scope="session")
def resnet18() -> hookviz.LoadedModel:
    """An untrained ResNet-18 (seeded): real architecture, in-place ReLUs, shared modules."""
    torch.manual_seed(0)
    return hookviz.load_model("resnet18", pretrained=False, device="cpu")


@pytest.fixture(scope="session")
def vgg11() -> hookviz.LoadedModel:
    """An untrained VGG-11 (seeded): every conv is followed by ReLU(inplace=True)."""
    torch.manual_seed(0)
    return hookviz.load_model("vgg11", pretrained=False, device="cpu")


@pytest.fixture(scope="session")
def lite0() -> hookviz.LoadedModel:
    """The bundled, pretrained EfficientNet-Lite0."""
    return hookviz.load_model("efficientnet_lite0", device="cpu")


@pytest.fixture(scope="session")
def sample() -> object:
    """The sample photo (Grace Hopper, 512x600)."""
    return hookviz.sample_image()


def random_input(height: int = 224, width: int = 224, seed: int = 0) -> torch.Tensor:
    """A reproducible (1, 3, H, W) preprocessed-looking input."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(1, 3, height, width, generator=generator)


# Where the browser tests write their screenshots and timings.
ARTIFACTS = (
    Path(
        os.environ.get(
            "HOOKVIZ_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"
        )
    )
    / "browser"
)


def pytest_terminal_summary(terminalreporter) -> None:
    """Say where the browser tests left their screenshots and timings."""
    if ARTIFACTS.exists():
        terminalreporter.write_line(f"browser screenshots and timings: {ARTIFACTS}")
