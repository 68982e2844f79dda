"""How a channel computes: the convolution behind it, its kernel, and, at one position of the
channel's map, the input patch, the kernel and the value they give (what CNN Explainer shows for
its toy network, for any real CNN).

The convolution behind a layer's channel is the last ``Conv2d`` to run, up to the moment the
layer's output is produced, with as many output channels as the layer has: the layer itself
when it is a convolution, the block's last convolution for a residual block or an inverted
bottleneck (what follows it, normalisation, an activation, a residual sum, keeps the channel
axis), the convolution before a BatchNorm or a ReLU picked on its own. It is found by one
traced forward with hooks that are removed after it, under the model's lock.

At a position, the patch is read from the convolution's real input (captured by a pre-hook) with
the convolution's own padding (fixed, or timm's "same" padding computed at run time), and
``value = sum(patch * kernel) + bias`` is checked against the convolution's real output there
(``reference``), so what the page shows is the arithmetic the network did.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..core.hooks import StopForward, forward_hooks, resolve_modules
from ..core.inputs import ImageInput, prepare_input
from ..core.loaded import LoadedModel
from ..errors import LayerError


@dataclass(frozen=True)
class PatchProduct:
    """The convolution at one position of the channel's map.

    Attributes:
        position: (y, x) on the convolution's output grid.
        patch: (inputs, kh, kw) the input values under the kernel (zeros where it overhangs
            the padded border).
        contributions: (inputs,) each input channel's share: ``sum(patch[i] * kernel[i])``.
        value: ``contributions.sum() + bias``.
        reference: the convolution's own output at ``position`` (``value`` must equal it).
        activation: the layer's output (the channel's map) at the same place.
    """

    position: tuple[int, int]
    patch: np.ndarray = field(repr=False)
    contributions: np.ndarray = field(repr=False)
    value: float
    reference: float
    activation: float

    @property
    def matches(self) -> bool:
        """Whether the patch times the kernel gives the network's own output (float error)."""
        return abs(self.value - self.reference) <= 1e-3 * max(1.0, abs(self.reference))


@dataclass(frozen=True)
class ChannelFilter:
    """The convolution that computes ``channel`` of ``layer``.

    Attributes:
        layer: the layer asked about.
        channel: its channel.
        conv: the dotted name of the ``Conv2d`` that computes it.
        kernel: (inputs, kh, kw) float32, the channel's weights (``inputs`` is the
            convolution's input channels, or one group's for a grouped or depthwise one).
        bias: the channel's bias (0.0 without one).
        input_channels: (inputs,) the input-channel indices the kernel reads.
        input_norms: (inputs,) the L2 norm of the kernel for each of them.
        stride, padding, dilation: the convolution's geometry ((y, x) each; padding as used).
        first_layer: the convolution reads the image itself (its kernel is an RGB picture).
        input_maps: (all input channels, h, w) the convolution's input on the image (None
            without an image).
        layer_map: (h, w) the channel's map at ``layer`` on the image (None without one).
        at: the arithmetic at the position asked (None without a position).
    """

    layer: str
    channel: int
    conv: str
    kernel: np.ndarray = field(repr=False)
    bias: float
    input_channels: np.ndarray = field(repr=False)
    input_norms: np.ndarray = field(repr=False)
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    first_layer: bool
    input_maps: np.ndarray | None = field(default=None, repr=False)
    layer_map: np.ndarray | None = field(default=None, repr=False)
    at: PatchProduct | None = None

    def strongest_inputs(self, count: int = 8) -> list[int]:
        """The input channels the kernel weighs most (largest norm first)."""
        order = np.argsort(-self.input_norms, kind="stable")[:count]
        return [int(self.input_channels[i]) for i in order]

    def rgb_kernel(self) -> np.ndarray:
        """A first-layer kernel as an RGB picture (kh, kw, 3) in [0, 1]: zero weight is grey,
        each channel scaled by the kernel's largest magnitude (so colours compare)."""
        if not self.first_layer or self.kernel.shape[0] != 3:
            raise LayerError(f"{self.conv!r} does not read the image: its kernel is no picture")
        scale = float(np.abs(self.kernel).max()) or 1.0
        return (0.5 + 0.5 * self.kernel.transpose(1, 2, 0) / scale).astype(np.float32)


def channel_filter(
    loaded: LoadedModel,
    layer: str,
    channel: int,
    image: ImageInput | None = None,
    position: tuple[int, int] | None = None,
) -> ChannelFilter:
    """The convolution behind ``channel`` of ``layer``, its kernel and, with an ``image``, its
    input maps, the channel's map and (at ``position``, (y, x) on the channel's map) the patch,
    the kernel and the value they give.

    Raises:
        LayerError: an unknown layer, a channel out of range, no convolution computes the
            channel (a transformer's token layers, a linear head), or a position off the map.
    """
    resolve_modules(loaded.model, [layer])
    if position is not None and image is None:
        raise ValueError("a position is on the channel's map of an image: give the image")
    batch = _input(loaded, image)
    trace = _trace(loaded, layer, batch)
    channels = trace.layer_output.shape[1]
    if not 0 <= channel < channels:
        raise LayerError(
            f"channel {channel} is out of range: {layer!r} has channels 0 to {channels - 1}"
        )
    conv_name, conv, conv_input, conv_output = trace.conv_for(layer, channels)
    per_group = conv.in_channels // conv.groups
    group = channel // (conv.out_channels // conv.groups)
    weight = conv.weight[channel].detach().float().cpu()
    bias = float(conv.bias[channel]) if conv.bias is not None else 0.0
    padded, padding = _padded(conv, conv_input)
    first = conv_input.shape[1] == 3 and torch.equal(conv_input, batch)
    result = ChannelFilter(
        layer=layer,
        channel=channel,
        conv=conv_name,
        kernel=weight.numpy(),
        bias=bias,
        input_channels=np.arange(group * per_group, (group + 1) * per_group),
        input_norms=weight.flatten(1).norm(dim=1).numpy(),
        stride=tuple(conv.stride),
        padding=padding,
        dilation=tuple(conv.dilation),
        first_layer=bool(first),
    )
    if image is None:
        return result
    layer_map = trace.layer_output[0, channel].float().cpu()
    at = None
    if position is not None:
        at = _product(conv, padded, conv_output, layer_map, weight, bias, group, channel, position)
    return replace(
        result,
        input_maps=conv_input[0].float().cpu().numpy(),
        layer_map=layer_map.numpy(),
        at=at,
    )


@dataclass
class _Trace:
    layer_output: torch.Tensor
    # the last convolution to run for each output width: (name, module, input, output)
    convs: dict[int, tuple[str, nn.Conv2d, torch.Tensor, torch.Tensor]]

    def conv_for(
        self, layer: str, channels: int
    ) -> tuple[str, nn.Conv2d, torch.Tensor, torch.Tensor]:
        if channels in self.convs:
            return self.convs[channels]
        raise LayerError(
            f"no convolution computes the channels of {layer!r} (it is not a convolution, "
            "and none with as many output channels runs before it): pick a convolutional layer"
        )


def _trace(loaded: LoadedModel, layer: str, batch: torch.Tensor) -> _Trace:
    """One forward: every Conv2d's input and output up to the layer's output, and that
    output; stopped there (nothing after the layer is needed)."""
    modules = dict(loaded.model.named_modules())
    convs = {name: m for name, m in modules.items() if isinstance(m, nn.Conv2d)}
    # one entry per output width, so memory stays that of a few maps whatever the depth
    ran: dict[int, tuple[str, nn.Conv2d, torch.Tensor, torch.Tensor]] = {}
    found: list[torch.Tensor] = []

    def conv_hook(name):
        def hook(module, args, output):
            # copies: an in-place op downstream (VGG's ReLU(inplace=True)) rewrites the output
            ran[module.out_channels] = (name, module, args[0].clone(), output.clone())

        return hook

    def layer_hook(name):
        def hook(module, args, output):
            if not isinstance(output, torch.Tensor) or output.dim() != 4:
                raise LayerError(
                    f"layer {layer!r} does not output feature maps (N, C, h, w); the channel "
                    "filter is for convolutional layers"
                )
            found.append(output.detach().clone())
            raise StopForward

        return hook

    with (
        loaded.lock,
        torch.no_grad(),
        forward_hooks(convs, conv_hook),
        forward_hooks({layer: modules[layer]}, layer_hook),  # after the convs' own: it stops
        contextlib.suppress(StopForward),
    ):
        loaded.model(batch)
    if not found:
        raise LayerError(f"layer {layer!r} did not run in the forward pass")
    return _Trace(found[0], ran)


def _input(loaded: LoadedModel, image: ImageInput | None) -> torch.Tensor:
    if image is not None:
        return prepare_input(loaded, image)[0]
    size = loaded.preprocessing.size
    return prepare_input(loaded, torch.zeros(1, 3, size, size))[0]  # the mean image


def _padded(conv: nn.Conv2d, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
    """The input as the convolution's arithmetic sees it, padded, and the (top, left) pad."""
    if type(conv).__name__ == "Conv2dSame":
        # timm's TensorFlow-style "same": padding decided at run time from the input size
        pads = []
        for size, k, s, d in zip(
            x.shape[-2:], conv.kernel_size, conv.stride, conv.dilation, strict=True
        ):
            pads.append(max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0))
        (pad_h, pad_w) = pads
        spec = (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2)
        return F.pad(x, spec), (pad_h // 2, pad_w // 2)
    if isinstance(conv.padding, str):  # "same" / "valid" of nn.Conv2d
        if conv.padding == "valid":
            return x, (0, 0)
        total = [d * (k - 1) for k, d in zip(conv.kernel_size, conv.dilation, strict=True)]
        spec = (total[1] // 2, total[1] - total[1] // 2, total[0] // 2, total[0] - total[0] // 2)
    else:
        ph, pw = conv.padding
        spec = (pw, pw, ph, ph)
    mode = "constant" if conv.padding_mode == "zeros" else conv.padding_mode
    return F.pad(x, spec, mode=mode), (spec[2], spec[0])


def _product(conv, padded, conv_output, layer_map, weight, bias, group, channel, position):
    out_h, out_w = conv_output.shape[-2:]
    map_h, map_w = layer_map.shape
    y, x = (int(v) for v in position)
    if not (0 <= y < map_h and 0 <= x < map_w):
        raise LayerError(f"position {(y, x)} is off the {map_h}x{map_w} map")
    # the layer's map can be at another resolution than the convolution's (rare): same place
    cy, cx = min(out_h - 1, y * out_h // map_h), min(out_w - 1, x * out_w // map_w)
    (sh, sw), (dh, dw) = conv.stride, conv.dilation
    kh, kw = conv.kernel_size
    per_group = conv.in_channels // conv.groups
    rows = slice(cy * sh, cy * sh + (kh - 1) * dh + 1, dh)
    cols = slice(cx * sw, cx * sw + (kw - 1) * dw + 1, dw)
    patch = padded[0, group * per_group : (group + 1) * per_group, rows, cols].float().cpu()
    contributions = (patch * weight).flatten(1).sum(dim=1)
    return PatchProduct(
        position=(cy, cx),
        patch=patch.numpy(),
        contributions=contributions.numpy(),
        value=float(contributions.sum()) + bias,
        reference=float(conv_output[0, channel, cy, cx]),
        activation=float(layer_map[y, x]),
    )
