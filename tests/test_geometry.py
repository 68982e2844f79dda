"""The explanation covers the whole image: no centre crop, heatmap on the original pixel grid,
so an object at the edge of a wide or tall photo is found where it is."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import hookviz
from hookviz.core.preprocess import Preprocessing


class RedDetector(nn.Module):
    """Scores 'red' by the average of a coarse red-minus-others map (stride 8)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Conv2d(3, 1, kernel_size=8, stride=8, bias=False)
        self.fc = nn.Linear(1, 2)
        with torch.no_grad():
            weight = torch.zeros(1, 3, 8, 8)
            weight[0, 0], weight[0, 1], weight[0, 2] = 1 / 64, -1 / 64, -1 / 64
            self.features.weight.copy_(weight)
            self.fc.weight.copy_(torch.tensor([[1.0], [-1.0]]))
            self.fc.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def detector() -> hookviz.LoadedModel:
    prep = Preprocessing(size=64, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    return hookviz.wrap_model(
        RedDetector(), categories=["red", "not red"], preprocessing=prep, device="cpu"
    )


def _photo(width: int, height: int, box: tuple[int, int, int, int]) -> Image.Image:
    pixels = np.full((height, width, 3), 255, np.uint8)
    left, top, right, bottom = box
    pixels[top:bottom, left:right] = (255, 0, 0)
    return Image.fromarray(pixels)


@pytest.mark.parametrize(
    ("width", "height", "box"),
    [
        (600, 200, (560, 80, 600, 120)),  # right edge of a wide photo
        (600, 200, (0, 0, 40, 40)),  # top-left corner of a wide photo
        (200, 600, (80, 560, 120, 600)),  # bottom edge of a tall photo
        (200, 600, (160, 0, 200, 40)),  # top-right corner of a tall photo
    ],
)
def test_object_at_the_edge_is_explained_where_it_is(detector, width, height, box):
    cam = hookviz.grad_cam(detector, _photo(width, height, box), "features", target=0)
    assert cam.heatmap.shape == (height, width)
    left, top, right, bottom = box
    peak_y, peak_x = np.unravel_index(int(cam.heatmap.argmax()), cam.heatmap.shape)
    # within one coarse cell (8 input px = 8 * scale image px) of the object
    margin = 8 * max(width, height) / 192
    assert left - margin <= peak_x <= right + margin
    assert top - margin <= peak_y <= bottom + margin
    inside = cam.heatmap[top:bottom, left:right].mean()
    assert inside > 4 * cam.heatmap.mean()


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ((640, 480), (224, 299)),  # landscape: short side -> 224, aspect kept
        ((480, 640), (299, 224)),  # portrait
        ((224, 224), (224, 224)),
        ((32, 32), (224, 224)),  # small images are scaled up
        ((3000, 500), (112, 672)),  # long side capped at 3 x 224, aspect kept
        ((30000, 8), (32, 672)),  # extreme strip: short side clamped to the minimum
    ],
)
def test_input_size_keeps_the_whole_image(size, expected):
    prep = Preprocessing(size=224, mean=(0.5,) * 3, std=(0.5,) * 3)
    assert prep.input_size(*size) == expected


def test_to_tensor_normalises_with_mean_and_std():
    prep = Preprocessing(size=16, mean=(0.5, 0.5, 0.5), std=(0.5, 0.25, 0.5), min_side=8)
    image = Image.new("RGB", (32, 16), (255, 0, 128))
    tensor = prep.to_tensor(image)
    assert tensor.shape == (1, 3, 16, 32)
    assert tensor.dtype == torch.float32
    torch.testing.assert_close(tensor[0, :, 5, 5], torch.tensor([1.0, -2.0, 128 / 255 * 2 - 1]))


def test_tensor_input_heatmap_is_on_the_tensor_grid(resnet18):
    x = torch.randn(1, 3, 150, 250)
    assert hookviz.grad_cam(resnet18, x, "layer3").heatmap.shape == (150, 250)
    assert hookviz.grad_cam(resnet18, x[0], "layer3").heatmap.shape == (150, 250)


@pytest.mark.parametrize(
    "bad",
    [
        torch.randn(2, 3, 32, 32),
        torch.randn(1, 1, 32, 32),
        torch.zeros(1, 3, 32, 32, dtype=torch.uint8),
        "image.png",
    ],
)
def test_bad_image_arguments_are_refused_clearly(resnet18, bad):
    with pytest.raises(hookviz.ImageError, match="expected"):
        hookviz.predict(resnet18, bad)
