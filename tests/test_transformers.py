"""Vision transformers (timm ViT / DeiT / register tokens / Swin, torchvision vit_b_16 / swin_t)
against independent references, all with random weights on the CPU.

The oracle for every CAM is pytorch-grad-cam on an unfrozen copy of the same model, with a
``reshape_transform`` written here from what each architecture is known to output: a ViT's
(N, prefix + h*w, C) tokens lose exactly their prefix tokens (class, distillation, registers) and
the rest is laid out row by row on the patch grid of the actual input; a Swin stage's (N, h, w, C)
map is permuted to (N, C, h, w). Feature maps and zero-gradient marks are checked against plain
forward hooks and plain autograd on the raw module."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from safetensors.torch import save

import hookviz

from .conftest import random_input
from .test_methods_reference import REFERENCE, _pearson, _peer

pytorch_grad_cam = pytest.importorskip("pytorch_grad_cam")
timm = pytest.importorskip("timm")

MIN_R = 0.999
# every gradient method hookviz and pytorch-grad-cam both have (Score-CAM needs no gradient)
GRADIENT_METHODS = [m for m in REFERENCE if m != "scorecam" and m in hookviz.METHODS]

# key -> (how it is built, prefix tokens the architecture has, patch size)
VITS = {
    "vit": ("timm:vit_tiny_patch16_224", 1, 16),
    "deit": ("timm:deit_tiny_distilled_patch16_224", 2, 16),  # class + distillation token
    "reg4": ("vit_tiny_patch16_224 with reg_tokens=4", 5, 16),  # class + 4 registers
}
VIT_LAYERS = ["blocks.11.norm1", "blocks.5.norm1", "blocks.5"]  # default, middle norm1, block
NON_SQUARE = (224, 288)  # 14 x 18 patches of 16 pixels


@pytest.fixture(scope="module")
def zoo():
    """key -> LoadedModel, each built on first use (a test of one model loads only that one)."""
    built: dict[str, hookviz.LoadedModel] = {}

    def get(key: str) -> hookviz.LoadedModel:
        if key not in built:
            built[key] = _build(key)
        return built[key]

    return get


def _build(key: str) -> hookviz.LoadedModel:
    if key == "reg4":
        # No registered timm name is a vit_tiny with a class token and 4 registers (the *reg4*
        # names are either headless DINOv2 models at 518 px or avg-pooled with no class token),
        # and a reg_tokens=4 checkpoint does not fit timm:vit_tiny_patch16_224 (extra
        # reg_token, longer pos_embed), so it comes in through wrap_model.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            module = timm.create_model(
                "vit_tiny_patch16_224", reg_tokens=4, num_classes=10, dynamic_img_size=True
            )
        assert module.num_prefix_tokens == 5
        prep = hookviz.Preprocessing(
            size=224, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), interpolation="bicubic",
            multiple=16,
        )  # fmt: skip
        return hookviz.wrap_model(
            module, name="vit_tiny_reg4", num_classes=10, preprocessing=prep, device="cpu"
        )
    name = {"swin": "timm:swin_tiny_patch4_window7_224", "tv_vit": "vit_b_16", "tv_swin": "swin_t"}
    return hookviz.load_model(name.get(key) or VITS[key][0], pretrained=False, device="cpu")


# ---------------------------------------------------------------------------------------------
# the reference's view of each architecture, written here


def _tokens_to_grid(prefix: int, grid: tuple[int, int]):
    """(N, prefix + h*w, C) -> (N, C, h, w): drop exactly ``prefix`` tokens, rows of patches."""
    h, w = grid

    def reshape(tokens: torch.Tensor) -> torch.Tensor:
        assert tokens.dim() == 3 and tokens.shape[1] == prefix + h * w, tokens.shape
        patches = tokens[:, prefix:, :]
        return patches.reshape(tokens.shape[0], h, w, tokens.shape[2]).permute(0, 3, 1, 2)

    return reshape


def _channels_last_to_first(output: torch.Tensor) -> torch.Tensor:
    """A Swin stage's (N, h, w, C) -> (N, C, h, w)."""
    assert output.dim() == 4, output.shape
    return output.permute(0, 3, 1, 2)


def _reference(model, layer, x, target, method, reshape_transform):
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    cam_class = getattr(pytorch_grad_cam, REFERENCE[method])
    module = dict(model.named_modules())[layer]
    with cam_class(model=model, target_layers=[module], reshape_transform=reshape_transform) as cam:
        return cam(input_tensor=x, targets=[ClassifierOutputTarget(target)])[0]


def _agree(loaded, peer, x, layers_and_transforms, methods):
    target = hookviz.predict(loaded, x, k=1)[0].index
    failures = []
    for layer, transform in layers_and_transforms:
        for method in methods:
            ours = hookviz.grad_cam(loaded, x, layer, target, method=method).heatmap
            theirs = _reference(peer, layer, x, target, method, transform)
            assert ours.shape == theirs.shape == tuple(x.shape[-2:])
            r = _pearson(ours, theirs)
            if not r >= MIN_R:
                failures.append((layer, method, round(r, 5)))
    assert not failures, failures
    assert hookviz.count_hooks(loaded.model) == 0


# ---------------------------------------------------------------------------------------------
# 1. every gradient CAM method against pytorch-grad-cam


@pytest.mark.parametrize("method", GRADIENT_METHODS)
@pytest.mark.parametrize("key", list(VITS))
@pytest.mark.slow
def test_timm_vit_methods_agree_with_pytorch_grad_cam_on_a_non_square_input(zoo, key, method):
    loaded = zoo(key)
    _, prefix, patch = VITS[key]
    assert loaded.model.num_prefix_tokens == prefix
    assert loaded.preprocessing.multiple == patch and not loaded.preprocessing.fixed
    x = random_input(*NON_SQUARE, seed=11)
    grid = (NON_SQUARE[0] // patch, NON_SQUARE[1] // patch)  # (14, 18)
    transform = _tokens_to_grid(prefix, grid)
    _agree(loaded, _peer(loaded), x, [(layer, transform) for layer in VIT_LAYERS], [method])


@pytest.mark.slow
def test_scorecam_on_a_vit_agrees_with_pytorch_grad_cam(zoo):
    """Score-CAM masks the input with each upsampled patch-grid channel: on a token layer it
    must agree with the reference as on a CNN (192 channels of a tiny ViT: a few seconds)."""
    loaded = zoo("deit")
    x = random_input(*NON_SQUARE, seed=12)
    _, prefix, patch = VITS["deit"]
    transform = _tokens_to_grid(prefix, (NON_SQUARE[0] // patch, NON_SQUARE[1] // patch))
    _agree(loaded, _peer(loaded), x, [("blocks.11.norm1", transform)], ["scorecam"])


@pytest.mark.slow
def test_the_oracle_tells_a_token_off_by_one_from_the_right_grid(zoo):
    """Negative control: with the register model, a reference that drops one prefix token too
    few (so a register token lands on the first patch and every row shifts) or lays the
    patches out column by column disagrees with hookviz, so the agreement above has teeth."""
    loaded = zoo("reg4")
    peer = _peer(loaded)
    x = random_input(*NON_SQUARE, seed=11)
    target = hookviz.predict(loaded, x, k=1)[0].index
    ours = hookviz.grad_cam(loaded, x, "blocks.5", target).heatmap

    def off_by_one(tokens):
        return tokens[:, 4 : 4 + 14 * 18].reshape(1, 14, 18, -1).permute(0, 3, 1, 2)

    def column_major(tokens):
        return tokens[:, 5:].reshape(1, 18, 14, -1).permute(0, 3, 2, 1)

    for wrong in (off_by_one, column_major):
        theirs = _reference(peer, "blocks.5", x, target, "gradcam", wrong)
        assert _pearson(ours, theirs) < 0.9, wrong.__name__


@pytest.mark.parametrize("method", GRADIENT_METHODS)
@pytest.mark.slow
def test_timm_swin_methods_agree_with_pytorch_grad_cam(zoo, method):
    loaded = zoo("swin")
    assert loaded.preprocessing.fixed
    x = random_input(224, 224, seed=12)
    default = hookviz.default_layer(loaded)
    assert default == "norm"  # the final norm, channels-last too: (N, 7, 7, 768)
    layers = [("layers.2", _channels_last_to_first), (default, _channels_last_to_first)]
    _agree(loaded, _peer(loaded), x, layers, [method])


@pytest.mark.slow
def test_torchvision_vit_b_16_gradcam_agrees_with_pytorch_grad_cam(zoo):
    loaded = zoo("tv_vit")
    x = random_input(224, 224, seed=13)
    transform = _tokens_to_grid(1, (14, 14))
    layers = [hookviz.default_layer(loaded), "encoder.layers.encoder_layer_5"]
    assert layers[0] == "encoder.layers.encoder_layer_11.ln_1"
    _agree(loaded, _peer(loaded), x, [(layer, transform) for layer in layers], ["gradcam"])


@pytest.mark.slow
def test_torchvision_swin_t_gradcam_agrees_with_pytorch_grad_cam(zoo):
    loaded = zoo("tv_swin")
    x = random_input(224, 224, seed=14)
    default = hookviz.default_layer(loaded)
    # torchvision's Swin ends with Permute([0, 3, 1, 2]): from there on the map is (N, C, h, w)
    channels_last = _hooked_output(loaded.model, default, x).shape[-1] == 768
    transform = _channels_last_to_first if channels_last else None
    layers = [("features.5", _channels_last_to_first), (default, transform)]
    _agree(loaded, _peer(loaded), x, layers, ["gradcam"])


# ---------------------------------------------------------------------------------------------
# 2. layers whose gradient is zero by construction


@pytest.mark.parametrize("key", list(VITS))
def test_class_token_vit_marks_the_layers_after_the_last_attention(zoo, key):
    loaded = zoo(key)
    table = hookviz.layer_table(loaded)
    rows = {layer.name: layer for layer in table.layers}
    zero = ["blocks.11.norm2", "blocks.11", "norm"]
    live = ["blocks.11.norm1", "blocks.10", "blocks.5"]
    for name in zero:
        assert rows[name].zero_gradient, name
        assert "class token" in rows[name].note, rows[name].note
    for name in live:
        assert not rows[name].zero_gradient, name
        assert rows[name].note is None
    assert table.default == "blocks.11.norm1"
    assert hookviz.default_layer(loaded) == "blocks.11.norm1"

    # independently: plain autograd on the raw module, the patch-token slice of each gradient
    _, prefix, _ = VITS[key]
    x = random_input(224, 224, seed=15)
    gradients = _patch_token_gradients(_peer(loaded), zero + live, x, prefix)
    for name in zero:
        assert not gradients[name].any(), (name, float(gradients[name].abs().max()))
    for name in live:
        assert gradients[name].abs().max() > 0, name
    assert all(g.shape[1] == 196 for g in gradients.values())  # 14 x 14 patches


SWEEP_PLACE = {"vit": "blocks.{}.norm1", "reg4": "blocks.{}.norm1"}
SWEEP_PLACE["tv_vit"] = "encoder.layers.encoder_layer_{}.ln_1"


@pytest.mark.parametrize(("key", "count"), [("vit", 5), ("vit", 3), ("tv_vit", 5), ("reg4", 2)])
@pytest.mark.slow
def test_a_vit_layer_sweep_walks_its_blocks_at_the_default_place(zoo, key, count):
    """Every ViT block has the same output shape, so grouping by shape found nonsense (the
    final norm with no gradient, the patch embedding, a key norm): the sweep is the default
    layer's place in evenly spaced blocks, ending at the default, each with a gradient and
    each analysed on the patch grid."""
    loaded = zoo(key)
    table = hookviz.layer_table(loaded)
    sweep = hookviz.stage_layers(loaded, count)
    assert 2 <= len(sweep) <= count and sweep[-1] == table.default, sweep
    place = re.compile(re.escape(SWEEP_PLACE[key]).replace(r"\{\}", r"(\d+)"))
    indices = [int(place.fullmatch(name).group(1)) for name in sweep]  # one place per block
    gaps = {b - a for a, b in itertools.pairwise(indices)}
    assert len(gaps) == 1 and gaps.pop() > 0, indices  # evenly spaced, in order
    rows = {layer.name: layer for layer in table.layers}
    assert not any(rows[name].zero_gradient for name in sweep)
    assert len({rows[name].shape for name in sweep}) == 1
    x = random_input(224, 224, seed=16)
    for cam in hookviz.layer_sweep(loaded, x, layers=sweep, target=0):
        assert cam.cam.shape == (14, 14) and cam.cam.max() > 0, cam.layer


def test_swin_has_no_zero_gradient_layer(zoo):
    table = hookviz.layer_table(zoo("swin"))
    assert not [layer.name for layer in table.layers if layer.zero_gradient]
    assert all(layer.note is None for layer in table.layers)


def _patch_token_gradients(model, names, x, prefix):
    """name -> d(sum of logits)/d(output)[:, prefix:] for each module's (N, T, C) output: the
    gradient of its patch tokens, by plain autograd on the raw module."""
    outputs: dict[str, torch.Tensor] = {}
    modules = dict(model.named_modules())
    handles = [
        modules[name].register_forward_hook(lambda m, i, o, name=name: outputs.setdefault(name, o))
        for name in names
    ]
    try:
        logits = model(x)
    finally:
        for handle in handles:
            handle.remove()
    grads = torch.autograd.grad(logits.sum(), [outputs[n] for n in names], allow_unused=True)
    result = {}
    for name, grad in zip(names, grads, strict=True):
        assert outputs[name].dim() == 3, (name, outputs[name].shape)
        grad = torch.zeros_like(outputs[name]) if grad is None else grad
        result[name] = grad[:, prefix:]
    return result


# ---------------------------------------------------------------------------------------------
# 3. feature maps are the patch tokens on the patch grid


def _hooked_output(model, layer, x):
    kept = []
    handle = dict(model.named_modules())[layer].register_forward_hook(
        lambda m, i, o: kept.append(o.detach().clone())
    )
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    assert len(kept) == 1
    return kept[0]


@pytest.mark.parametrize(("key", "layer"), [("vit", "blocks.5"), ("reg4", "blocks.11.norm1")])
def test_vit_feature_maps_are_the_patch_tokens_on_the_grid(zoo, key, layer):
    loaded = zoo(key)
    _, prefix, patch = VITS[key]
    x = random_input(*NON_SQUARE, seed=16)
    h, w = NON_SQUARE[0] // patch, NON_SQUARE[1] // patch
    tokens = _hooked_output(loaded.model, layer, x)  # (1, prefix + h*w, C)
    channels = tokens.shape[2]
    assert tokens.shape == (1, prefix + h * w, channels)
    expected = tokens[0, prefix:].reshape(h, w, channels).permute(2, 0, 1)

    maps = hookviz.feature_maps(loaded, x, layer)
    assert tuple(maps.activations.shape) == (channels, h, w) == (192, 14, 18)
    assert maps.input_size == NON_SQUARE
    torch.testing.assert_close(maps.activations, expected)
    # row-major: the token after the prefix is the top-left patch, the last the bottom-right
    torch.testing.assert_close(maps.activations[:, 0, 0], tokens[0, prefix])
    torch.testing.assert_close(maps.activations[:, -1, -1], tokens[0, -1])
    torch.testing.assert_close(maps.activations[:, 1, 0], tokens[0, prefix + w])
    assert hookviz.count_hooks(loaded.model) == 0


def test_swin_feature_maps_are_the_stage_output_channels_first(zoo):
    loaded = zoo("swin")
    x = random_input(224, 224, seed=17)
    output = _hooked_output(loaded.model, "layers.2", x)  # (1, 14, 14, 384)
    assert output.shape == (1, 14, 14, 384)
    maps = hookviz.feature_maps(loaded, x, "layers.2")
    torch.testing.assert_close(maps.activations, output[0].permute(2, 0, 1))


# ---------------------------------------------------------------------------------------------
# 4. a whole photo


def test_vit_analysis_of_the_sample_photo_keeps_its_aspect_ratio(zoo):
    loaded = zoo("vit")
    image = hookviz.sample_image()
    assert image.size == (512, 600)
    result = hookviz.analyze(loaded, image)
    heatmap = result.cam.heatmap
    assert heatmap.shape == (600, 512) and result.image_size == (600, 512)
    assert np.isfinite(heatmap).all() and heatmap.min() >= 0 and heatmap.max() <= 1
    # short side at the native 224, long side 600 * 224 / 512 = 262.5 rounded to 16 px patches
    height, width = result.features.input_size
    assert (height, width) == (256, 224)
    assert result.features.activations.shape == (192, 16, 14)
    assert result.cam.cam.shape == (16, 14)


@pytest.mark.parametrize("key", ["swin", "tv_vit"])
def test_fixed_size_analysis_of_the_sample_photo_covers_the_whole_image(zoo, key):
    loaded = zoo(key)
    prep = loaded.preprocessing
    assert prep.fixed and prep.size == 224
    image = hookviz.sample_image()
    result = hookviz.analyze(loaded, image)
    heatmap = result.cam.heatmap
    assert heatmap.shape == (600, 512)
    assert np.isfinite(heatmap).all() and heatmap.min() >= 0 and heatmap.max() <= 1
    assert result.features.input_size == (224, 224)  # the native square, whatever the photo

    # the whole photo squashed to the square (no crop), normalised here by hand, gives the
    # same coarse map ...
    resample = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}
    square = image.convert("RGB").resize((224, 224), resample[prep.interpolation])
    pixels = torch.from_numpy(np.asarray(square, dtype=np.float32) / 255.0).permute(2, 0, 1)
    mean, std = torch.tensor(prep.mean).view(3, 1, 1), torch.tensor(prep.std).view(3, 1, 1)
    x = ((pixels - mean) / std)[None]
    by_hand = hookviz.grad_cam(loaded, x, result.cam.layer, result.cam.class_index)
    np.testing.assert_allclose(result.cam.cam, by_hand.cam, rtol=1e-4, atol=1e-6)
    # ... and the heatmap is that map stretched over the whole image, edge to edge
    coarse = torch.from_numpy(result.cam.cam)[None, None]
    stretched = F.interpolate(coarse, size=(600, 512), mode="bilinear", align_corners=False)[0, 0]
    assert _pearson(heatmap, stretched.numpy()) >= 0.9999


# ---------------------------------------------------------------------------------------------
# 5. torchvision's zero-initialised ViT head


def test_torchvision_vit_random_head_is_not_zero_and_its_cam_is_not_blank(zoo):
    from torchvision import models

    # torchvision's own init zeroes the head (shown on a tiny ViT built by the same code), so
    # with random weights every gradient would be zero
    tiny = models.VisionTransformer(
        image_size=32, patch_size=16, num_layers=1, num_heads=2, hidden_dim=32, mlp_dim=64
    )
    assert not tiny.heads.head.weight.any()

    loaded = zoo("tv_vit")
    head = loaded.model.heads.head
    assert head.weight.abs().max() > 0
    x = random_input(224, 224, seed=18)
    cam = hookviz.grad_cam(loaded, x)
    assert cam.layer == "encoder.layers.encoder_layer_11.ln_1"
    assert not cam.blank and cam.cam.max() > 0
    assert cam.heatmap.max() == pytest.approx(1.0)
    gradients = _patch_token_gradients(_peer(loaded), [cam.layer], x, prefix=1)
    assert gradients[cam.layer].abs().max() > 0


# ---------------------------------------------------------------------------------------------
# patch sizes that do not divide half the native size


def test_vit_whose_patch_does_not_divide_half_the_native_size_can_be_analysed():
    """The layer table traces a second, shorter input (half the native size) to tell which
    outputs follow the image; for 32-pixel patches at 224 that is 112 pixels, not a whole
    number of patches, which a ViT refuses."""
    loaded = hookviz.load_model("timm:vit_small_patch32_224", pretrained=False, device="cpu")
    assert loaded.preprocessing.multiple == 32
    x = random_input(224, 288, seed=19)  # 7 x 9 patches
    assert hookviz.default_layer(loaded) == "blocks.11.norm1"
    cam = hookviz.grad_cam(loaded, x)
    assert cam.cam.shape == (7, 9)


@pytest.mark.slow
def test_headless_dinov2_with_registers_loads_from_a_fine_tuned_checkpoint():
    """timm's DINOv2 ViTs are built headless (num_classes=0): the class count comes from the
    checkpoint's ``head`` (timm's classifier name), and the 5 prefix tokens (class + 4
    registers) are dropped. Without a checkpoint it is the embedder it was published as."""
    name = "timm:vit_small_patch14_reg4_dinov2"
    backbone = hookviz.load_model(name, pretrained=False, device="cpu")
    assert backbone.task == "embedding" and backbone.categories == ()
    torch.manual_seed(11)
    original = timm.create_model(name.removeprefix("timm:"), pretrained=False, num_classes=10)
    original.eval()
    loaded = hookviz.load_model(name, checkpoint=save(original.state_dict()), device="cpu")
    assert loaded.num_classes == 10 and loaded.tokens.prefix_tokens == 5
    native = random_input(518, 518, seed=2)  # the original takes only its native size
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(native), original(native), atol=1e-4, rtol=1e-4)
    x = random_input(224, 252, seed=2)  # hookviz's copy takes any: 16 x 18 patches of 14 px
    maps = hookviz.feature_maps(loaded, x, "blocks.11.norm1")
    assert tuple(maps.activations.shape) == (384, 16, 18)


@pytest.mark.slow
def test_timm_models_with_a_fixed_input_size_are_fed_their_square():
    """timm's MaxViT lays its grid attention out for its native size (timm's config says
    ``fixed_input_size``): hookviz feeds it that square and maps the heatmap back over the
    whole photo; a ConvNeXt takes the photo at its aspect ratio."""
    maxvit = hookviz.load_model("timm:maxvit_tiny_tf_224", pretrained=False, device="cpu")
    assert maxvit.preprocessing.fixed and maxvit.preprocessing.input_size(512, 600) == (224, 224)
    image = hookviz.sample_image()
    analysis = hookviz.analyze(maxvit, image)
    assert analysis.features.input_size == (224, 224)
    assert analysis.cam.heatmap.shape == (image.height, image.width)
    convnext = hookviz.load_model("timm:convnext_tiny", pretrained=False, device="cpu")
    assert not convnext.preprocessing.fixed
    assert convnext.preprocessing.input_size(512, 600) == (262, 224)


@pytest.mark.slow
def test_a_fixed_size_vit_with_14_pixel_patches_has_its_blocks_as_layers():
    """At 224 pixels, 14-pixel patches make a 16 x 16 grid, the input's at no power-of-two
    stride (DINOv2, EVA, CLIP-L/14 fine-tunes, fed at their native square): the layer table
    still counts the blocks as maps of the image, so the default is the last block's first
    norm (after the final norm only the class token reaches the head: a blank map), and the
    map there is pytorch-grad-cam's."""
    torch.manual_seed(5)
    network = timm.create_model(
        "vit_small_patch14_dinov2", pretrained=False, num_classes=5, img_size=224
    ).eval()
    square = hookviz.Preprocessing(
        size=224, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), fixed=True
    )
    loaded = hookviz.wrap_model(network, num_classes=5, preprocessing=square, device="cpu")
    assert hookviz.default_layer(loaded) == "blocks.11.norm1"
    maps = hookviz.feature_maps(loaded, random_input(224, 224, seed=3), "blocks.5")
    assert tuple(maps.activations.shape) == (384, 16, 16)
    x = random_input(224, 224, seed=4)
    grid = _tokens_to_grid(1, (16, 16))
    _agree(loaded, _peer(loaded), x, [("blocks.11.norm1", grid), ("blocks.5", grid)], ["gradcam"])
