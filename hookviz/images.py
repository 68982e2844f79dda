"""Decode user-supplied images safely into fully loaded RGB PIL images.

Uploads are untrusted: they may be empty, not images at all, truncated, hostile (a tiny file
that declares billions of pixels), or in modes the rest of hookviz cannot handle (16-bit,
float, CMYK, transparent). :func:`load_image` turns every such input into either an
independent ``"RGB"`` image or an :class:`~hookviz.errors.ImageError` with a message fit to
show a user.

(Over 400 lines on purpose: one job, untrusted bytes to an RGB image, whose checks (size,
header, decompression bombs, truncation, modes, EXIF rotation) only make sense together.)
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import struct
import warnings
import zlib
from collections.abc import Iterator
from typing import Protocol, TypeAlias

import numpy as np
from PIL import Image, ImageOps

from .errors import ImageError

MAX_BYTES = 50 * 1024 * 1024
"""Largest accepted encoded file, in bytes."""

MAX_PIXELS = 40_000_000
"""Largest accepted decoded image, in pixels (width × height)."""

SUPPORTED_FORMATS: frozenset[str] = frozenset(
    {"PNG", "JPEG", "MPO", "WEBP", "BMP", "DIB", "GIF", "TIFF"}
)
"""Pillow format names :func:`load_image` accepts (MPO is what camera JPEGs open as)."""

# The plugins Image.open may try, common formats first so ordinary uploads are identified by
# the first plugin tried. There is no "MPO" here: Pillow registers MPO for saving only, and its
# JPEG opener returns an MPO image by itself when the file carries several pictures.
_OPEN_ORDER: tuple[str, ...] = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "DIB", "TIFF")

_EXPECTED = "PNG, JPEG, WebP, BMP, GIF or TIFF expected"
_CORRUPT = "the image data is truncated or corrupt"

# Pillow's plugins report damaged files through many unrelated exception types. Fuzzing
# Pillow 13 with ~25,000 mutated/truncated PNG, JPEG, MPO, WebP, GIF, BMP and TIFF files gave
# OSError (incl. UnidentifiedImageError), SyntaxError and ValueError from open/load, and
# TypeError and struct.error from exif_transpose; the rest are documented or historical
# failure modes of the same plugins. KeyError is deliberately absent: it would have hidden a
# real bug here (asking Image.open for a format it has no opener for). These are only caught
# around Pillow calls, so a bug in this module still surfaces with its own traceback.
_PIL_DATA_ERRORS: tuple[type[Exception], ...] = (
    OSError,
    ValueError,
    SyntaxError,
    EOFError,
    struct.error,
    zlib.error,
    IndexError,
    TypeError,
)

_BOMB_ERRORS: tuple[type[Exception], ...] = (
    Image.DecompressionBombError,
    Image.DecompressionBombWarning,
)

# File signatures of the supported formats, used only to word the message when Pillow cannot
# identify a file: a PNG signature followed by garbage is a damaged PNG, not "not an image".
_SIGNATURES: tuple[bytes, ...] = (
    b"\x89PNG\r\n\x1a\n",
    b"\xff\xd8\xff",
    b"GIF87a",
    b"GIF89a",
    b"II*\x00",
    b"MM\x00*",
)

_WHITE = (255, 255, 255, 255)
_ALPHA_MODES = frozenset({"RGBA", "LA", "PA", "RGBa", "La"})
_HIGH_DEPTH_MODES = frozenset({"I;16", "I;16B", "I;16L", "I;16N", "I", "F"})


class _Readable(Protocol):
    """A binary file-like object: anything with ``read(size) -> bytes``."""

    def read(self, size: int = -1, /) -> bytes | None:
        """Return up to ``size`` bytes."""
        ...


ImageSource: TypeAlias = (
    str | os.PathLike[str] | bytes | bytearray | memoryview | _Readable | Image.Image
)
"""Everything :func:`load_image` accepts."""


def load_image(
    source: ImageSource,
    *,
    max_bytes: int = MAX_BYTES,
    max_pixels: int = MAX_PIXELS,
    shrink_to: int | None = None,
) -> Image.Image:
    """Decode ``source`` into an independent, fully loaded ``"RGB"`` image.

    The format is identified from the content, never from a file name. Only the first frame
    of animated or multi-page files is decoded. EXIF orientation is applied (unless the EXIF
    block itself is unreadable, in which case the image is kept as stored). Transparent
    pixels are composited over white; 16-bit, 32-bit and float images are scaled to 8 bits.

    Pillow's own decompression-bomb limit (``Image.MAX_IMAGE_PIXELS``, read but never
    changed here) still applies, so a ``max_pixels`` above it is effectively capped by it.

    Args:
        source: A path (``str`` or ``os.PathLike``), the encoded bytes (``bytes``,
            ``bytearray`` or ``memoryview``), a binary file-like object read from its current
            position (e.g. Streamlit's ``UploadedFile``), or an already open PIL image, whose
            mode is then normalised without re-reading EXIF orientation.
        max_bytes: Largest accepted encoded size in bytes; at most ``max_bytes + 1`` bytes are
            ever read.
        max_pixels: Largest accepted ``width * height``, checked from the header before any
            pixel data is decoded.
        shrink_to: JPEGs only: decode at 1/2, 1/4 or 1/8 of the size (libjpeg's DCT scaling,
            several times cheaper than a full decode of a large photo) as long as the short
            side stays at least this many pixels. The image is then smaller than the file; its
            ``info["full_size"]`` holds the file's own upright (width, height), and every
            analysis of it (``grad_cam``, ``attribute``, a detector's boxes) is returned on
            that full grid, as for the full decode. None (the default): always the full size.

    Returns:
        A new ``"RGB"`` image that shares no file handle or pixel buffer with ``source``.

    Raises:
        ImageError: The input is missing, empty, too large, not a supported image, or
            damaged.
        TypeError: ``source`` is none of the accepted types, a file object returned ``str``
            (opened in text mode), or a limit is not an ``int``.
        ValueError: ``max_bytes`` or ``max_pixels`` is not a positive integer.
    """
    _check_limit("max_bytes", max_bytes)
    _check_limit("max_pixels", max_pixels)
    if isinstance(source, Image.Image):
        _check_dimensions(source.size, max_pixels)
        _load_pixels(source, max_pixels)
        return _to_rgb(source)
    data = _read_bytes(source, max_bytes)
    with _open_checked(data, max_pixels, shrink_to) as img:
        full_size = img.info.get("full_size")
        rgb = _to_rgb(_exif_upright(img))
        if full_size is not None:
            # the upright size: a quarter turn in the EXIF orientation swaps the sides
            turned = (rgb.width < rgb.height) != (img.width < img.height)
            rgb.info["full_size"] = full_size[::-1] if turned else full_size
        return rgb


def _check_limit(name: str, value: int) -> None:
    """Reject limits that would make every input fail (or pass) for a silly reason."""
    # bool is an int subclass; max_bytes=True is surely a mistake, not "1 byte".
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")


# --- reading ---------------------------------------------------------------------------------


def _read_bytes(source: ImageSource, max_bytes: int) -> bytes:
    """Return the encoded bytes of ``source``, reading at most ``max_bytes + 1`` of them.

    Raises:
        ImageError: The file is missing, unreadable, empty or larger than ``max_bytes``.
        TypeError: ``source`` is not a path, bytes-like object or binary file object.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = _bytes_from_buffer(source, max_bytes)
    elif isinstance(source, (str, os.PathLike)):
        data = _read_path(source, max_bytes)
    elif callable(getattr(source, "read", None)):
        data = _read_stream(source, max_bytes)
    else:
        raise TypeError(
            "expected a path, bytes, a binary file object or a PIL image, "
            f"got {type(source).__name__}"
        )
    if not data:
        raise ImageError("the file is empty")
    if len(data) > max_bytes:
        raise _too_large(max_bytes)
    return data


def _too_large(max_bytes: int) -> ImageError:
    """Return the error for an input over ``max_bytes``."""
    return ImageError(f"the file is larger than the {_format_size(max_bytes)} limit")


def _bytes_from_buffer(buffer: bytes | bytearray | memoryview, max_bytes: int) -> bytes:
    """Return ``buffer`` as ``bytes``, without copying one that is already over the limit."""
    if isinstance(buffer, bytes):
        return buffer
    view = memoryview(buffer)
    if view.nbytes > max_bytes:
        raise _too_large(max_bytes)  # before copying a possibly huge buffer
    # A copy, so that later changes to a caller's bytearray cannot affect decoding.
    return view.tobytes()


def _read_path(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """Read up to ``max_bytes + 1`` bytes of the file at ``path``."""
    shown = os.fsdecode(path)
    try:
        with open(path, "rb") as fh:
            return _read_stream(fh, max_bytes)
    except FileNotFoundError as exc:
        raise ImageError(f"file not found: {shown}") from exc
    except IsADirectoryError as exc:
        raise ImageError(f"not a file but a directory: {shown}") from exc
    except OSError as exc:
        raise ImageError(f"could not read {shown}: {exc.strerror or exc}") from exc


def _read_stream(stream: _Readable, max_bytes: int) -> bytes:
    """Read up to ``max_bytes + 1`` bytes from ``stream``'s current position."""
    chunks: list[bytes] = []
    remaining = max_bytes + 1
    try:
        # Raw streams (sockets, unbuffered files) may return fewer bytes than asked for
        # before the end, so keep reading until EOF or until the limit is provably exceeded.
        while remaining > 0:
            chunk = stream.read(remaining)
            if chunk is None:  # a non-blocking raw stream with nothing available
                break
            if not isinstance(chunk, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"the file object returned {type(chunk).__name__}, not bytes; "
                    "open it in binary mode ('rb')"
                )
            if not chunk:
                break
            chunks.append(bytes(chunk))
            remaining -= len(chunks[-1])
    except OSError as exc:
        raise ImageError(f"could not read the file: {exc.strerror or exc}") from exc
    return b"".join(chunks)


def _format_size(n_bytes: int) -> str:
    """Format a byte count for a message, in MB unless that would read as 0."""
    megabytes = n_bytes / (1024 * 1024)
    if megabytes >= 0.01:
        return f"{megabytes:.2f}".rstrip("0").rstrip(".") + " MB"
    return f"{n_bytes:,} bytes"


# --- identifying and decoding ----------------------------------------------------------------


@contextlib.contextmanager
def _pillow_guard() -> Iterator[None]:
    """Adjust Pillow's warnings for the duration of one call into it.

    Pillow only *warns* between its two decompression-bomb thresholds; that becomes an error
    so a suspicious image is refused rather than decoded. Its UserWarnings about damaged
    metadata ("Corrupt EXIF data", "Truncated File Read") are dropped: the outcome is already
    reported to the caller, as an ImageError or as an image decoded despite the damage.

    ``catch_warnings`` restores the filters on exit, so nothing global is changed for good
    (though, as with any use of it, concurrent threads share the filters meanwhile).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")
        yield


def _open_checked(data: bytes, max_pixels: int, shrink_to: int | None = None) -> Image.Image:
    """Identify ``data``, check its declared size, then decode its first frame (a JPEG at a
    reduced scale when ``shrink_to`` allows, see ``load_image``).

    Raises:
        ImageError: Unsupported or unrecognised format, bad dimensions, or corrupt data.
    """
    try:
        with _pillow_guard():
            img = Image.open(io.BytesIO(data), formats=_open_formats())
    except Image.UnidentifiedImageError as exc:
        raise ImageError(_unidentified_message(data)) from exc
    except _BOMB_ERRORS as exc:
        raise ImageError(_bomb_message(exc, max_pixels)) from exc
    except _PIL_DATA_ERRORS as exc:
        raise ImageError(_CORRUPT) from exc
    try:
        if img.format not in SUPPORTED_FORMATS:  # defensive: _OPEN_ORDER already restricts
            raise ImageError(f"{img.format} images are not supported ({_EXPECTED})")
        _check_dimensions(img.size, max_pixels)
        if shrink_to is not None and img.format == "JPEG":
            _shrink(img, shrink_to)
        # Right after open the current frame is the first one; loading never iterates the
        # other frames of animated GIF/WebP or multi-page TIFF.
        _load_pixels(img, max_pixels)
    except ImageError:
        img.close()
        raise
    return img


def _shrink(img: Image.Image, shrink_to: int) -> None:
    """Ask libjpeg for the smallest DCT scale that keeps the short side >= ``shrink_to``."""
    width, height = img.size
    factor = min(width, height) / max(1, int(shrink_to))
    if factor < 2:
        return
    full_size = img.size
    with _pillow_guard():
        img.draft(img.mode, (math.ceil(width / factor), math.ceil(height / factor)))
    if img.size != full_size:
        img.info["full_size"] = full_size


def _open_formats() -> tuple[str, ...]:
    """Return the plugins of ``_OPEN_ORDER`` this Pillow build can open with.

    Image.open raises KeyError for a format name it has no opener for (Pillow 13 has none for
    "MPO", for instance); that would surface as a crash or be misreported as a corrupt file,
    so such names are dropped.
    """
    Image.init()  # registers all plugins; returns at once after the first call
    return tuple(name for name in _OPEN_ORDER if name in Image.OPEN)


def _unidentified_message(data: bytes) -> str:
    """Word the error for a file none of the supported plugins could identify."""
    if data.startswith(_SIGNATURES) or (data[:4] == b"RIFF" and data[8:12] == b"WEBP"):
        return _CORRUPT
    foreign = _foreign_format(data)
    if foreign is not None and foreign not in SUPPORTED_FORMATS:
        return f"{foreign} images are not supported ({_EXPECTED})"
    return f"not a readable image ({_EXPECTED})"


def _foreign_format(data: bytes) -> str | None:
    """Return the name of a format Pillow knows but hookviz refuses, for the error message.

    Only headers are parsed (the image is never loaded), so the extra plugins tried here
    cannot decode anything hostile.
    """
    try:
        with _pillow_guard(), Image.open(io.BytesIO(data)) as probe:
            return probe.format
    except (*_PIL_DATA_ERRORS, *_BOMB_ERRORS):
        return None


def _check_dimensions(size: tuple[int, int], max_pixels: int) -> None:
    """Refuse empty images and images too large to decode, using the header's size only."""
    width, height = size
    if width <= 0 or height <= 0:
        raise ImageError(f"the image has no pixels ({width}×{height})")
    if width * height > max_pixels:
        raise ImageError(
            f"the image is {width:,}×{height:,} pixels, more than the limit of "
            f"{max_pixels:,} pixels"
        )


def _load_pixels(img: Image.Image, max_pixels: int) -> None:
    """Decode the pixel data of ``img``, translating Pillow's many failure modes."""
    try:
        with _pillow_guard():
            img.load()
    except _BOMB_ERRORS as exc:
        raise ImageError(_bomb_message(exc, max_pixels)) from exc
    except _PIL_DATA_ERRORS as exc:
        raise ImageError(_CORRUPT) from exc


def _bomb_message(exc: Exception, max_pixels: int) -> str:
    """Word Pillow's decompression-bomb refusal, which happens before the size is known."""
    # Pillow's message is "Image size (N pixels) exceeds limit of M pixels, ..."; the count
    # is the only detail available, since Image.open raised before returning the image.
    match = re.search(r"\((\d+) pixels\)", str(exc))
    if match is None:
        return "the image is too large to decode safely"
    pixels = int(match.group(1))
    limit = f"{max_pixels:,} pixels" if pixels > max_pixels else "Pillow's safety limit"
    return f"the image has {pixels:,} pixels, more than the limit of {limit}"


def _exif_upright(img: Image.Image) -> Image.Image:
    """Apply the EXIF orientation, or return ``img`` as is if its EXIF data is unreadable."""
    try:
        with _pillow_guard():
            upright = ImageOps.exif_transpose(img)
    except _PIL_DATA_ERRORS:
        # Metadata damage must not cost the user a perfectly good picture.
        return img
    return img if upright is None else upright


# --- mode normalisation ----------------------------------------------------------------------


def _to_rgb(img: Image.Image) -> Image.Image:
    """Return a new ``"RGB"`` image with the content of ``img``.

    Raises:
        ImageError: The mode cannot be converted to RGB.
    """
    if img.mode in _HIGH_DEPTH_MODES:
        img = _to_8bit(img)
    if img.mode == "La":
        # Pillow cannot convert premultiplied "La" to anything, but can convert "RGBa".
        lum, alpha = img.split()
        img = Image.merge("RGBa", (lum, lum, lum, alpha))
    try:
        if img.mode in _ALPHA_MODES or "transparency" in img.info:
            return _flatten_on_white(img)
        # convert() returns a copy even when the mode already is RGB, so the result never
        # shares a file handle or pixel buffer with the input.
        return img.convert("RGB")
    except ValueError as exc:
        raise ImageError(f"images in mode {img.mode} cannot be converted to RGB") from exc


def _flatten_on_white(img: Image.Image) -> Image.Image:
    """Composite a transparent image over white.

    A plain ``convert("RGB")`` would drop alpha and reveal whatever colour transparent
    pixels happen to store (often black), which is not what the user sees in a viewer.
    """
    rgba = img.convert("RGBA")
    background = Image.new("RGBA", rgba.size, _WHITE)
    return Image.alpha_composite(background, rgba).convert("RGB")


def _to_8bit(img: Image.Image) -> Image.Image:
    """Scale a 16-bit, 32-bit integer or float image to an 8-bit ``"L"`` image."""
    values = np.asarray(img)
    if img.mode == "F":
        scaled = _scale_float(values.astype(np.float32))
    elif img.mode == "I" and (values.min() < 0 or values.max() > 65535):
        scaled = _stretch(values.astype(np.float32))
    else:
        # 16 bits of depth (also "I" images holding 16-bit data, as some decoders produce).
        scaled = values.astype(np.float32) / 257.0
    return Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8))


def _scale_float(values: np.ndarray) -> np.ndarray:
    """Map float pixels to 0..255: as fractions, as 8-bit values, or by their range."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return np.zeros_like(values)
    # NaN means "no data", shown black; infinities saturate at the finite extremes.
    values = np.nan_to_num(values, nan=0.0, posinf=finite.max(), neginf=finite.min())
    low, high = float(values.min()), float(values.max())
    if low >= 0.0 and high <= 1.0:
        return values * 255.0
    if low >= 0.0 and high <= 255.0:
        return values
    return _stretch(values)


def _stretch(values: np.ndarray) -> np.ndarray:
    """Linearly map the range of ``values`` onto 0..255 (all zeros when it is flat)."""
    low, high = float(values.min()), float(values.max())
    if high == low:
        return np.zeros_like(values)
    return (values - low) * (255.0 / (high - low))


def fit_within(image: Image.Image, longest: int) -> Image.Image:
    """A copy scaled down so its long side is at most ``longest`` pixels (never scaled up)."""
    scale = longest / max(image.size)
    if scale >= 1.0:
        return image
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.Resampling.LANCZOS)
