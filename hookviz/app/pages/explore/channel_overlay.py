"""Explore's single-channel view, in the panel of the channels behind the heatmap: one channel's
map stretched over the image, the dataset images that excite it, and the way to its page."""

from __future__ import annotations

import streamlit as st

import hookviz
from hookviz.app import feedback
from hookviz.app.caches import encoded
from hookviz.app.pages import addresses
from hookviz.app.pages.dataset import run_examples
from hookviz.app.pages.explore import display
from hookviz.app.view import fragments, state
from hookviz.app.view.keys import AnalysisKey, View

_ON = "channel_overlay_on"  # the key of the check box that turns the overlay on


@st.fragment(key=fragments.CHANNEL)
@feedback.guarded
def panel(key: AnalysisKey, analysis: hookviz.Analysis, view: View) -> None:
    """One channel's map over the image, when asked for."""
    options = display.display_options(analysis)
    features = analysis.features
    count = features.num_channels
    wished = state.wish("channel_overlay")
    strongest = int(features.channel_order("mean", 1)[0])
    st.session_state[_ON] = wished is not None
    if not st.checkbox(
        "Overlay one channel on the image",
        key=_ON,
        on_change=_toggle,
        args=(strongest,),
    ):
        state.shown("channel_overlay", None)
        state.publish()
        return
    channel = state.widget(
        "channel_overlay",
        st.selectbox,
        state.resolve("channel_overlay", state.index_valid(count), strongest),
        "Channel",
        list(range(count)),
        key=f"channel_overlay@{features.layer}",
    )
    alpha, cmap = options["alpha"], options["grid_cmap"]
    st.image(encoded.channel_overlay_jpeg(key, int(channel), alpha, cmap))
    st.caption(f"Channel {channel} of {features.layer}, stretched over the image.")
    run_examples.show(view, int(channel), hint=False, width=90)
    state.publish()
    if st.button(
        f"What does channel {channel} look for?",
        key="to_channel_page",
        icon=":material/visibility:",
        help="Its feature visualization, its filter and the dataset images that excite it.",
    ):
        state.choose("vis_channel", int(channel))
        st.switch_page(addresses.page_at(addresses.CHANNEL))


def _toggle(strongest: int) -> None:
    """The overlay check box turns the single-channel view on at the strongest channel, or off
    (the chosen channel is a field of the view; on/off is whether it is set)."""
    on = st.session_state[_ON]
    state.choose("channel_overlay", strongest if on else None)
