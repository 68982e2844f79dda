"""What every dataset command (``cam``, ``features``, ``evaluate``) settles before its first
chunk: its folder, its inputs, its layer, the class it explains, and the job the manifest
records (a run resumes only where the same job is asked again, ``store.prepare``)."""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ..core.layers import default_layer, layer_table
from ..core.loaded import LoadedModel
from ..errors import HookvizError
from .sources import expand_inputs
from .store import RunError

CROPS = ("none", "center")


class RunPlan(NamedTuple):
    """A dataset run, settled.

    Attributes:
        out: the run's folder.
        paths: its inputs, one per image, in row order.
        layer: the layer's name as the layer table gives it.
        fixed_target: the class every image's row explains; None where each image's own does
            (its top-1, or its folder's class) or where the command explains no class.
        job: the job, as the manifest records it.
    """

    out: Path
    paths: list[Path]
    layer: str
    fixed_target: int | None
    job: dict[str, Any]


def plan_run(
    loaded: LoadedModel,
    command: str,
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    limit: int | None,
    layer: str | None,
    weights: str,
    options: dict[str, Any],
    crop: str,
    bf16: bool,
    size_step: int,
    chunk_size: int,
    target: str | None = None,
) -> RunPlan:
    """Settle a run of ``command`` over ``inputs``.

    Args:
        loaded: the model.
        command: the command's name, the job's first entry.
        inputs: files, folders (recursive), globs or text files listing paths.
        out: the run's folder.
        limit: only the first ``limit`` inputs (None: all).
        layer: a layer's name; None for the model's default layer.
        weights: recorded in the job (``"pretrained"`` or ``"untrained"``).
        options: the command's own entries of the job, recorded after the layer.
        crop, bf16, size_step, chunk_size: recorded in the job as every command records them.
        target: ``"top1"``, ``"folder"``, a class index or a class name, for a command that
            explains a class (None for one that does not).

    Raises:
        RunError: no input found, a target the model has no class for, or ``--target folder``
            over folders none of which names a class.
        LayerError: the layer cannot be hooked.
    """
    out = Path(out)
    paths = input_paths(inputs, limit)
    layer = default_layer(loaded) if layer is None else layer_table(loaded).get(layer).name
    fixed = None
    if target is not None:
        fixed = fixed_target(loaded, target)
        if target == "folder":
            check_folders_name_classes(loaded, paths)
    job = {
        "command": command,
        "model": loaded.name,
        "weights": weights,
        "layer": layer,
        **options,
        "crop": crop,
        "bf16": bool(bf16),
        "size_step": int(size_step),
        "chunk_size": int(chunk_size),
        "inputs": len(paths),
        "channels_last": loaded.channels_last,
    }
    if loaded.task == "zero-shot":  # (its labels are its classes: another set, another run)
        job["labels"] = list(loaded.categories)
    return RunPlan(out, paths, layer, fixed, job)


def input_paths(inputs: Sequence[str | os.PathLike], limit: int | None) -> list[Path]:
    """The files ``inputs`` name (``expand_inputs``), only the first ``limit`` of them."""
    paths = expand_inputs(inputs)
    return paths if limit is None else paths[: max(0, int(limit))]


def check_crop(crop: str) -> None:
    """Refuse a crop that is not one of ``CROPS`` (a RunError)."""
    if crop not in CROPS:
        raise RunError(f"crop {crop!r} is not one of {', '.join(CROPS)}")


def fixed_target(loaded: LoadedModel, target: str) -> int | None:
    """The class index ``target`` names; None for ``"top1"`` and ``"folder"`` (each image's
    own). A RunError for an index out of range or a name that is not a class."""
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


def check_folders_name_classes(loaded: LoadedModel, paths: Sequence[Path]) -> None:
    """Refuse a ``--target folder`` run in which no image's folder names a class of the
    model: every row would fail. The message names the folders and the classes closest to
    each. (Where some folders do name classes, the others' rows fail with their reason.)"""
    folders = sorted({path.parent.name for path in paths})
    if not folders or any(_names_class(loaded, folder) for folder in folders):
        return
    shown = []
    for folder in folders[:_FOLDERS_NAMED]:
        close = _closest_classes(loaded, folder)
        shown.append(f"{folder!r} (closest: {', '.join(close)})" if close else repr(folder))
    more = len(folders) - len(shown)
    raise RunError(
        f"--target folder: no folder names a class of {loaded.name!r}, so every image would "
        f"fail. The folders: {'; '.join(shown)}{f'; and {more} more' if more else ''}. Name "
        "each folder after a class (spaces may be underscores), or use --target top1 or a "
        "class name."
    )


_FOLDERS_NAMED = 8  # folders a refused --target folder names (the rest are counted)


def _names_class(loaded: LoadedModel, folder: str) -> bool:
    try:
        folder_class(loaded, folder)
    except RunError:
        return False
    return True


def _closest_classes(loaded: LoadedModel, folder: str) -> list[str]:
    """Up to three class names most like ``folder`` (as difflib measures likeness)."""
    by_lower = {name.lower(): name for name in loaded.categories}
    wanted = folder.replace("_", " ").lower()
    return [by_lower[m] for m in difflib.get_close_matches(wanted, list(by_lower), 3, 0.6)]


def folder_class(loaded: LoadedModel, folder: str) -> int:
    """The class a folder's name names (spaces may be underscores); a RunError if none."""
    for candidate in (folder, folder.replace("_", " ")):
        try:
            return loaded.class_index(candidate)
        except HookvizError:
            continue
    raise RunError(f"the folder name {folder!r} is not a class of {loaded.name!r}")
