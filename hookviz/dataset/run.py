"""A CAM or features run over many images: chunks of decoded records through the model
(``batches``), each chunk written whole or not at all (``store``, whose notes give the layout of
``OUT``), any number of ranks on one run (``distributed``)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..core.layers import layer_shapes
from ..core.loaded import LoadedModel
from ..core.methods import check_method
from ..core.targets import embedding
from ..errors import HookvizError
from ..images import load_image
from . import distributed, store
from .batches import (
    Settings,
    crop_fractions,
    explain_records,
    layer_records,
    relevance_records,
    write_overlay,
)
from .decode import Decoding, decoded
from .plan import check_crop, folder_class, plan_run
from .store import COLUMNS, FORMAT_VERSION, OVERLAYS, TASK_COLUMNS, RunError, overlay_name
from .tasks import Explaining, explain_rows

__all__ = [
    "COLUMNS",
    "FORMAT_VERSION",
    "OVERLAYS",
    "TASK_COLUMNS",
    "RunError",
    "RunSummary",
    "overlay_name",
    "run_cam",
    "run_features",
]


@dataclass(frozen=True)
class RunSummary:
    """What a finished (or resumed) run did.

    Attributes:
        out: the run's folder.
        rows: the inputs (images).
        ok: the inputs done without a failure.
        errors: (path, reason) of every failed table row.
        chunks_done_before: chunks a resumed run found done.
        seconds: this call's time.
        table_rows: rows of the table: one per input for a classifier or an embedder, one per
            box for a detector, one per category present for a segmenter.
    """

    out: Path
    rows: int
    ok: int
    errors: list[tuple[str, str]]
    chunks_done_before: int
    seconds: float
    table_rows: int = 0


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
    min_score: float | None = None,
    max_boxes: int | None = None,
    reference: str | os.PathLike | None = None,
) -> RunSummary:
    """The CAM of every image ``inputs`` name, written under ``out`` (see the module's notes).

    What a row is depends on the model's task (``loaded.task``):

    - a classifier: one row per image, its top-1 and the CAM of ``target``;
    - a detector: one row per box it finds with a score of at least ``min_score`` (at most
      ``max_boxes``, the most confident first): the box in the image's pixels, its label, name
      and score, and the CAM of that box (``hookviz.targets.Box``); an image with no such box
      has one row of status ``"empty"`` and no CAM;
    - a segmenter: one row per category present, largest first: its index, name, share of the
      image's pixels and mean probability over them, and the CAM of its predicted pixels
      (``Region``);
    - an embedder (``load_model(..., task="embedding")``): one row per image, its cosine
      similarity to ``reference``'s embedding and the CAM of that similarity (``Similarity``).

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
            (at dataset scale the pictures cost more than the CAM: PNG most). A detector's or
            segmenter's run writes one per row with a CAM, its box or category outlined on
            it, as ``overlays/IMAGE-PART.jpg`` (``Run.overlay_path`` finds a row's).
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
        progress: called with (images done, images in all) after each image.
        min_score: a detector's boxes scored at least this (default 0.5).
        max_boxes: at most this many boxes per image (default 20).
        reference: an embedder's reference image (a path): each row is an image's similarity
            to it.

    Raises:
        RunError: ``out`` holds a different run (without ``overwrite``), a target that the
            model has no class for, or an option the model's task has no use for (``target``,
            ``crop``, ``bf16`` or ``size_step`` for a detector, segmenter or embedder; a
            detector's options for another model; an embedder without its ``reference``).
    """
    started = time.perf_counter()
    method = check_method(method)
    if overlays not in OVERLAYS:
        raise RunError(f"overlays {overlays!r} is not one of {', '.join(OVERLAYS)}")
    check_crop(crop)
    task = _check_task_options(
        loaded, target, overlays, crop, bf16, size_step, min_score, max_boxes, reference
    )
    out, paths, layer, fixed_target, job = plan_run(
        loaded,
        "cam",
        inputs,
        out,
        limit=limit,
        layer=layer or None,
        weights=weights,
        options={"method": method, "target": target, "overlays": overlays},
        crop=crop,
        bf16=bf16,
        size_step=size_step,
        chunk_size=chunk_size,
        target=target,
    )
    settings = Settings(layer, batch_size, bf16)
    decoding = Decoding(
        loaded.preprocessing,
        crop=crop == "center",
        overlay=overlays != "none",
        size_step=max(1, int(size_step)),
    )
    if task != "classification":
        # (classifier runs keep the job they always had: their runs written before still resume)
        explaining, extras = _explaining(loaded, layer, method, min_score, max_boxes, reference)
        explaining = replace(explaining, overlays=overlays, overlay_folder=out / "overlays")
        job |= {"task": task, **extras}

        def explain(records: list[dict], advance) -> tuple[list[dict], list]:
            return explain_rows(loaded, records, explaining, advance)

        return _run_chunks(
            loaded,
            job,
            paths,
            out,
            overwrite,
            progress,
            decoding,
            workers,
            explain,
            store.framed_chunk,
            started,
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
        store.ragged_chunk,
        started,
    )


# What the run of each task explains in an image, in words (for messages).
_EXPLAINS = {
    "detection": "each box the detector finds (one row each; --min-score and --max-boxes pick "
    "them)",
    "segmentation": "each category present (one row each)",
    "embedding": "each image's similarity to --reference",
}
MIN_SCORE = 0.5  # a detector's boxes scored at least this, by default
MAX_BOXES = 20  # at most this many per image, by default


def _check_task_options(
    loaded: LoadedModel,
    target: str,
    overlays: str,
    crop: str,
    bf16: bool,
    size_step: int,
    min_score: float | None,
    max_boxes: int | None,
    reference: str | os.PathLike | None,
) -> str:
    """The model's task, once the options given make sense for it (RunError if not)."""
    task = loaded.task
    if task == "zero-shot":
        task = "classification"  # (over its labels: each row as a classifier's)
    if (min_score is not None or max_boxes is not None) and task != "detection":
        raise RunError(
            f"--min-score and --max-boxes pick a detector's boxes; {loaded.name!r} is a {task} "
            "model"
        )
    if max_boxes is not None and max_boxes < 1:
        raise RunError(f"max_boxes must be at least 1, not {max_boxes}")
    if reference is not None and task != "embedding":
        raise RunError(
            f"--reference is for an embedding run (--task embedding); {loaded.name!r} is a "
            f"{task} model"
        )
    if task == "classification":
        return task
    refused = [
        (target != "top1", f"--target {target}"),
        (crop != "none", f"--crop {crop}"),
        (bool(bf16), "--bf16"),
        (int(size_step) != 1, f"--size-step {size_step}"),
    ]
    given = [option for wrong, option in refused if wrong]
    if given:
        raise RunError(
            f"{' and '.join(given)}: a classifier's option; {loaded.name!r} is a {task} model, "
            f"whose run explains {_EXPLAINS[task]}"
        )
    if task == "embedding" and reference is None:
        raise RunError(
            f"an embedding run needs --reference IMAGE: each row is an image's similarity to it "
            f"and the CAM explains that similarity ({loaded.name!r} is an embedding model)"
        )
    return task


def _explaining(
    loaded: LoadedModel,
    layer: str,
    method: str,
    min_score: float | None,
    max_boxes: int | None,
    reference: str | os.PathLike | None,
) -> tuple[Explaining, dict]:
    """What each image's rows explain, and what the job records of it (its identity: a run
    resumes only with the same options and the same reference file)."""
    if loaded.task == "detection":
        score = MIN_SCORE if min_score is None else float(min_score)
        boxes = MAX_BOXES if max_boxes is None else int(max_boxes)
        return Explaining(layer, method, score, boxes), {"min_score": score, "max_boxes": boxes}
    if loaded.task == "embedding":
        path = Path(reference).expanduser().resolve()
        try:
            data = path.read_bytes()
            vector = embedding(loaded, load_image(data))
        except (OSError, HookvizError) as exc:
            raise RunError(f"cannot read the reference image {reference}: {exc}") from exc
        extras = {"reference": str(path), "reference_sha1": hashlib.sha1(data).hexdigest()}
        return Explaining(layer, method, reference=vector), extras
    return Explaining(layer, method), {}


def run_features(
    loaded: LoadedModel,
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    layer: str,
    weights: str = "pretrained",
    pool: str = "avg",
    top_k: int = 0,
    by: str = "activation",
    target: str | None = None,
    composite: str = "epsilon_plus_flat",
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
        by: ``"activation"`` (default: the features are the layer's activations) or
            ``"relevance"``: each image's row is the relevance of ``target`` reaching each
            channel (LRP with ``composite``'s rules, ``hookviz.relevance``'s
            ``layer_relevance``), and ``top_k`` finds the images where a channel carries the
            most of it: what the channel is used for, beside what excites it.
        target: with ``by="relevance"``: ``"top1"`` (default: each image's own top class), a
            class index or a class name.
        composite: with ``by="relevance"``: the rules (``hookviz.RELEVANCE_COMPOSITES``).
        crop: ``"center"``: the model's standard centre crop instead of the whole image.
        (the rest as in ``run_cam``)
    """
    started = time.perf_counter()
    if pool not in POOLS:
        raise RunError(f"pool {pool!r} is not one of {', '.join(POOLS)}")
    check_crop(crop)
    options = {"pool": pool, "top_k": int(top_k)}
    if by == "relevance":
        target = "top1" if target is None else str(target)
        _check_relevance_run(loaded, pool, target, composite)
        options.update(by=by, target=target, composite=composite)
    elif by != "activation":
        raise RunError(f"by {by!r} is not one of activation, relevance")
    elif target is not None:
        raise RunError("a target applies to a run by relevance (by='relevance', --by relevance)")
    out, paths, layer, fixed, job = plan_run(
        loaded,
        "features",
        inputs,
        out,
        limit=limit,
        layer=layer,
        weights=weights,
        options=options,
        crop=crop,
        bf16=bf16,
        size_step=size_step,
        chunk_size=chunk_size,
        target=target if by == "relevance" else None,
    )
    size = loaded.preprocessing.size
    channels, height, width = layer_shapes(loaded, size, size)[layer]
    shape = (channels,) if pool != "none" else (channels, height, width)
    settings = Settings(layer, batch_size, bf16)
    decoding = Decoding(
        loaded.preprocessing,
        crop=crop == "center",
        square=pool == "none",
        size_step=max(1, int(size_step)),
    )

    def work(records: list[dict], advance) -> tuple[list[dict], list[np.ndarray]]:
        if by == "relevance":
            values = relevance_records(loaded, records, settings, fixed, composite, advance)
        else:
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
        store.stacked_chunk,
        started,
    )
    if top_k > 0 and distributed.world()[0] == 0:
        store.write_top_k(out, len(paths), chunk_size, int(top_k), pool)
    distributed.barrier()
    return summary


POOLS = ("avg", "max", "none")


def _check_relevance_run(loaded: LoadedModel, pool: str, target: str, composite: str) -> None:
    """Refuse a run by relevance that cannot be made, before any image is read."""
    from ..insight.relevance import COMPOSITES

    if composite not in COMPOSITES:
        raise RunError(f"composite {composite!r} is not one of {', '.join(COMPOSITES)}")
    if pool == "none":
        raise RunError("a run by relevance keeps one value per channel: --pool none does not apply")
    if not loaded.scores_classes:
        raise RunError(f"a run by relevance explains a class; a {loaded.task} model has none")
    if target == "folder":
        raise RunError("a run by relevance explains top1 or one class (an index or a name)")


def _run_chunks(
    loaded, job, paths, out, overwrite, progress, decoding, workers, work, write, started
) -> RunSummary:
    chunk_size = job["chunk_size"]
    columns = store.columns_of(job)
    rank, size = distributed.world()
    refusal = None
    if rank == 0:
        try:
            done_before = store.prepare(out, job, paths, overwrite)
            manifest = store.manifest(loaded, job, status="running", out=out)
            store.write_json(out / "manifest.json", manifest)
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
        if number % size == rank and not store.chunk_path(out, number).exists()
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
        store.write_chunk(out, number, start, rows, arrays, write, columns)
    distributed.barrier()  # every chunk is on disk
    errors, table_rows = store.merge_tables(out, len(chunks), write=rank == 0, columns=columns)
    failed = len({path for path, _ in errors})  # images (a detector's image has several rows)
    if rank == 0:
        manifest = store.manifest(loaded, job, status="complete", out=out)
        manifest["counts"] = {"rows": total, "ok": total - failed, "error": failed}
        if "task" in job:
            manifest["counts"]["table_rows"] = table_rows
        store.write_json(out / "manifest.json", manifest)
    seconds = time.perf_counter() - started
    return RunSummary(out, total, total - failed, errors, done_before, seconds, table_rows)


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
                index = folder_class(loaded, row["label"])
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
            write_overlay(target_path, record["picture"], cam, overlays, box)
    return rows, arrays


def _record_row(record: dict) -> dict:
    """A table row from a decoded record: its path, its size when it was read, its reason
    when not (the rest is filled in by the model's side)."""
    row = store.blank_row(Path(record["path"]))
    if record["width"]:
        row["width"], row["height"] = record["width"], record["height"]
    row["status"], row["error"] = ("error", record["error"]) if record["error"] else ("ok", "")
    return row
