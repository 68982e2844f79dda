"""Frames from an open video container: what its header declares, and decoding the frames
asked for, every one or a sample, seeking to the keyframe before each sample and counting
what it decodes.

``hookviz.video.load_video`` is the entry point: it opens the user's file, and this module
reads it. PyAV's objects come in as arguments, so nothing here imports it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import VideoError

if TYPE_CHECKING:
    import av.video.stream

# A seek lands on the keyframe at or before the target, and decoding starts over from there.
# Below this gap (or the longest keyframe interval seen so far) decoding on is no dearer.
_SEEK_GAP_S = 2.0
# Frames a sample may cost (x264's default longest keyframe interval): see decode_budget.
_DECODE_PER_SAMPLE = 250


def sample_indices(total: int, count: int) -> list[int]:
    """The frame numbers of ``count`` frames spread evenly over ``total`` frames.

    Frame ``floor(i * (total - 1) / (count - 1))`` for ``i = 0 .. count - 1``: the first and
    the last frame and evenly spaced ones between, the indices of
    ``torch.linspace(0, total - 1, count).long()`` (pytorchvideo's ``UniformTemporalSubsample``,
    how video classifiers are evaluated) computed exactly, in integers: float32 puts a few
    whole values a hair below, and ``.long()`` then takes the frame before. With
    ``count > total`` frames repeat, so a model still gets ``count`` of them; one frame is the
    first.
    """
    if total < 1 or count < 1:
        raise ValueError(f"need at least one frame, got total={total}, count={count}")
    if count == 1:
        return [0]
    return [i * (total - 1) // (count - 1) for i in range(count)]


# --- what the file declares ------------------------------------------------------------------


@dataclass
class Clip:
    """The video stream chosen and what its header says."""

    stream: av.video.stream.VideoStream
    fps: Fraction
    duration: float | None
    declared_frames: int
    width: int
    height: int
    codec: str
    origin: int  # pts of the stream's start, in stream.time_base units
    exact_duration: bool  # the video stream's own duration, not the container's
    # one for the whole clip: it keeps FFmpeg's conversion context between frames (a frame's
    # own to_ndarray builds one per call, measured 20x slower on small frames)
    reformatter: Any = None

    @classmethod
    def probe(cls, av: Any, container: Any) -> Clip:
        format_name = container.format.name
        if format_name.endswith("_pipe"):
            kind = format_name.removesuffix("_pipe").upper()
            raise VideoError(
                f"a still image ({kind}), not a video; read it with hookviz.load_image"
            )
        # a cover picture (an mp3's or m4a's album art) is a one-frame "video" stream
        attached = av.stream.Disposition.attached_pic
        videos = [s for s in container.streams.video if not s.disposition & attached]
        if not videos:
            kinds = sorted({s.type for s in container.streams if s not in container.streams.video})
            held = f"it holds {' and '.join(kinds)} only" if kinds else "it holds no streams"
            raise VideoError(f"the file has no video stream ({held})")
        stream = videos[0]
        codec = stream.codec_context.name
        time_base = stream.time_base or Fraction(1, 1)
        duration, exact = _stream_duration(stream, container, time_base)
        fps = stream.average_rate or stream.guessed_rate
        if not fps and duration and stream.frames:
            fps = Fraction(stream.frames) / Fraction(duration)
        if not fps or fps <= 0:
            raise VideoError("the video does not declare its frame rate")
        width, height = stream.codec_context.width, stream.codec_context.height
        if width <= 0 or height <= 0:
            raise VideoError(f"the video has no pixels ({width}×{height})")
        return cls(
            stream=stream,
            fps=Fraction(fps),
            duration=duration,
            declared_frames=int(stream.frames or 0),
            width=width,
            height=height,
            codec=codec,
            origin=int(stream.start_time or 0),
            exact_duration=exact,
            reformatter=av.video.reformatter.VideoReformatter(),
        )

    def check_size(
        self, frames: int | None, max_pixels: int, max_memory: int, max_seconds: float
    ) -> None:
        """Refuse, before decoding, frames too large or a clip too long to decode whole."""
        width, height = self.width, self.height
        if width * height > max_pixels:
            raise VideoError(
                f"the video's frames are {width:,}×{height:,} pixels, more than the limit of "
                f"{max_pixels:,} pixels (max_pixels)"
            )
        frame_bytes = width * height * 3
        if frames is not None:
            if frames * frame_bytes > max_memory:
                raise VideoError(
                    f"{frames:,} frames of {width}×{height} take "
                    f"{_gigabytes(frames * frame_bytes)}, more than max_memory "
                    f"({_gigabytes(max_memory)}): ask for fewer frames"
                )
            return
        if self.duration is not None and self.duration > max_seconds:
            raise VideoError(
                f"the video lasts {_clock(self.duration)}, more than max_seconds="
                f"{max_seconds:g} ({_clock(max_seconds)}): pass frames=N to sample N frames "
                f"from it (e.g. frames=16), or max_seconds={math.ceil(self.duration)} to "
                "decode it all"
            )
        count = self.frame_count(required=False)
        if count and count * frame_bytes > max_memory:
            raise VideoError(
                f"decoding all {count:,} frames of this {width}×{height} video would take "
                f"{_gigabytes(count * frame_bytes)}, more than max_memory "
                f"({_gigabytes(max_memory)}): pass frames=N to sample N frames from it "
                f"(e.g. frames=16), or a larger max_memory"
            )

    def known_duration(self) -> float:
        if self.duration is None:
            raise VideoError(
                "the video does not declare its duration (a raw stream?), so frames cannot "
                "be sampled over it: put it in a container (ffmpeg -i IN -c copy OUT.mp4) or "
                "pass frames=None"
            )
        return self.duration

    def frame_count(self, required: bool = True) -> int:
        """The declared frame count, else ``round(duration * fps)``; 0 if neither is known
        and not ``required``."""
        if self.declared_frames > 0:
            return self.declared_frames
        if self.duration is None and not required:
            return 0
        return max(1, round(self.known_duration() * self.fps))

    def seconds(self, pts: int) -> float:
        return float((pts - self.origin) * self.stream.time_base)

    def pts(self, seconds: float) -> int:
        return self.origin + math.floor(Fraction(seconds) / self.stream.time_base)


def _stream_duration(stream: Any, container: Any, time_base: Fraction) -> tuple[float | None, bool]:
    """The video stream's duration in seconds and whether it is the stream's own (rather than
    the container's, which includes a longer audio track), or (None, False)."""
    if stream.duration:
        return float(stream.duration * time_base), True
    # Matroska keeps each track's length as a tag ("00:00:02.000000000")
    tag = stream.metadata.get("DURATION") if stream.metadata else None
    if tag:
        try:
            hours, minutes, secs = tag.split(":")
            return int(hours) * 3600 + int(minutes) * 60 + float(secs), True
        except ValueError:
            pass
    if container.duration:
        return container.duration / 1_000_000, False  # in AV_TIME_BASE (microseconds)
    return None, False


def _clock(seconds: float) -> str:
    """A duration as h:mm:ss (or m:ss), for messages."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _gigabytes(n_bytes: int) -> str:
    """A size for messages: GB, else MB to two decimals."""
    if n_bytes >= 1024**3:
        return f"{n_bytes / 1024**3:.2f} GB"
    return f"{n_bytes / 1024**2:.2f}".rstrip("0").rstrip(".") + " MB"


# --- decoding --------------------------------------------------------------------------------


class Decoder:
    """Frames of one stream in presentation order, decoded on demand, seeking ahead when a
    target is far: counts what it decodes and stops at a budget (see ``decode_budget``)."""

    def __init__(self, av: Any, container: Any, clip: Clip, budget: float, why: str) -> None:
        self._av = av
        self._container = container
        self._clip = clip
        self._budget = budget
        self._over_budget = why  # the message when the budget runs out
        self._frames: Iterator[Any] = self._decode()
        self.decoded = 0
        self.can_seek = True
        self.last_time = -math.inf  # time of the last frame decoded
        self._last_key: float | None = None
        self.longest_gop = 0.0  # the longest keyframe interval seen, in seconds

    def _decode(self) -> Iterator[Any]:
        for packet in self._container.demux(self._clip.stream):
            try:
                frames = packet.decode()
            except self._av.FFmpegError as exc:
                raise VideoError(self._damaged_message()) from exc
            yield from frames

    def _damaged_message(self) -> str:
        return _truncated_message(self._clip, self.last_time, "the data after it cannot be decoded")

    def next(self) -> tuple[Any, float] | None:
        """The next frame and its time in seconds, or None at the end of the stream."""
        try:
            frame = next(self._frames, None)
        except self._av.FFmpegError as exc:  # demuxing (reading the file) failed
            raise VideoError(self._damaged_message()) from exc
        if frame is None:
            return None
        self.decoded += 1
        if self.decoded > self._budget:
            raise VideoError(self._over_budget)
        stamp = frame.pts if frame.pts is not None else frame.dts
        if stamp is not None:
            time = self._clip.seconds(stamp)
        else:  # no timestamps: one frame period after the last
            time = max(0.0, self.last_time + 1 / float(self._clip.fps))
        if frame.key_frame:
            if self._last_key is not None:
                self.longest_gop = max(self.longest_gop, time - self._last_key)
            self._last_key = time
        self.last_time = time
        return frame, time

    def seek(self, seconds: float) -> bool:
        """Jump to the keyframe at or before ``seconds``; False if the file cannot seek."""
        if not self.can_seek:
            return False
        try:
            self._container.seek(
                self._clip.pts(seconds), backward=True, any_frame=False, stream=self._clip.stream
            )
        except self._av.FFmpegError:
            self.can_seek = False  # decode on from where it is instead
            return False
        self._frames = self._decode()
        self._last_key = None  # the next keyframe is not the one after the last seen
        return True

    def jump(self, seconds: float, slack: float) -> tuple[bool, tuple[Any, float] | None]:
        """Seek to the keyframe before ``seconds``: (False, None) where the file cannot seek,
        else (True, the first frame decoded there, or None at the end)."""
        before = self.last_time
        aim = seconds
        if not self.seek(aim):
            return False, None
        first = self.next()
        back = max(_SEEK_GAP_S, self.longest_gop)
        while aim > 0 and (first is None or first[1] > seconds + slack):
            # landed past it, or at the end (MPEG-TS seeks by byte position, and lands on the
            # keyframe after): aim earlier, twice as far each time, down to the start
            back = max(2 * back, first[1] - seconds if first else 0.0)
            aim = max(0.0, seconds - back)
            if not self.seek(aim):
                raise VideoError("the video stopped seeking midway through reading it")
            first = self.next()
        if first is not None and first[1] <= before:
            # landed at or before where decoding stood: keyframes lie further apart than the
            # samples, so decoding on costs no more than seeking would; seek no more
            self.can_seek = False
        return True, first

    def worth_seeking(self, seconds: float) -> bool:
        """Whether ``seconds`` lies far enough ahead that a seek beats decoding on."""
        position = max(self.last_time, 0.0)  # before any frame: at the start
        return self.can_seek and seconds - position > max(_SEEK_GAP_S, self.longest_gop)


def decode_budget(clip: Clip, frames: int | None, max_seconds: float) -> tuple[float, str]:
    """The most frames one call may decode, and the message for a file that needs more.

    The frames of ``max_seconds`` of the video (two more, so that a clip of exactly
    ``max_seconds`` decodes whole); when sampling, at least ``_DECODE_PER_SAMPLE`` per frame
    asked for, so that a file of a few frames a minute (a time-lapse), whose keyframes lie
    minutes apart, can still be sampled.
    """
    if math.isinf(max_seconds):
        return math.inf, ""
    budget = math.ceil(max_seconds * clip.fps) + 2
    if frames is None:
        why = (
            f"the video holds more than the {budget:,} frames of max_seconds={max_seconds:g} "
            "(more than its header says): pass frames=N to sample N frames from it, or a "
            "larger max_seconds"
        )
        return budget, why
    budget = max(budget, _DECODE_PER_SAMPLE * frames)
    whole = f"max_seconds={math.ceil(clip.duration)}" if clip.duration else "a larger max_seconds"
    why = (
        f"sampling {frames} frames needs more than {budget:,} frames decoded, the most "
        f"max_seconds={max_seconds:g} allows: the file cannot seek, or has few keyframes. "
        f"Pass {whole} to decode as much of it as it takes"
    )
    return budget, why


def _rgb(frame: Any, clip: Clip) -> np.ndarray:
    """(H, W, 3) uint8 RGB of ``frame``, at the stream's size and upright."""
    # width/height: a stream whose size changes midway still stacks into one array
    picture = clip.reformatter.reformat(
        frame, width=clip.width, height=clip.height, format="rgb24"
    ).to_ndarray()
    # FFmpeg's display matrix, counterclockwise degrees (a phone's portrait video); turned as
    # the ffmpeg command line's autorotate does, as EXIF orientation is for images
    turns = round((getattr(frame, "rotation", 0) or 0) / 90) % 4
    return np.ascontiguousarray(np.rot90(picture, turns)) if turns else picture


def decode_all(decoder: Decoder, clip: Clip, max_memory: int) -> tuple[np.ndarray, np.ndarray]:
    """Every frame, in one array grown as needed (the header's count may be an estimate)."""
    # Frame threads decode several frames at once, several times quicker on large frames;
    # not for sampling, where each seek would leave a thread's worth of frames decoded for
    # nothing.
    clip.stream.thread_type = "AUTO"
    frame_bytes = clip.width * clip.height * 3
    limit = max(1, max_memory // frame_bytes)
    capacity = min(limit, clip.frame_count(required=False) or 64)
    buffer: np.ndarray | None = None
    times: list[float] = []
    while (item := decoder.next()) is not None:
        frame, time = item
        picture = _rgb(frame, clip)
        if buffer is None:
            buffer = np.empty((capacity, *picture.shape), np.uint8)
        if len(times) == len(buffer):
            if len(times) >= limit:
                raise VideoError(
                    f"the video holds more than {limit:,} frames of {clip.width}×"
                    f"{clip.height}, more than max_memory ({_gigabytes(max_memory)}) holds: "
                    "pass frames=N to sample N frames from it"
                )
            grown = np.empty((min(limit, 2 * len(buffer)), *picture.shape), np.uint8)
            grown[: len(buffer)] = buffer
            buffer = grown
        buffer[len(times)] = picture
        times.append(time)
    if buffer is None:
        raise VideoError("the video stream holds no frames that can be decoded")
    _check_reached(clip, times[-1], clip.duration - 1 / float(clip.fps) if clip.duration else None)
    count = len(times)
    frames = buffer if count == len(buffer) else buffer[:count].copy()
    return frames, np.asarray(times, np.float64)


def decode_sample(decoder: Decoder, clip: Clip, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` frames at evenly spaced times: the frame on screen at each."""
    fps = float(clip.fps)
    wanted = [index / fps for index in sample_indices(clip.frame_count(), count)]
    # a quarter frame of slack: timestamps are rounded to the stream's time base
    slack = 0.25 / fps
    chosen: dict[float, tuple[np.ndarray, float]] = {}
    shown: tuple[Any, float] | None = None  # the frame on screen at the last target
    ahead: tuple[Any, float] | None = None  # the first frame after it, already decoded
    for target in sorted(set(wanted)):
        if decoder.worth_seeking(target):
            moved, landed = decoder.jump(target, slack)
            if moved:
                shown, ahead = None, landed
        while True:
            if ahead is None:
                ahead = decoder.next()
                if ahead is None:
                    break
            if ahead[1] > target + slack:
                break
            shown, ahead = ahead, None
        if shown is None:  # the target precedes the first frame: that frame is on screen
            shown, ahead = ahead, None
        if shown is None:
            raise VideoError("the video stream holds no frames that can be decoded")
        if ahead is None:  # the stream ended: the target must not lie past its last frame
            _check_reached(clip, shown[1], target)
        chosen[target] = (_rgb(shown[0], clip), shown[1])
    frames = np.stack([chosen[target][0] for target in wanted])
    times = np.asarray([chosen[target][1] for target in wanted], np.float64)
    return frames, times


def _check_reached(clip: Clip, last_time: float, needed: float | None) -> None:
    """Refuse a stream whose frames stop before ``needed`` seconds (its header promised more:
    the file is truncated), with some slack for the rounding of declared durations."""
    if needed is None:
        return
    # two frame periods; a container's duration (not the stream's) may hold a longer audio
    # track, so it only catches what ends clearly early
    slack = 2 / float(clip.fps) + (0.0 if clip.exact_duration else max(1.0, 0.05 * needed))
    if last_time + slack < needed:
        raise VideoError(
            _truncated_message(clip, last_time, f"the frame at {needed:.2f} s was asked for")
        )


def _truncated_message(clip: Clip, last_time: float, detail: str) -> str:
    """Say where the readable part of a broken video ends (``last_time`` < 0: nowhere)."""
    stop = "before its first frame" if last_time < 0 else f"at {last_time:.2f} s"
    total = f" of the {clip.duration:.2f} s its header declares" if clip.duration else ""
    return f"the video is truncated or damaged: its frames stop {stop}{total} ({detail})"
