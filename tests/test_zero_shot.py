"""CLIP (open_clip) as a zero-shot classifier over typed labels: ``clip:ARCH`` loads the image
encoder and ``with_labels`` scores the labels as CLIP does (logit scale times the cosine of the
image and text embeddings, checked against open_clip's own ``encode_image``/``encode_text`` on
the same seeded weights); ``Text(label)`` explains exactly the logit ``Class(index)`` does, and
Grad-CAM agrees with pytorch-grad-cam on the wrapped module. Cached pretrained weights are read
from the Hugging Face cache as open_clip lays them out; uncached ones offline say what to do.

The fast tests use two tiny architectures added to open_clip's own registry of configurations
(``open_clip.add_model_config``): a ViT (a class token and a 4 x 4 patch grid) and a ResNet;
the smallest architecture open_clip lists (``ViT-S-32-alt``) runs once, marked slow.
"""

from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

import hookviz
from hookviz.models import registry
from hookviz.models.zero_shot import with_labels
from hookviz.targets import Class, Text

open_clip = pytest.importorskip("open_clip")
pytorch_grad_cam = pytest.importorskip("pytorch_grad_cam")
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget  # noqa: E402

MIN_R = 0.999
LABELS = ["a dog", "a cat", "a red car", "a tree"]
TINY_VIT = "hookviz-tiny-ViT"
TINY_RN = "hookviz-tiny-RN"
_TEXT = {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2}
CONFIGS = {
    TINY_VIT: {
        "embed_dim": 32,
        "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "patch_size": 16},
        "text_cfg": _TEXT,
    },
    TINY_RN: {
        "embed_dim": 32,
        "vision_cfg": {"image_size": 96, "layers": [1, 1, 1, 1], "width": 8, "patch_size": None},
        "text_cfg": _TEXT,
    },
}
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module", autouse=True)
def tiny_configs(tmp_path_factory) -> None:
    folder = tmp_path_factory.mktemp("open_clip_configs")
    for name, config in CONFIGS.items():
        (folder / f"{name}.json").write_text(json.dumps(config))
    open_clip.add_model_config(folder)


@pytest.fixture(scope="module")
def base(tiny_configs) -> hookviz.LoadedModel:
    return hookviz.load_model("clip:" + TINY_VIT, pretrained=False, device="cpu")


@pytest.fixture(scope="module")
def labelled(base) -> hookviz.LoadedModel:
    return with_labels(base, LABELS)


def _photo(height: int, width: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


def _open_clip_model(arch: str) -> torch.nn.Module:
    """open_clip's own model of ``arch`` with the weights hookviz's random ones are (the
    registry seeds a build with the name's seed)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(registry.untrained_seed("clip:" + arch))
        model = open_clip.create_model(arch, pretrained=None, pretrained_text=False)
    return model.eval()


def _clip_probabilities(model, x: torch.Tensor, texts: list[str], arch: str) -> torch.Tensor:
    tokens = open_clip.get_tokenizer(arch)(texts)
    with torch.no_grad():
        image = model.encode_image(x, normalize=True)
        text = model.encode_text(tokens, normalize=True)
        return torch.softmax(model.logit_scale.exp() * image @ text.T, dim=-1)[0]


def _reference_cam(loaded, layer: str, x: torch.Tensor, index: int, reshape=None) -> np.ndarray:
    """pytorch-grad-cam's Grad-CAM on an unfrozen copy of the labelled module."""
    copied = copy.deepcopy(loaded.model).requires_grad_(True)
    module = copied.get_submodule(layer)
    with pytorch_grad_cam.GradCAM(copied, [module], reshape_transform=reshape) as cam:
        return cam(input_tensor=x, targets=[ClassifierOutputTarget(index)])[0]


def _tokens_to_grid(side: int):
    def reshape(tokens: torch.Tensor) -> torch.Tensor:
        return tokens[:, 1:, :].reshape(tokens.shape[0], side, side, -1).permute(0, 3, 1, 2)

    return reshape


# --- the labels are scored as CLIP scores them ------------------------------------------------


def test_a_clip_model_loads_without_labels_and_says_how_to_give_them(base) -> None:
    assert (base.source, base.task, base.categories, base.pretrained) == (
        "clip",
        "zero-shot",
        (),
        False,
    )
    assert base.scores_classes
    prep = base.preprocessing
    assert (prep.size, prep.fixed) == (64, True)
    assert prep.mean == pytest.approx(open_clip.OPENAI_DATASET_MEAN)
    assert prep.std == pytest.approx(open_clip.OPENAI_DATASET_STD)
    with pytest.raises(hookviz.ModelError, match=r"no labels yet.*zero_shot"):
        hookviz.predict(base, _photo(64, 64))


def test_typed_labels_score_as_open_clip_scores_them(base, labelled) -> None:
    assert labelled.categories == tuple(LABELS) and labelled.task == "zero-shot"
    # the same encoder, device and lock: hooks on the shared modules are taken in turn
    assert labelled.model.visual is base.model.visual and labelled.lock is base.lock
    assert not any(p.requires_grad for p in labelled.model.parameters())
    assert all(not m.training for m in labelled.model.modules())

    image = _photo(48, 80)
    x = labelled.preprocessing.to_tensor(image)
    assert x.shape == (1, 3, 64, 64)  # the whole image, at the native square
    model = _open_clip_model(TINY_VIT)
    expected = _clip_probabilities(model, x, LABELS, TINY_VIT)
    top = hookviz.predict(labelled, image, k=len(LABELS))
    assert [p.name for p in top] == [LABELS[i] for i in expected.argsort(descending=True)]
    np.testing.assert_allclose(
        [p.probability for p in top], expected.sort(descending=True)[0], rtol=1e-5, atol=1e-7
    )
    # a prompt template: the label is encoded inside it, and named as typed
    prompted = with_labels(base, ["dog", "cat"], template="a photo of a {}.")
    assert prompted.categories == ("dog", "cat")
    texts = ["a photo of a dog.", "a photo of a cat."]
    expected = _clip_probabilities(model, x, texts, TINY_VIT)
    np.testing.assert_allclose(
        [p.probability for p in hookviz.predict(prompted, x, k=2)],
        expected.sort(descending=True)[0],
        rtol=1e-5,
    )


def test_labels_given_to_load_model_are_its_labels(labelled, tmp_path) -> None:
    image = _photo(40, 60, seed=3)
    expected = [(p.name, p.probability) for p in hookviz.predict(labelled, image, k=4)]
    as_list = hookviz.load_model("clip:" + TINY_VIT, False, class_names=LABELS, device="cpu")
    listed = tmp_path / "labels.txt"
    listed.write_text("\n".join(LABELS) + "\n")
    as_file = hookviz.load_model("clip:" + TINY_VIT, False, class_names=listed, device="cpu")
    for loaded in (as_list, as_file):
        assert loaded.categories == tuple(LABELS) and loaded.task == "zero-shot"
        got = [(p.name, p.probability) for p in hookviz.predict(loaded, image, k=4)]
        assert [n for n, _ in got] == [n for n, _ in expected]
        np.testing.assert_allclose([p for _, p in got], [p for _, p in expected], rtol=1e-5)
    with pytest.raises(hookviz.ModelError, match="twice"):
        hookviz.load_model("clip:" + TINY_VIT, False, class_names=["a dog", "a dog"])


def test_labels_that_cannot_be_scored_are_refused(base, labelled) -> None:
    with pytest.raises(hookviz.ModelError, match="twice"):
        with_labels(base, ["a dog", "A Dog"])
    with pytest.raises(hookviz.ModelError, match="at least one"):
        with_labels(base, [])
    with pytest.raises(hookviz.ModelError, match="one text"):
        with_labels(base, "a dog")
    with pytest.raises(hookviz.ModelError, match="no '\\{\\}'"):
        with_labels(base, ["a dog"], template="a photo")
    classifier = hookviz.wrap_model(torch.nn.Flatten(), num_classes=3)
    with pytest.raises(hookviz.ModelError, match="zero-shot model"):
        with_labels(classifier, ["a dog"])
    # relabelled: the labels replace the old ones
    assert with_labels(labelled, ["a boat"]).categories == ("a boat",)


# --- explaining a label ------------------------------------------------------------------------


def test_a_text_target_is_its_labels_class_and_agrees_with_pytorch_grad_cam(labelled) -> None:
    assert labelled.tokens is not None
    assert (labelled.tokens.prefix_tokens, labelled.tokens.patch) == (1, (16, 16))
    names = [layer.name for layer in hookviz.list_layers(labelled)]
    assert names and all(name.startswith("visual.") for name in names)
    layer = hookviz.default_layer(labelled)
    # the last block's output reaches the embedding through the class token only
    assert layer == "visual.transformer.resblocks.1.ln_1"

    x = labelled.preprocessing.to_tensor(_photo(64, 64, seed=3))
    for label in ("a dog", "a red car"):
        index = LABELS.index(label)
        by_text = hookviz.grad_cam(labelled, x, layer, target=Text(label))
        by_class = hookviz.grad_cam(labelled, x, layer, target=Class(index))
        assert by_text.class_index == index and by_text.class_name == label
        np.testing.assert_array_equal(by_text.heatmap, by_class.heatmap)
        assert by_text.probability == by_class.probability
        reference = _reference_cam(labelled, layer, x, index, _tokens_to_grid(4))
        assert _pearson(by_text.heatmap, reference) >= MIN_R
    # case as typed or not: Text looks the label up as the model's classes are looked up
    upper = hookviz.grad_cam(labelled, x, layer, target=Text("A Dog"))
    np.testing.assert_array_equal(upper.heatmap, by_class_heatmap(labelled, x, layer, 0))
    with pytest.raises(hookviz.TargetError, match="not one of the model's labels"):
        hookviz.grad_cam(labelled, x, layer, target=Text("a bird"))


def by_class_heatmap(loaded, x, layer: str, index: int) -> np.ndarray:
    return hookviz.grad_cam(loaded, x, layer, target=Class(index)).heatmap


def test_a_resnet_clip_is_explained_as_a_cnn(tiny_configs) -> None:
    loaded = with_labels(
        hookviz.load_model("clip:" + TINY_RN, pretrained=False, device="cpu"), LABELS
    )
    assert loaded.tokens is None
    x = loaded.preprocessing.to_tensor(_photo(96, 96, seed=4))
    expected = _clip_probabilities(_open_clip_model(TINY_RN), x, LABELS, TINY_RN)
    np.testing.assert_allclose(
        [p.probability for p in hookviz.predict(loaded, x, k=len(LABELS))],
        expected.sort(descending=True)[0],
        rtol=1e-5,
    )
    layer = "visual.layer4"  # 3 x 3, before the attention pool
    explained = 0
    for index, label in enumerate(LABELS):
        ours = hookviz.grad_cam(loaded, x, layer, target=Text(label))
        reference = _reference_cam(loaded, layer, x, index)
        if ours.blank:  # no positive evidence at this layer: both maps are zero
            assert not reference.any()
            continue
        explained += 1
        assert _pearson(ours.heatmap, reference) >= MIN_R
    assert explained >= 1  # (random weights: most labels' evidence here is negative)


# --- pretrained weights: from the cache, or a message ------------------------------------------


def test_cached_pretrained_weights_load_with_their_tags_settings(
    tiny_configs, tmp_path, monkeypatch
) -> None:
    """A tag's weights in the Hugging Face cache (open_clip's file name, safetensors) load
    offline, built with the tag's QuickGELU and preprocessed with its statistics."""
    from safetensors.torch import save_file

    hub_id = "tiny-org/tiny-clip"
    tag = {
        "hf_hub": f"{hub_id}/",
        "quick_gelu": True,
        "mean": (0.5, 0.5, 0.5),
        "std": (0.25, 0.25, 0.25),
        "interpolation": "bilinear",
    }
    monkeypatch.setitem(open_clip.pretrained._PRETRAINED, TINY_VIT, {"tinytag": tag})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        trained = open_clip.create_model(TINY_VIT, force_quick_gelu=True).eval()
    state = {key: value.contiguous() for key, value in trained.state_dict().items()}
    snapshot = tmp_path / f"models--{hub_id.replace('/', '--')}" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    save_file(state, str(snapshot / "open_clip_model.safetensors"))
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HOOKVIZ_OFFLINE", "1")

    loaded = hookviz.load_model(f"clip:{TINY_VIT}/tinytag", device="cpu")
    assert loaded.pretrained and loaded.task == "zero-shot"
    visual = loaded.model.visual
    for key, value in trained.visual.state_dict().items():
        assert torch.equal(visual.state_dict()[key], value), key
    gelu = visual.transformer.resblocks[0].mlp.gelu
    assert type(gelu).__name__ == "QuickGELU"
    prep = loaded.preprocessing
    assert (prep.mean, prep.std, prep.interpolation) == (tag["mean"], tag["std"], "bilinear")
    x = prep.to_tensor(_photo(64, 64, seed=5))
    expected = _clip_probabilities(trained, x, LABELS, TINY_VIT)
    np.testing.assert_allclose(
        [p.probability for p in hookviz.predict(with_labels(loaded, LABELS), x, k=4)],
        expected.sort(descending=True)[0],
        rtol=1e-5,
    )


def test_uncached_pretrained_weights_offline_say_what_to_do(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HOOKVIZ_OFFLINE", "1")
    with pytest.raises(hookviz.ModelUnavailableError) as info:
        hookviz.load_model("clip:ViT-B-32", device="cpu")
    message = str(info.value)
    assert "'clip:ViT-B-32'" in message and str(tmp_path) in message
    assert "downloads are switched off" in message
    assert "open_clip.create_model('ViT-B-32', pretrained='openai')" in message
    rows = {row.name: row for row in hookviz.model_catalog() if row.source == "clip"}
    assert rows["clip:ViT-B-32"].task == "zero-shot" and not rows["clip:ViT-B-32"].ready
    assert rows["clip:ViT-B-32"].status == "not cached, downloads off"
    with pytest.raises(hookviz.ModelError, match="no pretrained weights"):
        hookviz.load_model("clip:ViT-S-32-alt", device="cpu")
    with pytest.raises(hookviz.ModelError, match=r"no pretrained tag 'nope'.*openai"):
        hookviz.load_model("clip:ViT-B-32/nope", device="cpu")
    with pytest.raises(hookviz.ModelError, match="did you mean clip:ViT-B-32"):
        hookviz.load_model("clip:ViT-B-23", device="cpu")
    assert os.listdir(tmp_path) == []  # nothing was fetched


# --- the smallest listed architecture, end to end ----------------------------------------------


@pytest.mark.slow
def test_the_smallest_listed_clip_scores_and_explains_labels() -> None:
    arch = "ViT-S-32-alt"
    loaded = with_labels(hookviz.load_model("clip:" + arch, False, device="cpu"), LABELS)
    image = _photo(180, 240, seed=6)
    x = loaded.preprocessing.to_tensor(image)
    assert x.shape == (1, 3, 224, 224)
    expected = _clip_probabilities(_open_clip_model(arch), x, LABELS, arch)
    np.testing.assert_allclose(
        [p.probability for p in hookviz.predict(loaded, image, k=4)],
        expected.sort(descending=True)[0],
        rtol=1e-5,
    )
    layer = "visual.transformer.resblocks.11.ln_1"
    ours = hookviz.grad_cam(loaded, x, layer, target=Text("a cat"))
    reference = _reference_cam(loaded, layer, x, LABELS.index("a cat"), _tokens_to_grid(7))
    assert _pearson(ours.heatmap, reference) >= MIN_R
