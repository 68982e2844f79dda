"""The images of the open dataset run that excite a channel most ("dataset examples", as
OpenAI Microscope showed them), beside the channel's map: on the channel page and in Explore's
single-channel view."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

import hookviz
from hookviz.app.caches import runs
from hookviz.app.pages.dataset import circuit_view, run_folder
from hookviz.app.pages.dataset import page as dataset
from hookviz.app.view import state
from hookviz.app.view.keys import View


def show(view: View, channel: int, *, hint: bool = True, width: int = 120) -> None:
    """The images of the open dataset run that excite this channel most (a features run of
    this model and layer made with --top-k). ``hint``: say how to get them when no such run
    is open (the channel page does; Explore stays quiet)."""
    folder = state.wish("run_dir")
    how = (
        "Dataset examples: make a run with e.g. `hookviz features photos/ --model "
        f"{view.model} --layer {view.layer} --top-k 8 --out runs/photos` and open it on the "
        "Dataset run page; the images that excite this channel most then show here."
    )
    try:
        place = str(run_folder.run_places().locate(folder)) if folder else None
        if place and circuit_view.is_circuit(Path(place).expanduser()):
            _circuit_examples(view, channel, place, folder, width)
            return
        run = runs.dataset_run(place, dataset.run_stamp(place)) if place else None
    except (hookviz.HookvizError, run_folder.RunFolderRefused):
        run = None
    job = run.manifest["job"] if run is not None else {}
    if job.get("command") != "features" or not job.get("top_k"):
        if hint:
            st.caption(f"The open run ({folder}) has no top-k examples. {how}" if job else how)
        return
    weights = "pretrained" if view.pretrained else "untrained"
    if (job["model"], job["weights"], job["layer"]) != (view.model, weights, view.layer):
        st.caption(
            f"The open run ({folder}) is of {job['model']} ({job['weights']}) at "
            f"`{job['layer']}`: pick that model and layer to see its examples here."
        )
        return
    try:
        examples = run.top_examples(channel)
    except hookviz.HookvizError as exc:
        st.caption(str(exc))
        return
    pictures, captions = [], []
    for row, value in examples[:8]:
        found = run.input_path(row)
        picture = runs.run_picture(str(found)) if found is not None else None
        if picture is not None:
            pictures.append(picture)
            captions.append(f"{found.name} · {value:.2f}")
    st.markdown(f"**{dataset.ranked_by(run, channel)}** ({folder})")
    if pictures:
        st.image(pictures, caption=captions, width=width)
    else:
        st.caption("Their files are gone from where the run read them.")


def _circuit_examples(view: View, channel: int, place: str, folder: str, width: int) -> None:
    """The images of the open circuit where this channel carries the most of its class (a
    channel of one of its two layers, with its model and weights)."""
    try:
        found, model, weights = runs.dataset_circuit(place, circuit_view.circuit_stamp(place))
    except hookviz.HookvizError as exc:
        st.caption(f"The open circuit ({folder}): {exc}")
        return
    shown = "pretrained" if view.pretrained else "untrained"
    if (model, weights) != (view.model, shown) or view.layer not in (found.lower, found.upper):
        st.caption(
            f"The open circuit ({folder}) is of {model} ({weights}) at `{found.lower}` and "
            f"`{found.upper}`: pick that model and one of those layers to see its examples here."
        )
        return
    examples = found.examples(view.layer, channel, 8)
    pictures, captions = circuit_view.example_pictures(found, examples)
    st.markdown(
        f"**Images of the circuit where it carries the most of {found.class_name}** ({folder})"
    )
    if pictures:
        st.image(pictures, caption=captions, width=width)
    else:
        st.caption("Their files are gone from where the circuit read them.")
