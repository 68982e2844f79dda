"""Weights files are data, never code: a malicious pickle placed where hookviz loads weights from
(the torch hub cache, or a weights package) is refused without running anything."""

from __future__ import annotations

import sys

import pytest
import torch

import hookviz
from hookviz.models import torchvision_weights_path
from hookviz.models.bundled import BundledSpec, build_bundled


class _Payload:
    """Unpickling this would create a file: the proof that code ran."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _malicious_file(path, marker) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # torch.save pickles whatever it is given; weights_only loading must refuse to rebuild it
    torch.save({"conv1.weight": _Payload(str(marker))}, path)


def test_poisoned_hub_cache_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    marker = tmp_path / "pwned"
    _malicious_file(torchvision_weights_path("resnet18"), marker)
    with pytest.raises(hookviz.ModelUnavailableError, match="could not be read"):
        hookviz.load_model("resnet18", download=False)
    assert not marker.exists()


def test_poisoned_weights_package_is_refused(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    weights = tmp_path / "evil.pth"
    _malicious_file(weights, marker)
    package = tmp_path / "evil_weights_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "class EvilModelFile:\n"
        "    @staticmethod\n"
        f"    def get_model_file_path():\n        return {str(weights)!r}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = BundledSpec(
        name="evil",
        timm_name="tf_efficientnet_lite0",
        package="evil-weights",
        module="evil_weights_pkg",
        file_class="EvilModelFile",
        size=224,
    )
    try:
        with pytest.raises(hookviz.ModelUnavailableError, match="could not read the weights"):
            build_bundled(spec, pretrained=True)
    finally:
        sys.modules.pop("evil_weights_pkg", None)
    assert not marker.exists()
