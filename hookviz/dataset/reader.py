"""Reading a run back: ``open_run(DIR)`` gives the table and each image's heatmap on its own
pixel grid, upsampled from the stored layer-resolution CAM exactly as ``GradCAM.heatmap`` is;
for an evaluate run, its table of metrics and the summary per method."""

from __future__ import annotations

import json
import os
import shlex
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ..core.preprocess import Preprocessing
from ..insight.faithfulness import METRICS
from .batches import crop_fractions, heatmap_on_image
from .sources import expand_inputs
from .store import EMPTY, FORMAT_VERSION, RunError, overlay_name, task_overlay_name

INLINE_INPUTS = 8  # inputs a resume command names one by one (more: their folder or list)
# The table's columns read as text, by task (the others are numbers where they parse).
_TEXT_COLUMNS = {
    "classification": ("error", "label"),
    "detection": ("error", "name"),
    "segmentation": ("error", "name"),
    "embedding": ("error",),
}
# An evaluate run's text columns; its numbers are the probabilities, the metrics and ``ms``.
_EVALUATE_TEXT = ("error", "method", "top1_name", "class_name", "label")


def _a(word: str) -> str:
    """``word`` after its indefinite article ("a cam", "an evaluate")."""
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _first_rows(keys: np.ndarray) -> dict[int, int]:
    """Each key's first row, for keys in runs of equal values (a table's rows in input order)."""
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else []
    return {int(keys[start]): int(start) for start in starts}


def open_run(directory: str | os.PathLike) -> Run:
    """The run in ``directory`` (complete, or partly done: then only its finished chunks).

    Raises:
        RunError: no run there, or one written by a newer hookviz.
    """
    return Run(Path(directory))


class Run:
    """A run on disk: of ``hookviz cam``, ``hookviz features`` or ``hookviz evaluate``
    (``kind``).

    A cam run has a table and a heatmap per row (``heatmap``, ``cam``); a features run a table
    and ``features``. An evaluate run has a table of one row per image and method (``table``)
    and one row per method (``summary``); it keeps no maps.

    Attributes:
        directory: its folder.
        manifest: what was asked, the counts and the status.
    """

    def __init__(self, directory: Path) -> None:
        manifest = directory / "manifest.json"
        if not manifest.is_file():
            raise RunError(f"no hookviz run in {directory} (no manifest.json)")
        self.directory = directory
        self.manifest: dict[str, Any] = json.loads(manifest.read_text(encoding="utf-8"))
        if int(self.manifest.get("format", 0)) > FORMAT_VERSION:
            raise RunError(f"the run in {directory} was written by a newer hookviz")
        self._chunk_size = int(self.manifest["job"]["chunk_size"])
        self._loaded: dict[int, dict[str, np.ndarray]] = {}

    @property
    def complete(self) -> bool:
        return self.manifest.get("status") == "complete"

    @property
    def kind(self) -> str:
        """What made the run: ``"cam"``, ``"features"`` or ``"evaluate"`` (the command)."""
        return str(self.manifest["job"]["command"])

    @property
    def task(self) -> str:
        """The model's task: ``"classification"``, ``"detection"``, ``"segmentation"`` or
        ``"embedding"``; what a row of ``table`` is."""
        return str(self.manifest["job"].get("task", "classification"))

    @cached_property
    def table(self):
        """The rows in input order (a pandas DataFrame); rows of unfinished chunks are left out.

        A classifier's run: one row per input: ``path``, ``status`` ("ok" or "error"),
        ``error``, ``width``, ``height``, ``top1_index``, ``top1_name``, ``top1_prob``,
        ``class_index``, ``class_name``, ``score`` and ``label`` (the folder's name with
        ``--target folder``).

        The other tasks' runs start with ``image`` (the input's row in ``inputs.txt``),
        ``path``, ``status``, ``error``, ``width`` and ``height``, then:

        - a detector's: one row per box, most confident first: ``x0``, ``y0``, ``x1``, ``y1``
          (in the image's pixels), ``label`` (the category's index), ``name`` and ``score``;
          an image with no box above the run's ``min_score`` has one row of status "empty";
        - a segmenter's: one row per category present, largest first: ``category``, ``name``,
          ``share`` (of the image's pixels) and ``probability`` (its mean over them);
        - an embedder's: one row per input: ``similarity`` (cosine, to the reference).

        An image that could not be read has one row of status "error" in every task.

        An evaluate run's: one row per image and method, in input order and the run's order of
        methods: ``image``, ``path``, ``status``, ``error``, ``width``, ``height``, ``method``,
        ``top1_index``, ``top1_name``, ``top1_prob``, ``class_index`` (the class explained and
        scored), ``class_name``, ``class_prob`` (its softmax probability), ``label`` (the
        folder's name with ``--target folder``), then each metric measured (the names of
        ``hookviz.FAITHFULNESS_METRICS``: ``average_drop`` a fraction, ``increase_in_confidence``
        0 or 1) and ``ms`` (the explanation's time). An image that failed has a row of status
        "error" for each method, a method that failed on an image one row.
        """
        import pandas as pd

        merged = self.directory / "table.csv"
        if merged.is_file():
            parts = [merged]
        else:
            done = sorted((self.directory / "cams").glob("*.npz"))
            parts = [self.directory / "table" / f"{p.stem}.csv" for p in done]
        evaluate = self.kind == "evaluate"
        texts = _EVALUATE_TEXT if evaluate else _TEXT_COLUMNS[self.task]
        # (a detector's boxes are written exactly, repr, and pandas reads them back exactly:
        # a row's Box(...) is the very target its CAM explains)
        frames = [
            pd.read_csv(p, keep_default_na=False, dtype=dict.fromkeys(texts, str)) for p in parts
        ]
        table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        for column in ("top1_index", "class_index", "width", "height", "image", "category"):
            if column in table:
                table[column] = pd.to_numeric(table[column], errors="coerce").astype("Int64")
        if "label" in table and "label" not in texts:  # a detector's label: its index
            table["label"] = pd.to_numeric(table["label"], errors="coerce").astype("Int64")
        numbers = ("top1_prob", "score", "x0", "y0", "x1", "y1", "share", "probability")
        if evaluate:
            numbers = ("top1_prob", "class_prob", *self.manifest["job"]["metrics"], "ms")
        for column in (*numbers, "similarity"):
            if column in table:
                table[column] = pd.to_numeric(table[column], errors="coerce")
        return table

    @cached_property
    def summary(self):
        """An evaluate run's summary: one row per method, in the run's order (a pandas
        DataFrame, as ``summary.csv`` holds it; for a run not complete, worked out the same way
        from its finished rows). Columns: ``method``; ``images`` (its rows that worked: every
        mean is over them) and ``failed``; the mean of each metric measured, with
        ``average_drop_pct`` and ``increase_in_confidence_pct`` in percent (TorchCAM's and the
        Grad-CAM++ paper's figures); ``ms``, the mean time of one explanation.

        Raises:
            RunError: not an evaluate run.
        """
        import pandas as pd

        from .evaluate import SUMMARY_FILE, summarise, summary_columns

        if self.kind != "evaluate":
            raise RunError(f"this is {_a(self.kind)} run: only an evaluate run has a summary")
        job = self.manifest["job"]
        written = self.directory / SUMMARY_FILE
        if self.complete and written.is_file():
            summary = pd.read_csv(written, keep_default_na=False, dtype={"method": str})
        else:
            rows = self.table.to_dict("records") if len(self.table) else []
            found = summarise(rows, job["methods"], job["metrics"])
            summary = pd.DataFrame(found, columns=list(summary_columns(job["metrics"])))
        for column in summary.columns.drop("method"):
            summary[column] = pd.to_numeric(summary[column], errors="coerce")
        for column in ("images", "failed"):
            summary[column] = summary[column].astype("int64")
        return summary

    @cached_property
    def _first_rows(self) -> dict[int, int]:
        """Chunk number -> its first row in ``table`` (runs with several rows per input)."""
        return _first_rows(self.table["image"].to_numpy(dtype=np.int64) // self._chunk_size)

    def _place(self, row: int) -> tuple[int, int]:
        """(chunk, position in it) of table row ``row``."""
        if self.task == "classification":  # one row per input: the chunk follows from the row
            return divmod(int(row), self._chunk_size)
        if not 0 <= int(row) < len(self.table):
            raise IndexError(f"row {row} is not in this run")
        number = int(self.table["image"].iloc[int(row)]) // self._chunk_size
        return number, int(row) - self._first_rows[number]

    def cam(self, row: int) -> np.ndarray:
        """The CAM of ``row`` at the layer's resolution, (h, w) float32 (before upsampling)."""
        self._refuse_maps()
        number, offset = self._place(row)
        chunk = self._chunk(number)
        shapes = chunk["shapes"]
        if offset >= len(shapes):
            raise IndexError(f"row {row} is not in this run")
        sizes = shapes[:, 0] * shapes[:, 1]
        start = int(sizes[:offset].sum())
        height, width = (int(v) for v in shapes[offset])
        return chunk["cams"][start : start + height * width].reshape(height, width)

    def heatmap(self, row: int) -> np.ndarray:
        """The heatmap of ``row``: (H, W) float32 in [0, 1] on that image's own pixel grid
        (what ``hookviz.grad_cam`` returns for the same image). In a ``--crop center`` run it
        covers the crop the model saw (``crop_box``) and is 0 outside it.

        Raises:
            ValueError: the row has no CAM: the image could not be read (the table's ``error``
                says why), or a detector found no box in it above the run's ``min_score``.
        """
        record = self._with_cam(row)
        size = (int(record["height"]), int(record["width"]))
        return heatmap_on_image(self.cam(row), size, self._seen(record), self._frame(row))

    def _with_cam(self, row: int):
        """The table row ``row``, when it has a CAM (ValueError saying why not)."""
        self._refuse_maps()
        record = self.table.iloc[int(row)]
        if record["status"] == EMPTY:
            least = self.manifest["job"].get("min_score")
            raise ValueError(
                f"row {row} ({record['path']}) has no CAM: no box scored at least {least}"
            )
        if record["status"] != "ok":
            raise ValueError(f"row {row} ({record['path']}) failed: {record['error']}")
        return record

    def _refuse_maps(self) -> None:
        if self.kind == "evaluate":
            raise RunError(
                "an evaluate run keeps the metrics of each map, not the maps: "
                "hookviz.grad_cam or hookviz.attribute gives a row's map again"
            )

    def _frame(self, row: int) -> tuple[float, float]:
        """The share (height, width) of ``row``'s CAM grid that covers the image (below 1
        where a detector padded its input)."""
        if self.task == "classification":
            return (1.0, 1.0)
        number, offset = self._place(row)
        height, width = (float(v) for v in self._chunk(number)["frames"][offset])
        return height, width

    @cached_property
    def features(self) -> np.ndarray:
        """A features run's array, rows aligned with ``table``: (N, C) pooled, or (N, C, h, w)
        with ``pool="none"``; rows of failed images all NaN. (Read from the chunks on first
        use: for runs too large for memory, read ``cams/NNNNN.npz`` one at a time.)"""
        if self.kind != "features":
            raise RunError(f"this is {_a(self.kind)} run: it has no features")
        done = sorted((self.directory / "cams").glob("*.npz"))
        parts = []
        for path in done:
            with np.load(path) as chunk:
                parts.append(chunk["features"])
        return np.concatenate(parts) if parts else np.zeros((0,), np.float32)

    def top_examples(self, channel: int) -> list[tuple[int, float]]:
        """(row, activation) of the images that excite ``channel`` most, strongest first (a
        features run made with a top-k, once complete)."""
        path = self.directory / "top_k.npz"
        if not path.is_file():
            raise RunError("no top-k in this run: make it with --top-k K (and let it finish)")
        with np.load(path) as top:
            rows, values = top["rows"][int(channel)], top["values"][int(channel)]
        return [
            (int(row), float(value))
            for row, value in zip(rows, values, strict=True)
            if np.isfinite(value)
        ]

    def input_path(self, row: int) -> Path | None:
        """Where the image of ``row`` is now, or None when it is nowhere the run knows.

        An absolute path is taken as recorded. A relative one (the run was given relative
        inputs) is looked for from the run's folder, as the folder the run was started in is
        seen from there (found again when the data and its runs moved together), then in that
        folder itself (runs that did not record it: under the current working directory)."""
        recorded = Path(str(self.table.iloc[int(row)]["path"]))
        for candidate in self._input_candidates(recorded):
            if candidate.is_file():
                return candidate
        return None

    def _input_candidates(self, recorded: Path) -> list[Path]:
        if recorded.is_absolute():
            return [recorded]
        root = self.manifest.get("inputs_root")
        if root is None:  # a run that did not record where it started
            starts = [Path.cwd()]
        else:  # (never the current directory: the same relative path may name another file)
            starts = [self.directory / root["from_run"], Path(root["absolute"])]
        return [Path(os.path.normpath(start / recorded)) for start in starts]

    def resume_command(self) -> str:
        """The command that continues this run (an interrupted one), from what it recorded:
        ``hookviz cam`` or ``hookviz features`` with its inputs and options, ``--out`` its
        folder; preceded by ``cd FOLDER`` when its inputs are relative (a run with relative
        inputs continues only from the folder it was started in). Shell words, quoted. (An
        evaluate run's: ``hookviz evaluate`` with its methods, metrics, target and crop.)

        The inputs are the recorded paths themselves when they are few; else the one folder
        that expands to exactly them (with ``--limit`` when they are its first ones); else, for
        absolute paths, the run's own ``inputs.txt``; else every path.
        """
        job = self.manifest["job"]
        paths = (self.directory / "inputs.txt").read_text(encoding="utf-8").splitlines()
        start = (self.manifest.get("inputs_root") or {}).get("absolute")
        relative = any(not Path(path).is_absolute() for path in paths)
        words = ["hookviz", job["command"], *self._resume_inputs(paths, start, relative)]
        words += ["--model", job["model"]]
        if job.get("weights", "pretrained") != "pretrained":
            words += ["--weights", job["weights"]]
        if job.get("task") == "embedding":  # (the others load as their own task)
            words += ["--task", "embedding", "--reference", job["reference"]]
        if "labels" in job:  # a zero-shot model's
            words += ["--labels", ",".join(job["labels"])]
        words += ["--layer", job["layer"]]
        for option in ("min_score", "max_boxes"):
            if option in job:
                words += [f"--{option.replace('_', '-')}", f"{job[option]:g}"]
        if job["command"] == "evaluate":
            words += ["--methods", ",".join(job["methods"])]
            if set(job["metrics"]) != set(METRICS):
                words += ["--metrics", ",".join(job["metrics"])]
            if str(job.get("target", "top1")) != "top1":
                words += ["--target", str(job["target"])]
        elif job["command"] == "cam":
            for option, default in (
                ("method", "gradcam"),
                ("target", "top1"),
                ("overlays", "none"),
            ):
                if str(job.get(option, default)) != default:
                    words += [f"--{option}", str(job[option])]
        else:
            if job.get("pool", "avg") != "avg":
                words += ["--pool", job["pool"]]
            if job.get("top_k"):
                words += ["--top-k", str(job["top_k"])]
            if job.get("by") == "relevance":
                words += ["--by", "relevance", "--target", str(job["target"])]
                words += ["--composite", str(job["composite"])]
        if job.get("crop", "none") != "none":
            words += ["--crop", job["crop"]]
        if job.get("size_step", 1) != 1:
            words += ["--size-step", str(job["size_step"])]
        words += ["--chunk-size", str(job["chunk_size"])]
        if job.get("bf16"):
            words.append("--bf16")
        if job.get("channels_last"):
            words.append("--channels-last")
        words += ["--out", str(self.directory.resolve())]
        lines = [" ".join(shlex.quote(word) for word in words)]
        if relative and start:
            lines.insert(0, f"cd {shlex.quote(start)}")
        loaded_from = self.manifest.get("loaded_from") or ""
        if loaded_from and not str(job["model"]).startswith("card:"):
            lines.append(f"# made with your weights ({loaded_from}): add --checkpoint FILE")
        return "\n".join(lines)

    def _resume_inputs(self, paths: list[str], start: str | None, relative: bool) -> list[str]:
        if len(paths) <= INLINE_INPUTS:
            return paths
        base = Path(start) if relative and start else Path.cwd()
        try:
            folder = os.path.commonpath(paths)
        except ValueError:  # (relative and absolute paths mixed)
            folder = None
        if folder and (base / folder).is_dir():
            expanded = [str(path) for path in expand_inputs([base / folder])]
            wanted = [str(base / path) for path in paths]
            if expanded[: len(wanted)] == wanted:
                limit = ["--limit", str(len(paths))] if len(expanded) > len(paths) else []
                return [folder, *limit]
        if not relative:
            return [str((self.directory / "inputs.txt").resolve())]
        return paths

    def overlay_path(self, row: int) -> Path | None:
        """The overlay picture of ``row`` (runs made with ``--overlays jpeg|png``), or None."""
        kind = self.manifest["job"].get("overlays", "none")
        if kind == "none":
            return None
        if self.task == "classification":
            name = overlay_name(int(row), kind)
        else:  # several rows per image: named by the image and the row's place among them
            image = int(self.table["image"].iloc[int(row)])
            name = task_overlay_name(image, int(row) - self._image_first_rows[image], kind)
        path = self.directory / "overlays" / name
        return path if path.is_file() else None

    @cached_property
    def _image_first_rows(self) -> dict[int, int]:
        """Input index -> its first row in ``table`` (runs with several rows per input)."""
        return _first_rows(self.table["image"].to_numpy(dtype=np.int64))

    def heatmap_at(self, row: int, size: tuple[int, int]) -> np.ndarray:
        """The heatmap of ``row`` on another (H, W) grid (a thumbnail's)."""
        record = self._with_cam(row)
        return heatmap_on_image(self.cam(row), size, self._seen(record), self._frame(row))

    def crop_box(self, row: int) -> tuple[float, float, float, float] | None:
        """The centre crop the model saw of ``row``'s image, (left, top, right, bottom) in its
        pixels, in a ``--crop center`` run; None when each image was seen whole."""
        record = self.table.iloc[int(row)]
        fractions = self._seen(record)
        if fractions is None:
            return None
        width, height = int(record["width"]), int(record["height"])
        left, top, right, bottom = fractions
        return left * width, top * height, right * width, bottom * height

    def _seen(self, record) -> tuple[float, float, float, float] | None:
        crop = self.manifest["job"].get("crop", "none")
        if crop == "none":
            return None
        width, height = int(record["width"]), int(record["height"])
        return crop_fractions(self._preprocessing, width, height, crop)

    @cached_property
    def _preprocessing(self) -> Preprocessing:
        """The run's preprocessing, from its manifest (for the crop it took)."""
        prep = self.manifest["preprocessing"]
        return Preprocessing(
            size=int(prep["size"]),
            mean=tuple(prep["mean"]),
            std=tuple(prep["std"]),
            crop_fraction=float(prep["crop_fraction"]),
        )

    def _chunk(self, number: int) -> dict[str, np.ndarray]:
        if number not in self._loaded:
            path = self.directory / "cams" / f"{number:05d}.npz"
            if not path.is_file():
                raise IndexError(f"chunk {number} of {self.directory} is not done")
            with np.load(path) as data:
                self._loaded = {number: {key: data[key] for key in data.files}}
        return self._loaded[number]
