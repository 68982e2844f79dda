"""ui/wire.py: the bytes payload of the browser-drawn pictures gives back what was packed (the
browser's reading of it is tested by the pictures it draws, tests/test_browser_defects.py)."""

from __future__ import annotations

import struct

import numpy as np

from ui import wire


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
