"""How the browser-drawn pictures' data travels: one bytes payload instead of JSON with base64.

A picture's data is mostly binary (heatmap indices, feature-map cells, label pixels, the image):
hundreds of KB per analysis. Given to a component as JSON, Streamlit serialises it twice (once
for the message, once sorted for the element's identity) and hashes the text on every run,
and the browser then decodes the base64 byte by byte; given as bytes, the server only hashes
them and the browser takes views of them.

Layout: a 4-byte little-endian length, that many bytes of UTF-8 JSON (the data, each binary
value replaced by ``{"$blob": i}``, and ``"$blobs"``: the binary values' lengths), then the
binary values one after the other. ``js/unpack.js`` reads it back (``unpack``) the same way.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import numpy as np

_BLOB = "$blob"
_SIZES = "$blobs"


def pack(data: dict[str, Any]) -> bytes:
    """``data`` (JSON values, with ``bytes`` anywhere in it) as one payload."""
    blobs: list[bytes] = []

    def strip(value: Any) -> Any:
        if isinstance(value, (bytes, bytearray, memoryview)):
            blobs.append(bytes(value))
            return {_BLOB: len(blobs) - 1}
        if isinstance(value, dict):
            return {key: strip(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [strip(item) for item in value]
        return value

    header = strip(data)
    header[_SIZES] = [len(blob) for blob in blobs]
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return b"".join([struct.pack("<I", len(text)), text, *blobs])


def unpack(payload: bytes) -> dict[str, Any]:
    """``pack``'s input back (its binary values as ``bytes``)."""
    (length,) = struct.unpack_from("<I", payload)
    header = json.loads(payload[4 : 4 + length].decode("utf-8"))
    blobs, at = [], 4 + length
    for size in header.pop(_SIZES):
        blobs.append(bytes(payload[at : at + size]))
        at += size

    def fill(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {_BLOB}:
                return blobs[value[_BLOB]]
            return {key: fill(item) for key, item in value.items()}
        if isinstance(value, list):
            return [fill(item) for item in value]
        return value

    return fill(header)


def packed_rows(indices: np.ndarray) -> bytes:
    """A (H, W) uint8 picture as each row minus the row above (mod 256), zlib-compressed: a
    heatmap is smooth, so its rows differ little and this is about an eighth of the bytes (a
    37 MP photo's display-size heatmap: 0.9 MB -> about 0.1 MB). ``js/unpack.js`` inflates
    it and adds the rows back (``unpackRows``)."""
    rows = np.ascontiguousarray(indices, dtype=np.uint8)
    if rows.ndim != 2:
        raise ValueError(f"expected a (H, W) picture, got shape {rows.shape}")
    steps = rows.copy()
    steps[1:] -= rows[:-1]  # uint8: wraps mod 256, as the browser's Uint8Array adds back
    return zlib.compress(steps.tobytes(), 1)


def unpacked_rows(packed: bytes, width: int, height: int) -> np.ndarray:
    """``packed_rows``'s picture back, (height, width) uint8."""
    steps = np.frombuffer(zlib.decompress(packed), np.uint8).reshape(height, width)
    return np.cumsum(steps, axis=0, dtype=np.uint8)
