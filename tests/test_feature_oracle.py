"""Feature maps captured by hookviz's forward hook equal torchvision's FX-based
``create_feature_extractor`` output for the same layer: an independent way to read a layer.

(Layers followed by an in-place op are left out here on purpose: FX returns the very tensor the
in-place op then overwrites, so the oracle itself is wrong there; test_hook_lifecycle covers
them against a direct call of the modules instead.)
"""

from __future__ import annotations

import pytest
import torch
from torchvision.models.feature_extraction import create_feature_extractor

import hookviz

from .conftest import random_input

# each case builds a full-size network twice (hooked and FX-traced): several seconds each
pytestmark = pytest.mark.slow

CASES = {
    "resnet18": ["layer1", "layer2.0.conv1", "layer3", "layer4"],
    "vgg11": ["features.2", "features.9", "features"],
    "mobilenet_v3_small": ["features.1", "features.6", "features"],
    "densenet121": ["features.denseblock2", "features.transition3.pool", "features"],
}


@pytest.mark.parametrize("name", list(CASES))
def test_hooked_maps_equal_fx_feature_extractor(name):
    torch.manual_seed(0)
    loaded = hookviz.load_model(name, pretrained=False, device="cpu")
    x = random_input(160, 224, seed=3)  # non-square on purpose
    extractor = create_feature_extractor(loaded.model, return_nodes=CASES[name])
    with torch.no_grad():
        expected = extractor(x)
    for layer in CASES[name]:
        captured = hookviz.feature_maps(loaded, x, layer).activations
        torch.testing.assert_close(captured, expected[layer][0], rtol=1e-5, atol=1e-6)
        # the gradient path captures the same maps
        analysed = hookviz.analyze(loaded, x, layer, target=1).features.activations
        torch.testing.assert_close(analysed, expected[layer][0], rtol=1e-5, atol=1e-6)
