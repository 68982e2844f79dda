"""The page's charts (Altair specs built from plain result values)."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import numpy as np
import pandas as pd

FOR_AGAINST = (["for the class", "against"], ["#005AB5", "#DC3220"])  # colour-blind-safe pair


WEIGHT_BAR_STEP = 14  # pixels per channel in the channel-weight chart


def channel_weights_height(count: int) -> int:
    """The channel-weight chart's height in pixels for ``count`` bars: the bars, the x axis and
    its title."""
    return WEIGHT_BAR_STEP * count + 64


def channel_weights(channels: Sequence[int], values: Sequence[float]) -> alt.Chart:
    """The CAM's channel weights alpha, largest magnitude on top, blue for / orange against."""
    frame = pd.DataFrame(
        {
            "channel": [str(c) for c in channels],
            "alpha": list(values),
            "sign": [FOR_AGAINST[0][0] if v >= 0 else FOR_AGAINST[0][1] for v in values],
        }
    )
    return (
        alt.Chart(frame, height=alt.Step(WEIGHT_BAR_STEP))
        .mark_bar()
        .encode(
            x=alt.X("alpha:Q", title="channel weight α"),
            y=alt.Y("channel:N", sort=[str(c) for c in channels]),
            color=alt.Color("sign:N", scale=alt.Scale(domain=FOR_AGAINST[0], range=FOR_AGAINST[1])),
            tooltip=["channel", "alpha"],
        )
    )


def over_depth(frame: pd.DataFrame, columns: list[str], title: str) -> alt.Chart:
    """Statistics of every layer against its position in the forward pass."""
    long = frame.melt(id_vars=["depth", "layer"], value_vars=columns, var_name="statistic")
    return (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("depth:Q", title="layer (execution order)"),
            y=alt.Y("value:Q", title=title),
            color="statistic:N",
            tooltip=["layer", "statistic", "value"],
        )
    )


def histogram(edges: np.ndarray, counts: np.ndarray, layer: str) -> alt.Chart:
    """Activation histogram with a log count axis: the zeros of a ReLU layer are one tall bar
    that would otherwise flatten every other bin. Each bar spans its bin and rises from a
    baseline below 1 (a bar from 0 has no place on a log axis: nothing would be drawn); empty
    bins are left out."""
    keep = counts > 0
    frame = pd.DataFrame(
        {
            "from": edges[:-1][keep],
            "to": edges[1:][keep],
            "count": counts[keep],
            "baseline": HISTOGRAM_BASELINE,
        }
    )
    return (
        alt.Chart(frame, height=160)
        .mark_bar()
        .encode(
            x=alt.X("from:Q", title=f"activation of {layer}"),
            x2="to:Q",
            y=alt.Y(
                "count:Q",
                scale=alt.Scale(type="log", domainMin=HISTOGRAM_BASELINE),
                title="count (log scale)",
            ),
            y2="baseline:Q",
            tooltip=["from", "to", "count"],
        )
    )


HISTOGRAM_BASELINE = 0.5  # where the histogram's bars start on its log axis (a count of 1 shows)


TRUST_SERIES = {
    ("deletion", "heatmap"): ("deletion, heatmap order", "#DC3220", []),
    ("deletion", "random"): ("deletion, random order", "#DC3220", [5, 4]),
    ("insertion", "heatmap"): ("insertion, heatmap order", "#005AB5", []),
    ("insertion", "random"): ("insertion, random order", "#005AB5", [5, 4]),
}


def trust(fractions: np.ndarray, curves: dict[tuple[str, str], np.ndarray], class_name: str):
    """Deletion and insertion curves, heatmap order (solid) and random order (dashed), each of
    the four named in one legend with its own colour and dash, so they can be told apart."""
    rows = []
    for key, values in curves.items():
        label = TRUST_SERIES[key][0]
        rows += [
            {"curve": label, "fraction": float(f), "probability": float(v)}
            for f, v in zip(fractions, values, strict=True)
        ]
    labels = [TRUST_SERIES[key][0] for key in TRUST_SERIES]
    legend = alt.Legend(title="curve", orient="bottom", columns=2, symbolType="stroke")
    return (
        alt.Chart(pd.DataFrame(rows))
        .mark_line(point=True)
        .encode(
            x=alt.X("fraction:Q", title="share of pixels removed / revealed"),
            y=alt.Y("probability:Q", title=f"p({class_name})"),
            # colour and dash on the same field with the same legend: Vega-Lite draws one
            # legend whose symbols carry both
            color=alt.Color(
                "curve:N",
                scale=alt.Scale(domain=labels, range=[s[1] for s in TRUST_SERIES.values()]),
                legend=legend,
            ),
            strokeDash=alt.StrokeDash(
                "curve:N",
                scale=alt.Scale(domain=labels, range=[s[2] for s in TRUST_SERIES.values()]),
                legend=legend,
            ),
            tooltip=["curve", "fraction", "probability"],
        )
    )


def gradient_flow(frame: pd.DataFrame) -> alt.Chart:
    """Gradient size at every layer on a log axis (vanishing gradients stand out)."""
    return (
        alt.Chart(frame)
        .mark_line(point=True)
        .encode(
            x=alt.X("depth:Q", title="layer (execution order)"),
            y=alt.Y("gradient RMS:Q", scale=alt.Scale(type="log")),
            tooltip=["layer", "gradient RMS", "gradient norm"],
        )
    )
