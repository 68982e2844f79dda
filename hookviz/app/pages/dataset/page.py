"""The "Dataset run" page: open a run folder written by ``hookviz cam`` / ``hookviz features``
(a path on the server), filter its table (mistakes, classes, confidence, errors), see the
overlays of the rows shown, and open any image in Explore with the run's model and layer; or
a ``hookviz evaluate`` run's summary per method and its rows; or a ``hookviz circuit``
(``circuit_view``) or ``hookviz concepts`` folder (``concepts_view``).

Like "Your model", this page needs no scene: a run is looked at whatever the sidebar holds.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

import hookviz
from hookviz.app.caches import images, models, runs
from hookviz.app.pages import addresses
from hookviz.app.pages.dataset import circuit_view, concepts_view, run_folder
from hookviz.app.sidebar import image_input
from hookviz.app.view import state
from hookviz.app.view.link_notice import escaped
from hookviz.app.view.literal import literal
from hookviz.app.view.target import ViewTarget

THUMBNAILS = 12  # overlays drawn at once (each reads its image from disk)
# Set by a row's Open button (its callback, ``_open``) for the run that follows:
_SWITCH_TO_EXPLORE = "run_switch"  # the row opened: go to Explore
_OPEN_ERROR = "run_open_error"  # why the row could not be opened


def page() -> None:
    if st.session_state.pop(_SWITCH_TO_EXPLORE, False):
        st.switch_page(addresses.page_at(addresses.EXPLORE))
    st.markdown("### Dataset run")
    problem = st.session_state.pop(_OPEN_ERROR, None)
    if problem:
        st.error(problem)
    st.caption(
        "Open the folder of a run made with `hookviz cam`, `hookviz features`, "
        "`hookviz evaluate`, `hookviz circuit` or `hookviz concepts` (a path on this server): "
        "its table, filters, the overlays of the rows shown, and any image in Explore with the "
        "run's model, layer and class; a circuit's channels and links; a folder's concepts."
    )
    places = run_folder.run_places()
    if places.off:
        st.warning(run_folder.OFF)
        return
    rooted = places.root is not None
    typed = state.widget(
        "run_dir",
        st.text_input,
        state.wish("run_dir") or "",
        "Run folder",
        placeholder=f"e.g. {places.example()}" if rooted else "e.g. runs/val",
        help="A run's folder in this server's runs folder."
        if rooted
        else "The --out folder of a run (absolute, or relative to where the app was started).",
    ).strip()
    if rooted:
        listed = places.runs()
        st.caption(
            "Runs on this server: " + ", ".join(f"`{name}`" for name in listed)
            if listed
            else "No run in this server's runs folder yet."
        )
    if not typed:
        st.info(
            "No run open. Make one with e.g. `hookviz cam photos/ --model efficientnet_lite0 "
            "--out runs/photos`, then type `runs/photos` above."
            if not rooted
            else "No run open: type one of the runs above."
        )
        return
    try:
        folder = str(places.locate(typed))
        if circuit_view.is_circuit(Path(folder).expanduser()):
            circuit_view.show(folder)
            return
        if concepts_view.is_concepts(Path(folder).expanduser()):
            concepts_view.show(folder)
            return
        run = runs.dataset_run(folder, run_stamp(folder))
    except run_folder.RunFolderRefused as exc:
        st.error(str(exc))
        return
    except hookviz.HookvizError as exc:
        if rooted:
            # (the library's message names the folder as typed: anyone's text, escaped too)
            st.error(f"Cannot open **{escaped(typed)}**: {literal(places.shown(str(exc)))}")
            return
        if not Path(typed).expanduser().is_absolute():  # say where a relative one was looked for
            exc = f"{exc}. A relative folder is read from where the app was started, {Path.cwd()}"
        st.error(f"Cannot open **{escaped(typed)}**: {literal(exc)}")
        return
    _summary(run)
    if not run.complete:
        _resume(run)
    table = run.table
    if table.empty:
        st.info("No finished chunk yet.")
        return
    command = run.manifest["job"]["command"]
    if command == "evaluate":
        _evaluation(run)
        return
    shown = _filtered(table, command) if run.task == "classification" else _by_task(run)
    # a features run has no class columns, a run without folder targets no labels: not shown
    empty = [c for c in shown.columns if (shown[c].isna() | (shown[c] == "")).all()]
    empty = empty if len(shown) else []
    st.dataframe(shown.drop(columns=empty), width="stretch", height=260)
    if command == "cam":
        _thumbnails(folder, run, shown)
    else:
        _top_examples(folder, run)


def _evaluation(run: hookviz.Run) -> None:
    """An evaluate run: the summary per method (the means of its metrics), then the rows."""
    st.markdown("**Per method** (means over the images that worked)")
    st.dataframe(run.summary, width="stretch", hide_index=True)
    st.markdown("**Per image and method**")
    status = st.selectbox("Rows", ["all", "ok", "errors"], key="run_status")
    kept = {"ok": "ok", "errors": "error"}.get(status)
    table = run.table
    st.dataframe(
        table if kept is None else table[table["status"] == kept], width="stretch", height=260
    )


def run_stamp(folder: str) -> float:
    """Changes whenever the run does (its manifest is rewritten at the start and the end, its
    chunks as they finish): a new stamp reopens it."""
    root = Path(folder).expanduser()
    stamps = [p.stat().st_mtime for p in (root / "manifest.json", root / "cams") if p.exists()]
    return max(stamps, default=0.0)


def _summary(run: hookviz.Run) -> None:
    job, counts = run.manifest["job"], run.manifest.get("counts")
    what = f"{job['command']} of **{job['model']}** ({job['weights']}) at `{job['layer']}`"
    if job["command"] == "cam":
        what += f" · {job['method']} · {_explained(run)}"
    elif job["command"] == "evaluate":
        what += f" · {', '.join(job['methods'])} · {_explained(run)}"
    else:
        what += f" · pool {job['pool']}" + (f" · top-{job['top_k']}" if job.get("top_k") else "")
        if job.get("by") == "relevance":
            what += f" · by relevance of {job.get('target', 'top1')} ({job.get('composite')})"
    if job.get("crop", "none") != "none":
        what += " · centre crops (Explore shows the whole image)"
    if job.get("bf16"):
        what += " · bfloat16"
    status = (
        f"complete: {counts['ok']} of {counts['rows']} images, {counts['error']} failed"
        if run.complete and counts
        else f"in progress or interrupted: {len(run.table)} of {job['inputs']} rows done"
    )
    st.markdown(f"{what} · {status}")


def _explained(run: hookviz.Run) -> str:
    """What a classifier's run explains, the class named (a run given a class by index or by
    name explains the same one in every row; its table has the other half)."""
    target = str(run.manifest["job"].get("target", "top1"))
    if run.task != "classification":
        return f"target {target}"
    if target == "top1":
        return "explains each image's top-1 class"
    if target == "folder":
        return "explains each image's folder class"
    table = run.table
    named = table[table["status"] == "ok"] if len(table) else table
    if not len(named):  # (no row explained yet: the run's own words)
        return f"explains class {target}"
    row = named.iloc[0]
    return f"explains class {int(row['class_index'])} ({row['class_name']})"


def _resume(run: hookviz.Run) -> None:
    """An unfinished run: the command that continues it."""
    try:
        command = run.resume_command()
    except (OSError, KeyError) as exc:  # (a run folder missing its inputs.txt, an old manifest)
        st.caption(f"Give the command that made this run again to continue it ({exc}).")
        return
    st.markdown("Run the same command again to continue: finished chunks are kept.")
    st.code(command, language="bash")


def _filtered(table, command: str):
    """The table's rows that pass the filters that mean something for a ``command`` run: a
    features run has no classes, so only the rows' status."""
    cam = command == "cam"
    columns = st.columns([1, 1, 2, 2] if cam else [1, 5])
    status = columns[0].selectbox("Rows", ["all", "ok", "errors"], key="run_status")
    kept = {"ok": "ok", "errors": "error"}.get(status)
    shown = table if kept is None else table[table["status"] == kept]
    if cam:
        has_labels = "label" in table and table["label"].astype(str).str.len().gt(0).any()
        mistakes = columns[1].toggle(
            "Only mistakes",
            key="run_mistakes",
            disabled=not has_labels,
            help="Rows whose top-1 prediction is not the class of their folder (runs made with "
            "--target folder).",
        )
        names = sorted(n for n in table["top1_name"].astype(str).unique() if n)
        classes = columns[2].multiselect("Top-1 class", names, key="run_classes")
        low, high = columns[3].slider(
            "Top-1 confidence", 0.0, 1.0, (0.0, 1.0), step=0.01, key="run_confidence"
        )
        if mistakes and has_labels:
            wrong = shown["class_index"] != shown["top1_index"]
            shown = shown[(shown["status"] == "ok") & wrong]
        if classes:
            shown = shown[shown["top1_name"].isin(classes)]
        if (low, high) != (0.0, 1.0):
            probability = shown["top1_prob"]
            shown = shown[(probability >= low) & (probability <= high)]
    st.caption(f"{len(shown)} of {len(table)} rows")
    return shown


# What a row of a run of each other task holds: the name to filter by (if any), and its value.
_TASK_ROWS = {
    "detection": ("name", "score", "Box score"),
    "segmentation": ("name", "share", "Share of the pixels"),
    "embedding": (None, "similarity", "Similarity to the reference"),
}


def _by_task(run: hookviz.Run):
    """The filters of a detector's, segmenter's or embedder's run: its rows' status, their
    names and their value (a box's score, a category's share, a similarity)."""
    table = run.table
    name, value, label = _TASK_ROWS[run.task]
    columns = st.columns([1, 2, 2])
    status = columns[0].selectbox("Rows", ["all", "ok", "errors", "empty"], key="run_status")
    shown = table if status == "all" else table[table["status"] == status.rstrip("s")]
    if name is not None:
        names = sorted(n for n in table[name].astype(str).unique() if n and n != "nan")
        chosen = columns[1].multiselect(name.capitalize(), names, key="run_names")
        if chosen:
            shown = shown[shown[name].isin(chosen)]
    values = table[value].dropna()
    if len(values):
        low, high = float(values.min()), float(values.max())
        if high > low:
            picked = columns[2].slider(label, low, high, (low, high), key="run_values")
            if picked != (low, high):
                kept = shown[value]
                shown = shown[(kept >= picked[0]) & (kept <= picked[1])]
    st.caption(f"{len(shown)} of {len(table)} rows")
    return shown


def _row_caption(run: hookviz.Run, record) -> str:
    """What a row is, under its overlay."""
    name = Path(record["path"]).name
    if run.task == "detection":
        return f"{name} · {record['name']} ({record['score']:.0%})"
    if run.task == "segmentation":
        return f"{name} · {record['name']} ({record['share']:.0%} of the pixels)"
    if run.task == "embedding":
        return f"{name} · similarity {record['similarity']:.3f}"
    label = f" · label {record['label']}" if record.get("label") else ""
    return (
        f"{name} · explains {record['class_name']} · top-1 {record['top1_name']} "
        f"({record['top1_prob']:.0%}){label}"
    )


def _thumbnails(folder: str, run: hookviz.Run, shown) -> None:
    rows = [int(i) for i in shown.index[shown["status"] == "ok"][:THUMBNAILS]]
    if not rows:
        return
    st.markdown(f"**Overlays** (the first {len(rows)} rows shown)")
    alpha, cmap = float(state.wish("alpha")), str(state.wish("cam_cmap"))
    for row, column in zip(rows, _grid(len(rows)), strict=True):
        record = run.table.iloc[row]
        picture = runs.run_overlay(folder, run_stamp(folder), row, alpha, cmap)
        name = Path(record["path"]).name
        if picture is None:
            column.caption(f"{name}: not found where the run recorded it ({record['path']})")
            continue
        column.image(picture)
        column.caption(_row_caption(run, record))
        if run.input_path(row) is None:  # (the run's overlay is there, its image is not)
            column.caption(f"Its image has moved from {record['path']}: it cannot be opened.")
            continue
        column.button(
            "Open in Explore",
            key=f"open_row_{row}",
            on_click=_open,
            args=(run, row),
        )


def _top_examples(folder: str, run: hookviz.Run) -> None:
    if not run.manifest["job"].get("top_k"):
        st.caption("A features run: its array is `hookviz.open_run(DIR).features`.")
        return
    channels = run.features.shape[1]
    channel = st.number_input("Channel", 0, channels - 1, 0, key="run_channel")
    try:
        examples = run.top_examples(int(channel))
    except hookviz.HookvizError as exc:
        st.info(str(exc))
        return
    st.markdown(f"**{ranked_by(run, int(channel))}**")
    shown = examples[:THUMBNAILS]
    for (row, value), column in zip(shown, _grid(len(shown)), strict=True):
        path = run.table.iloc[row]["path"]
        found = run.input_path(row)
        picture = runs.run_picture(str(found)) if found is not None else None
        if picture is not None:
            column.image(picture)
        missing = "" if picture else " (not found)"
        column.caption(f"{literal(Path(path).name)} · {value:.3g}{missing}")
        if found is not None:
            column.button("Open in Explore", key=f"open_row_{row}", on_click=_open, args=(run, row))


def ranked_by(run: hookviz.Run, channel: int) -> str:
    """What a features run's top examples of ``channel`` are, in words: the images that
    excite it most, or (a run by relevance) where it carries the most of the class."""
    job = run.manifest["job"]
    if job.get("by") != "relevance":
        return f"The images of this run that excite channel {channel} most"
    target = str(job.get("target", "top1"))
    whose = "each image's top-1 class" if target == "top1" else f"class {target}"
    return f"The images of this run where channel {channel} carries the most of {whose}'s relevance"


def _grid(count: int, per_row: int = 4) -> list:
    """``count`` cells, ``per_row`` to a row of their own columns: on a narrow screen, where
    columns stack, the cells then come in reading order (one set of columns would stack as
    1, 5, 9, 2, ...)."""
    cells = []
    for start in range(0, count, per_row):
        cells.extend(st.columns(per_row)[: min(per_row, count - start)])
    return cells


def _row_target(run: hookviz.Run, record) -> ViewTarget:
    """What a cam run's row explains, as the page's target."""
    if run.task == "detection":
        box = tuple(float(record[side]) for side in ("x0", "y0", "x1", "y1"))
        return ViewTarget.of_box(int(record["label"]), box)
    if run.task == "segmentation":
        return ViewTarget.of_region(int(record["category"]))
    if run.task == "embedding":
        reference = Path(run.manifest["job"]["reference"])
        digest = images.image_store().put(reference.read_bytes(), reference.name)
        return ViewTarget.similar_to(digest)
    return ViewTarget.of_class(int(record["class_index"]))


def _open(run: hookviz.Run, row: int) -> None:
    """Explore this row's image with the run's model, weights and layer, and for a cam run its
    method and class (a features run has neither: the class explained stays as it was)."""
    record = run.table.iloc[row]
    found = run.input_path(row)
    try:
        if found is None:
            raise OSError("the file is not where the run recorded it")
        data = found.read_bytes()
    except OSError as exc:
        st.session_state[_OPEN_ERROR] = f"Cannot open {record['path']}: {exc}"
        return
    job = run.manifest["job"]
    cam = job["command"] == "cam"
    model = job["model"]
    try:
        target = _row_target(run, record) if cam else state.wish("target")
    except OSError as exc:
        st.session_state[_OPEN_ERROR] = f"Cannot open the run's reference image: {exc}"
        return
    if run.task == "embedding":
        model = models.EMBEDDER + model  # (the classifier as the embedder the run used)
    image_input.open_image(data, Path(record["path"]).name, target)
    chosen = [("model", model), ("weights", job["weights"]), ("layer", job["layer"])]
    for name, value in chosen + ([("method", job["method"])] if cam else []):
        state.choose(name, value)
    st.session_state[_SWITCH_TO_EXPLORE] = True
