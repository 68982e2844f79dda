"""A CAM run over a folder: real images on disk, the real bundled model, real processes for the
command line (including one killed with SIGKILL mid-run and resumed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import hookviz
from hookviz.dataset import RunError, run_cam

from .held_input import held, held_input
from .processes import stop, wait_for_chunks

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def lite0():
    return hookviz.load_model("efficientnet_lite0", device="cpu")


def _folder(root: Path, count: int = 6) -> Path:
    """``count`` photos of different sizes in two class folders, plus two unreadable files."""
    sample = hookviz.sample_image()
    for index in range(count):
        folder = root / ("military_uniform" if index % 2 == 0 else "suit")
        folder.mkdir(parents=True, exist_ok=True)
        size = (160 + 16 * index, 200 - 8 * index)
        sample.resize(size).rotate(5 * index).save(folder / f"photo{index:02d}.png")
    (root / "suit" / "truncated.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (root / "suit" / "zero.png").write_bytes(b"")
    return root


@pytest.mark.slow
def test_every_row_matches_grad_cam_and_failures_keep_their_place(tmp_path, lite0):
    images = _folder(tmp_path / "data")
    summary = run_cam(lite0, [images], tmp_path / "out", target="folder", chunk_size=3)
    run = hookviz.open_run(tmp_path / "out")
    table = run.table
    assert run.complete and len(table) == summary.rows == 8
    paths = list(table["path"])
    assert paths == sorted(paths)  # stable input order
    failed = table[table["status"] == "error"]
    assert {Path(p).name for p in failed["path"]} == {"truncated.jpg", "zero.png"}
    assert all(failed["error"].str.len() > 0)
    for row, record in table.iterrows():
        if record["status"] != "ok":
            with pytest.raises(ValueError, match="failed"):
                run.heatmap(row)
            continue
        image = hookviz.load_image(record["path"])
        assert record["label"] == Path(record["path"]).parent.name
        target = lite0.class_index(record["label"].replace("_", " "))
        expected = hookviz.grad_cam(lite0, image, target=target)
        assert record["class_index"] == target and record["class_name"] == expected.class_name
        heat = run.heatmap(row)
        assert heat.shape == (image.height, image.width)
        assert np.corrcoef(heat.ravel(), expected.heatmap.ravel())[0, 1] >= 0.999
        assert record["score"] == pytest.approx(expected.score, rel=1e-4)
    assert run.manifest["counts"] == {"rows": 8, "ok": 6, "error": 2}


@pytest.mark.slow
def test_a_folder_target_where_no_folder_names_a_class_is_refused_at_the_start(tmp_path, lite0):
    """Every row would fail: the run is refused before it starts (nothing written), and the
    message names the folders with the classes closest to each."""
    for folder in ("tabby_cats", "my_photos"):
        (tmp_path / "data" / folder).mkdir(parents=True)
        hookviz.sample_image().resize((64, 48)).save(tmp_path / "data" / folder / "a.png")
    with pytest.raises(RunError) as refused:
        run_cam(lite0, [tmp_path / "data"], tmp_path / "out", target="folder")
    message = str(refused.value)
    assert "no folder names a class" in message, message
    assert "'tabby_cats' (closest: tabby" in message and "'my_photos'" in message, message
    assert not (tmp_path / "out" / "manifest.json").exists()
    # from the command line: a clear message and a failure status, not a run marked complete
    data, out = str(tmp_path / "data"), str(tmp_path / "o")
    done = _cli("cam", data, "--model", "efficientnet_lite0", "--target", "folder", "--out", out)
    assert done.returncode != 0 and "no folder names a class" in done.stderr, done.stderr
    assert not (tmp_path / "o" / "manifest.json").exists()


def test_a_run_given_relative_paths_finds_its_images_from_anywhere(tmp_path, lite0, monkeypatch):
    """``hookviz cam imgfolder/ --out runs/val`` in a data folder: the run records where its
    relative inputs start, so its images are found from any working directory and after the
    data folder and its runs move together; an image really gone is None; continuing the run
    from another folder, where the same relative paths name other files, is refused."""
    work = tmp_path / "work"
    _folder(work / "imgfolder", count=2)
    monkeypatch.chdir(work)
    run_cam(lite0, ["imgfolder"], "runs/val", overlays="jpeg", chunk_size=2)
    monkeypatch.chdir(tmp_path)  # the app, started elsewhere
    run = hookviz.open_run(work / "runs" / "val")
    ok = [int(i) for i in run.table.index[run.table.status == "ok"]]
    assert not Path(run.table.iloc[ok[0]]["path"]).is_absolute()
    for row in ok:
        found = run.input_path(row)
        assert found == work / run.table.iloc[row]["path"] and found.is_file()
        assert run.overlay_path(row) is not None
    _folder(tmp_path / "imgfolder", count=2)  # here, the same relative paths: other files
    with pytest.raises(RunError, match="started in"):
        run_cam(lite0, ["imgfolder"], work / "runs" / "val", overlays="jpeg", chunk_size=2)
    moved = tmp_path / "moved"
    work.rename(moved)  # the data and its runs, moved together
    run = hookviz.open_run(moved / "runs" / "val")
    assert [run.input_path(row).resolve() for row in ok] == [
        (moved / run.table.iloc[row]["path"]).resolve() for row in ok
    ]
    (moved / run.table.iloc[ok[0]]["path"]).unlink()  # one image really gone
    assert run.input_path(ok[0]) is None and run.input_path(ok[1]) is not None


@pytest.mark.slow
def test_an_interrupted_run_resumes_to_the_same_outputs(tmp_path, lite0):
    images = _folder(tmp_path / "data")
    run_cam(lite0, [images], tmp_path / "whole", chunk_size=2)

    def stop_after_five(done: int, total: int) -> None:
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_cam(lite0, [images], tmp_path / "again", chunk_size=2, progress=stop_after_five)
    done = sorted(p.name for p in (tmp_path / "again" / "cams").glob("*.npz"))
    assert done == ["00000.npz", "00001.npz"]  # the third chunk was not finished: not kept
    # a half-written chunk from a crash is never taken for done
    (tmp_path / "again" / "cams" / "00002.tmp").write_bytes(b"half a chunk")
    summary = run_cam(lite0, [images], tmp_path / "again", chunk_size=2)
    assert summary.chunks_done_before == 2
    _assert_same_run(tmp_path / "whole", tmp_path / "again")


def test_another_command_on_the_same_out_is_refused(tmp_path, lite0):
    images = _folder(tmp_path / "data", count=2)
    run_cam(lite0, [images], tmp_path / "out")
    with pytest.raises(RunError, match="another run"):
        run_cam(lite0, [images], tmp_path / "out", method="gradcam++")
    summary = run_cam(lite0, [images], tmp_path / "out", method="gradcam++", overwrite=True)
    assert hookviz.open_run(tmp_path / "out").manifest["job"]["method"] == "gradcam++"
    assert summary.chunks_done_before == 0
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(RunError, match="not empty"):
        run_cam(lite0, [images], tmp_path / "other")


def test_a_class_name_or_index_target_and_a_bad_one(tmp_path, lite0):
    images = _folder(tmp_path / "data", count=2)
    run_cam(lite0, [images], tmp_path / "named", target="suit")
    table = hookviz.open_run(tmp_path / "named").table
    assert set(table[table["status"] == "ok"]["class_name"]) == {"suit"}
    with pytest.raises(RunError, match="out of range"):
        run_cam(lite0, [images], tmp_path / "bad", target="5000")
    with pytest.raises(RunError, match="no class named"):
        run_cam(lite0, [images], tmp_path / "bad2", target="no such thing")


def _cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOOKVIZ_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "hookviz", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


@pytest.mark.slow
def test_command_line_help_strict_and_messages(tmp_path):
    help_text = _cli("cam", "--help").stdout
    assert "--target" in help_text and "same command again" in help_text
    images = _folder(tmp_path / "data", count=2)
    done = _cli("cam", str(images), "--model", "efficientnet_lite0", "--out", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    assert "2 failed" in done.stdout and "zero.png" in done.stdout
    strict = _cli(
        "cam",
        str(images),
        "--model",
        "efficientnet_lite0",
        "--out",
        str(tmp_path / "o"),
        "--strict",
        "--quiet",
    )
    assert strict.returncode == 1  # the same run, complete: unreadable files under --strict
    wrong = _cli("cam", str(images), "--model", "resnet18x", "--out", str(tmp_path / "p"))
    assert wrong.returncode == 2 and "unknown model" in wrong.stderr


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_to_the_same_outputs(tmp_path):
    images = _folder(tmp_path / "data", count=8)
    # the last row (chunk 5 of 0-5) is held while the run is killed: it is provably mid-way
    picture, listing = held_input(tmp_path, hookviz.sample_image().resize((180, 150)))
    command = [
        "cam",
        str(images),
        str(listing),
        "--model",
        "efficientnet_lite0",
        "--chunk-size",
        "2",
        "--quiet",
    ]
    whole = _cli(*command, "--out", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    env = {**os.environ, "HOOKVIZ_OFFLINE": "1"}
    chunks = tmp_path / "killed" / "cams"
    with held(picture):
        process = subprocess.Popen(
            [sys.executable, "-m", "hookviz", *command, "--out", str(tmp_path / "killed")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert wait_for_chunks(chunks, 2, process), "the run wrote no two chunks"
            process.send_signal(signal.SIGKILL)
            process.wait()
        finally:
            stop(process)
    finished = sorted(p.name for p in chunks.glob("*.npz"))
    assert 2 <= len(finished) < 6 and "00005.npz" not in finished
    resumed = _cli(*command, "--out", str(tmp_path / "killed"))
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(finished)} chunks were already done" in resumed.stdout
    _assert_same_run(tmp_path / "whole", tmp_path / "killed")


def _assert_same_run(first: Path, second: Path) -> None:
    one, two = hookviz.open_run(first), hookviz.open_run(second)
    assert one.complete and two.complete
    assert (first / "table.csv").read_bytes() == (second / "table.csv").read_bytes()
    for chunk in sorted((first / "cams").glob("*.npz")):
        with np.load(chunk) as a, np.load(second / "cams" / chunk.name) as b:
            for key in a.files:
                np.testing.assert_array_equal(a[key], b[key])
    assert sorted(p.name for p in (second / "cams").glob("*.npz")) == sorted(
        p.name for p in (first / "cams").glob("*.npz")
    )


def test_inputs_files_globs_and_lists(tmp_path):
    from hookviz.dataset import expand_inputs

    images = _folder(tmp_path / "data", count=4)
    listing = tmp_path / "list.txt"
    listing.write_text("# chosen\ndata/suit/photo01.png\n\ndata/military_uniform/photo00.png\n")
    found = expand_inputs([listing, str(tmp_path / "data" / "suit" / "*.png")])
    names = [p.name for p in found]
    assert names == ["photo01.png", "photo00.png", "photo03.png", "zero.png"]  # no repeats
    assert len(expand_inputs([images])) == 6
    with pytest.raises(FileNotFoundError):
        expand_inputs([tmp_path / "nowhere"])
    Image.new("RGB", (8, 8)).save(tmp_path / "data" / ".hidden.png")
    assert len(expand_inputs([images])) == 6  # hidden files are left out of folders


@pytest.mark.slow
def test_the_hookviz_command_is_on_path_after_the_install():
    """The README's one-line install puts ``hookviz`` beside this Python (an editable install
    of the checkout, from requirements.txt)."""
    command = Path(sys.executable).parent / "hookviz"
    assert command.exists(), "pip install -r requirements.txt installs the hookviz command"
    shown = subprocess.run(
        [str(command), "cam", "--help"], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0 and "--out" in shown.stdout


@pytest.mark.slow
def test_pooled_features_are_the_layer_maps_mean_and_max(tmp_path, lite0):
    from hookviz.dataset import run_features

    images = _folder(tmp_path / "data", count=4)
    run_features(lite0, [images], tmp_path / "avg", layer="blocks.5", top_k=3, chunk_size=3)
    run_features(lite0, [images], tmp_path / "max", layer="blocks.5", pool="max", chunk_size=4)
    avg, top = hookviz.open_run(tmp_path / "avg"), hookviz.open_run(tmp_path / "max")
    table = avg.table
    assert avg.features.shape == (6, 192) and top.features.shape == (6, 192)
    for row, record in table.iterrows():
        if record["status"] != "ok":
            assert np.isnan(avg.features[row]).all() and np.isnan(top.features[row]).all()
            continue
        maps = hookviz.feature_maps(lite0, hookviz.load_image(record["path"]), "blocks.5")
        activations = maps.activations.numpy()
        # batched convolutions sum in another order: float32 round-off (float16 is the bar)
        mean, peak = activations.mean(axis=(1, 2)), activations.max(axis=(1, 2))
        np.testing.assert_allclose(avg.features[row], mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(top.features[row], peak, rtol=1e-5, atol=1e-5)
    # the strongest images of a channel, recomputed here from the stored features
    ok = np.where(table["status"] == "ok")[0]
    for channel in (0, 17, 191):
        column = avg.features[ok, channel]
        expected = [int(ok[i]) for i in np.argsort(-column, kind="stable")[:3]]
        found = avg.top_examples(channel)
        assert [row for row, _ in found] == expected
        assert [value for _, value in found] == pytest.approx(sorted(column, reverse=True)[:3])


def test_a_run_by_relevance_gives_each_images_channel_relevance_and_ranks_by_it(tmp_path, lite0):
    """``by="relevance"``: each row is ``hookviz.relevance``'s ``layer_relevance`` of the
    target for that image (recomputed here one image at a time), failures keep their place,
    and the top examples are those where the channel carries the most relevance."""
    from hookviz.dataset import run_features

    images = _folder(tmp_path / "data", count=4)
    run_features(
        lite0, [images], tmp_path / "rel", layer="blocks.5", top_k=2, by="relevance",
        target="suit", composite="epsilon_plus", chunk_size=3, batch_size=4,
    )  # fmt: skip
    run = hookviz.open_run(tmp_path / "rel")
    suit = lite0.class_index("suit")
    job = run.manifest["job"]
    assert job["by"] == "relevance" and job["target"] == "suit"
    assert "--by relevance --target suit --composite epsilon_plus" in run.resume_command()
    table = run.table
    assert run.features.shape == (6, 192)
    for row, record in table.iterrows():
        if record["status"] != "ok":
            assert np.isnan(run.features[row]).all()
            continue
        alone = hookviz.relevance(
            lite0, hookviz.load_image(record["path"]), suit, layer="blocks.5",
            composite="epsilon_plus",
        )  # fmt: skip
        scale = np.abs(alone.layer_relevance).max()
        np.testing.assert_allclose(run.features[row], alone.layer_relevance, rtol=0,
                                   atol=1e-4 * scale)  # fmt: skip
    ok = np.where(table["status"] == "ok")[0]
    for channel in (3, 100):
        column = run.features[ok, channel]
        expected = [int(ok[i]) for i in np.argsort(-column, kind="stable")[:2]]
        assert [r for r, _ in run.top_examples(channel)] == expected


def test_a_run_by_relevance_refuses_what_it_cannot_do(tmp_path, lite0):
    from hookviz.dataset import run_features

    images = _folder(tmp_path / "data", count=2)
    for options, message in (
        ({"pool": "none"}, "--pool none does not apply"),
        ({"target": "folder"}, "top1 or one class"),
        ({"target": "no such class"}, "no class named"),
        ({"composite": "lrp"}, "composite 'lrp' is not one of"),
    ):
        with pytest.raises(RunError, match=message):
            run_features(lite0, [images], tmp_path / "x", layer="blocks.5", by="relevance",
                         **options)  # fmt: skip
    with pytest.raises(RunError, match="a target applies to a run by relevance"):
        run_features(lite0, [images], tmp_path / "x", layer="blocks.5", target="suit")
    assert not (tmp_path / "x").exists()  # (refused before anything was written)


@pytest.mark.slow
def test_whole_maps_at_the_model_square_and_a_resumed_features_run(tmp_path, lite0):
    from dataclasses import replace

    from hookviz.dataset import run_features

    images = _folder(tmp_path / "data", count=3)
    run_features(lite0, [images], tmp_path / "whole", layer="blocks.6", pool="none", chunk_size=2)
    run = hookviz.open_run(tmp_path / "whole")
    assert run.features.shape == (5, 320, 7, 7)  # 224x224 in, whatever each photo's shape
    square = replace(lite0.preprocessing, fixed=True)
    first = run.table.iloc[0]
    maps = hookviz.feature_maps(
        lite0, square.to_tensor(hookviz.load_image(first["path"])), "blocks.6"
    )
    np.testing.assert_allclose(run.features[0], maps.activations.numpy(), rtol=1e-4, atol=1e-4)

    def stop_after_three(done: int, total: int) -> None:
        if done >= 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_features(
            lite0,
            [images],
            tmp_path / "again",
            layer="blocks.6",
            pool="none",
            chunk_size=2,
            progress=stop_after_three,
        )
    run_features(lite0, [images], tmp_path / "again", layer="blocks.6", pool="none", chunk_size=2)
    _assert_same_run(tmp_path / "whole", tmp_path / "again")
    with pytest.raises(RunError, match="no top-k"):
        run.top_examples(0)


def _resident_mb() -> float:
    import ctypes
    import gc

    # freed memory handed back first, so allocator fragmentation is not taken for a leak
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc")
@pytest.mark.slow
def test_resident_memory_does_not_grow_with_the_number_of_images(tmp_path, lite0):
    """Rows go to disk chunk by chunk and nothing per image is kept: memory after 80 images is
    what it was after 20 (a leak of one 200x160 image or its CAM graph per row would show as
    tens of MB here)."""
    folder = tmp_path / "many"
    folder.mkdir()
    sample = hookviz.sample_image().resize((160, 200))
    for index in range(80):
        sample.rotate(index % 90).save(folder / f"{index:03d}.png")
    seen: dict[int, float] = {}

    def measure(done: int, total: int) -> None:
        if done in (20, 80):
            seen[done] = _resident_mb()

    run_cam(lite0, [folder], tmp_path / "out", chunk_size=10, progress=measure)
    assert seen[80] - seen[20] < 10, seen


@pytest.mark.parametrize(("kind", "fmt"), [("jpeg", "JPEG"), ("png", "PNG")])
def test_overlay_pictures_are_the_cam_over_each_readable_image(tmp_path, lite0, kind, fmt):
    images = _folder(tmp_path / "data", count=2)
    run_cam(lite0, [images], tmp_path / "out", overlays=kind)
    run = hookviz.open_run(tmp_path / "out")
    for row, record in run.table.iterrows():
        path = run.overlay_path(row)
        if record["status"] != "ok":
            assert path is None
            continue
        picture = Image.open(path)
        assert picture.format == fmt and picture.size == (record["width"], record["height"])
        image = hookviz.load_image(record["path"])
        expected = hookviz.render.overlay(image, run.heatmap(row))
        difference = np.abs(np.asarray(picture, np.int16) - np.asarray(expected, np.int16))
        assert difference.mean() < (3 if kind == "jpeg" else 0.5)
    with pytest.raises(RunError, match="overlays"):
        run_cam(lite0, [images], tmp_path / "bad", overlays="gif")


@pytest.mark.slow
def test_channels_last_gives_the_same_run_and_is_part_of_its_identity(tmp_path, lite0):
    images = _folder(tmp_path / "data", count=3)
    plain = run_cam(lite0, [images], tmp_path / "plain", chunk_size=2)
    assert plain.ok == 3
    out = tmp_path / "channels_last"
    common = ("cam", str(images), "--model", "efficientnet_lite0", "--quiet", "--chunk-size", "2")
    done = _cli(*common, "--out", str(out), "--channels-last")
    assert done.returncode == 0, done.stderr
    fast, slow = hookviz.open_run(out), hookviz.open_run(tmp_path / "plain")
    assert fast.manifest["job"]["channels_last"] is True
    assert slow.manifest["job"]["channels_last"] is False
    assert list(fast.table["top1_index"]) == list(slow.table["top1_index"])
    assert np.allclose(fast.table["score"], slow.table["score"], atol=1e-3, equal_nan=True)
    for row in np.flatnonzero(fast.table["status"] == "ok"):
        r = np.corrcoef(fast.heatmap(row).ravel(), slow.heatmap(row).ravel())[0, 1]
        assert r >= 0.999, (row, r)
    refused = _cli(*common, "--out", str(out))  # not the same run: refused, nothing replaced
    assert refused.returncode == 2 and "holds another run" in refused.stderr


@pytest.mark.slow
def test_the_resume_command_of_a_run_over_absolute_paths_continues_it(tmp_path, lite0):
    """Many absolute inputs that no one folder gives in their order (two folders, the second
    first): the command names the run's own inputs.txt, and run as shown, from anywhere, it
    ends the interrupted run with the files of an uninterrupted one."""
    import json
    import shlex
    import shutil

    from hookviz.dataset import run_features

    images = _folder(tmp_path / "data", count=8)
    inputs = [images / "suit", images / "military_uniform"]
    run_features(lite0, inputs, tmp_path / "run", layer="blocks.5", top_k=2, chunk_size=4)
    shutil.copytree(tmp_path / "run", tmp_path / "whole")
    for part in ("table.csv", "top_k.npz", "cams/00002.npz", "table/00002.csv"):
        (tmp_path / "run" / part).unlink()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    manifest["status"] = "running"
    (tmp_path / "run" / "manifest.json").write_text(json.dumps(manifest))
    command = hookviz.open_run(tmp_path / "run").resume_command()
    words = shlex.split(command)  # one line: absolute inputs need no cd
    assert "\n" not in command and words[:2] == ["hookviz", "features"]
    assert words[2] == str((tmp_path / "run" / "inputs.txt").resolve())
    resumed = _cli(*words[1:], "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert "2 chunks were already done" in resumed.stdout
    _assert_same_run(tmp_path / "whole", tmp_path / "run")
    assert (tmp_path / "whole" / "top_k.npz").read_bytes() == (
        tmp_path / "run" / "top_k.npz"
    ).read_bytes()
