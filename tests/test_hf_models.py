"""Hugging Face ``transformers`` image classifiers (``hf:ORG/NAME``) from a local hub cache.

Tiny random-weight models (a ViT and a ConvNeXt) are saved with their image processors into a
temporary cache laid out as the hub lays it out (``models--ORG--NAME/blobs``, ``snapshots/<commit>``
links, ``refs/main``), then loaded offline: their labels are ``id2label``, their preprocessing is
their processor's, ``predict`` is the model's own softmax, and Grad-CAM agrees with
pytorch-grad-cam at the same layer (a ViT's tokens through ``reshape_transform``) and with a
hand computation from a forward hook and ``autograd.grad``.
"""

from __future__ import annotations

import copy
import hashlib
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
LABELS = {0: "cat", 1: "dog", 2: "hamster"}
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
    for name, make in ((VIT, _vit), (CONVNEXT, _convnext)):
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
    assert set(rows) == {VIT, CONVNEXT, CONFIG_ONLY}
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
