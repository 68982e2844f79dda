"""EfficientNet-Lite0..4 in plain torch, module for module timm's ``tf_efficientnet_lite{N}``.

Importing timm costs over a second of a cold start (it imports torchvision, which imports
``torch._dynamo``), and the bundled offline models need nothing from it but the architecture.
So it is built here, and built to be indistinguishable from timm's for everything hookviz does:

- the same module tree: names, class names (``EfficientNet``, ``Conv2dSame``, ``BatchNormAct2d``,
  ``DepthwiseSeparableConv``, ``InvertedResidual``, ``SelectAdaptivePool2d``), base classes
  (``Conv2dSame`` is an ``nn.Conv2d``, ``BatchNormAct2d`` an ``nn.BatchNorm2d``) and the
  ``Identity`` placeholders timm keeps, which run (and are hooked) in the forward pass too;
- the same state dict, so checkpoints saved from timm's model load here and back;
- the same random weights for the same seed: modules are created in timm's order with torch's
  default initialisers, then re-initialised the way TensorFlow's EfficientNet is ("goog" init);
- the same arithmetic: TensorFlow's "same" padding (asymmetric, decided from the input size,
  for the strided convolutions), BatchNorm eps 1e-3, ReLU6.

Only inference and plain training are covered: no drop path, no gradient checkpointing, no
feature-extraction wrapper.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# TensorFlow's BatchNorm epsilon, which the TF-trained weights were fitted with (torch's is 1e-5).
_BN_EPS = 1e-3
_HEAD_CHANNELS = 1280  # not scaled by the channel multiplier in the Lite models
_STEM_CHANNELS = 32  # nor is the stem

# variant: (channel multiplier, depth multiplier, input size, crop fraction, interpolation)
_VARIANTS: dict[int, tuple[float, float, int, float, str]] = {
    0: (1.0, 1.0, 224, 0.875, "bicubic"),
    1: (1.0, 1.1, 240, 0.882, "bicubic"),
    2: (1.1, 1.2, 260, 0.890, "bicubic"),
    3: (1.2, 1.4, 300, 0.904, "bilinear"),
    4: (1.4, 1.8, 380, 0.920, "bilinear"),
}

# The stages of Lite0: (depthwise-separable?, repeats, kernel, stride, expansion, out channels).
# Lite drops EfficientNet's squeeze-excite and swish (for integer accelerators): no SE here.
_STAGES: tuple[tuple[bool, int, int, int, int, int], ...] = (
    (True, 1, 3, 1, 1, 16),
    (False, 2, 3, 2, 6, 24),
    (False, 2, 5, 2, 6, 40),
    (False, 3, 3, 2, 6, 80),
    (False, 3, 5, 1, 6, 112),
    (False, 4, 5, 2, 6, 192),
    (False, 1, 3, 1, 6, 320),
)


def build_efficientnet_lite(variant: int, num_classes: int = 1000) -> nn.Module:
    """EfficientNet-Lite``variant``, randomly initialised exactly as timm's
    ``tf_efficientnet_lite{variant}`` is for the same seed.

    Args:
        variant: 0 to 4.
        num_classes: outputs of the classifier; 0 for none (the pooled features come out).

    Raises:
        ValueError: an unknown variant.
    """
    if variant not in _VARIANTS:
        raise ValueError(f"EfficientNet-Lite has variants 0 to 4, not {variant!r}")
    return EfficientNet(variant, num_classes)


def _make_divisible(value: float, divisor: int = 8) -> int:
    """``value`` rounded to the nearest multiple of ``divisor``, but never more than 10% down."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class Conv2dSame(nn.Conv2d):
    """A convolution with TensorFlow's "same" padding: the input is padded to ``ceil(size /
    stride)`` outputs, the odd pixel at the bottom/right, so the amount depends on the input
    size and is decided at each call (stride 1 with an odd kernel is symmetric and uses a plain
    ``nn.Conv2d`` instead)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, 0, 1, groups, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pads = [
            max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            for size, k, s, d in zip(
                x.shape[-2:], self.kernel_size, self.stride, self.dilation, strict=True
            )
        ]
        pad_h, pad_w = pads
        x = F.pad(x, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2))
        return F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class BatchNormAct2d(nn.BatchNorm2d):
    """BatchNorm, then dropout (none: ``Identity``), then ReLU6 (or ``Identity``).

    A subclass rather than a wrapper, as timm's is, so the state-dict keys stay those of a plain
    BatchNorm (``bn1.weight``, not ``bn1.bn.weight``).
    """

    def __init__(self, num_features: int, eps: float = _BN_EPS, apply_act: bool = True) -> None:
        super().__init__(num_features, eps=eps)
        self.drop = nn.Identity()
        self.act = nn.ReLU6(inplace=True) if apply_act else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.drop(super().forward(x)))


class SelectAdaptivePool2d(nn.Module):
    """Global average pooling to (N, C): timm's pooling module for ``pool_type="avg"``."""

    def __init__(self, pool_type: str = "avg") -> None:
        super().__init__()
        if pool_type != "avg":
            raise ValueError(f"only average pooling is built here, not {pool_type!r}")
        self.pool_type = pool_type
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten(1)

    def is_identity(self) -> bool:
        return False

    def feat_mult(self) -> int:
        return 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.flatten(self.pool(x))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pool_type={self.pool_type}, flatten={self.flatten})"


class DepthwiseSeparableConv(nn.Module):
    """Depthwise kxk, BatchNorm + ReLU6, pointwise 1x1, BatchNorm (linear); a residual when the
    shape is kept. ``aa``, ``se`` and ``drop_path`` are timm's empty slots (``Identity``)."""

    def __init__(self, in_chs: int, out_chs: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.has_skip = stride == 1 and in_chs == out_chs
        self.has_pw_act = False
        self.conv_dw = _conv(in_chs, in_chs, kernel, stride, groups=in_chs)
        self.bn1 = BatchNormAct2d(in_chs)
        self.aa = nn.Identity()
        self.se = nn.Identity()
        self.conv_pw = _conv(in_chs, out_chs, 1)
        self.bn2 = BatchNormAct2d(out_chs, apply_act=False)
        self.drop_path = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.se(self.aa(self.bn1(self.conv_dw(x))))
        x = self.bn2(self.conv_pw(x))
        return self.drop_path(x) + shortcut if self.has_skip else x


class InvertedResidual(nn.Module):
    """MobileNetV2's block: pointwise expansion, depthwise kxk, pointwise linear projection,
    each with BatchNorm (ReLU6 after the first two); a residual when the shape is kept."""

    def __init__(self, in_chs: int, out_chs: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        mid_chs = _make_divisible(in_chs * expand)
        self.has_skip = in_chs == out_chs and stride == 1
        self.conv_pw = _conv(in_chs, mid_chs, 1)
        self.bn1 = BatchNormAct2d(mid_chs)
        self.conv_dw = _conv(mid_chs, mid_chs, kernel, stride, groups=mid_chs)
        self.bn2 = BatchNormAct2d(mid_chs)
        self.aa = nn.Identity()
        self.se = nn.Identity()
        self.conv_pwl = _conv(mid_chs, out_chs, 1)
        self.bn3 = BatchNormAct2d(out_chs, apply_act=False)
        self.drop_path = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x
        x = self.bn2(self.conv_dw(self.bn1(self.conv_pw(x))))
        x = self.bn3(self.conv_pwl(self.se(self.aa(x))))
        return self.drop_path(x) + shortcut if self.has_skip else x


class EfficientNet(nn.Module):
    """EfficientNet-Lite: stem, seven stages of blocks, 1x1 head to 1280 channels, average
    pooling, linear classifier. Attributes and methods are the parts of timm's ``EfficientNet``
    that callers use (``num_classes``, ``num_features``, ``pretrained_cfg``, ``get_classifier``,
    ``forward_features``, ``forward_head``...)."""

    def __init__(self, variant: int, num_classes: int = 1000) -> None:
        super().__init__()
        width, depth, size, crop_pct, interpolation = _VARIANTS[variant]
        self.num_classes = num_classes
        self.in_chans = 3
        self.drop_rate = 0.0
        self.grad_checkpointing = False

        # Creation order matters: each default initialiser draws from the global generator, and
        # the goog init at the end draws after them; timm's order gives timm's seeded weights.
        self.conv_stem = _conv(self.in_chans, _STEM_CHANNELS, 3, stride=2)
        self.bn1 = BatchNormAct2d(_STEM_CHANNELS)
        # timm's block builder makes (and drops) a squeeze-excite probe here, two 8-channel 1x1
        # convolutions with bias, to learn its signature; their initialisation draws too.
        for _ in range(2):
            nn.Conv2d(8, 8, 1)

        stages: list[nn.Sequential] = []
        self.feature_info: list[dict[str, Any]] = []
        channels, reduction = _STEM_CHANNELS, 2
        for index, (separable, repeats, kernel, stride, expand, out) in enumerate(_STAGES):
            out = _make_divisible(out * width)
            # The first and last stages keep one block; the others grow, rounded up.
            if 0 < index < len(_STAGES) - 1:
                repeats = math.ceil(repeats * depth)
            blocks: list[nn.Module] = []
            for block in range(repeats):
                step = stride if block == 0 else 1
                if separable:
                    blocks.append(DepthwiseSeparableConv(channels, out, kernel, step))
                else:
                    blocks.append(InvertedResidual(channels, out, kernel, step, expand))
                channels = out
            reduction *= stride
            stages.append(nn.Sequential(*blocks))
            if index == len(_STAGES) - 1 or _STAGES[index + 1][3] > 1:
                # timm's list of feature taps: the end of each resolution
                tap = {"stage": index + 1, "reduction": reduction, "module": f"blocks.{index}"}
                self.feature_info.append({**tap, "num_chs": out})
        self.blocks = nn.Sequential(*stages)
        self.stage_ends = [info["stage"] for info in self.feature_info]

        self.conv_head = _conv(channels, _HEAD_CHANNELS, 1)
        self.bn2 = BatchNormAct2d(_HEAD_CHANNELS)
        self.num_features = self.head_hidden_size = _HEAD_CHANNELS
        self.global_pool = SelectAdaptivePool2d("avg")
        self.classifier = _classifier(self.num_features, num_classes)

        self.pretrained_cfg = self.default_cfg = {
            "architecture": f"tf_efficientnet_lite{variant}",
            "tag": "in1k",
            "custom_load": False,
            "input_size": (3, size, size),
            "fixed_input_size": False,
            "interpolation": interpolation,
            "crop_pct": crop_pct,
            "crop_mode": "center",
            "mean": (0.5, 0.5, 0.5),
            "std": (0.5, 0.5, 0.5),
            "num_classes": 1000,  # of the pretrained weights, whatever this head has
            "pool_size": (math.ceil(size / 32),) * 2,
            "first_conv": "conv_stem",
            "classifier": "classifier",
            "license": "apache-2.0",
        }
        self.pretrained_model_args: dict[str, Any] = {}
        _init_goog(self)

    def get_classifier(self) -> nn.Module:
        return self.classifier

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the classifier by a fresh one with ``num_classes`` outputs (0: none)."""
        self.num_classes = num_classes
        self.global_pool = SelectAdaptivePool2d(global_pool or self.global_pool.pool_type)
        self.classifier = _classifier(self.num_features, num_classes)
        self.global_pool.train(self.training)
        self.classifier.train(self.training)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The (N, 1280, H/32, W/32) map after the head convolution."""
        x = self.bn1(self.conv_stem(x))
        x = self.blocks(x)
        return self.bn2(self.conv_head(x))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Pool the features and, unless ``pre_logits``, classify them."""
        x = self.global_pool(x)
        if self.drop_rate > 0.0:
            x = F.dropout(x, p=self.drop_rate, training=self.training)
        return x if pre_logits else self.classifier(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))


def _conv(in_chs: int, out_chs: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    """A bias-free convolution with TensorFlow's "same" padding, as timm picks it: static and
    symmetric where it can be (stride 1, odd kernel), computed per input otherwise."""
    if stride == 1 and kernel % 2 == 1:
        return nn.Conv2d(in_chs, out_chs, kernel, padding=kernel // 2, groups=groups, bias=False)
    return Conv2dSame(in_chs, out_chs, kernel, stride=stride, groups=groups, bias=False)


def _classifier(features: int, num_classes: int) -> nn.Module:
    return nn.Linear(features, num_classes) if num_classes > 0 else nn.Identity()


def _init_goog(model: nn.Module) -> None:
    """TensorFlow's EfficientNet initialisation, in module order: convolutions normal with std
    sqrt(2 / fan_out) (fan_out per group), BatchNorm 1 and 0, linear layers uniform in
    +-1/sqrt(out_features)."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            height, width = module.kernel_size
            fan_out = height * width * module.out_channels // module.groups
            nn.init.normal_(module.weight, 0.0, math.sqrt(2.0 / fan_out))
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.BatchNorm2d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Linear):
            bound = 1.0 / math.sqrt(module.weight.size(0))
            nn.init.uniform_(module.weight, -bound, bound)
            nn.init.zeros_(module.bias)
