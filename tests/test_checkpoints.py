"""Loading a user's own checkpoint: ``hookviz.load_model(arch, checkpoint=SOURCE)``.

Every checkpoint here is written by the test itself from randomly initialised torchvision / timm
models (no network, no downloaded weights). The oracle is the module that was saved: after the
round trip through hookviz, the loaded model must give the same logits as the original module in
eval mode on the same input. Unsafe files (pickled modules, TorchScript, code-running pickles)
must be refused without running anything.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import torchvision
from safetensors.torch import save, save_file
from timm.data import resolve_model_data_config
from torch import nn

import hookviz

from .conftest import random_input

# A fixed input for every logits comparison (small: the comparison does not need 224 pixels).
X = random_input(64, 64, seed=1)

# Architecture -> number of classes its test checkpoint is saved with (none of them 1000, so a
# head built with ImageNet's size would not fit).
CLASSES = {
    "resnet18": 7,
    "mobilenet_v3_small": 3,
    "squeezenet1_0": 4,
    "timm:resnet18": 5,
    "timm:mobilenetv3_small_050": 6,
}

NAMES_7 = ("cat", "dog", "bird", "café", "ship", "truck", "frog")


@dataclass(frozen=True)
class Original:
    """A module as the user trained it, its weights, and its logits on ``X`` (the oracle)."""

    arch: str
    module: nn.Module
    state: dict[str, torch.Tensor]
    logits: torch.Tensor


def _build(arch: str, num_classes: int, seed: int) -> nn.Module:
    """A randomly initialised classifier with non-trivial BatchNorm affine weights and running
    statistics, so that weights *and* buffers have to arrive for the logits to match."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if arch.startswith("timm:"):
            module = timm.create_model(
                arch.removeprefix("timm:"), pretrained=False, num_classes=num_classes
            )
        else:
            module = getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)
        with torch.no_grad():
            for layer in module.modules():
                if isinstance(layer, nn.BatchNorm2d):
                    layer.weight.uniform_(0.5, 1.5)
                    layer.bias.normal_(0.0, 0.1)
                    layer.running_mean.normal_(0.0, 0.1)
                    layer.running_var.uniform_(0.5, 1.5)
    return module.eval()


def _original(arch: str, num_classes: int, seed: int = 1234) -> Original:
    module = _build(arch, num_classes, seed)
    state = {k: v.detach().clone().contiguous() for k, v in module.state_dict().items()}
    with torch.no_grad():
        logits = module(X)
    return Original(arch, module, state, logits)


@pytest.fixture(scope="module")
def original() -> Callable[[str], Original]:
    """``original(arch)``: the saved module for ``arch``, built once per module and arch."""
    built: dict[str, Original] = {}

    def get(arch: str) -> Original:
        if arch not in built:
            built[arch] = _original(arch, CLASSES[arch])
        return built[arch]

    return get


@pytest.fixture(scope="module")
def resnet18_ckpt(original) -> Original:
    """The 7-class ResNet-18 most tests save in one form or another."""
    return original("resnet18")


def _load(arch: str, source, **kwargs) -> hookviz.LoadedModel:
    return hookviz.load_model(arch, checkpoint=source, device="cpu", **kwargs)


def _logits(loaded: hookviz.LoadedModel) -> torch.Tensor:
    with torch.no_grad():
        return loaded.model(X)


def _assert_same_model(loaded: hookviz.LoadedModel, orig: Original) -> None:
    """The loaded model is the saved one: same class count, same logits, ready for analysis."""
    assert loaded.num_classes == orig.logits.shape[1]
    assert loaded.model.training is False
    torch.testing.assert_close(_logits(loaded), orig.logits, atol=1e-5, rtol=1e-5)


def _torch_file(obj, path: Path) -> Path:
    torch.save(obj, path)
    return path


def _safetensors_file(state, path: Path, metadata: dict[str, str] | None = None) -> Path:
    save_file(state, str(path), metadata=metadata)
    return path


# --- formats and sources -----------------------------------------------------------------------


@pytest.mark.parametrize("arch", list(CLASSES))
@pytest.mark.slow
def test_safetensors_round_trip_gives_the_original_logits(arch, original, tmp_path):
    """Every supported family (plain head, Sequential head, Conv2d head, timm) loads its saved
    weights with the head size read from the checkpoint."""
    orig = original(arch)
    path = _safetensors_file(orig.state, tmp_path / "model.safetensors")
    loaded = _load(arch, path)
    _assert_same_model(loaded, orig)
    assert loaded.num_classes == CLASSES[arch]


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".ckpt"])
@pytest.mark.slow
def test_torch_state_dict_round_trip_gives_the_original_logits(suffix, resnet18_ckpt, tmp_path):
    """A plain ``torch.save(model.state_dict())`` file, under each usual suffix."""
    path = _torch_file(resnet18_ckpt.state, tmp_path / f"model{suffix}")
    loaded = _load("resnet18", path)
    _assert_same_model(loaded, resnet18_ckpt)


def test_squeezenet_conv_head_sets_the_class_count(original, tmp_path):
    """SqueezeNet's classifier is a 1x1 Conv2d (weight (N, 512, 1, 1)): N is the class count."""
    orig = original("squeezenet1_0")
    assert orig.state["classifier.1.weight"].shape == (4, 512, 1, 1)
    loaded = _load("squeezenet1_0", _torch_file(orig.state, tmp_path / "sq.pth"))
    assert loaded.num_classes == 4
    assert loaded.categories == ("class 0", "class 1", "class 2", "class 3")
    _assert_same_model(loaded, orig)


@pytest.mark.parametrize("fmt", ["safetensors", "torch"])
@pytest.mark.parametrize("kind", ["str", "Path", "bytes", "open file", "BytesIO"])
@pytest.mark.slow
def test_every_source_kind_loads(kind, fmt, resnet18_ckpt, tmp_path):
    """A checkpoint can be given as a path (str or Path), raw bytes or a binary file object."""
    path = tmp_path / f"weights.{'safetensors' if fmt == 'safetensors' else 'pt'}"
    if fmt == "safetensors":
        _safetensors_file(resnet18_ckpt.state, path)
    else:
        _torch_file(resnet18_ckpt.state, path)
    if kind == "open file":
        with open(path, "rb") as handle:
            loaded = _load("resnet18", handle)
    else:
        source = {
            "str": str(path),
            "Path": path,
            "bytes": path.read_bytes(),
            "BytesIO": io.BytesIO(path.read_bytes()),
        }[kind]
        loaded = _load("resnet18", source)
    _assert_same_model(loaded, resnet18_ckpt)
    assert fmt in loaded.loaded_from.lower()


def test_format_is_detected_by_content_not_by_name(resnet18_ckpt, tmp_path):
    """A safetensors file named ``.pt`` and a torch file named ``.bin`` both load, each read as
    what it really is."""
    fake_pt = _safetensors_file(resnet18_ckpt.state, tmp_path / "really_safetensors.pt")
    fake_bin = _torch_file(resnet18_ckpt.state, tmp_path / "really_torch.bin")
    from_fake_pt = _load("resnet18", fake_pt)
    from_fake_bin = _load("resnet18", fake_bin)
    _assert_same_model(from_fake_pt, resnet18_ckpt)
    _assert_same_model(from_fake_bin, resnet18_ckpt)
    assert "safetensors" in from_fake_pt.loaded_from.lower()
    assert "torch" in from_fake_bin.loaded_from.lower()


def test_safetensors_bytes_without_a_name_load(resnet18_ckpt):
    """Bytes from ``safetensors.torch.save`` (no file, no name at all) are recognised."""
    loaded = _load("resnet18", save(resnet18_ckpt.state))
    _assert_same_model(loaded, resnet18_ckpt)
    assert "safetensors" in loaded.loaded_from.lower()


def test_loaded_checkpoint_is_an_ordinary_loaded_model(resnet18_ckpt, tmp_path):
    """The result is a LoadedModel marked as coming from a checkpoint, with real weights."""
    loaded = _load("resnet18", _torch_file(resnet18_ckpt.state, tmp_path / "m.pt"))
    assert isinstance(loaded, hookviz.LoadedModel)
    assert isinstance(loaded.model, nn.Module)
    assert loaded.source == "checkpoint"
    assert loaded.pretrained is True
    assert loaded.device == torch.device("cpu")
    assert all(not p.requires_grad for p in loaded.model.parameters())
    assert isinstance(loaded.loaded_from, str)
    # A plain state dict: no container key and no prefix to report.
    assert "module." not in loaded.loaded_from
    assert "state_dict_ema" not in loaded.loaded_from


# --- containers and prefixes -------------------------------------------------------------------


def _optimizer_state() -> dict:
    """What an SGD optimizer's state_dict looks like (integer keys, a tensor buffer)."""
    return {
        "state": {0: {"momentum_buffer": torch.zeros(7, 512)}},
        "param_groups": [{"lr": 0.1, "momentum": 0.9, "params": [0]}],
    }


@pytest.mark.parametrize("key", ["state_dict", "model", "model_state_dict", "state_dict_ema"])
@pytest.mark.slow
def test_state_dict_inside_a_training_checkpoint(key, resnet18_ckpt, tmp_path):
    """Training scripts save a dict holding the weights under a key next to other entries; the
    weights are found and the key used is reported."""
    checkpoint = {key: resnet18_ckpt.state, "epoch": 3, "optimizer": _optimizer_state()}
    loaded = _load("resnet18", _torch_file(checkpoint, tmp_path / "train.ckpt"))
    _assert_same_model(loaded, resnet18_ckpt)
    assert key in loaded.loaded_from


@pytest.mark.parametrize("prefix", ["module.", "_orig_mod."])
def test_wrapper_prefixes_are_removed(prefix, resnet18_ckpt, tmp_path):
    """DataParallel/DDP (``module.``) and torch.compile (``_orig_mod.``) prefix every key; the
    prefix is removed and reported."""
    state = {prefix + k: v for k, v in resnet18_ckpt.state.items()}
    loaded = _load("resnet18", _torch_file(state, tmp_path / "wrapped.pth"))
    _assert_same_model(loaded, resnet18_ckpt)
    assert prefix in loaded.loaded_from


def test_prefixed_safetensors_file_loads(resnet18_ckpt, tmp_path):
    """Prefix removal is not tied to the torch format."""
    state = {"module." + k: v for k, v in resnet18_ckpt.state.items()}
    loaded = _load("resnet18", _safetensors_file(state, tmp_path / "ddp.safetensors"))
    _assert_same_model(loaded, resnet18_ckpt)
    assert "module." in loaded.loaded_from
    assert "safetensors" in loaded.loaded_from.lower()


def test_lightning_checkpoint_loads(resnet18_ckpt, tmp_path):
    """A PyTorch Lightning checkpoint: weights under ``state_dict`` prefixed with the attribute
    name (``model.``), plus bookkeeping including an argparse.Namespace of hyper-parameters,
    which weights-only loading has to be allowed to read."""
    checkpoint = {
        "state_dict": {"model." + k: v for k, v in resnet18_ckpt.state.items()},
        "epoch": 1,
        "global_step": 10,
        "pytorch-lightning_version": "2.4.0",
        "hyper_parameters": argparse.Namespace(lr=0.1),
        "optimizer_states": [_optimizer_state()],
    }
    loaded = _load("resnet18", _torch_file(checkpoint, tmp_path / "epoch=1.ckpt"))
    _assert_same_model(loaded, resnet18_ckpt)
    assert "state_dict" in loaded.loaded_from
    assert "model." in loaded.loaded_from


# --- class names -------------------------------------------------------------------------------


def test_without_names_classes_are_numbered(resnet18_ckpt, tmp_path):
    """No names given and none in the file: ``class 0`` ... ``class 6``."""
    loaded = _load("resnet18", _torch_file(resnet18_ckpt.state, tmp_path / "m.pt"))
    assert loaded.categories == tuple(f"class {i}" for i in range(7))


def test_class_names_as_a_list(resnet18_ckpt, tmp_path):
    """A list of names becomes the categories, index-aligned with the logits."""
    path = _torch_file(resnet18_ckpt.state, tmp_path / "m.pt")
    loaded = _load("resnet18", path, class_names=list(NAMES_7))
    assert loaded.categories == NAMES_7
    assert all(isinstance(name, str) for name in loaded.categories)
    assert loaded.class_index("café") == 3


@pytest.mark.parametrize("kind", ["Path", "str", "bytes"])
@pytest.mark.slow
def test_class_names_from_a_text_file(kind, resnet18_ckpt, tmp_path):
    """A UTF-8 text file, one name per line: surrounding whitespace stripped, blank lines
    ignored, non-ASCII kept."""
    text = "  cat \n\ndog\n   \nbird\t\ncafé\nship\r\ntruck\n\nfrog\n\n"
    names_file = tmp_path / "classes.txt"
    names_file.write_bytes(text.encode("utf-8"))
    source = {"Path": names_file, "str": str(names_file), "bytes": names_file.read_bytes()}[kind]
    path = _torch_file(resnet18_ckpt.state, tmp_path / "m.pt")
    loaded = _load("resnet18", path, class_names=source)
    assert loaded.categories == NAMES_7


def test_class_names_from_safetensors_metadata(resnet18_ckpt, tmp_path):
    """Names stored in the safetensors metadata (``class_names``: a JSON list) are used when no
    names are passed."""
    metadata = {"class_names": json.dumps(list(NAMES_7)), "format": "pt"}
    path = _safetensors_file(resnet18_ckpt.state, tmp_path / "named.safetensors", metadata)
    loaded = _load("resnet18", path)
    assert loaded.categories == NAMES_7
    _assert_same_model(loaded, resnet18_ckpt)


def test_class_names_from_metadata_of_safetensors_bytes(resnet18_ckpt):
    """Metadata is read from in-memory safetensors bytes too."""
    data = save(resnet18_ckpt.state, metadata={"class_names": json.dumps(list(NAMES_7))})
    assert _load("resnet18", data).categories == NAMES_7


def test_explicit_class_names_win_over_metadata(resnet18_ckpt, tmp_path):
    """An explicit ``class_names`` argument overrides names stored in the file."""
    stored = [f"stored {i}" for i in range(7)]
    wanted = [f"given {i}" for i in range(7)]
    metadata = {"class_names": json.dumps(stored)}
    path = _safetensors_file(resnet18_ckpt.state, tmp_path / "named.safetensors", metadata)
    loaded = _load("resnet18", path, class_names=wanted)
    assert loaded.categories == tuple(wanted)


@pytest.mark.parametrize("count", [3, 8])
def test_wrong_number_of_class_names_is_refused(count, resnet18_ckpt, tmp_path):
    """Names that do not match the checkpoint's class count are an error naming both counts."""
    path = _torch_file(resnet18_ckpt.state, tmp_path / "m.pt")
    with pytest.raises(hookviz.ModelError) as error:
        _load("resnet18", path, class_names=[f"n{i}" for i in range(count)])
    message = str(error.value)
    assert re.search(rf"\b{count}\b", message), message
    assert re.search(r"\b7\b", message), message


# --- everything else works on a loaded checkpoint ----------------------------------------------


def test_grad_cam_on_a_loaded_checkpoint(resnet18_ckpt, tmp_path, sample):
    """A full analysis runs on a 7-class checkpoint: the heatmap is finite and on the image's
    grid, and the explained class is one of the given names and the original module's top-1."""
    path = _torch_file(resnet18_ckpt.state, tmp_path / "m.pt")
    loaded = _load("resnet18", path, class_names=list(NAMES_7))
    analysis = hookviz.analyze(loaded, sample)
    heatmap = analysis.cam.heatmap
    assert heatmap.shape == (sample.height, sample.width)
    assert np.isfinite(heatmap).all()
    assert analysis.cam.class_name in NAMES_7
    assert {p.name for p in analysis.predictions} <= set(NAMES_7)
    with torch.no_grad():
        oracle = resnet18_ckpt.module(loaded.preprocessing.to_tensor(sample))
    assert analysis.cam.class_index == int(oracle.argmax())
    assert analysis.cam.class_name == NAMES_7[int(oracle.argmax())]


def test_loading_is_deterministic(resnet18_ckpt):
    """The same bytes loaded twice give identical logits (no random leftovers in the model)."""
    data = save(resnet18_ckpt.state)
    first = _logits(_load("resnet18", data))
    second = _logits(_load("resnet18", data))
    assert torch.equal(first, second)


def test_loading_leaves_the_random_state_alone(resnet18_ckpt, tmp_path):
    """Building the architecture must not consume the caller's random numbers."""
    path = _torch_file(resnet18_ckpt.state, tmp_path / "m.pt")
    before = torch.get_rng_state()
    _load("resnet18", path)
    assert torch.equal(torch.get_rng_state(), before)


# --- timm ---------------------------------------------------------------------------------------


def test_timm_checkpoint_preprocessing_comes_from_timm(original, tmp_path):
    """A timm checkpoint is preprocessed the way timm's data config says (size, interpolation,
    mean, std); ResNet-18 in timm is bicubic, unlike torchvision's bilinear."""
    orig = original("timm:resnet18")
    loaded = _load("timm:resnet18", _safetensors_file(orig.state, tmp_path / "t.safetensors"))
    config = resolve_model_data_config(orig.module)
    assert loaded.preprocessing.size == config["input_size"][-1]
    assert loaded.preprocessing.interpolation == config["interpolation"]
    assert loaded.preprocessing.mean == pytest.approx(config["mean"])
    assert loaded.preprocessing.std == pytest.approx(config["std"])


def test_timm_without_checkpoint_random_weights():
    """``timm:`` names load without a checkpoint too: 1000 ImageNet classes, timm's
    preprocessing."""
    loaded = hookviz.load_model("timm:resnet18", pretrained=False, device="cpu")
    assert loaded.num_classes == 1000
    assert loaded.pretrained is False
    assert loaded.categories[0].lower().startswith("tench")
    with torch.no_grad():
        assert loaded.model(X).shape == (1, 1000)
    config = resolve_model_data_config(timm.create_model("resnet18", pretrained=False))
    assert loaded.preprocessing.size == config["input_size"][-1]
    assert loaded.preprocessing.interpolation == config["interpolation"]


def test_timm_pretrained_offline_without_cache_is_unavailable(tmp_path, monkeypatch):
    """Offline with an empty Hugging Face cache, timm's pretrained weights cannot be had: a
    ModelUnavailableError, not a hang or a raw network error."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    with pytest.raises(hookviz.ModelUnavailableError):
        hookviz.load_model("timm:resnet18", pretrained=True, device="cpu")


# --- refused: unsafe files ----------------------------------------------------------------------


class _Payload:
    """Unpickling this creates a file: the proof that code in the checkpoint ran."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _assert_resave_advice(message: str) -> None:
    assert "state_dict()" in message, message
    assert "safetensors" in message, message


@pytest.mark.parametrize("as_bytes", [False, True], ids=["path", "bytes"])
def test_code_in_a_pickle_is_never_run(as_bytes, resnet18_ckpt, tmp_path):
    """A pickle that would run code when loaded is refused, and the code does not run."""
    marker = tmp_path / "pwned"
    state = dict(resnet18_ckpt.state)
    state["fc.weight"] = _Payload(str(marker))
    path = _torch_file(state, tmp_path / "evil.pth")
    source = path.read_bytes() if as_bytes else path
    with pytest.raises(hookviz.ModelError) as error:
        _load("resnet18", source)
    assert not marker.exists()
    message = str(error.value)
    assert "would run code when opened" in message and "did not load it" in message, message
    assert "open" in message and "torch.save(model)" not in message, message


def test_a_pickle_that_runs_a_command_is_named_so(resnet18_ckpt, tmp_path):
    """A file whose unpickling would call os.system is said to run a command, not taken for a
    model saved whole; the command never runs."""
    marker = tmp_path / "pwned"

    class RunsACommand:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    state = dict(resnet18_ckpt.state)
    state["fc.bias"] = RunsACommand()
    with pytest.raises(hookviz.ModelError) as error:
        _load("resnet18", _torch_file(state, tmp_path / "evil.pt"))
    assert not marker.exists()
    message = str(error.value)
    assert "would run code" in message and "system" in message, message
    assert "torch.save(model)" not in message, message


def test_pickled_whole_module_is_refused(resnet18_ckpt, tmp_path):
    """``torch.save(model)`` needs unpickling arbitrary classes: refused, with how to re-save."""
    path = _torch_file(resnet18_ckpt.module, tmp_path / "whole.pt")
    with pytest.raises(hookviz.ModelError) as error:
        _load("resnet18", path)
    _assert_resave_advice(str(error.value))


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("how", ["script", "trace"])
@pytest.mark.slow
def test_torchscript_archive_is_refused(how, resnet18_ckpt, tmp_path):
    """A TorchScript archive is code: refused, and the message says it is TorchScript."""
    if how == "script":
        archive = torch.jit.script(resnet18_ckpt.module)
    else:
        archive = torch.jit.trace(resnet18_ckpt.module, X)
    path = tmp_path / "scripted.pt"
    archive.save(str(path))
    for source in (path, path.read_bytes()):
        with pytest.raises(hookviz.ModelError) as error:
            _load("resnet18", source)
        message = str(error.value)
        assert "TorchScript" in message, message
        _assert_resave_advice(message)


# --- refused: not a checkpoint, or not this architecture ---------------------------------------

_UNREADABLE = re.compile(r"could not be read|not a (\w+ )?checkpoint", re.IGNORECASE)


def test_garbage_bytes_are_refused():
    """Bytes that are neither safetensors nor a torch file: a ModelError saying so."""
    with pytest.raises(hookviz.ModelError) as error:
        _load("resnet18", b"not a checkpoint" * 10)
    assert _UNREADABLE.search(str(error.value)), str(error.value)


def test_empty_file_is_refused(tmp_path):
    """An empty file (an interrupted upload) is a ModelError, not a crash."""
    path = tmp_path / "empty.pt"
    path.write_bytes(b"")
    with pytest.raises(hookviz.ModelError) as error:
        _load("resnet18", path)
    message = str(error.value)
    assert "empty" in message.lower() or _UNREADABLE.search(message), message


@pytest.mark.parametrize(
    "content",
    [{"a": 1, "b": 2}, {"state_dict": 5}, [torch.zeros(3)]],
    ids=["dict of ints", "state_dict is an int", "list of tensors"],
)
def test_checkpoint_without_model_weights_is_refused(content, tmp_path):
    """A readable file that holds no state dict is a ModelError."""
    with pytest.raises(hookviz.ModelError):
        _load("resnet18", _torch_file(content, tmp_path / "odd.pt"))


@pytest.mark.parametrize("arch", ["resnet18x", "timm:no_such_model_xyz"])
def test_unknown_architecture_is_refused(arch, resnet18_ckpt, tmp_path):
    """A valid checkpoint with an architecture name nobody knows: a ModelError naming it."""
    path = _torch_file(resnet18_ckpt.state, tmp_path / "m.pt")
    with pytest.raises(hookviz.ModelError) as error:
        _load(arch, path)
    assert arch.removeprefix("timm:") in str(error.value)


def _key_report(model_state: dict, checkpoint_state: dict) -> tuple[int, int, int]:
    """Independent count of (missing, unexpected, mismatched) keys of loading one into the
    other."""
    missing = set(model_state) - set(checkpoint_state)
    unexpected = set(checkpoint_state) - set(model_state)
    mismatched = {
        k
        for k in set(model_state) & set(checkpoint_state)
        if model_state[k].shape != checkpoint_state[k].shape
    }
    return len(missing), len(unexpected), len(mismatched)


def test_resnet18_weights_as_resnet34_are_refused(resnet18_ckpt, tmp_path):
    """A deeper architecture than the weights: the missing keys are counted, nothing is loaded
    non-strictly."""
    path = _torch_file(resnet18_ckpt.state, tmp_path / "r18.pt")
    resnet34 = torchvision.models.resnet34(weights=None, num_classes=7).state_dict()
    missing, _, _ = _key_report(resnet34, resnet18_ckpt.state)
    assert missing > 0
    with pytest.raises(hookviz.ModelError) as error:
        _load("resnet34", path)
    message = str(error.value)
    assert "missing" in message, message
    assert "unexpected" in message, message
    assert re.search(rf"\b{missing}\b", message), message


def test_resnet50_weights_as_resnet18_report_mismatched_shapes(tmp_path):
    """Same key names with other shapes (bottleneck vs basic blocks): mismatched shapes are
    counted alongside the unexpected keys."""
    source = _original("resnet50", 7, seed=5)
    path = _torch_file(source.state, tmp_path / "r50.pt")
    resnet18 = torchvision.models.resnet18(weights=None, num_classes=7).state_dict()
    missing, unexpected, mismatched = _key_report(resnet18, source.state)
    assert mismatched > 0
    with pytest.raises(hookviz.ModelError) as error:
        _load("resnet18", path)
    message = str(error.value)
    for word in ("missing", "unexpected", "mismatched"):
        assert word in message, message
    assert re.search(rf"\b{unexpected}\b", message), message
    assert re.search(rf"\b{mismatched}\b", message), message
    assert re.search(rf"\b{missing}\b", message), message
    # the same, as values a page lays out as a table, shapes side by side
    found = error.value.mismatch
    assert (len(found.missing), len(found.unexpected), len(found.mismatched)) == (
        missing,
        unexpected,
        mismatched,
    )
    for key, theirs, ours in found.mismatched:
        assert theirs == tuple(source.state[key].shape) and ours == tuple(resnet18[key].shape)


def test_resnet18_weights_as_mobilenet_are_refused(resnet18_ckpt, tmp_path):
    """An unrelated architecture (no shared head key at all) is still a clear key report."""
    path = _torch_file(resnet18_ckpt.state, tmp_path / "r18.pt")
    with pytest.raises(hookviz.ModelError) as error:
        _load("mobilenet_v3_small", path)
    message = str(error.value)
    assert "missing" in message, message
    assert "unexpected" in message, message
    assert re.search(r"\d", message), message


@pytest.mark.parametrize("name", ["timm:vit_tiny_patch16_224", "timm:swin_tiny_patch4_window7_224"])
@pytest.mark.slow
def test_vision_transformer_checkpoint_loads_with_its_head(name):
    """A fine-tuned transformer (here 4 classes) loads like a CNN: head sized from the
    checkpoint, every key matched, the same logits as the module that was saved."""
    torch.manual_seed(7)
    original = timm.create_model(name.removeprefix("timm:"), pretrained=False, num_classes=4)
    original.eval()
    loaded = hookviz.load_model(name, checkpoint=save(original.state_dict()), device="cpu")
    assert loaded.num_classes == 4 and loaded.tokens is not None
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(x), original(x), atol=1e-5, rtol=1e-5)
