"""A corpus of good and bad image files, generated in code so no binary fixture is committed.

:func:`build_corpus` returns ``(case_name, data, expected)`` triples where ``expected`` is
``"ok"`` (``load_image`` must return an RGB image) or ``"error"`` (it must raise
``ImageError``). The helpers are public so tests can build one-off variants.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from typing import Literal

import numpy as np
from PIL import Image

Expected = Literal["ok", "error"]
Case = tuple[str, bytes, Expected]

RED = (255, 0, 0)
BLUE = (0, 0, 255)
ORIENTATION = 0x0112
Y_RESOLUTION = 0x011B

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def encode(img: Image.Image, fmt: str, **params: object) -> bytes:
    """Return ``img`` saved in ``fmt`` as bytes."""
    buffer = io.BytesIO()
    img.save(buffer, fmt, **params)
    return buffer.getvalue()


def encode_frames(frames: list[Image.Image], fmt: str, **params: object) -> bytes:
    """Return ``frames`` saved as one animated / multi-page file."""
    buffer = io.BytesIO()
    frames[0].save(buffer, fmt, save_all=True, append_images=frames[1:], **params)
    return buffer.getvalue()


def noise_image(width: int = 96, height: int = 64, seed: int = 0) -> Image.Image:
    """Return an RGB image of random pixels (compresses badly, so truncation hits pixels)."""
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def png_chunk(kind: bytes, payload: bytes) -> bytes:
    """Return one PNG chunk: length, type, payload and the CRC over type and payload."""
    crc = zlib.crc32(kind + payload)
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)


def png_declaring(width: int, height: int) -> bytes:
    """Return a well-formed PNG whose header claims ``width``×``height`` RGB pixels.

    The pixel data is a few bytes only, so anything that trusts the header and allocates
    the full canvas before reading the data is caught out.
    """
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit truecolour
    return (
        PNG_SIGNATURE
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", zlib.compress(b"\x00" * 16))
        + png_chunk(b"IEND", b"")
    )


def bmp_declaring(width: int, height: int) -> bytes:
    """Return a BMP header (and a handful of pixel bytes) claiming a huge 24-bit image."""
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    pixels = b"\x00" * 12
    offset = 14 + len(info)
    header = b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset)
    return header + info + pixels


def splice_app1(jpeg: bytes, payload: bytes) -> bytes:
    """Insert an APP1 segment carrying ``payload`` right after the JPEG's SOI marker."""
    segment = b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    return jpeg[:2] + segment + jpeg[2:]


def tiff_ifd(entries: list[tuple[int, int, int, bytes]]) -> bytes:
    """Return a little-endian TIFF header plus one IFD of ``(tag, type, count, value)`` entries.

    ``value`` is the raw 4-byte value field, so callers can write mistyped or bogus values.
    """
    body = struct.pack("<H", len(entries))
    for tag, kind, count, value in entries:
        body += struct.pack("<HHI", tag, kind, count) + value.ljust(4, b"\x00")
    return b"II*\x00" + struct.pack("<I", 8) + body + struct.pack("<I", 0)


def halves(
    width: int, height: int, left: tuple[int, int, int], right: tuple[int, int, int]
) -> Image.Image:
    """Return an RGB image whose left half is ``left`` and right half is ``right``."""
    img = Image.new("RGB", (width, height), right)
    img.paste(left, (0, 0, width // 2, height))
    return img


# --- error cases -----------------------------------------------------------------------------


def _error_cases() -> list[Case]:
    png = encode(noise_image(), "PNG")
    jpeg = encode(noise_image(), "JPEG", quality=90)
    garbage = random.Random(1234).randbytes(4096)
    cases: list[tuple[str, bytes]] = [
        ("empty", b""),
        ("truncated_png", png[: len(png) // 2]),
        ("truncated_png_header", png[:20]),
        ("truncated_jpeg", jpeg[: len(jpeg) // 2]),
        ("jpeg_soi_only", b"\xff\xd8\xff"),
        ("text_named_png", b"holiday.png\nThis is a text file, whatever its name says.\n"),
        (
            "svg",
            b'<?xml version="1.0" encoding="UTF-8"?>\n'
            b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
            b'<rect width="10" height="10" fill="red"/></svg>\n',
        ),
        ("pdf", b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog >>\nendobj\ntrailer\n%%EOF\n"),
        ("html", b"<!DOCTYPE html>\n<html><body><img src='cat.png'></body></html>\n"),
        ("ico_unsupported", encode(Image.new("RGB", (16, 16), RED), "ICO")),
        ("png_declares_50000x50000", png_declaring(50_000, 50_000)),
        ("png_declares_8000x6000", png_declaring(8_000, 6_000)),
        ("png_declares_zero_width", png_declaring(0, 10)),
        ("bmp_declares_60000x60000", bmp_declaring(60_000, 60_000)),
        ("random_bytes", garbage),
        ("gif_header_then_garbage", b"GIF89a" + garbage[:512]),
        ("tiff_header_then_garbage", b"II*\x00" + garbage[:512]),
    ]
    return [(name, data, "error") for name, data in cases]


# --- good cases ------------------------------------------------------------------------------


def _transparency_cases() -> list[tuple[str, bytes]]:
    palette = Image.new("P", (2, 1))
    palette.putpalette([0, 0, 0, *RED])
    palette.putdata([0, 1])

    rgba = Image.new("RGBA", (3, 1))
    # The fully transparent pixel hides pure black; only its alpha should matter.
    rgba.putdata([(0, 0, 0, 0), (*RED, 255), (*BLUE, 128)])

    grey_alpha = Image.new("LA", (3, 1))
    grey_alpha.putdata([(0, 0), (0, 255), (0, 128)])

    return [
        ("png_palette_transparent_index", encode(palette, "PNG", transparency=0)),
        ("png_rgba_alpha0", encode(rgba, "PNG")),
        ("png_la", encode(grey_alpha, "PNG")),
    ]


def _deep_cases() -> list[tuple[str, bytes]]:
    # Pillow 13 turns a uint16 array into mode "I;16" by itself (and refuses mode="I;16").
    grey16 = Image.fromarray(np.array([[0, 32768, 65535]], dtype=np.uint16))
    floats = Image.fromarray(np.array([[0.0, 0.5, 1.0, np.nan]], dtype=np.float32))
    bilevel = Image.new("1", (2, 1))
    bilevel.putpixel((1, 0), 1)
    return [
        ("png_16bit_grey", encode(grey16, "PNG")),
        ("tiff_float", encode(floats, "TIFF")),
        ("png_mode_1", encode(bilevel, "PNG")),
    ]


def _camera_cases() -> list[tuple[str, bytes]]:
    exif = Image.Exif()
    exif[ORIENTATION] = 6  # stored sideways: viewers rotate 90° clockwise
    rotated = encode(halves(40, 20, RED, BLUE), "JPEG", exif=exif.tobytes(), quality=95)

    plain = encode(halves(40, 20, RED, BLUE), "JPEG", quality=95)
    truncated_exif = splice_app1(plain, b"Exif\x00\x00II*")
    # Orientation is readable, but YResolution (a RATIONAL tag) holds ASCII; Pillow 13's
    # exif_transpose then fails while re-serialising the EXIF block after rotating.
    mistyped = tiff_ifd(
        [(ORIENTATION, 3, 1, struct.pack("<H", 6)), (Y_RESOLUTION, 2, 4, b"abc\x00")]
    )
    mistyped_exif = splice_app1(plain, b"Exif\x00\x00" + mistyped)

    mpo = encode_frames([Image.new("RGB", (32, 24), RED), Image.new("RGB", (32, 24), BLUE)], "MPO")
    cmyk = encode(Image.new("CMYK", (16, 16), (0, 255, 255, 0)), "JPEG", quality=95)
    return [
        ("jpeg_exif_orientation_6", rotated),
        ("jpeg_corrupt_exif_truncated_tiff", truncated_exif),
        ("jpeg_corrupt_exif_mistyped_tag", mistyped_exif),
        ("mpo_two_frames", mpo),
        ("jpeg_cmyk", cmyk),
        ("jpeg_grey", encode(Image.new("L", (16, 16), 128), "JPEG", quality=95)),
    ]


def _animated_cases() -> list[tuple[str, bytes]]:
    # Distinct colours so no encoder merges frames; frame 0 is pure red.
    colours = [(255 - 5 * i, 5 * i, 0) for i in range(50)]
    frames = [Image.new("RGB", (20, 20), colour) for colour in colours]
    return [
        ("gif_animated_50_frames", encode_frames(frames, "GIF")),
        ("webp_animated", encode_frames(frames[:5], "WEBP", lossless=True)),
        ("tiff_multipage", encode_frames(frames[:3], "TIFF")),
    ]


def _plain_cases() -> list[tuple[str, bytes]]:
    wide = halves(30_000, 8, RED, BLUE)
    return [
        ("png_1x1_red", encode(Image.new("RGB", (1, 1), RED), "PNG")),
        ("png_30000x8", encode(wide, "PNG")),
        ("webp_lossless", encode(Image.new("RGB", (10, 6), (0, 200, 0)), "WEBP", lossless=True)),
        ("bmp", encode(Image.new("RGB", (7, 5), BLUE), "BMP")),
        ("tiff", encode(Image.new("RGB", (9, 4), (10, 20, 30)), "TIFF")),
        ("gif_single", encode(Image.new("RGB", (5, 5), RED), "GIF")),
    ]


def build_corpus() -> list[Case]:
    """Return every generated case as ``(case_name, data, expected)``."""
    good = _plain_cases() + _transparency_cases() + _deep_cases()
    good += _camera_cases() + _animated_cases()
    return _error_cases() + [(name, data, "ok") for name, data in good]


def write_corpus(folder: str) -> list[str]:
    """Write every case to ``folder`` as a file (named after the case), for manual testing in
    the browser: ``python -m tests.image_corpus OUT_DIR``."""
    from pathlib import Path

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data, expected in build_corpus():
        path = out / f"{expected}-{name}.img"
        path.write_bytes(data)
        written.append(str(path))
    return written


if __name__ == "__main__":
    import sys

    for written_path in write_corpus(sys.argv[1] if len(sys.argv) > 1 else "image-corpus"):
        print(written_path)
