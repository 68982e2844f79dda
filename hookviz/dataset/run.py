"""A CAM run over many images, written in chunks that are each complete or absent.

Layout of ``OUT``:

    manifest.json        what was asked (command, model, weights, layer, method, target,
                         preprocessing, versions), counts and status ("running", "complete")
    inputs.txt           the expanded inputs, one path per line: row i is line i
    table/NNNNN.csv      the rows of chunk N (path, status, error, sizes, top-1, class, score)
    cams/NNNNN.npz       chunk N's arrays and ``rows`` (n,): for ``cam``, the CAMs at the layer's
                         resolution (``cams``, all maps flattened, float32; ``shapes`` (n, 2));
                         for ``features``, ``features`` (n, C) or (n, C, h, w), failed rows NaN
    top_k.npz            features runs with a top-k: ``rows`` and ``values``, (C, K) each
    table.csv            every row, in input order (written when the run is complete)

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
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.layers import default_layer, layer_shapes, layer_table
from ..core.loaded import LoadedModel
from ..core.methods import check_method
from ..errors import HookvizError
from . import distributed
from .batches import Settings, crop_fractions, explain_records, heatmap_on_image, layer_records
from .decode import Decoding, decoded
from .sources import expand_inputs

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


class RunError(HookvizError):
    """A run that cannot start or continue (another run in ``--out``, a bad target)."""


@dataclass(frozen=True)
class RunSummary:
    """What a finished (or resumed) run did."""

    out: Path
    rows: int
    ok: int
    errors: list[tuple[str, str]]
    chunks_done_before: int
    seconds: float


def run_cam(
    loaded: LoadedModel,
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    weights: str = "pretrained",
    layer: str | None = None,
    method: str = "gradcam",
    target: str = "top1",
    overlays: str = "none",
    crop: str = "none",
    bf16: bool = False,
    batch_size: int = 32,
    workers: int = 0,
    size_step: int = 1,
    chunk_size: int = 64,
    limit: int | None = None,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> RunSummary:
    """The CAM of every image ``inputs`` name, written under ``out`` (see the module's notes).

    Args:
        loaded: the model.
        inputs: files, folders (recursive), globs or text files listing paths.
        out: the run's folder; the same call on it again continues an interrupted run.
        weights: recorded in the manifest (``"pretrained"`` or ``"untrained"``).
        layer: the layer (default: the model's default layer).
        method: the CAM method.
        target: ``"top1"``, a class index, a class name, or ``"folder"`` (each image's parent
            folder names its class, recorded as its ``label``).
        overlays: ``"none"`` (default), ``"jpeg"`` or ``"png"``: also write each image's
            overlay, at most 1024 pixels on its long side, as ``overlays/ROW.jpg`` / ``.png``
            (at dataset scale the pictures cost more than the CAM: PNG most).
        crop: ``"none"`` (default): each image whole, as in the page; ``"center"``: the model's
            standard evaluation transform (its centre crop, ``Preprocessing.crop_box``); the
            heatmap is then 0 outside the crop.
        bf16: run the network under bfloat16 autocast (faster on recent GPUs and CPUs with
            bf16 units; the CAM maths stay in float32).
        batch_size: images per forward pass (only images fed at the same size share one, so
            results are those of each image alone).
        workers: processes that decode the next images while the model runs (0: decode here).
        size_step: round each input's long side to a multiple of this (1, the default: every
            image at its own aspect ratio). Photos of nearly the same shape then share batches;
            the aspect ratio changes by at most ``size_step / 2`` pixels over the long side.
        chunk_size: images per chunk (the unit of resuming).
        limit: only the first ``limit`` inputs.
        overwrite: start afresh in an ``out`` that holds another run.
        progress: called with (rows done, rows in all) after each image.

    Raises:
        RunError: ``out`` holds a different run (without ``overwrite``), or a target that the
            model has no class for.
    """
    started = time.perf_counter()
    method = check_method(method)
    if overlays not in OVERLAYS:
        raise RunError(f"overlays {overlays!r} is not one of {', '.join(OVERLAYS)}")
    _check_crop(crop)
    out = Path(out)
    paths = _inputs(inputs, limit)
    layer = layer_table(loaded).get(layer).name if layer else default_layer(loaded)
    fixed_target = _fixed_target(loaded, target)
    job = {
        "command": "cam",
        "model": loaded.name,
        "weights": weights,
        "layer": layer,
        "method": method,
        "target": target,
        "overlays": overlays,
        "crop": crop,
        "bf16": bool(bf16),
        "size_step": int(size_step),
        "chunk_size": int(chunk_size),
        "inputs": len(paths),
        "channels_last": loaded.channels_last,
    }
    settings = Settings(layer, batch_size, bf16)
    decoding = Decoding(
        loaded.preprocessing,
        crop=crop == "center",
        overlay=overlays != "none",
        size_step=max(1, int(size_step)),
    )

    def work(records: list[dict], advance) -> tuple[list[dict], list[np.ndarray]]:
        return _explain_chunk(
            loaded, records, method, target, fixed_target, settings, overlays, crop, out, advance
        )

    return _run_chunks(
        loaded,
        job,
        paths,
        out,
        overwrite,
        progress,
        decoding,
        workers,
        work,
        _ragged_chunk,
        started,
    )


def run_features(
    loaded: LoadedModel,
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    layer: str,
    weights: str = "pretrained",
    pool: str = "avg",
    top_k: int = 0,
    crop: str = "none",
    bf16: bool = False,
    batch_size: int = 32,
    workers: int = 0,
    size_step: int = 1,
    chunk_size: int = 64,
    limit: int | None = None,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> RunSummary:
    """A layer's features for every image ``inputs`` name, written under ``out``.

    Args:
        pool: ``"avg"`` (default) or ``"max"``: one value per channel, each image fed whole at
            its aspect ratio (as in the page); ``"none"``: the whole (C, h, w) maps, each image
            resized whole to the model's native square so every map has the same shape.
        top_k: also find the ``top_k`` images that excite each channel most (by the pooled
            value; the mean over the map with ``pool="none"``), written when the run is complete.
        crop: ``"center"``: the model's standard centre crop instead of the whole image.
        (the rest as in ``run_cam``)
    """
    started = time.perf_counter()
    if pool not in POOLS:
        raise RunError(f"pool {pool!r} is not one of {', '.join(POOLS)}")
    _check_crop(crop)
    out = Path(out)
    paths = _inputs(inputs, limit)
    table = layer_table(loaded)
    layer = table.get(layer).name
    size = loaded.preprocessing.size
    channels, height, width = layer_shapes(loaded, size, size)[layer]
    shape = (channels,) if pool != "none" else (channels, height, width)
    job = {
        "command": "features",
        "model": loaded.name,
        "weights": weights,
        "layer": layer,
        "pool": pool,
        "top_k": int(top_k),
        "crop": crop,
        "bf16": bool(bf16),
        "size_step": int(size_step),
        "chunk_size": int(chunk_size),
        "inputs": len(paths),
        "channels_last": loaded.channels_last,
    }
    settings = Settings(layer, batch_size, bf16)
    decoding = Decoding(
        loaded.preprocessing,
        crop=crop == "center",
        square=pool == "none",
        size_step=max(1, int(size_step)),
    )

    def work(records: list[dict], advance) -> tuple[list[dict], list[np.ndarray]]:
        values = layer_records(loaded, records, pool, settings, advance)
        rows, arrays = [], []
        for record, value in zip(records, values, strict=True):
            row = _record_row(record)
            if isinstance(value, str):
                row.update(status="error", error=value)
                value = np.full(shape, np.nan, np.float32)
            rows.append(row)
            arrays.append(value)
        return rows, arrays

    summary = _run_chunks(
        loaded,
        job,
        paths,
        out,
        overwrite,
        progress,
        decoding,
        workers,
        work,
        _stacked_chunk,
        started,
    )
    if top_k > 0 and distributed.world()[0] == 0:
        _write_top_k(out, len(paths), chunk_size, int(top_k), pool)
    distributed.barrier()
    return summary


POOLS = ("avg", "max", "none")


def _run_chunks(
    loaded, job, paths, out, overwrite, progress, decoding, workers, work, write, started
) -> RunSummary:
    chunk_size = job["chunk_size"]
    rank, size = distributed.world()
    refusal = None
    if rank == 0:
        try:
            done_before = _prepare(out, job, paths, overwrite)
            _write_json(out / "manifest.json", _manifest(loaded, job, status="running"))
        except RunError as exc:
            refusal = str(exc)
    refusal = distributed.from_rank0(refusal)
    if refusal is not None:
        raise RunError(refusal)
    if rank != 0:
        done_before = len(list((out / "cams").glob("*.npz")))
    total = len(paths)
    chunks = range(0, total, chunk_size)
    if job.get("overlays", "none") != "none":
        (out / "overlays").mkdir(exist_ok=True)
    # fixed units: chunk N belongs to rank N mod size, whatever ran before
    pending = [
        (number, start)
        for number, start in enumerate(chunks)
        if number % size == rank and not _chunk_path(out, number).exists()
    ]
    done = [total - sum(min(chunk_size, total - start) for _, start in pending) * size]

    def advance(count: int) -> None:
        done[0] = min(total, done[0] + count * size)  # this rank's share stands for all
        if progress is not None and count:
            progress(done[0], total)

    files = [
        (row, str(paths[row]))
        for _, start in pending
        for row in range(start, min(start + chunk_size, total))
    ]
    records = decoded(files, decoding, workers)
    for number, start in pending:
        count = min(start + chunk_size, total) - start
        chunk = [next(records) for _ in range(count)]
        rows, arrays = work(chunk, advance)
        _write_chunk(out, number, start, rows, arrays, write)
    distributed.barrier()  # every chunk is on disk
    errors = _merge_tables(out, len(chunks), write=rank == 0)
    if rank == 0:
        manifest = _manifest(loaded, job, status="complete")
        manifest["counts"] = {"rows": total, "ok": total - len(errors), "error": len(errors)}
        _write_json(out / "manifest.json", manifest)
    return RunSummary(
        out, total, total - len(errors), errors, done_before, time.perf_counter() - started
    )


def _write_top_k(out: Path, total: int, chunk_size: int, k: int, pool: str) -> None:
    """The ``k`` strongest rows of each channel, from the stored features (so a resumed run
    finds exactly what an uninterrupted one does)."""
    values = []
    for number in range(-(-total // chunk_size)):
        with np.load(_chunk_path(out, number)) as chunk:
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


def _fixed_target(loaded: LoadedModel, target: str) -> int | None:
    if target in ("top1", "folder"):
        return None
    if target.lstrip("-").isdigit():
        index = int(target)
        if not 0 <= index < loaded.num_classes:
            raise RunError(
                f"target {index} is out of range: {loaded.name!r} has classes 0 to "
                f"{loaded.num_classes - 1}"
            )
        return index
    try:
        return loaded.class_index(target)
    except HookvizError as exc:
        raise RunError(f"{exc}; give top1, folder, a class index or a class name") from exc


def _explain_chunk(
    loaded: LoadedModel,
    records: list[dict],
    method: str,
    target: str,
    fixed: int | None,
    settings: Settings,
    overlays: str,
    crop: str,
    out: Path,
    advance,
) -> tuple[list[dict], list[np.ndarray]]:
    rows = [_record_row(record) for record in records]
    targets: list[int | None] = []
    for record, row in zip(records, rows, strict=True):
        row["label"] = Path(record["path"]).parent.name if target == "folder" else ""
        index = fixed
        if target == "folder" and not record["error"]:
            try:
                index = _folder_class(loaded, row["label"])
            except RunError as exc:
                record["error"] = str(exc)
        targets.append(index)
    results = explain_records(loaded, records, targets, method, settings, advance)
    arrays = []
    for record, row, result in zip(records, rows, results, strict=True):
        if isinstance(result, str):
            # the reason in this row; the run goes on and no other image moves into this row
            row.update(status="error", error=result)
            arrays.append(np.zeros((0, 0), np.float32))
            continue
        values, cam = result
        row.update(
            status="ok",
            top1_index=values["top1_index"],
            top1_name=loaded.class_name(values["top1_index"]),
            top1_prob=f"{values['top1_prob']:.6g}",
            class_index=values["class_index"],
            class_name=loaded.class_name(values["class_index"]),
            score=f"{values['score']:.6g}",
        )
        arrays.append(cam.astype(np.float32))
        if overlays != "none":
            box = crop_fractions(loaded.preprocessing, record["width"], record["height"], crop)
            target_path = out / "overlays" / overlay_name(record["row"], overlays)
            _write_overlay(target_path, record["picture"], cam, box, overlays)
    return rows, arrays


def _record_row(record: dict) -> dict:
    """A table row from a decoded record: its path, its size when it was read, its reason
    when not (the rest is filled in by the model's side)."""
    row = _blank_row(Path(record["path"]))
    if record["width"]:
        row["width"], row["height"] = record["width"], record["height"]
    row["status"], row["error"] = ("error", record["error"]) if record["error"] else ("ok", "")
    return row


def _inputs(inputs: Sequence[str | os.PathLike], limit: int | None) -> list[Path]:
    paths = expand_inputs(inputs)
    return paths if limit is None else paths[: max(0, int(limit))]


def _blank_row(path: Path) -> dict:
    """A table row with only its path: the rest is filled in as far as the image gets."""
    return {column: "" for column in COLUMNS} | {"path": str(path)}


OVERLAYS = ("none", "jpeg", "png")


def overlay_name(row: int, kind: str) -> str:
    return f"{row:07d}.{'jpg' if kind == 'jpeg' else 'png'}"


def _write_overlay(target: Path, pixels: np.ndarray, cam: np.ndarray, box, kind: str) -> None:
    """The overlay picture of one row, written before its chunk is marked done (a redone chunk
    writes it again, the same)."""
    from PIL import Image

    from .. import render  # deferred: matplotlib, only when pictures are asked for

    picture = Image.fromarray(pixels)
    heat = heatmap_on_image(cam, (picture.height, picture.width), box)
    blended = render.overlay(picture, heat)
    data = render.jpeg_bytes(blended) if kind == "jpeg" else render.png_bytes(blended)
    _write_bytes(target, data)


def _check_crop(crop: str) -> None:
    if crop not in CROPS:
        raise RunError(f"crop {crop!r} is not one of {', '.join(CROPS)}")


CROPS = ("none", "center")


def _folder_class(loaded: LoadedModel, folder: str) -> int:
    for candidate in (folder, folder.replace("_", " ")):
        try:
            return loaded.class_index(candidate)
        except HookvizError:
            continue
    raise RunError(f"the folder name {folder!r} is not a class of {loaded.name!r}")


def _prepare(out: Path, job: dict, paths: list[Path], overwrite: bool) -> int:
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
        return sum(1 for _ in (out / "cams").glob("*.npz"))
    if out.exists() and any(out.iterdir()) and not overwrite and not manifest.exists():
        raise RunError(f"{out} is not empty and holds no hookviz run: pick another --out")
    if overwrite and out.exists():
        for sub in ("cams", "table"):
            for stale in (out / sub).glob("*") if (out / sub).exists() else ():
                stale.unlink()
        for name in ("manifest.json", "table.csv", "inputs.txt"):
            (out / name).unlink(missing_ok=True)
    (out / "cams").mkdir(parents=True, exist_ok=True)
    (out / "table").mkdir(parents=True, exist_ok=True)
    _write_text(out / "inputs.txt", listed)
    return 0


def _chunk_path(out: Path, number: int) -> Path:
    return out / "cams" / f"{number:05d}.npz"


def _ragged_chunk(arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
    """CAMs of different sizes: all values flattened, and each map's shape."""
    shapes = np.array([cam.shape for cam in arrays], np.int32).reshape(-1, 2)
    flat = np.concatenate([cam.ravel() for cam in arrays]) if arrays else np.zeros(0, np.float32)
    return {"cams": flat, "shapes": shapes}


def _stacked_chunk(arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
    return {"features": np.stack(arrays).astype(np.float32)}


def _write_chunk(out: Path, number: int, start: int, rows: list, arrays: list, write) -> None:
    table = out / "table" / f"{number:05d}.csv"
    _write_csv(table, rows)
    target = _chunk_path(out, number)
    temporary = target.with_suffix(".tmp")
    with temporary.open("wb") as file:
        np.savez(file, rows=np.arange(start, start + len(rows)), **write(arrays))
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, target)  # the chunk is done from this moment


def _merge_tables(out: Path, chunks: int, write: bool = True) -> list[tuple[str, str]]:
    """Join the chunks' tables into ``table.csv`` (streamed: a million rows never sit in
    memory); the (path, reason) of every failed row."""
    errors: list[tuple[str, str]] = []
    merged = out / "table.csv"
    temporary = merged.with_suffix(".tmp")
    with ExitStack() as stack:
        writer = None
        if write:
            target = stack.enter_context(temporary.open("w", newline="", encoding="utf-8"))
            writer = csv.DictWriter(target, fieldnames=COLUMNS)
            writer.writeheader()
        for number in range(chunks):
            part = out / "table" / f"{number:05d}.csv"
            with part.open(newline="", encoding="utf-8") as file:
                for row in csv.DictReader(file):
                    if row["status"] == "error":
                        errors.append((row["path"], row["error"]))
                    if writer is not None:
                        writer.writerow(row)
    if write:
        os.replace(temporary, merged)
    return errors


def _manifest(loaded: LoadedModel, job: dict, status: str) -> dict:
    import torch

    prep = loaded.preprocessing
    return {
        "format": FORMAT_VERSION,
        "job": job,
        "status": status,
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


def _write_csv(path: Path, rows: list[dict]) -> None:
    temporary = path.with_suffix(".tmp")
    with temporary.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(temporary, path)


def _write_json(path: Path, value: dict) -> None:
    _write_text(path, json.dumps(value, indent=2) + "\n")


def _write_bytes(path: Path, data: bytes) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _write_text(path: Path, text: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
