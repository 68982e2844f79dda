"""The model registry: names, offline behaviour, the torchvision cache path, freezing."""

from __future__ import annotations

import re
import socket

import pytest
import torch
from torch import nn

import hookviz
from hookviz.core.devices import choose_device, default_device
from hookviz.models import torchvision_weights_path


def test_loaded_model_is_frozen_in_eval_with_a_lock(resnet18):
    assert resnet18.model.training is False
    assert all(not m.training for m in resnet18.model.modules())
    assert all(not p.requires_grad for p in resnet18.model.parameters())
    assert resnet18.device == torch.device("cpu")
    assert isinstance(resnet18.lock, hookviz.core.fair_lock.FairLock)
    assert resnet18.num_classes == 1000
    assert resnet18.class_name(0) == "tench"
    assert resnet18.class_index("Goldfish") == 1
    assert resnet18.preprocessing.size == 224


def test_names_cover_the_torchvision_cnn_zoo_and_the_bundled_models():
    names = hookviz.model_names()
    for name in (
        "efficientnet_lite0",
        "resnet50",
        "vgg16",
        "densenet121",
        "mobilenet_v3_large",
        "efficientnet_b0",
        "convnext_tiny",
        "regnet_y_400mf",
        "inception_v3",
    ):
        assert name in names
    assert names[0] == hookviz.DEFAULT_MODEL
    # the transformers are offered too (token layouts for ViT and Swin; MaxViT maps as a CNN)
    assert {"vit_b_16", "swin_t", "maxvit_t"} <= set(names)


def test_unknown_names_get_a_hint():
    with pytest.raises(hookviz.ModelError, match="did you mean 'resnet18'"):
        hookviz.load_model("resnet81", pretrained=False)


def test_uncached_weights_offline_give_a_clear_message(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with pytest.raises(hookviz.ModelUnavailableError) as info:
        hookviz.load_model("resnet18", download=False)
    message = str(info.value)
    assert "resnet18" in message and "untrained" in message and "efficientnet_lite0" in message
    assert str(tmp_path) in message
    catalog = {row.name: row for row in hookviz.model_catalog()}
    assert catalog["resnet18"].ready is False
    assert catalog["efficientnet_lite0"].ready and catalog["efficientnet_lite0"].status == "bundled"


def test_the_model_list_says_what_cannot_load_now(tmp_path, monkeypatch):
    """An uncached model's label says what loading it needs now: a download of its size; with
    downloads switched off, that they are; once a download failed for want of a network, that
    it cannot load now (not "download 45 MB" on a machine that cannot)."""
    from hookviz.models import downloads

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(downloads, "_unreachable_since", [])

    def status() -> str:
        return {row.name: row for row in hookviz.model_catalog()}["resnet18"].status

    assert status() == "not cached, downloads off"  # (HOOKVIZ_OFFLINE=1 in tests)
    monkeypatch.setenv("HOOKVIZ_OFFLINE", "0")
    assert re.fullmatch(r"download \d+ MB", status()), status()
    # what a download that could not look the server up leaves behind (no network in tests)
    said = downloads.network_reason(socket.gaierror(-3, "Temporary failure in name resolution"))
    assert "no network" in said
    assert re.fullmatch(r"cannot load now: no network \(\d+ MB download\)", status()), status()
    monkeypatch.setattr(downloads, "UNREACHABLE_SECONDS", 0.0)  # some minutes later
    assert status().startswith("download ")


def test_weights_in_the_hub_cache_load_the_torchvision_way(tmp_path, monkeypatch):
    # Exactly where torchvision would have downloaded them: <hub>/checkpoints/<file of the URL>.
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    path = torchvision_weights_path("resnet18")
    assert path.parent == tmp_path / "hub" / "checkpoints"
    torch.manual_seed(11)
    reference = hookviz.load_model("resnet18", pretrained=False).model.state_dict()
    path.parent.mkdir(parents=True)
    torch.save(reference, path)

    assert {row.name: row for row in hookviz.model_catalog()}["resnet18"].status == "cached"
    loaded = hookviz.load_model("resnet18", download=False, device="cpu")
    assert loaded.pretrained
    for key, tensor in loaded.model.state_dict().items():
        assert torch.equal(tensor, reference[key]), key


def test_corrupt_cached_weights_say_to_delete_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    path = torchvision_weights_path("resnet18")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"half a download")
    with pytest.raises(hookviz.ModelUnavailableError, match="delete the file"):
        hookviz.load_model("resnet18", download=False)


def test_device_preference_order():
    assert choose_device(cuda=True, mps=True).type == "cuda"
    assert choose_device(cuda=False, mps=True).type == "mps"
    assert choose_device(cuda=False, mps=False).type == "cpu"
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert default_device().type in (expected, "mps")


class _DictOutput(nn.Module):
    def __init__(self, style: str) -> None:
        super().__init__()
        self.style = style
        self.features = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        logits = self.head(self.features(x).mean(dim=(2, 3)))
        if self.style == "dict":
            return {"logits": logits, "aux": logits * 2}
        if self.style == "tuple":
            return logits, logits * 2

        class Output:
            pass

        output = Output()
        output.logits = logits
        return output


@pytest.mark.parametrize("style", ["dict", "tuple", "object"])
def test_models_returning_dicts_tuples_or_objects(style):
    torch.manual_seed(0)
    loaded = hookviz.wrap_model(_DictOutput(style), categories=["a", "b", "c"], device="cpu")
    x = torch.randn(1, 3, 20, 30)
    cam = hookviz.grad_cam(loaded, x, "features", target=2)
    assert cam.heatmap.shape == (20, 30)
    assert cam.class_name == "c"
    assert [p.name for p in hookviz.predict(loaded, x, k=3)] != []


def test_wrap_model_needs_class_information():
    with pytest.raises(hookviz.ModelError, match="categories or num_classes"):
        hookviz.wrap_model(nn.Conv2d(3, 3, 1))


def test_densenet_checkpoints_with_old_key_names_load(tmp_path, monkeypatch):
    import re

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    from torchvision import models

    torch.manual_seed(3)
    reference = models.densenet121(weights=None).state_dict()
    # the published file spells "denselayer1.norm1.weight" as "denselayer1.norm.1.weight"
    old = {
        re.sub(r"(denselayer\d+\.(?:norm|relu|conv))(\d)\.", r"\1.\2.", k): v
        for k, v in reference.items()
    }
    assert old.keys() != reference.keys()
    path = torchvision_weights_path("densenet121")
    path.parent.mkdir(parents=True)
    torch.save(old, path)
    loaded = hookviz.load_model("densenet121", download=False, device="cpu")
    for key, tensor in loaded.model.state_dict().items():
        assert torch.equal(tensor, reference[key]), key


def test_googlenet_weights_keep_input_transform_and_drop_aux_heads(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    from torchvision import models

    torch.manual_seed(4)
    trained = models.googlenet(
        weights=None, aux_logits=True, transform_input=True, init_weights=False
    ).state_dict()
    path = torchvision_weights_path("googlenet")
    path.parent.mkdir(parents=True)
    torch.save(trained, path)
    loaded = hookviz.load_model("googlenet", download=False, device="cpu")
    assert loaded.model.transform_input is True
    assert loaded.model.aux_logits is False and loaded.model.aux1 is None
    assert torch.equal(loaded.model.conv1.conv.weight, trained["conv1.conv.weight"])
    assert hookviz.predict(loaded, torch.randn(1, 3, 224, 224), k=1)


def _fingerprint(loaded: hookviz.LoadedModel) -> list[float]:
    """A few numbers that change with any weight (sum and a sample of each tensor)."""
    return [
        round(float(t.double().sum()), 6)
        for t in loaded.model.state_dict().values()
        if t.is_floating_point()
    ]


@pytest.mark.parametrize("name", ["resnet18", "efficientnet_lite0"])
def test_untrained_weights_are_the_same_on_every_load_and_leave_the_rng_alone(name):
    torch.manual_seed(123)
    first = hookviz.load_model(name, pretrained=False, device="cpu")
    after_first = torch.rand(3)
    torch.manual_seed(123)
    torch.rand(50)  # a different global random state before the second load
    second = hookviz.load_model(name, pretrained=False, device="cpu")
    assert _fingerprint(first) == _fingerprint(second)
    # the load neither consumed nor reseeded the caller's generator
    torch.manual_seed(123)
    hookviz.load_model(name, pretrained=False, device="cpu")
    assert torch.equal(torch.rand(3), after_first)


@pytest.mark.slow
def test_untrained_weights_differ_between_architectures_and_match_in_another_process():
    import subprocess
    import sys

    here = _fingerprint(hookviz.load_model("resnet34", pretrained=False, device="cpu"))
    other = _fingerprint(hookviz.load_model("resnet18", pretrained=False, device="cpu"))
    assert here[:5] != other[:5]
    code = (
        "import hookviz, json, sys; sys.path.insert(0, 'tests');"
        "from test_models import _fingerprint;"
        "print(json.dumps(_fingerprint(hookviz.load_model('resnet34', pretrained=False, "
        "device='cpu'))))"
    )
    import json
    from pathlib import Path

    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
        env={**__import__("os").environ, "PYTHONHASHSEED": "99"},
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == here
