"""Targets and the models that need them, through the public API: detections in the image's own
pixels at any size and aspect, a detector's heatmap read from the part of its padded grid that
holds the image, a detector hookviz does not know (YOLO-style) explained through a small adapter,
every detector and segmenter family built offline, and the messages of targets that cannot
apply."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import hookviz
from hookviz.core.preprocess import Preprocessing
from hookviz.targets import Box, Class, Region, Similarity, Text


def _photo(height: int, width: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def _as_input(image: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)


def _as_found(detections) -> list[tuple]:
    """Detections as a sorted list of (label, rounded box): random weights tie many scores, so
    the order of equal scores is no basis for pairing."""
    return sorted((d.label, tuple(round(v, 2) for v in d.box)) for d in detections)


def _direct(loaded, batch: torch.Tensor, scale: tuple[float, float] = (1.0, 1.0)) -> list[tuple]:
    with torch.no_grad():
        found = loaded.model(batch)[0]
    sx, sy = scale
    return sorted(
        (int(label), tuple(round(v * s, 2) for v, s in zip(box, (sx, sy, sx, sy), strict=True)))
        for box, label in zip(found["boxes"].tolist(), found["labels"], strict=True)
    )


@pytest.mark.parametrize("size", [(300, 500), (600, 200), (57, 83)])
def test_detections_are_what_torchvision_finds_in_the_image_itself(detector, size) -> None:
    image = _photo(*size)
    ours = hookviz.detect(detector, image, min_score=0.0)
    assert ours and _as_found(ours) == _direct(detector, _as_input(image)[None])
    named = {label: detector.categories[label] for label in {d.label for d in ours}}
    named = {i: f"unused class {i}" if name == "N/A" else name for i, name in named.items()}
    assert all(d.name == named[d.label] for d in ours)  # (COCO's unused ids named as such)
    assert [d.score for d in ours] == sorted((d.score for d in ours), reverse=True)
    threshold = ours[len(ours) // 2].score
    kept = hookviz.detect(detector, image, min_score=threshold)
    assert len(kept) == sum(d.score >= threshold for d in ours) > 0
    assert all(d.score >= threshold for d in kept)


def test_a_photo_larger_than_the_detector_takes_gets_boxes_in_its_own_pixels(detector) -> None:
    image = _photo(1200, 1800, seed=1)  # shrunk to 640 on its long side before the model
    ours = hookviz.detect(detector, image, min_score=0.0)
    fed = detector.preprocessing.to_tensor(image)
    assert tuple(fed.shape[2:]) == (427, 640)
    assert _as_found(ours) == _direct(detector, fed, (1800 / 640, 1200 / 427))
    assert all(0 <= d.box[0] < d.box[2] <= 1800 and 0 <= d.box[1] < d.box[3] <= 1200 for d in ours)
    assert max(d.box[2] for d in ours) > 1000  # not left in the shrunk input's pixels


class _PaddedPicture(nn.Module):
    """A detector whose one layer outputs its padded input itself, scored by its sum: its
    Grad-CAM is then the image's own brightness, wherever the image lies in the grid."""

    def __init__(self) -> None:
        from torchvision.models.detection.transform import GeneralizedRCNNTransform

        super().__init__()
        self.transform = GeneralizedRCNNTransform(64, 128, [0.0] * 3, [1.0] * 3, size_divisible=32)
        self.backbone = nn.Conv2d(3, 3, 1, bias=False)
        with torch.no_grad():
            self.backbone.weight.copy_(torch.eye(3)[:, :, None, None])

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        batch, _ = self.transform(list(images))
        total = self.backbone(batch.tensors).sum(dim=(1, 2, 3))
        box = torch.tensor([[0.0, 0.0, 8.0, 8.0]])
        return [{"boxes": box, "labels": torch.tensor([1]), "scores": s[None]} for s in total]


def test_a_detectors_heatmap_is_read_from_the_image_not_its_padding() -> None:
    loaded = hookviz.wrap_model(
        _PaddedPicture(),
        categories=["background", "thing"],
        preprocessing=Preprocessing(128, (0.0,) * 3, (1.0,) * 3, own_size=True),
        device="cpu",
        task="detection",
    )
    pixels = np.zeros((60, 100, 3), dtype=np.uint8)
    pixels[10:30, 70:95] = 255  # a bright patch near the right edge, where padding follows
    pixels[40:55, 5:20] = 128
    image = Image.fromarray(pixels)
    cam = hookviz.grad_cam(loaded, image, "backbone", target=lambda out: out[0]["scores"])
    # 60 x 100 is resized to 64 x 106 and padded to 64 x 128 inside the model
    assert cam.frame == pytest.approx((1.0, 106 / 128))
    brightness = pixels.mean(axis=2)
    assert np.corrcoef(cam.heatmap.ravel(), brightness.ravel())[0, 1] > 0.97
    stretched = hookviz.core.cam.to_pixel_grid(torch.from_numpy(cam.cam), (60, 100))
    assert np.corrcoef(stretched.ravel(), brightness.ravel())[0, 1] < 0.9


class _TinyYolo(nn.Module):
    """A YOLO-style detector hookviz does not know: a grid of (4 box offsets, objectness,
    class scores) per cell, in the input's pixels at stride 8."""

    def __init__(self, classes: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU(),
        )  # fmt: skip
        self.head = nn.Conv2d(16, 5 + classes, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(images))


class _YoloAsTorchvision(nn.Module):
    """The recipe: map the grid to torchvision's form, one dict of boxes, labels and scores
    per image (the most confident cells), and every detection target works."""

    def __init__(self, yolo: nn.Module, keep: int = 10) -> None:
        super().__init__()
        self.yolo, self.keep = yolo, keep

    def forward(self, images: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        grid = self.yolo(images)  # (N, 5 + C, h, w)
        n, _, h, w = grid.shape
        ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        centre_x, centre_y = (xs + 0.5) * 8, (ys + 0.5) * 8
        half = torch.sigmoid(grid[:, 2:4]) * 16 + 2
        shift = torch.tanh(grid[:, 0:2]) * 4
        x, y = centre_x + shift[:, 0], centre_y + shift[:, 1]
        boxes = torch.stack([x - half[:, 0], y - half[:, 1], x + half[:, 0], y + half[:, 1]], 1)
        classes = torch.softmax(grid[:, 5:], dim=1)
        best, labels = classes.max(dim=1)
        scores = torch.sigmoid(grid[:, 4]) * best
        found = []
        for i in range(n):
            top = scores[i].flatten().topk(self.keep).indices
            found.append({
                "boxes": boxes[i].flatten(1).T[top],
                "labels": labels[i].flatten()[top] + 1,
                "scores": scores[i].flatten()[top],
            })  # fmt: skip
        return found


def test_a_yolo_style_detector_through_an_adapter_gives_boxes_and_their_cams() -> None:
    torch.manual_seed(0)
    yolo = _TinyYolo()
    loaded = hookviz.wrap_model(
        _YoloAsTorchvision(yolo),
        categories=["background", "cat", "dog", "bird"],
        preprocessing=Preprocessing(96, (0.5,) * 3, (0.25,) * 3),
        device="cpu",
        task="detection",
    )
    image = _photo(96, 144, seed=3)
    found = hookviz.detect(loaded, image, min_score=0.0)
    assert len(found) == 10 and all(d.name in loaded.categories[1:] for d in found)
    assert all(d.box[2] > 0 and d.box[0] < 144 for d in found)
    top = found[0]
    cam = hookviz.grad_cam(loaded, image, "yolo.body.4", target=top.target)
    assert cam.heatmap.shape == (96, 144) and np.abs(cam.weights).sum() > 0
    assert cam.class_name == top.name and cam.probability == pytest.approx(top.score)
    # the same score as a plain callable on the adapter's output is the same map
    as_callable = hookviz.grad_cam(
        loaded, image, "yolo.body.4", target=lambda output: Box(top.box, top.label)(output)
    )
    np.testing.assert_array_equal(as_callable.cam, cam.cam)


@pytest.mark.parametrize(
    "name",
    [
        "fasterrcnn_mobilenet_v3_large_320_fpn",
        "ssdlite320_mobilenet_v3_large",
        "lraspp_mobilenet_v3_large",
        pytest.param("fasterrcnn_resnet50_fpn", marks=pytest.mark.slow),
        pytest.param("retinanet_resnet50_fpn", marks=pytest.mark.slow),
        pytest.param("fcos_resnet50_fpn", marks=pytest.mark.slow),
        pytest.param("ssd300_vgg16", marks=pytest.mark.slow),
        pytest.param("maskrcnn_resnet50_fpn", marks=pytest.mark.slow),
        pytest.param("deeplabv3_mobilenet_v3_large", marks=pytest.mark.slow),
        pytest.param("fcn_resnet50", marks=pytest.mark.slow),
    ],
)
@pytest.mark.slow
def test_each_detector_and_segmenter_family_builds_offline_and_explains(name) -> None:
    from torchvision import models

    loaded = hookviz.load_model(name, pretrained=False, device="cpu")
    row = next(info for info in hookviz.model_catalog() if info.name == name)
    assert row.task == loaded.task and not row.ready  # nothing cached in the tests' hub
    assert loaded.categories == tuple(models.get_model_weights(name).DEFAULT.meta["categories"])
    # the torchvision module itself (the class its builder returns, without building a second)
    assert type(loaded.model) is models.get_model_builder(name).__annotations__["return"]
    if loaded.task == "detection":
        # fed at 224 pixels, not their own 800: the same path, a twelfth of the arithmetic
        loaded.model.transform.min_size, loaded.model.transform.max_size = (224,), 320
    image = _photo(150, 210, seed=5)
    found = hookviz.detect(loaded, image, 0.0) if loaded.task == "detection" else None
    if loaded.task == "detection":
        assert found
    else:
        segmentation = hookviz.segment(loaded, image)
        assert segmentation.mask.shape == (150, 210)
        assert sum(p.share for p in segmentation.categories) == pytest.approx(1.0)
    target = None
    if loaded.task == "detection" and not any(hookviz.core.targets.has_area(d.box) for d in found):
        # (untrained FCOS outputs boxes of no area: no box to explain, its scores still are)
        with pytest.raises(hookviz.TargetError, match="no box with an area"):
            hookviz.grad_cam(loaded, image)
        target = lambda output: output[0]["scores"].sum()  # noqa: E731
    cam = hookviz.grad_cam(loaded, image, target=target)
    assert cam.heatmap.shape == (150, 210)
    assert cam.layer.startswith("backbone.")


def test_targets_that_cannot_apply_say_why(detector, segmenter, embedder, resnet18) -> None:
    image = _photo(120, 160, seed=6)
    cases = [
        (detector, 3, "Box"),
        (detector, Box((0, 0, 2, 2), 1), "overlaps"),
        (detector, Box((0, 0, 50, 50), "no such thing"), "no label named"),
        (resnet18, Box((0, 0, 50, 50), 1), "needs a detection model"),
        (segmenter, Region(7, mask=np.zeros((120, 160), bool)), "empty"),
        (segmenter, Region(7, mask=np.ones((10, 10), bool)), "image's size"),
        (segmenter, 2, "Region"),
        (embedder, None, "Similarity"),
        (embedder, Similarity(np.ones(7)), "512"),
        (resnet18, Similarity(np.ones(7)), "embedding model"),
        (resnet18, Text("a cat"), "zero-shot"),
        (resnet18, Class(1000), "out of range"),
        (resnet18, lambda out: out[0], "one score per image"),
        (resnet18, "cat", "class index"),
    ]
    for loaded, target, said in cases:
        with pytest.raises(hookviz.TargetError, match=said):
            hookviz.grad_cam(loaded, image, target=target)
    with pytest.raises(hookviz.ModelError, match=r"hookviz\.detect"):
        hookviz.predict(detector, image)
    with pytest.raises(hookviz.ModelError, match="needs a detection model"):
        hookviz.detect(resnet18, image)
    with pytest.raises(hookviz.ModelError, match="detection model"):
        hookviz.load_model("fasterrcnn_mobilenet_v3_large_320_fpn", False, task="embedding")
    with pytest.raises(hookviz.ModelError, match="unknown task"):
        hookviz.load_model("resnet18", False, task="captioning")


def test_a_segmenters_default_target_is_its_largest_category(segmenter) -> None:
    image = _photo(100, 140, seed=7)
    segmentation = hookviz.segment(segmenter, image)
    largest = next(p for p in segmentation.categories if p.name != "__background__")
    cam = hookviz.grad_cam(segmenter, image)
    assert cam.class_index == largest.index
    expected = hookviz.grad_cam(segmenter, image, target=Region(largest.name))
    np.testing.assert_array_equal(cam.cam, expected.cam)


def test_a_detectors_default_box_is_the_first_it_lists(detector) -> None:
    # an untrained detector scores every box alike: the default must still be the listed first
    image = _photo(200, 260, seed=8)
    first = hookviz.detect(detector, image, min_score=0.0)[0]
    cam = hookviz.grad_cam(detector, image)
    assert cam.target == first.target and cam.class_index == first.label


@pytest.mark.slow
def test_the_batch_api_takes_targets_image_by_image(detector, segmenter, resnet18) -> None:
    from hookviz.core.batch import explain_batch

    images = [_photo(160, 224, seed=s) for s in (9, 10, 11)]
    batch = torch.stack([_as_input(image) for image in images])
    boxes = [hookviz.detect(detector, image, 0.0)[1].target for image in images]
    together = hookviz.grad_cam_batch(detector, batch, "backbone.body.16", boxes)
    for i, image in enumerate(images):
        alone = hookviz.grad_cam(detector, image, "backbone.body.16", boxes[i])
        np.testing.assert_allclose(together.heatmaps[i], alone.heatmap, atol=1e-4)
        assert together.class_indices[i] == boxes[i].label
    # each image's own choice, a region and a callable, in one batch of a segmenter
    prepared = torch.randn(3, 3, 96, 128, generator=torch.Generator().manual_seed(0))
    present = hookviz.segment(segmenter, prepared[1:2]).categories[0].index
    wanted = [None, Region(present), lambda out: out["out"][:, 3].sum()]
    own = explain_batch(segmenter, prepared, "backbone.12", wanted)
    for i, target in enumerate(wanted):
        alone = hookviz.grad_cam(segmenter, prepared[i : i + 1], "backbone.12", target)
        np.testing.assert_allclose(own.cams[i], alone.cam, rtol=1e-4, atol=1e-6)
    # a classifier's batch with a class index and a callable mixed
    prepared = torch.randn(2, 3, 96, 96, generator=torch.Generator().manual_seed(1))
    mixed = explain_batch(resnet18, prepared, "layer4", [5, lambda logits: logits[:, 7]])
    assert list(mixed.class_indices) == [5, -1]
    by_class = explain_batch(resnet18, prepared, "layer4", [5, 7])
    np.testing.assert_allclose(mixed.cams, by_class.cams, rtol=1e-5, atol=1e-7)
