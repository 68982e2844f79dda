"""The plain-torch EfficientNet-Lite is timm's ``tf_efficientnet_lite{N}``, with timm as the
oracle: the same module tree, state dict, seeded initialisation and outputs; and building the
bundled models imports neither timm nor torchvision."""

from __future__ import annotations

import copy
import subprocess
import sys
from functools import cache

import pytest
import timm
import torch
from torch import nn

import hookviz
from hookviz.models.bundled import BUNDLED, pair_state_dicts
from hookviz.models.efficientnet_lite import build_efficientnet_lite

# Odd and non-square sizes make TensorFlow's "same" padding asymmetric, and differently so in
# height and width: a symmetric-padding mistake shows there.
SIZES = ((1, 3, 224, 224), (2, 3, 225, 301), (1, 3, 97, 160))


@cache
def _pair(variant: int, seed: int = 7) -> tuple[nn.Module, nn.Module]:
    """(ours, timm's), each built after ``torch.manual_seed(seed)``; callers must not mutate."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ours = build_efficientnet_lite(variant)
        torch.manual_seed(seed)
        theirs = timm.create_model(f"tf_efficientnet_lite{variant}", pretrained=False)
    return ours, theirs


def _randomised(variant: int) -> tuple[nn.Module, nn.Module]:
    """Copies of both with one random state dict, BatchNorm statistics and affine weights
    included (a fresh BatchNorm is the identity in eval mode: it would hide a wrong eps)."""
    ours, theirs = (copy.deepcopy(model) for model in _pair(variant))
    generator = torch.Generator().manual_seed(variant)
    state = {}
    for key, tensor in theirs.state_dict().items():
        if key.endswith(("running_var", "bn1.weight", "bn2.weight", "bn3.weight")):
            tensor = torch.rand(tensor.shape, generator=generator) + 0.5
        elif key.endswith(("running_mean", "bias")):
            tensor = torch.randn(tensor.shape, generator=generator) * 0.1
        state[key] = tensor
    ours.load_state_dict(state)
    theirs.load_state_dict(state)
    return ours, theirs


def _tree(module: nn.Module) -> list[tuple[str, str]]:
    return [(name, type(child).__name__) for name, child in module.named_modules()]


@pytest.mark.parametrize("variant", [0, 1, 2, 3, 4])
def test_module_tree_and_state_dict_are_timms(variant):
    ours, theirs = _pair(variant)
    assert _tree(ours) == _tree(theirs)
    assert repr(ours) == repr(theirs)
    for (name, mine), (_, timms) in zip(ours.named_modules(), theirs.named_modules(), strict=True):
        # hookviz's isinstance checks (convolutions, BatchNorm) see both the same way
        for base in (nn.Conv2d, nn.BatchNorm2d, nn.Linear, nn.ReLU6):
            assert isinstance(mine, base) == isinstance(timms, base), name
    mine, timms = ours.state_dict(), theirs.state_dict()
    assert list(mine) == list(timms)
    assert [(t.shape, t.dtype) for t in mine.values()] == [
        (t.shape, t.dtype) for t in timms.values()
    ]
    assert any(key.endswith("num_batches_tracked") for key in mine)


@pytest.mark.parametrize("variant", [0, 1, 2, 3, 4])
def test_seeded_initialisation_is_timms(variant):
    ours, theirs = _pair(variant)
    timms = theirs.state_dict()
    different = [key for key, t in ours.state_dict().items() if not torch.equal(t, timms[key])]
    assert different == []


def test_a_different_seed_gives_different_weights():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(8)
        other = build_efficientnet_lite(0)
    ours, _ = _pair(0)
    assert not torch.equal(other.conv_stem.weight, ours.conv_stem.weight)


@pytest.mark.parametrize("variant", [0, 1, 2])
@pytest.mark.slow
def test_eval_outputs_are_timms(variant):
    ours, theirs = _randomised(variant)
    ours.eval()
    theirs.eval()
    generator = torch.Generator().manual_seed(100 + variant)
    with torch.no_grad():
        for size in SIZES:
            x = torch.randn(size, generator=generator)
            expected = theirs(x)
            assert expected.std() > 0.1  # the comparison is of something
            assert ours(x).shape == expected.shape
            assert (ours(x) - expected).abs().max() <= 1e-6, size
            feats = ours.forward_features(x)
            torch.testing.assert_close(feats, theirs.forward_features(x), atol=1e-6, rtol=0)
            pooled = ours.forward_head(feats, pre_logits=True)
            assert pooled.shape == (size[0], ours.num_features)


def _calls(model: nn.Module, x: torch.Tensor) -> list[tuple[str, tuple[int, ...], float]]:
    """Every module's forward as a hook sees it, in the order they finish: name, output shape,
    output sum."""
    seen: list[tuple[str, tuple[int, ...], float]] = []
    handles = [
        module.register_forward_hook(
            lambda m, i, out, name=name: seen.append((name, tuple(out.shape), float(out.sum())))
        )
        for name, module in model.named_modules()
    ]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def test_hooks_see_timms_sequence_of_module_calls():
    """hookviz hooks every module: even the empty slots (``Identity``) run, in timm's order."""
    ours, theirs = _randomised(0)
    x = torch.randn(1, 3, 97, 160, generator=torch.Generator().manual_seed(4))
    mine, timms = _calls(ours.eval(), x), _calls(theirs.eval(), x)
    assert [call[:2] for call in mine] == [call[:2] for call in timms]
    assert [call[2] for call in mine] == pytest.approx([call[2] for call in timms], rel=1e-5)


@pytest.mark.slow
def test_train_mode_matches_timm_outputs_statistics_and_gradients():
    ours, theirs = _randomised(0)
    x = torch.randn(2, 3, 97, 130, generator=torch.Generator().manual_seed(3))
    ours.train()
    theirs.train()
    mine, timms = ours(x), theirs(x)
    torch.testing.assert_close(mine, timms, atol=1e-6, rtol=0)
    mine.square().mean().backward()
    timms.square().mean().backward()
    torch.testing.assert_close(ours.state_dict(), theirs.state_dict(), atol=0, rtol=0)
    assert int(ours.bn2.num_batches_tracked) == 1
    grads = dict(theirs.named_parameters())
    for name, parameter in ours.named_parameters():
        torch.testing.assert_close(parameter.grad, grads[name].grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("classes", [10, 0])
def test_head_size_and_attributes_are_timms(classes):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        ours = build_efficientnet_lite(1, num_classes=classes)
        torch.manual_seed(1)
        theirs = timm.create_model("tf_efficientnet_lite1", pretrained=False, num_classes=classes)
    assert _tree(ours) == _tree(theirs)
    torch.testing.assert_close(ours.state_dict(), theirs.state_dict(), atol=0, rtol=0)
    for attribute in ("num_classes", "num_features", "drop_rate", "feature_info", "stage_ends"):
        assert getattr(ours, attribute) == getattr(theirs, attribute), attribute
    assert type(ours.get_classifier()) is type(theirs.get_classifier())
    assert ours.default_cfg is ours.pretrained_cfg
    # everything our config says, timm's says too (no url: the weights come from a package)
    assert {k: theirs.pretrained_cfg[k] for k in ours.pretrained_cfg} == ours.pretrained_cfg


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="variants 0 to 4"):
        build_efficientnet_lite(5)


@pytest.mark.slow
def test_pretrained_lite0_gives_timms_logits(lite0):
    spec = BUNDLED["efficientnet_lite0"]
    theirs = timm.create_model(spec.timm_name, pretrained=False)
    packaged = torch.load(spec.weights_path(), map_location="cpu", weights_only=True)
    theirs.load_state_dict(pair_state_dicts(packaged, theirs.state_dict(), spec.name))
    theirs.eval()
    assert type(lite0.model).__name__ == "EfficientNet"
    assert type(lite0.model).__module__ == "hookviz.models.efficientnet_lite"
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for size in SIZES:
            x = torch.randn(size, generator=generator)
            expected = theirs(x)
            assert (lite0.model(x) - expected).abs().max() <= 1e-6, size


def test_timm_checkpoint_of_a_bundled_architecture_loads(tmp_path):
    """A fine-tuned timm ``tf_efficientnet_lite0`` (5 classes) loads as ``efficientnet_lite0``
    with timm's logits: the head is sized from the checkpoint by our builder."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        theirs = timm.create_model("tf_efficientnet_lite0", pretrained=False, num_classes=5)
    theirs.eval()
    path = tmp_path / "lite0.pth"
    torch.save(theirs.state_dict(), path)
    loaded = hookviz.load_model("efficientnet_lite0", checkpoint=path, device="cpu")
    assert loaded.num_classes == 5
    assert type(loaded.model).__module__ == "hookviz.models.efficientnet_lite"
    x = torch.randn(1, 3, 120, 100, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), theirs(x), atol=1e-6, rtol=0)


@pytest.mark.slow
def test_bundled_models_import_neither_timm_nor_torchvision():
    script = (
        "import sys\n"
        "import hookviz\n"
        "assert 'timm' not in sys.modules and 'torchvision' not in sys.modules, 'import hookviz'\n"
        "import hookviz.models.efficientnet_lite\n"
        "from hookviz.models.bundled import BUNDLED, build_bundled\n"
        "build_bundled(BUNDLED['efficientnet_lite0'], pretrained=True)\n"
        "build_bundled(BUNDLED['efficientnet_lite1'], pretrained=False)\n"
        "loaded = [name for name in ('timm', 'torchvision') if name in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
