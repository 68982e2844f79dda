"""``hookviz evaluate``: the faithfulness of each method over a folder, through the real
command line (real processes, files on disk, a seeded untrained ResNet-18, no network): each row
is ``hookviz.faithfulness`` of that image, the summary is the mean of the rows, a run stopped
with Ctrl-C resumes to the tables of an uninterrupted one without redoing its chunks, a bad
method name is one line and exit status 2, and ``hookviz.open_run`` reads the run."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hookviz
from hookviz.dataset import RunError, run_evaluate

from .held_input import ctrl_c_as_in_a_terminal, held, held_input, interrupted
from .processes import stop, wait_for_chunks
from .test_dataset_run import ROOT, _cli

METHODS = ("gradcam", "saliency")  # a CAM method (grad_cam), a pixel attribution (attribute)
# (the cheapest: two forward passes; the others run the same way, at dozens of passes each)
METRICS = ("average_drop", "increase_in_confidence")
MODEL = ("--model", "resnet18", "--weights", "untrained")


def _images(root: Path) -> Path:
    """Two small photos of different sizes and one unreadable file (sorted: photo0, photo1,
    zero.png). Square: the model is fed 224 x 224, its least."""
    root.mkdir(parents=True)
    sample = hookviz.sample_image()
    for index in range(2):
        sample.resize((48 + 16 * index, 48 + 16 * index)).rotate(7 * index).save(
            root / f"photo{index}.png"
        )
    (root / "zero.png").write_bytes(b"")
    return root


def _command(images: Path, listing: Path) -> list[str]:
    return [
        "evaluate",
        str(images),
        str(listing),
        *MODEL,
        "--methods",
        ",".join(METHODS),
        "--metrics",
        ",".join(METRICS),
        "--chunk-size",
        "2",
        "--quiet",
    ]


def _rows(path: Path, without: tuple[str, ...] = ("ms",)) -> list[dict]:
    """A CSV's rows without the columns that are timings (the rest must match exactly)."""
    with path.open(newline="", encoding="utf-8") as file:
        return [{k: v for k, v in row.items() if k not in without} for row in csv.DictReader(file)]


@pytest.mark.slow
def test_an_interrupted_evaluate_run_resumes_to_the_uninterrupted_tables(tmp_path, resnet18):
    images = _images(tmp_path / "data")
    # the last input (chunk 1 of 0-1) is held while the run is stopped: it is provably mid-way
    picture, listing = held_input(tmp_path, hookviz.sample_image().resize((72, 72)))
    command = _command(images, listing)
    whole = _cli(*command, "--out", str(tmp_path / "whole"))
    assert whole.returncode == 0, whole.stderr
    assert "4 images, 3 done, 1 failed, 8 rows" in whole.stdout and "zero.png" in whole.stdout
    assert "Average Drop %" in whole.stdout and "Increase in Conf. %" in whole.stdout

    chunks = tmp_path / "stopped" / "cams"
    with held(picture):
        process = subprocess.Popen(
            [sys.executable, "-m", "hookviz", *command, "--out", str(tmp_path / "stopped")],
            cwd=ROOT,
            env={**os.environ, "HOOKVIZ_OFFLINE": "1"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=ctrl_c_as_in_a_terminal,
        )
        try:
            assert wait_for_chunks(chunks, 1, process), "the run wrote no chunk"
            stderr = interrupted(process, picture)  # Ctrl-C
        finally:
            stop(process)
    assert process.returncode == 130, stderr
    assert "run the same command again" in stderr
    done = {path.name: path.stat() for path in chunks.glob("*.npz")}
    assert sorted(done) == ["00000.npz"]
    partial = hookviz.open_run(tmp_path / "stopped")
    assert not partial.complete and len(partial.table) == 2 * len(METHODS)
    assert list(partial.summary["images"]) == [2] * len(METHODS)  # from the rows done so far

    resumed = _cli(*command, "--out", str(tmp_path / "stopped"))
    assert resumed.returncode == 0, resumed.stderr
    assert "1 chunks were already done" in resumed.stdout
    for name, before in done.items():  # kept, not computed again
        after = (chunks / name).stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    for table in ("table.csv", "summary.csv"):
        assert _rows(tmp_path / "stopped" / table) == _rows(tmp_path / "whole" / table)
    for name in ("00000.npz", "00001.npz"):
        with np.load(tmp_path / "whole" / "cams" / name) as a, np.load(chunks / name) as b:
            np.testing.assert_array_equal(a["metrics"], b["metrics"])
            np.testing.assert_array_equal(a["rows"], b["rows"])

    _check_the_run(tmp_path / "whole", resnet18)


def _check_the_run(out: Path, loaded: hookviz.LoadedModel) -> None:
    """What open_run reads of a complete run: a row per image and method, each the metrics
    ``hookviz.faithfulness`` gives for that image; a summary per method, the rows' means."""
    run = hookviz.open_run(out)
    assert run.kind == "evaluate" and run.complete
    table = run.table
    assert len(table) == 4 * len(METHODS)
    assert list(table["method"][:4]) == [*METHODS, *METHODS]  # image by image, methods in order
    failed = table[table["status"] == "error"]
    assert set(failed["path"].map(lambda p: Path(p).name)) == {"zero.png"}
    assert len(failed) == len(METHODS) and all(failed["error"].str.len() > 0)
    ok = table[table["status"] == "ok"]
    assert (ok["class_index"] == ok["top1_index"]).all()  # the default target: the top-1
    assert (ok["ms"] > 0).all()

    summary = run.summary
    assert list(summary["method"]) == list(METHODS)
    for _, entry in summary.iterrows():
        rows = ok[ok["method"] == entry["method"]]
        assert entry["images"] == len(rows) == 3 and entry["failed"] == 1
        assert entry["average_drop_pct"] == pytest.approx(100 * rows["average_drop"].mean())
        assert entry["increase_in_confidence_pct"] == pytest.approx(
            100 * rows["increase_in_confidence"].mean()
        )
        assert entry["ms"] == pytest.approx(rows["ms"].mean())

    # an independent path: the library's own calls on the image file
    for row in (0, 1):  # photo0 by gradcam (grad_cam), by saliency (attribute)
        record = table.iloc[row]
        image = hookviz.load_image(record["path"])
        index = int(record["class_index"])
        if record["method"] == "gradcam":
            explanation = hookviz.grad_cam(loaded, image, target=index, method="gradcam")
        else:
            explanation = hookviz.attribute(loaded, image, "saliency", index)
        expected = hookviz.faithfulness(loaded, image, explanation, index, METRICS)
        for name in METRICS:
            assert record[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-9), name
    with pytest.raises(RunError, match="keeps the metrics"):
        run.heatmap(0)
    assert run.resume_command().split("\n")[-1].startswith("hookviz evaluate ")


@pytest.mark.slow
def test_a_bad_method_name_is_one_line_and_exit_status_2(tmp_path):
    images = _images(tmp_path / "data")
    out = tmp_path / "out"
    answer = _cli("evaluate", str(images), *MODEL, "--methods", "gradcam,nosuch", "--out", str(out))
    assert answer.returncode == 2 and answer.stdout == ""
    assert "Traceback" not in answer.stderr
    lines = answer.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hookviz: unknown method 'nosuch'")
    assert "saliency" in lines[0] and "gradcam++" in lines[0]  # it names the choices
    assert not out.exists()  # refused before anything was written


@pytest.mark.slow
def test_bad_options_and_another_run_in_out_are_refused(tmp_path, resnet18):
    images = _images(tmp_path / "data")
    with pytest.raises(RunError, match="unknown metric 'nope'"):
        run_evaluate(resnet18, [images], tmp_path / "a", metrics=["nope"])
    with pytest.raises(RunError, match="out of range"):
        run_evaluate(resnet18, [images], tmp_path / "b", target="5000")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    # a finished run in out; another command on it is refused, unless --overwrite
    cheap = {"metrics": "average_drop", "limit": 1}
    first = run_evaluate(resnet18, [images], tmp_path / "c", methods="centre", **cheap)
    assert [entry["method"] for entry in first.methods] == ["centre"]
    with pytest.raises(RunError, match="another run"):
        run_evaluate(resnet18, [images], tmp_path / "c", methods="random", **cheap)
    assert hookviz.open_run(tmp_path / "c").manifest["job"]["methods"] == ["centre"]
    run_evaluate(resnet18, [images], tmp_path / "c", methods="random", overwrite=True, **cheap)
    assert list(hookviz.open_run(tmp_path / "c").summary["method"]) == ["random"]


def test_every_metric_has_its_place_in_the_tables():
    from hookviz.dataset import evaluate

    assert sorted(evaluate.ORDER) == sorted(hookviz.FAITHFULNESS_METRICS)  # (each in a table)
