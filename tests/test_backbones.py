"""Backbones as practitioners bring them: self-supervised ViTs without a classifier head loaded
by name as embedders, fixed-size ViTs wrapped as timm builds them, and the prefix tokens (class,
distillation, registers) of every timm ViT family kept off the patch grid.

Real timm models with random weights (``pretrained=False``: nothing is downloaded). The oracle
for a map is pytorch-grad-cam on an unfrozen copy of the same model with a ``reshape_transform``
written here from what the architecture is known to output: exactly its prefix tokens dropped,
the rest laid row by row on the patch grid of the actual input."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import hookviz
from hookviz.core.grids import TokenLayout
from hookviz.models.timm_zoo import is_projection_head
from hookviz.models.transformers import fit_preprocessing, token_layout
from hookviz.targets import Similarity

from .conftest import random_input

pytorch_grad_cam = pytest.importorskip("pytorch_grad_cam")
timm = pytest.importorskip("timm")

MIN_R = 0.999
# name -> (prefix tokens: class + registers, patch size)
HEADLESS = {
    "timm:vit_small_patch14_dinov2": (1, 14),
    "timm:vit_small_patch14_reg4_dinov2": (5, 14),
    "timm:eva02_tiny_patch14_224.mim_in22k": (1, 14),
}


@pytest.fixture(scope="module")
def backbones():
    """name -> the model loaded as an embedder, each on first use."""
    loaded: dict[str, hookviz.LoadedModel] = {}

    def get(name: str) -> hookviz.LoadedModel:
        if name not in loaded:
            loaded[name] = hookviz.load_model(
                name, pretrained=False, task="embedding", device="cpu"
            )
        return loaded[name]

    return get


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


def _drop_prefix(prefix: int, grid: tuple[int, int]):
    """(N, prefix + h*w, C) -> (N, C, h, w): the reshape a pytorch-grad-cam user writes."""
    h, w = grid

    def reshape(tokens: torch.Tensor) -> torch.Tensor:
        assert tokens.shape[1] == prefix + h * w, tokens.shape
        patches = tokens[:, prefix:, :]
        return patches.reshape(tokens.shape[0], h, w, tokens.shape[2]).permute(0, 3, 1, 2)

    return reshape


def _reference(model, layer, x, target, reshape_transform) -> np.ndarray:
    """pytorch-grad-cam's Grad-CAM on an unfrozen copy (it needs gradients on the weights)."""
    copied = copy.deepcopy(model).requires_grad_(True).eval()
    module = copied.get_submodule(layer)
    with pytorch_grad_cam.GradCAM(
        model=copied, target_layers=[module], reshape_transform=reshape_transform
    ) as cam:
        return cam(input_tensor=x, targets=[target])[0]


class SimilarityToConceptTarget:
    """pytorch-grad-cam's embeddings-tutorial target (the package does not ship it)."""

    def __init__(self, features: torch.Tensor) -> None:
        self.features = features

    def __call__(self, model_output: torch.Tensor) -> torch.Tensor:
        return torch.nn.CosineSimilarity(dim=0)(model_output, self.features)


class LogitTarget:
    def __init__(self, index: int) -> None:
        self.index = index

    def __call__(self, model_output: torch.Tensor) -> torch.Tensor:
        return model_output[..., self.index]


def _photo(height: int, width: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


# ---------------------------------------------------------------------------------------------
# headless backbones by name


@pytest.mark.slow
@pytest.mark.parametrize("name", list(HEADLESS))
def test_a_headless_backbone_loads_by_name_and_gives_a_similarity_map_on_its_patch_grid(
    backbones, name
):
    """DINOv2 (with and without registers) and EVA-02 have no classifier head: they load as
    embedders, and the map of their similarity to a reference lies on the patch grid (prefix
    tokens dropped), at a block that reaches the embedding (not the final norm, where only the
    class token does)."""
    loaded = backbones(name)
    prefix, patch = HEADLESS[name]
    assert loaded.task == "embedding" and loaded.categories == ()
    assert loaded.tokens.prefix_tokens == prefix and loaded.tokens.patch == (patch, patch)
    x, reference = random_input(8 * patch, 11 * patch, seed=1), random_input(112, 112, seed=2)
    cam = hookviz.grad_cam(loaded, x, target=Similarity(reference))
    assert cam.cam.shape == (8, 11)  # (H / patch, W / patch)
    assert cam.heatmap.shape == (8 * patch, 11 * patch)
    assert float(cam.cam.max()) > 0  # not blank
    assert cam.layer == hookviz.default_layer(loaded) and cam.layer.startswith("blocks.")
    expected = F.cosine_similarity(hookviz.embed(loaded, x), hookviz.embed(loaded, reference), 0)
    assert cam.score == pytest.approx(float(expected), abs=1e-5)


@pytest.mark.slow
def test_dinov2_with_registers_similarity_map_is_pytorch_grad_cams(backbones):
    """The oracle drops the class token and the 4 registers itself; hookviz needs no reshape.
    A reshape that reads the registers as patches (drops the class token and the last four
    patches instead) gives another map: the registers matter."""
    loaded = backbones("timm:vit_small_patch14_reg4_dinov2")
    x, reference = random_input(112, 154, seed=3), random_input(98, 98, seed=4)
    vector = hookviz.embed(loaded, reference)
    for layer in ("blocks.11.norm1", "blocks.6"):
        ours = hookviz.grad_cam(loaded, x, layer, target=Similarity(vector)).heatmap
        theirs = _reference(
            loaded.model, layer, x, SimilarityToConceptTarget(vector), _drop_prefix(5, (8, 11))
        )
        assert ours.shape == theirs.shape == (112, 154)
        assert _pearson(ours, theirs) >= MIN_R, layer

    def registers_as_patches(tokens: torch.Tensor) -> torch.Tensor:
        patches = tokens[:, 1:-4]
        return patches.reshape(1, 8, 11, -1).permute(0, 3, 1, 2)

    ours = hookviz.grad_cam(loaded, x, "blocks.6", target=Similarity(vector)).heatmap
    wrong = _reference(
        loaded.model, "blocks.6", x, SimilarityToConceptTarget(vector), registers_as_patches
    )
    assert _pearson(ours, wrong) < 0.99


@pytest.mark.slow
def test_a_headless_backbone_is_an_embedder_without_being_told_and_takes_any_aspect_ratio(
    backbones,
):
    """Without ``task`` the backbone loads as the embedder it is (it can be nothing else); a
    photo of another aspect ratio is fed at its own, in whole patches."""
    name = "timm:eva02_tiny_patch14_224.mim_in22k"
    plain = hookviz.load_model(name, pretrained=False, device="cpu")
    assert plain.task == "embedding"
    loaded = backbones(name)
    image, other = _photo(150, 300, seed=5), _photo(200, 200, seed=6)
    cam = hookviz.grad_cam(loaded, image, target=Similarity(other))
    height, width = loaded.preprocessing.input_size(300, 150)
    assert (height, width) == (224, 448)
    assert cam.cam.shape == (height // 14, width // 14)
    assert cam.heatmap.shape == (150, 300)
    with pytest.raises(hookviz.ModelError, match="embedding"):
        hookviz.load_model(name, pretrained=False, device="cpu", task="classification")


@pytest.mark.slow
def test_clip_image_tower_by_timm_name_embeds_through_its_projection():
    """timm's CLIP image tower under its contrastive tag has CLIP's projection as ``head``
    (512 outputs for ViT-B): an embedder into the joint space, the projection kept."""
    loaded = hookviz.load_model("timm:vit_base_patch32_clip_224.openai", pretrained=False)
    assert loaded.task == "embedding"
    x = random_input(224, 224, seed=7)
    assert hookviz.embed(loaded, x).shape == (512,)
    cam = hookviz.grad_cam(loaded, x, target=Similarity(random_input(224, 224, seed=8)))
    assert cam.cam.shape == (7, 7)


@pytest.mark.slow
def test_only_a_clip_tower_under_its_contrastive_weights_has_a_projection_head():
    def built(name: str) -> torch.nn.Module:
        with torch.device("meta"):
            return timm.create_model(name, pretrained=False)

    assert is_projection_head(built("vit_base_patch16_clip_224.openai"))
    assert is_projection_head(built("vit_base_patch32_clip_224.laion2b"))
    assert not is_projection_head(built("vit_base_patch16_clip_224.openai_ft_in1k"))
    assert not is_projection_head(built("vit_small_patch14_dinov2"))
    assert not is_projection_head(built("resnet18"))


# ---------------------------------------------------------------------------------------------
# wrapped ViTs of one input size


@pytest.mark.slow
def test_a_wrapped_vit_of_timms_default_size_lists_its_layers_and_agrees_with_the_oracle():
    """timm builds a ViT for 224 x 224 only (it asserts the size): the layer listing traces at
    that size, never a shorter probe, and its Grad-CAM is pytorch-grad-cam's."""
    torch.manual_seed(0)
    module = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5)
    loaded = hookviz.wrap_model(module, num_classes=5, device="cpu")
    assert loaded.tokens.input_size == (224, 224)
    layers = {layer.name: layer for layer in hookviz.list_layers(loaded)}
    assert layers["blocks.5"].shape == (192, 14, 14) and layers["blocks.5"].aligned
    assert hookviz.default_layer(loaded) == "blocks.11.norm1"
    x = random_input(224, 224, seed=9)
    target = hookviz.predict(loaded, x, k=1)[0].index
    ours = hookviz.grad_cam(loaded, x, target=target)
    assert ours.cam.shape == (14, 14)
    theirs = _reference(loaded.model, ours.layer, x, LogitTarget(target), _drop_prefix(1, (14, 14)))
    assert _pearson(ours.heatmap, theirs) >= MIN_R


@pytest.mark.slow
def test_a_wrapped_fixed_size_vit_is_fed_its_own_size_without_being_told():
    torch.manual_seed(0)
    module = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, img_size=64)
    loaded = hookviz.wrap_model(module, num_classes=5, device="cpu")
    cam = hookviz.grad_cam(loaded, _photo(90, 160, seed=10))
    assert cam.cam.shape == (4, 4) and cam.heatmap.shape == (90, 160)


@pytest.mark.slow
def test_a_fixed_size_vit_fed_through_its_fitted_preprocessing_covers_a_wide_photo():
    """A 64-pixel ViT takes its square whole: a wide photo is squeezed into it and the map is
    laid back over the whole photo."""
    torch.manual_seed(0)
    module = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=5, img_size=64)
    default = hookviz.Preprocessing(size=224, mean=(0.5,) * 3, std=(0.5,) * 3)
    fitted = fit_preprocessing(module, default)
    assert (fitted.size, fitted.fixed) == (64, True)
    loaded = hookviz.wrap_model(module, num_classes=5, preprocessing=fitted, device="cpu")
    assert hookviz.default_layer(loaded) == "blocks.11.norm1"
    cam = hookviz.grad_cam(loaded, _photo(90, 160, seed=10))
    assert cam.cam.shape == (4, 4) and cam.heatmap.shape == (90, 160)
    # a ViT that takes any size is given whole patches, at the size asked
    dynamic = timm.create_model("vit_tiny_patch16_224", pretrained=False, dynamic_img_size=True)
    assert fit_preprocessing(dynamic, default) == hookviz.Preprocessing(
        size=224, mean=(0.5,) * 3, std=(0.5,) * 3, multiple=16
    )


@pytest.mark.slow
def test_distilled_deit_drops_its_class_and_distillation_tokens():
    """A distilled DeiT (built for 64 pixels, wrapped as it is) has two prefix tokens: its maps
    are the patch tokens after both, and its Grad-CAM is pytorch-grad-cam's with a two-token
    reshape."""
    torch.manual_seed(1)
    module = timm.create_model(
        "deit_tiny_distilled_patch16_224", pretrained=False, num_classes=5, img_size=64
    )
    prep = fit_preprocessing(
        module, hookviz.Preprocessing(size=64, mean=(0.5,) * 3, std=(0.5,) * 3)
    )
    loaded = hookviz.wrap_model(module, num_classes=5, preprocessing=prep, device="cpu")
    assert loaded.tokens.prefix_tokens == 2 and loaded.tokens.input_size == (64, 64)
    x = random_input(64, 64, seed=11)
    tokens = {}
    handle = module.blocks[5].register_forward_hook(lambda m, i, o: tokens.update(out=o))
    with torch.no_grad():
        module(x)
    handle.remove()
    expected = tokens["out"][0, 2:].reshape(4, 4, -1).permute(2, 0, 1)
    maps = hookviz.feature_maps(loaded, x, "blocks.5")
    torch.testing.assert_close(torch.as_tensor(maps.activations), expected)
    target = hookviz.predict(loaded, x, k=1)[0].index
    ours = hookviz.grad_cam(loaded, x, "blocks.5", target)
    theirs = _reference(loaded.model, "blocks.5", x, LogitTarget(target), _drop_prefix(2, (4, 4)))
    assert _pearson(ours.heatmap, theirs) >= MIN_R


# ---------------------------------------------------------------------------------------------
# the layout of every timm ViT family, read from the model (built on the meta device: no memory)


DYNAMIC = {"vit_tiny_patch16_224", "vit_small_patch14_reg4_dinov2", "eva02_tiny_patch14_224"}


def _layout(name: str, **kwargs) -> TokenLayout:
    with torch.device("meta"):
        return token_layout(timm.create_model(name, pretrained=False, **kwargs))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "prefix", "patch"),
    [
        ("vit_tiny_patch16_224", 1, 16),
        ("deit_tiny_distilled_patch16_224", 2, 16),
        ("vit_small_patch14_reg4_dinov2", 5, 14),
        ("eva02_tiny_patch14_224", 1, 14),
        ("beit_base_patch16_224", 1, 16),
        ("cait_xxs24_224", 1, 16),
        ("vit_tiny_r_s16_p8_224", 1, 32),  # a ResNet stem of stride 4 under 8-pixel patches
        ("vit_relpos_small_patch16_224", 0, 16),  # no class token: averaged
    ],
)
def test_every_timm_vit_family_says_its_prefix_tokens_patch_and_one_size(name, prefix, patch):
    layout = _layout(name)
    assert (layout.prefix_tokens, layout.patch) == (prefix, (patch, patch))
    assert layout.input_size is not None  # as timm builds it: its img_size only
    if name in DYNAMIC:
        # as load_model builds it: any whole number of patches
        assert _layout(name, dynamic_img_size=True).input_size is None


def test_patch_tokens_alone_are_read_on_the_grid_of_a_model_with_a_class_token():
    """CaiT and XCiT add their class token only in their last blocks: the blocks before output
    the patch tokens alone, which lie on the grid as they are; with the class token they lose
    it."""
    view = TokenLayout(prefix_tokens=1, patch=(16, 16)).view_for(64, 96, batch=1)
    alone = torch.arange(24 * 3, dtype=torch.float32).reshape(1, 24, 3)
    with_class = torch.cat([torch.full((1, 1, 3), -1.0), alone], dim=1)
    expected = alone.reshape(1, 4, 6, 3).permute(0, 3, 1, 2)
    for output in (alone, with_class):
        grid = view.to_grid(output)
        torch.testing.assert_close(grid, expected)
        torch.testing.assert_close(view.from_grid(grid, output), output)
    assert view.to_grid(torch.zeros(1, 23, 3)) is None
