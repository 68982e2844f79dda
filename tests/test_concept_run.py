"""Concepts over a folder (``run_concepts``, ``hookviz concepts``): real images on disk, a real
ResNet-18 with random weights, real processes for the command line; no mocks.

The factorisation is checked against pytorch-grad-cam's ``dff`` over the same stacked maps (its
NMF is scikit-learn's), a folder of one image against ``hookviz.concepts`` of that image, the
regions against the stored maps, the labels against the model's own head, and an interrupted
run against an uninterrupted one."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from pytorch_grad_cam.feature_factorization.deep_feature_factorization import dff

import hookviz
from hookviz.dataset import ConceptsSummary, RunError, open_concepts, run_concepts
from hookviz.dataset.concept_run import HALF, REGION_LONG_SIDE, REGION_SHORT_SIDE, peak_box
from hookviz.dataset.decode import Decoding, decode
from hookviz.insight.concepts import LABELS_PER_CONCEPT

from .test_dataset_run import _cli

IMAGES = 7  # readable images in the folder (plus one file that is not an image)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Seven small photos of different sizes and crops, and one unreadable file."""
    root = tmp_path_factory.mktemp("concept-images")
    sample = hookviz.sample_image()
    for index in range(IMAGES):
        box = (40 * index, 30 * (index % 3), 600 - 20 * index, 512 - 25 * (index % 2))
        picture = sample.crop(box).rotate(9 * index).resize((64 + 8 * index, 96 - 4 * index))
        picture.save(root / f"photo{index}.png")
    (root / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not an image")
    return root


@pytest.fixture(scope="module")
def found(folder, resnet18, tmp_path_factory) -> ConceptsSummary:
    """Five concepts at layer4 (it feeds the pooled linear head), three regions each."""
    out = tmp_path_factory.mktemp("concepts") / "out"
    return run_concepts(resnet18, [folder], out, layer="layer4", k=5, regions=3, chunk_size=3)


def _stacked(summary: ConceptsSummary) -> np.ndarray:
    """The maps of the images that were read, from the features run: (n, C, h, w)."""
    run = hookviz.open_run(summary.out / "features")
    return run.features[(run.table["status"] == "ok").to_numpy()]


def _reference_error(stacked: np.ndarray, k: int) -> float:
    """pytorch-grad-cam's DFF of the stacked maps: ||A - min - W H|| / ||A - min||."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (scikit-learn's "maximum iterations reached")
        vectors, maps = dff(stacked.copy(), n_components=k)  # maps: (n, k, h, w)
    channels = stacked.shape[1]
    flat = stacked.transpose(1, 0, 2, 3).reshape(channels, -1)
    offset = flat.min(axis=1, keepdims=True)
    shifted = flat - offset
    rebuilt = (vectors - offset) @ maps.transpose(1, 0, 2, 3).reshape(k, -1)
    return float(np.linalg.norm(shifted - rebuilt) / np.linalg.norm(shifted))


def _check_factorisation(summary: ConceptsSummary, k: int) -> None:
    concepts = summary.concepts
    stacked = _stacked(summary)
    images, channels, height, width = stacked.shape
    assert images == IMAGES and concepts.images == IMAGES and concepts.k == k
    assert concepts.vectors.shape == (channels, k)
    assert concepts.maps.shape == (k, images, height, width)
    assert (concepts.vectors >= 0).all() and (concepts.maps >= 0).all()
    # the images side by side; each channel minus its minimum over the whole folder
    flat = stacked.transpose(1, 0, 2, 3).reshape(channels, -1)
    np.testing.assert_allclose(concepts.offset, flat.min(axis=1), rtol=0, atol=1e-6)
    shifted = flat - concepts.offset[:, None]
    rebuilt = concepts.vectors @ concepts.maps.reshape(k, -1)
    error = np.linalg.norm(shifted - rebuilt) / np.linalg.norm(shifted)
    assert error == pytest.approx(concepts.error, abs=1e-5)
    assert concepts.error <= _reference_error(stacked, k) + 1e-5
    # each concept's share of the reconstruction's sum
    parts = concepts.vectors.sum(axis=0) * concepts.maps.reshape(k, -1).sum(axis=1)
    np.testing.assert_allclose(concepts.shares, parts / parts.sum(), rtol=1e-4)


@pytest.mark.slow
def test_the_folder_factorisation_is_as_close_as_the_references(found):
    _check_factorisation(found, 5)
    assert found.rows == IMAGES + 1 and found.ok == IMAGES
    assert [Path(path).name for path, _ in found.errors] == ["broken.jpg"]
    # the broken file's row is left out of the maps
    table = hookviz.open_run(found.out / "features").table
    assert list(found.concepts.rows) == [i for i in range(len(table)) if "photo" in table.path[i]]


@pytest.mark.slow
def test_an_early_layer_factorises_as_closely_and_has_no_labels(folder, resnet18, tmp_path):
    summary = run_concepts(resnet18, [folder], tmp_path / "out", layer="layer2", k=8, regions=2)
    _check_factorisation(summary, 8)
    concepts = open_concepts(tmp_path / "out")
    assert concepts.labels is None and concepts.label_probabilities is None
    assert "no linear layer from the 128 channels of 'layer2'" in concepts.labels_reason
    saved = json.loads((tmp_path / "out" / "concepts.json").read_text())
    assert saved["labels_reason"] == concepts.labels_reason
    assert all(c["labels"] is None for c in saved["concepts"])


@pytest.mark.slow
def test_a_folder_of_one_image_gives_that_images_concepts(folder, resnet18, tmp_path):
    """A folder of one image has the concepts ``hookviz.concepts`` finds in it, exactly when it
    is given the very input the run fed: the same pixels (a square image, resized to the
    model's square either way) normalised as the run normalises them. Given the picture, the
    maps differ in the last bits: the run's batch is channels-last in memory (the normalisation
    permutes the decoded bytes), and the convolutions then round differently (about 1e-5 at
    layer3); NMF's scale per concept then moves a little, so the concepts' products and
    directions are compared instead."""
    square = tmp_path / "one" / "square.png"
    square.parent.mkdir()
    Image.open(folder / "photo2.png").resize((80, 80)).save(square)
    summary = run_concepts(resnet18, [square.parent], tmp_path / "out", layer="layer3", k=4)
    concepts = summary.concepts
    record = decode(0, str(square), Decoding(resnet18.preprocessing, square=True))
    fed = resnet18.preprocessing.normalise(torch.from_numpy(record["pixels"][None]))
    alone = hookviz.concepts(resnet18, fed, layer="layer3", k=4)
    np.testing.assert_array_equal(concepts.vectors, alone.vectors)
    np.testing.assert_array_equal(concepts.maps[:, 0], alone.maps)
    np.testing.assert_array_equal(concepts.offset, alone.offset)
    assert concepts.error == pytest.approx(alone.error, abs=1e-12)
    assert concepts.labels is None and concepts.labels_reason == alone.labels_reason
    picture = hookviz.concepts(resnet18, hookviz.load_image(square), layer="layer3", k=4)
    ours = concepts.vectors @ concepts.maps[:, 0].reshape(4, -1)
    theirs = picture.vectors @ picture.maps.reshape(4, -1)
    assert np.linalg.norm(ours - theirs) <= 1e-4 * np.linalg.norm(ours)
    for j in range(4):
        assert np.corrcoef(concepts.vectors[:, j], picture.vectors[:, j])[0, 1] > 0.9999
        assert np.corrcoef(concepts.maps[j, 0].ravel(), picture.maps[j].ravel())[0, 1] > 0.9999
    # each concept's heatmap on the image is the single-image concept's heatmap
    for j in range(4):
        np.testing.assert_allclose(concepts.heatmap(j, 0), alone.heatmaps_at((80, 80))[j])


@pytest.mark.slow
def test_the_regions_are_where_each_concept_peaks(found):
    concepts = open_concepts(found.out)
    height, width = concepts.maps.shape[2:]
    for j in range(concepts.k):
        peaks = concepts.maps[j].reshape(concepts.images, -1).max(axis=1)
        strongest = np.argsort(-peaks, kind="stable")[:3]
        regions = concepts.regions[j]
        assert [r.row for r in regions] == [int(concepts.rows[p]) for p in strongest]
        assert len({r.row for r in regions}) == 3  # three distinct images
        for rank, (region, place) in enumerate(zip(regions, strongest, strict=True)):
            grid = concepts.map(j, region.row)
            assert region.peak == pytest.approx(float(peaks[place]), rel=1e-6)
            assert grid.max() == pytest.approx(region.peak, rel=1e-6)
            # the box covers the peak cell, and its edge cells reach half the peak
            row, column = np.unravel_index(grid.argmax(), grid.shape)
            left, top, right, bottom = region.box
            assert left <= column / width and (column + 1) / width <= right + 1e-6
            assert top <= row / height and (row + 1) / height <= bottom + 1e-6
            cells = grid[round(top * height) : round(bottom * height)]
            cells = cells[:, round(left * width) : round(right * width)]
            assert cells.max(axis=1).min() >= HALF * region.peak
            assert cells.max(axis=0).min() >= HALF * region.peak
            # the picture: a JPEG of the region, enlarged
            path = concepts.region_picture(j, rank)
            assert path == found.out / "regions" / f"concept-{j}-{rank}.jpg"
            with Image.open(path) as picture:
                picture.verify()
            with Image.open(path) as picture:
                assert picture.format == "JPEG"
                short, long = sorted(picture.size)
                assert short >= REGION_SHORT_SIDE or long == REGION_LONG_SIDE
            # the heatmap on the image's pixels peaks inside the box
            record = concepts.run.table.iloc[region.row]
            heat = concepts.heatmap(j, region.row)
            assert heat.shape == (record["height"], record["width"])
            assert heat.min() >= 0 and heat.max() == pytest.approx(1.0)
            y, x = np.unravel_index(heat.argmax(), heat.shape)
            assert left <= (x + 0.5) / heat.shape[1] <= right
            assert top <= (y + 0.5) / heat.shape[0] <= bottom
    saved = json.loads((found.out / "concepts.json").read_text())
    assert saved["format"] == 1 and saved["model"] == "resnet18" and saved["k"] == 5
    assert saved["layer"] == "layer4" and saved["images"] == IMAGES and saved["failed"] == 1
    for j, concept in enumerate(saved["concepts"]):
        channels = [entry["channel"] for entry in concept["channels"]]
        assert channels == list(np.argsort(-concepts.vectors[:, j], kind="stable")[:5])
        assert [r["picture"] for r in concept["regions"]] == [
            f"regions/concept-{j}-{rank}.jpg" for rank in range(3)
        ]


def test_a_region_is_the_cells_around_the_peak_at_half_of_it():
    grid = np.zeros((6, 8), np.float32)
    grid[2, 3] = 10.0  # the peak
    grid[2, 4] = grid[3, 3] = grid[4, 3] = 6.0  # at least half of it, side by side with it
    grid[1, 2] = 9.0  # strong, but only corner to corner with the peak: another region
    grid[5, 7] = 8.0  # strong, apart
    grid[2, 2] = 4.0  # below half
    assert peak_box(grid) == (3 / 8, 2 / 6, 5 / 8, 5 / 6)
    single = np.ones((3, 3), np.float32)
    single[0, 0] = 5.0
    assert peak_box(single) == (0.0, 0.0, 1 / 3, 1 / 3)


@pytest.mark.slow
def test_the_labels_are_the_heads_classes_of_each_concept(found, resnet18):
    concepts = found.concepts
    assert concepts.labels_reason == ""
    with torch.no_grad():
        pooled = torch.from_numpy(concepts.vectors + concepts.offset[:, None]).T
        probabilities = resnet18.model.fc(pooled).softmax(dim=1)
    best = probabilities.topk(LABELS_PER_CONCEPT, dim=1)
    names = [tuple(resnet18.class_name(int(i)) for i in row) for row in best.indices]
    assert list(concepts.labels) == names
    np.testing.assert_allclose(concepts.label_probabilities, best.values.numpy(), rtol=1e-4)
    again = open_concepts(found.out)
    assert again.labels == concepts.labels
    np.testing.assert_allclose(again.label_probabilities, concepts.label_probabilities)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        # (eight inputs, one of which is not an image: it is known only once read)
        ({"k": 0}, hookviz.ConceptError, r"a whole number from 1 to 392 at 'layer4'"),
        ({"k": 393}, hookviz.ConceptError, r"\(512 channels, 8 images of 7x7 positions\)"),
        ({"k": 2.5}, hookviz.ConceptError, r"got 2\.5"),
        ({"regions": 0}, RunError, r"regions is how many images"),
        ({"layer": "layer9"}, hookviz.LayerError, r"layer9"),
        ({"crop": "middle"}, RunError, r"crop 'middle'"),
    ],
)
def test_bad_options_are_refused_before_any_image_is_read(
    folder, resnet18, tmp_path, options, error, message
):
    with pytest.raises(error, match=message):
        run_concepts(resnet18, [folder], tmp_path / "out", **{"layer": "layer4", **options})
    assert not (tmp_path / "out").exists()


def test_an_out_holding_something_else_or_no_inputs_are_refused(folder, resnet18, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunError, match=r"no image files in .*empty: nothing to factorise"):
        run_concepts(resnet18, [tmp_path / "empty"], tmp_path / "out", layer="layer4", k=2)
    assert not (tmp_path / "out").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(RunError, match="holds no hookviz concepts"):
        run_concepts(resnet18, [folder], tmp_path / "mine", layer="layer4", k=2)
    (tmp_path / "cam").mkdir()
    (tmp_path / "cam" / "manifest.json").write_text("{}")
    with pytest.raises(RunError, match="another hookviz command"):
        run_concepts(resnet18, [folder], tmp_path / "cam", layer="layer4", k=2)
    with pytest.raises(RunError, match="no concepts in"):
        open_concepts(tmp_path / "mine")


@pytest.mark.slow
def test_an_interrupted_run_resumes_to_the_same_concepts(folder, resnet18, found, tmp_path):
    """Ctrl-C (a KeyboardInterrupt, here from the progress callback after four images) stops
    the run between chunks; the same call again continues and ends as the uninterrupted one."""
    out = tmp_path / "out"

    def interrupt(done: int, total: int) -> None:
        if done >= 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_concepts(
            resnet18,
            [folder],
            out,
            layer="layer4",
            k=5,
            regions=3,
            chunk_size=3,
            progress=interrupt,
        )
    assert len(list((out / "features" / "cams").glob("*.npz"))) == 1
    assert not (out / "concepts.json").exists()
    resumed = run_concepts(resnet18, [folder], out, layer="layer4", k=5, regions=3, chunk_size=3)
    assert resumed.chunks_done_before == 1
    _assert_same_concepts(found.out, out)
    # the same inputs with another k: the maps are reused, the pictures of the others removed
    fewer = run_concepts(resnet18, [folder], out, layer="layer4", k=2, regions=1, chunk_size=3)
    assert fewer.chunks_done_before == 3 and fewer.concepts.k == 2
    pictures = sorted(p.name for p in (out / "regions").iterdir())
    assert pictures == ["concept-0-0.jpg", "concept-1-0.jpg"]


def _assert_same_concepts(first: Path, second: Path) -> None:
    one = json.loads((first / "concepts.json").read_text())
    two = json.loads((second / "concepts.json").read_text())
    assert one == two
    with np.load(first / "concepts.npz") as a, np.load(second / "concepts.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key])
    for picture in sorted((first / "regions").iterdir()):
        assert picture.read_bytes() == (second / "regions" / picture.name).read_bytes()


@pytest.mark.slow
def test_the_command_line_writes_prints_and_resumes(folder, tmp_path):
    command = [
        "concepts",
        str(folder),
        "--model",
        "resnet18",
        "--weights",
        "untrained",
        "--layer",
        "layer4",
        "--k",
        "3",
        "--regions",
        "2",
        "--chunk-size",
        "4",
        "--quiet",
        "--out",
    ]
    done = _cli(*command, str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    concepts = open_concepts(out)
    assert concepts.k == 3 and concepts.images == IMAGES
    assert {p.name for p in (out / "regions").iterdir()} == {
        f"concept-{j}-{r}.jpg" for j in range(3) for r in range(2)
    }
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{IMAGES + 1} images, {IMAGES} done, 1 failed")
    assert f"3 concepts of layer4 over {IMAGES} images" in done.stdout
    assert f"reconstruction error {concepts.error:.3f}" in done.stdout
    for j in range(3):
        line = next(line for line in lines if line.startswith(f"  concept {j} "))
        assert ", ".join(concepts.labels[j]) in line
        assert line.endswith(str(out / "regions" / f"concept-{j}-0.jpg"))
    before = {p.name: p.read_bytes() for p in [*out.glob("concepts.*"), *out.glob("regions/*")]}
    again = _cli(*command, str(out))
    assert again.returncode == 0, again.stderr
    assert "2 chunks were already done" in again.stdout
    after = {p.name: p.read_bytes() for p in [*out.glob("concepts.*"), *out.glob("regions/*")]}
    assert after == before  # the factorisation and the pictures made again, the same


@pytest.mark.slow
@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--k", "0"], "argument --k: must be at least 1"),
        (["--k", "600"], "k is how many concepts: a whole number from 1 to 392"),
        (["--layer", "nosuch"], "unknown layer 'nosuch' in resnet18"),
    ],
)
def test_the_command_line_refuses_bad_options_with_status_2(folder, tmp_path, option, message):
    answer = _cli(
        "concepts",
        str(folder),
        "--model",
        "resnet18",
        "--weights",
        "untrained",
        "--out",
        str(tmp_path / "out"),
        *(["--layer", "layer4"] if "--layer" not in option else []),
        *option,
    )
    assert answer.returncode == 2, answer.stderr
    assert message in answer.stderr and "Traceback" not in answer.stderr
    assert not (tmp_path / "out").exists()
