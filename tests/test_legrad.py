"""LeGrad (``hookviz.core.legrad``) against TorchCAM 0.5.0's ``LeGrad`` on a small torchvision
ViT with random weights, on the CPU: the same map for the same blocks and class, the model left
as it was, and anything but a torchvision ViT refused.

The reference runs on its own copy of the model (TorchCAM registers hooks of its own), with
TorchCAM's normalization; hookviz's coarse ``cam`` scaled to [0, 1] is compared with it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn
from torch.nn.modules import module as module_hooks

import hookviz
from hookviz.core import legrad as legrad_module
from hookviz.core.legrad import LEGRAD, legrad
from hookviz.core.targets import resolve_target

from .conftest import random_input

torchvision = pytest.importorskip("torchvision")
torchcam_methods = pytest.importorskip("torchcam.methods")

MIN_R = 0.999
SIZE = 64
LAYERS = 4
CLASSES = 10
BLOCK = "encoder.layers.encoder_layer_{}"


@pytest.fixture(scope="module")
def vit() -> hookviz.LoadedModel:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        module = torchvision.models.VisionTransformer(
            image_size=SIZE,
            patch_size=16,
            num_layers=LAYERS,
            num_heads=2,
            hidden_dim=32,
            mlp_dim=64,
            num_classes=CLASSES,
        )
        # torchvision starts the head (and the class token) at zero: every logit would be 0
        # and every gradient, so every map, blank
        nn.init.normal_(module.heads.head.weight, std=0.5)
        nn.init.normal_(module.class_token, std=0.5)
    prep = hookviz.Preprocessing(
        size=SIZE, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), fixed=True, multiple=16
    )
    return hookviz.wrap_model(
        module, name="tiny_tv_vit", num_classes=CLASSES, preprocessing=prep, device="cpu"
    )


@pytest.fixture(scope="module")
def image() -> torch.Tensor:
    return random_input(SIZE, SIZE, seed=3)


def _reference(loaded: hookviz.LoadedModel, x: torch.Tensor, last: int, blocks: int | None):
    """TorchCAM's LeGrad map (gh, gw) for blocks ``last - blocks + 1 .. last`` (all from the
    first for None) and the top class, on an unfrozen copy of the model."""
    model = copy.deepcopy(loaded.model).requires_grad_(True).eval()
    first = 0 if blocks is None else max(0, last + 1 - blocks)
    targets = [BLOCK.format(i) for i in range(first, last + 1)]
    with torch.enable_grad(), torchcam_methods.LeGrad(model, targets) as extractor:
        scores = model(x)
        cls = int(scores[0].argmax())
        (cam,) = extractor(cls, scores=scores)
    return cam[0].detach().numpy(), cls


def _probe(loaded: hookviz.LoadedModel, x: torch.Tensor, layer: str, target: int, **options):
    """A ``Probe`` for legrad, as ``ForwardPass._probe`` builds it for a method of
    ``pass_methods.py`` (its options: the defaults with the caller's applied)."""
    forward = hookviz.ForwardPass(loaded, x, layer)
    resolved = resolve_target(forward.context, target)
    chosen = {"eigen_smooth": False, "aug_smooth": False, **LEGRAD["legrad"][1], **options}
    return forward._probe(resolved, chosen, None)


def _scaled(cam: np.ndarray) -> np.ndarray:
    return (cam - cam.min()) / (cam.max() - cam.min())


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


_FORWARD_HOOKS = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
)
_GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_hooks_with_kwargs",
    "_global_forward_hooks_always_called",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)


def _hooks_of(module: nn.Module) -> int:
    """Every forward and backward hook on ``module`` (pre-hooks and kwargs ones included)."""
    return sum(len(getattr(module, kind, {})) for kind in _FORWARD_HOOKS)


def _global_hooks() -> int:
    return sum(len(getattr(module_hooks, kind, {})) for kind in _GLOBAL_HOOKS)


@pytest.mark.parametrize("blocks", [None, 2])
@pytest.mark.parametrize("last", [LAYERS - 1, 2])
def test_legrad_matches_torchcam(vit, image, blocks, last):
    reference, cls = _reference(vit, image, last, blocks)
    raw, weights = legrad(_probe(vit, image, BLOCK.format(last), cls, blocks=blocks))
    assert weights is None
    assert raw.shape == (1, SIZE // 16, SIZE // 16) and raw.dtype == torch.float32
    ours = raw[0].numpy()
    assert (ours >= 0).all()  # positive gradients only: the caller's ReLU changes nothing
    assert _pearson(ours, reference) >= MIN_R
    # TorchCAM's min-max normalization is hookviz's scaling to [0, 1]
    np.testing.assert_allclose(_scaled(ours), reference, atol=1e-5)


def test_the_attention_output_is_kept_not_replayed(vit, image, monkeypatch):
    """On this torch the probabilities are a view of the softmax output the attention's output
    was computed from: no block recomputes its attention output."""

    def refused(*_args):
        raise AssertionError("an attention output was recomputed")

    monkeypatch.setattr(legrad_module, "_replayed", refused)
    raw, _ = legrad(_probe(vit, image, BLOCK.format(LAYERS - 1), 1))
    assert raw.shape == (1, SIZE // 16, SIZE // 16)


def test_the_replay_gives_the_same_map(vit, image, monkeypatch):
    """Where the softmax output is not found in the output's graph, the attention output is
    recomputed from the probabilities: the same map."""
    kept, _ = legrad(_probe(vit, image, BLOCK.format(LAYERS - 1), 1))
    monkeypatch.setattr(legrad_module, "_softmax_of", lambda *_args: None)
    replayed, _ = legrad(_probe(vit, image, BLOCK.format(LAYERS - 1), 1))
    torch.testing.assert_close(replayed, kept)
    assert sum(map(_hooks_of, vit.model.modules())) == 0


@pytest.mark.parametrize("equal_rows", [True, False])
def test_a_shared_row_gradient_is_the_layers_own(equal_rows):
    layer = nn.Linear(6, 4).requires_grad_(False)
    inputs = torch.randn(2, 5, 6, requires_grad=True)
    seed = torch.randn(2, 1, 4).repeat(1, 5, 1) if equal_rows else torch.randn(2, 5, 4)
    (expected,) = torch.autograd.grad(layer(inputs), [inputs], seed)
    shared = legrad_module._SharedRowGradient.apply(inputs, layer(inputs).detach(), layer.weight)
    (found,) = torch.autograd.grad(shared, [inputs], seed)
    torch.testing.assert_close(found, expected)


def test_blocks_beyond_the_first_are_all_of_them(vit, image):
    cls = 4
    everything, _ = legrad(_probe(vit, image, BLOCK.format(2), cls))
    more, _ = legrad(_probe(vit, image, BLOCK.format(2), cls, blocks=10))
    torch.testing.assert_close(more, everything)
    one, _ = legrad(_probe(vit, image, BLOCK.format(2), cls, blocks=1))
    assert not torch.allclose(one, everything)


def test_a_layer_inside_a_block_reads_its_block(vit, image):
    inner = BLOCK.format(2) + ".ln_2"
    listed = {layer.name for layer in hookviz.list_layers(vit)}
    if inner not in listed:  # the layer table decides what a caller may pick
        inner = next(name for name in listed if name.startswith(BLOCK.format(2) + "."))
    ours, _ = legrad(_probe(vit, image, inner, 1, blocks=2))
    block, _ = legrad(_probe(vit, image, BLOCK.format(2), 1, blocks=2))
    torch.testing.assert_close(ours, block)


def test_grad_cam_legrad_end_to_end(vit, image):
    for blocks in (None, 2):
        reference, cls = _reference(vit, image, LAYERS - 1, blocks)
        result = hookviz.grad_cam(
            vit, image, BLOCK.format(LAYERS - 1), cls, method="legrad", blocks=blocks
        )
        assert result.method == "legrad" and result.class_index == cls
        assert result.cam.shape == reference.shape
        assert _pearson(result.cam, reference) >= MIN_R
        np.testing.assert_allclose(_scaled(result.cam), reference, atol=1e-5)
        assert result.heatmap.shape == (SIZE, SIZE)


def test_model_is_left_as_it_was(vit, image):
    model = vit.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        output = model(image)
    global_hooks = _global_hooks()
    probe = _probe(vit, image, BLOCK.format(LAYERS - 1), 0)
    legrad(probe)
    legrad(_probe(vit, image, BLOCK.format(1), 0, blocks=2))
    with pytest.raises(hookviz.MethodError):  # refused before any hook is registered
        legrad(_probe(vit, image, BLOCK.format(1), 0, blocks=0))
    assert sum(map(_hooks_of, model.modules())) == 0
    assert _global_hooks() == global_hooks
    assert all(p.grad is None and not p.requires_grad for p in model.parameters())
    assert not model.training
    after = model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # the model computes what it did (the switched attention options did not stay behind) ...
    with torch.no_grad():
        torch.testing.assert_close(model(image), output, rtol=0, atol=0)
    # ... and the forward pass the probe came from still explains its classes
    forward = hookviz.ForwardPass(vit, image, BLOCK.format(LAYERS - 1))
    assert forward.grad_cam(0).cam.shape == (SIZE // 16, SIZE // 16)


def test_a_failing_pass_leaves_no_hook(vit, image):
    probe = _probe(vit, image, BLOCK.format(LAYERS - 1), 0)

    def failing(output):
        raise RuntimeError("target failed")

    probe.score = failing  # raised inside the block's hook, mid-forward
    with pytest.raises(RuntimeError, match="target failed"):
        legrad(probe)
    assert sum(map(_hooks_of, vit.model.modules())) == 0


def test_cancelling_stops_it(vit, image):
    probe = _probe(vit, image, BLOCK.format(LAYERS - 1), 0)
    seen = []
    probe.progress = lambda done, total: seen.append((done, total)) or done >= 2
    with pytest.raises(hookviz.CancelledError):
        legrad(probe)
    assert seen == [(0, LAYERS + 1), (1, LAYERS + 1), (2, LAYERS + 1)]
    assert sum(map(_hooks_of, vit.model.modules())) == 0


@pytest.mark.parametrize("blocks", [0, -1, True, 1.5, "2"])
def test_bad_blocks_are_refused(vit, image, blocks):
    with pytest.raises(hookviz.MethodError, match="blocks"):
        legrad(_probe(vit, image, BLOCK.format(1), 0, blocks=blocks))


def test_a_layer_outside_the_blocks_is_refused(vit, image):
    listed = {layer.name for layer in hookviz.list_layers(vit)}
    outside = next(name for name in listed if not name.startswith("encoder.layers."))
    with pytest.raises(hookviz.MethodError, match="encoder block"):
        legrad(_probe(vit, image, outside, 0))


@pytest.fixture(scope="module")
def resnet() -> hookviz.LoadedModel:
    return hookviz.load_model("resnet18", pretrained=False, device="cpu")


def test_a_cnn_is_refused(resnet):
    x = random_input(SIZE, SIZE)
    with pytest.raises(hookviz.MethodError, match="legrad explains a vision transformer"):
        legrad(_probe(resnet, x, None, 0))
    assert sum(map(_hooks_of, resnet.model.modules())) == 0


def test_grad_cam_refuses_a_cnn(resnet):
    x = random_input(SIZE, SIZE)
    with pytest.raises(hookviz.MethodError, match="legrad explains a vision transformer"):
        hookviz.grad_cam(resnet, x, target=0, method="legrad")
    assert sum(map(_hooks_of, resnet.model.modules())) == 0


@pytest.mark.parametrize(
    ("target", "blocks"), [(None, None), (3, 2), (lambda logits: logits[:, 1] - logits[:, 2], 1)]
)
def test_grad_cam_runs_legrad_on_its_own_forward_pass_with_the_same_result(vit, target, blocks):
    """``hookviz.grad_cam`` takes the target from LeGrad's own forward pass (no ``ForwardPass``
    kept first): the map, class, score, probability and frame are what a kept forward pass
    gives, for the default target, a class and a callable; the model is left as it was."""
    picture = Image.fromarray(
        np.random.default_rng(5).integers(0, 255, (80, 96, 3), dtype=np.uint8)
    )
    layer = BLOCK.format(LAYERS - 1)
    alone = hookviz.grad_cam(vit, picture, layer, target, method="legrad", blocks=blocks)
    kept = hookviz.ForwardPass(vit, picture, layer).grad_cam(target, "legrad", blocks=blocks)
    torch.testing.assert_close(alone.cam, kept.cam, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(alone.heatmap, kept.heatmap, atol=1e-5)
    for name in ("class_index", "class_name", "layer", "method", "size", "blank", "frame"):
        assert getattr(alone, name) == getattr(kept, name), name
    np.testing.assert_equal(alone.probability, kept.probability)  # (nan for a callable)
    assert alone.score == pytest.approx(kept.score, rel=1e-6, abs=1e-6)
    assert alone.image is picture
    assert sum(map(_hooks_of, vit.model.modules())) == 0
    assert all(p.grad is None and not p.requires_grad for p in vit.model.parameters())


def test_grad_cam_legrad_on_its_own_pass_can_be_cancelled_and_refuses_bad_targets(vit, image):
    seen = []
    with pytest.raises(hookviz.CancelledError):
        hookviz.grad_cam(
            vit,
            image,
            BLOCK.format(LAYERS - 1),
            method="legrad",
            progress=lambda done, total: seen.append((done, total)) or done >= 1,
        )
    assert seen == [(0, LAYERS + 1), (1, LAYERS + 1)]
    with pytest.raises(hookviz.TargetError):
        hookviz.grad_cam(vit, image, BLOCK.format(LAYERS - 1), CLASSES, method="legrad")
    with pytest.raises(hookviz.MethodError, match="encoder block"):
        hookviz.grad_cam(vit, image, "conv_proj", method="legrad")
    assert sum(map(_hooks_of, vit.model.modules())) == 0
