"""A class on one server: N students open the app at once, each with their own photo and view.

    python bench/classroom.py [--sessions 30 60] [--url URL [--server-pid PID]] [--tabs 3]
                              [--big-photos K] [--ttl 5] [--no-solo] [--out FILE.json]
                              [--server-env MALLOC_ARENA_MAX=2 ...] [--models ...]

Each student is one Streamlit session driven over the websocket (``bench/streamlit_client.py``,
no browser): it opens its own link (model, weights, layer, ``target=`` a class index, method:
``Student.query``), waits for the page, uploads its own photo into "Upload an image" and waits
for the page again. Every photo is the sample photo cropped and resized to a size W×H no
other student has (the page prints "W×H px" for the image it shows), with a little noise, as a
JPEG. Per student: the time from connecting to its complete page (the last ``script_finished``
of the run chain after the upload, with no error on the page), failures and their messages, and
whether the page shows its own photo (its W×H in the caption, the overlay's size, the address's
``image=`` digest) and its own class (the "Explain the class" box and the overlay's title), and
nothing of another student's (cross-talk).

Phases, per class size N (the server launched here runs with ``--server.disconnectedSessionTTL
--ttl``, 5 s by default, so that a closed tab's session goes within seconds instead of 120 s):

1. solo: a fresh server, warmed by one session on the default page (torch imported, the app's
   modules loaded); then each student alone, one after the other, with photo variant 1.
2. class: a fresh server again, warmed the same way (so the students alone and the class share
   no cache entry, and the class's memory is not measured on top of the solo phase's), then all
   N students at once (one thread each, released together), with photo variant 2 (other noise:
   other content digests); ``--tabs T`` real Chromium tabs (T more students) start at the same
   moment and check what a student sees in the browser, with a screenshot each.
   With ``--url`` (a server started elsewhere) both phases use that server and the caches are
   cleared between them (the ``clear_cache`` BackMsg); memory is then measured only with
   ``--server-pid``.

Memory: the server's RSS from /proc/PID/status every 50 ms (peak; VmHWM at the end), RSS before
the class, when every student's page is complete (sessions still connected), and after they
disconnect and the TTL expires. (Streamlit drops an expired session only when its session store
is next written to, so a probe session connects and disconnects after the TTL.) Streamlit's own
``/_stcore/metrics`` says how much of it is uploads, media files, session state and
``st.cache_data``. ``--big-photos K``: for each N, one more run in which K of the students upload
a 6000×4500-ish phone-size JPEG (about 4 MB: the sample upscaled, with noise so it does not
compress to nothing); memory per big photo = the difference to the plain run of the same N.

Prints a Markdown table and writes the JSON (``--out``, screenshots beside it).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import io
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# run as a script: the repository's packages, and not bench/ itself (its bench.py would hide the
# bench/ folder that ``bench.streamlit_client`` is in)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

from bench.streamlit_client import SUCCESS, Session  # noqa: E402
from scripts.appserver import CHROMIUM_FLAGS, chromium_path, free_port, wait_healthy  # noqa: E402

# name[:untrained]; four: the app keeps four models loaded (``hookviz.app.caches.models.model``)
MODELS = ("efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2", "resnet18:untrained")
METHODS = ("gradcam", "gradcam++", "layercam", "xgradcam", "hirescam")
UPLOADER = "Upload an image"
CLASS_BOX = "Explain the class"
OVERLAY = "picture_overlay"  # the overlay's component key (hookviz/app/browser/pictures.py)
SAMPLE_SIZE = (512, 600)
MB = 2**20


@dataclass(frozen=True)
class Student:
    """One student's view, photo size and what the page must then show."""

    index: int
    model: str
    pretrained: bool
    layer: str
    target: int
    class_name: str
    method: str
    width: int
    height: int
    big: bool = False

    def query(self) -> dict[str, str]:
        """The link the student opens (the app's view fields, hookviz/app/view/fields.py)."""
        query = {"model": self.model}
        if not self.pretrained:
            query["weights"] = "untrained"
        query.update(layer=self.layer, target=str(self.target), method=self.method)
        return query

    @property
    def size_text(self) -> str:
        return f"{self.width}×{self.height} px"

    @property
    def file_name(self) -> str:
        return f"student{self.index:02d}.jpg"


# ---------------------------------------------------------------- the class


def plan(count: int, extra: int, big: int, models: tuple[str, ...]) -> list[Student]:
    """``count`` students and ``extra`` more (the tabs), each with a view of its own (model,
    layer, class, method cycle at different periods) and a photo size no other has; ``big`` of
    the first ``count``, evenly spread, with a phone-size photo."""
    import hookviz  # (imports torch: only here, in the client, never in the timed part)

    loaded = {}
    for entry in models:
        name, _, weights = entry.partition(":")
        pretrained = weights != "untrained"
        model = hookviz.load_model(name, pretrained, device="cpu")
        loaded[entry] = (name, pretrained, hookviz.stage_layers(model)[1:], model)
    bigs = {round(k * count / big) for k in range(big)} if big else set()
    students = []
    for i in range(count + extra):
        name, pretrained, layers, model = loaded[models[i % len(models)]]
        target = (97 * i + 1) % model.num_classes
        width, height = (6000 - 8 * i, 4500 - 6 * i) if i in bigs else (320 + 6 * i, 240 + 4 * i)
        assert (width, height) != SAMPLE_SIZE
        students.append(
            Student(
                index=i,
                model=name,
                pretrained=pretrained,
                layer=layers[(i + i // len(models)) % len(layers)],
                target=target,
                class_name=model.class_name(target),
                method=METHODS[i % len(METHODS)],
                width=width,
                height=height,
                big=i in bigs,
            )
        )
    return students


def photo(student: Student, variant: int) -> bytes:
    """The student's photo: a crop of the sample photo resized to its size, with noise of its
    own (``variant``: another photo of the same size, e.g. for the class after the solo runs),
    as a JPEG."""
    import hookviz

    rng = np.random.default_rng([variant, student.index])
    sample = hookviz.sample_image()
    left, top = int(rng.integers(0, 80)), int(rng.integers(0, 100))
    right, bottom = (
        sample.width - int(rng.integers(0, 80)),
        sample.height - int(rng.integers(0, 100)),
    )
    size = (student.width, student.height)
    image = sample.crop((left, top, right, bottom)).resize(size, Image.Resampling.BICUBIC)
    amplitude = 10 if student.big else 4
    tile = rng.integers(-amplitude, amplitude + 1, size=(256, 256, 3), dtype=np.int16)
    reps = (-(-student.height // 256), -(-student.width // 256), 1)
    noisy = (
        np.asarray(image, dtype=np.int16) + np.tile(tile, reps)[: student.height, : student.width]
    )
    out = io.BytesIO()
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(
        out, "JPEG", quality=86 if student.big else 90
    )
    return out.getvalue()


# ---------------------------------------------------------------- the server and its memory


@contextlib.contextmanager
def app_server(ttl: int, log: Path, env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """``streamlit run app.py`` on a free loopback port with the disconnected-session TTL
    ``ttl``, its output in ``log``; yields its URL and PID. (``scripts.appserver.running_app``
    gives no PID and pipes the output without reading it, which a long run could fill.)"""
    port = free_port()
    command = [
        *(sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py")),
        *("--server.headless", "true", "--server.address", "127.0.0.1"),
        *("--server.port", str(port), "--browser.gatherUsageStats", "false"),
        *("--server.disconnectedSessionTTL", str(ttl)),
    ]
    url = f"http://127.0.0.1:{port}"
    with log.open("ab") as out:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    try:
        if not wait_healthy(url, process, 180):
            raise RuntimeError(f"streamlit did not become healthy: see {log}")
        yield url, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


def status_kb(pid: int | None, field: str) -> int | None:
    """A ``/proc/PID/status`` field in kB (VmRSS, VmHWM), None when unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_s(pid: int | None) -> float | None:
    """The CPU seconds (user + system) process ``pid`` has used, None when unknown."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _client_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


class RssSampler(threading.Thread):
    """The server's RSS every ``every`` seconds, and its peak, until ``stop``."""

    def __init__(self, pid: int | None, every: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.peak_kb = 0
        self.samples: list[tuple[float, int]] = []
        self._halt = threading.Event()
        self._t0 = time.perf_counter()

    def run(self) -> None:
        while not self._halt.is_set():
            rss = status_kb(self.pid, "VmRSS")
            if rss is not None:
                self.peak_kb = max(self.peak_kb, rss)
                self.samples.append((round(time.perf_counter() - self._t0, 3), rss))
            self._halt.wait(self.every)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def metrics(url: str) -> dict[str, Any]:
    """Streamlit's ``/_stcore/metrics``: active sessions and ``cache_memory_bytes`` by kind
    (uploads, media files, session state, st.cache_data sizes; st.cache_resource entries are
    counted, not measured)."""
    try:
        request = urllib.request.Request(f"{url}/_stcore/metrics")
        if _authorization() is not None:
            request.add_header("Authorization", _authorization())
        with urllib.request.urlopen(request, timeout=30) as reply:
            text = reply.read().decode()
    except OSError as exc:
        return {"error": str(exc)}
    memory: dict[str, float] = {}
    out: dict[str, Any] = {"cache_memory_bytes": memory}
    for line in text.splitlines():
        if line.startswith("cache_memory_bytes{"):
            labels, value = line.rsplit(" ", 1)
            parts = dict(
                part.split("=", 1) for part in labels[labels.index("{") + 1 : -1].split(",")
            )
            kind, cache = parts.get("cache_type", "").strip('"'), parts.get("cache", "").strip('"')
            key = f"{kind}:{cache}" if cache else kind
            memory[key] = memory.get(key, 0.0) + float(value)
        elif line.startswith("active_sessions "):
            out["active_sessions"] = float(line.split()[1])
    out["summary_mb"] = {
        "uploads": memory.get("UploadedFileManager", 0.0) / MB,
        "media_files": memory.get("st_memory_media_file_storage", 0.0) / MB,
        "session_state": sum(v for k, v in memory.items() if k.startswith("st_session_state")) / MB,
        "cache_data": sum(v for k, v in memory.items() if k.startswith("st_cache_data")) / MB,
    }
    return out


# behind deploy/serve.py --password-file: what every session and tab signs in with (--password-file)
PASSWORD: str | None = None


def _authorization() -> str | None:
    """The Authorization header's value when the class has a password."""
    if PASSWORD is None:
        return None
    return "Basic " + base64.b64encode(f"class:{PASSWORD}".encode()).decode("ascii")


def _session(url: str, timeout: float = 30.0) -> Session:
    """A session of the page at ``url``, signed in when the class has a password."""
    return Session(url, timeout=timeout, authorization=_authorization())


def warm_up(url: str, timeout: float) -> float:
    """One session on the default page (torch imported, the app loaded); its seconds."""
    started = time.perf_counter()
    with _session(url) as session:
        session.open()
        session.wait_finished(timeout)
    return time.perf_counter() - started


def reap_expired(url: str, ttl: int, timeout: float) -> None:
    """Wait out the TTL, then connect and disconnect a session that runs the page: Streamlit
    drops expired sessions only when its session store is written to (a disconnect), and the
    run gives the garbage collector its turn."""
    time.sleep(ttl + 2)
    with _session(url) as probe:
        probe.open({"layer": "blocks.2"})
        probe.wait_finished(timeout)
    time.sleep(ttl + 2)
    with _session(url) as probe:  # (and this one's disconnect drops the first probe)
        pass
    time.sleep(2)


# ---------------------------------------------------------------- one student


def run_student(
    url: str,
    student: Student,
    data: bytes,
    everyone: list[Student],
    start: threading.Event | None,
    timeout: float,
    digests: dict[int, str] | None = None,
) -> tuple[dict[str, Any], Session | None]:
    """The student's session: open its link, upload its photo, check what the page shows
    (``digests``: every student's photo's SHA-256 in this phase). Returns the record and the
    session, still connected (the caller closes it)."""
    record: dict[str, Any] = {
        **asdict(student),
        "photo_mb": round(len(data) / MB, 2),
        "ok": False,
        "error": None,
    }
    if start is not None:
        start.wait()
    started = time.perf_counter()
    record["start"] = started
    session = None
    try:
        session = _session(url, timeout=timeout)
        session.open(student.query())
        session.wait_finished(timeout)
        record["t_open"] = round(time.perf_counter() - started, 3)
        record["errors_before_upload"] = session.errors()
        uploaded = time.perf_counter()
        session.upload(student.file_name, data, "image/jpeg", label=UPLOADER, timeout=timeout)
        status = session.wait_finished(timeout)
        record["end"] = time.perf_counter()
        record["t_upload"] = round(record["end"] - uploaded, 3)
        record["t_total"] = round(record["end"] - started, 3)
        record.update(check(session, student, data, everyone, digests or {}))
        record["status"] = status
        record["ok"] = status == SUCCESS and not record["errors"]
        if not record["ok"]:
            record["error"] = "; ".join(record["errors"]) or f"script_finished status {status}"
    except Exception as exc:  # (a failure of this student, recorded: the class goes on)
        record["error"] = f"{type(exc).__name__}: {exc}"
        if session is not None:
            record["errors"] = session.errors()
    return record, session


def check(
    session: Session, student: Student, data: bytes, everyone: list[Student], digests: dict
) -> dict:
    """What the complete page shows: its own photo and class, and anything of another
    student's (cross-talk): another's W×H in the texts, an overlay of another shape, another's
    class in the class box, another's photo named in the address."""
    text = session.text("main")
    others = [o for o in everyone if o.index != student.index]
    seen_sizes = [o.size_text for o in others if o.size_text in text]
    overlay = _overlay(session)
    class_box = _class_named(session.widget_value(CLASS_BOX))
    title = str(overlay.get("title", ""))
    overlay_size = (overlay.get("width"), overlay.get("height"))
    own_overlay = _shows(overlay_size, student.width, student.height)
    digest = session.query_params().get("image")
    other_digests = {d for i, d in digests.items() if i != student.index}
    other_classes = {o.class_name for o in others} - {student.class_name}
    return {
        "errors": session.errors(),
        "own_photo": student.size_text in text and own_overlay,
        "own_class": class_box == student.class_name and f"“{student.class_name}”" in title,
        "class_box": class_box,
        "overlay_title": title,
        "overlay_size": list(overlay_size),
        "query": session.query,
        "image_digest_matches": None
        if digest is None
        else digest == hashlib.sha256(data).hexdigest(),
        "cross_talk": bool(seen_sizes)
        or (overlay_size != (None, None) and not own_overlay)
        or class_box in other_classes
        or digest in other_digests,
        "other_sizes_seen": seen_sizes,
        "images": session.images(),
        "messages": session.messages,
        "received_mb": round(session.received_bytes / MB, 2),
    }


def _class_named(label: str | None) -> str | None:
    """The class a class box's label names: "bow", or "#2 bow (3.0%)" for one of the image's
    top 5 (hookviz/app/sidebar/classes.py)."""
    if label is None:
        return None
    found = re.fullmatch(r"(?:#\d+ )?(.*?)(?: \(\d+(?:\.\d+)?%\))?", label)
    return found[1] if found else label


def _shows(size: tuple, width: int, height: int) -> bool:
    """Whether a picture of ``size`` is a photo of width × height: that size, or shrunk to fit
    the display with its shape kept (to the pixel)."""
    w, h = size
    if w is None or h is None:
        return False
    shrunk = w <= width and h <= height and abs(w * height - h * width) <= max(width, height)
    return (w, h) == (width, height) or shrunk


def _overlay(session: Session) -> dict:
    """The overlay picture's data (its title, size): ``hookviz.app.browser.wire``'s payload."""
    component = session.components().get(OVERLAY)
    if component is None or not component.bytes:
        return {}
    try:
        from hookviz.app.browser import wire

        data = wire.unpack(component.bytes)
    except Exception:  # (the wire format changed: the other checks still count)
        return {}
    return {key: data.get(key) for key in ("title", "width", "height")}


# ---------------------------------------------------------------- browser tabs


class Tabs(threading.Thread):
    """``students`` as real Chromium tabs (one context each): opened at ``start``, each opens
    its link, uploads its photo and waits until the page shows its W×H and its class, with no
    stale element left; then a screenshot into ``folder``."""

    def __init__(self, url, students, photos, everyone, start, folder, timeout) -> None:
        super().__init__(daemon=True)
        self.url, self.students, self.photos, self.everyone = url, students, photos, everyone
        self.start_event, self.folder, self.timeout = start, folder, timeout
        self.ready = threading.Event()
        self.results: list[dict[str, Any]] = []

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:
            self.results = [{"error": f"{type(exc).__name__}: {exc}", "ok": False}]
        finally:
            self.ready.set()

    def _run(self) -> None:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium_path(), args=CHROMIUM_FLAGS
            )
            pages = [
                browser.new_context(
                    viewport={"width": 1366, "height": 900},
                    http_credentials=(
                        None if PASSWORD is None else {"username": "class", "password": PASSWORD}
                    ),
                ).new_page()
                for _ in self.students
            ]
            self.ready.set()
            self.start_event.wait()
            started = time.perf_counter()
            records = []
            for page, student in zip(pages, self.students, strict=True):
                query = urllib.parse.urlencode(student.query())
                page.goto(f"{self.url}/?{query}", wait_until="commit")
                records.append({**asdict(student), "ok": False, "error": None, "tab": True})
            for page, student in zip(pages, self.students, strict=True):
                page.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(
                    files=[
                        {
                            "name": student.file_name,
                            "mimeType": "image/jpeg",
                            "buffer": self.photos[student.index],
                        }
                    ],
                    timeout=self.timeout * 1000,
                )
            pending = dict(enumerate(zip(pages, self.students, strict=True)))
            deadline = started + self.timeout
            while pending and time.perf_counter() < deadline:
                for index, (page, student) in list(pending.items()):
                    if page.evaluate(_DONE_JS, [student.size_text, f"“{student.class_name}”"]):
                        records[index]["t_total"] = round(time.perf_counter() - started, 3)
                        del pending[index]
                time.sleep(0.2)
            for index, (page, student) in enumerate(zip(pages, self.students, strict=True)):
                record = records[index]
                text = page.locator("[data-testid='stMain']").inner_text()
                others = [o.size_text for o in self.everyone if o.index != student.index]
                record["own_photo"] = student.size_text in text
                record["own_class"] = f"“{student.class_name}”" in text
                record["other_sizes_seen"] = [size for size in others if size in text]
                record["cross_talk"] = bool(record["other_sizes_seen"])
                shot = self.folder / f"tab_{student.index:02d}.png"
                page.screenshot(path=str(shot), full_page=True)
                record["screenshot"] = str(shot)
                if index in pending:
                    record["error"] = f"not complete within {self.timeout} s"
                record["ok"] = record["error"] is None and record["own_photo"]
            self.results = records
            browser.close()


# the page is complete: its own W×H and class in the main area, no stale element left
_DONE_JS = """([size, name]) => {
  const main = document.querySelector("[data-testid='stMain']");
  if (!main || document.querySelector('[data-stale="true"]')) return false;
  const text = main.innerText;
  return text.includes(size) && text.includes(name);
}"""


# ---------------------------------------------------------------- the phases


def solo_phase(url, pid, students, photos, everyone, timeout) -> list[dict[str, Any]]:
    """Each student alone, one after the other; the server's RSS before and once its page
    is complete."""
    records, digests = [], _digests(photos)
    for student in students:
        before, cpu_before = status_kb(pid, "VmRSS"), cpu_s(pid)
        record, session = run_student(
            url, student, photos[student.index], everyone, None, timeout, digests
        )
        cpu_after = cpu_s(pid)
        record["server_cpu_s"] = (
            None if cpu_before is None or cpu_after is None else round(cpu_after - cpu_before, 2)
        )
        record["rss_before_mb"] = None if before is None else round(before / 1024, 1)
        after = status_kb(pid, "VmRSS")
        record["rss_done_mb"] = None if after is None else round(after / 1024, 1)
        if session is not None:
            session.close()
        records.append(record)
        print(
            f"  solo {student.index:2d} {student.model:<20} {student.method:<10} "
            f"{record.get('t_total', float('nan')):6.2f} s {'ok' if record['ok'] else 'FAIL'}"
            + (f" {record['error']}" if record["error"] else ""),
            flush=True,
        )
    return records


def class_phase(
    url, pid, students, photos, everyone, tab_students, folder, ttl, timeout
) -> dict[str, Any]:
    """All students at once (and the tabs), then memory until their sessions expire."""
    sampler = RssSampler(pid)
    sampler.start()
    time.sleep(0.5)
    rss_before = status_kb(pid, "VmRSS")
    metrics_before = metrics(url)
    start = threading.Event()
    tabs = None
    if tab_students:
        tabs = Tabs(url, tab_students, photos, everyone, start, folder, timeout)
        tabs.start()
        tabs.ready.wait(120)
    load_before = os.getloadavg()
    with ThreadPoolExecutor(max_workers=len(students)) as pool:
        digests = _digests(photos)
        futures = [
            pool.submit(run_student, url, s, photos[s.index], everyone, start, timeout, digests)
            for s in students
        ]
        time.sleep(0.5)  # (every thread waiting at the start)
        began = time.perf_counter()
        cpu_began, client_began = cpu_s(pid), _client_cpu_s()
        start.set()
        outcomes = [future.result() for future in futures]
    ended = max((r.get("end", time.perf_counter()) for r, _ in outcomes), default=began)
    cpu_done, client_done = cpu_s(pid), _client_cpu_s()
    rss_done = status_kb(pid, "VmRSS")
    load_during = os.getloadavg()
    metrics_done = metrics(url)
    if tabs is not None:
        tabs.join(timeout + 120)
    records = []
    for record, session in outcomes:
        if session is not None:
            session.close()
        record["start"] = round(record["start"] - began, 3) if "start" in record else None
        record["end"] = round(record["end"] - began, 3) if "end" in record else None
        records.append(record)
    reap_expired(url, ttl, timeout)
    rss_after_ttl = status_kb(pid, "VmRSS")
    metrics_after = metrics(url)
    clear_caches(url, timeout)  # what is left is neither a session's nor a cache's
    time.sleep(2)
    rss_after_clear = status_kb(pid, "VmRSS")
    sampler.stop()
    return {
        "students": records,
        "tabs": tabs.results if tabs is not None else [],
        "wall_s": round(ended - began, 3),
        "server_cpu_s": None
        if cpu_began is None or cpu_done is None
        else round(cpu_done - cpu_began, 2),
        "client_cpu_s": round(client_done - client_began, 2),
        "load_before": load_before,
        "load_at_end": load_during,
        "rss_before_mb": _mb(rss_before),
        "rss_all_done_mb": _mb(rss_done),
        "rss_after_ttl_mb": _mb(rss_after_ttl),
        "rss_after_clearing_caches_mb": _mb(rss_after_clear),
        "rss_peak_mb": _mb(sampler.peak_kb or None),
        "vm_hwm_mb": _mb(status_kb(pid, "VmHWM")),
        "rss_samples": sampler.samples[:: max(1, len(sampler.samples) // 400)],
        "metrics_before": metrics_before,
        "metrics_all_done": metrics_done,
        "metrics_after_ttl": metrics_after,
    }


def _digests(photos: dict[int, bytes]) -> dict[int, str]:
    return {index: hashlib.sha256(data).hexdigest() for index, data in photos.items()}


def _mb(kb: int | None) -> float | None:
    return None if kb is None else round(kb / 1024, 1)


def clear_caches(url: str, timeout: float) -> None:
    """Clear the server's st.cache_data and st.cache_resource (the browser's "Clear caches")."""
    with _session(url) as session:
        session.open()
        session.wait_finished(timeout)
        session.clear_caches()
        time.sleep(1.0)


def one_run(args, count: int, big: int, folder: Path) -> dict[str, Any]:
    """The solo phase and the class phase for ``count`` students (``big`` with big photos)."""
    everyone = plan(count, args.tabs, big, tuple(args.models))
    students, tab_students = everyone[:count], everyone[count:]
    print(f"== {count} sessions ({big} big photos) + {len(tab_students)} tabs", flush=True)
    solo_photos = {s.index: photo(s, 1) for s in students}
    class_photos = {s.index: photo(s, 2) for s in everyone}
    run: dict[str, Any] = {"sessions": count, "big_photos": big, "tabs": len(tab_students)}
    log = folder / f"server-{count}-{big}.log"
    with server_for(args, log) as (url, pid):
        if not args.no_solo:
            run["solo_warm_up_s"] = round(warm_up(url, args.timeout), 2)
            run["solo_load_before"] = os.getloadavg()
            run["solo"] = solo_phase(url, pid, students, solo_photos, everyone, args.timeout)
    with server_for(args, log) as (url, pid):
        if args.url:
            clear_caches(url, args.timeout)
        run["class_warm_up_s"] = round(warm_up(url, args.timeout), 2)
        time.sleep(args.ttl + 2)  # (the warm-up's session gone)
        phase = (url, pid, students, class_photos, everyone, tab_students, folder)
        run["class"] = class_phase(*phase, args.ttl, args.timeout)
    if log.exists():
        run["server_log_tracebacks"] = log.read_text(errors="replace").count("Traceback")
    run["summary"] = summarize(run)
    return run


@contextlib.contextmanager
def server_for(args, log: Path) -> Iterator[tuple[str, int | None]]:
    """The server of a phase: ``--url`` (and ``--server-pid``), else a fresh one here."""
    if args.url:
        yield args.url.rstrip("/"), args.server_pid
        return
    env = dict(item.split("=", 1) for item in args.server_env)
    with app_server(args.ttl, log, env) as (url, pid):
        yield url, pid


# ---------------------------------------------------------------- figures


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """The figures of the table for one run."""
    records = run["class"]["students"]
    count = run["sessions"]
    times = sorted(r["t_total"] for r in records if r.get("ok"))
    klass = run["class"]
    before, done, after = (
        klass["rss_before_mb"],
        klass["rss_all_done_mb"],
        klass["rss_after_ttl_mb"],
    )
    solo = run.get("solo") or []
    solo_sum = sum(r.get("t_total", 0.0) for r in solo) if solo else None
    solo_failed = sum(not r["ok"] for r in solo)
    solo_cpu = [r.get("server_cpu_s") for r in solo]
    solo_cpu_sum = round(sum(solo_cpu), 2) if solo and None not in solo_cpu else None
    big = [r for r in records if r["big"]]
    failures = [r for r in records if not r.get("ok")]
    out = {
        "sessions": count,
        "big_photos": run["big_photos"],
        "failures": len(failures),
        "failure_messages": sorted({str(r.get("error")) for r in failures})[:10],
        "cross_talk": sum(bool(r.get("cross_talk")) for r in records),
        "not_own_photo": sum(not r.get("own_photo") for r in records if r.get("ok")),
        "not_own_class": sum(not r.get("own_class") for r in records if r.get("ok")),
        "median_s": _pct(times, 0.5),
        "p90_s": _pct(times, 0.9),
        "max_s": times[-1] if times else None,
        "class_wall_s": klass["wall_s"],
        "solo_sum_s": None if solo_sum is None else round(solo_sum, 2),
        "solo_failures": solo_failed,
        "solo_median_s": _pct(sorted(r["t_total"] for r in solo if r.get("ok")), 0.5),
        "class_over_solo_sum": None
        if not solo_sum or solo_failed
        else round(klass["wall_s"] / solo_sum, 3),
        "server_cpu_class_s": klass.get("server_cpu_s"),
        "server_cpu_solo_sum_s": solo_cpu_sum,
        "server_cpu_class_over_solo_sum": None
        if not solo_cpu_sum or klass.get("server_cpu_s") is None or solo_failed
        else round(klass["server_cpu_s"] / solo_cpu_sum, 3),
        "client_cpu_class_s": klass.get("client_cpu_s"),
        "rss_before_mb": before,
        "rss_peak_mb": klass["rss_peak_mb"],
        "vm_hwm_mb": klass["vm_hwm_mb"],
        "mb_per_session_done": None if done is None else round((done - before) / count, 2),
        "mb_per_session_after_ttl": None if after is None else round((after - before) / count, 2),
        "rss_after_clearing_caches_mb": klass["rss_after_clearing_caches_mb"],
        "tabs": len(klass["tabs"]),
        "tabs_ok": sum(bool(t.get("ok")) for t in klass["tabs"]),
        "tabs_cross_talk": sum(bool(t.get("cross_talk")) for t in klass["tabs"]),
        "tab_times_s": [t.get("t_total") for t in klass["tabs"]],
        "median_open_s": _pct(sorted(r["t_open"] for r in records if r.get("ok")), 0.5),
        "median_upload_s": _pct(sorted(r["t_upload"] for r in records if r.get("ok")), 0.5),
        "load": {
            "before_solo": run.get("solo_load_before"),
            "before_class": klass["load_before"],
            "class_end": klass["load_at_end"],
        },
        "big_median_s": _pct(sorted(r["t_total"] for r in big if r.get("ok")), 0.5),
        "where_mb_all_done": klass["metrics_all_done"].get("summary_mb"),
        "where_mb_after_ttl": klass["metrics_after_ttl"].get("summary_mb"),
        "active_sessions_after_ttl": klass["metrics_after_ttl"].get("active_sessions"),
    }
    solo_growth = [
        r["rss_done_mb"] - r["rss_before_mb"]
        for r in solo
        if r.get("rss_done_mb") is not None and r.get("rss_before_mb") is not None
    ]
    if solo_growth:
        out["solo_rss_growth_median_mb"] = round(statistics.median(solo_growth), 1)
        big_growth = [
            r["rss_done_mb"] - r["rss_before_mb"] for r in solo if r["big"] and r.get("rss_done_mb")
        ]
        out["solo_rss_growth_big_mb"] = [round(g, 1) for g in big_growth]
    return out


def compare_big(runs: list[dict[str, Any]]) -> None:
    """Memory per big photo: a big-photo run's growth over the plain run of the same size,
    shared among its big photos."""
    plain = {r["sessions"]: r["summary"] for r in runs if not r["big_photos"]}
    for run in runs:
        s, p = run["summary"], plain.get(run["sessions"])
        if not s["big_photos"] or p is None:
            continue
        for when in ("done", "after_ttl"):
            mine, theirs = s[f"mb_per_session_{when}"], p[f"mb_per_session_{when}"]
            if mine is not None and theirs is not None:
                extra = (mine - theirs) * s["sessions"] / s["big_photos"]
                s[f"mb_per_big_photo_{when}"] = round(extra, 1)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, round(q * (len(values) - 1)))], 2)


def machine() -> dict[str, Any]:
    """The machine the figures come from."""
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        model = next(
            (ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), ""
        )
    total = None
    with contextlib.suppress(OSError), open("/proc/meminfo") as info:
        total = next((int(ln.split()[1]) // 1024 for ln in info if ln.startswith("MemTotal")), None)
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "memory_mb": total,
        "python": platform.python_version(),
        "load_at_start": os.getloadavg(),
    }


def table(runs: list[dict[str, Any]], host: dict[str, Any], args: argparse.Namespace) -> str:
    """The Markdown table of the runs."""

    def f(value, unit="", digits=1):
        return "–" if value is None else f"{value:.{digits}f}{unit}"

    lines = [
        f"Machine: {host['cpus_usable']} of {host['cpus']} CPUs ({host['cpu_model']}), "
        f"{host['memory_mb']} MB; load average at start "
        f"{', '.join(f'{x:.2f}' for x in host['load_at_start'])}.",
        (
            f"Server: {args.url} (caches cleared between the phases)"
            if args.url
            else "Server: a fresh `streamlit run app.py` per phase, warmed by one session"
        )
        + ("" if args.url else f", server.disconnectedSessionTTL {args.ttl} s")
        + (f"; server environment {' '.join(args.server_env)}" if args.server_env else "")
        + f"; models {', '.join(args.models)}; methods {', '.join(METHODS)}.",
        "",
        "| sessions | failures | cross-talk | median / p90 / max to complete page | "
        "class time / Σ solo | server CPU: class / Σ solo | peak server RSS | "
        "MB per session (all done) | MB per session (after TTL) | tabs ok |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        s = run["summary"]
        label = f"{s['sessions']}" + (f" ({s['big_photos']} big photos)" if s["big_photos"] else "")
        ratio = s["class_over_solo_sum"]
        lines.append(
            f"| {label} | {s['failures']} | {s['cross_talk']} | "
            f"{f(s['median_s'], ' s')} / {f(s['p90_s'], ' s')} / {f(s['max_s'], ' s')} | "
            f"{f(ratio, '', 2)} ({f(s['class_wall_s'], ' s')} / {f(s['solo_sum_s'], ' s')}) | "
            f"{f(s['server_cpu_class_over_solo_sum'], '', 2)} "
            f"({f(s['server_cpu_class_s'], ' s')} / {f(s['server_cpu_solo_sum_s'], ' s')}) | "
            f"{f(s['rss_peak_mb'], ' MB', 0)} (from {f(s['rss_before_mb'], ' MB', 0)}) | "
            f"{f(s['mb_per_session_done'])} | {f(s['mb_per_session_after_ttl'])} | "
            f"{s['tabs_ok']}/{s['tabs']} |"
        )
    lines.append("")
    for run in runs:
        s = run["summary"]
        where = s["where_mb_all_done"] or {}
        after = s["where_mb_after_ttl"] or {}
        lines.append(
            f"- {s['sessions']} sessions"
            + (f", {s['big_photos']} big photos" if s["big_photos"] else "")
            + ": Streamlit's own accounting when all were done: uploads "
            f"{where.get('uploads', 0):.1f} MB, media files {where.get('media_files', 0):.1f} MB, "
            f"session state {where.get('session_state', 0):.1f} MB, st.cache_data "
            f"{where.get('cache_data', 0):.1f} MB; after the TTL: uploads "
            f"{after.get('uploads', 0):.1f} MB, media {after.get('media_files', 0):.1f} MB, "
            f"{s['active_sessions_after_ttl']} active sessions; server RSS after clearing "
            f"the caches too: {f(s['rss_after_clearing_caches_mb'], ' MB', 0)}."
            + (
                f" Per big photo: {s['mb_per_big_photo_done']} MB with all done, "
                f"{s['mb_per_big_photo_after_ttl']} MB after the TTL (vs the plain run)."
                if "mb_per_big_photo_done" in s
                else ""
            )
            + f" Tabs: {s['tab_times_s']} s to their complete page."
            + f" This client's own CPU during the class: {f(s['client_cpu_class_s'], ' s')}."
            + f" Medians: open {f(s['median_open_s'], ' s')}, "
            + f"upload {f(s['median_upload_s'], ' s')}."
            + " Load average (1 min) before the solo runs / before the class / at its end: "
            + " / ".join(f(x[0] if x else None, "", 2) for x in s["load"].values())
            + "."
            + (f" Failures: {s['failure_messages']}" if s["failures"] else "")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[30, 60])
    parser.add_argument("--url", help="a running server (default: start one per phase here)")
    parser.add_argument("--server-pid", type=int, help="with --url: its PID, for memory")
    parser.add_argument(
        "--password-file",
        type=Path,
        help="with --url: the class password of deploy/serve.py --password-file (the same file)",
    )
    parser.add_argument("--tabs", type=int, default=3, help="Chromium tabs besides (0: none)")
    parser.add_argument("--big-photos", type=int, default=0, help="K: one more run per size")
    parser.add_argument("--ttl", type=int, default=5, help="server.disconnectedSessionTTL, s")
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment of the server started here, e.g. MALLOC_ARENA_MAX=2",
    )
    parser.add_argument("--no-solo", action="store_true", help="skip the students alone")
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--timeout", type=float, default=600.0, help="per page, s")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "test-artifacts/classroom/classroom.json"
    )
    args = parser.parse_args(argv)
    global PASSWORD
    if args.password_file is not None:
        PASSWORD = args.password_file.read_text(encoding="utf-8-sig").splitlines()[0]
    folder = args.out.parent
    folder.mkdir(parents=True, exist_ok=True)
    host = machine()
    runs = []
    variants = [(n, 0) for n in args.sessions]
    variants += [(n, args.big_photos) for n in args.sessions if args.big_photos]
    for count, big in variants:
        runs.append(one_run(args, count, big, folder))
        compare_big(runs)
        markdown = table(runs, host, args)
        host["load_at_end"] = os.getloadavg()
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        result = {"machine": host, "settings": settings, "runs": runs, "table": markdown}
        args.out.write_text(json.dumps(result, indent=1, default=str))
    print(markdown)
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
