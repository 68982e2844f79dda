"""A ``hookviz circuit`` folder on the Dataset run page: the class's most relevant channels at
the two layers, the links between them (a chart, and the table to download), and each
channel's examples, with a way to the channel's own page (its visualization and filter)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

import hookviz
from hookviz.app import charts
from hookviz.app.caches import runs
from hookviz.app.pages import addresses
from hookviz.app.pages.dataset import run_folder
from hookviz.app.view import state
from hookviz.app.view.literal import literal

LOWER_SHOWN = 8  # lower channels in the chart (the most relevant)
EXAMPLES = 4  # example images per channel
_SWITCH_TO_CHANNEL = "circuit_switch"  # set by a channel's button: go to the Channel page


def is_circuit(folder: Path) -> bool:
    """Whether ``folder`` holds a ``hookviz circuit`` (its first run is there)."""
    return (folder / "upper" / "manifest.json").is_file()


def circuit_stamp(folder: str) -> str:
    """Changes whenever either of the circuit's runs or its tables do (or go)."""
    return run_folder.files_stamp(
        folder, "circuit.json", "upper/manifest.json", "links/manifest.json"
    )


def show(folder: str) -> None:
    """The circuit in ``folder`` (an unfinished one: how to finish it)."""
    if st.session_state.pop(_SWITCH_TO_CHANNEL, False):
        st.switch_page(addresses.page_at(addresses.CHANNEL))
    try:
        found, model, weights = runs.dataset_circuit(folder, circuit_stamp(folder))
    except hookviz.HookvizError as exc:
        st.info(literal(exc))
        return
    st.markdown(
        f"circuit of **{model}** ({weights}) · class {found.class_index} "
        f"(**{found.class_name}**) · `{found.lower}` → `{found.upper}` · {found.composite} · "
        f"{found.images} images"
    )
    st.caption(
        "The class's relevance (LRP) over every image reaches the upper layer's channels; a "
        "link is what reaches a lower channel when only one upper channel's relevance goes "
        "on down. Values are means over the images, in units of the class's score."
    )
    lowers = [c for c, _ in found.top_lower(LOWER_SHOWN)]
    st.altair_chart(charts.circuit_links(found, lowers), width="stretch")
    _links_table(found, folder)
    _channel(found, model, weights)


def _links_table(found: hookviz.Circuit, folder: str) -> None:
    st.markdown("**Strongest links**")
    rows = found.table()
    st.dataframe(rows[:50], width="stretch", height=240, hide_index=True)
    written = Path(folder).expanduser() / "links.csv"
    if written.is_file():
        st.download_button(
            f"Download all {len(rows)} links (CSV)",
            written.read_bytes(),
            file_name=f"circuit-{found.class_name}-{found.lower}-{found.upper}.csv",
            mime="text/csv",
            key="circuit_links_csv",
        )


def _channel(found: hookviz.Circuit, model: str, weights: str) -> None:
    """One channel of either layer: its share, its links, its examples, its own page."""
    st.markdown("**A channel of the circuit**")
    choices = [(found.upper, c) for c in found.upper_channels]
    choices += [(found.lower, c) for c, _ in found.top_lower(LOWER_SHOWN)]
    layer, channel = st.selectbox(
        "Channel",
        choices,
        format_func=lambda pair: f"{pair[0]} · channel {pair[1]}",
        key="circuit_channel",
    )
    mean = found.upper_relevance if layer == found.upper else found.lower_relevance
    whole = float(mean.sum())
    share = float(mean[channel]) / whole if whole else 0.0
    st.caption(
        f"{share:.0%} of the class's relevance at `{layer}`. {_its_links(found, layer, channel)}"
    )
    examples = found.examples(layer, channel, EXAMPLES)
    pictures, captions = example_pictures(found, examples)
    if pictures:
        st.markdown("The images where it carries the most of the class")
        st.image(pictures, caption=captions, width=160)
    elif examples:
        st.caption("Its images are gone from where the run read them.")
    st.button(
        f"What is channel {channel}?",
        key=f"circuit_open@{layer}@{channel}",
        icon=":material/visibility:",
        help=f"Its feature visualization and filter, with {model} at {layer}.",
        on_click=_open_channel,
        args=(model, weights, layer, channel),
    )


def example_pictures(
    found: hookviz.Circuit, examples: list[tuple[int, float]]
) -> tuple[list[bytes], list[str]]:
    """The pictures of a circuit's ``examples`` ((image, relevance) pairs) still where it
    read them, with their captions (the file's name and the relevance)."""
    pictures, captions = [], []
    for row, value in examples:
        path = found.sources[row] if row < len(found.sources) else ""
        picture = runs.run_picture(path) if path else None
        if picture is not None:
            pictures.append(picture)
            captions.append(f"{Path(path).name} · {value:.3g}")
    return pictures, captions


def _its_links(found: hookviz.Circuit, layer: str, channel: int) -> str:
    """The channel's strongest links, in words."""
    if layer == found.upper:
        row = found.upper_channels.index(channel)
        order = found.links[row].argsort()[::-1][:3]
        parts = [f"{found.lower} {int(i)} ({found.link(channel, int(i)).share:.0%})" for i in order]
        return "It draws most on " + ", ".join(parts) + "."
    feeds = sorted(
        (found.link(upper, channel) for upper in found.upper_channels),
        key=lambda link: -link.relevance,
    )[:3]
    return "It feeds most " + ", ".join(f"{found.upper} {link.upper}" for link in feeds) + "."


def _open_channel(model: str, weights: str, layer: str, channel: int) -> None:
    for name, value in (("model", model), ("weights", weights), ("layer", layer)):
        state.choose(name, value)
    state.choose("vis_channel", channel)
    st.session_state[_SWITCH_TO_CHANNEL] = True
