"""Tests for hookviz.images: safe decoding of untrusted uploads into RGB images."""

from __future__ import annotations

import io
import os
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile, ImageOps

from hookviz import images
from hookviz.errors import HookvizError, ImageError
from hookviz.images import (
    MAX_BYTES,
    MAX_PIXELS,
    SUPPORTED_FORMATS,
    load_image,
)
from tests.image_corpus import (
    BLUE,
    RED,
    build_corpus,
    encode,
    noise_image,
    png_declaring,
)

CORPUS = build_corpus()
ERROR_CASES = [(name, data) for name, data, expected in CORPUS if expected == "error"]
OK_CASES = [(name, data) for name, data, expected in CORPUS if expected == "ok"]

Pixel = tuple[int, int, int]

# For every "ok" case: expected size, then (x, y) -> expected RGB probes, then the tolerance
# per channel (lossy JPEG/CMYK needs slack; lossless formats must be exact).
EXPECTATIONS: dict[str, tuple[tuple[int, int], dict[tuple[int, int], Pixel], int]] = {
    "png_1x1_red": ((1, 1), {(0, 0): RED}, 0),
    "png_30000x8": ((30_000, 8), {(0, 0): RED, (14_999, 7): RED, (29_999, 7): BLUE}, 0),
    "webp_lossless": ((10, 6), {(9, 5): (0, 200, 0)}, 0),
    "bmp": ((7, 5), {(3, 2): BLUE}, 0),
    "tiff": ((9, 4), {(8, 3): (10, 20, 30)}, 0),
    "gif_single": ((5, 5), {(2, 2): RED}, 0),
    # Transparent pixels become white whatever colour they hide; half alpha blends with white.
    "png_palette_transparent_index": ((2, 1), {(0, 0): (255, 255, 255), (1, 0): RED}, 0),
    "png_rgba_alpha0": (
        (3, 1),
        {(0, 0): (255, 255, 255), (1, 0): RED, (2, 0): (127, 127, 255)},
        1,
    ),
    "png_la": ((3, 1), {(0, 0): (255, 255, 255), (1, 0): (0, 0, 0), (2, 0): (127, 127, 127)}, 1),
    # 16-bit: divide by 257, so 65535 -> 255 and 32768 -> 127.5 -> 128.
    "png_16bit_grey": ((3, 1), {(0, 0): (0, 0, 0), (1, 0): (128,) * 3, (2, 0): (255,) * 3}, 0),
    # Float in [0, 1] is scaled by 255; NaN becomes 0.
    "tiff_float": (
        (4, 1),
        {(0, 0): (0, 0, 0), (1, 0): (128,) * 3, (2, 0): (255,) * 3, (3, 0): (0, 0, 0)},
        0,
    ),
    "png_mode_1": ((2, 1), {(0, 0): (0, 0, 0), (1, 0): (255, 255, 255)}, 0),
    # Stored 40x20 (red left, blue right) with orientation 6: upright it is 20x40, red on top.
    "jpeg_exif_orientation_6": ((20, 40), {(10, 5): RED, (10, 34): BLUE}, 8),
    # Unusable EXIF: the picture is kept as stored rather than refused.
    "jpeg_corrupt_exif_truncated_tiff": ((40, 20), {(5, 10): RED, (34, 10): BLUE}, 8),
    "jpeg_corrupt_exif_mistyped_tag": ((40, 20), {(5, 10): RED, (34, 10): BLUE}, 8),
    "mpo_two_frames": ((32, 24), {(16, 12): RED}, 8),
    "jpeg_cmyk": ((16, 16), {(8, 8): RED}, 16),
    "jpeg_grey": ((16, 16), {(8, 8): (128, 128, 128)}, 3),
    # Animated files: the first frame only (frame 0 is red, later frames are not).
    "gif_animated_50_frames": ((20, 20), {(10, 10): RED}, 0),
    "webp_animated": ((20, 20), {(10, 10): RED}, 0),
    "tiff_multipage": ((20, 20), {(10, 10): RED}, 0),
}


def assert_close(actual: object, expected: Pixel, tolerance: int) -> None:
    """Assert an RGB pixel is within ``tolerance`` of ``expected`` on every channel."""
    assert isinstance(actual, tuple)
    assert len(actual) == 3
    diffs = [abs(int(a) - e) for a, e in zip(actual, expected, strict=True)]
    assert max(diffs) <= tolerance, f"{actual} is not within {tolerance} of {expected}"


def assert_human_message(error: ImageError) -> None:
    """Assert the error reads as a sentence for a user, not an exception repr."""
    message = str(error)
    assert message.strip()
    assert " " in message
    assert message[0].isalpha()
    assert "<_io." not in message
    assert "Error" not in message


# --- the corpus ------------------------------------------------------------------------------


def test_corpus_has_both_kinds_and_unique_names() -> None:
    names = [name for name, _, _ in CORPUS]
    assert len(names) == len(set(names))
    assert ERROR_CASES
    assert OK_CASES


def test_every_ok_case_has_expectations() -> None:
    assert {name for name, _ in OK_CASES} == set(EXPECTATIONS)


@pytest.mark.parametrize(("name", "data"), ERROR_CASES, ids=[n for n, _ in ERROR_CASES])
def test_bad_input_raises_image_error_only(name: str, data: bytes) -> None:
    # pytest.raises(ImageError) fails on any other exception type, so nothing else escapes.
    with pytest.raises(ImageError) as info:
        load_image(data)
    assert_human_message(info.value)
    assert isinstance(info.value, HookvizError)


@pytest.mark.parametrize(("name", "data"), OK_CASES, ids=[n for n, _ in OK_CASES])
def test_good_input_becomes_expected_rgb(name: str, data: bytes) -> None:
    size, probes, tolerance = EXPECTATIONS[name]
    img = load_image(data)
    assert img.mode == "RGB"
    assert img.size == size
    for xy, rgb in probes.items():
        assert_close(img.getpixel(xy), rgb, tolerance)


@pytest.mark.parametrize(("name", "data"), OK_CASES, ids=[n for n, _ in OK_CASES])
def test_result_is_detached_from_the_file(name: str, data: bytes) -> None:
    img = load_image(data)
    # A plain Image (not an ImageFile) has no file handle to keep open or exhaust.
    assert type(img) is Image.Image
    assert getattr(img, "fp", None) is None


# --- specific error messages -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["text_named_png", "svg", "pdf", "html", "random_bytes"])
def test_non_images_name_the_supported_formats(name: str) -> None:
    data = dict(ERROR_CASES)[name]
    with pytest.raises(ImageError, match=r"not a readable image \(PNG, JPEG, WebP"):
        load_image(data)


def test_known_but_unsupported_format_is_named() -> None:
    with pytest.raises(ImageError, match="ICO images are not supported"):
        load_image(dict(ERROR_CASES)["ico_unsupported"])


@pytest.mark.parametrize("name", ["truncated_png", "truncated_jpeg", "truncated_png_header"])
def test_truncated_files_say_so(name: str) -> None:
    with pytest.raises(ImageError, match="truncated or corrupt"):
        load_image(dict(ERROR_CASES)[name])


def test_empty_input_says_empty() -> None:
    with pytest.raises(ImageError, match="the file is empty"):
        load_image(b"")


# --- size limits -----------------------------------------------------------------------------


def test_defaults() -> None:
    assert MAX_BYTES == 50 * 1024 * 1024
    assert MAX_PIXELS == 40_000_000
    assert frozenset({"PNG", "JPEG", "MPO", "WEBP", "BMP", "DIB", "GIF", "TIFF"}) == (
        SUPPORTED_FORMATS
    )


def test_bytes_over_max_bytes_are_refused() -> None:
    data = encode(noise_image(), "PNG")
    with pytest.raises(ImageError, match=r"larger than the .* limit") as info:
        load_image(data, max_bytes=len(data) - 1)
    assert_human_message(info.value)
    assert load_image(data, max_bytes=len(data)).size == (96, 64)


def test_size_limit_is_stated_in_mb() -> None:
    with pytest.raises(ImageError, match="50 MB"):
        load_image(bytes(MAX_BYTES + 1))


class EndlessStream:
    """A file-like object that never ends, recording how much was asked for."""

    def __init__(self) -> None:
        self.delivered = 0

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            raise AssertionError("load_image must never read without a limit")
        chunk = b"\x00" * min(size, 1000)  # short reads, like a raw stream
        self.delivered += len(chunk)
        return chunk


def test_stream_is_read_at_most_max_bytes_plus_one() -> None:
    stream = EndlessStream()
    with pytest.raises(ImageError, match="larger than"):
        load_image(stream, max_bytes=10_000)
    assert stream.delivered == 10_001


def test_bomb_header_is_refused_without_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decoding(self: ImageFile.ImageFile) -> None:
        raise AssertionError("pixel data must not be decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decoding)
    with pytest.raises(ImageError, match="2,500,000,000 pixels"):
        load_image(png_declaring(50_000, 50_000))
    with pytest.raises(ImageError, match=r"8,000×6,000 pixels.*40,000,000"):
        load_image(png_declaring(8_000, 6_000))


def test_max_pixels_is_checked_from_the_header() -> None:
    data = encode(noise_image(100, 100), "PNG")
    with pytest.raises(ImageError, match=r"100×100 pixels, more than the limit of 9,999"):
        load_image(data, max_pixels=9_999)
    assert load_image(data, max_pixels=10_000).size == (100, 100)


def test_global_pillow_state_is_left_alone() -> None:
    limit_before = Image.MAX_IMAGE_PIXELS
    filters_before = list(warnings.filters)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no warning escapes either
        for _, data in ERROR_CASES:
            with pytest.raises(ImageError):
                load_image(data)
        for _, data in OK_CASES:
            load_image(data)
    assert limit_before == Image.MAX_IMAGE_PIXELS
    assert list(warnings.filters) == filters_before


def test_pillow_bomb_warning_becomes_image_error() -> None:
    # 9000x10000 is above Pillow's warning threshold (~89.5 Mpx) but below its error
    # threshold; a caller allowing that many pixels still gets an ImageError, not a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning leaking out would fail the test
        with pytest.raises(ImageError, match="90,000,000 pixels"):
            load_image(png_declaring(9_000, 10_000), max_pixels=100_000_000)


@pytest.mark.parametrize(("name", "value"), [("max_bytes", 0), ("max_pixels", -1)])
def test_limits_must_be_positive(name: str, value: int) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        load_image(b"x", **{name: value})


def test_limits_must_be_ints() -> None:
    with pytest.raises(TypeError, match="max_bytes must be an int"):
        load_image(b"x", max_bytes=True)


# --- source kinds ----------------------------------------------------------------------------


@pytest.fixture
def red_png() -> bytes:
    return encode(Image.new("RGB", (4, 3), RED), "PNG")


def check_red(img: Image.Image) -> None:
    assert img.mode == "RGB"
    assert img.size == (4, 3)
    assert img.getpixel((3, 2)) == RED


def test_source_str_path(tmp_path: Path, red_png: bytes) -> None:
    path = tmp_path / "red.png"
    path.write_bytes(red_png)
    check_red(load_image(str(path)))


def test_source_pathlike(tmp_path: Path, red_png: bytes) -> None:
    # A misleading extension is irrelevant: content decides.
    path = tmp_path / "red.txt"
    path.write_bytes(red_png)
    check_red(load_image(path))


def test_source_bytes(red_png: bytes) -> None:
    check_red(load_image(red_png))


def test_source_bytearray(red_png: bytes) -> None:
    check_red(load_image(bytearray(red_png)))


def test_source_memoryview(red_png: bytes) -> None:
    check_red(load_image(memoryview(red_png)))


def test_source_bytesio(red_png: bytes) -> None:
    check_red(load_image(io.BytesIO(red_png)))


def test_source_open_file(tmp_path: Path, red_png: bytes) -> None:
    path = tmp_path / "red.png"
    path.write_bytes(red_png)
    with path.open("rb") as fh:
        check_red(load_image(fh))


def test_source_unbuffered_file(tmp_path: Path, red_png: bytes) -> None:
    path = tmp_path / "red.png"
    path.write_bytes(red_png)
    with open(path, "rb", buffering=0) as fh:
        check_red(load_image(fh))


def test_source_pil_image_is_copied() -> None:
    original = Image.new("RGB", (4, 3), RED)
    result = load_image(original)
    check_red(result)
    assert result is not original
    result.putpixel((0, 0), BLUE)
    assert original.getpixel((0, 0)) == RED


def test_source_lazily_opened_pil_image(red_png: bytes) -> None:
    with Image.open(io.BytesIO(red_png)) as lazy:
        check_red(load_image(lazy))


def test_text_file_named_png_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "photo.png"
    path.write_text("not really a photo\n")
    with pytest.raises(ImageError, match="not a readable image"):
        load_image(path)


def test_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.png"
    with pytest.raises(ImageError, match=r"file not found: .*nope\.png"):
        load_image(missing)
    with pytest.raises(ImageError, match="file not found"):
        load_image(os.fspath(missing))


def test_directory_path(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="directory"):
        load_image(tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jpg"
    path.write_bytes(b"")
    with pytest.raises(ImageError, match="the file is empty"):
        load_image(path)


@pytest.mark.parametrize("source", [42, 3.5, None, ["a"], {"b": 1}])
def test_unsupported_source_type(source: object) -> None:
    with pytest.raises(TypeError, match=type(source).__name__):
        load_image(source)  # type: ignore[arg-type]


def test_text_mode_file_is_a_type_error(tmp_path: Path) -> None:
    path = tmp_path / "x.png"
    path.write_text("hello")
    with path.open("r", encoding="utf-8") as fh, pytest.raises(TypeError, match="binary mode"):
        load_image(fh)  # type: ignore[arg-type]


# --- EXIF ------------------------------------------------------------------------------------


def test_mistyped_exif_really_breaks_pillow() -> None:
    # Guards the corpus: this case is meant to exercise the "transpose failed" fallback.
    data = dict(OK_CASES)["jpeg_corrupt_exif_mistyped_tag"]
    with Image.open(io.BytesIO(data)) as img:
        try:
            ImageOps.exif_transpose(img)
        except (TypeError, struct.error):
            return  # Pillow 13: TypeError while re-serialising the rotated image's EXIF
    pytest.skip("this Pillow copes with the mistyped tag; the fallback is covered below")


def test_failing_exif_transpose_keeps_the_image(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(image: Image.Image) -> Image.Image:
        raise SyntaxError("not a TIFF file")

    monkeypatch.setattr(images.ImageOps, "exif_transpose", broken)
    data = dict(OK_CASES)["jpeg_exif_orientation_6"]
    img = load_image(data)
    assert img.size == (40, 20)  # as stored, not rotated
    assert img.mode == "RGB"


def test_mpo_case_really_is_mpo() -> None:
    with Image.open(io.BytesIO(dict(OK_CASES)["mpo_two_frames"])) as img:
        assert img.format == "MPO"


# --- mode normalisation ----------------------------------------------------------------------


def from_values(values: list[float], dtype: type) -> Image.Image:
    return Image.fromarray(np.array([values], dtype=dtype))


@pytest.mark.parametrize(
    ("img", "expected"),
    [
        # "I" with 16-bit data is scaled by the bit depth ...
        (from_values([0, 32768, 65535], np.int32), [0, 128, 255]),
        # ... beyond 16 bits (or negative) by the actual range.
        (from_values([0, 100_000, 200_000], np.int32), [0, 128, 255]),
        (from_values([-10, 0, 10], np.int32), [0, 128, 255]),
        (from_values([7, 7, 7], np.int32), [0, 0, 0]),
        # "F": [0, 1] scaled by 255, [0, 255] kept, anything else stretched.
        (from_values([0.0, 0.25, 1.0], np.float32), [0, 64, 255]),
        (from_values([0.0, 100.0, 255.0], np.float32), [0, 100, 255]),
        (from_values([-1.0, 0.0, 1.0], np.float32), [0, 128, 255]),
        (from_values([0.0, 500.0, 1000.0], np.float32), [0, 128, 255]),
        (from_values([float("nan"), 0.5, 1.0], np.float32), [0, 128, 255]),
        (from_values([float("-inf"), 0.5, float("inf")], np.float32), [128, 128, 128]),
        (from_values([float("nan")] * 3, np.float32), [0, 0, 0]),
        # 16-bit big-endian.
        (Image.frombytes("I;16B", (3, 1), bytes.fromhex("0000 8000 ffff")), [0, 128, 255]),
    ],
)
def test_deep_modes_scale_to_8bit(img: Image.Image, expected: list[int]) -> None:
    result = load_image(img)
    assert result.mode == "RGB"
    assert [result.getpixel((x, 0)) for x in range(3)] == [(v, v, v) for v in expected]


@pytest.mark.parametrize(
    ("mode", "colour", "expected", "tolerance"),
    [
        ("CMYK", (0, 255, 255, 0), RED, 0),
        ("YCbCr", (76, 85, 255), RED, 3),
        ("RGBX", (255, 0, 0, 0), RED, 0),
        ("HSV", (0, 255, 255), RED, 0),
        ("LAB", (128, 128, 128), (128, 128, 128), 255),  # only "converts", colour unspecified
        ("L", 77, (77, 77, 77), 0),
        ("P", 0, (0, 0, 0), 0),
        ("RGBA", (255, 0, 0, 0), (255, 255, 255), 0),
        ("RGBa", (0, 0, 0, 0), (255, 255, 255), 0),
        ("RGBa", (128, 0, 0, 128), (255, 127, 127), 1),
        ("LA", (0, 0), (255, 255, 255), 0),
        ("La", (0, 0), (255, 255, 255), 0),
        ("La", (0, 255), (0, 0, 0), 0),
        ("PA", (0, 0), (255, 255, 255), 0),
    ],
)
def test_in_memory_modes(
    mode: str, colour: int | tuple[int, ...], expected: Pixel, tolerance: int
) -> None:
    result = load_image(Image.new(mode, (2, 2), colour))
    assert result.mode == "RGB"
    assert result.size == (2, 2)
    assert_close(result.getpixel((1, 1)), expected, tolerance)


def test_rgb_with_transparent_colour_key() -> None:
    img = Image.new("RGB", (2, 1), RED)
    img.putpixel((1, 0), BLUE)
    data = encode(img, "PNG", transparency=BLUE)
    result = load_image(data)
    assert result.getpixel((0, 0)) == RED
    assert result.getpixel((1, 0)) == (255, 255, 255)


def test_zero_sized_pil_image_is_refused() -> None:
    with pytest.raises(ImageError, match="no pixels"):
        load_image(Image.new("RGB", (0, 5)))


def test_shrink_to_reduces_only_large_jpegs(tmp_path):
    from hookviz import load_image

    big = Image.new("RGB", (1600, 1200), (200, 30, 90))
    big.save(tmp_path / "big.jpg", quality=90)
    big.save(tmp_path / "big.png")
    Image.new("RGB", (500, 400)).save(tmp_path / "small.jpg")
    shrunk = load_image(tmp_path / "big.jpg", shrink_to=300)
    assert shrunk.size == (400, 300) and shrunk.info["full_size"] == (1600, 1200)
    assert shrunk.getpixel((200, 150)) == pytest.approx((200, 30, 90), abs=6)
    assert load_image(tmp_path / "big.jpg", shrink_to=700).size == (1600, 1200)  # 1/2: 600 < 700
    assert load_image(tmp_path / "big.png", shrink_to=300).size == (1600, 1200)  # JPEG only
    assert "full_size" not in load_image(tmp_path / "small.jpg", shrink_to=300).info
    assert load_image(tmp_path / "big.jpg").size == (1600, 1200)  # by default the full size


def test_a_jpeg_decoded_shrunk_is_analysed_on_its_files_grid(tmp_path):
    """A photo decoded at a reduced scale stands for its file: the heatmap is on the file's
    grid and nearly the full decode's (the model is fed a resize of either)."""
    import hookviz

    photo = hookviz.sample_image().resize((1600, 1200), Image.Resampling.BICUBIC)
    photo.save(tmp_path / "big.jpg", quality=95)
    loaded = hookviz.load_model("efficientnet_lite0", device="cpu")
    full = hookviz.load_image(tmp_path / "big.jpg")
    shrunk = hookviz.load_image(tmp_path / "big.jpg", shrink_to=400)
    assert shrunk.size == (800, 600)
    ours, theirs = (hookviz.grad_cam(loaded, image, target=1) for image in (shrunk, full))
    assert ours.size == theirs.size == (1200, 1600)
    assert ours.heatmap.shape == (1200, 1600)
    r = np.corrcoef(ours.heatmap.ravel(), theirs.heatmap.ravel())[0, 1]
    assert r > 0.98, r
