"""How a channel computes, on the "What a channel looks for" page: the convolution behind it,
its kernel (an RGB picture for a first layer; deeper, the weight per input channel, with the
maps of the inputs it weighs most), and at a position the user picks on the channel's map, the
input patch, the kernel and the value they give (``hookviz.channel_filter``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st
from PIL import Image, ImageDraw

import hookviz
from hookviz import render
from hookviz.app.caches import insight
from hookviz.app.sidebar.scene import Scene
from hookviz.app.view import state
from hookviz.app.view.keys import View

ENLARGED = 168  # pixels: kernels and small maps are drawn this wide, with visible cells
INPUTS_SHOWN = 4


def section(scene: Scene, channel: int) -> None:
    view = scene.view
    st.markdown("#### How this channel computes")
    layer_map = scene.analysis.features.activations[channel].float().cpu().numpy()
    height, width = layer_map.shape
    peak_y, peak_x = np.unravel_index(int(np.argmax(layer_map)), layer_map.shape)
    y = _coordinate("vis_y", "Row on the map", height, int(peak_y), view)
    x = _coordinate("vis_x", "Column on the map", width, int(peak_x), view)
    state.publish()
    try:
        found = insight.channel_filter(
            view.digest, view.model, view.pretrained, view.layer, channel, (y, x)
        )
    except hookviz.LayerError as exc:
        st.info(f"No filter to show here: {exc}")
        return
    kh, kw = found.kernel.shape[-2:]
    inputs = len(found.input_channels)
    after = (
        ""
        if found.conv == view.layer
        else f", then what follows it inside `{view.layer}` (normalisation, an activation, a "
        "residual sum)"
    )
    st.caption(
        f"Channel {channel} is computed by `{found.conv}`: a {kh}x{kw} kernel over "
        f"{inputs} input channel{'s' if inputs > 1 else ''}, stride {found.stride[0]}{after}. "
        "Pick a place on the map: the patch of the input under the kernel, times the kernel, "
        "summed, plus the bias, is the value there."
    )
    left, middle, right = st.columns([1, 1, 2])
    with left:
        st.image(_marked(layer_map, y, x), caption=f"Channel {channel}: ({y}, {x}) marked")
    if found.first_layer:
        _first_layer(found, middle, right)
    else:
        _deeper(found, middle, right)
    _arithmetic(found)


def _coordinate(field: str, label: str, size: int, peak: int, view: View) -> int:
    value = state.resolve(field, state.index_valid(size), peak)
    if size == 1:
        return state.shown(field, 0)
    return int(
        state.widget(
            field,
            st.slider,
            value,
            label,
            0,
            size - 1,
            key=f"{field}@{view.model}@{view.layer}@{size}",
            help=f"Default: where the channel is strongest on this image ({peak}).",
        )
    )


def _first_layer(found: hookviz.ChannelFilter, middle, right) -> None:
    with middle:
        st.image(_enlarged(found.rgb_kernel()), caption="The kernel as colours (grey is 0)")
    with right:
        patch = found.at.patch.transpose(1, 2, 0)  # (kh, kw, 3), normalised input
        low, high = float(patch.min()), float(patch.max())
        shown = (patch - low) / (high - low) if high > low else patch * 0 + 0.5
        st.image(_enlarged(shown), caption="The image patch under it (contrast stretched)")
        st.caption(
            "A first-layer filter is a small picture: it responds where the image looks like it "
            "(bright where the kernel is bright, in its colours)."
        )


def _deeper(found: hookviz.ChannelFilter, middle, right) -> None:
    strongest = found.strongest_inputs(16)
    norms = dict(zip(found.input_channels.tolist(), found.input_norms.tolist(), strict=True))
    with middle:
        frame = pd.DataFrame(
            {
                "input channel": [str(c) for c in strongest],
                "weight norm": [norms[c] for c in strongest],
            }
        )
        st.bar_chart(frame, x="input channel", y="weight norm", height=220, sort=False)
        st.caption(f"The {len(strongest)} input channels it weighs most (of {len(norms)}).")
    with right:
        maps = found.input_maps
        shown = strongest[:INPUTS_SHOWN]
        pictures = [_enlarged(render.normalise_maps(maps[c], "shared"), cmap=True) for c in shown]
        st.image(
            pictures,
            caption=[f"input {c} · norm {norms[c]:.2f}" for c in shown],
            width=ENLARGED,
        )
        st.caption(
            f"The maps of those inputs on this image (the output of the layer before "
            f"`{found.conv}`): the channel is built from them."
        )


def _arithmetic(found: hookviz.ChannelFilter) -> None:
    at = found.at
    order = np.argsort(-np.abs(at.contributions), kind="stable")[:6]
    rows = [
        {
            "input channel": int(found.input_channels[i]),
            "patch · kernel": float(at.contributions[i]),
            "share of |sum|": float(
                abs(at.contributions[i]) / (np.abs(at.contributions).sum() or 1.0)
            ),
        }
        for i in order
    ]
    left, right = st.columns([2, 3])
    with left:
        st.dataframe(
            pd.DataFrame(rows),
            hide_index=True,
            column_config={
                "share of |sum|": st.column_config.ProgressColumn(min_value=0, max_value=1)
            },
        )
    with right:
        top = int(order[0])
        kh, kw = at.patch.shape[-2:]
        if kh * kw > 1 and kh <= 7:
            patch, kernel = st.columns(2)
            patch.caption(f"Patch of input {int(found.input_channels[top])}")
            patch.dataframe(_grid(at.patch[top]), hide_index=True)
            kernel.caption("Its kernel")
            kernel.dataframe(_grid(found.kernel[top]), hide_index=True)
    check = "=" if at.matches else "≠"
    st.markdown(
        f"Σ patch × kernel over {len(found.input_channels)} input channel(s) = "
        f"{float(at.contributions.sum()):.4f}, plus the bias {found.bias:.4f}: "
        f"**{at.value:.4f}** {check} {at.reference:.4f}, what `{found.conv}` computed at "
        f"{at.position}. After the rest of the layer the map shows **{at.activation:.4f}** there."
    )


def _grid(values: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(np.round(values.astype(np.float64), 3)).rename(columns=str)


def _enlarged(values: np.ndarray, cmap: bool = False, wide: int = ENLARGED) -> Image.Image:
    """A small array (h, w) or (h, w, 3) in [0, 1] drawn about ``wide`` pixels wide, with
    square cells (nearest neighbour: every weight or activation stays one visible block)."""
    if cmap:
        picture = render.heatmap_image(values.astype(np.float32), "viridis")
    else:
        picture = Image.fromarray((np.clip(values, 0, 1) * 255 + 0.5).astype(np.uint8))
    scale = max(1, wide // max(picture.width, picture.height))
    return picture.resize((picture.width * scale, picture.height * scale), Image.Resampling.NEAREST)


def _marked(layer_map: np.ndarray, y: int, x: int) -> Image.Image:
    """The channel's map, enlarged, with the picked cell outlined."""
    picture = _enlarged(render.normalise_maps(layer_map, "shared"), cmap=True, wide=2 * ENLARGED)
    scale = picture.width // layer_map.shape[1]
    draw = ImageDraw.Draw(picture)
    box = (x * scale, y * scale, (x + 1) * scale - 1, (y + 1) * scale - 1)
    draw.rectangle(box, outline=(255, 64, 64), width=max(1, scale // 6))
    return picture
