"""Concepts in one image (Deep Feature Factorization), against pytorch-grad-cam's ``dff`` on the
same activations (its NMF is scikit-learn's): the factorisation is at least as close as the
reference's for the same k, the maps go onto the image's pixels, the concepts are named through
a pooled linear head and only there, and bad requests say what is wrong. Real models with
random weights, no mocks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from pytorch_grad_cam.feature_factorization.deep_feature_factorization import dff

import hookviz
from hookviz.insight.concepts import LABELS_PER_CONCEPT
from hookviz.insight.nmf import nmf

from .conftest import random_input


def _activations(loaded: hookviz.LoadedModel, x, layer: str) -> np.ndarray:
    return hookviz.feature_maps(loaded, x, layer).activations.numpy()


def _reference_error(activations: np.ndarray, k: int) -> float:
    """pytorch-grad-cam's DFF of the same activations: ||A - min - W H|| / ||A - min||."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (scikit-learn's "maximum iterations reached")
        vectors, maps = dff(activations[None].copy(), n_components=k)
    flat = activations.reshape(activations.shape[0], -1)
    offset = flat.min(axis=1, keepdims=True)
    shifted = flat - offset
    rebuilt = (vectors - offset) @ maps.reshape(k, -1)
    return float(np.linalg.norm(shifted - rebuilt) / np.linalg.norm(shifted))


@pytest.mark.parametrize(("layer", "k"), [("layer4", 5), ("layer3", 3), ("layer2", 8)])
def test_the_factorisation_is_as_close_as_the_references(resnet18, layer, k) -> None:
    x = random_input(160, 192, seed=3)
    found = hookviz.concepts(resnet18, x, layer=layer, k=k)
    activations = _activations(resnet18, x, layer)
    channels, height, width = activations.shape
    assert found.layer == layer and found.k == k
    assert found.vectors.shape == (channels, k) and found.maps.shape == (k, height, width)
    assert (found.vectors >= 0).all() and (found.maps >= 0).all()
    # the activations minus each channel's minimum, close to vectors @ maps
    flat = activations.reshape(channels, -1)
    np.testing.assert_allclose(found.offset, flat.min(axis=1), rtol=0, atol=1e-6)
    shifted = flat - found.offset[:, None]
    rebuilt = found.vectors @ found.maps.reshape(k, -1)
    error = np.linalg.norm(shifted - rebuilt) / np.linalg.norm(shifted)
    assert error == pytest.approx(found.error, abs=1e-5)
    assert found.error <= _reference_error(activations, k) + 1e-5


def test_the_heatmaps_lie_on_the_images_pixels(resnet18, sample) -> None:
    found = hookviz.concepts(resnet18, sample, layer="layer3", k=4)
    width, height = sample.size
    assert found.size == (height, width)
    assert found.heatmaps.shape == (4, height, width)
    assert found.heatmaps.min() >= 0 and found.heatmaps.max() <= 1
    assert np.allclose(found.heatmaps.max(axis=(1, 2)), 1)  # each scaled to its own range
    # bilinear from the layer's grid: each concept strongest where its map is
    for heat, grid in zip(found.heatmaps, found.maps, strict=True):
        row, column = np.unravel_index(grid.argmax(), grid.shape)
        cell = heat[
            row * height // grid.shape[0] : (row + 1) * height // grid.shape[0],
            column * width // grid.shape[1] : (column + 1) * width // grid.shape[1],
        ]
        assert cell.max() >= 0.9
    picture = found._repr_png_()
    assert picture.startswith(b"\x89PNG")


def test_concepts_are_named_through_the_pooled_head_only(resnet18) -> None:
    x = random_input(seed=5)
    found = hookviz.concepts(resnet18, x, layer="layer4", k=3)
    assert found.labels_reason == ""
    # the head's classes for each concept's vector read as pooled features (with the offset)
    head = resnet18.model.fc
    with torch.no_grad():
        pooled = torch.from_numpy(found.vectors + found.offset[:, None]).T
        probabilities = head(pooled).softmax(dim=1)
    best = probabilities.topk(LABELS_PER_CONCEPT, dim=1)
    names = [tuple(resnet18.class_name(int(i)) for i in row) for row in best.indices]
    assert list(found.labels) == names
    np.testing.assert_allclose(found.label_probabilities, best.values.numpy(), rtol=1e-4)
    # a layer that does not feed the head directly: no names, and why
    earlier = hookviz.concepts(resnet18, x, layer="layer3", k=3)
    assert earlier.labels is None and earlier.label_probabilities is None
    assert "no linear layer from the 256 channels of 'layer3'" in earlier.labels_reason


def test_a_head_with_something_between_names_nothing(resnet18, vgg11) -> None:
    # the last block's second BatchNorm: its residual sum and ReLU run before the pooling
    found = hookviz.concepts(resnet18, random_input(seed=6), layer="layer4.1.bn2", k=2)
    assert found.labels is None and "something else runs between them" in found.labels_reason
    # VGG's head reads the flattened 7x7 grid through three linear layers
    found = hookviz.concepts(vgg11, random_input(seed=6), layer="features.18", k=2)
    assert found.labels is None
    assert "no linear layer from the 512 channels of 'features.18'" in found.labels_reason


def test_a_detector_has_concepts_but_no_classes_to_name_them(detector, sample) -> None:
    found = hookviz.concepts(detector, sample, k=3)
    assert found.maps.shape[0] == 3 and found.labels is None
    assert "detection" in found.labels_reason


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "5", 10**6])
def test_a_bad_k_is_refused_with_the_range(resnet18, k) -> None:
    with pytest.raises(hookviz.ConceptError, match=r"a whole number from 1 to 49 at 'layer4'"):
        hookviz.concepts(resnet18, random_input(seed=1), layer="layer4", k=k)


def test_nmf_recovers_an_exact_factorisation() -> None:
    generator = torch.Generator().manual_seed(0)
    w = torch.rand(30, 4, generator=generator, dtype=torch.float64)
    h = torch.rand(4, 50, generator=generator, dtype=torch.float64)
    found = nmf(w @ h, 4)
    assert found.error < 1e-3
    assert (found.w >= 0).all() and (found.h >= 0).all()
    with pytest.raises(ValueError, match="non-negative"):
        nmf(-(w @ h), 2)
    with pytest.raises(ValueError, match="k must be between 1 and 30"):
        nmf(w @ h, 31)
    zero = nmf(torch.zeros(5, 6), 2)
    assert zero.error == 0 and not zero.w.any()
