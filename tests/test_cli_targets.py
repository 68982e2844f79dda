"""``hookviz cam`` beyond classifiers: a detector's run has a row per box, a segmenter's a row
per category present, an embedder's its similarity to a reference; each row as the library
gives it for that image alone (``hookviz.detect``, ``segment``, ``embed``, ``grad_cam``), read
back with ``open_run``, resumed like a classifier's run. Real models: torchvision's detector
with random weights, ResNet-18 without its head, and a tiny segmenter whose weights are set by
hand so that every image has several categories (random segmenters paint the whole image one
category); real files on disk, one of them not an image."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import hookviz
from hookviz.core.tasks import detections
from hookviz.dataset import RunError, run_cam
from hookviz.targets import Box, Region, Similarity

from .test_dataset_run import _assert_same_run, _cli

DETECTOR = "fasterrcnn_mobilenet_v3_large_320_fpn"


@pytest.fixture(scope="module")
def detector() -> hookviz.LoadedModel:
    """Untrained: every score is near chance (about 0.011), and it keeps all its 100 boxes."""
    return hookviz.load_model(DETECTOR, pretrained=False, device="cpu")


@pytest.fixture(scope="module")
def embedder() -> hookviz.LoadedModel:
    return hookviz.load_model("resnet18", pretrained=False, device="cpu", task="embedding")


class _Colours(nn.Module):
    """Per-pixel scores of four categories: background (a constant 0.5) and red, green and
    blue (4 times that channel, normalised): a pixel is the colour that dominates it, or
    background where none is bright. ``features`` (the channels themselves) is the layer."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Conv2d(3, 3, 1)
        self.head = nn.Conv2d(3, 4, 1)
        with torch.no_grad():
            self.features.weight.copy_(torch.eye(3)[:, :, None, None])
            self.features.bias.zero_()
            colours = torch.cat([torch.zeros(1, 3), 4.0 * torch.eye(3)])  # background: none
            self.head.weight.copy_(colours[:, :, None, None])
            self.head.bias.copy_(torch.tensor([0.5, 0.0, 0.0, 0.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


@pytest.fixture(scope="module")
def segmenter() -> hookviz.LoadedModel:
    # fed at a short side of 64 (not 224): the same geometry, a tenth of the arithmetic
    small = hookviz.Preprocessing(size=64, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    return hookviz.wrap_model(
        _Colours(),
        name="colours",
        categories=["background", "red", "green", "blue"],
        preprocessing=small,
        device="cpu",
        task="segmentation",
    )


def _stripes(width: int, height: int, across: bool) -> Image.Image:
    """Red, green and blue stripes (a black one too where ``across``), of unequal widths."""
    pixels = np.zeros((height, width, 3), np.uint8)
    colours = [(230, 20, 20), (20, 230, 20), (20, 20, 230), (0, 0, 0)]
    bounds = np.linspace(0, width if across else height, 5).astype(int)
    bounds[1] -= (bounds[1] - bounds[0]) // 3  # red narrower than green: distinct shares
    for colour, start, end in zip(colours, bounds[:-1], bounds[1:], strict=True):
        if across:
            pixels[:, start:end] = colour
        else:
            pixels[start:end, :] = colour
    return Image.fromarray(pixels)


def _not_an_image(folder: Path) -> Path:
    path = folder / "zz_notes.png"
    path.write_bytes(b"a text file with an image's name")
    return path


def _assert_failed_row(run, table, name: str) -> None:
    """The unreadable file's one row: status error, the reason, no CAM."""
    failed = table[table["status"] == "error"]
    assert [Path(p).name for p in failed["path"]] == [name]
    assert failed["error"].iloc[0], "the reason is recorded"
    with pytest.raises(ValueError, match="failed"):
        run.heatmap(int(failed.index[0]))


@pytest.mark.slow
def test_a_detector_run_has_a_row_per_box_as_detect_finds_it_and_its_box_cam(tmp_path, detector):
    """A photo wider than the detector's largest input (its boxes come back to the photo's
    pixels); --min-score 0 keeps all 100 boxes of the untrained detector, --max-boxes 2 the two
    most confident. Each row's box, label, name and score are hookviz.detect's, and its heatmap
    is hookviz.grad_cam's for Box(row's box, label)."""
    data = tmp_path / "data"
    data.mkdir()
    hookviz.sample_image().resize((900, 300)).save(data / "a_wide.png")
    _not_an_image(data)
    summary = run_cam(
        detector, [data], tmp_path / "out", weights="untrained", min_score=0.0, max_boxes=2
    )
    run = hookviz.open_run(tmp_path / "out")
    table = run.table
    assert run.task == "detection" and run.complete
    assert (summary.rows, summary.ok, summary.table_rows) == (2, 1, 3)
    assert run.manifest["counts"] == {"rows": 2, "ok": 1, "error": 1, "table_rows": 3}
    assert list(table["image"]) == [0, 0, 1]
    _assert_failed_row(run, table, "zz_notes.png")
    image = hookviz.load_image(data / "a_wide.png")
    # One forward pass of the photo for both: hookviz.detect's detections (what it reads from
    # its own forward pass) and hookviz.grad_cam's CAMs (its forward pass, kept).
    kept = hookviz.ForwardPass(detector, image)
    expected = detections(kept.context, min_score=0.0)
    assert len(expected) == 100  # so --max-boxes did the cutting
    # (and at the default --min-score, 0.5, nothing: see the next test)
    assert max(found.score for found in expected) < 0.5
    for (row, record), found in zip(table.iloc[:2].iterrows(), expected[:2], strict=True):
        box = (record["x0"], record["y0"], record["x1"], record["y1"])
        assert box == found.box  # in the photo's own pixels, written exactly
        assert (record["label"], record["name"]) == (found.label, found.name)
        assert record["score"] == pytest.approx(found.score, rel=1e-5)
        assert record["status"] == "ok" and (record["width"], record["height"]) == image.size
        cam = kept.grad_cam(Box(box, int(record["label"])))
        heat = run.heatmap(row)
        assert heat.shape == (image.height, image.width)
        np.testing.assert_allclose(heat, cam.heatmap, atol=1e-6)
    command = run.resume_command()
    assert "--min-score 0 --max-boxes 2" in command and "--target" not in command


def test_an_image_with_no_box_above_min_score_has_one_empty_row(tmp_path, detector):
    """The untrained detector's scores are near chance: nothing reaches the default 0.5. The
    image still has its row (status "empty", no CAM), so the run is complete without it."""
    picture = tmp_path / "small.png"
    hookviz.sample_image().resize((96, 64)).save(picture)
    summary = run_cam(detector, [picture], tmp_path / "out", weights="untrained")
    run = hookviz.open_run(tmp_path / "out")
    record = run.table.iloc[0]
    assert len(run.table) == 1 and record["status"] == "empty" and not record["error"]
    assert (summary.ok, summary.errors, summary.table_rows) == (1, [], 1)
    assert run.manifest["job"]["min_score"] == 0.5 and run.manifest["job"]["max_boxes"] == 20
    with pytest.raises(ValueError, match=r"no box scored at least 0\.5"):
        run.heatmap(0)


def test_a_segmenter_run_has_a_row_per_category_as_segment_gives_it_and_resumes(
    tmp_path, segmenter
):
    """Photos of colour stripes: four categories each, their shares as hookviz.segment gives
    them, each row's heatmap hookviz.grad_cam's for Region(category). Interrupted after its
    first chunk (two images, eight rows), the partial run reads back; continued, nothing done
    is redone, and it ends with the very files of an uninterrupted run."""
    data = tmp_path / "data"
    data.mkdir()
    _stripes(90, 60, across=True).save(data / "a.png")
    _stripes(200, 410, across=False).save(data / "b.png")
    _stripes(300, 120, across=False).save(data / "c.png")
    _not_an_image(data)
    options = {"layer": "features", "chunk_size": 2}
    run_cam(segmenter, [data], tmp_path / "whole", **options)

    calls: list[tuple[int, int]] = []

    def stop_in_the_second_chunk(done: int, total: int) -> None:
        calls.append((done, total))
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_cam(segmenter, [data], tmp_path / "cut", progress=stop_in_the_second_chunk, **options)
    first = tmp_path / "cut" / "cams" / "00000.npz"
    assert sorted(p.name for p in first.parent.glob("*.npz")) == ["00000.npz"]
    partial = hookviz.open_run(tmp_path / "cut")
    assert not partial.complete and list(partial.table["image"]) == [0] * 4 + [1] * 4
    np.testing.assert_array_equal(
        partial.heatmap(6), hookviz.open_run(tmp_path / "whole").heatmap(6)
    )
    written = first.stat().st_mtime_ns
    calls.clear()
    summary = run_cam(
        segmenter, [data], tmp_path / "cut", progress=lambda *call: calls.append(call), **options
    )
    assert summary.chunks_done_before == 1 and first.stat().st_mtime_ns == written
    assert calls == [(3, 4), (4, 4)]  # only the last two images went through the model
    _assert_same_run(tmp_path / "whole", tmp_path / "cut")

    run = hookviz.open_run(tmp_path / "whole")
    table = run.table
    _assert_failed_row(run, table, "zz_notes.png")
    for name in ("a.png", "b.png", "c.png"):
        image = hookviz.load_image(data / name)
        rows = table[table["path"] == str(data / name)]
        expected = hookviz.segment(segmenter, image).categories
        assert len(expected) == 4
        assert list(rows["category"]) == [present.index for present in expected]
        assert list(rows["name"]) == [present.name for present in expected]
        assert np.allclose(rows["share"], [present.share for present in expected], rtol=1e-5)
        for row, record in rows.iterrows():
            cam = hookviz.grad_cam(
                segmenter, image, layer="features", target=Region(int(record["category"]))
            )
            assert record["probability"] == pytest.approx(cam.probability, rel=1e-5)
            np.testing.assert_allclose(run.heatmap(row), cam.heatmap, atol=1e-5)


def test_an_embedder_run_has_each_similarity_to_the_reference_and_its_cam(tmp_path, embedder):
    """--task embedding --reference: each row's similarity is the cosine of hookviz.embed's
    vectors, its heatmap hookviz.grad_cam's for Similarity(reference). The reference is part
    of the run: another file there is another run."""
    data = tmp_path / "data"
    data.mkdir()
    sample = hookviz.sample_image()
    sample.resize((150, 100)).save(data / "a.png")
    sample.rotate(40).resize((80, 170)).save(data / "b.png")
    _not_an_image(data)
    reference = tmp_path / "reference.png"
    sample.crop((100, 50, 400, 350)).save(reference)
    summary = run_cam(embedder, [data], tmp_path / "out", reference=reference)
    run = hookviz.open_run(tmp_path / "out")
    table = run.table
    assert run.task == "embedding" and summary.table_rows == 3 == len(table)
    _assert_failed_row(run, table, "zz_notes.png")
    wanted = hookviz.embed(embedder, hookviz.load_image(reference))
    reference_target = Similarity(wanted)  # (a vector: the reference is embedded once)
    for row, record in table[table["status"] == "ok"].iterrows():
        image = hookviz.load_image(record["path"])
        cosine = torch.nn.functional.cosine_similarity(
            hookviz.embed(embedder, image), wanted, dim=0
        )
        assert record["similarity"] == pytest.approx(float(cosine), abs=1e-5)
        cam = hookviz.grad_cam(embedder, image, target=reference_target)
        assert cam.score == pytest.approx(float(cosine), abs=1e-5)
        np.testing.assert_allclose(run.heatmap(row), cam.heatmap, atol=1e-5)
    assert f"--task embedding --reference {reference.resolve()}" in run.resume_command()
    sample.crop((0, 0, 200, 200)).save(reference)  # the same path, another picture
    with pytest.raises(RunError, match="another run"):
        run_cam(embedder, [data], tmp_path / "out", reference=reference)


def test_overlays_of_a_detector_and_a_segmenter_run_are_a_picture_per_row_marked(
    tmp_path, detector, segmenter
):
    """--overlays for the other tasks: one picture per row with a CAM, found by
    ``Run.overlay_path``: the row's heatmap over the image, its box drawn in its label's colour
    (a detector) or its category's pixels outlined in the category's colour (a segmenter).
    Rows without a CAM (an unreadable file) have none."""
    data = tmp_path / "data"
    data.mkdir()
    _stripes(300, 120, across=True).save(data / "a.png")
    _stripes(80, 200, across=False).save(data / "b.png")
    _not_an_image(data)
    run_cam(segmenter, [data], tmp_path / "regions", layer="features", overlays="png")
    run = hookviz.open_run(tmp_path / "regions")
    table = run.table
    for row, record in table.iterrows():
        path = run.overlay_path(row)
        if record["status"] != "ok":
            assert path is None
            continue
        picture = np.asarray(Image.open(path).convert("RGB"))
        assert picture.shape == (record["height"], record["width"], 3)
        original = np.asarray(Image.open(record["path"]).convert("RGB"))
        mask = hookviz.segment(segmenter, Image.open(record["path"])).mask
        inside = mask == int(record["category"])
        colour = hookviz.marks.colour(int(record["category"]))
        outlined = np.all(picture == colour, axis=2)
        # the outline lies on the category's pixels, round all of them
        assert outlined.any() and inside[outlined].all()
        assert outlined.sum() < inside.sum()
        # the heatmap is blended over the rest: the picture is not the bare image
        assert np.abs(picture[~outlined].astype(int) - original[~outlined]).mean() > 5
    names = sorted(p.name for p in (tmp_path / "regions" / "overlays").iterdir())
    assert names == [f"{image:07d}-{part:03d}.png" for image in (0, 1) for part in range(4)]

    run_cam(
        detector,
        [data / "a.png"],
        tmp_path / "boxes",
        weights="untrained",
        min_score=0.0,
        max_boxes=2,
        overlays="png",
    )
    run = hookviz.open_run(tmp_path / "boxes")
    paths = [run.overlay_path(row) for row in range(len(run.table))]
    assert len(paths) == 2 and all(paths) and paths[0] != paths[1]
    for path, (_, record) in zip(paths, run.table.iterrows(), strict=True):
        picture = np.asarray(Image.open(path).convert("RGB"))
        colour = hookviz.marks.colour(int(record["label"]))
        marked = np.all(picture == colour, axis=2)
        # the box's outline where the table says it is: its bottom edge and its left side
        x0, y0, x1, y1 = (float(record[k]) for k in ("x0", "y0", "x1", "y1"))
        across, down = slice(round(x0) + 2, round(x1) - 2), slice(round(y0) + 2, round(y1) - 2)
        assert any(marked[y, across].all() for y in range(round(y1) - 2, round(y1) + 3))
        assert any(marked[down, x].all() for x in range(round(x0) - 2, round(x0) + 3))


def test_options_of_another_task_are_refused_before_anything_is_written(
    tmp_path, detector, embedder, resnet18
):
    picture = tmp_path / "a.png"
    hookviz.sample_image().resize((64, 48)).save(picture)
    out = tmp_path / "out"
    refusals = [
        (detector, {"target": "3"}, "--target 3: a classifier's option"),
        (detector, {"target": "folder"}, "each box the detector finds"),
        (detector, {"size_step": 32}, "--size-step 32: a classifier's option"),
        (detector, {"crop": "center"}, "--crop center"),
        (detector, {"reference": picture}, "--reference is for an embedding run"),
        (embedder, {}, "needs --reference IMAGE"),
        (embedder, {"bf16": True, "reference": picture}, "--bf16"),
        (embedder, {"max_boxes": 3, "reference": picture}, "pick a detector's boxes"),
        (resnet18, {"min_score": 0.3}, "'resnet18' is a classification model"),
        (resnet18, {"reference": picture}, "--reference is for an embedding run"),
    ]
    for loaded, options, message in refusals:
        with pytest.raises(RunError, match=message.replace("(", r"\(")):
            run_cam(loaded, [picture], out, **options)
        assert not out.exists()
    with pytest.raises(RunError, match="cannot read the reference image"):
        run_cam(embedder, [picture], out, reference=tmp_path / "missing.png")


def test_the_cam_help_says_what_rows_each_task_writes():
    from hookviz.cli import _parser

    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = commands.choices["cam"].format_help()
    for words in (
        "a classifier  one row per image",
        "a detector    one row per box scored at least --min-score",
        "a segmenter   one row per category present",
        "an embedder   (--task embedding",
        "--min-score",
        "--max-boxes",
        "--reference",
        "CLIP          (--model clip:ARCH --labels",
        "--labels LABELS",
    ):
        assert words in text, words
    from hookviz.dataset import run

    # the defaults the help states are the ones a run applies when the options are left out
    flat = " ".join(text.split())
    assert f"(default {run.MIN_SCORE})" in flat and f"(default {run.MAX_BOXES})" in flat


@pytest.mark.slow
def test_the_command_line_runs_a_segmenter_and_refuses_in_one_line(tmp_path):
    """Real processes: an untrained torchvision segmenter over a folder (its rows as
    hookviz.segment gives them), the layers of a detector, and three refusals, each one line
    on stderr with status 2."""
    data = tmp_path / "data"
    data.mkdir()
    sample = hookviz.sample_image()
    sample.resize((120, 80)).save(data / "a.png")
    _not_an_image(data)
    out = tmp_path / "out"
    model = "lraspp_mobilenet_v3_large"
    done = _cli("cam", str(data), "--model", model, "--weights", "untrained", "--out", str(out))
    assert done.returncode == 0, done.stderr
    run = hookviz.open_run(out)
    rows = f"{len(run.table)} rows (one per category present)"
    assert f"2 images, 1 done, 1 failed, {rows}" in done.stdout, done.stdout
    loaded = hookviz.load_model(model, pretrained=False, device="cpu")
    expected = hookviz.segment(loaded, hookviz.load_image(data / "a.png")).categories
    rows = run.table[run.table["status"] == "ok"]
    assert list(rows["category"]) == [present.index for present in expected]
    assert np.allclose(rows["share"], [present.share for present in expected], rtol=1e-5)

    layers = _cli("layers", "--model", DETECTOR)
    assert layers.returncode == 0, layers.stderr
    names = [line.split()[0] for line in layers.stdout.splitlines()]
    assert "backbone.body.16" in names and layers.stdout.count("(default)") == 1

    common = ("--weights", "untrained", "--out", str(tmp_path / "refused"))
    for arguments, message in (
        (("--model", "resnet18", "--task", "embedding"), "--task embedding needs --reference"),
        (("--model", DETECTOR, "--target", "suit"), "--target suit: a classifier's option"),
        (("--model", "resnet18", "--min-score", "0.2"), "pick a detector's boxes"),
    ):
        refused = _cli("cam", str(data), *arguments, *common)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.count("\n") == 1 and message in refused.stderr, refused.stderr
        assert not (tmp_path / "refused").exists()


def test_a_clip_run_over_the_labels_given(tmp_path, capsys) -> None:
    open_clip = pytest.importorskip("open_clip")
    import json

    from hookviz.cli import main

    config = {
        "embed_dim": 32,
        "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "patch_size": 16},
        "text_cfg": {
            "context_length": 77,
            "vocab_size": 49408,
            "width": 32,
            "heads": 2,
            "layers": 2,
        },
    }
    (tmp_path / "hookviz-cli-ViT.json").write_text(json.dumps(config))
    open_clip.add_model_config(tmp_path)
    folder = tmp_path / "photos"
    folder.mkdir()
    for seed in range(3):
        pixels = np.random.default_rng(seed).integers(0, 256, (80, 100 + 20 * seed, 3))
        Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{seed}.png")
    base = ["cam", str(folder), "--model", "clip:hookviz-cli-ViT", "--weights", "untrained"]
    assert main([*base, "--out", str(tmp_path / "none")]) == 2
    assert "give two labels or more" in capsys.readouterr().err
    labels = ["a dog", "a cat", "a red car"]
    assert main([*base, "--labels", ",".join(labels), "--out", str(tmp_path / "run")]) == 0
    run = hookviz.open_run(tmp_path / "run")
    clip = hookviz.zero_shot(hookviz.load_model("clip:hookviz-cli-ViT", False), labels)
    for _, row in run.table.iterrows():
        best = hookviz.predict(clip, hookviz.load_image(row["path"]), k=1)[0]
        assert row["top1_name"] == best.name and row["top1_prob"] == pytest.approx(
            best.probability, abs=1e-4
        )
    assert "--labels 'a dog,a cat,a red car'" in run.resume_command()
    assert (
        main(
            [
                "cam",
                str(folder),
                "--model",
                "resnet18",
                "--weights",
                "untrained",
                "--labels",
                "a,b",
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    assert "--labels is for a zero-shot model" in capsys.readouterr().err
