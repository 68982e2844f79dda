"""The model-randomisation sanity check (Adebayo et al. 2018) and the baselines it must catch:
the cascade goes from the head down and leaves the caller's model as it was; the same call
gives the same numbers; Grad-CAM of the trained Lite0 changes as its weights are destroyed and
is not flagged, while the edge map and the random map, which never read the model, are; the
rank correlation is Spearman's (scipy's as the oracle) and the SSIM Wang et al.'s formula."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hookviz
from hookviz.insight.sanity import SURVIVES, spearman, structural_similarity


@pytest.fixture(scope="module")
def lite() -> hookviz.LoadedModel:
    return hookviz.load_model("efficientnet_lite0", device="cpu")  # bundled, trained


@pytest.fixture(scope="module")
def photo():
    return hookviz.sample_image().resize((160, 188))


@pytest.fixture(scope="module")
def gradcam_check(lite, photo) -> hookviz.SanityCheck:
    return hookviz.sanity_check(lite, photo, "gradcam", steps=4)


def test_the_cascade_goes_from_the_head_down_and_the_model_is_left_alone(lite, photo) -> None:
    before = {k: v.clone() for k, v in lite.model.state_dict().items()}
    check = hookviz.sanity_check(lite, photo, "gradcam", steps=4)
    after = lite.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert hookviz.count_hooks(lite.model) == 0
    assert check.modules[0][0] == "classifier" and check.steps[-1] == "conv_stem"
    flat = [name for step in check.modules for name in step]
    assert len(flat) == len(set(flat))  # each module randomised once, cumulatively
    assert check.steps == [step[-1] for step in check.modules] and len(check.maps) == 4
    assert check.layer == hookviz.default_layer(lite)


def test_gradcam_of_a_trained_model_changes_with_its_weights(gradcam_check) -> None:
    check = gradcam_check
    assert not check.flagged and check.rank_correlation[-1] < SURVIVES
    assert all(r < 0.9 for r in check.rank_correlation)
    assert all(m.shape == check.original.shape for m in check.maps)
    assert all(m.min() >= 0 and m.max() <= 1 for m in check.maps)


@pytest.mark.slow
def test_the_check_is_the_same_every_time(gradcam_check, lite, photo) -> None:
    again = hookviz.sanity_check(lite, photo, "gradcam", steps=4)
    assert again.rank_correlation == gradcam_check.rank_correlation
    assert all(np.array_equal(a, b) for a, b in zip(again.maps, gradcam_check.maps, strict=True))
    other = hookviz.sanity_check(lite, photo, "gradcam", steps=4, seed=1)
    assert other.rank_correlation != gradcam_check.rank_correlation


@pytest.mark.parametrize("baseline", ["edges", "random"])
def test_a_map_that_never_reads_the_model_is_flagged(lite, photo, baseline) -> None:
    check = hookviz.sanity_check(lite, photo, baseline, steps=2)
    assert check.flagged and check.layer is None
    assert check.rank_correlation == pytest.approx([1.0, 1.0])
    assert check.ssim == pytest.approx([1.0, 1.0])


def test_an_attribution_is_checked_too(lite, photo) -> None:
    check = hookviz.sanity_check(lite, photo, "saliency", steps=3)
    assert check.layer is None and len(check.maps) == 3
    assert check.rank_correlation[-1] < check.rank_correlation[0] <= 1


def test_an_unknown_method_is_refused_with_the_choices(lite, photo) -> None:
    with pytest.raises(hookviz.HookvizError, match=r"gradcam.*saliency"):
        hookviz.sanity_check(lite, photo, "magic")


def test_spearman_is_scipys_with_ties() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    a = rng.random((20, 30)).round(1)  # many ties
    b = a + rng.normal(0, 0.3, a.shape)
    assert spearman(a, b) == pytest.approx(stats.spearmanr(a.ravel(), b.ravel())[0], abs=1e-12)
    assert spearman(a, np.zeros_like(a)) == 0.0  # a flat map correlates with nothing


def test_ssim_is_wang_et_als_formula() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.random((7, 7)), rng.random((7, 7))  # one window: the formula by hand
    n = a.size
    ma, mb = a.mean(), b.mean()
    va, vb = a.var(ddof=1), b.var(ddof=1)
    cov = ((a - ma) * (b - mb)).sum() / (n - 1)
    c1, c2 = 0.01**2, 0.03**2
    expected = (2 * ma * mb + c1) * (2 * cov + c2) / ((ma**2 + mb**2 + c1) * (va + vb + c2))
    assert structural_similarity(a, b) == pytest.approx(expected, rel=1e-9)
    big = rng.random((40, 50))
    assert structural_similarity(big, big) == pytest.approx(1.0)
    assert structural_similarity(big, 1 - big) < 0
