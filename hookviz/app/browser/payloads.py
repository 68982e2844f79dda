"""What the browser-drawn pictures are made from, as the browser code reads it: a heatmap as
packed colormap indices (``js/store.js`` inflates them), a feature-map grid as its maps' values
with the layout and labels of every count and channel order (``js/paint.js`` lays them out).
``wire.pack`` puts these in an element's payload."""

from __future__ import annotations

import numpy as np

import hookviz
from hookviz import colour_layers, render
from hookviz.app.browser import wire


def heat_indices(cam: hookviz.GradCAM, width: int, height: int) -> bytes:
    """``cam``'s heatmap on a (height, width) grid as colormap indices, one byte per pixel,
    packed (``wire.packed_rows``: about an eighth of the bytes, which Streamlit hashes twice
    per run and sends to a browser that lacks them; the browser inflates them once per
    analysis, and keeps them). The browser colours them with any colormap's table."""
    indices = render.colormap_indices(cam.heatmap_at((height, width)))
    return wire.packed_rows(indices)


def _raw(array: np.ndarray) -> bytes:
    """Little-endian, as the browser's typed arrays read it."""
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def grid_series(
    features: hookviz.FeatureMaps,
    orders: tuple[tuple[str, tuple[int, ...], tuple[float, ...] | None], ...],
    background: tuple[int, int, int],
) -> dict:
    """The feature-map grids of the first n channels of each channel order, for every n, as the
    browser lays them out and colours them (``hookviz.colour_layers``), as bytes: the feature
    maps' values (float32, for either colour scale), each map once however many orders show it,
    the tiles per row for each n, and for each order (name, channels, signs) its channels'
    positions among those maps, its label font for each n and its label boxes' pixels (palette
    entries). The browser switches between the orders as the "order" widget moves.

    Args:
        features: the layer's feature maps.
        orders: (name, channels, their signs or None) of each order.
        background: the grid's gaps' colour.
    """
    activations = features.activations
    maps = sorted({channel for _, channels, _ in orders for channel in channels})
    where = {channel: position for position, channel in enumerate(maps)}
    sent: dict = {}
    for name, channels, signs in orders:
        series = colour_layers.grid_series(
            activations, channels, signs=signs, background=background
        )
        sent[name] = {
            "take": [where[channel] for channel in channels],
            "channels": [int(channel) for channel in channels],  # (the pointer's value names it)
            "fonts": list(series.fonts),
            "labels": [
                {
                    "boxes": labels.boxes.reshape(-1).tolist(),
                    "pixels": _raw(labels.pixels),
                    "wide": labels.pixels.dtype == np.uint16,
                }
                for labels in series.labels
            ],
            "palette": _raw(series.palette),
        }
    # every order has the same maps' size, tile layout and count
    count, rows, columns = series.cells.shape
    cells = np.ascontiguousarray(activations[maps].detach().cpu().numpy(), np.float32)
    return {
        "cells": _raw(cells),
        "count": count,
        "rows": rows,
        "columns": columns,
        "zoom": series.zoom,
        "gap": series.gap,
        "per_row": list(series.columns),
        "background": list(series.background),
        "orders": sent,
    }
