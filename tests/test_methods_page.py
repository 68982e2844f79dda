"""The "Methods side by side" page, driven headless with AppTest (the real app script, the
bundled Lite0 and a random-weight ResNet, no mocks): every fast method drawn with its time and
scores, the baselines among them, a table with the best per metric starred, the slow methods
only when asked, the sanity check on request, and a plain word for a detector."""

from __future__ import annotations

import json
import re

import pytest
import torch
import torchvision
from safetensors.torch import save_file
from streamlit.testing.v1 import AppTest

import hookviz
from hookviz.app.method_texts import METHOD_LABELS, method_label
from hookviz.app.pages import methods

from .test_app import APP, TIMEOUT, _open_page


def _page(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    return _open_page(at, "methods")


def _clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _captions(at: AppTest) -> list[str]:
    return [c.value for c in at.caption]


@pytest.fixture
def small_card(tmp_path, monkeypatch) -> str:
    """A model card of a 10-class ResNet-18 (random weights) fed at 96 pixels: the page's
    machinery at a fifth of the work of 224 (ROAD's sparse solves, one per percentile, grow
    faster than the pixels)."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(tmp_path / "small.safetensors"))  # fmt: skip
    card = {
        "architecture": "resnet18",
        "class_names": [f"thing {i}" for i in range(10)],
        "title": "A small ResNet-18",
        "preprocessing": {"size": 96},
    }
    (tmp_path / "small.json").write_text(json.dumps(card))
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(tmp_path))
    return "card:small"


@pytest.mark.slow
def test_every_fast_method_is_drawn_then_scored_and_ranked_on_request(small_card) -> None:
    at = _page(model=small_card, layer="layer4")
    _clean(at)
    fast = [m for group in methods.groups().values() for m in group]
    assert {"gradcam", "saliency", "guided_backprop", "edges", "random"} <= set(fast)
    pictures = {c.split(" · ")[0] for c in _captions(at) if c.endswith(" ms")}
    # LeGrad reads a ViT's attention: on a CNN its place says why, and the rest are drawn
    labels = {method_label(m) for m in fast}
    assert pictures == labels - {"LeGrad"}, labels ^ pictures
    captions = _captions(at)
    note = next(i for i, c in enumerate(captions) if c.startswith("LeGrad:"))
    assert "vision transformer" in captions[note]
    # under its group's pictures, not at the top of the page (the working indicator's place)
    assert note > next(i for i, c in enumerate(captions) if c.endswith(" ms"))
    table = at.dataframe[0].value
    assert list(table["method"]) == [method_label(m) for m in fast if m != "legrad"]
    assert methods.METRICS["deletion"][0] not in table  # scored when asked
    # (about 25 methods scored, then ROAD for each)
    next(b for b in at.button if b.label == "Score every method").click().run(timeout=600)
    _clean(at)
    table = at.dataframe[0].value
    quick = {m: methods.METRICS[m] for m in methods.METRICS if m not in methods.ROAD_METRICS}
    for title, higher in quick.values():
        column = table[title]
        assert column.notna().all() and column.between(0, 1).all()
        best = column.max() if higher else column.min()
        assert all(title in text for text in table.loc[column == best, "best at"]), table
        assert not any(title in text for text in table.loc[column != best, "best at"])
    assert not {methods.METRICS[m][0] for m in methods.ROAD_METRICS} & set(table.columns)
    # ROAD's estimate, before its button (one imputation timed on this input)
    road = next(c for c in _captions(at) if "have no ROAD scores yet" in c)
    assert road.startswith(f"{len(table)} of {len(table)} methods ") and ": about " in road
    assert road.endswith(" in all here."), road
    next(b for b in at.button if b.label == "Add ROAD (slower)").click().run(timeout=600)
    _clean(at)
    table = at.dataframe[0].value
    for metric in methods.ROAD_METRICS:
        assert table[methods.METRICS[metric][0]].between(-1, 1).all()
    # the slow ones wait for the user; the scores are kept when the page is opened again
    assert not {method_label(m) for m in methods.slow_methods()} & set(table["method"])
    assert any(b.label == "Compute the slow methods" for b in at.button)
    again = _open_page(at, "explore")
    again = _open_page(again, "methods")
    assert at.dataframe[0].value[methods.METRICS["insertion"][0]].notna().all()
    assert not any(b.label == "Score every method" for b in again.button)


def test_the_costs_are_honest_and_the_methods_named_as_in_the_sidebar(small_card) -> None:
    """The CAM methods' shared forward pass is said apart from each method's own time; every
    job on request says about how long it takes before it starts; methods go by their labels."""
    # (layer3: nothing of it is kept from another test, whose scores would leave none to do)
    at = _page(model=small_card, layer="layer3")
    _clean(at)
    captions = _captions(at)
    shared = next(c for c in captions if c.startswith("Shared forward pass at `layer3`: "))
    assert "paid once for every CAM method" in shared
    table = at.dataframe[0].value
    assert "ms" not in table and "own ms" in table
    cams = table["method"].isin([method_label(m) for m in hookviz.METHODS])
    assert cams.any() and (~cams).any()
    assert table.loc[cams, "shared forward pass ms"].notna().all()
    assert table.loc[~cams, "shared forward pass ms"].isna().all()
    assert "Grad-CAM element-wise" in set(table["method"])
    assert not {"gradcamelementwise", "guided_backprop"} & set(table["method"])
    # the estimates, each before its button
    slow = next(c for c in captions if "computed when you ask" in c)
    assert METHOD_LABELS["scorecam"] in slow and "About " in slow and " in all here (" in slow
    unscored = next(c for c in captions if "are not scored yet" in c)
    assert ": about " in unscored and unscored.endswith(" in all here.")
    assert any(c.endswith(" in all here.") and "to check" in c for c in captions)
    chooser = next(m for m in at.multiselect if m.label == "Methods to check")
    assert chooser.format_func("gradcamelementwise") == "Grad-CAM element-wise"


@pytest.mark.slow
def test_the_sanity_check_runs_on_request_and_flags_the_edge_map() -> None:
    at = _page()  # the bundled, trained Lite0
    _clean(at)
    chooser = next(m for m in at.multiselect if m.label == "Methods to check")
    chooser.set_value(["gradcam", "edges"]).run()
    assert not [m for m in at.markdown if "survives" in m.value]
    # what it will cost, before it starts
    assert any(
        c.startswith("2 methods to check") and c.endswith(" in all here.") for c in _captions(at)
    ), _captions(at)
    next(b for b in at.button if b.label == "Run the sanity check").click().run()
    _clean(at)
    verdicts = [m.value for m in at.markdown if m.value.startswith("*Grad-CAM*") or
                m.value.startswith("*Edge map*")]  # fmt: skip
    assert verdicts == [
        "*Grad-CAM*: changes with the weights",
        "*Edge map*: ⚠ survives the randomisation: it does not depend on the model",
    ]
    assert any(c.startswith("Checked in ") for c in _captions(at))
    assert sum(" · ρ " in c for c in _captions(at)) == 2 * 6


def test_a_group_over_the_threshold_says_its_estimate_and_then_its_real_time(
    small_card, monkeypatch
) -> None:
    """A group estimated over ``ASK_OVER_SECONDS`` (Grad-CAM's family on a large model or
    photo) runs with progress and Cancel and says both its estimate and its real time; here
    every group is over a threshold of zero."""
    monkeypatch.setattr(methods, "ASK_OVER_SECONDS", 0.0)
    at = _page(model=small_card, layer="layer1")
    _clean(at)
    said = [c for c in _captions(at) if " methods computed in " in c]
    # (the baselines run no pass of the network: estimated at nothing, they never wait)
    sizes = [len(names) for group, names in methods.groups().items() if group != "Baselines"]
    assert [int(c.split()[0]) for c in said] == sizes, said
    for caption in said:
        assert re.fullmatch(r"\d+ methods computed in [\w .]+ here \(estimated about [\w .]+\)\.",
                            caption), caption  # fmt: skip
    # the pictures are kept: the page shown again computes (and says) nothing
    again = _open_page(_open_page(at, "explore"), "methods")
    assert not [c for c in _captions(again) if " methods computed in " in c]
    assert {c.split(" · ")[0] for c in _captions(again) if c.endswith(" ms")} >= {"Grad-CAM"}


@pytest.mark.slow
def test_a_detector_is_told_the_page_explains_classes() -> None:
    at = _page(model="fasterrcnn_mobilenet_v3_large_320_fpn", weights="untrained")
    _clean(at)
    assert any("Methods side by side explains a classifier's classes" in i.value for i in at.info)
    assert not at.dataframe


def test_the_groups_follow_the_library() -> None:
    listed = [m for group in methods.groups().values() for m in group]
    every = set(hookviz.METHODS) | set(hookviz.attribution_methods())
    assert set(listed) | set(methods.slow_methods()) == every
    assert len(listed) == len(set(listed))
