"""Decode user-supplied videos into RGB frames, sampling only the frames a model needs.

A video model looks at a clip of a few frames (8, 16, 32) spread over the video, so
:func:`load_video` with ``frames=N`` seeks to N evenly spaced times and decodes from the
keyframe before each: a long file costs memory for N frames and the decoding of a few groups
of pictures, never the whole file. ``frames=None`` decodes every frame, bounded by a memory
and a duration limit. Files are untrusted, as images are: empty, not videos, audio only,
truncated, or hours long; each gives a :class:`~hookviz.errors.VideoError` with a message fit
to show a user.

PyAV (``av``, FFmpeg's libraries) is imported on the first call, so ``import hookviz`` stays
quick. This module opens the user's file and checks the request; ``video_decoding`` reads the
frames.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

import numpy as np
from PIL import Image

from .errors import ImageError, VideoError
from .images import MAX_PIXELS as _IMAGE_MAX_PIXELS
from .images import _read_stream
from .video_decoding import Clip, Decoder, decode_all, decode_budget, decode_sample
from .video_decoding import sample_indices as sample_indices  # (documented here)

MAX_SECONDS = 600.0
"""Default bound on decoding: the longest video decoded whole, 10 minutes (see ``load_video``)."""

MAX_PIXELS = _IMAGE_MAX_PIXELS
"""Largest accepted frame, in pixels (width × height): the same bound as one image."""

MAX_MEMORY = 2 * 1024**3
"""Largest accepted size of the returned frames, in bytes (T × H × W × 3): 2 GiB."""

# FFmpeg's demuxers this reader lets FFmpeg pick from (its ``format_whitelist``). Some demuxers
# open further files or URLs named inside the input (an HLS playlist, the concat list, image2's
# file patterns), which an untrusted upload must not be able to do; the containers of real
# videos, audio files (refused later with "audio only") and single still images (refused as
# still images) read nothing but the bytes given.
_DEMUXERS = (
    "mov",  # mp4, mov, m4v, 3gp (FFmpeg names it "mov,mp4,m4a,3gp,3g2,mj2")
    "matroska",  # mkv, webm
    "avi",
    "mpegts",
    "mpeg",
    "flv",
    "asf",  # wmv
    "ogg",
    "gif",
    "apng",
    "yuv4mpegpipe",  # .y4m, what Chromium's fake camera plays
    "mp3",
    "wav",
    "flac",
    "aac",
    "png_pipe",
    "jpeg_pipe",
    "webp_pipe",
    "bmp_pipe",
    "tiff_pipe",
)
_EXPECTED = "MP4, MOV, MKV, WebM, AVI, MPEG-TS, FLV, WMV, Ogg or GIF expected"

# Signatures of containers, only to word the message when FFmpeg cannot open a file: an MP4
# whose index (the moov box, written last by default) was cut off is a damaged MP4, not
# "not a video".
_CONTAINER_SIGNATURES: tuple[tuple[int, bytes, str], ...] = (
    (4, b"ftyp", "MP4/MOV"),
    (4, b"moov", "MP4/MOV"),
    (4, b"mdat", "MP4/MOV"),
    (0, b"\x1a\x45\xdf\xa3", "Matroska/WebM"),
    (8, b"AVI ", "AVI"),
    (0, b"FLV", "FLV"),
    (0, b"OggS", "Ogg"),
)

# ISO-BMFF brands of still pictures (HEIF, AVIF): MP4's container, but one image. (An AVIF
# sequence, "avis", is an animation and stays a video.)
_STILL_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"mif1", b"avif"})

# Files that cannot seek are read once into memory, up to this size.
_MAX_UNSEEKABLE_BYTES = 1024**3


class _Readable(Protocol):
    """A binary file-like object: anything with ``read(size) -> bytes``."""

    def read(self, size: int = -1, /) -> bytes | None:
        """Return up to ``size`` bytes."""
        ...


VideoSource: TypeAlias = str | os.PathLike[str] | bytes | bytearray | memoryview | _Readable
"""Everything :func:`load_video` accepts."""


@dataclass(frozen=True, eq=False, repr=False)
class Video:
    """Decoded frames of a video, in presentation order.

    Attributes:
        frames: (T, H, W, 3) uint8 RGB, upright (the file's display rotation applied).
        times: (T,) float64, each frame's time in seconds from the start of the video
            stream (0.0 for the first frame of an ordinary file).
        fps: the stream's average frame rate, frames per second.
        duration: the video stream's length in seconds, as the file declares it.
        source_frames: how many frames the file holds: declared by the file, estimated as
            ``round(duration * fps)`` where it does not say (WebM, MKV), exact when every
            frame was decoded (``frames=None``).
        name: the file's name where known (a path's, or a file object's ``name``), else None.
        codec: FFmpeg's name of the video codec (``"h264"``, ``"vp9"``, ...).
        decoded_frames: how many frames the decoder produced to return these: the cost of
            the call. Sampling a long file decodes a few frames per sample, not the file.
    """

    frames: np.ndarray
    times: np.ndarray
    fps: float
    duration: float
    source_frames: int
    name: str | None = None
    codec: str = ""
    decoded_frames: int = 0

    @property
    def size(self) -> tuple[int, int]:
        """(H, W) of every frame."""
        return int(self.frames.shape[1]), int(self.frames.shape[2])

    @property
    def indices(self) -> np.ndarray:
        """(T,) int64: each frame's number in the file, ``round(time * fps)`` (exact for a
        constant frame rate, an estimate for a variable one)."""
        return np.rint(self.times * self.fps).astype(np.int64)

    def __len__(self) -> int:
        return int(self.frames.shape[0])

    def frame(self, i: int) -> Image.Image:
        """Frame ``i`` (negative counts from the end) as a new RGB PIL image."""
        count = len(self)
        if not -count <= i < count:
            raise IndexError(f"frame {i} is out of range for a video of {count} frames")
        return Image.fromarray(self.frames[i], "RGB")

    def __repr__(self) -> str:
        height, width = self.size
        name = f"{self.name!r}, " if self.name else ""
        return (
            f"Video({name}{len(self)} frames of {width}×{height}, {self.fps:.4g} fps, "
            f"{self.duration:.2f} s)"
        )

    def _repr_png_(self) -> bytes:
        """Up to 8 frames, evenly spread, side by side at 96 pixels high, for Jupyter."""
        picks = sample_indices(len(self), min(8, len(self))) if len(self) else []
        height, width = self.size
        tile_w = max(1, round(width * 96 / max(1, height)))
        tiles = [np.asarray(self.frame(i).resize((tile_w, 96))) for i in picks]
        gap = np.full((96, 2, 3), 255, np.uint8)
        strip = np.concatenate([part for tile in tiles for part in (tile, gap)][:-1], axis=1)
        buffer = io.BytesIO()
        Image.fromarray(strip, "RGB").save(buffer, format="PNG")
        return buffer.getvalue()


def load_video(
    source: VideoSource,
    frames: int | None = None,
    *,
    max_seconds: float = MAX_SECONDS,
    max_pixels: int = MAX_PIXELS,
    max_memory: int = MAX_MEMORY,
) -> Video:
    """Decode a video into RGB frames: every frame, or ``frames`` sampled evenly.

    With ``frames=N`` the clip is sampled as video classifiers sample it: N evenly spaced
    frames from the first to the last (see :func:`sample_indices`; for a variable frame
    rate, the frame on screen at each of N evenly spaced times). Each is reached by seeking
    to the keyframe before it, so a film costs memory for N frames only and the decoding of
    a few frames per sample. The format is identified from the content, never the name.

    A truncated or damaged file is refused, never returned short: when its data ends before
    a frame asked for (every frame, or the last one, which sampling always takes), or a
    packet cannot be decoded, the error says where its readable frames stop. (Damage a
    decoder conceals, a few broken blocks in a frame, cannot be seen and is returned as
    decoded.)

    Args:
        source: A path (``str`` or ``os.PathLike``), the encoded bytes, or a binary file
            object (e.g. Streamlit's ``UploadedFile``; a seekable one is read in place from
            its start, another one read into memory).
        frames: None for every frame; an int N >= 1 for N frames sampled evenly (N may
            exceed the file's frame count: frames then repeat).
        max_seconds: Bounds the decoding. With ``frames=None`` the video may last no
            longer, checked before decoding (a 10-hour file is refused at once). With
            ``frames=N`` a video of any length can be sampled, but at most as many frames
            are decoded as ``max_seconds`` of it holds (or 250 per frame asked for, if
            more: x264's default keyframe interval): seeking keeps an ordinary file far
            below that, a few frames per sample, while one that cannot seek (it would be
            decoded from its start) is refused when that many are decoded. ``math.inf``
            lifts the bound.
        max_pixels: Largest accepted ``width * height`` of a frame, from the header.
        max_memory: Largest accepted size of the returned frames in bytes (T × H × W × 3),
            checked before decoding.

    Returns:
        A :class:`Video`: ``frames`` (T, H, W, 3) uint8, ``times``, ``fps``, ``duration``.

    Raises:
        VideoError: The input is missing, empty, not a video (an image, audio only, random
            bytes), damaged or truncated, or over a limit; or ``frames`` < 1.
        TypeError: ``source`` or ``frames`` is of the wrong type.
        ValueError: A limit is not positive.
    """
    frames = _check_frames(frames)
    _check_limit("max_seconds", max_seconds, (int, float))
    _check_limit("max_pixels", max_pixels, (int,))
    _check_limit("max_memory", max_memory, (int,))
    av = _import_av()
    with _opened(av, source) as (container, name):
        clip = Clip.probe(av, container)
        clip.check_size(frames, max_pixels, max_memory, max_seconds)
        decoder = Decoder(av, container, clip, *decode_budget(clip, frames, max_seconds))
        if frames is None:
            pictures, times = decode_all(decoder, clip, max_memory)
            source_frames = len(pictures)
            duration = clip.duration if clip.duration is not None else len(pictures) / clip.fps
        else:
            pictures, times = decode_sample(decoder, clip, frames)
            source_frames = clip.frame_count()
            duration = clip.known_duration()
    return Video(
        frames=pictures,
        times=times,
        fps=float(clip.fps),
        duration=float(duration),
        source_frames=int(source_frames),
        name=name,
        codec=clip.codec,
        decoded_frames=decoder.decoded,
    )


def _check_frames(frames: int | None) -> int | None:
    if frames is None:
        return None
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)):
        raise TypeError(f"frames must be None or an int, got {type(frames).__name__}")
    if frames < 1:
        raise VideoError(f"frames must be at least 1, got {frames} (None decodes every frame)")
    return int(frames)


def _check_limit(name: str, value: Any, kinds: tuple[type, ...]) -> None:
    """Reject limits that would make every input fail (or pass) for a silly reason."""
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not value > 0 or (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"{name} must be positive, got {value}")


def _import_av() -> Any:
    """PyAV, imported on first use: it loads FFmpeg's libraries, which ``import hookviz``
    should not wait for."""
    try:
        import av
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "hookviz.load_video reads videos with PyAV: pip install av"
        ) from exc
    return av


# --- opening ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _opened(av: Any, source: VideoSource) -> Iterator[tuple[Any, str | None]]:
    """The open container of ``source`` and the file's name if known; closes what it opened."""
    with contextlib.ExitStack() as stack:
        stream, name = _file(source, stack)
        head = _head(stream)
        if not head:
            raise VideoError("the file is empty")
        if head[4:8] == b"ftyp" and head[8:12] in _STILL_BRANDS:
            # FFmpeg opens a HEIF or AVIF photo as a one-frame "video" of one of its tiles
            raise VideoError("a still image (HEIF/AVIF), not a video")
        try:
            container = av.open(stream, mode="r", options={"format_whitelist": ",".join(_DEMUXERS)})
        except av.FFmpegError as exc:
            raise VideoError(_unopenable_message(head)) from exc
        stack.callback(container.close)
        yield container, name


def _file(source: VideoSource, stack: contextlib.ExitStack) -> tuple[Any, str | None]:
    """A seekable binary file object for ``source``, and the file's name if known.

    A path is opened here and handed to FFmpeg as a file object, never as a string: FFmpeg
    would read a string as a URL (``concat:``, ``http:``, ``pipe:``).
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        # a copy, so that later changes to a caller's bytearray cannot affect decoding
        return io.BytesIO(bytes(source)), None
    if isinstance(source, (str, os.PathLike)):
        shown = os.fsdecode(source)
        try:
            handle = stack.enter_context(open(source, "rb"))  # noqa: SIM115 (it is one)
        except FileNotFoundError as exc:
            raise VideoError(f"file not found: {shown}") from exc
        except IsADirectoryError as exc:
            raise VideoError(f"not a file but a directory: {shown}") from exc
        except OSError as exc:
            raise VideoError(f"could not read {shown}: {exc.strerror or exc}") from exc
        return handle, os.path.basename(shown)
    if callable(getattr(source, "read", None)):
        name = getattr(source, "name", None)
        name = os.path.basename(name) if isinstance(name, str) and name else None
        if _seekable(source):
            source.seek(0)  # type: ignore[attr-defined]
            return source, name
        return io.BytesIO(_read_unseekable(source)), name
    raise TypeError(f"expected a path, bytes or a binary file object, got {type(source).__name__}")


def _seekable(stream: Any) -> bool:
    try:
        return bool(stream.seekable()) if callable(getattr(stream, "seekable", None)) else False
    except (OSError, ValueError):
        return False


def _read_unseekable(stream: _Readable) -> bytes:
    """Read a stream that cannot seek (a pipe, a socket) into memory, up to a bound (as
    ``load_image`` reads one: ``images._read_stream``)."""
    try:
        data = _read_stream(stream, _MAX_UNSEEKABLE_BYTES)
    except ImageError as exc:  # (a read that failed: said as a video's)
        raise VideoError(str(exc)) from exc.__cause__
    if len(data) > _MAX_UNSEEKABLE_BYTES:
        raise VideoError(
            f"the stream cannot seek and is over {_MAX_UNSEEKABLE_BYTES // 1024**2:,} MB: "
            "save it to a file and pass the path"
        )
    return data


def _head(stream: Any) -> bytes:
    """The first 16 bytes of a seekable stream, leaving its position at the start."""
    try:
        head = stream.read(16)
        stream.seek(0)
    except OSError as exc:
        raise VideoError(f"could not read the file: {exc.strerror or exc}") from exc
    if not isinstance(head, (bytes, bytearray)):
        raise TypeError(
            f"the file object returned {type(head).__name__}, not bytes; "
            "open it in binary mode ('rb')"
        )
    return bytes(head)


def _unopenable_message(head: bytes) -> str:
    """Word the error for a file FFmpeg could not open, from its first bytes."""
    for offset, signature, kind in _CONTAINER_SIGNATURES:
        if head[offset : offset + len(signature)] == signature:
            index = (
                " (its index, the moov box, is missing or unreadable)" if kind == "MP4/MOV" else ""
            )
            return f"the {kind} file is truncated or damaged{index}"
    return f"not a readable video ({_EXPECTED})"
