"""The "What a channel looks for" page: a picture optimised to excite the channel (feature
visualization), the channel's map on the current image, the images of an open dataset run that
excite it most, the explained class's own visualization, and how the channel computes
(``hookviz.app.channel_filter``).

A visualization takes seconds to minutes, so it is made only when asked for (the button says
how long it will take, from three steps timed here), with a progress bar and a Cancel button;
any control change cancels it too (Streamlit stops the script at the next progress update and
the request is used up when the run starts, so it does not restart by itself). Made pictures are
kept (``insight.visualizations``) and shown at once when the same view comes back. The slow
work runs last, after everything else on the page is drawn, so the page never waits on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import pandas as pd
import streamlit as st

import hookviz
from hookviz.app import feedback, panels
from hookviz.app.caches import encoded, insight
from hookviz.app.pages.channel import channel_filter
from hookviz.app.pages.dataset import run_examples
from hookviz.app.sidebar.scene import Scene
from hookviz.app.texts import VISUALIZE_HELP
from hookviz.app.view import state
from hookviz.app.view.literal import literal

STEPS = (32, 64, 128, 256, 512)
COUNTS = (1, 2, 4)
REQUEST_KEY = "hookviz.vis_request"  # the key of the visualization asked for, until it starts
_RUNNING = "hookviz.vis_running"  # the key being made (left behind when a change stops it)
_CANCELLED = "hookviz.vis_cancelled"  # the key whose making the Cancel button stopped


class Made(NamedTuple):
    """What a visualization's pictures depend on: the key they are kept and asked for under.
    ``of`` is ``"channel"`` (``unit``: a channel of ``layer``) or ``"class"`` (``unit``: a class
    index; ``layer`` None)."""

    of: str
    model: str
    pretrained: bool
    layer: str | None
    unit: int
    steps: int
    seed: int
    count: int


def page(scene: Scene) -> None:
    if not panels.header("What a channel looks for", scene):
        return
    view, features = scene.view, scene.analysis.features
    channels = features.num_channels
    strongest = int(features.channel_order("mean", 1)[0])
    top = st.columns([2, 1, 1, 1])
    channel = int(
        state.widget(
            "vis_channel",
            top[0].number_input,
            state.resolve("vis_channel", state.index_valid(channels), strongest),
            f"Channel of {view.layer} (0 to {channels - 1})",
            min_value=0,
            max_value=channels - 1,
            step=1,
            key=f"vis_channel@{view.model}@{view.layer}",
            help=f"Default: the strongest on this image ({strongest}). The layer is in the "
            "sidebar.",
        )
    )
    steps = state.widget(
        "vis_steps",
        top[1].selectbox,
        state.resolve("vis_steps", state.options_valid(STEPS)),
        "Steps",
        STEPS,
        help="More steps: a clearer picture, in proportion more time.",
    )
    count = state.widget(
        "vis_count",
        top[2].selectbox,
        state.resolve("vis_count", state.options_valid(COUNTS)),
        "Pictures",
        COUNTS,
        help="Several pictures of one channel, pushed to differ from each other (a diversity "
        "term): a channel often responds to more than one thing.",
    )
    seed = state.widget(
        "vis_seed",
        top[3].number_input,
        state.clamp("vis_seed", 0, 10**6),
        "Seed",
        min_value=0,
        max_value=10**6,
        step=1,
        help="The starting noise and the random shifts; the same seed gives the same picture.",
    )
    state.publish()
    slow: list[Callable[[], None]] = []  # run after the rest of the page is drawn
    cam = scene.analysis.cam
    key = Made("channel", view.model, view.pretrained, view.layer, channel, steps, seed, count)
    # (several pictures of a class are pushed apart at the sidebar's layer: they depend on it)
    class_layer = view.layer if count > 1 else None
    class_key = Made(
        "class", view.model, view.pretrained, class_layer, cam.class_index, steps, seed, count
    )
    if st.session_state.get(REQUEST_KEY) not in (key, class_key):
        st.session_state.pop(REQUEST_KEY, None)  # asked for a view that a change has since left

    mean = float(features.activations[channel].mean())  # on this image
    left, right = st.columns(2)
    with left:
        st.markdown(f"**What excites channel {channel}**")
        ceiling = _ceiling(scene.loaded, view.layer)
        slow.append(_visualization(st.container(), scene, key, mean, ceiling))
    with right:
        st.markdown(f"**Channel {channel} on this image**")
        alpha, cmap = state.wish("alpha"), state.wish("grid_cmap")
        st.image(encoded.channel_overlay_jpeg(view.key, channel, alpha, cmap), width="stretch")
        rank = features.channel_order("mean").index(channel) + 1
        st.caption(
            f"Its map stretched over the image: mean activation {mean:.2f}, the "
            f"{_ordinal(rank) + ' ' if rank > 1 else ''}strongest of {channels} channels here."
        )
        run_examples.show(view, channel)

    if panels.explains_classes(scene, "A class visualization"):
        st.markdown(
            f"**What the model sees as “{literal(cam.class_name)}”** (class {cam.class_index})"
        )
        st.caption(
            "A class visualization: the picture optimised so that this class's score is large "
            "(the class is the one explained in the sidebar)."
        )
        slow.append(_visualization(st.container(), scene, class_key, cam.score))

    channel_filter.section(scene, channel)
    with st.expander("What am I looking at?"):
        st.markdown(VISUALIZE_HELP)
    for work in slow:
        work()


def _visualization(
    place, scene: Scene, key: Made, reference: float, ceiling: float | None = None
) -> Callable[[], None]:
    """Draw the made pictures of ``key`` in ``place`` now, or its button; returns the slow
    part (timing the estimate, making the pictures), to run once the page is drawn.
    ``reference``: the channel's mean activation (the class's score) on this image;
    ``ceiling``: the most the channel can reach (a ReLU6's 6), said when the pictures reach
    it."""
    channel = key.unit if key.of == "channel" else None
    target = key.unit if key.of == "class" else None
    made = insight.visualizations().get(key, None)
    if made is not None:
        with place:
            _show(made, key, reference, ceiling)
        return lambda: None
    session = st.session_state
    if session.get(_RUNNING) == key:  # asked for, started, and stopped by a control change
        session.pop(_RUNNING)
        place.caption("The last one was cancelled before it finished.")
    if session.get(_CANCELLED) == key:  # the Cancel button: said once
        session.pop(_CANCELLED)
        place.caption("Cancelled: nothing was made. Make it again any time.")
    # One slot for the button and, once asked for, the Cancel button and the progress bar.
    slot = place.empty()
    if session.get(REQUEST_KEY) not in (None, key):
        # The other picture is being made in this run: this button waits, disabled, drawn now
        # (the offer with its estimate would come only after that work, leaving the previous
        # run's button on screen, clickable, meanwhile); the rerun that shows the made picture
        # offers it again.
        slot.button(
            f"Make it ({key.steps} steps) once the other picture is made",
            key=f"make@{key.of}",
            disabled=True,
        )
        return lambda: None
    if session.get(REQUEST_KEY) != key:

        def offer() -> None:
            with feedback.working("Timing three steps for the estimate…"):
                per_step = insight.seconds_per_step(
                    key.model, key.pretrained, key.layer, target, key.count
                )
            seconds = per_step * (key.steps + 1)
            slot.button(
                f"Make it ({key.steps} steps, about {_duration(seconds)})",
                key=f"make@{key.of}",
                on_click=session.__setitem__,
                args=(REQUEST_KEY, key),
                type="primary",
            )

        return offer

    def run() -> None:
        session.pop(REQUEST_KEY, None)  # used up: a control change stops it for good
        session[_RUNNING] = key
        # The offer's button becomes a disabled one in the same slot: an element replacing an
        # element updates it in the browser (a block there would leave the old button on
        # screen, stale but clickable, until the run ends: a click would start over).
        slot.button(f"Making it ({key.steps} steps)…", key=f"make@{key.of}", disabled=True)
        with place:
            st.button("Cancel", key=f"cancel@{key.of}", on_click=_cancel, args=(key,))
            bar = st.progress(0.0, text="Starting…")
        started = time.perf_counter()

        def progress(done: int, total: int) -> None:
            elapsed = time.perf_counter() - started
            text = f"Step {done} of {total} · {elapsed:.0f} s"
            if done:
                text += f", about {_duration(elapsed / done * (total - done))} to go"
            bar.progress(done / total, text=text)

        try:
            pictures = hookviz.visualize_diverse(
                scene.loaded,
                key.layer,
                channel,
                target,
                key.count,
                key.steps,
                seed=key.seed,
                progress=progress,
            )
        except (hookviz.HookvizError, ValueError) as exc:
            session.pop(_RUNNING, None)
            slot.error(f"Cannot make this visualization: {exc}")
            return
        insight.visualizations().put(pictures, key)
        session.pop(_RUNNING, None)
        st.rerun()  # shown without the bar and the Cancel button

    return run


def _cancel(key: Made) -> None:
    st.session_state.pop(_RUNNING, None)
    st.session_state[_CANCELLED] = key


def _ceiling(loaded: hookviz.LoadedModel, layer: str | None) -> float | None:
    """The most a layer's outputs can be: 6 where it is (or is the same tensor as) a ReLU6."""
    for info in hookviz.layer_table(loaded).layers:
        if info.type_name == "ReLU6" and layer in (info.name, info.same_as):
            return 6.0
    return None


def _show(made: list, key: Made, reference: float, ceiling: float | None = None) -> None:
    st.image([v.image for v in made], width=224 if len(made) > 1 else 320)
    what = "activation" if key.of == "channel" else "class score"
    reached = ", ".join(f"{v.activation:.2f}" for v in made)
    name = "Mean activation" if key.of == "channel" else "Class score"
    text = f"{name} on {'these pictures' if len(made) > 1 else 'it'}: {reached}"
    if reference > 0:
        best = max(v.activation for v in made)
        text += f"; on this image {reference:.2f} ({best / reference:.1f}x)"
    st.caption(text + f" · seed {made[0].seed}, {made[0].steps} steps, {made[0].size} px.")
    if ceiling is not None and max(v.activation for v in made) >= ceiling - 0.005:
        st.caption(
            f"{ceiling:.2f} is the ceiling of this layer's ReLU6: the channel is saturated at "
            "every position of the picture, which cannot excite it more. A layer before the "
            "ReLU6 shows how far it would go."
        )
    curve = pd.DataFrame({"step": range(len(made[0].objective)), what: made[0].objective})
    st.line_chart(curve, x="step", y=what, height=180)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
