"""Batches, decode workers, bf16 and the centre crop of a dataset run: real images on disk, the
real bundled model, real DataLoader worker processes, and hookviz.grad_cam as the oracle."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import hookviz
from hookviz.dataset import RunError, run_cam, run_features

from .held_input import ctrl_c_as_in_a_terminal, held, held_input, interrupted
from .processes import stop, wait_for_chunks

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def lite0():
    return hookviz.load_model("efficientnet_lite0", device="cpu")


def _same_sizes(root: Path) -> Path:
    """Seven photos in two sizes (so batches form), one of another size, one broken file."""
    sample = hookviz.sample_image()
    root.mkdir(parents=True)
    for index in range(7):
        size = (240, 180) if index % 2 == 0 else (180, 260)
        sample.rotate(7 * index).resize(size).save(root / f"p{index}.png")
    sample.resize((300, 200)).save(root / "p7.png")
    (root / "p8.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    return root


def _cams(directory: Path) -> dict[str, np.ndarray]:
    run = hookviz.open_run(directory)
    return {
        row["path"]: run.cam(index) for index, row in run.table.iterrows() if row["status"] == "ok"
    }


@pytest.mark.slow
def test_batched_rows_are_each_image_alone(tmp_path, lite0):
    images = _same_sizes(tmp_path / "data")
    run_cam(lite0, [images], tmp_path / "one", batch_size=1, chunk_size=9)
    summary = run_cam(lite0, [images], tmp_path / "four", batch_size=4, chunk_size=9)
    assert summary.ok == 8 and [Path(p).name for p, _ in summary.errors] == ["p8.jpg"]
    one, four = hookviz.open_run(tmp_path / "one"), hookviz.open_run(tmp_path / "four")
    columns = ["path", "status", "top1_index", "class_index", "width", "height"]
    assert one.table[columns].equals(four.table[columns])
    np.testing.assert_allclose(four.table["score"], one.table["score"], rtol=1e-4)
    alone, batched = _cams(tmp_path / "one"), _cams(tmp_path / "four")
    for path, cam in alone.items():
        np.testing.assert_allclose(batched[path], cam, rtol=1e-3, atol=1e-4)
    # and each is hookviz.grad_cam of that image
    for index, row in four.table.iterrows():
        if row["status"] == "ok":
            expected = hookviz.grad_cam(lite0, hookviz.load_image(row["path"]))
            heat = four.heatmap(index)
            assert np.corrcoef(heat.ravel(), expected.heatmap.ravel())[0, 1] >= 0.999


@pytest.mark.slow
def test_decode_workers_give_the_same_run(tmp_path, lite0):
    images = _same_sizes(tmp_path / "data")
    run_cam(lite0, [images], tmp_path / "here", batch_size=3, chunk_size=4, overlays="jpeg")
    run_cam(
        lite0,
        [images],
        tmp_path / "workers",
        batch_size=3,
        chunk_size=4,
        overlays="jpeg",
        workers=2,
    )
    here, there = tmp_path / "here", tmp_path / "workers"
    assert (here / "table.csv").read_bytes() == (there / "table.csv").read_bytes()
    for chunk in sorted((here / "cams").glob("*.npz")):
        with np.load(chunk) as a, np.load(there / "cams" / chunk.name) as b:
            for key in a.files:
                np.testing.assert_array_equal(a[key], b[key])
    assert sorted(p.name for p in (there / "overlays").iterdir()) == [
        f"{row:07d}.jpg" for row in range(8)
    ]


def test_a_batch_the_model_refuses_is_retried_image_by_image(tmp_path):
    """A model that fails on one kind of image: only that image's row says so."""

    class Picky(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.head = torch.nn.Linear(4, 3)

        def forward(self, x):
            maps = torch.relu(self.features(x))
            if bool((x.mean(dim=(1, 2, 3)) > 2.0).any()):  # a white image: no logits
                return {"nothing": maps}
            return self.head(maps.mean(dim=(2, 3)))

    loaded = hookviz.wrap_model(Picky(), num_classes=3, device="cpu")
    folder = tmp_path / "data"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for index in range(4):
        pixels = rng.integers(0, 120, (64, 64, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"dark{index}.png")
    Image.new("RGB", (64, 64), "white").save(folder / "dark2_white.png")
    summary = run_cam(loaded, [folder], tmp_path / "out", layer="features", batch_size=8)
    table = hookviz.open_run(tmp_path / "out").table
    failed = table[table["status"] == "error"]
    assert [Path(p).name for p in failed["path"]] == ["dark2_white.png"]
    assert summary.ok == 4 and failed["error"].iloc[0]


@pytest.mark.slow
def test_centre_crop_explains_the_crop_and_is_zero_outside(tmp_path, lite0):
    images = _same_sizes(tmp_path / "data")
    run_cam(lite0, [images], tmp_path / "crop", crop="center", batch_size=4, overlays="png")
    run = hookviz.open_run(tmp_path / "crop")
    assert run.manifest["job"]["crop"] == "center"
    assert run.manifest["preprocessing"]["whole_image"] is False
    prep = lite0.preprocessing
    for index, row in run.table.iterrows():
        if row["status"] != "ok":
            continue
        image = hookviz.load_image(row["path"])
        box = run.crop_box(index)
        assert box == pytest.approx(prep.crop_box(image.width, image.height))
        side = box[2] - box[0]
        assert side == pytest.approx(min(image.size) * prep.crop_fraction)
        seen = image.resize((prep.size, prep.size), Image.Resampling.BICUBIC, box)
        expected = hookviz.grad_cam(lite0, seen)
        assert row["class_index"] == expected.class_index
        heat = run.heatmap(index)
        assert heat.shape == (image.height, image.width)
        left, top, right, bottom = (round(v) for v in box)
        inside = heat[top:bottom, left:right]
        reference = expected.heatmap_at(inside.shape)
        assert np.corrcoef(inside.ravel(), reference.ravel())[0, 1] >= 0.999
        outside = heat.copy()
        outside[top:bottom, left:right] = 0
        assert not outside.any() and inside.max() == pytest.approx(1.0)
    whole = hookviz.open_run(tmp_path / "crop")
    with pytest.raises(RunError, match="another run"):
        run_cam(lite0, [images], tmp_path / "crop")  # whole images: a different run
    assert whole.overlay_path(0) is not None
    with pytest.raises(RunError, match="crop"):
        run_cam(lite0, [images], tmp_path / "bad", crop="middle")


@pytest.mark.slow
def test_bf16_is_close_to_float32_and_a_run_of_its_own(tmp_path, lite0):
    images = _same_sizes(tmp_path / "data")
    run_cam(lite0, [images], tmp_path / "f32", batch_size=4)
    run_cam(lite0, [images], tmp_path / "bf16", batch_size=4, bf16=True)
    f32, bf16 = hookviz.open_run(tmp_path / "f32"), hookviz.open_run(tmp_path / "bf16")
    assert bf16.manifest["job"]["bf16"] is True and f32.manifest["job"]["bf16"] is False
    agree = (f32.table["top1_index"] == bf16.table["top1_index"]).mean()
    assert agree >= 0.75
    for index, row in f32.table.iterrows():
        if row["status"] == "ok" and row["top1_index"] == bf16.table["top1_index"][index]:
            a, b = f32.heatmap(index), bf16.heatmap(index)
            assert np.corrcoef(a.ravel(), b.ravel())[0, 1] >= 0.95
    with pytest.raises(RunError, match="another run"):
        run_cam(lite0, [images], tmp_path / "f32", bf16=True)


@pytest.mark.slow
def test_features_batched_with_workers_and_crop(tmp_path, lite0):
    images = _same_sizes(tmp_path / "data")
    run_features(
        lite0,
        [images],
        tmp_path / "feat",
        layer="blocks.4",
        batch_size=4,
        workers=1,
        crop="center",
    )
    run = hookviz.open_run(tmp_path / "feat")
    prep = lite0.preprocessing
    for index, row in run.table.iterrows():
        if row["status"] != "ok":
            assert np.isnan(run.features[index]).all()
            continue
        image = hookviz.load_image(row["path"])
        seen = prep.resized(image, crop=True)
        assert seen.shape == (prep.size, prep.size, 3)
        maps = hookviz.feature_maps(lite0, Image.fromarray(seen), "blocks.4").activations
        np.testing.assert_allclose(
            run.features[index], maps.mean(dim=(1, 2)).numpy(), rtol=1e-4, atol=1e-4
        )


@pytest.mark.slow
def test_the_command_line_takes_the_batching_options(tmp_path):
    images = _same_sizes(tmp_path / "data")
    command = [sys.executable, "-m", "hookviz", "cam", str(images), "--model", "efficientnet_lite0"]
    done = subprocess.run(
        [
            *command,
            "--out",
            str(tmp_path / "out"),
            "--batch-size",
            "4",
            "--workers",
            "1",
            "--crop",
            "center",
            "--bf16",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    job = hookviz.open_run(tmp_path / "out").manifest["job"]
    assert job["crop"] == "center" and job["bf16"] is True
    refused = subprocess.run(
        [*command, "--out", str(tmp_path / "x"), "--batch-size", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert refused.returncode == 2 and "at least 1" in refused.stderr


@pytest.mark.slow
def test_a_size_step_lets_nearly_equal_shapes_share_a_batch(tmp_path, lite0):
    folder = tmp_path / "data"
    folder.mkdir()
    sample = hookviz.sample_image()
    for index, size in enumerate([(240, 180), (244, 180), (246, 180), (240, 180)]):
        sample.rotate(9 * index).resize(size).save(folder / f"p{index}.png")
    batches: list[tuple[int, ...]] = []

    def record(module, inputs, output) -> None:
        if inputs[0].shape[3] > 224:  # the photos' (the layer table probes at other sizes)
            batches.append(tuple(inputs[0].shape))

    handle = lite0.model.register_forward_hook(record)
    try:
        run_cam(lite0, [folder], tmp_path / "exact", batch_size=8)
        exact, batches[:] = list(batches), []
        run_cam(lite0, [folder], tmp_path / "step", batch_size=8, size_step=16)
        stepped = list(batches)
    finally:
        handle.remove()
    assert sorted(shape[0] for shape in exact) == [1, 1, 2]  # three shapes, one twice
    assert stepped == [(4, 3, 224, 304)]  # one batch: every long side rounded to 304
    run = hookviz.open_run(tmp_path / "step")
    assert run.manifest["job"]["size_step"] == 16
    for index, row in run.table.iterrows():
        image = hookviz.load_image(row["path"])
        heat = run.heatmap(index)
        assert heat.shape == (image.height, image.width)
        # what the image gets alone when fed at the rounded size, put on its own grid
        fed = replace(lite0.preprocessing, multiple=16).to_tensor(image)
        assert fed.shape[-2:] == (224, 304)
        alone = hookviz.grad_cam(lite0, fed, target=int(row["class_index"]))
        expected = alone.heatmap_at((image.height, image.width))
        assert np.corrcoef(heat.ravel(), expected.ravel())[0, 1] >= 0.999
    with pytest.raises(RunError, match="another run"):
        run_cam(lite0, [folder], tmp_path / "step", batch_size=8)


@pytest.mark.slow
def test_large_jpegs_decode_at_a_reduced_scale_with_their_own_size_kept(tmp_path, lite0):
    """A large photo is decoded by libjpeg at 1/2-1/8 scale (at least twice the model's input
    remains): the table keeps the file's own upright size and the heatmap is the full decode's."""
    folder = tmp_path / "data"
    folder.mkdir()
    sample = hookviz.sample_image()
    sample.resize((2400, 1800)).save(folder / "wide.jpg", quality=90)
    turned = sample.resize((2000, 1500))
    exif = turned.getexif()
    exif[0x0112] = 6  # stored landscape, shown portrait (a quarter turn)
    turned.save(folder / "turned.jpg", exif=exif.tobytes(), quality=90)
    run_cam(lite0, [folder], tmp_path / "out", overlays="jpeg")
    run = hookviz.open_run(tmp_path / "out")
    sizes = {Path(p).name: (w, h) for p, w, h in run.table[["path", "width", "height"]].values}
    assert sizes == {"wide.jpg": (2400, 1800), "turned.jpg": (1500, 2000)}
    for index, row in run.table.iterrows():
        full = hookviz.load_image(row["path"])
        heat = run.heatmap(index)
        assert heat.shape == (full.height, full.width)
        expected = hookviz.grad_cam(lite0, full, target=int(row["class_index"])).heatmap
        assert np.corrcoef(heat.ravel(), expected.ravel())[0, 1] >= 0.999
        assert max(Image.open(run.overlay_path(index)).size) == 1024
    shrunk = hookviz.load_image(folder / "turned.jpg", shrink_to=448)
    assert shrunk.info["full_size"] == (1500, 2000) and min(shrunk.size) >= 448
    assert shrunk.size[0] < shrunk.size[1] and max(shrunk.size) < 2000


@pytest.mark.slow
def test_ctrl_c_with_decode_workers_stops_cleanly_and_resumes(tmp_path):
    """Ctrl-C (SIGINT) in the middle of a run with worker processes: exit code 130 and the
    message, no worker left behind, and the same command finishes to the uninterrupted run's
    outputs."""
    from .test_dataset_run import _assert_same_run

    folder = tmp_path / "data"
    folder.mkdir()
    sample = hookviz.sample_image().resize((200, 150))
    for index in range(39):
        sample.rotate(index).save(folder / f"{index:03d}.jpg")
    # the run's last row (chunk 4 of 0-4) is held until after the interrupt: the run is
    # provably still going when the signal arrives
    picture, listing = held_input(tmp_path, sample.rotate(39))
    command = [
        sys.executable,
        "-m",
        "hookviz",
        "cam",
        str(folder),
        str(listing),
        "--model",
        "efficientnet_lite0",
        "--workers",
        "2",
        "--batch-size",
        "4",
        "--chunk-size",
        "8",
        "--quiet",
    ]
    cut = tmp_path / "cut"
    with held(picture):
        process = subprocess.Popen(
            [*command, "--out", str(cut)],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=ctrl_c_as_in_a_terminal,
        )
        try:
            assert wait_for_chunks(cut / "cams", 1, process), "no chunk was written"
            errors = interrupted(process, picture)
        finally:
            stop(process)
    assert process.returncode == 130, errors
    assert "run the same command again" in errors
    assert not _processes_naming(str(cut)), "a decode worker outlived the run"
    chunks = sorted(p.name for p in (cut / "cams").iterdir())
    done = len(chunks)
    assert 1 <= done < 5 and "00004.npz" not in chunks  # only whole chunks, never the held one
    assert not hookviz.open_run(cut).complete and not (cut / "table.csv").exists()
    again = subprocess.run(
        [*command, "--out", str(cut)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr
    assert f"{done} chunks were already done" in again.stdout
    whole = subprocess.run(
        [*command, "--out", str(tmp_path / "whole"), "--workers", "0"],
        cwd=ROOT,
        capture_output=True,
        timeout=300,
    )
    assert whole.returncode == 0
    _assert_same_run(tmp_path / "whole", cut)


def _processes_naming(text: str) -> list[int]:
    """The processes whose command line contains ``text`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in command:
                found.append(int(entry.name))
    return found
