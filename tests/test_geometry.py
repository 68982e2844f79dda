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
        ((4000, 600), (224, 1493)),  # panorama: short side stays 224, fed whole at 6.7:1
        ((600, 4000), (1493, 224)),  # a tall strip likewise
        ((3000, 300), (224, 1792)),  # 10:1 is squeezed to the 8:1 limit, short side still 224
        ((30000, 8), (224, 1792)),  # extreme strip: same, never a short side below 224
    ],
)
def test_input_size_keeps_the_whole_image(size, expected):
    prep = Preprocessing(size=224, mean=(0.5,) * 3, std=(0.5,) * 3)
    assert prep.input_size(*size) == expected
    assert min(prep.input_size(*size)) == 224


def test_cost_and_squeeze_say_what_a_long_image_takes():
    prep = Preprocessing(size=224, mean=(0.5,) * 3, std=(0.5,) * 3)
    assert prep.squeeze(640, 480) == 1.0 and prep.cost(224, 224) == 1.0
    assert prep.squeeze(4000, 600) == 1.0
    assert prep.cost(4000, 600) == pytest.approx(1493 / 224)
    assert prep.squeeze(3000, 300) == pytest.approx(10 / 8)
    assert prep.cost(3000, 300) == pytest.approx(8.0)


@pytest.mark.slow
def test_a_panorama_keeps_its_prediction(lite0, sample):
    """Six copies of the sample side by side (3072x600): fed whole with a 224-pixel short side
    (1147x224), each copy is as large as the photo alone and the prediction holds. The old cap
    fed it at 672x101, where the people were too small and the probability fell about 4x."""
    strip = Image.new("RGB", (sample.width * 6, sample.height))
    for copy in range(6):
        strip.paste(sample, (sample.width * copy, 0))
    assert lite0.preprocessing.input_size(*strip.size) == (224, 1147)
    whole = hookviz.predict(lite0, strip)[0]
    assert whole.name == "military uniform"
    shrunk = hookviz.predict(lite0, lite0.preprocessing.to_tensor(strip.resize((672, 101))))
    shrunk_probability = next((p.probability for p in shrunk if p.index == whole.index), 0.0)
    assert whole.probability > 2 * shrunk_probability
    cam = hookviz.grad_cam(lite0, strip, "bn2")
    assert cam.heatmap.shape == (strip.height, strip.width)
