"""Targets beyond one class against pytorch-grad-cam, on torchvision's own detectors, segmenters
and a headless classifier with seeded random weights, at the same layer and input: a box
(``FasterRCNNBoxScoreTarget``), a segmentation region (``SemanticSegmentationTarget``) and a
similarity to a reference (``SimilarityToConceptTarget``). Agreement is the Pearson correlation
of the final heatmaps. A callable scoring the same thing gives exactly the built-in map."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from PIL import Image

import hookviz
from hookviz.targets import Region, Similarity

pytorch_grad_cam = pytest.importorskip("pytorch_grad_cam")
from pytorch_grad_cam.utils.model_targets import (  # noqa: E402
    FasterRCNNBoxScoreTarget,
    SemanticSegmentationTarget,
)

MIN_R = 0.999


class SimilarityToConceptTarget:
    """The target of pytorch-grad-cam's embeddings tutorial (the package does not ship it):
    the cosine similarity of one image's embedding to the concept's."""

    def __init__(self, features: torch.Tensor) -> None:
        self.features = features

    def __call__(self, model_output: torch.Tensor) -> torch.Tensor:
        return torch.nn.CosineSimilarity(dim=0)(model_output, self.features)


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


def _reference_cam(model: torch.nn.Module, layer: str, x: torch.Tensor, target) -> np.ndarray:
    """pytorch-grad-cam's Grad-CAM, on an unfrozen copy (it needs gradients on the weights)."""
    copied = copy.deepcopy(model).requires_grad_(True)
    module = copied.get_submodule(layer)
    with pytorch_grad_cam.GradCAM(model=copied, target_layers=[module]) as cam:
        return cam(input_tensor=x, targets=[target])[0]


def _photo(height: int, width: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.mark.slow
def test_a_box_agrees_with_pytorch_grad_cam_on_faster_rcnn(detector) -> None:
    # 320 x 320: the detector neither resizes nor pads it, so both map the same grid
    image = _photo(320, 320)
    found = hookviz.detect(detector, image, min_score=0.0)
    x = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)[None]
    layer = "backbone.body.16"
    for detection in found[:3]:
        ours = hookviz.grad_cam(detector, image, layer, target=detection.target)
        reference = _reference_cam(
            detector.model,
            layer,
            x,
            FasterRCNNBoxScoreTarget([detection.label], torch.tensor([detection.box])),
        )
        assert ours.class_index == detection.label and ours.probability == detection.score
        assert _pearson(ours.heatmap, reference) >= MIN_R


@pytest.mark.slow
def test_a_region_agrees_with_pytorch_grad_cam_on_lraspp(segmenter) -> None:
    image = _photo(96, 128, seed=1)
    x = segmenter.preprocessing.to_tensor(image)
    layer = "backbone.12"
    categories = hookviz.segment(segmenter, image).categories
    with torch.no_grad():
        predicted = segmenter.model(x)["out"][0].argmax(0)

    class OutOnly(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, batch: torch.Tensor) -> torch.Tensor:
            return self.model(batch)["out"]

    for present in categories[:2]:
        mask = (predicted == present.index).float()
        ours = hookviz.grad_cam(segmenter, x, layer, target=Region(present.index))
        reference = _reference_cam(
            OutOnly(segmenter.model),
            f"model.{layer}",
            x,
            SemanticSegmentationTarget(present.index, mask.numpy()),
        )
        assert _pearson(ours.heatmap, reference) >= MIN_R
        # a mask given at the image's size means the same pixels
        given = hookviz.grad_cam(segmenter, x, layer, Region(present.name, mask.numpy() > 0))
        np.testing.assert_allclose(given.heatmap, ours.heatmap, atol=1e-6)


def test_a_similarity_agrees_with_pytorch_grad_cam_on_a_headless_resnet(embedder) -> None:
    image, reference_image = _photo(112, 144, seed=2), _photo(128, 128, seed=3)
    reference = hookviz.embed(embedder, reference_image)
    x = embedder.preprocessing.to_tensor(image)
    ours = hookviz.grad_cam(embedder, x, "layer3", target=Similarity(reference))
    theirs = _reference_cam(embedder.model, "layer3", x, SimilarityToConceptTarget(reference))
    assert _pearson(ours.heatmap, theirs) >= MIN_R
    # the reference image itself, embedded by hookviz, is the same target
    by_image = hookviz.grad_cam(embedder, x, "layer3", target=Similarity(reference_image))
    np.testing.assert_allclose(by_image.heatmap, ours.heatmap, atol=1e-6)
    expected = torch.nn.functional.cosine_similarity(hookviz.embed(embedder, x), reference, dim=0)
    assert ours.score == pytest.approx(float(expected), abs=1e-5)


@pytest.mark.slow
def test_callables_give_exactly_the_built_in_maps(detector, segmenter, embedder) -> None:
    image = _photo(240, 360, seed=4)
    top = hookviz.detect(detector, image, min_score=0.0)[0]
    box_in_input = torch.tensor(top.box)  # the detector is fed the image at its own size

    def box_score(output):
        found = output[0]
        ious = _iou(box_in_input, found["boxes"])
        best = int(ious.argmax())
        matched = float(ious[best].detach()) > 0.5 and int(found["labels"][best]) == top.label
        return (ious[best] + found["scores"][best]) if matched else found["scores"].sum() * 0

    built_in = hookviz.grad_cam(detector, image, target=top.target)
    given = hookviz.grad_cam(detector, image, target=box_score)
    np.testing.assert_array_equal(given.cam, built_in.cam)
    assert given.class_name == "box_score" and np.isnan(given.probability)

    category = hookviz.segment(segmenter, image).categories[0].index
    region = hookviz.grad_cam(segmenter, image, target=Region(category))
    by_hand = hookviz.grad_cam(
        segmenter,
        image,
        target=lambda out: (out["out"][:, category] * (out["out"].argmax(1) == category)).sum(),
    )
    np.testing.assert_array_equal(by_hand.cam, region.cam)

    vector = hookviz.embed(embedder, _photo(64, 64, seed=5))
    similar = hookviz.grad_cam(embedder, image, target=Similarity(vector))
    cosine = hookviz.grad_cam(
        embedder,
        image,
        target=lambda out: torch.nn.functional.cosine_similarity(out, vector[None], dim=1),
    )
    np.testing.assert_array_equal(cosine.cam, similar.cam)


def _iou(box: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    from torchvision.ops import box_iou

    return box_iou(box[None], boxes)[0]


def test_a_feature_pyramid_level_agrees_with_pytorch_grad_cam_through_a_tap(detector) -> None:
    """A level of a dict output (``backbone.fpn:0``, ``backbone:pool``) is picked by name;
    pytorch-grad-cam, which cannot hook a dict, reads it through an identity module tapped in."""
    image = _photo(320, 320, seed=9)
    x = torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)[None]
    top = hookviz.detect(detector, image, min_score=0.0)[0]
    names = [layer.name for layer in hookviz.list_layers(detector)]
    assert {"backbone.fpn:0", "backbone.fpn:1", "backbone:pool"} <= set(names)

    class Tapped(torch.nn.Module):
        def __init__(self, fpn: torch.nn.Module) -> None:
            super().__init__()
            self.fpn, self.tap = fpn, torch.nn.Identity()

        def forward(self, features):
            levels = self.fpn(features)
            levels["0"] = self.tap(levels["0"])
            return levels

    tapped = copy.deepcopy(detector.model)
    tapped.backbone.fpn = Tapped(tapped.backbone.fpn)
    ours = hookviz.grad_cam(detector, image, "backbone.fpn:0", target=top.target)
    theirs = _reference_cam(
        tapped,
        "backbone.fpn.tap",
        x,
        FasterRCNNBoxScoreTarget([top.label], torch.tensor([top.box])),
    )
    assert _pearson(ours.heatmap, theirs) >= MIN_R
    maps = hookviz.feature_maps(detector, image, "backbone.fpn:0").activations
    assert maps.shape == hookviz.feature_maps(detector, image, "backbone:0").activations.shape
    with pytest.raises(hookviz.LayerError, match=r"did you mean 'backbone\.fpn:"):
        hookviz.feature_maps(detector, image, "backbone.fpn:7")
