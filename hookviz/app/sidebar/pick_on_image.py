"""Choosing on the picture itself: a detector's box by clicking it, a segmenter's rectangle by
dragging it. The picture is a Vega-Lite chart whose axes are the image's own pixels, so a box
drawn there and a rectangle dragged there are in the coordinates a ``ViewTarget`` holds; Streamlit
hands the chart's selection to a callback, which makes the choice as a button would
(``state.choose``) before the run draws the sidebar's list."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence

import altair as alt
import streamlit as st

import hookviz
from hookviz.app.charts import BLUE, RED
from hookviz.app.view import state
from hookviz.app.view.target import ViewTarget
from hookviz.core.targets import has_area

WIDTH = 236  # pixels: the picture fits the sidebar at its narrowest
_MAX_HEIGHT = 320  # a tall image is drawn narrower instead
_BOX = "box"  # the selection parameters' names: the keys of the chart's selection state
_RECTANGLE = "rectangle"


def click_a_box(
    picture: bytes,
    size: tuple[int, int],
    listed: Sequence[hookviz.Detection],
    targets: Sequence[ViewTarget],
    chosen: ViewTarget,
    key: str,
) -> None:
    """The display picture with every listed box outlined (the chosen one in red); a click on
    a box chooses ``targets[i]`` for ``listed[i]``. Nested boxes: the smaller is on top."""
    frame, x, y = _frame(picture, size)
    rows = [
        {"x": d.box[0], "y": d.box[1], "x2": d.box[2], "y2": d.box[3], "position": position,
         "label": f"#{position + 1} {d.name} ({d.score:.0%})", "chosen": target == chosen}
        for position, (d, target) in enumerate(zip(listed, targets, strict=True))
    ]  # fmt: skip
    rows.sort(key=lambda r: -(r["x2"] - r["x"]) * (r["y2"] - r["y"]))
    pick = alt.selection_point(name=_BOX, fields=["position"], on="click", clear=False)
    boxes = (
        alt.Chart(alt.Data(values=rows))
        .mark_rect(fill="white", fillOpacity=0.01, cursor="pointer")
        .encode(
            x=x, y=y, x2="x2:Q", y2="y2:Q",
            stroke=alt.condition(alt.datum.chosen, alt.value(RED), alt.value(BLUE)),
            strokeWidth=alt.condition(alt.datum.chosen, alt.value(3), alt.value(1.5)),
            tooltip=alt.Tooltip("label:N", title="box"),
        )
        .add_params(pick)
    )  # fmt: skip

    def picked() -> None:
        chosen_rows = st.session_state[key].selection.get(_BOX) or []
        if chosen_rows:
            state.choose("target", targets[int(chosen_rows[0]["position"])])

    _draw(frame + boxes, size, key, picked, "Click a box on the picture to explain it")


def drag_a_rectangle(
    picture: bytes,
    size: tuple[int, int],
    rectangle_of: Callable[[tuple[float, float, float, float]], ViewTarget],
    key: str,
) -> None:
    """The display picture; a rectangle dragged over it chooses ``rectangle_of(box)``, the box
    in the image's pixels (a click, a rectangle of no area, chooses nothing)."""
    frame, _, _ = _frame(picture, size)
    drag = alt.selection_interval(name=_RECTANGLE, encodings=["x", "y"], clear=False)
    width, height = size

    def dragged() -> None:
        ranges = st.session_state[key].selection.get(_RECTANGLE) or {}
        if "x" not in ranges or "y" not in ranges:
            return
        (x0, x1), (y0, y1) = sorted(ranges["x"]), sorted(ranges["y"])
        box = (max(0.0, x0), max(0.0, y0), min(float(width), x1), min(float(height), y1))
        if has_area(box):
            state.choose("target", rectangle_of(box))

    prompt = "Drag a rectangle on the picture to explain it"
    _draw(frame.add_params(drag), size, key, dragged, prompt)


def _drawn_size(size: tuple[int, int]) -> tuple[int, int]:
    width, height = size
    drawn_width = min(WIDTH, round(_MAX_HEIGHT * width / height))
    return drawn_width, round(drawn_width * height / width)


def _frame(picture: bytes, size: tuple[int, int]):
    """The picture as a chart layer on axes of the image's pixels (y down), and the two axes."""
    width, height = size
    url = "data:image/jpeg;base64," + base64.b64encode(picture).decode("ascii")
    x = alt.X("x:Q", scale=alt.Scale(domain=[0, width], nice=False, zero=False), axis=None)
    y = alt.Y(
        "y:Q", scale=alt.Scale(domain=[0, height], nice=False, zero=False, reverse=True), axis=None
    )
    # the picture spans the axes' domain, whatever size the view is drawn at
    corners = {"x": 0, "y": 0, "x2": width, "y2": height, "url": url}
    frame = (
        alt.Chart(alt.Data(values=[corners]))
        .mark_image(aspect=False)
        .encode(x=x, y=y, x2="x2:Q", y2="y2:Q", url="url:N")
    )
    return frame, x, y


def _draw(
    chart: alt.Chart | alt.LayerChart,
    size: tuple[int, int],
    key: str,
    on_select: Callable[[], None],
    alt_text: str,
) -> None:
    # the element's size is the picture's (Streamlit would otherwise fit the chart's view to
    # its own height, and the axes would no longer be the picture's)
    drawn_width, drawn_height = _drawn_size(size)
    st.sidebar.altair_chart(
        chart.configure_view(stroke=None).properties(
            width=drawn_width, height=drawn_height, padding=0, autosize="none"
        ),
        key=key,
        on_select=on_select,
        width="content",
        theme=None,
        alt=alt_text,
    )
