"""The model registry and the sources registered into it: the built-in sources in their order,
which source a name belongs to, and a new source plugging in with one registration (listed,
loaded with seeded random weights, used as a checkpoint's architecture) while the registry
imports no source."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookviz
from hookviz.core.preprocess import Preprocessing
from hookviz.models import bundled, registry, torchvision_tasks
from hookviz.models.base import Architecture, Built, ModelInfo, ModelRequest, ModelSource

from .test_import_cycles import import_graph

PREP = Preprocessing(size=32, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))


def test_the_built_in_sources_register_once_in_order():
    kinds = [source.kind for source in registry.sources()]
    assert kinds == [
        "bundled",
        "torchvision",
        "torchvision",
        "timm",
        "hf",
        "clip",
        "card",
        "custom",
    ]
    for source in (bundled.SOURCE, torchvision_tasks.SOURCE):
        registry.register(source)  # again: replaced in its place, not added
    assert [source.kind for source in registry.sources()] == kinds
    assert registry.sources()[2] is torchvision_tasks.SOURCE


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("efficientnet_lite0", "bundled"),
        ("resnet50", "torchvision"),
        ("fasterrcnn_resnet50_fpn", "torchvision"),
        ("lraspp_mobilenet_v3_large", "torchvision"),
        ("timm:resnet18", "timm"),
        ("timm:any_name_at_all", "timm"),  # the prefix claims it, listed or not
        ("card:pets", "card"),
        ("mynets.net:build", "custom"),  # your own code, by the form of its name
        ("net:build", "custom"),
        ("timm:resnet18.a1_in1k", "timm"),  # (a prefix keeps its meaning)
        ("no_such_model", None),
    ],
)
def test_each_name_belongs_to_one_source(name, kind):
    source = registry.source_of(name)
    assert (source.kind if source else None) == kind


def test_the_registry_imports_no_source():
    """Sources import the registry, never the other way: the registry module imports none of
    the modules ``sources`` registers."""
    graph = import_graph()
    registered = graph["hookviz.models.sources"] - {"hookviz.models.registry"}
    assert registered >= {"hookviz.models.bundled", "hookviz.models.cards"}
    assert graph["hookviz.models.registry"] & registered == set()


def _tiny(classes: int = 5) -> nn.Module:
    module = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, classes),
    )
    module.num_classes = classes  # how the checkpoint loader finds the default head
    return module


def _toy_source() -> ModelSource:
    """A new family: one module and this one registration."""

    def build(request: ModelRequest) -> Built:
        return Built(_tiny(), PREP, tuple(f"toy {index}" for index in range(5)))

    return ModelSource(
        kind="toy",  # type: ignore[arg-type]
        names=lambda: ["toy:tiny"],
        catalog=lambda: [ModelInfo("toy:tiny", "toy", True, "built here")],  # type: ignore[arg-type]
        build=build,
        prefix="toy:",
        architecture=lambda name: Architecture(
            lambda classes, state: _tiny(5 if classes is None else classes), lambda module: PREP
        ),
        hint="a toy name such as 'toy:tiny'",
    )


@pytest.fixture
def with_toy(monkeypatch):
    """The toy source registered for one test (the registry's list restored after)."""
    monkeypatch.setattr(registry, "_SOURCES", list(registry.sources()))
    registry.register(_toy_source())


def test_a_registered_source_is_listed_loaded_and_takes_checkpoints(with_toy, tmp_path):
    assert hookviz.model_names()[-1] == "toy:tiny"
    assert hookviz.model_catalog()[-1] == ModelInfo("toy:tiny", "toy", True, "built here")  # type: ignore[arg-type]
    assert "toy:tiny" in hookviz.models.architecture_names()

    first = hookviz.load_model("toy:tiny", pretrained=False, device="cpu")
    again = hookviz.load_model("toy:tiny", pretrained=False, device="cpu")
    assert first.source == "toy" and first.categories[0] == "toy 0"
    assert not first.model.training and not any(p.requires_grad for p in first.model.parameters())
    for mine, other in zip(first.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(mine, other)  # seeded by the name, as every source's

    trained = _tiny(3)
    path = tmp_path / "toy.pt"
    torch.save(trained.state_dict(), path)
    loaded = hookviz.load_model("toy:tiny", checkpoint=path, device="cpu")
    assert loaded.source == "checkpoint" and loaded.num_classes == 3
    assert torch.equal(loaded.model[4].weight, trained[4].weight)

    with pytest.raises(hookviz.ModelError) as error:
        hookviz.load_model("nothing_here", checkpoint=path)
    assert "a toy name such as 'toy:tiny'" in str(error.value)


def test_an_unprefixed_name_listed_twice_is_the_first_sources(monkeypatch):
    monkeypatch.setattr(registry, "_SOURCES", list(registry.sources()))
    registry.register(
        ModelSource(
            kind="late",  # type: ignore[arg-type]
            names=lambda: ["resnet18"],
            catalog=list,
            build=lambda request: Built(_tiny(), PREP, ("a",) * 5),
        )
    )
    assert registry.source_of("resnet18").kind == "torchvision"
    assert hookviz.model_names().count("resnet18") == 2  # listed by both, loaded by the first
