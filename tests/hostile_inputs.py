"""Hostile inputs for the fuzz tests (``test_fuzz_hostile.py``, ``test_fuzz_server.py``): address
values a fuzzer would try, image files that are bombs by pixels, frames, shape, metadata or
format, and safetensors files whose header promises more than the file holds. Each is built
here, small and seeded (nothing downloaded, nothing large written)."""

from __future__ import annotations

import io
import json
import random
import struct
import zipfile
import zlib

import numpy as np
from PIL import Image

# --- address values ---------------------------------------------------------------------------

# Each markup value with the fragment that must never reach a rendered markdown as it is: there
# it would be a live tag, link, emphasis or formula (escaped, it reads as typed).
MARKUP = {
    "<img src=x onerror=alert(1)>": "<img",
    "<script>alert(1)</script>": "<script",
    "[x](javascript:alert(1))": "](javascript:",
    "[free prize](https://example.com/phish)": "](https://example.com",
    "**bold**": "**bold**",
    "$x^2$": "$x^2$",
    "![p](http://example.com/p.png)": "](http://example.com",
}
NUMBERS = [
    "NaN",
    "nan",
    "inf",
    "-inf",
    "Infinity",
    "-1",
    "-0",
    "0",
    "1e309",
    "-1e309",
    "1.5",
    "0x10",
    "1_000",
    "9" * 40,
    "9" * 4000,
    "-" + "9" * 40,
    "1,2,99999999999999999999",
    "4,-1",
    "box:0:0,0,inf,inf",
    "box:1:nan,0,1,1",
    "region:0:0,0,1e309,5",
    "region:-1",
    "box:0:1,1,0,0",
]
TEXTS = [
    "x" * 10_000,
    "",
    " ",
    "../../etc/passwd",
    "/etc/passwd",
    "..\\..\\windows\\win.ini",
    "similar:../../etc/passwd",
    "upload:" + "0" * 16,
    "\u202egnp.exe\u200b\u200d",  # right-to-left override, zero-width space and joiner
    "שלום עולם",  # right-to-left script
    "👍🏽🐈‍⬛",
    "\x00\x01\x1b[31mred",
    "%00",
    "%2e%2e%2f",
    "line\nbreak\r\n# heading",
    '\'"; import os; os.system("x") #',
    "true",
    "timm:resnet18",
]
CATEGORIES = {"markup": list(MARKUP), "numbers": NUMBERS, "texts": TEXTS}


def live_markup(text: str) -> list[str]:
    """The fragments of ``MARKUP`` that ``text`` (a markdown source) holds unescaped: not
    preceded by a backslash, so that they would render as a tag, a link, emphasis or a
    formula."""
    return [
        fragment
        for fragment in MARKUP.values()
        if any(index == 0 or text[index - 1] != "\\" for index in _occurrences(text, fragment))
    ]


def _occurrences(text: str, fragment: str) -> list[int]:
    found, start = [], text.find(fragment)
    while start != -1:
        found.append(start)
        start = text.find(fragment, start + 1)
    return found


def hostile_address(names: list[str], category: str, seed: int) -> dict[str, str]:
    """One hostile value of ``category`` for each of ``names``, drawn with ``seed``."""
    rng = random.Random(f"{category}:{seed}")
    return {name: rng.choice(CATEGORIES[category]) for name in names}


# --- images -----------------------------------------------------------------------------------


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def photo(width: int = 160, height: int = 120, seed: int = 0) -> bytes:
    """An ordinary PNG photo (noise)."""
    rng = np.random.default_rng(seed)
    return png(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def png_declaring(width: int, height: int) -> bytes:
    """A 100-byte PNG whose header declares ``width`` × ``height`` RGB pixels (a bomb by
    pixels: decoding it would need width × height × 3 bytes)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = zlib.compress(b"\x00" * 4096)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", data)
        + _chunk(b"IEND", b"")
    )


def animated_gif(frames: int, side: int = 8) -> bytes:
    """A GIF of ``frames`` distinct frames (random pixels each)."""
    rng = np.random.default_rng(0)
    pictures = [
        Image.fromarray(rng.integers(0, 256, (side, side), dtype=np.uint8), "L").convert("P")
        for _ in range(frames)
    ]
    out = io.BytesIO()
    pictures[0].save(out, "GIF", save_all=True, append_images=pictures[1:], duration=10)
    return out.getvalue()


def png_with_iccp(size: int) -> bytes:
    """A small photo with an iCCP chunk of ``size`` bytes of (incompressible) profile."""
    base = photo(64, 48)
    noise = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8).tobytes()
    iccp = _chunk(b"iCCP", b"icc\x00\x00" + zlib.compress(noise, 1))
    return base[:33] + iccp + base[33:]  # (after the signature and IHDR)


def jpeg_with_metadata(icc_bytes: int) -> bytes:
    """A 64×48 JPEG with an EXIF segment near its 64 KB limit and an ICC profile of
    ``icc_bytes`` split over as many APP2 segments as it takes."""
    rng = np.random.default_rng(0)
    picture = Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8))
    exif = Image.Exif()
    exif[0x010E] = "x" * 60_000  # ImageDescription
    out = io.BytesIO()
    picture.save(out, "JPEG", exif=exif.tobytes(), icc_profile=b"\x00" * icc_bytes)
    return out.getvalue()


def polyglots() -> dict[str, bytes]:
    """Files that are two formats at once: a valid PNG with a ZIP or an HTML page appended, a
    GIF header that is also JavaScript."""
    base = photo(64, 48)
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as packed:
        packed.writestr("evil.sh", "echo pwned\n")
    return {
        "png+zip.png": base + archive.getvalue(),
        "png+html.png": base + b"<html><script>alert(document.cookie)</script></html>",
        "gif+js.gif": b"GIF89a/*\x01\x00\x01\x00\x00\x00\x00;*/=1;alert(document.cookie);//",
    }


# --- checkpoints ------------------------------------------------------------------------------

TEN_GB = 10 * 1024**3


def safetensors_promising(total: int = TEN_GB, shape_only: bool = False) -> bytes:
    """A small safetensors file whose header promises a ``total``-byte F32 tensor: its data
    offsets run to ``total`` (or, ``shape_only``, its shape does while the offsets cover the 16
    bytes there are)."""
    side = int((total // 4) ** 0.5)
    end = 16 if shape_only else total
    header = {"fc.weight": {"dtype": "F32", "shape": [side, side], "data_offsets": [0, end]}}
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"\x00" * 16


def safetensors_header_length(length: int = TEN_GB) -> bytes:
    """A 10-byte file whose first 8 bytes (the header's length) say ``length``."""
    return struct.pack("<Q", length) + b"{}"
