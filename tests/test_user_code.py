"""Your own model code as a model (``load_model("package.module:function")``): a real package
written to disk and imported from the current folder, its CAM the same as ``wrap_model``'s of
the same module, each way a builder can fail said in the user's terms, weights from a
safetensors file, class names from a file, the preprocessing text, a model card naming a
function, and the real command line over it."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import hookviz
from hookviz.models.preprocessing_text import IMAGENET_PREPROCESSING

NET = '''
import torch
from torch import nn


class TinyNet(nn.Module):
    """Two convolutions, a global average pool and a linear head of ``classes``."""

    def __init__(self, classes: int = 4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 8, 3, padding=1), nn.ReLU()
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        return self.fc(self.pool(self.features(x)).flatten(1))


def _set(module, seed):
    # weights from the builder's own generator: the same module in every call and process
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return module


def build():
    return _set(TinyNet(), 0)


def build_five():
    return _set(TinyNet(classes=5), 1)


def build_random():
    return TinyNet()  # torch's own initialisation, from the global generator


def build_segmenter():
    return _set(nn.Conv2d(3, 5, 3, padding=1), 2)


def build_fixed():
    # a Linear after a flatten: only its 32x32 square fits
    return nn.Sequential(nn.Conv2d(3, 4, 4, stride=4), nn.Flatten(), nn.Linear(4 * 8 * 8, 3))


class TinyDetector(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        score = self.features(x).mean(dim=(1, 2, 3)).sigmoid()
        return [
            {
                "boxes": torch.tensor([[0.0, 0.0, 8.0, 8.0]]),
                "labels": torch.tensor([2]),
                "scores": s.reshape(1),
            }
            for s in score
        ]


def build_detector():
    return TinyDetector()


def build_wrapped():
    import hookviz

    return hookviz.wrap_model(build(), categories=["w0", "w1", "w2", "w3"], name="mine")


def build_raises():
    raise ValueError("no weights for this one\\nsecond line")


def build_dict():
    return {"model": build()}


def build_nothing():
    TinyNet()


def build_squeezed():
    net = build()

    class Squeezed(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x):
            return self.net(x).squeeze()

    return Squeezed()


def needs(classes):
    return TinyNet(classes)


def _private_builder():
    return TinyNet()
'''

NAME = "mynets.net:build"
CLASSES = ["cat", "dog", "bird", "fish"]


def _write_package(root: Path, package: str = "mynets") -> None:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("", encoding="utf-8")
    (root / package / "net.py").write_text(NET, encoding="utf-8")


def _forget(package: str) -> None:
    for name in [name for name in sys.modules if name.split(".")[0] == package]:
        del sys.modules[name]


@pytest.fixture
def code(tmp_path, monkeypatch):
    """``tmp_path`` holding the package ``mynets``, as the current folder; nothing of it left
    imported or on ``sys.path`` afterwards (every test writes its own copy)."""
    _write_package(tmp_path)
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    importlib.invalidate_caches()
    _forget("mynets")
    yield tmp_path
    _forget("mynets")
    _forget("cardnets")


def _module(function: str = "build"):
    """The builder called directly, as a user's script in the current folder would."""
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    return getattr(importlib.import_module("mynets.net"), function)()


@pytest.mark.slow
def test_a_function_loads_by_name_and_explains_as_wrap_model_does(code):
    assert str(code) not in sys.path  # (the library makes the current folder importable)
    loaded = hookviz.load_model(NAME, device="cpu")
    assert (loaded.name, loaded.source, loaded.task) == (NAME, "custom", "classification")
    assert loaded.categories == ("class 0", "class 1", "class 2", "class 3")
    assert loaded.preprocessing == IMAGENET_PREPROCESSING and loaded.pretrained
    assert not loaded.model.training
    assert not any(p.requires_grad for p in loaded.model.parameters())
    wrapped = hookviz.wrap_model(_module(), num_classes=4, device="cpu")
    image = hookviz.sample_image().resize((96, 72))
    for target in (None, 2):
        ours = hookviz.grad_cam(loaded, image, layer="features", target=target)
        theirs = hookviz.grad_cam(wrapped, image, layer="features", target=target)
        assert ours.class_index == theirs.class_index
        np.testing.assert_array_equal(ours.heatmap, theirs.heatmap)
        assert ours.score == theirs.score
    assert hookviz.default_layer(loaded) == hookviz.default_layer(wrapped)


def test_untrained_is_the_functions_own_initialisation_the_same_every_time(code):
    before = torch.random.get_rng_state()
    first = hookviz.load_model("mynets.net:build_random", pretrained=False, device="cpu")
    second = hookviz.load_model("mynets.net:build_random", pretrained=False, device="cpu")
    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's numbers untouched
    assert not first.pretrained
    states = first.model.state_dict().values(), second.model.state_dict().values()
    for a, b in zip(*states, strict=True):
        assert torch.equal(a, b)


def test_a_class_or_a_wrapped_model_is_accepted_too(code):
    by_class = hookviz.load_model("mynets.net:TinyNet", device="cpu")
    assert by_class.num_classes == 4
    wrapped = hookviz.load_model("mynets.net:build_wrapped", device="cpu")
    assert (
        wrapped.categories == ("w0", "w1", "w2", "w3")
        and wrapped.name == "mynets.net:build_wrapped"
    )
    renamed = hookviz.load_model(
        "mynets.net:build_wrapped", class_names="classes.txt", device="cpu"
    )
    assert renamed.categories == tuple(CLASSES)


@pytest.mark.parametrize(
    ("name", "options", "said"),
    [
        ("nonets.net:build", {}, ["no module 'nonets'", "current folder ({here})", "pip install"]),
        ("mynets.nett:build", {}, ["no module 'mynets.nett'", "has no nett.py or nett/"]),
        (
            "mynets.net:nope",
            {},
            ["has no 'nope'", "mynets.net:build,", "mynets.net:TinyNet", "mynets.net:build_five"],
        ),
        (
            "mynets.net:build_raises",
            {},
            ["mynets.net:build_raises raised ValueError: no weights for this one (", "line "],
        ),
        ("mynets.net:needs", {}, ["needs arguments (classes)", "calls it with none"]),
        ("mynets.net:build_dict", {}, ["returned a dict holding a model: return the model alone"]),
        ("mynets.net:build_nothing", {}, ["returned None"]),
        (
            "mynets.net:build_squeezed",
            {},
            ["returns a (4,) tensor", "batch dimension is missing", "flatten(1)"],
        ),
        (
            "mynets.net:build_segmenter",
            {"task": "classification"},
            [
                "returns a (1, 5, 224, 224) tensor",
                'a segmenter of 5 categories (task "segmentation")',
            ],
        ),
        (
            "mynets.net:build_detector",
            {"task": "classification"},
            ["returns a list of 1, the first dict of 'boxes'", 'a detector (task "detection")'],
        ),
        (
            NAME,
            {"task": "segmentation"},
            [
                'not a segmenter\'s (N, categories, H, W) scores (task "segmentation")',
                'looks like an embedder of 4-dimensional vectors (task "embedding") or a '
                'classifier of 4 classes (task "classification")',
            ],
        ),
        (
            NAME,
            {"class_names": ["cat", "dog", "bird"]},
            ["3 class names for mynets.net:build, whose output has 4 classes", "exactly 4"],
        ),
        (NAME, {"task": "zero-shot"}, ["loads as one of classification, detection"]),
        ("mynets.net:build_detector", {}, ["is a detector: give its class names"]),
        ("mynets.net:build_fixed", {}, ["failed on one 224x224 image", "RuntimeError", "size="]),
    ],
)
def test_each_failure_is_said_in_the_users_terms(code, name, options, said):
    with pytest.raises(hookviz.ModelError) as caught:
        hookviz.load_model(name, device="cpu", **options)
    message = str(caught.value)
    for fragment in said:
        assert fragment.format(here=code) in message, message
    assert "Traceback" not in message


def test_the_listed_builders_are_those_callable_with_no_arguments(code):
    with pytest.raises(hookviz.ModelError) as caught:
        hookviz.load_model("mynets.net:nope", device="cpu")
    listed = str(caught.value).split("no arguments): ")[1].split(", ")
    assert "mynets.net:needs" not in listed and "mynets.net:_private_builder" not in listed
    assert "mynets.net:build" in listed and "mynets.net:TinyDetector" in listed


def test_a_class_names_file_whose_count_differs_is_named(code):
    (code / "three.txt").write_text("a\nb\nc\n", encoding="utf-8")
    with pytest.raises(hookviz.ModelError, match=r"3 class names in three\.txt for mynets"):
        hookviz.load_model(NAME, class_names="three.txt", device="cpu")


def test_the_task_is_guessed_from_the_output_where_its_form_says_it(code):
    segmenter = hookviz.load_model("mynets.net:build_segmenter", device="cpu")
    assert segmenter.task == "segmentation" and segmenter.num_classes == 5
    detector = hookviz.load_model(
        "mynets.net:build_detector", class_names=["bg", "a", "b"], device="cpu"
    )
    assert detector.task == "detection" and detector.categories == ("bg", "a", "b")
    embedder = hookviz.load_model(NAME, task="embedding", device="cpu")
    assert embedder.task == "embedding" and embedder.categories == ()
    # an embedder is its output as it is: nothing of the user's module is taken off
    assert isinstance(embedder.model.fc, torch.nn.Linear)
    with pytest.raises(hookviz.ModelError, match="an embedder: its output is vectors"):
        hookviz.load_model(NAME, task="embedding", class_names="classes.txt", device="cpu")


def test_weights_from_a_safetensors_file_and_classes_from_a_file(code):
    trained = _module()
    with torch.no_grad():
        trained.fc.weight.mul_(-3.0)
        trained.fc.bias.copy_(torch.tensor([0.0, 5.0, 0.0, 0.0]))
    # saved as DataParallel saves it: the prefix is found and removed
    state = {f"module.{key}": value.contiguous() for key, value in trained.state_dict().items()}
    save_file(state, str(code / "net.safetensors"))
    loaded = hookviz.load_model(
        NAME, checkpoint="net.safetensors", class_names="classes.txt", device="cpu"
    )
    for key, value in trained.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[key], value)
    assert loaded.pretrained and "'net.safetensors' (safetensors)" in loaded.loaded_from
    assert "prefix 'module.' removed" in loaded.loaded_from
    image = hookviz.sample_image().resize((64, 64))
    top = hookviz.predict(loaded, image)
    assert [p.name for p in top] == [CLASSES[p.index] for p in top] and top[0].name == "dog"
    with torch.no_grad():
        batch = loaded.preprocessing.to_tensor(image)
        expected = torch.softmax(trained(batch), 1)[0]
    assert top[0].probability == pytest.approx(float(expected[1]), abs=1e-6)


def test_a_checkpoint_that_does_not_fit_or_is_not_weights_is_refused(code):
    save_file(_module("build_five").state_dict(), str(code / "five.safetensors"))
    with pytest.raises(hookviz.CheckpointError) as caught:
        hookviz.load_model(NAME, checkpoint="five.safetensors", device="cpu")
    message = str(caught.value)
    assert "does not fit the model mynets.net:build builds" in message
    assert "fc.weight (5, 8) vs (4, 8)" in message
    torch.save(_module(), code / "whole.pt")  # a pickled module: code, not weights
    with pytest.raises(hookviz.CheckpointError, match="holds Python objects besides tensors"):
        hookviz.load_model(NAME, checkpoint="whole.pt", device="cpu")


def test_class_names_in_the_checkpoints_metadata(code):
    save_file(
        _module().state_dict(),
        str(code / "named.safetensors"),
        metadata={"class_names": json.dumps(["n0", "n1", "n2", "n3"])},
    )
    loaded = hookviz.load_model(NAME, checkpoint="named.safetensors", device="cpu")
    assert loaded.categories == ("n0", "n1", "n2", "n3")


def test_the_preprocessing_text():
    parsed = hookviz.parse_preprocessing("size=160,mean=0.5,std=0.2/0.3;0.4,interpolation=bicubic")
    assert (parsed.size, parsed.mean, parsed.std) == (160, (0.5,) * 3, (0.2, 0.3, 0.4))
    assert parsed.interpolation == "bicubic" and not parsed.fixed
    assert hookviz.parse_preprocessing("size=224") == IMAGENET_PREPROCESSING
    assert hookviz.parse_preprocessing(" fixed=yes , size=32 ").fixed
    assert hookviz.parse_preprocessing(IMAGENET_PREPROCESSING) is IMAGENET_PREPROCESSING
    for spec, said in [
        ("", "is empty"),
        ("size", "is not key=value"),
        ("colour=rgb", "unknown preprocessing entry 'colour'"),
        ("size=big", "size=big is not a number"),
        ("mean=0.1/0.2", "not one number or three"),
        ("std=0/1/1", "above 0"),
        ("interpolation=lanczos", "not one of bilinear"),
        ("size=2,size=3", "given twice"),
        ("fixed=maybe", "not yes or no"),
    ]:
        with pytest.raises(hookviz.ModelError, match=said):
            hookviz.parse_preprocessing(spec)


def test_a_preprocessing_given_and_a_fixed_size_found(code):
    loaded = hookviz.load_model(NAME, preprocessing="size=64,mean=0.5,std=0.5", device="cpu")
    assert loaded.preprocessing.size == 64 and loaded.preprocessing.mean == (0.5,) * 3
    assert not loaded.preprocessing.fixed  # it takes any shape
    fixed = hookviz.load_model("mynets.net:build_fixed", preprocessing="size=32", device="cpu")
    assert fixed.preprocessing.fixed and fixed.num_classes == 3
    cam = hookviz.grad_cam(fixed, hookviz.sample_image().resize((90, 60)), layer="0")
    assert cam.heatmap.shape == (60, 90)  # the whole image, fed as the square


@pytest.mark.slow
def test_a_preprocessing_text_replaces_a_zoo_models_own():
    zoo = hookviz.load_model("resnet18", pretrained=False, preprocessing="size=96", device="cpu")
    assert zoo.preprocessing == hookviz.parse_preprocessing("size=96")


def test_a_model_card_may_name_a_function_of_the_card_folders_code(code, monkeypatch):
    cards = code / "cards"
    _write_package(cards, "cardnets")  # beside the cards, not in the current folder
    (cards / "mine.json").write_text(
        json.dumps({"function": "cardnets.net:build", "title": "Mine", "class_names": CLASSES}),
        encoding="utf-8",
    )
    trained = _module()
    with torch.no_grad():
        trained.fc.bias.fill_(1.5)
    save_file(trained.state_dict(), str(cards / "weighted.safetensors"))
    (cards / "weighted.json").write_text(
        json.dumps({"function": "cardnets.net:build", "preprocessing": {"size": 64}}),
        encoding="utf-8",
    )
    (cards / "both.json").write_text(
        json.dumps({"function": "cardnets.net:build", "architecture": "resnet18"}),
        encoding="utf-8",
    )
    (cards / "bad.json").write_text(json.dumps({"function": "cardnets/net.py"}), encoding="utf-8")
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(cards))
    listed = {card.name: card for card in hookviz.model_cards()}
    assert listed["card:mine"].function == "cardnets.net:build" and not listed["card:mine"].problem
    assert listed["card:mine"].weights is None
    assert "both" in listed["card:both"].problem
    assert "package.module:function" in listed["card:bad"].problem
    mine = hookviz.load_model("card:mine", device="cpu")
    assert (mine.source, mine.task, mine.categories) == ("card", "classification", tuple(CLASSES))
    assert "model card 'Mine'" in mine.loaded_from
    weighted = hookviz.load_model("card:weighted", device="cpu")
    assert torch.equal(weighted.model.fc.bias, trained.fc.bias) and weighted.pretrained
    assert weighted.preprocessing.size == 64
    untrained = hookviz.load_model("card:weighted", pretrained=False, device="cpu")
    assert not untrained.pretrained and not torch.equal(untrained.model.fc.bias, trained.fc.bias)
    with pytest.raises(hookviz.ModelError, match="the model card 'card:mine' cannot be used: 3"):
        hookviz.load_model("card:mine", class_names=["a", "b", "c"], device="cpu")


# ---------------------------------------------------------------- the command line


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOOKVIZ_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "hookviz", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_hookviz_layers_of_your_code_untrained(code):
    answer = _cli(code, "layers", "--model", NAME, "--weights", "untrained")
    assert answer.returncode == 0, answer.stderr
    table = hookviz.layer_table(hookviz.load_model(NAME, pretrained=False, device="cpu"))
    lines = answer.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [layer.name for layer in table.hookable]
    assert [line.split()[0] for line in lines if line.endswith("(default)")] == [table.default]
    refused = _cli(code, "layers", "--model", "mynets.net:nope")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("hookviz: mynets.net (") and "has no 'nope'" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    both = _cli(code, "layers", "--model", NAME, "--weights", "untrained", "--checkpoint", "x.pt")
    assert both.returncode == 2 and "--weights untrained reads no weights" in both.stderr


@pytest.mark.slow
def test_hookviz_cam_over_a_folder_with_your_code_weights_and_classes(code):
    images = code / "images"
    images.mkdir()
    sample = hookviz.sample_image()
    sample.resize((80, 64)).save(images / "a.png")
    sample.resize((64, 90)).rotate(20).save(images / "b.png")
    trained = _module()
    with torch.no_grad():
        trained.fc.bias.copy_(torch.tensor([0.0, 0.0, 4.0, 0.0]))
    save_file(trained.state_dict(), str(code / "net.safetensors"))
    answer = _cli(
        code,
        "cam",
        "images",
        "--model",
        NAME,
        "--weights",
        "net.safetensors",
        "--classes",
        "classes.txt",
        "--out",
        "runs/mine",
        "--quiet",
    )
    assert answer.returncode == 0, answer.stderr
    run = hookviz.open_run(code / "runs" / "mine")
    table = run.table
    assert list(table["status"]) == ["ok", "ok"] and run.manifest["job"]["model"] == NAME
    loaded = hookviz.load_model(
        NAME, checkpoint="net.safetensors", class_names="classes.txt", device="cpu"
    )
    for row, name in zip(table.itertuples(), ("a.png", "b.png"), strict=True):
        cam = hookviz.grad_cam(loaded, hookviz.load_image(images / name))
        assert (row.class_index, row.class_name) == (cam.class_index, cam.class_name)
        assert row.class_name in CLASSES
        np.testing.assert_allclose(run.heatmap(row.Index), cam.heatmap, atol=2e-3)
    wrong = _cli(code, "cam", "images", "--model", NAME, "--weights", "nofile.pt", "--out", "o")
    assert wrong.returncode == 2 and "--weights nofile.pt: no such file" in wrong.stderr
    assert not (code / "o").exists()
