"""How a channel computes (hookviz.channel_filter): the right convolution is found, and at any
position the input patch times the kernel, plus the bias, is the network's own output there,
for plain, strided, grouped, depthwise, dilated, "same"-padded and reflect-padded convolutions."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import hookviz


def corners(layer_map: np.ndarray) -> list[tuple[int, int]]:
    """The four corners (where padding is read) and the middle."""
    h, w = layer_map.shape
    return [(0, 0), (0, w - 1), (h - 1, 0), (h - 1, w - 1), (h // 2, w // 2)]


def check_every_position(loaded, image, layer, channel) -> hookviz.ChannelFilter:
    plain = hookviz.channel_filter(loaded, layer, channel, image)
    for position in corners(plain.layer_map):
        at = hookviz.channel_filter(loaded, layer, channel, image, position).at
        assert at.matches, (layer, position, at.value, at.reference)
        assert at.patch.shape == plain.kernel.shape
        assert np.isclose(at.contributions.sum() + plain.bias, at.value, atol=1e-4)
        assert np.isclose(at.activation, plain.layer_map[position], atol=1e-6)
    return plain


@pytest.mark.parametrize(
    ("layer", "channel", "conv"),
    [
        ("conv1", 3, "conv1"),  # 7x7, stride 2, padding 3, reads the image
        ("layer2.0.conv1", 1, "layer2.0.conv1"),  # 3x3, stride 2
        ("layer2.0.downsample.0", 9, "layer2.0.downsample.0"),  # 1x1, stride 2
        ("layer3", 40, "layer3.1.conv2"),  # a stage: its last convolution
        ("bn1", 5, "conv1"),  # a BatchNorm: the convolution before it
    ],
)
def test_resnet_patch_times_kernel_is_the_networks_output(resnet18, sample, layer, channel, conv):
    found = check_every_position(resnet18, sample, layer, channel)
    assert found.conv == conv
    module = resnet18.model.get_submodule(conv)
    assert np.array_equal(found.kernel, module.weight[channel].detach().numpy())


@pytest.mark.parametrize(
    ("layer", "channel"),
    [("conv_stem", 7), ("blocks.5.0.conv_dw", 300), ("blocks.5", 100), ("blocks.2.1", 20)],
)
@pytest.mark.slow
def test_lite0_same_padding_and_depthwise_kernels_match(lite0, sample, layer, channel):
    found = check_every_position(lite0, sample, layer, channel)
    conv = lite0.model.get_submodule(found.conv)
    assert isinstance(conv, nn.Conv2d)
    assert np.array_equal(found.kernel, conv.weight[channel].detach().numpy())
    if conv.groups > 1:  # depthwise: each output channel reads only its own input channel
        assert found.kernel.shape[0] == 1 and list(found.input_channels) == [channel]


def test_the_block_filter_is_its_last_convolution_of_that_width(lite0, sample):
    found = hookviz.channel_filter(lite0, "blocks.5", 3)
    block = lite0.model.get_submodule("blocks.5")
    convs = [
        f"blocks.5.{name}"
        for name, m in block.named_modules()
        if isinstance(m, nn.Conv2d) and m.out_channels == 192
    ]
    assert found.conv == convs[-1] and found.input_maps is None and found.at is None


def test_vgg_inplace_relu_does_not_rewrite_the_convolutions_output(vgg11, sample):
    conv = check_every_position(vgg11, sample, "features.0", 3)
    relu = check_every_position(vgg11, sample, "features.1", 3)
    assert relu.conv == "features.0"
    assert (relu.layer_map >= 0).all() and (conv.layer_map < 0).any()


class _Odd(nn.Module):
    """Dilated, reflect-padded, grouped and 'same'-padded convolutions on top of one another."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.dilated = nn.Conv2d(3, 8, 3, padding=2, dilation=2, padding_mode="reflect")
        self.grouped = nn.Conv2d(8, 12, 3, stride=2, padding=1, groups=4)
        self.same = nn.Conv2d(12, 6, 4, padding="same", bias=False)
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.same(self.grouped(self.dilated(x).relu()).relu())
        return self.head(x.mean(dim=(2, 3)))


@pytest.mark.parametrize(("layer", "channel"), [("dilated", 5), ("grouped", 7), ("same", 2)])
def test_unusual_geometry_matches(layer, channel):
    prep = hookviz.Preprocessing(size=40, mean=(0.5,) * 3, std=(0.25,) * 3)
    loaded = hookviz.wrap_model(_Odd(), num_classes=3, preprocessing=prep, device="cpu")
    image = hookviz.sample_image().resize((53, 40))
    found = check_every_position(loaded, image, layer, channel)
    if layer == "grouped":  # group 2 of 4 (channels 6-8 of 12) reads input channels 4-5
        assert list(found.input_channels) == [4, 5]


def test_the_input_maps_are_the_previous_layers_feature_maps(resnet18, sample):
    found = hookviz.channel_filter(resnet18, "layer2.0.conv1", 1, sample)
    previous = hookviz.feature_maps(resnet18, sample, "layer1").activations.numpy()
    assert np.allclose(found.input_maps, previous, atol=1e-5)
    own = hookviz.feature_maps(resnet18, sample, "layer2.0.conv1").activations[1].numpy()
    assert np.allclose(found.layer_map, own, atol=1e-5)


def test_the_strongest_inputs_are_the_largest_kernel_norms(resnet18):
    found = hookviz.channel_filter(resnet18, "layer3.0.conv2", 11)
    norms = np.linalg.norm(found.kernel.reshape(found.kernel.shape[0], -1), axis=1)
    assert np.allclose(found.input_norms, norms, atol=1e-6)
    strongest = found.strongest_inputs(5)
    assert strongest == list(np.argsort(-norms, kind="stable")[:5])


def test_a_first_layer_kernel_is_an_rgb_picture(resnet18):
    stem = hookviz.channel_filter(resnet18, "conv1", 0)
    assert stem.first_layer
    picture = stem.rgb_kernel()
    assert picture.shape == (7, 7, 3) and picture.min() >= 0 and picture.max() <= 1
    assert np.isclose(np.abs(picture - 0.5).max(), 0.5)  # the largest weight reaches an end
    deeper = hookviz.channel_filter(resnet18, "layer1.0.conv1", 0)
    assert not deeper.first_layer
    with pytest.raises(hookviz.LayerError, match="does not read the image"):
        deeper.rgb_kernel()


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "words"),
    [
        (("layer1", 64), {}, hookviz.LayerError, "channels 0 to 63"),
        (("layer9", 1), {}, hookviz.LayerError, "not found"),
        (("fc", 1), {}, hookviz.LayerError, "does not output feature maps"),
        (("layer1", 1), {"position": (0, 0)}, ValueError, "give the image"),
        (("layer1", 1), {"image": "sample", "position": (500, 0)}, hookviz.LayerError, "off"),
    ],
)
def test_bad_requests_get_a_clear_message_and_leave_no_hook(
    resnet18, sample, args, kwargs, error, words
):
    hooks = hookviz.count_hooks(resnet18.model)
    if kwargs.get("image") == "sample":
        kwargs = {**kwargs, "image": sample}
    with pytest.raises(error, match=words):
        hookviz.channel_filter(resnet18, *args, **kwargs)
    assert hookviz.count_hooks(resnet18.model) == hooks
    hookviz.channel_filter(resnet18, "layer1", 1, sample, (2, 2))
    assert hookviz.count_hooks(resnet18.model) == hooks


def test_a_transformers_token_layer_has_no_convolution_behind_it():
    loaded = hookviz.load_model("timm:vit_tiny_patch16_224", pretrained=False)
    with pytest.raises(hookviz.LayerError):
        hookviz.channel_filter(loaded, "blocks.2", 0)
    patches = hookviz.channel_filter(loaded, "patch_embed.proj", 4, hookviz.sample_image(), (1, 1))
    assert patches.first_layer and patches.kernel.shape == (3, 16, 16) and patches.at.matches
