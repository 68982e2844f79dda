"""A class's circuit over a folder (``hookviz circuit``): two resumable runs, then the tables.

Layout of ``OUT``:

    upper/          a features run by relevance at the upper layer (``run_features``): each
                    image's class relevance reaching each upper channel
    links/          a run at the lower layer: per image (1 + T, C_lower), the relevance
                    reaching each lower channel through the upper layer, then through each of
                    the T upper channels followed (chosen from ``upper`` once it is complete)
    circuit.json    the class, the layers, the channels of each layer with their examples,
                    the strongest links
    channels.csv    layer, rank, channel, relevance (mean over the images), share of the layer's
    links.csv       every link, strongest first (``Circuit.table``)

The same command on the same ``OUT`` continues whichever run was interrupted; the tables are
written once both are complete. ``open_circuit(OUT)`` reads the circuit back.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.loaded import LoadedModel
from ..errors import HookvizError
from ..insight.circuit import (
    DEFAULT_TOP,
    Circuit,
    class_of,
    most_relevant,
    ordered_layers,
    ranked_channels,
)
from ..insight.relevance import DEFAULT_COMPOSITE, check_relevance
from . import distributed, store
from .batches import Settings, link_records
from .decode import Decoding
from .plan import check_crop, plan_run
from .reader import open_run
from .run import RunSummary, _record_row, _run_chunks, run_features
from .store import RunError

EXAMPLES = 6  # images kept per channel in circuit.json
LINKS_SHOWN = 24  # links circuit.json lists (links.csv has all)


@dataclass(frozen=True)
class CircuitSummary(RunSummary):
    """A circuit run's summary (``RunSummary``'s counts are of the images) and its circuit."""

    circuit: Circuit | None = None


def run_circuit(
    loaded: LoadedModel,
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    target: int | str,
    layers: Sequence[str],
    top: int = DEFAULT_TOP,
    composite: str = DEFAULT_COMPOSITE,
    weights: str = "pretrained",
    crop: str = "none",
    bf16: bool = False,
    batch_size: int = 32,
    workers: int = 0,
    size_step: int = 1,
    chunk_size: int = 64,
    limit: int | None = None,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> CircuitSummary:
    """The circuit of class ``target`` between two layers over every image ``inputs`` name
    (see the module's notes for what is written under ``out``). The options not listed
    here are ``run_features``'s.

    Args:
        target: the class, by index or name (explained in every image).
        layers: two layers, in either order; the one that runs first is the lower one, and
            it must feed the other.
        top: the upper channels whose links are followed (the most relevant on average).
        composite: the LRP rules (``hookviz.RELEVANCE_COMPOSITES``).

    Raises:
        RunError: a class, layers, composite or ``top`` that cannot make a circuit, or an
            ``out`` that holds something else (without ``overwrite``).
    """
    started = time.perf_counter()
    out = Path(out)
    check_crop(crop)
    try:
        check_relevance(loaded, composite)
        index = class_of(loaded, target)
        lower, upper = ordered_layers(loaded, layers)
        if top < 1:
            raise RunError(f"top must be at least 1, not {top}")
    except HookvizError as exc:
        raise RunError(str(exc)) from None
    _check_out(out, overwrite)
    common = {
        "weights": weights,
        "crop": crop,
        "bf16": bf16,
        "batch_size": batch_size,
        "workers": workers,
        "size_step": size_step,
        "chunk_size": chunk_size,
        "limit": limit,
        "overwrite": overwrite,
    }
    first = run_features(
        loaded,
        inputs,
        out / "upper",
        layer=upper,
        by="relevance",
        target=str(index),
        composite=composite,
        progress=_halves(progress, 0),
        **common,
    )
    chosen = most_relevant(open_run(out / "upper").features, top)
    second = _run_links(loaded, inputs, out / "links", index, upper, lower, chosen, composite,
                        progress=_halves(progress, 1), **common)  # fmt: skip
    found = None
    if distributed.world()[0] == 0:
        found = open_circuit(out)
        write_tables(out, found, loaded.name)
    return CircuitSummary(
        out=out,
        rows=second.rows,
        ok=min(first.ok, second.ok),
        errors=list(dict.fromkeys(first.errors + second.errors)),
        chunks_done_before=first.chunks_done_before + second.chunks_done_before,
        seconds=time.perf_counter() - started,
        circuit=found,
    )


def open_circuit(directory: str | os.PathLike) -> Circuit:
    """The circuit a complete ``hookviz circuit`` run wrote in ``directory``.

    Raises:
        RunError: no circuit run there, or one not complete yet.
    """
    directory = Path(directory)
    if not (directory / "upper" / "manifest.json").is_file():
        raise RunError(f"no hookviz circuit in {directory} (no upper/manifest.json)")
    upper_run = open_run(directory / "upper")
    try:
        links_run = open_run(directory / "links")
    except RunError:
        links_run = None
    if not upper_run.complete or links_run is None or not links_run.complete:
        raise RunError(
            f"the circuit in {directory} is not complete: run the same hookviz circuit command "
            "again to finish it"
        )
    job = links_run.manifest["job"]
    linked = links_run.features  # (N, 1 + T, C_lower)
    paths = tuple(str(path) for path in upper_run.table["path"])
    index = int(job["target"])
    return Circuit(
        class_index=index,
        class_name=str(job.get("class_name", index)),
        lower=str(job["layer"]),
        upper=str(job["upper"]),
        composite=str(job["composite"]),
        upper_by_image=upper_run.features,
        lower_by_image=linked[:, 0],
        upper_channels=tuple(int(c) for c in job["upper_channels"]),
        links_by_image=linked[:, 1:],
        sources=paths,
    )


def write_tables(out: Path, found: Circuit, model: str) -> None:
    """circuit.json, channels.csv and links.csv of a complete circuit."""
    store.write_json(out / "circuit.json", circuit_summary(found, model))
    rows = []
    for layer, mean in ((found.upper, found.upper_relevance), (found.lower, found.lower_relevance)):
        whole = float(np.nansum(mean))
        for rank, (channel, value) in enumerate(ranked_channels(mean, len(mean)), start=1):
            rows.append({
                "layer": layer,
                "rank": rank,
                "channel": channel,
                "relevance": f"{value:.6g}",
                "share": f"{value / whole:.6g}" if whole else "nan",
            })  # fmt: skip
    store.write_csv(out / "channels.csv", rows, ("layer", "rank", "channel", "relevance", "share"))
    found.to_csv(out / "links.csv")


def circuit_summary(found: Circuit, model: str) -> dict:
    """What circuit.json holds: enough to draw the circuit without the arrays."""

    def channel(layer: str, number: int, value: float) -> dict:
        return {
            "channel": number,
            "relevance": value,
            "examples": [
                {"row": row, "path": found.sources[row] if row < len(found.sources) else "",
                 "relevance": relevance}
                for row, relevance in found.examples(layer, number, EXAMPLES)
            ],
        }  # fmt: skip

    count = len(found.upper_channels)
    return {
        "format": 1,
        "model": model,
        "class_index": found.class_index,
        "class_name": found.class_name,
        "lower": found.lower,
        "upper": found.upper,
        "composite": found.composite,
        "images": found.images,
        "upper_channels": [channel(found.upper, c, v) for c, v in found.top_upper(count)],
        "lower_channels": [channel(found.lower, c, v) for c, v in found.top_lower(count)],
        "links": [link._asdict() for link in found.strongest_links(LINKS_SHOWN)],
    }


def format_circuit(found: Circuit, out: Path, shown: int = 8) -> str:
    """The circuit in lines of text (what ``hookviz circuit`` prints at the end)."""
    lines = [
        f"The circuit of {found.class_name!r} (class {found.class_index}) over {found.images} "
        f"images, {found.lower} -> {found.upper} ({found.composite}):",
        f"  {found.upper}: " + ", ".join(f"{c} ({v:.3g})" for c, v in found.top_upper(shown)),
        f"  {found.lower}: " + ", ".join(f"{c} ({v:.3g})" for c, v in found.top_lower(shown)),
        "  strongest links (upper <- lower: mean relevance, share of the upper channel's):",
    ]
    lines += [
        f"    {found.upper}[{link.upper}] <- {found.lower}[{link.lower}]: {link.relevance:.3g} "
        f"({link.share:.1%})"
        for link in found.strongest_links(shown)
    ]
    lines.append(f"  tables: {out / 'channels.csv'}, {out / 'links.csv'}")
    return "\n".join(lines)


def _run_links(
    loaded: LoadedModel,
    inputs,
    out: Path,
    index: int,
    upper: str,
    lower: str,
    chosen: tuple[int, ...],
    composite: str,
    *,
    weights,
    crop,
    bf16,
    batch_size,
    workers,
    size_step,
    chunk_size,
    limit,
    overwrite,
    progress,
) -> RunSummary:
    """The second run: the lower layer's relevance, whole and through each chosen channel."""
    started = time.perf_counter()
    out, paths, layer, _, job = plan_run(
        loaded,
        "features",
        inputs,
        out,
        limit=limit,
        layer=lower,
        weights=weights,
        options={
            "pool": "avg",
            "top_k": 0,
            "by": "circuit",
            "target": index,
            "class_name": loaded.class_name(index),
            "composite": composite,
            "upper": upper,
            "upper_channels": list(chosen),
        },
        crop=crop,
        bf16=bf16,
        size_step=size_step,
        chunk_size=chunk_size,
    )
    settings = Settings(layer, batch_size, bf16)
    decoding = Decoding(loaded.preprocessing, crop=crop == "center", size_step=max(1, size_step))
    channels = _channels(loaded, layer)

    def work(records: list[dict], advance) -> tuple[list[dict], list[np.ndarray]]:
        values = link_records(loaded, records, settings, index, composite, upper, chosen, advance)
        rows, arrays = [], []
        for record, value in zip(records, values, strict=True):
            row = _record_row(record)
            if isinstance(value, str):
                row.update(status="error", error=value)
                value = np.full((1 + len(chosen), channels), np.nan, np.float32)
            rows.append(row)
            arrays.append(value)
        return rows, arrays

    return _run_chunks(
        loaded, job, paths, out, overwrite, progress, decoding, workers, work,
        store.stacked_chunk, started,
    )  # fmt: skip


def _channels(loaded: LoadedModel, layer: str) -> int:
    from ..core.layers import layer_shapes

    size = loaded.preprocessing.size
    return int(layer_shapes(loaded, size, size)[layer][0])


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that holds something other than a circuit (without ``overwrite``)."""
    if overwrite or not out.exists() or not any(out.iterdir()):
        return
    if not (out / "upper").is_dir():
        raise RunError(
            f"{out} is not empty and holds no hookviz circuit: pick another --out, or pass "
            "--overwrite to replace it"
        )


def _halves(progress: Callable[[int, int], None] | None, half: int):
    """Progress of one of the two runs as a share of both: (done, total) of the images of
    that run becomes (half * total + done, 2 * total)."""
    if progress is None:
        return None

    def report(done: int, total: int) -> None:
        progress(half * total + done, 2 * total)

    return report
