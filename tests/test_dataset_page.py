"""The "Dataset run" page (AppTest, real runs written by hookviz on real files): the table and
its filters, the overlays, "Open in Explore" with the run's model, layer and class, a features
run's strongest images, and a folder that holds no run."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

import hookviz
from hookviz.app.view.target import TOP1, ViewTarget
from hookviz.dataset import run_cam, run_evaluate, run_features

from .test_app import APP, TIMEOUT, _box, _open_page
from .test_dataset_run import _assert_same_run, _folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("page_runs")
    images = _folder(root / "data", count=4)
    lite0 = hookviz.load_model("efficientnet_lite0", device="cpu")
    run_cam(lite0, [images], root / "cam", target="folder", layer="blocks.5", chunk_size=3)
    run_features(lite0, [images], root / "features", layer="blocks.5", top_k=2)
    return root


def _page(folder: Path | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    _open_page(at, "dataset")
    if folder is not None:
        at.text_input(key="run_dir").set_value(str(folder)).run()
    return at


@pytest.mark.slow
def test_a_cam_run_with_filters_and_overlays(runs):
    at = _page(runs / "cam")
    assert not at.exception and not at.error
    text = "\n".join(m.value for m in at.markdown)
    assert "cam of **efficientnet_lite0**" in text and "4 of 6 images, 2 failed" in text
    assert "6 of 6 rows" in [c.value for c in at.caption]
    assert len(at.get("image")) + len(at.get("imgs")) >= 4  # an overlay per readable row
    assert len([b for b in at.button if b.label == "Open in Explore"]) == 4
    at.selectbox(key="run_status").set_value("errors").run()
    assert "2 of 6 rows" in [c.value for c in at.caption]
    at.selectbox(key="run_status").set_value("all").run()
    at.toggle(key="run_mistakes").set_value(True).run()
    table = hookviz.open_run(runs / "cam").table
    wrong = int(((table.status == "ok") & (table.class_index != table.top1_index)).sum())
    assert f"{wrong} of 6 rows" in [c.value for c in at.caption]


@pytest.mark.slow
def test_open_in_explore_uses_the_runs_model_layer_and_class(runs):
    at = _page(runs / "cam")
    table = hookviz.open_run(runs / "cam").table
    row = int(table.index[table.status == "ok"][0])
    at.button(key=f"open_row_{row}").click().run()
    assert not at.exception and not at.error
    name = Path(table.iloc[row]["path"]).name
    assert any(name in c.value for c in at.sidebar.caption)
    assert _box(at, "Target layer").value == "blocks.5"
    assert _box(at, "Explain the class").value == ViewTarget.of_class(
        int(table.iloc[row]["class_index"])
    )
    original = next(c.value for c in at.caption if "px" in c.value and "fed" in c.value)
    assert f"{table.iloc[row]['width']}×{table.iloc[row]['height']} px" in original
    # back to the sample: the opened image is let go, and the row's class with it
    at.button(key="close_opened").click().run()
    assert not at.exception and not at.error
    assert not any(name in c.value for c in at.sidebar.caption)
    _open_page(at, "explore")
    assert _box(at, "Explain the class").value == TOP1
    top5 = next(radio for radio in at.radio if radio.key.startswith("target_top@"))
    assert top5.value == TOP1  # its Top-1 button lit
    assert "target" not in at.query_params


def test_back_to_the_sample_brings_back_the_class_chosen_before_the_row(runs):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    _box(at, "Explain the class").set_value(ViewTarget.of_class(1)).run()  # goldfish
    _open_page(at, "dataset")
    at.text_input(key="run_dir").set_value(str(runs / "cam")).run()
    table = hookviz.open_run(runs / "cam").table
    rows = [int(i) for i in table.index[table.status == "ok"]]
    at.button(key=f"open_row_{rows[0]}").click().run()
    _open_page(at, "dataset")
    at.button(key=f"open_row_{rows[1]}").click().run()  # a second row while one is open
    at.button(key="close_opened").click().run()
    assert not at.exception and not at.error
    _open_page(at, "explore")
    assert _box(at, "Explain the class").value == ViewTarget.of_class(1)


def test_a_run_made_with_relative_paths_shows_and_opens_its_images(tmp_path, monkeypatch):
    """``hookviz cam imgfolder/ --overlays jpeg --out runs/val`` in a data folder, opened by a
    server started elsewhere: the run's own overlays, each image openable in Explore; an image
    really gone is said to be so (its overlay stays, it cannot be opened); a relative run
    folder that holds no run says where it was looked for."""
    data = tmp_path / "data"
    _folder(data / "imgfolder", count=2)
    monkeypatch.chdir(data)
    lite0 = hookviz.load_model("efficientnet_lite0", device="cpu")
    run_cam(lite0, ["imgfolder"], "runs/val", overlays="jpeg", target="folder", chunk_size=2)
    monkeypatch.undo()  # the app runs from the repository, not the data folder
    at = _page(data / "runs" / "val")
    assert not at.exception and not at.error
    opens = [b for b in at.button if b.label == "Open in Explore"]
    assert len(opens) == 2, [c.value for c in at.caption]
    assert not any("not found" in c.value or "moved" in c.value for c in at.caption)
    table = hookviz.open_run(data / "runs" / "val").table
    row = int(table.index[table.status == "ok"][0])
    (data / table.iloc[row]["path"]).unlink()
    at.run()
    assert len([b for b in at.button if b.label == "Open in Explore"]) == 1
    assert any("has moved" in c.value for c in at.caption)
    at.text_input(key="run_dir").set_value("runs/val").run()
    error = at.error[0].value
    assert "relative folder is read from where the app was started" in error, error


def test_a_features_run_shows_the_strongest_images_of_a_channel(runs):
    at = _page(runs / "features")
    assert not at.exception and not at.error
    at.number_input(key="run_channel").set_value(7).run()
    expected = hookviz.open_run(runs / "features").top_examples(7)
    captions = [c.value for c in at.caption]
    table = hookviz.open_run(runs / "features").table
    for row, _value in expected:
        assert any(c.startswith(Path(table.iloc[row]["path"]).name) for c in captions)


def test_a_folder_without_a_run_says_so(tmp_path):
    at = _page(tmp_path)
    assert not at.exception
    assert at.error and "no hookviz run" in at.error[0].value


def test_the_overlays_come_in_reading_order_on_a_narrow_screen(tmp_path):
    """Columns stack on a phone: each row of four is its own set of columns, so the pictures
    stack in row order (one set of four columns stacked as 00, 04, 01, 05, ...)."""
    images = _folder(tmp_path / "data", count=6)
    lite0 = hookviz.load_model("efficientnet_lite0", device="cpu")
    run_cam(lite0, [images], tmp_path / "cam", layer="blocks.5", chunk_size=4)
    at = _page(tmp_path / "cam")
    assert not at.exception and not at.error
    table = hookviz.open_run(tmp_path / "cam").table
    in_order = [Path(path).name for path in table[table.status == "ok"]["path"]]
    names = [c.value.split(" · ")[0] for c in at.main.caption if c.value.startswith("photo")]
    assert len(in_order) == 6 and names == in_order, names


def test_a_features_run_shows_only_the_filters_that_apply_to_it(runs):
    """A features run has no classes and no confidences: only the rows' status filter."""
    at = _page(runs / "features")
    assert not at.exception and not at.error
    assert [s.key for s in at.selectbox if s.key == "run_status"] == ["run_status"]
    assert not [t for t in at.toggle if t.key == "run_mistakes"]
    assert not [m for m in at.multiselect if m.key == "run_classes"]
    assert not [s for s in at.slider if s.key == "run_confidence"]
    at.selectbox(key="run_status").set_value("errors").run()
    assert "2 of 6 rows" in [c.value for c in at.caption]
    cam = _page(runs / "cam")  # a cam run keeps them all
    assert cam.toggle(key="run_mistakes") and cam.multiselect(key="run_classes")
    assert cam.slider(key="run_confidence")


def test_a_features_runs_strongest_images_open_in_explore(runs):
    """Each of a channel's strongest images opens in Explore with the run's model and layer;
    a features run has no class: the class explained stays as it was."""
    at = _page(runs / "features")
    at.number_input(key="run_channel").set_value(7).run()
    run = hookviz.open_run(runs / "features")
    rows = [row for row, _value in run.top_examples(7)]
    opens = [b for b in at.button if b.label == "Open in Explore"]
    assert [b.key for b in opens] == [f"open_row_{row}" for row in rows]
    at.button(key=f"open_row_{rows[0]}").click().run()
    assert not at.exception and not at.error
    name = Path(run.table.iloc[rows[0]]["path"]).name
    assert any(name in c.value for c in at.sidebar.caption)
    assert _box(at, "Target layer").value == "blocks.5"
    assert _box(at, "Explain the class").value == TOP1


@pytest.mark.slow
def test_an_interrupted_run_shows_the_command_that_continues_it(tmp_path, monkeypatch):
    """A run made from its data folder with relative inputs, interrupted before its last chunk:
    the page shows a command; given as shown, it continues the run to the same outputs as the
    run that was not interrupted."""
    data = tmp_path / "data"
    _folder(data / "imgfolder", count=8)  # 10 inputs: named by their folder in the command
    monkeypatch.chdir(data)
    lite0 = hookviz.load_model("efficientnet_lite0", device="cpu")
    run_cam(lite0, ["imgfolder"], "runs/val", target="folder", layer="blocks.5", chunk_size=4)
    monkeypatch.undo()
    whole, run = tmp_path / "whole", data / "runs" / "val"
    shutil.copytree(run, whole)
    for part in ("table.csv", "cams/00002.npz", "table/00002.csv"):
        (run / part).unlink()
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps(manifest | {"status": "running"}))
    at = _page(run)
    assert not at.exception and not at.error
    text = "\n".join(m.value for m in at.markdown)
    assert "Run the same command again to continue: finished chunks are kept." in text
    (shown,) = at.code
    lines = shown.value.splitlines()
    assert lines[0] == f"cd {shlex.quote(str(data))}"  # relative inputs: from where they start
    words = shlex.split(lines[1])
    assert words[:3] == ["hookviz", "cam", "imgfolder"]
    resumed = subprocess.run(
        [sys.executable, "-m", *words, "--quiet"],
        cwd=shlex.split(lines[0])[1],
        env={**os.environ, "HOOKVIZ_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "2 chunks were already done" in resumed.stdout
    _assert_same_run(whole, run)
    at.run()
    assert not at.code  # complete: nothing to continue


@pytest.mark.slow
def test_an_evaluate_run_shows_its_summary_and_rows(tmp_path):
    """A ``hookviz evaluate`` run: the summary per method, then a row per image and method;
    no overlays (an evaluate run keeps no maps)."""
    images = _folder(tmp_path / "data", count=2)
    resnet = hookviz.load_model("resnet18", pretrained=False, device="cpu")
    run_evaluate(resnet, [images], tmp_path / "evaluate", methods=("gradcam", "edges"),
                 metrics=("deletion",), weights="untrained")  # fmt: skip
    at = _page(tmp_path / "evaluate")
    assert not at.exception and not at.error, [e.value for e in at.error]
    text = "\n".join(m.value for m in at.markdown)
    assert "evaluate of **resnet18**" in text and "gradcam, edges" in text
    summary, rows = at.dataframe[0].value, at.dataframe[1].value
    assert list(summary["method"]) == ["gradcam", "edges"]
    assert len(rows) == len(hookviz.open_run(tmp_path / "evaluate").table)
    assert not at.get("image") and not [b for b in at.button if b.label == "Open in Explore"]


def test_one_press_of_back_to_the_sample_after_open_in_explore(runs):
    """Open in Explore, then "Back to the sample photo" once: the sample (not the run's image,
    which the address named after the first press and explained at its top-1), the class back
    to the top-1, and an address that names neither the run nor its image."""
    at = _page(runs / "cam")
    table = hookviz.open_run(runs / "cam").table
    row = int(table.index[table.status == "ok"][0])
    at.button(key=f"open_row_{row}").click().run()
    _open_page(at, "explore")  # (AppTest's next run is of the page it last asked for)
    assert at.query_params.get("run_dir") and at.query_params.get("image")
    at.button(key="close_opened").click().run()
    assert not at.exception and not at.error
    name = Path(table.iloc[row]["path"]).name
    assert not any(name in c.value for c in at.sidebar.caption), [c.value for c in at.caption]
    assert not [b for b in at.button if b.key in ("close_opened", "close_linked")]
    with Image.open(hookviz.sample_image_path()) as sample:
        size = f"{sample.width}×{sample.height} px"
    original = next(c.value for c in at.caption if "px" in c.value and "fed" in c.value)
    assert size in original, original
    assert _box(at, "Explain the class").value == TOP1
    for name in ("image", "run_dir", "target"):
        assert name not in at.query_params, dict(at.query_params)


def test_the_explained_class_is_named_in_the_summary_and_under_each_overlay(runs, tmp_path):
    """Which class a cam run explains, by its name: in the run's summary (a fixed class: its
    index and name; "folder": each image's folder) and under each overlay."""
    at = _page(runs / "cam")
    text = "\n".join(m.value for m in at.markdown)
    assert "explains each image's folder class" in text, text
    table = hookviz.open_run(runs / "cam").table
    ok = table[table.status == "ok"]
    captions = [c.value for c in at.main.caption if c.value.startswith("photo")]
    assert len(captions) == len(ok)
    for caption, name in zip(captions, ok["class_name"], strict=True):
        assert f" · explains {name} · " in caption, caption
    lite0 = hookviz.load_model("efficientnet_lite0", device="cpu")
    run_cam(lite0, [runs / "data"], tmp_path / "fixed", target="652", layer="blocks.5")
    at = _page(tmp_path / "fixed")
    text = "\n".join(m.value for m in at.markdown)
    assert f"explains class 652 ({lite0.class_name(652)})" in text, text


@pytest.mark.slow
def test_a_circuit_shows_its_channels_links_and_examples_and_opens_a_channel(tmp_path):
    """A ``hookviz circuit`` folder: the class and layers, the links chart and table (with the
    CSV), a channel's share, links and example images, and its button to the Channel page with
    the circuit's model and layer; an unfinished circuit says how to finish it."""
    from hookviz.dataset import run_circuit

    images = _folder(tmp_path / "data", count=4)
    lite0 = hookviz.load_model("efficientnet_lite0", device="cpu")
    out = tmp_path / "circuit"
    run_circuit(lite0, [images], out, target="suit", layers=("blocks.5", "blocks.4"), top=3)
    found = hookviz.open_circuit(out)
    at = _page(out)
    assert not at.exception and not at.error
    text = "\n".join(m.value for m in at.markdown)
    assert "circuit of **efficientnet_lite0**" in text and "(**suit**)" in text
    assert "`blocks.4` → `blocks.5`" in text and "4 images" in text
    (chart,) = at.get("vega_lite_chart")
    spec = json.dumps(json.loads(chart.proto.spec))
    rows = [str(c) for c in found.upper_channels]
    assert json.dumps(rows) in spec  # the chart's rows: the upper channels, most relevant first
    assert len(at.dataframe) == 1 and len(at.dataframe[0].value) == 50
    assert any("Download all" in b.proto.label for b in at.get("download_button"))
    # the first channel: the most relevant upper one, with its share and its strongest input
    upper = found.upper_channels[0]
    whole = float(found.upper_relevance.sum())
    caption = next(c.value for c in at.caption if "of the class's relevance" in c.value)
    assert f"{float(found.upper_relevance[upper]) / whole:.0%}" in caption
    strongest = int(found.links[0].argmax())
    assert f"draws most on blocks.4 {strongest}" in caption
    shown = [image.caption for group in at.get("image") for image in group.proto.imgs]
    for row, _ in found.examples("blocks.5", upper, 4):
        assert any(c.startswith(Path(found.sources[row]).name) for c in shown)
    # a lower channel, then its own page
    lower = found.top_lower(1)[0][0]
    at.selectbox(key="circuit_channel").set_value(("blocks.4", lower)).run()
    assert not at.exception and not at.error
    assert any("It feeds most blocks.5" in c.value for c in at.caption)
    at.button(key=f"circuit_open@blocks.4@{lower}").click().run()
    assert not at.exception and not at.error
    assert at.query_params.get("vis_channel") == str(lower)
    assert _box(at, "Target layer").value == "blocks.4"
    # the Channel page shows the circuit's examples of that channel
    text = "\n".join(m.value for m in at.markdown)
    assert "Images of the circuit where it carries the most of suit" in text
    shown = [image.caption for group in at.get("image") for image in group.proto.imgs]
    for row, _ in found.examples("blocks.4", lower, 3):
        assert any(c.startswith(Path(found.sources[row]).name) for c in shown)
    # unfinished: the links run gone
    shutil.rmtree(out / "links")
    at = _page(out)
    assert not at.exception
    assert any("not complete" in i.value for i in at.info)


@pytest.mark.slow
def test_a_run_by_relevance_says_its_examples_are_ranked_by_relevance(tmp_path):
    images = _folder(tmp_path / "data", count=3)
    lite0 = hookviz.load_model("efficientnet_lite0", device="cpu")
    out = tmp_path / "relevance"
    run_features(lite0, [images], out, layer="blocks.5", top_k=2, by="relevance", target="suit")
    at = _page(out)
    assert not at.exception and not at.error
    text = "\n".join(m.value for m in at.markdown)
    assert "by relevance of suit (epsilon_plus_flat)" in text
    assert "where channel 0 carries the most of class suit's relevance" in text
    assert "excite" not in text


@pytest.mark.slow
def test_a_concepts_folder_shows_each_concept_its_names_and_regions(tmp_path):
    from hookviz.dataset import run_concepts

    images = _folder(tmp_path / "data", count=4)
    lite0 = hookviz.load_model("efficientnet_lite0", device="cpu")
    out = tmp_path / "concepts"
    run_concepts(lite0, [images], out, layer="bn2", k=3, regions=2)
    found = hookviz.open_concepts(out)
    at = _page(out)
    assert not at.exception and not at.error
    text = "\n".join(m.value for m in at.markdown)
    assert "concepts of **efficientnet_lite0**" in text and "3 concepts over 4 images" in text
    for concept in range(3):
        name, probability = found.labels[concept][0], found.label_probabilities[concept][0]
        assert f"**Concept {concept + 1}** · {found.shares[concept]:.0%} · {name} " in text
        assert f"{name} {probability:.0%}" in text
    shown = [image.caption for group in at.get("image") for image in group.proto.imgs]
    assert len(shown) == 3 * 2
    first = found.regions[0][0]
    assert shown[0] == f"{Path(first.path).name} · {first.peak:.3g}"
    # before its concepts are written: how to finish it
    (out / "concepts.json").unlink()
    at = _page(out)
    assert not at.exception
    assert any("give the same command again" in i.value for i in at.info)
