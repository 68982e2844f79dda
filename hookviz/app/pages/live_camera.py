"""The Live camera page: the browser's camera, each frame explained with the sidebar's model,
layer and method (the CAM over the picture, the top-5 beside it, the frames per second
reached), a Pause that freezes on the last explained frame, and a Snapshot that opens that
frame in Explore as the sidebar's image.

The camera comes through streamlit-webrtc (the browser sends its frames over WebRTC, the server
sends back the overlays); its frame callback is ``hookviz.app.live_explainer``, which drops the
frames that arrive while one is explained. No STUN or TURN server is named: on a class's LAN (no
internet) the browser and the server reach each other by their own addresses.
"""

from __future__ import annotations

import time

import streamlit as st
from streamlit_webrtc import WebRtcMode, webrtc_streamer

import hookviz
from hookviz import render
from hookviz.app import panels
from hookviz.app.live_explainer import LiveExplainer, LiveSettings
from hookviz.app.method_texts import METHOD_LABELS
from hookviz.app.pages import addresses
from hookviz.app.pages.explore import display
from hookviz.app.sidebar import image_input
from hookviz.app.sidebar.scene import Scene
from hookviz.app.view import state
from hookviz.app.view.fields import FIELDS
from hookviz.app.view.literal import literal
from hookviz.app.view.target import TOP1

_EXPLAINER = "hookviz.live_explainer"  # this session's LiveExplainer (the callback's state)
_SWITCH_TO_EXPLORE = "live_switch"  # set by Snapshot: the run it starts opens Explore
READOUT_EVERY_S = 0.5  # how often the frames per second and the top-5 are redrawn, playing
# No ICE server: the browser and the server meet by their host addresses (a LAN, loopback).
# streamlit-webrtc would otherwise name Google's public STUN server, unreachable offline.
RTC_CONFIGURATION = {"iceServers": []}


def page(scene: Scene) -> None:
    if st.session_state.pop(_SWITCH_TO_EXPLORE, False):
        st.switch_page(addresses.page_at(addresses.EXPLORE))
    st.markdown("### Live camera")
    if not panels.explains_classes(scene, "The live camera (its top-5 classes)"):
        return
    view = scene.view
    method = view.method
    if method in hookviz.SLOW_METHODS:
        st.info(
            f"{METHOD_LABELS[method]} runs a forward pass per channel or sample, far too slow "
            "for a camera: the live picture uses Grad-CAM."
        )
        method = "gradcam"
    alpha, cmap = _overlay_options(scene)
    explainer = _explainer(LiveSettings(scene.loaded, view.layer, method, alpha, cmap))
    st.caption(
        "Browsers allow the camera only on a page served from localhost or over HTTPS: a "
        "class's server needs a certificate (the Live camera guide says how)."
    )
    picture, readout = st.columns([3, 2])
    with picture:
        stream = webrtc_streamer(
            key="live_camera",
            mode=WebRtcMode.SENDRECV,
            rtc_configuration=RTC_CONFIGURATION,
            # (a phone's back camera where it has one; 640 px wide is more than the model's
            # 224 and spares the phone's upload and the server's decoding)
            media_stream_constraints={
                "video": {"facingMode": "environment", "width": {"ideal": 640}},
                "audio": False,
            },
            queued_video_frames_callback=explainer.explain_newest,
            async_processing=True,
        )
        _controls(explainer, stream.state.playing)
    with readout:
        # redrawn on its own while the camera plays (a start or stop reruns the page)
        every = READOUT_EVERY_S if stream.state.playing else None
        st.fragment(_readout, run_every=every)(explainer, stream.state.playing)
    st.caption(
        f"Each frame: {METHOD_LABELS[method]} of its top-1 class at **{view.layer}** of "
        f"**{view.model}**, one forward and one backward pass on the frame at the model's own "
        "size. Frames that arrive while one is explained are skipped, so the picture stays "
        "live. Model, layer and method are the sidebar's."
    )


def _overlay_options(scene: Scene) -> tuple[float, str]:
    """The opacity and colormap of the CAM chosen in Explore's display options (their
    defaults before any choice)."""
    wishes = state.wishes()
    if scene.analysis is not None:  # (checked as Explore checks them)
        options = display.resolve_display(wishes, scene.analysis)
        return options["alpha"], options["cam_cmap"]
    return FIELDS["alpha"].default, FIELDS["cam_cmap"].default


def _explainer(settings: LiveSettings) -> LiveExplainer:
    """This session's explainer, given the sidebar's current choices (a change applies from
    the next frame on)."""
    explainer = st.session_state.get(_EXPLAINER)
    if explainer is None:
        explainer = st.session_state[_EXPLAINER] = LiveExplainer(settings)
    else:
        explainer.settings = settings
    return explainer


def _controls(explainer: LiveExplainer, playing: bool) -> None:
    pause, snapshot = st.columns(2)
    paused = explainer.paused
    pause.button(
        "Resume" if paused else "Pause",
        key="live_pause",
        icon=":material/play_arrow:" if paused else ":material/pause:",
        on_click=_toggle_pause,
        args=(explainer,),
        width="stretch",
    )
    snapshot.button(
        "Snapshot: open in Explore",
        key="live_snapshot",
        icon=":material/photo_camera:",
        on_click=_snapshot,
        args=(explainer,),
        # (while playing, a frame is explained by the time it is pressed; the buttons are not
        # redrawn with each frame)
        disabled=not playing and explainer.latest() is None,
        width="stretch",
    )


def _toggle_pause(explainer: LiveExplainer) -> None:
    explainer.paused = not explainer.paused


def _snapshot(explainer: LiveExplainer) -> None:
    """The last explained frame becomes the sidebar's image, as an opened photo (the path an
    upload takes: same store, the address names it by its digest), and Explore opens on it."""
    latest = explainer.latest()
    if latest is None:
        return
    name = time.strftime("camera %H-%M-%S.png")
    image_input.open_image(render.png_bytes(latest.frame), name, TOP1, "a camera snapshot")
    explainer.paused = False
    st.session_state[_SWITCH_TO_EXPLORE] = True


def _readout(explainer: LiveExplainer, playing: bool) -> None:
    """The frames per second and the top-5 of the last explained frame (a fragment, redrawn
    every ``READOUT_EVERY_S`` while the camera plays)."""
    latest = explainer.latest()
    problem = explainer.problem()
    if problem is not None:
        st.error(f"The frames cannot be explained: {problem}")
    if not playing:
        st.metric("Frames per second", "stopped")
    elif explainer.paused:
        st.metric("Frames per second", "paused")
    else:
        st.metric("Frames per second", f"{explainer.frames_per_second():.1f}")
    if latest is None:
        st.caption("Press **START** under the picture: the top-5 of each frame shows here.")
        return
    if explainer.paused:
        st.image(latest.overlay, caption="Paused on this frame", width="stretch")
    st.markdown(f"**Top-5** (the overlay explains “{latest.explained}”)")
    for rank, prediction in enumerate(latest.predictions, start=1):
        st.progress(
            min(1.0, max(0.0, prediction.probability)),
            text=f"{rank}. {literal(prediction.name)} · {prediction.probability:.1%}",
        )
