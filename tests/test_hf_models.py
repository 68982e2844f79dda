"""Hugging Face ``transformers`` image classifiers (``hf:ORG/NAME``) from a local hub cache.

Tiny random-weight models (a ViT, a ConvNeXt, a Swin, a SigLIP and a CLIP classifier) are saved
with their image processors into a temporary cache laid out as the hub lays it out
(``models--ORG--NAME/blobs``, ``snapshots/<commit>`` links, ``refs/main``), then loaded offline:
their labels are ``id2label``, their preprocessing is their processor's, ``predict`` is the
model's own softmax, and Grad-CAM agrees with pytorch-grad-cam at the same layer (token outputs
through ``reshape_transform``: a ViT's after its class token, SigLIP's with none, a Swin stage's
(N, h*w, C) on that stage's own grid) and with a hand computation from a forward hook and
``autograd.grad``.
"""

from __future__ import annotations

import copy
import hashlib
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import hookviz
from hookviz.models import huggingface, registry

transformers = pytest.importorskip("transformers")
pytorch_grad_cam = pytest.importorskip("pytorch_grad_cam")
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget  # noqa: E402

MIN_R = 0.999
VIT = "hf:tiny-org/vit-pets"
CONVNEXT = "hf:tiny-org/convnext-pets"
CONFIG_ONLY = "hf:tiny-org/vit-config-only"
SWIN = "hf:tiny-org/swin-pets"
SIGLIP = "hf:tiny-org/siglip-pets"
CLIP = "hf:tiny-org/clip-pets"
LABELS = {0: "cat", 1: "dog", 2: "hamster"}
_LABELLED = {
    "num_labels": 3,
    "id2label": LABELS,
    "label2id": {name: index for index, name in LABELS.items()},
}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _vit() -> tuple[torch.nn.Module, object]:
    config = transformers.ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        id2label=LABELS,
        label2id={name: index for index, name in LABELS.items()},
    )
    processor = transformers.ViTImageProcessor(
        size={"height": 32, "width": 32},
        image_mean=[0.4, 0.5, 0.6],
        image_std=[0.2, 0.3, 0.25],
        resample=3,
    )
    return transformers.ViTForImageClassification(config), processor


def _convnext() -> tuple[torch.nn.Module, object]:
    config = transformers.ConvNextConfig(
        hidden_sizes=[8, 16],
        depths=[1, 1],
        num_stages=2,
        num_labels=3,
        id2label=LABELS,
        label2id={name: index for index, name in LABELS.items()},
    )
    processor = transformers.ConvNextImageProcessor(
        size={"shortest_edge": 48},
        crop_pct=0.875,
        image_mean=[0.485, 0.456, 0.406],
        image_std=[0.229, 0.224, 0.225],
        resample=2,
    )
    return transformers.ConvNextForImageClassification(config), processor


def _swin() -> tuple[torch.nn.Module, object]:
    # 64 px in 4 px patches: stages on 16x16, 8x8, 4x4 and 2x2 grids. Windows of 2x2 tokens
    # (the last stage's window is its whole grid, as Swin-T's 7x7 at 224 px), and two blocks in
    # the second stage, the second with shifted windows.
    config = transformers.SwinConfig(
        image_size=64,
        patch_size=4,
        embed_dim=8,
        depths=[1, 2, 1, 1],
        num_heads=[1, 1, 2, 2],
        window_size=2,
        **_LABELLED,
    )
    processor = transformers.ViTImageProcessor(
        size={"height": 64, "width": 64}, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    return transformers.SwinForImageClassification(config), processor


def _vision_tower() -> dict:
    return {
        "image_size": 32,
        "patch_size": 8,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
    }


def _siglip() -> tuple[torch.nn.Module, object]:
    config = transformers.SiglipConfig(vision_config=_vision_tower(), **_LABELLED)
    processor = transformers.SiglipImageProcessor(size={"height": 32, "width": 32})
    return transformers.SiglipForImageClassification(config), processor


def _clip() -> tuple[torch.nn.Module, object]:
    config = transformers.CLIPConfig(vision_config=_vision_tower(), **_LABELLED)
    processor = transformers.CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    )
    return transformers.CLIPForImageClassification(config), processor


def _into_cache(cache: Path, repo: str, saved: Path, skip: tuple[str, ...] = ()) -> None:
    """Lay ``saved``'s files out as the hub client caches ``repo``: content-addressed blobs,
    a snapshot folder of relative links to them, and ``refs/main`` naming the snapshot."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / COMMIT
    (folder / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT)
    for path in sorted(saved.iterdir()):
        if path.name in skip:
            continue
        data = path.read_bytes()
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / path.name)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, tuple[torch.nn.Module, object, Path]]:
    """The tiny models with seeded random weights, saved, and their hub cache."""
    root = tmp_path_factory.mktemp("hf")
    cache = root / "hub"
    models = {}
    makers = ((VIT, _vit), (CONVNEXT, _convnext), (SWIN, _swin), (SIGLIP, _siglip), (CLIP, _clip))
    for name, make in makers:
        torch.manual_seed(0)
        module, processor = make()
        folder = root / name.replace("/", "_").replace(":", "_")
        module.save_pretrained(folder)
        processor.save_pretrained(folder)
        _into_cache(cache, huggingface.repo_id(name), folder)
        models[name] = (module.eval(), processor, folder)
    vit_folder = models[VIT][2]
    _into_cache(cache, huggingface.repo_id(CONFIG_ONLY), vit_folder, skip=("model.safetensors",))
    models["cache"] = cache  # type: ignore[assignment]
    return models


@pytest.fixture
def hub(saved, monkeypatch) -> Path:
    cache = saved["cache"]
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HOOKVIZ_OFFLINE", "1")
    return cache


@pytest.fixture
def vit(saved, hub) -> hookviz.LoadedModel:
    return hookviz.load_model(VIT, device="cpu")


@pytest.fixture
def convnext(saved, hub) -> hookviz.LoadedModel:
    return hookviz.load_model(CONVNEXT, device="cpu")


@pytest.fixture
def swin(saved, hub) -> hookviz.LoadedModel:
    return hookviz.load_model(SWIN, device="cpu")


def _photo(height: int, width: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


class Logits(torch.nn.Module):
    """A transformers classifier returning its logits (what pytorch-grad-cam's targets read)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        return self.model(batch).logits


def _reference_cam(model, layer: str, x: torch.Tensor, index: int, reshape=None) -> np.ndarray:
    """pytorch-grad-cam's Grad-CAM on an unfrozen copy (it needs gradients on the weights)."""
    copied = Logits(copy.deepcopy(model)).requires_grad_(True)
    module = copied.model.get_submodule(layer)
    with pytorch_grad_cam.GradCAM(copied, [module], reshape_transform=reshape) as cam:
        return cam(input_tensor=x, targets=[ClassifierOutputTarget(index)])[0]


# --- the cached models load as the hub saved them ----------------------------------------------


def test_a_cached_vit_loads_with_its_labels_preprocessing_and_predictions(saved, vit) -> None:
    module, processor, _ = saved[VIT]
    assert (vit.source, vit.task, vit.pretrained) == ("hf", "classification", True)
    assert vit.categories == ("cat", "dog", "hamster")
    prep = vit.preprocessing
    assert (prep.size, prep.fixed, prep.multiple, prep.interpolation) == (32, True, 8, "bicubic")
    assert prep.mean == pytest.approx(processor.image_mean)
    assert prep.std == pytest.approx(processor.image_std)
    # the whole image, resized to the square as the processor resizes it (the same pixels,
    # but for a few that its resize rounds to the next grey level)
    image = _photo(48, 64)
    theirs = processor(images=image, return_tensors="pt")["pixel_values"]
    ours = prep.to_tensor(image)
    assert ours.shape == theirs.shape == (1, 3, 32, 32)
    levels = (ours - theirs).abs() * torch.tensor(prep.std)[:, None, None] * 255
    assert float(levels.max()) <= 1.0 + 1e-4 and float((levels > 1e-3).float().mean()) < 0.01
    # the saved weights, and the model's own softmax
    with torch.no_grad():
        expected = torch.softmax(module(theirs).logits[0], 0)
    top = hookviz.predict(vit, theirs, k=3)
    assert [p.index for p in top] == expected.argsort(descending=True).tolist()
    assert [p.name for p in top] == [LABELS[p.index] for p in top]
    np.testing.assert_allclose([p.probability for p in top], expected.sort(descending=True)[0])


def test_a_vits_tokens_are_feature_maps_and_its_grad_cam_agrees_with_references(saved, vit) -> None:
    assert vit.tokens is not None
    assert (vit.tokens.prefix_tokens, vit.tokens.patch, vit.tokens.embed_dim) == (1, (8, 8), 32)
    layers = {layer.name: layer for layer in hookviz.layer_table(vit).layers}
    assert "vit.layers.1.layernorm_before" in layers and "vit.layers.0" in layers
    # the last block's output reaches the head through the class token only, and so do its
    # attention's output and MLP: the default is that block's input, normalised (timm's
    # norm1), not the value projection after it (transformers splits attention into modules)
    assert layers["vit.layers.1"].zero_gradient and layers["vit.layers.1.mlp"].zero_gradient
    assert not layers["vit.layers.1.attention.v_proj"].zero_gradient
    default = hookviz.default_layer(vit)
    assert default == "vit.layers.1.layernorm_before"
    layer = "vit.layers.1.attention.v_proj"
    maps = hookviz.feature_maps(vit, _photo(40, 56), layer)
    assert maps.activations.shape == (32, 4, 4)

    x = vit.preprocessing.to_tensor(_photo(40, 56, seed=1))

    def reshape(tokens: torch.Tensor) -> torch.Tensor:
        return tokens[:, 1:, :].reshape(tokens.shape[0], 4, 4, -1).permute(0, 3, 1, 2)

    for at in (layer, default):
        for index in range(3):
            ours = hookviz.grad_cam(vit, x, at, target=index)
            reference = _reference_cam(saved[VIT][0], at, x, index, reshape)
            assert ours.class_name == LABELS[index]
            assert _pearson(ours.heatmap, reference) >= MIN_R

    # by hand: the block's input tokens captured by a hook, their gradient by autograd
    model = copy.deepcopy(saved[VIT][0]).eval()
    captured = {}

    def keep(_module, _inputs, output):
        captured["tokens"] = output

    handle = model.get_submodule(layer).register_forward_hook(keep)
    try:
        logits = model(x).logits
    finally:
        handle.remove()
    (gradient,) = torch.autograd.grad(logits[0, 2], captured["tokens"])
    grid = reshape(captured["tokens"].detach())[0]
    weights = reshape(gradient)[0].mean(dim=(1, 2))
    by_hand = torch.relu((weights[:, None, None] * grid).sum(0))
    ours = hookviz.grad_cam(vit, x, layer, target=2)
    np.testing.assert_allclose(ours.cam, by_hand.numpy(), rtol=1e-4, atol=1e-6)


def test_a_cached_convnext_is_a_cnn_fed_at_its_aspect_ratio(saved, convnext) -> None:
    module, processor, _ = saved[CONVNEXT]
    assert convnext.tokens is None and convnext.categories == ("cat", "dog", "hamster")
    prep = convnext.preprocessing
    assert (prep.size, prep.fixed, prep.interpolation) == (48, False, "bilinear")
    assert prep.crop_fraction == pytest.approx(0.875)
    assert prep.mean == pytest.approx(processor.image_mean)
    image = _photo(60, 90, seed=2)
    x = prep.to_tensor(image)
    assert x.shape == (1, 3, 48, 72)
    with torch.no_grad():
        expected = torch.softmax(module(x).logits[0], 0)
    top = hookviz.predict(convnext, image, k=3)
    np.testing.assert_allclose(
        [p.probability for p in top], expected.sort(descending=True)[0], rtol=1e-5
    )
    layer = "convnext.encoder.stages.1"
    assert layer in [row.name for row in hookviz.list_layers(convnext)]
    for index in range(3):
        ours = hookviz.grad_cam(convnext, x, layer, target=index)
        reference = _reference_cam(module, layer, x, index)
        assert _pearson(ours.heatmap, reference) >= MIN_R


# --- Swin's stages, and ViTs with and without a class token of their own name ------------------

# a layer of each Swin stage -> its map (C, h, w): the 64 px input at strides 4, 8, 16 and 32
SWIN_STAGES = {
    "swin.encoder.layers.0.blocks.0.layernorm_after": (8, 16, 16),
    "swin.encoder.layers.1.blocks.1.layernorm_before": (16, 8, 8),  # shifted windows
    "swin.encoder.layers.1.downsample": (32, 4, 4),
    "swin.encoder.layers.2.blocks.0.mlp": (32, 4, 4),
    "swin.encoder.layers.3.blocks.0.layernorm_after": (64, 2, 2),
    "swin.layernorm": (64, 2, 2),
}


def _square_tokens(prefix: int = 0):
    """pytorch-grad-cam's ``reshape_transform`` for (N, prefix + h*w, C) tokens on a square
    grid (its Swin recipe): the side from the token count, the channels moved first."""

    def reshape(tokens: torch.Tensor) -> torch.Tensor:
        patches = tokens[:, prefix:, :]
        side = math.isqrt(patches.shape[1])
        assert side * side == patches.shape[1], tokens.shape
        return patches.reshape(tokens.shape[0], side, side, -1).permute(0, 3, 1, 2)

    return reshape


def _hooked_output(model: torch.nn.Module, layer: str, x: torch.Tensor) -> torch.Tensor:
    """The raw output of ``layer`` on ``x``, read by a plain forward hook."""
    captured = {}

    def keep(_module, _inputs, output):
        captured["output"] = output

    handle = model.get_submodule(layer).register_forward_hook(keep)
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return captured["output"]


def test_a_swins_stages_are_feature_maps_on_their_own_grids(saved, swin) -> None:
    assert swin.tokens is not None and swin.tokens.hierarchical
    assert (swin.tokens.prefix_tokens, swin.tokens.patch, swin.tokens.embed_dim) == (0, (4, 4), 64)
    assert (swin.preprocessing.size, swin.preprocessing.fixed) == (64, True)
    layers = {layer.name: layer for layer in hookviz.layer_table(swin).layers}
    for name, shape in SWIN_STAGES.items():
        assert layers[name].shape == shape and layers[name].hookable, name
        assert layers[name].aligned and not layers[name].zero_gradient, name
    # the last stage's output, normalised: what the pooled head reads (timm Swin's ``norm``)
    assert hookviz.default_layer(swin) == "swin.layernorm"
    # a window attention's (N * 64 windows, 2x2 tokens, C) is no map, though its token count is
    # the last stage's; nor is the pooler's (N, 64 channels, 1), though 64 is the 8x8 grid's
    assert "swin.encoder.layers.0.blocks.0.attention.q_proj" not in layers
    assert "swin.pooler" not in layers

    x = swin.preprocessing.to_tensor(_photo(48, 80, seed=3))
    model = saved[SWIN][0]
    for name, (channels, h, w) in SWIN_STAGES.items():
        tokens = _hooked_output(model, name, x)
        assert tokens.shape == (1, h * w, channels), name
        by_hand = tokens[0].reshape(h, w, channels).permute(2, 0, 1)
        maps = hookviz.feature_maps(swin, x, name)
        torch.testing.assert_close(maps.activations, by_hand, msg=name)


def test_a_swins_grad_cam_agrees_with_pytorch_grad_cam_at_every_stage(saved, swin) -> None:
    x = swin.preprocessing.to_tensor(_photo(48, 80, seed=4))
    checked = [
        ("swin.encoder.layers.0.blocks.0.layernorm_after", 1),  # stride 4
        ("swin.encoder.layers.1.blocks.1.layernorm_before", 1),  # 8, after shifted windows
        ("swin.encoder.layers.2.blocks.0.mlp", 1),  # 16
        *[("swin.layernorm", index) for index in range(3)],  # 32: the default, each class
    ]
    for layer, index in checked:
        ours = hookviz.grad_cam(swin, x, layer, target=index)
        reference = _reference_cam(saved[SWIN][0], layer, x, index, _square_tokens())
        assert ours.cam.shape == SWIN_STAGES[layer][1:] and ours.cam.max() > 0, layer
        assert _pearson(ours.heatmap, reference) >= MIN_R, (layer, index)
    analysis = hookviz.analyze(swin, _photo(48, 80, seed=4))
    assert analysis.cam.layer == "swin.layernorm"
    assert analysis.features.activations.shape == (64, 2, 2)


def test_a_token_sequence_of_another_batch_size_or_one_channel_is_no_map(swin) -> None:
    view = swin.tokens.view_for(64, 64, batch=2)
    assert view.token_grids() == [(16, 16), (8, 8), (4, 4), (2, 2), (1, 1)]
    tokens = torch.randn(2, 64, 16)
    grid = view.to_grid(tokens)
    assert grid.shape == (2, 16, 8, 8)
    torch.testing.assert_close(view.from_grid(grid, tokens), tokens)
    assert view.to_grid(torch.randn(2 * 64, 4, 8)) is None  # 64 windows of 2x2 tokens each
    assert view.to_grid(torch.randn(2, 64, 1)) is None  # a pooled (N, C, 1)
    # sides rounded up, as Swin pads its input and each merge
    assert view.layout.view_for(50, 70).token_grids()[:3] == [(13, 18), (7, 9), (4, 5)]


@pytest.mark.parametrize(
    ("name", "prefix", "default"),
    [
        # no class token: the head averages every patch token of the final norm
        (SIGLIP, 0, "vision_model.post_layernorm"),
        # a class token called ``class_embedding``; the head averages the last block's patch
        # tokens, unnormalised
        (CLIP, 1, "vision_model.encoder.layers.1"),
    ],
)
def test_vits_with_and_without_a_class_token_give_maps_and_grad_cam(
    saved, hub, name, prefix, default
) -> None:
    loaded = hookviz.load_model(name, device="cpu")
    assert loaded.tokens is not None and not loaded.tokens.hierarchical
    assert (loaded.tokens.prefix_tokens, loaded.tokens.patch, loaded.tokens.embed_dim) == (
        prefix,
        (8, 8),
        32,
    )
    assert hookviz.default_layer(loaded) == default
    block = "vision_model.encoder.layers.0"
    x = loaded.preprocessing.to_tensor(_photo(40, 56, seed=5))
    tokens = _hooked_output(saved[name][0], block, x)
    maps = hookviz.feature_maps(loaded, x, block)
    torch.testing.assert_close(maps.activations, _square_tokens(prefix)(tokens)[0])
    for layer in (default, block):
        for index in range(3):
            ours = hookviz.grad_cam(loaded, x, layer, target=index)
            reference = _reference_cam(saved[name][0], layer, x, index, _square_tokens(prefix))
            assert ours.cam.shape == (4, 4)
            assert _pearson(ours.heatmap, reference) >= MIN_R, (layer, index)


def test_tokens_out_of_row_order_get_no_layout() -> None:
    # Hiera unrolls its tokens for its pooling: no reshape lays them out on the image
    config = transformers.HieraConfig(
        image_size=[64, 64], embed_dim=8, num_heads=[1, 1, 2, 2], depths=[1, 1, 1, 1]
    )
    assert huggingface.token_layout(transformers.HieraForImageClassification(config)) is None


# --- random weights, listing, and what cannot load ---------------------------------------------


def test_random_weights_build_the_cached_configuration_the_same_every_time(saved, hub) -> None:
    first = hookviz.load_model(VIT, pretrained=False, device="cpu")
    again = hookviz.load_model(VIT, pretrained=False, device="cpu")
    assert first.pretrained is False and first.categories == ("cat", "dog", "hamster")
    assert type(first.model) is type(saved[VIT][0])
    trained = saved[VIT][0].state_dict()
    for key, value in first.model.state_dict().items():
        assert torch.equal(value, again.model.state_dict()[key]), key
    assert any(not torch.equal(v, trained[k]) for k, v in first.model.state_dict().items())
    # a configuration without weights is enough for random weights
    untrained = hookviz.load_model(CONFIG_ONLY, pretrained=False, device="cpu")
    assert untrained.categories == ("cat", "dog", "hamster")


def test_the_catalog_lists_the_cached_image_classifiers(hub) -> None:
    rows = {row.name: row for row in hookviz.model_catalog() if row.source == "hf"}
    assert set(rows) == {VIT, CONVNEXT, CONFIG_ONLY, SWIN, SIGLIP, CLIP}
    assert rows[VIT].ready and rows[VIT].status == "cached"
    assert rows[VIT].task == "classification"
    assert not rows[CONFIG_ONLY].ready
    assert rows[CONFIG_ONLY].status == "not cached, downloads off"
    assert [name for name in hookviz.model_names() if name.startswith("hf:")] == sorted(rows)
    assert registry.source_of("hf:anyone/anything").kind == "hf"


def test_what_is_not_cached_says_what_to_do(hub) -> None:
    with pytest.raises(hookviz.ModelUnavailableError) as info:
        hookviz.load_model("hf:google/vit-base-patch16-224", device="cpu")
    message = str(info.value)
    assert "hf:google/vit-base-patch16-224" in message and str(hub) in message
    assert "downloads are switched off" in message and "from_pretrained" in message
    with pytest.raises(hookviz.ModelUnavailableError, match="weights"):
        hookviz.load_model(CONFIG_ONLY, device="cpu")
    with pytest.raises(hookviz.ModelError, match="not a Hugging Face model id"):
        hookviz.load_model("hf:../escape", device="cpu")
