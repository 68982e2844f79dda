"""The stored model index (``hookviz.models.zoo_index``): the same facts torchvision and timm give
when asked, used only for the versions it was written from, and a model list that needs neither
library imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hookviz
from hookviz.models import registry, timm_zoo, torchvision_zoo, zoo_index

ROOT = Path(__file__).resolve().parent.parent


def test_the_stored_index_is_what_the_installed_libraries_say() -> None:
    # the oracle: torchvision's and timm's own records, read now
    assert zoo_index.stored() == zoo_index.build_index(), (
        "hookviz/models/zoo_index.json is stale: run python scripts/write_zoo_index.py"
    )


def test_names_paths_sizes_and_classes_match_torchvision() -> None:
    from torchvision import models

    assert torchvision_zoo.cnn_names() == torchvision_zoo.live_cnn_names()
    for name in ("resnet50", "vgg16", "efficientnet_b0", "vit_b_16", "convnext_tiny"):
        weights = models.get_model_weights(name).DEFAULT
        assert torchvision_zoo.torchvision_weights_path(name).name == Path(weights.url).name
        assert torchvision_zoo.download_mb(name) == pytest.approx(weights.meta["_file_size"])
    categories = models.ResNet50_Weights.IMAGENET1K_V2.meta["categories"]
    assert hookviz.imagenet_categories() == tuple(categories)


def test_the_curated_timm_models_are_located_as_timm_locates_them() -> None:
    for name in timm_zoo.CURATED:
        live = timm_zoo.pretrained_cfg(name)
        stored = timm_zoo.weights_location(name)
        for field in ("hf_hub_id", "hf_hub_filename", "url"):
            assert getattr(stored, field) == getattr(live, field, None), (name, field)
    # a name outside the index is asked of timm
    assert timm_zoo.weights_location("timm:resnet34").hf_hub_id.startswith("timm/resnet34")


@pytest.fixture
def index_at(monkeypatch):
    """Point the index at another file (its caches cleared before and after)."""

    def clear() -> None:
        zoo_index.stored.cache_clear()
        torchvision_zoo.cnn_names.cache_clear()

    def point(path: Path) -> None:
        monkeypatch.setattr(zoo_index, "INDEX_PATH", path)
        clear()

    yield point
    monkeypatch.undo()
    clear()


def test_an_index_of_other_library_versions_is_not_used(tmp_path, index_at) -> None:
    index = json.loads(zoo_index.INDEX_PATH.read_text(encoding="utf-8"))
    index["torchvision"]["version"] = "0.0.1"
    index["torchvision"]["models"] = {"resnet50": {"file": "wrong-00000000.pth", "mb": 1.0}}
    index["timm"]["version"] = "0.0.1"
    index["timm"]["models"]["timm:resnet18"]["hf_hub_id"] = "nobody/wrong"
    path = tmp_path / "zoo_index.json"
    path.write_text(json.dumps(index), encoding="utf-8")
    index_at(path)
    assert zoo_index.torchvision_part() is None and zoo_index.timm_part() is None
    assert len(torchvision_zoo.cnn_names()) > 1  # asked of torchvision
    assert torchvision_zoo.torchvision_weights_path("resnet50").name != "wrong-00000000.pth"
    assert timm_zoo.weights_location("timm:resnet18").hf_hub_id != "nobody/wrong"


@pytest.mark.slow
def test_the_model_list_and_the_bundled_model_need_neither_torchvision_nor_timm(
    tmp_path, index_at
) -> None:
    # A fresh process, as a cold server: the catalog, the class names and the default model.
    code = textwrap.dedent(
        """
        import json, sys
        import hookviz
        rows = hookviz.model_catalog()
        loaded = hookviz.load_model("efficientnet_lite0", device="cpu")
        print(json.dumps({
            "imported": sorted(m for m in ("torchvision", "timm") if m in sys.modules),
            "rows": [[r.name, r.source, r.ready, r.status] for r in rows],
            "classes": list(loaded.categories[:3]),
        }))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["imported"] == []
    # the same list as the one made by asking the libraries themselves (no index)
    index_at(tmp_path / "missing.json")
    live = [[r.name, r.source, r.ready, r.status] for r in registry.model_catalog()]
    assert zoo_index.stored() == {} and report["rows"] == live
    assert report["classes"] == ["tench", "goldfish", "great white shark"]
