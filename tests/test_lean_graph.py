"""The lean graph (hookviz.lean_graph): the same gradients as plain autograd, less memory.

The oracle is PyTorch's own autograd on the same model and input (``lean=False``). On real
torchvision architectures whose modules cover every rule (BatchNorm, Conv2d incl. depthwise,
grouped and strided, ReLU in place or not, ReLU6) next to modules it must leave alone (SiLU,
Hardswish, squeeze-excite, functional ReLUs, views), and under autocast / channels_last, the
gradients are equal bit for bit; on ConvNeXt to float32 rounding (branch sums in another order).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from torch import nn

import hookviz
from hookviz.core.hooks import capture_outputs


def _lean_nodes(output: torch.Tensor) -> int:
    """How many lean nodes the graph behind ``output`` holds."""
    seen, stack, count = set(), [output.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        count += type(node).__name__ == "_LeanNodeBackward"
        stack.extend(next_node for next_node, _ in node.next_functions)
    return count


def _scores_and_gradient(
    model: nn.Module, layer: str, x: torch.Tensor, *, lean: bool, autocast: bool = False
) -> tuple[torch.Tensor, torch.Tensor, int]:
    with (
        torch.enable_grad(),
        torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast),
        capture_outputs(model, [layer], track_grad=True, lean=lean) as captured,
    ):
        logits = model(x)
    # A fixed random mix of every output, so each image and class weighs differently.
    mix = torch.randn(logits.shape, generator=torch.Generator().manual_seed(11))
    score = (logits.float() * mix).sum()
    (gradient,) = torch.autograd.grad(score, captured.tracked[layer])
    return logits.detach(), gradient, _lean_nodes(logits)


def _zoo_model(name: str) -> nn.Module:
    torch.manual_seed(0)
    kwargs = {"init_weights": False, "aux_logits": False} if name == "googlenet" else {}
    model = getattr(torchvision.models, name)(weights=None, **kwargs)
    return model.eval().requires_grad_(False)


ZOO_CASES = [
    ("resnet18", "layer1"),  # BasicBlock, shared in-place ReLU, residual adds
    ("resnet50", "layer2"),  # Bottleneck, strided 1x1 downsample
    ("vgg11", "features.3"),  # conv -> ReLU(inplace) right after the hooked layer
    pytest.param(  # concatenation, BN -> ReLU -> conv (deep: the full suite runs it)
        "densenet121", "features.denseblock1", marks=pytest.mark.slow
    ),
    ("mobilenet_v2", "features.3"),  # ReLU6 in place, depthwise convs
    ("mobilenet_v3_small", "features.2"),  # Hardswish, squeeze-excite (left to autograd)
    ("googlenet", "inception3a"),  # functional ReLU inside BasicConv2d
    ("efficientnet_b0", "features.2"),  # SiLU, stochastic depth in eval
    ("shufflenet_v2_x0_5", "stage2"),  # channel split (views) and shuffle
    ("regnet_x_400mf", "trunk_output.block1"),  # grouped convs
]


@pytest.mark.parametrize(("name", "layer"), ZOO_CASES)
@pytest.mark.slow
def test_gradients_equal_plain_autograd_bit_for_bit(name, layer):
    model = _zoo_model(name)
    x = torch.randn(2, 3, 96, 112, generator=torch.Generator().manual_seed(3))
    plain_logits, plain_gradient, plain_nodes = _scores_and_gradient(model, layer, x, lean=False)
    lean_logits, lean_gradient, lean_nodes = _scores_and_gradient(model, layer, x, lean=True)
    assert plain_nodes == 0
    assert lean_nodes > 0, "no lean node was used: the test would prove nothing"
    assert torch.equal(plain_logits, lean_logits)
    assert torch.equal(plain_gradient, lean_gradient)
    assert plain_gradient.abs().sum() > 0


def test_convnext_gradients_agree_to_float_rounding():
    # Depthwise convs go lean; LayerNorm, GELU, permutes and layer scale stay with autograd.
    # The sums where branches meet may be added in another order: equal to float32 rounding.
    model = _zoo_model("convnext_tiny")
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    _, plain, _ = _scores_and_gradient(model, "features.1", x, lean=False)
    _, lean, nodes = _scores_and_gradient(model, "features.1", x, lean=True)
    assert nodes > 0
    torch.testing.assert_close(lean, plain, rtol=1e-5, atol=1e-5 * float(plain.abs().max()))


def test_modules_outside_the_rules_are_left_to_autograd():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 1),
        nn.Conv2d(4, 4, 3, padding="same"),  # padding given as a word
        nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect"),  # pads outside the conv
        nn.BatchNorm2d(4, track_running_stats=False),  # batch statistics, even in eval
        nn.SiLU(),
        nn.LeakyReLU(0.1),
    ).eval()
    model.requires_grad_(False)
    x = torch.randn(2, 3, 8, 8)
    plain = _scores_and_gradient(model, "0", x, lean=False)
    lean = _scores_and_gradient(model, "0", x, lean=True)
    assert lean[2] == 0
    assert torch.equal(plain[1], lean[1])


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
@pytest.mark.slow
def test_autocast_and_channels_last_give_the_same_gradients(name):
    model = _zoo_model(name).to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 96, 96, generator=torch.Generator().manual_seed(1))
    x = x.to(memory_format=torch.channels_last)
    layer = "layer1" if name == "resnet18" else "features.3"
    _, plain, _ = _scores_and_gradient(model, layer, x, lean=False, autocast=True)
    _, lean, nodes = _scores_and_gradient(model, layer, x, lean=True, autocast=True)
    assert nodes > 0
    assert plain.dtype == lean.dtype
    assert torch.equal(plain, lean)


def test_bundled_model_through_the_public_api(lite0, sample):
    # The real pretrained weights, through ForwardPass (which keeps its graph for any class):
    # its Grad-CAM equals one built from plain autograd's gradient.
    early = hookviz.list_layers(lite0)[3].name
    forward_pass = hookviz.ForwardPass(lite0, sample, early)
    batch = hookviz.core.inputs.prepare_input(lite0, sample)[0]
    with (
        torch.enable_grad(),
        capture_outputs(lite0.model, [early], track_grad=True, lean=False) as captured,
    ):
        logits = lite0.model(batch)
    for target in (forward_pass.predictions[0].index, 3):
        (plain_gradient,) = torch.autograd.grad(
            logits[0, target], captured.tracked[early], retain_graph=True
        )
        expected = hookviz.core.cam.grad_cam_result(
            captured.activations[early][0],
            plain_gradient[0],
            forward_pass.image_size,
            class_index=target,
            class_name="",
            score=0.0,
            probability=0.0,
            layer=early,
            method="gradcam",
        )
        got = forward_pass.grad_cam(target)
        assert got.class_index == target
        assert np.array_equal(got.weights, expected.weights)
        assert np.array_equal(got.heatmap, expected.heatmap)
        assert got.heatmap.std() > 0.05


def test_clamp_edges_and_nan_follow_autograd():
    # Values exactly on the clamp bounds, negative zero and NaN: where the gradient passes
    # must match autograd's own rule for each module, in place or not.
    model = nn.Sequential(
        nn.Identity(),
        nn.ReLU6(inplace=True),
        nn.Hardtanh(-1.0, 1.0),
        nn.ReLU(inplace=True),
        nn.ReLU(),
    )
    values = torch.tensor([-2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, 6.0, 7.0, float("nan")])
    x = values.repeat(2, 2, 1).reshape(1, 2, 2, 10)

    def gradient(lean: bool) -> torch.Tensor:
        with torch.enable_grad(), capture_outputs(model, ["0"], track_grad=True, lean=lean) as c:
            out = model(x.clone())
        assert (_lean_nodes(out) == 4) == lean
        return torch.autograd.grad(out.nansum() + out.sum() * 0, c.tracked["0"])[0]

    torch.testing.assert_close(gradient(True), gradient(False), rtol=0, atol=0, equal_nan=True)


def test_views_and_leaves_before_an_in_place_module_fall_back_to_autograd():
    class SliceThenRelu(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.relu = nn.ReLU(inplace=True)
            self.conv = nn.Conv2d(2, 3, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            view = x[:, 1:3]  # a view: an in-place ReLU on it must also rewrite x's history
            return self.conv(self.relu(view)).mean((2, 3)) + x.mean((1, 2, 3))[:, None]

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 1), SliceThenRelu()).eval().requires_grad_(False)
    x = torch.randn(2, 3, 8, 8)
    plain = _scores_and_gradient(model, "0", x, lean=False)
    lean = _scores_and_gradient(model, "0", x, lean=True)
    assert lean[2] > 0  # the conv after the view still goes lean
    assert torch.equal(plain[1], lean[1])


def test_trainable_parameters_keep_plain_autograd_and_get_their_gradients():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 2, 3))
    model.eval()  # parameters require grad: a user training or fine-tuning their model
    x = torch.randn(1, 3, 10, 10)

    def parameter_gradients(lean: bool) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        with torch.enable_grad(), capture_outputs(model, ["0"], track_grad=True, lean=lean):
            out = model(x)
        assert _lean_nodes(out) == 0
        out.square().sum().backward()
        return [p.grad.clone() for p in model[1:].parameters()]

    pairs = zip(parameter_gradients(True), parameter_gradients(False), strict=True)
    for with_lean, plain in pairs:
        assert torch.equal(with_lean, plain)


def test_an_error_inside_a_lean_module_restores_grad_mode_and_removes_hooks():
    # The second conv expects 5 channels and gets 4: it raises while recording is paused.
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.Conv2d(5, 2, 1))
    model.eval().requires_grad_(False)
    assert torch.is_grad_enabled()
    with pytest.raises(RuntimeError), capture_outputs(model, ["0"], track_grad=True):
        model(torch.randn(1, 3, 4, 4))
    assert torch.is_grad_enabled(), "grad mode was left off"
    assert hookviz.count_hooks(model) == 0


def test_other_threads_are_not_touched_while_a_lean_forward_runs():
    # Thread A's forward stops in the middle (after its hooked layer, hooks armed) until
    # thread B has run its own forward with gradients: B must get plain autograd.
    inside, done = threading.Event(), threading.Event()

    class Wait(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            inside.set()
            assert done.wait(30)
            return x

    torch.manual_seed(0)
    model_a = nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU(), Wait(), nn.Conv2d(4, 2, 1))
    model_b = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), nn.ReLU())
    for model in (model_a, model_b):
        model.eval().requires_grad_(False)
    result = {}

    def run_a() -> None:
        with torch.enable_grad(), capture_outputs(model_a, ["0"], track_grad=True) as captured:
            out = model_a(torch.randn(1, 3, 4, 4))
        result["a"] = _lean_nodes(out), torch.autograd.grad(out.sum(), captured.tracked["0"])

    thread = threading.Thread(target=run_a)
    thread.start()
    assert inside.wait(30)
    x = torch.randn(1, 3, 4, 4, requires_grad=True)
    out_b = model_b(x)
    done.set()
    thread.join(30)
    assert _lean_nodes(out_b) == 0
    assert type(out_b.grad_fn).__name__ == "ReluBackward0"
    assert result["a"][0] > 0


_MEMORY_PROBE = textwrap.dedent(
    """
    import json, re, sys
    from pathlib import Path
    import torch, torchvision
    from hookviz.core.hooks import capture_outputs

    def rss(field):
        return int(re.search(field + r":\\s+(\\d+)", Path("/proc/self/status").read_text())[1])

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval().requires_grad_(False)
    x = torch.randn(4, 3, 160, 160)

    def grad_cam(lean):
        hooked = capture_outputs(model, ["layer2"], track_grad=True, lean=lean)
        with torch.enable_grad(), hooked as c:
            logits = model(x)
        return torch.autograd.grad(logits[:, 0].sum(), c.tracked["layer2"])[0]

    def inference(_):
        with torch.no_grad():
            return model(x)

    peaks = {}
    for name, run, arg in (("plain", grad_cam, False), ("lean", grad_cam, True),
                           ("inference", inference, None)):
        run(arg)  # warm-up: first-call allocations are not the call's cost
        before = rss("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
        run(arg)
        peaks[name] = (rss("VmHWM") - before) / 1024
    print(json.dumps(peaks))
    """
)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux peak-RSS reset")
@pytest.mark.slow
def test_the_lean_graph_needs_far_less_memory_at_an_early_layer():
    # Peak memory of one Grad-CAM at resnet50 layer2 (batch 4), in a fresh process whose large
    # allocations go to mmap, so freed memory really leaves and the peak means something.
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    output = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout
    peaks = json.loads(output.splitlines()[-1])
    # plain autograd keeps layer3/layer4's BatchNorm inputs and ReLU outputs as float32;
    # lean keeps 1-byte masks: measured 56 vs 22 MB, inference alone 22 MB.
    assert peaks["lean"] < 0.65 * peaks["plain"], peaks
    assert peaks["lean"] < 1.5 * peaks["inference"], peaks
