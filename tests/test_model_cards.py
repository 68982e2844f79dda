"""Model cards (``HOOKVIZ_MODELS_DIR``), timm weights from a local Hugging Face cache, and class
names given to a named model.

Every file here is written by the test itself under ``tmp_path``: random-weight torchvision /
timm models saved as safetensors, JSON cards beside them, and a Hugging Face hub cache laid out
the way ``huggingface_hub`` lays it out (refs, snapshots, blobs). Nothing touches the network
(``conftest`` sets ``HOOKVIZ_OFFLINE=1``). The oracle for weights is the module that was saved:
its eval-mode logits on a fixed input. BatchNorm running statistics are randomised, so a
dropped buffer changes the logits.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import timm
import torch
import torchvision
from safetensors.torch import save_file
from timm.data import resolve_model_data_config

import hookviz

from .conftest import random_input
from .test_checkpoints import _build

# A fixed input for every logits comparison.
X = random_input(64, 64, seed=1)

PETS = ["cat", "dog", "hamster"]
PETS_TITLE = "Pets"


@dataclass(frozen=True)
class Original:
    """The weights a card points at, and the logits of the module they came from."""

    state: dict[str, torch.Tensor]
    logits: torch.Tensor


def _original(arch: str, num_classes: int, seed: int) -> Original:
    module = _build(arch, num_classes, seed)
    state = {k: v.detach().clone().contiguous() for k, v in module.state_dict().items()}
    with torch.no_grad():
        logits = module(X)
    return Original(state, logits)


@pytest.fixture(scope="module")
def pets() -> Original:
    """A 3-class ResNet-18 (the classes of ``PETS``)."""
    return _original("resnet18", len(PETS), seed=11)


@pytest.fixture(scope="module")
def timm_pets() -> Original:
    """A 3-class timm ResNet-18."""
    return _original("timm:resnet18", len(PETS), seed=12)


@pytest.fixture(scope="module")
def squeeze() -> Original:
    """A 5-class SqueezeNet 1.0 (a Conv2d head)."""
    return _original("squeezenet1_0", 5, seed=13)


@pytest.fixture(scope="module")
def imagenet_timm() -> Original:
    """A timm ResNet-18 with ImageNet's 1000 classes, as the hub would hold it (random
    weights, a seed of our own: not the ones ``pretrained=False`` gives)."""
    return _original("timm:resnet18", 1000, seed=14)


def _logits(loaded: hookviz.LoadedModel) -> torch.Tensor:
    with torch.no_grad():
        return loaded.model(X)


def _assert_same_model(loaded: hookviz.LoadedModel, orig: Original) -> None:
    assert loaded.num_classes == orig.logits.shape[1]
    assert loaded.model.training is False
    torch.testing.assert_close(_logits(loaded), orig.logits, atol=1e-5, rtol=1e-5)


def _card(
    folder: Path,
    stem: str,
    card: dict | str,
    state: dict[str, torch.Tensor] | None = None,
    weights: str | None = None,
) -> Path:
    """Write ``folder/stem.json`` (a dict as JSON, a str as it is) and, with ``state``, its
    weights (``stem.safetensors`` unless ``weights`` names another file)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.json"
    path.write_text(card if isinstance(card, str) else json.dumps(card), encoding="utf-8")
    if state is not None:
        save_file(state, str(folder / (weights or f"{stem}.safetensors")))
    return path


def _pets_card(**extra) -> dict:
    return {"architecture": "resnet18", "class_names": PETS, "title": PETS_TITLE, **extra}


def _row(name: str) -> hookviz.ModelInfo:
    rows = [row for row in hookviz.model_catalog() if row.name == name]
    assert len(rows) == 1, [row.name for row in hookviz.model_catalog()]
    return rows[0]


def _load_card(name: str, **kwargs) -> hookviz.LoadedModel:
    return hookviz.load_model(name, device="cpu", **kwargs)


# --- a card loads ------------------------------------------------------------------------------


def test_card_is_listed_and_loads_the_saved_weights(pets, tmp_path, monkeypatch):
    """A ``NAME.json`` beside ``NAME.safetensors`` is offered as ``card:NAME`` (after the
    built-in names), ready, with its title; it loads with its names and the saved weights."""
    folder = tmp_path / "models"
    _card(folder, "pets", _pets_card(), pets.state)
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(folder))

    names = hookviz.model_names()
    assert "card:pets" in names
    assert names[-1] == "card:pets"
    assert names.count("card:pets") == 1
    row = _row("card:pets")
    assert (row.source, row.ready, row.status) == ("card", True, PETS_TITLE)

    loaded = _load_card("card:pets")
    assert loaded.name == "card:pets"
    assert loaded.source == "card"
    assert loaded.categories == tuple(PETS)
    assert loaded.class_index("hamster") == PETS.index("hamster")
    assert PETS_TITLE in loaded.loaded_from
    assert "pets.safetensors" in loaded.loaded_from
    _assert_same_model(loaded, pets)


def test_card_class_names_from_a_text_file(pets, tmp_path, monkeypatch):
    """``"class_names": "classes.txt"`` reads the names from that file beside the card."""
    folder = tmp_path / "models"
    names = ["tabby cat", "beagle", "golden hamster"]
    (folder).mkdir()
    (folder / "classes.txt").write_text("\n".join(names) + "\n", encoding="utf-8")
    _card(folder, "pets", _pets_card(class_names="classes.txt"), pets.state)
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(folder))

    loaded = _load_card("card:pets")
    assert loaded.categories == tuple(names)
    _assert_same_model(loaded, pets)


def test_card_with_its_own_weights_file_name(squeeze, tmp_path, monkeypatch):
    """``"weights"`` names the file; nothing called ``NAME.safetensors`` is needed."""
    folder = tmp_path / "models"
    card = {"architecture": "squeezenet1_0", "weights": "squeeze-v2.safetensors"}
    _card(folder, "squeeze", card, squeeze.state, weights="squeeze-v2.safetensors")
    assert not (folder / "squeeze.safetensors").exists()
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(folder))

    assert _row("card:squeeze").ready is True
    loaded = _load_card("card:squeeze")
    assert "squeeze-v2.safetensors" in loaded.loaded_from
    # no names in the card: numbered classes, as many as the head has
    assert loaded.categories == tuple(f"class {i}" for i in range(squeeze.logits.shape[1]))
    _assert_same_model(loaded, squeeze)


def test_card_on_a_timm_architecture(timm_pets, tmp_path, monkeypatch):
    """``"architecture": "timm:resnet18"``: timm's model with the card's weights, and timm's
    preprocessing for it."""
    folder = tmp_path / "models"
    _card(folder, "timmpets", _pets_card(architecture="timm:resnet18"), timm_pets.state)
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(folder))

    loaded = _load_card("card:timmpets")
    assert loaded.source == "card"
    assert loaded.categories == tuple(PETS)
    _assert_same_model(loaded, timm_pets)
    config = resolve_model_data_config(timm.create_model("resnet18", pretrained=False))
    assert loaded.preprocessing.size == config["input_size"][-1]
    assert loaded.preprocessing.mean == pytest.approx(config["mean"])
    assert loaded.preprocessing.std == pytest.approx(config["std"])


# --- preprocessing -----------------------------------------------------------------------------


def test_card_preprocessing_is_used_as_written(pets, tmp_path, monkeypatch):
    """A card's ``"preprocessing"`` replaces the architecture's, value for value."""
    folder = tmp_path / "models"
    written = {
        "size": 160,
        "mean": [0.5, 0.25, 0.125],
        "std": [0.3, 0.2, 0.1],
        "interpolation": "bicubic",
    }
    _card(folder, "pets", _pets_card(preprocessing=written), pets.state)
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(folder))

    prep = _load_card("card:pets").preprocessing
    assert prep.size == written["size"]
    assert prep.mean == tuple(written["mean"])
    assert prep.std == tuple(written["std"])
    assert prep.interpolation == written["interpolation"]


def test_card_without_preprocessing_uses_the_architectures(pets, tmp_path, monkeypatch):
    """Without ``"preprocessing"`` the card gets what torchvision's resnet18 weights expect."""
    folder = tmp_path / "models"
    _card(folder, "pets", _pets_card(), pets.state)
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(folder))

    prep = _load_card("card:pets").preprocessing
    transforms = torchvision.models.ResNet18_Weights.DEFAULT.transforms()
    assert prep.size == transforms.crop_size[0]
    assert prep.mean == pytest.approx(transforms.mean)
    assert prep.std == pytest.approx(transforms.std)
    assert prep.interpolation == transforms.interpolation.value
    assert prep == hookviz.load_model("resnet18", pretrained=False, device="cpu").preprocessing


# --- broken cards are listed, not hidden -------------------------------------------------------

# card stem -> a word the catalog status must contain
BROKEN = {
    "badjson": "JSON",
    "noarch": "architecture",
    "noweights": "noweights.safetensors",
}
WRONG_COUNT_NAMES = ["a", "b", "c", "d", "e"]


@pytest.fixture(scope="module")
def mixed_folder(pets, tmp_path_factory) -> Path:
    """One folder with a good card (``pets``) and each kind of broken card."""
    folder = tmp_path_factory.mktemp("mixed")
    _card(folder, "pets", _pets_card(), pets.state)
    # a trailing comma: not JSON (the weights are there, the card is the problem)
    text = json.dumps(_pets_card())[:-1] + ',\n  "title": "oops",}'
    _card(folder, "badjson", text, pets.state)
    _card(folder, "noarch", {"class_names": PETS, "title": "No architecture"}, pets.state)
    _card(folder, "noweights", {"architecture": "resnet18", "title": "No weights"})
    # readable and listed as ready; only loading finds that 5 names do not fit 3 outputs
    card = {"architecture": "resnet18", "class_names": WRONG_COUNT_NAMES, "title": "Wrong count"}
    _card(folder, "wrongcount", card, pets.state)
    return folder


@pytest.mark.parametrize("stem", list(BROKEN))
def test_broken_card_is_listed_with_its_problem(stem, mixed_folder, monkeypatch):
    """A card that cannot be read is in the list and the catalog, not ready, saying why; loading
    it is a ModelError naming the card and its problem."""
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(mixed_folder))
    name = f"card:{stem}"
    assert name in hookviz.model_names()
    row = _row(name)
    assert row.source == "card"
    assert row.ready is False
    assert BROKEN[stem] in row.status, row.status

    with pytest.raises(hookviz.ModelError) as error:
        _load_card(name)
    message = str(error.value)
    assert name in message, message
    assert BROKEN[stem] in message, message


def test_card_with_the_wrong_number_of_class_names(pets, mixed_folder, monkeypatch):
    """Listed as ready (the card reads fine); loading it is a ModelError naming the card and
    both counts."""
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(mixed_folder))
    row = _row("card:wrongcount")
    assert (row.ready, row.status) == (True, "Wrong count")

    with pytest.raises(hookviz.ModelError) as error:
        _load_card("card:wrongcount")
    message = str(error.value)
    assert re.search(rf"\b{len(WRONG_COUNT_NAMES)}\b", message), message
    assert re.search(rf"\b{pets.logits.shape[1]}\b", message), message
    assert "wrongcount" in message, message


def test_good_card_loads_beside_broken_ones(pets, mixed_folder, monkeypatch):
    """Broken cards in the folder do not stop the good one from being listed and loading."""
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(mixed_folder))
    cards = [name for name in hookviz.model_names() if name.startswith("card:")]
    assert sorted(cards) == sorted(f"card:{p.stem}" for p in mixed_folder.glob("*.json")), cards
    assert _row("card:pets").ready is True
    loaded = _load_card("card:pets")
    assert loaded.categories == tuple(PETS)
    _assert_same_model(loaded, pets)


# --- names that are not cards ------------------------------------------------------------------


def test_unknown_card_lists_the_cards_there(mixed_folder, monkeypatch):
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(mixed_folder))
    with pytest.raises(hookviz.ModelError) as error:
        _load_card("card:nosuch")
    message = str(error.value)
    assert "card:nosuch" in message, message
    for path in mixed_folder.glob("*.json"):
        assert f"card:{path.stem}" in message, message


def test_without_models_dir_there_are_no_cards(tmp_path, monkeypatch):
    """``HOOKVIZ_MODELS_DIR`` unset: no card names, no card rows, and a card name is a
    ModelError that says which variable to set."""
    monkeypatch.delenv("HOOKVIZ_MODELS_DIR", raising=False)
    assert not [name for name in hookviz.model_names() if name.startswith("card:")]
    assert not [row for row in hookviz.model_catalog() if row.source == "card"]
    with pytest.raises(hookviz.ModelError) as error:
        _load_card("card:x")
    assert "HOOKVIZ_MODELS_DIR" in str(error.value), str(error.value)


def test_checkpoint_with_a_card_name_is_refused(pets, tmp_path, monkeypatch):
    """A card brings its own weights: also passing ``checkpoint=`` is a ModelError."""
    folder = tmp_path / "models"
    _card(folder, "pets", _pets_card(), pets.state)
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(folder))
    with pytest.raises(hookviz.ModelError) as error:
        _load_card("card:pets", checkpoint=folder / "pets.safetensors")
    assert "card:pets" in str(error.value), str(error.value)


def test_model_cards_of_an_explicit_folder(pets, tmp_path, monkeypatch):
    """``model_cards(folder)`` reads that folder, whatever ``HOOKVIZ_MODELS_DIR`` says."""
    folder = tmp_path / "models"
    _card(folder, "pets", _pets_card(description="three pets"), pets.state)
    _card(tmp_path / "elsewhere", "other", {"architecture": "resnet18"}, pets.state)

    for env in (None, tmp_path / "elsewhere"):
        if env is None:
            monkeypatch.delenv("HOOKVIZ_MODELS_DIR", raising=False)
        else:
            monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(env))
        cards = hookviz.model_cards(folder)
        assert [card.name for card in cards] == ["card:pets"]
        (card,) = cards
        assert isinstance(card, hookviz.ModelCard)
        assert card.problem == ""
        assert card.title == PETS_TITLE
        assert card.architecture == "resnet18"
        assert card.weights == folder / "pets.safetensors"
        assert card.class_names == tuple(PETS)
        assert card.preprocessing is None
        assert card.description == "three pets"
    # and the environment's folder is the default
    assert [card.name for card in hookviz.model_cards()] == ["card:other"]


# --- timm pretrained weights from a local Hugging Face cache -----------------------------------

HUB_REPO = "timm/resnet18.a1_in1k"  # what timm's default resnet18 tag is fetched from


def _hf_cache(hub: Path, state: dict[str, torch.Tensor]) -> Path:
    """Lay ``state`` out in ``hub`` as ``huggingface_hub`` does after a download: the file in
    ``blobs/<sha256>``, ``snapshots/<revision>/model.safetensors`` linking to it, and
    ``refs/main`` holding the revision. Returns the snapshot path."""
    repo = hub / ("models--" + HUB_REPO.replace("/", "--"))
    blobs, refs = repo / "blobs", repo / "refs"
    blobs.mkdir(parents=True)
    refs.mkdir()
    staged = repo / "staged.safetensors"
    save_file(state, str(staged))
    blob = blobs / hashlib.sha256(staged.read_bytes()).hexdigest()
    staged.rename(blob)
    revision = hashlib.sha1(b"hookviz test revision").hexdigest()
    (refs / "main").write_text(revision, encoding="utf-8")
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    link = snapshot / "model.safetensors"
    link.symlink_to(os.path.relpath(blob, snapshot))
    return link


def _isolate_hub(monkeypatch, tmp_path: Path) -> None:
    """No hub or torch cache of this machine can answer."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))


def _assert_timm_pretrained(loaded: hookviz.LoadedModel, orig: Original) -> None:
    assert loaded.source == "timm"
    assert loaded.pretrained is True
    imagenet = tuple(torchvision.models.ResNet50_Weights.IMAGENET1K_V2.meta["categories"])
    assert loaded.categories == imagenet
    assert loaded.categories[0] == "tench"
    _assert_same_model(loaded, orig)


def test_timm_pretrained_from_hf_hub_cache(imagenet_timm, tmp_path, monkeypatch):
    """``HF_HUB_CACHE`` holding the weights: ``timm:resnet18`` loads exactly them, offline."""
    _isolate_hub(monkeypatch, tmp_path)
    snapshot = _hf_cache(tmp_path / "hub", imagenet_timm.state)
    assert snapshot.is_file()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    # HF_HOME points elsewhere (empty): HF_HUB_CACHE is the one that counts
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-home"))

    loaded = hookviz.load_model("timm:resnet18", device="cpu")
    _assert_timm_pretrained(loaded, imagenet_timm)


def test_timm_pretrained_from_hf_home(imagenet_timm, tmp_path, monkeypatch):
    """``HF_HOME`` alone: the cache is ``$HF_HOME/hub``."""
    _isolate_hub(monkeypatch, tmp_path)
    _hf_cache(tmp_path / "hub", imagenet_timm.state)
    monkeypatch.setenv("HF_HOME", str(tmp_path))

    loaded = hookviz.load_model("timm:resnet18", device="cpu")
    _assert_timm_pretrained(loaded, imagenet_timm)


def test_timm_pretrained_with_an_empty_cache_says_where_and_how(tmp_path, monkeypatch):
    """Nothing cached, downloads off: ModelUnavailableError naming the cache folder and the
    command that fetches the weights."""
    _isolate_hub(monkeypatch, tmp_path)
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))

    with pytest.raises(hookviz.ModelUnavailableError) as error:
        hookviz.load_model("timm:resnet18", device="cpu")
    message = str(error.value)
    assert str(hub) in message, message
    assert "pretrained=True" in message, message


# --- class names for a named model -------------------------------------------------------------


def test_class_names_override_a_named_models_categories(tmp_path):
    """``class_names=`` with as many names as outputs replaces the categories, as a list or a
    text file; the model itself is unchanged."""
    plain = hookviz.load_model("resnet18", pretrained=False, device="cpu")
    names = [f"thing {index}" for index in range(plain.num_classes)]
    path = tmp_path / "names.txt"
    path.write_text("\n".join(names), encoding="utf-8")
    for given in (names, path):
        loaded = hookviz.load_model("resnet18", pretrained=False, class_names=given, device="cpu")
        assert loaded.categories == tuple(names)
        assert loaded.categories != plain.categories
        torch.testing.assert_close(_logits(loaded), _logits(plain), atol=1e-5, rtol=1e-5)


def test_wrong_number_of_class_names_for_a_named_model():
    """Three names for a 1000-class model: a ModelError with both numbers."""
    names = ["a", "b", "c"]
    with pytest.raises(hookviz.ModelError) as error:
        hookviz.load_model("resnet18", pretrained=False, class_names=names, device="cpu")
    message = str(error.value)
    classes = len(hookviz.imagenet_categories())
    assert re.search(rf"\b{len(names)}\b", message), message
    assert re.search(rf"\b{classes}\b", message), message
