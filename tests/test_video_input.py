"""hookviz.load_video on real files written here with PyAV: every frame in order with its time,
N frames sampled evenly (seeking, so a 10-hour file costs a few decoded frames), and each bad
input's message.

Every frame carries its own number, drawn as 12 black or white cells (one bit each) that
survive lossy coding, so a test reads which frame of the file it got.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from PIL import Image

import hookviz
from hookviz.video import sample_indices

HEIGHT, WIDTH = 48, 64  # not square: a swapped H and W would show
CELL = 16
BITS = (HEIGHT // CELL) * (WIDTH // CELL)

# (file name, FFmpeg's muxer, encoder); each in the FFmpeg that PyAV bundles (av.codecs_available)
FORMATS = [
    ("clip.mp4", "mp4", "libx264"),
    ("clip-mpeg4.mp4", "mp4", "mpeg4"),
    ("clip.webm", "webm", "libvpx-vp9"),
    ("clip.avi", "avi", "mjpeg"),
]


def numbered_frame(number: int) -> np.ndarray:
    """(H, W, 3) uint8: bit b of ``number`` is the b-th 16-pixel cell, white when set."""
    picture = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    columns = WIDTH // CELL
    for bit in range(BITS):
        if number >> bit & 1:
            row, column = divmod(bit, columns)
            picture[row * CELL : (row + 1) * CELL, column * CELL : (column + 1) * CELL] = 255
    return picture


def frame_number(picture: np.ndarray) -> int:
    """The number ``numbered_frame`` drew, read back from a decoded frame (cell means)."""
    columns = WIDTH // CELL
    number = 0
    for bit in range(BITS):
        row, column = divmod(bit, columns)
        cell = picture[row * CELL : (row + 1) * CELL, column * CELL : (column + 1) * CELL]
        number |= int(cell.mean() > 128) << bit
    return number


def numbers(video: hookviz.Video) -> list[int]:
    return [frame_number(picture) for picture in video.frames]


def write_video(
    target: str | Path | io.BytesIO,
    muxer: str = "mp4",
    encoder: str = "libx264",
    count: int = 30,
    fps: Fraction | int = 30,
    options: dict[str, str] | None = None,
    muxer_options: dict[str, str] | None = None,
    rotation: int | None = None,
) -> None:
    """Write ``count`` numbered frames at ``fps`` with PyAV."""
    with av.open(target, "w", format=muxer, options=muxer_options or {}) as container:
        stream = container.add_stream(encoder, rate=fps, options=options or {})
        stream.width, stream.height = WIDTH, HEIGHT
        stream.pix_fmt = "yuvj420p" if encoder == "mjpeg" else "yuv420p"
        if rotation is not None:
            stream.set_display_rotation(rotation)
        for number in range(count):
            frame = av.VideoFrame.from_ndarray(numbered_frame(number), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def video_bytes(**kwargs) -> bytes:
    buffer = io.BytesIO()
    write_video(buffer, **kwargs)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    """One 30-frame, 30 fps, 1-second clip per format, by file name."""
    folder = tmp_path_factory.mktemp("videos")
    paths = {}
    for name, muxer, encoder in FORMATS:
        assert encoder in av.codecs_available, f"PyAV's FFmpeg lacks {encoder}"
        paths[name] = folder / name
        write_video(paths[name], muxer, encoder)
    return paths


@pytest.fixture(scope="module")
def ten_hours() -> bytes:
    """A 10-hour clip at one frame a minute (600 frames, quick to write), a keyframe every 10."""
    return video_bytes(count=600, fps=Fraction(1, 60), options={"preset": "ultrafast", "g": "10"})


# --- frames, times, sampling -----------------------------------------------------------------


@pytest.mark.parametrize("name", [name for name, _, _ in FORMATS])
def test_every_frame_comes_in_order_with_its_time(clips, name):
    video = hookviz.load_video(clips[name])
    assert video.frames.shape == (30, HEIGHT, WIDTH, 3) and video.frames.dtype == np.uint8
    assert numbers(video) == list(range(30))
    # WebM keeps times in milliseconds
    np.testing.assert_allclose(video.times, np.arange(30) / 30, atol=1e-3)
    assert video.indices.tolist() == list(range(30))
    assert (video.fps, video.duration, video.source_frames) == (30.0, 1.0, 30)
    assert (len(video), video.size, video.name) == (30, (HEIGHT, WIDTH), name)
    assert video.decoded_frames == 30


@pytest.mark.parametrize("name", [name for name, _, _ in FORMATS])
def test_frames_n_samples_evenly_first_to_last_as_video_classifiers_do(clips, name):
    video = hookviz.load_video(clips[name], frames=8)
    # torch.linspace(0, T - 1, N).long(): pytorchvideo's UniformTemporalSubsample
    expected = [0, 4, 8, 12, 16, 20, 24, 29]
    assert torch.linspace(0, 29, 8).long().tolist() == expected == sample_indices(30, 8)
    assert numbers(video) == expected == video.indices.tolist()
    np.testing.assert_allclose(video.times, np.array(expected) / 30, atol=1e-3)
    assert video.frames.shape == (8, HEIGHT, WIDTH, 3)
    assert (video.source_frames, video.duration) == (30, 1.0)


def test_the_sampling_rule_is_torch_linspace_without_its_rounding():
    for total in range(1, 700, 3):
        for count in (1, 2, 3, 8, 16, 32, 45, 64):
            ours = sample_indices(total, count)
            theirs = torch.linspace(0, total - 1, count).long().tolist()
            for i, (mine, torchs) in enumerate(zip(ours, theirs, strict=True)):
                # where they differ, the exact i * (T - 1) / (N - 1) is a whole number that
                # float32 put a hair below, and .long() truncated to the frame before
                exact = Fraction(i * (total - 1), max(1, count - 1))
                assert mine == torchs or (mine == torchs + 1 == exact), (total, count, i)


def test_more_frames_than_the_clip_holds_repeat_frames(clips):
    video = hookviz.load_video(clips["clip.mp4"], frames=45)
    got = numbers(video)
    assert len(got) == 45 and got == sorted(got) and set(got) == set(range(30))
    assert got == sample_indices(30, 45)


def test_one_frame_is_the_first(clips):
    video = hookviz.load_video(clips["clip.webm"], frames=1)
    assert numbers(video) == [0] and video.times.tolist() == [0.0]


def test_bytes_a_path_and_file_objects_give_the_same_frames(clips):
    path = clips["clip.mp4"]
    data = path.read_bytes()
    from_path = hookviz.load_video(path, frames=5)
    from_str = hookviz.load_video(str(path), frames=5)
    from_bytes = hookviz.load_video(data, frames=5)
    from_bytearray = hookviz.load_video(bytearray(data), frames=5)
    with open(path, "rb") as handle:
        handle.read(100)  # a file object is read from its start, wherever it stands
        from_file = hookviz.load_video(handle, frames=5)
    for other in (from_str, from_bytes, from_bytearray, from_file):
        np.testing.assert_array_equal(other.frames, from_path.frames)
        np.testing.assert_array_equal(other.times, from_path.times)
    assert (from_path.name, from_bytes.name, from_file.name) == ("clip.mp4", None, "clip.mp4")


def test_a_stream_that_cannot_seek_is_read_into_memory(clips):
    class Pipe(io.RawIOBase):  # readable, not seekable, and returns short reads
        def __init__(self, data: bytes) -> None:
            self._data = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            chunk = self._data.read(min(len(buffer), 1000))
            buffer[: len(chunk)] = chunk
            return len(chunk)

    video = hookviz.load_video(Pipe(clips["clip.mp4"].read_bytes()), frames=3)
    assert numbers(video) == [0, 14, 29]


def test_a_ten_hour_file_sampled_decodes_a_few_frames_per_sample(ten_hours):
    video = hookviz.load_video(ten_hours, frames=8)
    expected = sample_indices(600, 8)
    assert expected == [0, 85, 171, 256, 342, 427, 513, 599]
    assert numbers(video) == expected
    np.testing.assert_allclose(video.times, np.array(expected) * 60.0)
    assert video.duration == 36000.0 and video.source_frames == 600
    # each sample: from the keyframe before it (at most 10 frames back) plus one frame ahead
    # to know the sample is the frame on screen; the whole file is 600
    assert video.decoded_frames <= 8 * 11


def test_a_ten_hour_file_whole_is_refused_by_its_duration(ten_hours):
    with pytest.raises(hookviz.VideoError) as caught:
        hookviz.load_video(ten_hours)
    message = str(caught.value)
    assert "lasts 10:00:00, more than max_seconds=600 (10:00)" in message
    assert "frames=N" in message and "max_seconds=36000" in message


def test_a_file_with_nothing_to_seek_to_is_refused_once_its_budget_is_decoded():
    # 1,000 s at 1 fps with one keyframe: sampling 3 frames decodes it from its start, over
    # the budget of max(600 s of its frames, 250 per frame asked for)
    data = video_bytes(
        count=1000, fps=1, options={"preset": "ultrafast", "x264-params": "keyint=2000:scenecut=0"}
    )
    with pytest.raises(hookviz.VideoError) as caught:
        hookviz.load_video(data, frames=3)
    assert str(caught.value) == (
        "sampling 3 frames needs more than 750 frames decoded, the most max_seconds=600 "
        "allows: the file cannot seek, or has few keyframes. Pass max_seconds=1000 to decode "
        "as much of it as it takes"
    )
    video = hookviz.load_video(data, frames=3, max_seconds=1000)
    assert numbers(video) == sample_indices(1000, 3) == [0, 499, 999]
    # once (its first two frames twice: the one seek tried went back to the start)
    assert 1000 <= video.decoded_frames <= 1002


def test_frames_are_rgb_not_bgr():
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        picture = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
        picture[:, :16, 0] = picture[:, 24:40, 1] = picture[:, 48:, 2] = 255  # red, green, blue
        container.mux(stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
        container.mux(stream.encode())
    (frame,) = hookviz.load_video(buffer.getvalue()).frames
    for columns, channel in ((slice(0, 12), 0), (slice(28, 36), 1), (slice(52, 64), 2)):
        means = frame[:, columns].reshape(-1, 3).mean(axis=0)
        assert means.argmax() == channel and means[channel] > 180, (channel, means)


def test_the_display_rotation_is_applied(tmp_path):
    path = tmp_path / "portrait.mp4"
    write_video(path, count=3, rotation=90)  # a quarter turn counterclockwise, as phones write
    video = hookviz.load_video(path)
    assert video.size == (WIDTH, HEIGHT)
    assert [frame_number(np.rot90(picture, -1)) for picture in video.frames] == [0, 1, 2]


def test_a_longer_audio_track_does_not_make_the_video_look_truncated(tmp_path):
    path = tmp_path / "with-sound.webm"
    with av.open(path, "w", format="webm") as container:
        video_stream = container.add_stream("libvpx-vp9", rate=30)
        video_stream.width, video_stream.height = WIDTH, HEIGHT
        audio_stream = container.add_stream("libopus", rate=48000)
        for number in range(30):
            frame = av.VideoFrame.from_ndarray(numbered_frame(number), format="rgb24")
            container.mux(video_stream.encode(frame))
        container.mux(video_stream.encode())
        for index in range(100):  # two seconds of silence, twice the video
            samples = av.AudioFrame.from_ndarray(
                np.zeros((1, 960), np.float32), format="fltp", layout="mono"
            )
            samples.sample_rate, samples.pts = 48000, index * 960
            container.mux(audio_stream.encode(samples))
        container.mux(audio_stream.encode())
    assert numbers(hookviz.load_video(path)) == list(range(30))
    assert numbers(hookviz.load_video(path, frames=4)) == [0, 9, 19, 29]


def test_the_video_object(clips):
    video = hookviz.load_video(clips["clip.mp4"], frames=4)
    image = video.frame(-1)
    assert image.mode == "RGB" and image.size == (WIDTH, HEIGHT)
    assert frame_number(np.asarray(image)) == 29
    with pytest.raises(IndexError, match="frame 4 is out of range for a video of 4 frames"):
        video.frame(4)
    assert repr(video) == "Video('clip.mp4', 4 frames of 64×48, 30 fps, 1.00 s)"
    assert video.codec == "h264"
    strip = Image.open(io.BytesIO(video._repr_png_()))
    assert strip.format == "PNG" and strip.height == 96 and strip.width == 4 * 128 + 3 * 2


def test_import_hookviz_does_not_import_pyav():
    code = "import sys, hookviz, hookviz.video, hookviz.video_decoding; print('av' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


# --- bad inputs ------------------------------------------------------------------------------


def png_bytes() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buffer, "PNG")
    return buffer.getvalue()


def audio_bytes(muxer: str, encoder: str) -> bytes:
    """Half a second of silence, and no video stream."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=muxer) as container:
        stream = container.add_stream(encoder, rate=44100)
        size = 1152 if encoder == "libmp3lame" else 1024
        for index in range(20):
            samples = av.AudioFrame.from_ndarray(
                np.zeros((1, size), np.float32), format="fltp", layout="mono"
            )
            samples.sample_rate, samples.pts = 44100, index * size
            container.mux(stream.encode(samples))
        container.mux(stream.encode())
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: np.random.default_rng(0).bytes(5000), "not a readable video (MP4, MOV"),
        (lambda: b"hello, world\n" * 50, "not a readable video"),
        (png_bytes, "a still image (PNG), not a video; read it with hookviz.load_image"),
        (lambda: audio_bytes("mp3", "libmp3lame"), "no video stream (it holds audio only)"),
        (lambda: audio_bytes("mp4", "aac"), "no video stream (it holds audio only)"),
        (lambda: b"", "the file is empty"),
        (lambda: b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00" + bytes(500), "a still image (HEIF"),
    ],
    ids=["random bytes", "text", "png", "mp3", "m4a", "empty", "heic"],
)
def test_what_is_not_a_video_is_refused_clearly(make, message):
    with pytest.raises(hookviz.VideoError) as caught:
        hookviz.load_video(make())
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, hookviz.HookvizError)


def test_missing_empty_and_directory_paths(tmp_path):
    with pytest.raises(hookviz.VideoError, match=r"file not found: .*nothing\.mp4"):
        hookviz.load_video(tmp_path / "nothing.mp4")
    (tmp_path / "empty.mp4").write_bytes(b"")
    with pytest.raises(hookviz.VideoError, match="the file is empty"):
        hookviz.load_video(tmp_path / "empty.mp4", frames=8)
    with pytest.raises(hookviz.VideoError, match="not a file but a directory"):
        hookviz.load_video(tmp_path)


def test_an_mp4_cut_in_half_before_its_index_is_named_damaged(clips):
    data = clips["clip.mp4"].read_bytes()  # FFmpeg writes the index (moov) last
    with pytest.raises(hookviz.VideoError) as caught:
        hookviz.load_video(data[: len(data) // 2], frames=8)
    assert str(caught.value) == (
        "the MP4/MOV file is truncated or damaged (its index, the moov box, is missing or "
        "unreadable)"
    )


def test_an_mp4_cut_after_its_index_is_refused_where_it_breaks(tmp_path):
    path = tmp_path / "faststart.mp4"
    write_video(path, count=60, muxer_options={"movflags": "+faststart"})  # index first
    data = path.read_bytes()
    for frames in (None, 4):
        with pytest.raises(hookviz.VideoError) as caught:
            hookviz.load_video(data[: len(data) * 3 // 4], frames=frames)
        assert re.match(
            r"the video is truncated or damaged: its frames stop at 0\.\d\d s of the 2\.00 s "
            r"its header declares \(",
            str(caught.value),
        )


def test_a_webm_cut_in_half_says_where_its_frames_stop(clips):
    data = clips["clip.webm"].read_bytes()
    for frames in (None, 8):
        with pytest.raises(hookviz.VideoError) as caught:
            hookviz.load_video(data[: len(data) // 2], frames=frames)
        assert re.fullmatch(
            r"the video is truncated or damaged: its frames stop at 0\.\d\d s of the 1\.00 s "
            r"its header declares \(the frame at 0\.\d\d s was asked for\)",
            str(caught.value),
        )


def test_frames_below_one_and_wrong_types(clips):
    path = clips["clip.mp4"]
    for frames in (0, -3):
        with pytest.raises(hookviz.VideoError, match=f"frames must be at least 1, got {frames}"):
            hookviz.load_video(path, frames=frames)
    with pytest.raises(TypeError, match="frames must be None or an int, got float"):
        hookviz.load_video(path, frames=8.0)
    with pytest.raises(TypeError, match="expected a path, bytes or a binary file object"):
        hookviz.load_video(42)
    with pytest.raises(ValueError, match="max_seconds must be positive"):
        hookviz.load_video(path, max_seconds=0)


def test_frames_too_large_or_too_many_for_memory(clips):
    path = clips["clip.mp4"]
    with pytest.raises(hookviz.VideoError) as caught:
        hookviz.load_video(path, max_pixels=1000)
    assert str(caught.value) == (
        "the video's frames are 64×48 pixels, more than the limit of 1,000 pixels (max_pixels)"
    )
    frame_bytes = WIDTH * HEIGHT * 3
    with pytest.raises(hookviz.VideoError) as caught:
        hookviz.load_video(path, max_memory=10 * frame_bytes)
    message = str(caught.value)
    assert message.startswith("decoding all 30 frames of this 64×48 video would take 0.26 MB")
    assert "pass frames=N to sample N frames from it (e.g. frames=16)" in message
    assert len(hookviz.load_video(path, frames=10, max_memory=10 * frame_bytes)) == 10
    with pytest.raises(hookviz.VideoError, match=r"11 frames of 64×48 take .* ask for fewer"):
        hookviz.load_video(path, frames=11, max_memory=10 * frame_bytes)
