"""A CAM run over many images, written in chunks that are each complete or absent.

Layout of ``OUT``:

    manifest.json        what was asked (command, model, weights, layer, method, target,
                         preprocessing, versions), counts and status ("running", "complete")
    inputs.txt           the expanded inputs, one path per line: row i is line i
    table/NNNNN.csv      the rows of chunk N (path, status, error, sizes, top-1, class, score)
    cams/NNNNN.npz       the CAMs of chunk N at the layer's resolution: ``cams`` (all maps of the
                         chunk, flattened, float32), ``shapes`` (n, 2) and ``rows`` (n,)
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.forward_pass import ForwardPass
from ..core.layers import default_layer, layer_table
from ..core.loaded import LoadedModel
from ..core.methods import check_method
from ..errors import HookvizError
from ..images import load_image
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
        chunk_size: images per chunk (the unit of resuming).
        limit: only the first ``limit`` inputs.
        overwrite: start afresh in an ``out`` that holds another run.
        progress: called with (rows done, rows in all) after each image.

    Raises:
        RunError: ``out`` holds a different run (without ``overwrite``), or a target that the
            model has no class for.
    """
    started = time.perf_counter()
    check_method(method)
    out = Path(out)
    paths = expand_inputs(inputs)
    if limit is not None:
        paths = paths[: max(0, int(limit))]
    layer = layer_table(loaded).get(layer).name if layer else default_layer(loaded)
    fixed_target = _fixed_target(loaded, target)
    job = {
        "command": "cam",
        "model": loaded.name,
        "weights": weights,
        "layer": layer,
        "method": method,
        "target": target,
        "chunk_size": int(chunk_size),
        "inputs": len(paths),
    }
    done_before = _prepare(out, job, paths, overwrite)
    manifest = _manifest(loaded, job, status="running")
    _write_json(out / "manifest.json", manifest)
    total = len(paths)
    chunks = range(0, total, chunk_size)
    done_rows = done_before * chunk_size
    for number, start in enumerate(chunks):
        if _chunk_path(out, number).exists():
            continue
        rows, cams = [], []
        for index in range(start, min(start + chunk_size, total)):
            row, cam = _explain(loaded, paths[index], layer, method, target, fixed_target)
            rows.append(row)
            cams.append(cam)
            done_rows += 1
            if progress is not None:
                progress(min(done_rows, total), total)
        _write_chunk(out, number, start, rows, cams)
    table = _merge_tables(out, len(chunks))
    errors = [(row["path"], row["error"]) for row in table if row["status"] == "error"]
    manifest = _manifest(loaded, job, status="complete")
    manifest["counts"] = {"rows": total, "ok": total - len(errors), "error": len(errors)}
    _write_json(out / "manifest.json", manifest)
    return RunSummary(
        out, total, total - len(errors), errors, done_before, time.perf_counter() - started
    )


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


def _explain(
    loaded: LoadedModel,
    path: Path,
    layer: str,
    method: str,
    target: str,
    fixed: int | None,
) -> tuple[dict, np.ndarray]:
    row = {column: "" for column in COLUMNS}
    row["path"] = str(path)
    empty = np.zeros((0, 0), np.float32)
    label = path.parent.name if target == "folder" else ""
    row["label"] = label
    try:
        image = load_image(path)
        row["width"], row["height"] = image.width, image.height
        index = fixed
        if target == "folder":
            index = _folder_class(loaded, label)
        analysis = ForwardPass(loaded, image, layer).analysis(index, method)
    except (HookvizError, OSError) as exc:
        # the reason in this row; the run goes on and no other image moves into this row
        row["status"], row["error"] = "error", str(exc) or type(exc).__name__
        return row, empty
    best = analysis.predictions[0]
    cam = analysis.cam
    row.update(
        status="ok",
        top1_index=best.index,
        top1_name=best.name,
        top1_prob=f"{best.probability:.6g}",
        class_index=cam.class_index,
        class_name=cam.class_name,
        score=f"{cam.score:.6g}",
    )
    return row, cam.cam.astype(np.float32)


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
        same = before.get("job") == job
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


def _write_chunk(out: Path, number: int, start: int, rows: list, cams: list) -> None:
    table = out / "table" / f"{number:05d}.csv"
    _write_csv(table, rows)
    shapes = np.array([cam.shape for cam in cams], np.int32).reshape(-1, 2)
    flat = np.concatenate([cam.ravel() for cam in cams]) if cams else np.zeros(0, np.float32)
    target = _chunk_path(out, number)
    temporary = target.with_suffix(".tmp")
    with temporary.open("wb") as file:
        np.savez(file, cams=flat, shapes=shapes, rows=np.arange(start, start + len(rows)))
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, target)  # the chunk is done from this moment


def _merge_tables(out: Path, chunks: int) -> list[dict]:
    rows: list[dict] = []
    for number in range(chunks):
        with (out / "table" / f"{number:05d}.csv").open(newline="", encoding="utf-8") as file:
            rows.extend(csv.DictReader(file))
    _write_csv(out / "table.csv", rows)
    return rows


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
            "whole_image": True,
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


def _write_text(path: Path, text: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
