"""The cost estimates count what the jobs run: the passes of a real (small, random-weight)
ResNet-18 counted while each job runs, against the passes its estimate multiplies; and what an
estimate times on a fresh forward pass (a backward for a gradient method, none for the slow
ones). Times themselves are bench/bench_estimates.py's, never asserted here."""

from __future__ import annotations

import pytest
import torch

import hookviz
from hookviz.app.pages import method_estimates
from hookviz.core.method_costs import WHOLE_BACKWARD_FORWARDS, method_cost
from hookviz.insight.faithfulness import (
    ROAD_IMPUTATIONS,
    ROAD_PERCENTILES,
    road_imputation_seconds,
)

from .conftest import random_input


def _forward_images(model: torch.nn.Module, run) -> int:
    """How many images ``run()`` passes through ``model``'s head (its last module)."""
    seen = []
    head = list(model.children())[-1]
    handle = head.register_forward_pre_hook(lambda _m, args: seen.append(int(args[0].shape[0])))
    try:
        run()
    finally:
        handle.remove()
    return sum(seen)


@pytest.mark.slow
def test_a_fresh_pass_times_one_backward_for_a_gradient_method(resnet18) -> None:
    """Before any backward, a gradient method's estimate times the default target's backward
    (a forward pass's time would say 10-100x too much above a late layer)."""
    kept = hookviz.ForwardPass(resnet18, random_input(64, 64, seed=1), "layer4")
    assert kept.backward_seconds is None
    cost = kept.method_cost("gradcam")
    assert (cost.forwards, cost.backwards) == (0, 1)
    assert kept.backward_seconds is not None  # the backward was run, on the pass itself
    # from then on: one backward at the pass's fastest
    assert kept.method_cost("gradcam").seconds == kept.backward_seconds


@pytest.mark.slow
def test_a_slow_methods_estimate_runs_no_backward(resnet18) -> None:
    kept = hookviz.ForwardPass(resnet18, random_input(64, 64, seed=2), "layer4")
    cost = kept.method_cost("scorecam")
    assert (cost.forwards, cost.backwards) == (512, 0)
    assert kept.backward_seconds is None


@pytest.mark.slow
def test_fullgrads_backward_runs_to_the_input(resnet18) -> None:
    """FullGrad's backward goes through the whole network: counted as forward passes, not as
    the backward to the layer."""
    said = method_cost("fullgrad", 512, forward_seconds=0.1, backward_seconds=0.001)
    assert said.seconds == pytest.approx(0.1 * (1 + WHOLE_BACKWARD_FORWARDS))
    kept = hookviz.ForwardPass(resnet18, random_input(64, 64, seed=3), "layer4")
    cost = kept.method_cost("fullgrad")
    assert kept.backward_seconds is None  # no backward to the layer timed for it
    # its forward is the input's alone (timed once), as Smooth Grad-CAM++'s noisy copy (asked
    # once a backward is timed, so that its backward is the pass's own figure)
    kept.method_cost("gradcam")
    smooth = kept.method_cost("smoothgradcam++", num_samples=1)
    assert (smooth.forwards, smooth.backwards) == (1, 1)
    one_input = smooth.seconds - kept.backward_seconds
    assert cost.seconds == pytest.approx(one_input * (1 + WHOLE_BACKWARD_FORWARDS))
    ran = _forward_images(resnet18.model, lambda: kept.grad_cam(None, "fullgrad"))
    assert ran == cost.forwards == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "options", "photo"),
    [
        ("occlusion", {"window": 16, "stride": 12}, False),
        # window and stride in the photo's pixels: 2.8 input pixels each (fed at 224)
        ("occlusion", {"window": 16, "stride": 12}, True),
        ("rise", {"masks": 40}, False),
    ],
)
def test_the_pixel_attributions_passes_are_those_estimated(
    resnet18, method, options, photo
) -> None:
    x = hookviz.sample_image().resize((100, 80)) if photo else random_input(64, 80, seed=4)
    kept = hookviz.ForwardPass(resnet18, x, "layer4")
    one = method_estimates.one_input_seconds(kept)
    counted = round(method_estimates.slow_seconds(kept, method, **options) / one)
    ran = _forward_images(resnet18.model, lambda: hookviz.attribute(resnet18, x, method, **options))
    assert ran - 1 <= counted <= ran  # (the attribution also resolves its target)


@pytest.mark.slow
def test_the_quick_scores_passes_are_those_estimated(resnet18) -> None:
    x = random_input(64, 64, seed=5)
    kept = hookviz.ForwardPass(resnet18, x, "layer4")
    heat = kept.grad_cam(None).heatmap
    one = method_estimates.one_input_seconds(kept)
    counted = round(method_estimates.scores_seconds(kept) / one)
    quick = ["deletion", "insertion", "average_drop", "increase_in_confidence"]
    ran = _forward_images(
        resnet18.model, lambda: hookviz.faithfulness(resnet18, x, heat, None, quick)
    )
    assert counted == ran


@pytest.mark.slow
def test_the_road_estimate_counts_its_imputations_and_passes(resnet18) -> None:
    """ROAD: one imputation per percentile and metric, each imputed input a forward pass, and
    the image once; the imputation timed on this input."""
    x = random_input(64, 64, seed=6)
    kept = hookviz.ForwardPass(resnet18, x, "layer4")
    heat = kept.grad_cam(None).heatmap
    assert len(ROAD_PERCENTILES) * 2 == ROAD_IMPUTATIONS
    imputation = road_imputation_seconds(resnet18, x)
    assert imputation > 0
    one = method_estimates.one_input_seconds(kept)
    said = method_estimates.road_seconds(kept, imputation)
    assert said == pytest.approx(ROAD_IMPUTATIONS * imputation + (ROAD_IMPUTATIONS + 1) * one)
    road = ["road_morf", "road_lerf"]
    ran = _forward_images(
        resnet18.model, lambda: hookviz.faithfulness(resnet18, x, heat, None, road)
    )
    assert ran == ROAD_IMPUTATIONS + 1


@pytest.mark.slow
def test_the_sanity_checks_estimate_counts_the_copy_and_each_comparison() -> None:
    """One map per step and the trained model's, each a forward pass and the method's own
    time; two forward passes (the target, the modules' order) and two for the model's copy;
    each step's comparison with the original, as timed once."""
    comparison = method_estimates.comparison_seconds()
    assert comparison > 0
    steps = 6
    said = method_estimates.sanity_seconds(0.1, 0.02, steps)
    assert said == pytest.approx((steps + 1) * 0.12 + (2 + 2) * 0.1 + steps * comparison)
