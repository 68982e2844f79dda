"""hookviz/app/browser/wire.py: the bytes payload of the browser-drawn pictures gives back what was
packed (the browser's reading of it is tested by the pictures it draws in the browser tests)."""

from __future__ import annotations

import struct

import numpy as np

from hookviz.app.browser import wire


def test_pack_and_unpack_give_back_nested_binary_values_and_json() -> None:
    cells = np.arange(12, dtype="<f4").tobytes()
    data = {
        "id": "abc",
        "alpha": 0.55,
        "grid": {"cells": cells, "orders": {"mean": {"take": [2, 0, 1], "palette": b"\x00\xff"}}},
        "labels": [{"pixels": b""}, {"pixels": b"\x01\x02\x03"}],
        "caption": "{n} of 1280 channels · 9×7 cells “quoted”",
        "none": None,
    }
    payload = wire.pack(data)
    assert isinstance(payload, bytes)
    back = wire.unpack(payload)
    assert back == {**data, "labels": [{"pixels": b""}, {"pixels": b"\x01\x02\x03"}]}
    assert np.array_equal(np.frombuffer(back["grid"]["cells"], "<f4"), np.arange(12))


def test_the_binary_values_follow_the_json_unencoded() -> None:
    blob = bytes(range(256)) * 3
    payload = wire.pack({"heat": blob})
    (length,) = struct.unpack_from("<I", payload)
    assert payload[4 + length :] == blob  # no base64: the bytes as they are
    assert len(payload) < len(blob) + 64


def test_packed_rows_give_back_the_picture_exactly_and_smaller_when_smooth() -> None:
    """Row differences wrap mod 256 (a step from 250 to 3 and back) and come back exactly; a
    smooth picture, as a heatmap is, packs into a fraction of its bytes."""
    rng = np.random.default_rng(0)
    noisy = rng.integers(0, 256, (37, 23), dtype=np.uint8)
    noisy[5, :] = 250
    noisy[6, :] = 3
    assert np.array_equal(wire.unpacked_rows(wire.packed_rows(noisy), 23, 37), noisy)
    y, x = np.mgrid[0:600, 0:512]
    smooth = (127.5 + 127.5 * np.sin(x / 90.0) * np.cos(y / 70.0)).astype(np.uint8)
    packed = wire.packed_rows(smooth)
    assert np.array_equal(wire.unpacked_rows(packed, 512, 600), smooth)
    assert len(packed) < smooth.size / 4
