"""A run's folder on disk, written in chunks that are each complete or absent.

Layout of ``OUT``:

    manifest.json        what was asked (command, model, weights, layer, method, target,
                         preprocessing, versions), counts and status ("running", "complete"),
                         where relative input paths start (``inputs_root``)
    inputs.txt           the expanded inputs, one path per line: row i is line i
    table/NNNNN.csv      the rows of chunk N (path, status, error, sizes, top-1, class, score)
    cams/NNNNN.npz       chunk N's arrays and ``rows`` (n,), each row's input: for ``cam``, the
                         CAMs at the layer's resolution (``cams``, all maps flattened, float32;
                         ``shapes`` (n, 2)); for ``features``, ``features`` (n, C) or
                         (n, C, h, w), failed rows NaN
    top_k.npz            features runs with a top-k: ``rows`` and ``values``, (C, K) each
    table.csv            every row, in input order (written when the run is complete)
    summary.csv          evaluate runs, once complete: one row per method (the means)

An evaluate run (``hookviz evaluate``) has one row per image and method (``EVALUATE_COLUMNS``,
then its metrics and ``ms``), starting with ``image`` as the other tasks' runs do; its ``.npz``
holds ``metrics`` (rows, metrics) float64 instead of CAMs (NaN where a row failed).

A classifier's run has one row per input. A detector's has one per box it found (none above
``min_score``: one row of status ``"empty"``, so the image is still accounted for), a
segmenter's one per category present, an embedder's one per input; their tables start with
``image`` (the input's row in ``inputs.txt``) and have their own columns (``TASK_COLUMNS``), and
their ``.npz`` also holds ``frames`` (n, 2): the share of each CAM's grid that covers the image
(a detector pads its input). A chunk is always ``chunk_size`` inputs, whatever its rows.

A chunk is done when its ``.npz`` exists: it is written to a temporary name and renamed, after
its table part, so a crash, ``kill -9`` or Ctrl-C never leaves a half chunk that passes for done,
and the same command on the same ``OUT`` continues with the first missing chunk. CAMs are stored
at the layer's resolution (a 7x7 map is 196 bytes; full-resolution float heatmaps of ImageNet
would be hundreds of GB) and upsampled by the reader exactly as ``GradCAM.heatmap`` does.

Plain numpy ``.npz`` and CSV: a reader without hookviz opens them with numpy and the csv module.
"""

from __future__ import annotations

import csv
import json
import os
import platform
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from ..core.loaded import LoadedModel
from ..errors import HookvizError

FORMAT_VERSION = 1
COLUMNS = (
    "path",
    "status",
    "error",
    "width",
    "height",
    "top1_index",
    "top1_name",
    "top1_prob",
    "class_index",
    "class_name",
    "score",
    "label",
)
# The columns of the other tasks' runs: the input (``image``, its row in inputs.txt) and what
# each row explains (a box, a category, the similarity to the reference).
_INPUT_COLUMNS = ("image", "path", "status", "error", "width", "height")
TASK_COLUMNS = {
    "classification": COLUMNS,
    "detection": (*_INPUT_COLUMNS, "x0", "y0", "x1", "y1", "label", "name", "score"),
    "segmentation": (*_INPUT_COLUMNS, "category", "name", "share", "probability"),
    "embedding": (*_INPUT_COLUMNS, "similarity"),
}
# A row of a detection run whose image has no box above the run's min_score: no CAM.
EMPTY = "empty"
# An evaluate run's columns (``evaluate_columns``): one row per image and method, the image's
# top-1 and the class explained with their probabilities, then each metric asked for and the
# explanation's time in milliseconds.
EVALUATE_COLUMNS = (
    *_INPUT_COLUMNS,
    "method",
    "top1_index",
    "top1_name",
    "top1_prob",
    "class_index",
    "class_name",
    "class_prob",
    "label",
)


def evaluate_columns(metrics: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The table columns of an evaluate run that measured ``metrics``."""
    return (*EVALUATE_COLUMNS, *metrics, "ms")


def columns_of(job: dict) -> tuple[str, ...]:
    """The table columns of a run (classifier runs predate ``task`` in the job)."""
    if job.get("command") == "evaluate":
        return evaluate_columns(job["metrics"])
    return TASK_COLUMNS[job.get("task", "classification")]


class RunError(HookvizError):
    """A run that cannot start or continue (another run in ``--out``, a bad target)."""


def blank_row(path: Path, columns: tuple[str, ...] = COLUMNS) -> dict:
    """A table row with only its path: the rest is filled in as far as the image gets."""
    return {column: "" for column in columns} | {"path": str(path)}


OVERLAYS = ("none", "jpeg", "png")


def overlay_name(row: int, kind: str) -> str:
    return f"{row:07d}.{'jpg' if kind == 'jpeg' else 'png'}"


def task_overlay_name(image: int, part: int, kind: str) -> str:
    """The overlay of an image's ``part``-th row, in a run with several rows per image (a
    detector's boxes, a segmenter's categories): named by the image and its place there, so
    a redone chunk writes the same files."""
    return f"{image:07d}-{part:03d}.{'jpg' if kind == 'jpeg' else 'png'}"


def write_top_k(out: Path, total: int, chunk_size: int, k: int, pool: str) -> None:
    """The ``k`` strongest rows of each channel, from the stored features (so a resumed run
    finds exactly what an uninterrupted one does)."""
    values = []
    for number in range(-(-total // chunk_size)):
        with np.load(chunk_path(out, number)) as chunk:
            features = chunk["features"]
        if pool == "none":
            features = features.reshape(*features.shape[:2], -1).mean(axis=2)
        values.append(features)
    scores = np.concatenate(values) if values else np.zeros((0, 0), np.float32)
    scores = np.where(np.isnan(scores), -np.inf, scores)  # failed rows never win
    k = min(k, scores.shape[0])
    # stable: among equal activations the earlier row first
    order = np.argsort(-scores, axis=0, kind="stable")[:k].T  # (C, k)
    strongest = np.take_along_axis(scores.T, order, axis=1)
    temporary = out / "top_k.tmp"
    with temporary.open("wb") as file:
        np.savez(file, rows=order.astype(np.int64), values=strongest.astype(np.float32))
    os.replace(temporary, out / "top_k.npz")


def prepare(out: Path, job: dict, paths: list[Path], overwrite: bool) -> int:
    """Make ``out`` ready; the number of chunks already done (for a resumed run)."""
    listed = "\n".join(str(p) for p in paths) + ("\n" if paths else "")
    manifest = out / "manifest.json"
    if manifest.exists() and not overwrite:
        before = json.loads(manifest.read_text(encoding="utf-8"))
        # runs written before --crop, --bf16 and --size-step existed were whole-image float32 runs
        same = {"crop": "none", "bf16": False, "size_step": 1} | before.get("job", {}) == job
        same_inputs = (out / "inputs.txt").read_text(encoding="utf-8") == listed
        if not (same and same_inputs):
            raise RunError(
                f"{out} holds another run ({before.get('job', {}).get('command', '?')} of "
                f"{before.get('job', {}).get('model', '?')}, or other inputs): pick another "
                "--out, or pass --overwrite to replace it"
            )
        started_in = (before.get("inputs_root") or {}).get("absolute")
        relative = any(not path.is_absolute() for path in paths)
        if relative and started_in and Path(started_in) != Path.cwd().resolve():
            raise RunError(
                f"the run in {out} was started in {started_in} with relative inputs: the same "
                "paths here name other files. Continue it from that folder."
            )
        return sum(1 for _ in (out / "cams").glob("*.npz"))
    if out.exists() and any(out.iterdir()) and not overwrite and not manifest.exists():
        raise RunError(f"{out} is not empty and holds no hookviz run: pick another --out")
    if overwrite and out.exists():
        for sub in ("cams", "table"):
            for stale in (out / sub).glob("*") if (out / sub).exists() else ():
                stale.unlink()
        for name in ("manifest.json", "table.csv", "inputs.txt", "summary.csv"):
            (out / name).unlink(missing_ok=True)
    (out / "cams").mkdir(parents=True, exist_ok=True)
    (out / "table").mkdir(parents=True, exist_ok=True)
    write_text(out / "inputs.txt", listed)
    return 0


def chunk_path(out: Path, number: int) -> Path:
    return out / "cams" / f"{number:05d}.npz"


def ragged_chunk(arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
    """CAMs of different sizes: all values flattened, and each map's shape."""
    shapes = np.array([cam.shape for cam in arrays], np.int32).reshape(-1, 2)
    flat = np.concatenate([cam.ravel() for cam in arrays]) if arrays else np.zeros(0, np.float32)
    return {"cams": flat, "shapes": shapes}


def framed_chunk(arrays: list[tuple[np.ndarray, tuple[float, float]]]) -> dict[str, np.ndarray]:
    """CAMs of different sizes with each one's frame (the share of its grid over the image)."""
    frames = np.array([frame for _, frame in arrays], np.float32).reshape(-1, 2)
    return ragged_chunk([cam for cam, _ in arrays]) | {"frames": frames}


def stacked_chunk(arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
    return {"features": np.stack(arrays).astype(np.float32)}


def write_chunk(
    out: Path,
    number: int,
    start: int,
    rows: list,
    arrays: list,
    write,
    columns: tuple[str, ...] = COLUMNS,
) -> None:
    table = out / "table" / f"{number:05d}.csv"
    write_csv(table, rows, columns)
    target = chunk_path(out, number)
    temporary = target.with_suffix(".tmp")
    if "image" in columns:  # several rows per input: each row's own input
        inputs = np.array([int(row["image"]) for row in rows], np.int64)
    else:
        inputs = np.arange(start, start + len(rows))
    with temporary.open("wb") as file:
        np.savez(file, rows=inputs, **write(arrays))
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, target)  # the chunk is done from this moment


def merge_tables(
    out: Path, chunks: int, write: bool = True, columns: tuple[str, ...] = COLUMNS
) -> tuple[list[tuple[str, str]], int]:
    """Join the chunks' tables into ``table.csv`` (streamed: a million rows never sit in
    memory); the (path, reason) of every failed row, and the number of rows."""
    errors: list[tuple[str, str]] = []
    count = 0
    merged = out / "table.csv"
    temporary = merged.with_suffix(".tmp")
    with ExitStack() as stack:
        writer = None
        if write:
            target = stack.enter_context(temporary.open("w", newline="", encoding="utf-8"))
            writer = csv.DictWriter(target, fieldnames=columns)
            writer.writeheader()
        for number in range(chunks):
            part = out / "table" / f"{number:05d}.csv"
            with part.open(newline="", encoding="utf-8") as file:
                for row in csv.DictReader(file):
                    count += 1
                    if row["status"] == "error":
                        errors.append((row["path"], row["error"]))
                    if writer is not None:
                        writer.writerow(row)
    if write:
        os.replace(temporary, merged)
    return errors, count


def manifest(loaded: LoadedModel, job: dict, status: str, out: Path) -> dict:
    import torch

    prep = loaded.preprocessing
    return {
        "format": FORMAT_VERSION,
        "job": job,
        "status": status,
        "inputs_root": inputs_root(out),
        "preprocessing": {
            "size": prep.size,
            "mean": list(prep.mean),
            "std": list(prep.std),
            "interpolation": prep.interpolation,
            "fixed": prep.fixed,
            "whole_image": job.get("crop", "none") == "none",
            "crop_fraction": prep.crop_fraction,
        },
        "classes": loaded.num_classes,
        "loaded_from": loaded.loaded_from,
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
    }


def inputs_root(out: Path) -> dict:
    """Where the run's relative input paths start: the folder the run was started in, as an
    absolute path and as seen from the run's folder (``from_run``), so the run's images are
    found again from another working directory, and after the data and its runs move
    together."""
    start = Path.cwd().resolve()
    return {"absolute": str(start), "from_run": os.path.relpath(start, out.resolve())}


def write_csv(path: Path, rows: list[dict], columns: tuple[str, ...] = COLUMNS) -> None:
    temporary = path.with_suffix(".tmp")
    with temporary.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(temporary, path)


def write_json(path: Path, value: dict) -> None:
    write_text(path, json.dumps(value, indent=2) + "\n")


def write_bytes(path: Path, data: bytes) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def write_text(path: Path, text: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
