"""How faithful each explanation method is over a folder of images: ``hookviz evaluate``.

For every image and every method, the method's map of the image's class (by default its top-1,
as TorchCAM's protocol) is scored by ``hookviz.faithfulness`` (Average Drop, Increase in
Confidence, deletion and insertion AUCs, ROAD MoRF and LeRF), and the explanation's own time is
measured. A row is exactly what these two calls give for that image::

    image = hookviz.load_image(path)
    explanation = hookviz.grad_cam(loaded, image, layer, class_index, method=m)  # a CAM method
    explanation = hookviz.attribute(loaded, image, m, class_index)               # a pixel one
    hookviz.faithfulness(loaded, image, explanation, class_index, metrics)

The run is the same machinery as ``hookviz cam``'s (``run._run_chunks``): resumable chunks of
images under ``OUT`` (``store`` gives the layout), a changed command refused without
``overwrite``, an image that fails recorded with its reason. Its table has one row per image
and method (``evaluate_columns``); when it is complete, ``summary.csv`` holds one row per method
(``summarise``): the means over the images that worked, Average Drop and Increase in Confidence
as percentages as the Grad-CAM++ paper and TorchCAM's README print them.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..attributions import attribute, attribution_methods
from ..core.inputs import extract_logits, prepare_input
from ..core.loaded import LoadedModel
from ..core.methods import check_method
from ..core.pipeline import grad_cam
from ..errors import HookvizError
from ..images import load_image
from ..insight.faithfulness import METRICS, faithfulness
from . import distributed, store
from .decode import Decoding
from .plan import check_crop, folder_class, plan_run
from .run import RunSummary, _run_chunks
from .store import RunError, evaluate_columns

__all__ = [
    "METRICS",
    "PERCENT_METRICS",
    "EvaluationSummary",
    "format_summary",
    "method_kinds",
    "run_evaluate",
    "summarise",
]

# Images per chunk by default: an image costs a forward and backward pass per method and
# dozens of forward passes per metric, so a chunk of 8 is minutes at most on a CPU.
CHUNK_SIZE = 8
# The metrics whose mean is printed as a percentage (a share of images, a share of the score).
PERCENT_METRICS = ("average_drop", "increase_in_confidence")
# The order of the metrics in the tables: TorchCAM's README figures first.
ORDER = (*PERCENT_METRICS, "deletion", "insertion", "road_morf", "road_lerf")
SUMMARY_FILE = "summary.csv"
# Lower is better for these; higher for the other metrics.
LOWER_IS_BETTER = ("average_drop", "deletion", "road_morf")
# The failures of one image's explanation or metrics that are that row's, not the run's (a
# programming error still stops the run).
_ROW_FAILURES = (HookvizError, RuntimeError, ValueError, OSError)


@dataclass(frozen=True)
class EvaluationSummary(RunSummary):
    """What an evaluate run did (``RunSummary``'s counts, ``rows`` being images) and its
    summary: one dict per method, as ``summary.csv`` holds it (see ``summarise``)."""

    methods: tuple[dict, ...] = ()


def method_kinds(methods: Iterable[str]) -> list[tuple[str, str]]:
    """Each method's canonical name and how it explains: ``"cam"`` (``hookviz.grad_cam``: the
    CAM methods of ``hookviz.METHODS`` and the baselines ``random``, ``centre``, ``edges``) or
    ``"attribution"`` (``hookviz.attribute``: ``hookviz.attribution_methods()``). Repeats are
    dropped.

    Raises:
        RunError: a name that is neither, or no name at all (one line, listing the names).
    """
    found: dict[str, str] = {}
    attributions = attribution_methods()
    for given in methods:
        name = given.strip()
        if not name:
            continue
        try:
            found.setdefault(check_method(name), "cam")
            continue
        except HookvizError:
            pass
        spelled = name.lower().replace("-", "_")
        if spelled not in attributions:
            cams = ", ".join(_cam_names())
            raise RunError(
                f"unknown method {given!r}: choose CAM methods or baselines ({cams}) or pixel "
                f"attributions ({', '.join(a for a in attributions if a not in _cam_names())})"
            )
        found.setdefault(spelled, "attribution")
    if not found:
        raise RunError("no method given: name one or more, e.g. --methods gradcam,saliency")
    return list(found.items())


def _cam_names() -> list[str]:
    from ..core.baseline_maps import BASELINE_MAPS
    from ..core.methods import METHODS

    return [*METHODS, *BASELINE_MAPS]


def metric_names(metrics: Iterable[str] | None) -> list[str]:
    """The metrics asked for, in the tables' order (``ORDER``; None: all six); RunError on
    another."""
    if metrics is None:
        return list(ORDER)
    asked = {name.strip() for name in metrics if name.strip()}
    unknown = sorted(asked - set(METRICS))
    if unknown:
        raise RunError(
            f"unknown metric {', '.join(map(repr, unknown))}: choose from {', '.join(METRICS)}"
        )
    if not asked:
        raise RunError(f"no metric given: choose from {', '.join(METRICS)}")
    return [name for name in ORDER if name in asked]


def run_evaluate(
    loaded: LoadedModel,
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    methods: Sequence[str] | str = ("gradcam",),
    metrics: Sequence[str] | str | None = None,
    weights: str = "pretrained",
    layer: str | None = None,
    target: str = "top1",
    crop: str = "none",
    chunk_size: int = CHUNK_SIZE,
    limit: int | None = None,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> EvaluationSummary:
    """Score every method's explanation of every image ``inputs`` name, written under ``out``.

    Each row (one per image and method) holds the image's top-1 class and probability, the
    class explained and its probability, each metric of ``hookviz.faithfulness`` on the
    method's map of that class, and ``ms``: the explanation's own time in milliseconds (each
    method runs once untimed first in a process, so no row pays for a first call's setup; the
    metrics are not timed). The maps are not kept (a pixel attribution is a full-resolution
    image): ``hookviz.grad_cam`` or ``hookviz.attribute`` gives any of them again.

    Args:
        loaded: a classifier (or a zero-shot model over its labels).
        inputs: files, folders (recursive), globs or text files listing paths.
        out: the run's folder; the same call on it again continues an interrupted run.
        methods: CAM methods and baselines (``hookviz.grad_cam``'s) and pixel attributions
            (``hookviz.attribute``'s), by name (see ``method_kinds``), or one comma-separated
            string of them.
        metrics: names from ``hookviz.FAITHFULNESS_METRICS``, or one comma-separated string
            of them (default: all six; the ROAD metrics cost most).
        weights: recorded in the manifest (``"pretrained"`` or ``"untrained"``).
        layer: the CAM methods' layer (default: the model's default layer).
        target: ``"top1"`` (default: the class the model predicts, TorchCAM's protocol), a
            class index, a class name, or ``"folder"`` (each image's folder names its class).
        crop: ``"none"`` (default): each image whole; ``"center"``: its centre crop (the
            model's standard evaluation transform, as TorchCAM's evaluation uses; the crop's
            box rounded to whole pixels), which is then the image every call above is given.
        chunk_size: images per chunk (the unit of resuming).
        limit: only the first ``limit`` inputs.
        overwrite: start afresh in an ``out`` that holds another run.
        progress: called with (images done, images in all) after each image.

    Raises:
        RunError: a model without class probabilities, an unknown method or metric, a target
            the model has no class for, or ``out`` holding a different run (without
            ``overwrite``).
    """
    started = time.perf_counter()
    kinds = method_kinds(methods.split(",") if isinstance(methods, str) else methods)
    names = metric_names(metrics.split(",") if isinstance(metrics, str) else metrics)
    if not loaded.scores_classes:
        raise RunError(
            f"evaluate follows the softmax probability of a class; {loaded.name!r} is a "
            f"{loaded.task} model, without one score per class"
        )
    check_crop(crop)
    out, paths, layer, fixed, job = plan_run(
        loaded,
        "evaluate",
        inputs,
        out,
        limit=limit,
        layer=layer or None,
        weights=weights,
        options={"methods": [name for name, _ in kinds], "metrics": names, "target": target},
        crop=crop,
        # (what prepare() compares every run's job with: each image in float32, at its own
        # aspect ratio)
        bf16=False,
        size_step=1,
        chunk_size=chunk_size,
        target=target,
    )
    scorer = _Scorer(loaded, kinds, names, layer, target, fixed, crop)
    # The run's reader checks each file (an unreadable one is its rows' error, as in a cam
    # run); the scorer then loads it whole, as hookviz.load_image does for a caller, so each
    # row is exactly that call's (one more decode per image: milliseconds, beside the metrics'
    # dozens of forward passes).
    summary = _run_chunks(
        loaded,
        job,
        paths,
        out,
        overwrite,
        progress,
        Decoding(loaded.preprocessing),
        0,
        scorer.chunk,
        _metric_arrays,
        started,
    )
    per_method: tuple[dict, ...] = ()
    if distributed.world()[0] == 0:
        per_method = tuple(write_summary(out, job))
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        manifest["counts"]["table_rows"] = summary.table_rows  # (one per image and method)
        store.write_json(out / "manifest.json", manifest)
    fields = {field.name: getattr(summary, field.name) for field in dataclasses.fields(summary)}
    fields["seconds"] = time.perf_counter() - started
    return EvaluationSummary(**fields, methods=per_method)


class _Scorer:
    """One chunk of decoded records in, its rows (one per image and method) and their metric
    values out."""

    def __init__(self, loaded, kinds, metrics, layer, target, fixed, crop) -> None:
        self.loaded = loaded
        self.kinds = kinds
        self.metrics = metrics
        self.layer = layer
        self.target = target
        self.fixed = fixed
        self.crop = crop
        self.warm: set[str] = set()  # the methods that have run once in this process
        self.columns = evaluate_columns(metrics)

    def chunk(self, records: list[dict], advance) -> tuple[list[dict], list[np.ndarray]]:
        rows: list[dict] = []
        for record in records:
            rows += self.image_rows(record)
            advance(1)
        values = [
            np.array([_number(row.get(name)) for name in self.metrics], np.float64) for row in rows
        ]
        return rows, values

    def image_rows(self, record: dict) -> list[dict]:
        """The rows of one image: one per method, each ``ok`` or ``error`` with its reason."""
        base = store.blank_row(Path(record["path"]), self.columns) | {"image": record["row"]}
        if record["width"]:
            base["width"], base["height"] = record["width"], record["height"]
        if self.target == "folder":
            base["label"] = Path(record["path"]).parent.name
        failure = record["error"]
        image = None
        if not failure:
            try:
                image = self.image(record["path"])
                base |= self.classes(image, base["label"])
            except _ROW_FAILURES as exc:
                failure = str(exc) or type(exc).__name__
        rows = []
        for method, kind in self.kinds:
            row = base | {"method": method}
            if failure:
                row.update(status="error", error=failure)
            else:
                row |= self.scored(image, method, kind, int(base["class_index"]))
            rows.append(row)
        return rows

    def image(self, path: str):
        """The image every call is given: the file whole, or its centre crop."""
        image = load_image(path)
        if self.crop == "center":
            left, top, right, bottom = self.loaded.preprocessing.crop_box(*image.size)
            image = image.crop((round(left), round(top), round(right), round(bottom)))
        return image

    def classes(self, image, label: str) -> dict:
        """The image's top-1 and the class explained, with their softmax probabilities (the
        model's output as ``faithfulness`` reads it)."""
        batch, _ = prepare_input(self.loaded, image)
        with self.loaded.lock, torch.no_grad():
            logits = extract_logits(self.loaded.model(batch))
        probabilities = torch.softmax(logits.float(), dim=1)[0]
        top1 = int(probabilities.argmax())
        index = self.fixed
        if self.target == "folder":
            index = folder_class(self.loaded, label)
        elif index is None:
            index = top1
        return {
            "status": "ok",
            "top1_index": top1,
            "top1_name": self.loaded.class_name(top1),
            "top1_prob": repr(float(probabilities[top1])),
            "class_index": index,
            "class_name": self.loaded.class_name(index),
            "class_prob": repr(float(probabilities[index])),
        }

    def scored(self, image, method: str, kind: str, index: int) -> dict:
        """One method's row: its metrics and its time, or the reason it failed."""
        try:
            if method not in self.warm:  # (a first call sets things up: not what is timed)
                self.explain(image, method, kind, index)
                self.warm.add(method)
            began = time.perf_counter()
            explanation = self.explain(image, method, kind, index)
            seconds = time.perf_counter() - began
            values = faithfulness(self.loaded, image, explanation, index, self.metrics)
        except _ROW_FAILURES as exc:
            return {"status": "error", "error": str(exc) or type(exc).__name__}
        # (repr: the shortest text that reads back as the very same float)
        return {name: repr(float(value)) for name, value in values.items()} | {
            "ms": f"{seconds * 1000:.3f}"
        }

    def explain(self, image, method: str, kind: str, index: int):
        if kind == "cam":
            return grad_cam(self.loaded, image, self.layer, index, method=method)
        if method == "guided_gradcam":  # (its Grad-CAM at the run's layer)
            return attribute(self.loaded, image, method, index, layer=self.layer)
        return attribute(self.loaded, image, method, index)


def _number(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _metric_arrays(values: list[np.ndarray]) -> dict[str, np.ndarray]:
    """A chunk's ``.npz``: ``metrics`` (rows, metrics) float64, NaN where a row failed (the
    table holds the same values as text)."""
    width = len(values[0]) if values else 0
    return {"metrics": np.array(values, np.float64).reshape(len(values), width)}


def summarise(rows: Iterable[dict], methods: Sequence[str], metrics: Sequence[str]) -> list[dict]:
    """One dict per method, in ``methods``' order, from table rows (dicts of text or numbers):
    ``method``; ``images``: its rows that worked, which every mean is over; ``failed``: its
    rows that did not; the mean of each metric (``average_drop`` and
    ``increase_in_confidence`` as percentages, named ``average_drop_pct`` and
    ``increase_in_confidence_pct``); and ``ms``, the mean time of an explanation. A method
    without a row that worked has NaN means."""
    totals = {
        method: {"images": 0, "failed": 0, "sums": [0.0] * (len(metrics) + 1)} for method in methods
    }
    for row in rows:
        found = totals.get(str(row["method"]))
        if found is None:
            continue
        if row["status"] != "ok":
            found["failed"] += 1
            continue
        found["images"] += 1
        for position, name in enumerate((*metrics, "ms")):
            found["sums"][position] += float(row[name])
    summary = []
    for method in methods:
        found = totals[method]
        count = found["images"]
        entry: dict = {"method": method, "images": count, "failed": found["failed"]}
        for position, name in enumerate((*metrics, "ms")):
            mean = found["sums"][position] / count if count else math.nan
            if name in PERCENT_METRICS:
                entry[f"{name}_pct"] = 100.0 * mean
            else:
                entry[name] = mean
        summary.append(entry)
    return summary


def summary_columns(metrics: Sequence[str]) -> tuple[str, ...]:
    """The columns of ``summary.csv``."""
    named = [f"{name}_pct" if name in PERCENT_METRICS else name for name in metrics]
    return ("method", "images", "failed", *named, "ms")


def write_summary(out: Path, job: dict) -> list[dict]:
    """``summary.csv`` from the complete run's ``table.csv`` (read as the reader reads it, so
    each mean is the mean of the rows there); the summary's rows."""
    with (out / "table.csv").open(newline="", encoding="utf-8") as file:
        summary = summarise(csv.DictReader(file), job["methods"], job["metrics"])
    texts = [
        {key: repr(value) if isinstance(value, float) else value for key, value in row.items()}
        for row in summary
    ]
    store.write_csv(out / SUMMARY_FILE, texts, summary_columns(job["metrics"]))
    return summary


# The summary's headings on the terminal, and how many decimals each shows.
_HEADINGS = {
    "average_drop_pct": ("Average Drop %", 2),
    "increase_in_confidence_pct": ("Increase in Conf. %", 2),
    "deletion": ("Deletion AUC", 4),
    "insertion": ("Insertion AUC", 4),
    "road_morf": ("ROAD MoRF", 4),
    "road_lerf": ("ROAD LeRF", 4),
    "ms": ("ms/image", 1),
    "images": ("images", 0),
}


def format_summary(summary: Sequence[dict]) -> str:
    """The summary as an aligned text table (one line per method) with a line saying which
    way is better for each metric shown."""
    if not summary:
        return ""
    keys = [key for key in summary[0] if key in _HEADINGS]
    keys = [key for key in keys if key != "images"] + ["images"]
    header = ["method", *(_HEADINGS[key][0] for key in keys)]
    lines = [header]
    for entry in summary:
        cells = [str(entry["method"])]
        for key in keys:
            value = entry[key]
            decimals = _HEADINGS[key][1]
            if isinstance(value, float) and math.isnan(value):
                cells.append("-")
            else:
                cells.append(f"{value:.{decimals}f}" if decimals else str(value))
        if entry.get("failed"):
            cells[-1] += f" ({entry['failed']} failed)"
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    ]
    shown = {key.removesuffix("_pct") for key in keys}
    lower = [_HEADINGS[_summary_key(name)][0] for name in LOWER_IS_BETTER if name in shown]
    higher = [
        _HEADINGS[_summary_key(name)][0]
        for name in ORDER
        if name in shown and name not in LOWER_IS_BETTER
    ]
    notes = []
    if lower:
        notes.append(f"lower is better: {', '.join(lower)}")
    if higher:
        notes.append(f"higher is better: {', '.join(higher)}")
    if notes:
        text.append("(" + "; ".join(notes) + ")")
    return "\n".join(text)


def _summary_key(metric: str) -> str:
    return f"{metric}_pct" if metric in PERCENT_METRICS else metric
