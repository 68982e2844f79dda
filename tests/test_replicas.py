"""Many app replicas behind a real HAProxy (``deploy/serve.py``), used the way a class uses them:
real processes (two ``streamlit run`` replicas, HAProxy, the launcher) and a real Chromium, no
mocks. One launch serves the whole module, in file order: the page through the proxy, each
session kept on its replica by the proxy's cookie, a replica killed mid-class, and Ctrl-C.

Skipped without HAProxy (``apt-get install haproxy``), Playwright or Chromium, unless
``HOOKVIZ_REQUIRE_BROWSER=1`` (as in .ci/run, which installs them): then they are failures.
"""

from __future__ import annotations

import hashlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.streamlit_client import Session
from deploy import serve
from deploy.serve import COOKIE, find_haproxy
from scripts.appserver import ROOT, free_port

from .browser_page import (
    REQUIRED,
    assert_only_local,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    encoded,
    main_text,
    open_session,
    upload,
    wait_for_results,
    wait_for_text,
    wait_idle,
)
from .processes import PATIENCE, stop, wait_gone

if find_haproxy() is None:
    REASON = "HAProxy missing (apt-get install haproxy)"
    if REQUIRED:
        raise RuntimeError(REASON)
    pytest.skip(REASON, allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.browser]

REPLICA_LINE = re.compile(r"^replica (r\d+) pid (\d+) port (\d+)$")
PROXY_LINE = re.compile(r"^proxy (http://\S+)$")
# Installed before the page's own scripts: each websocket the page opens, whether it is open and
# how many messages it received.
SOCKET_SPY = """
window.__hvSockets = [];
const NativeSocket = window.WebSocket;
window.WebSocket = class extends NativeSocket {
  constructor(...args) {
    super(...args);
    const seen = {open: false, messages: 0};
    window.__hvSockets.push(seen);
    this.addEventListener('open', () => { seen.open = true; });
    this.addEventListener('close', () => { seen.open = false; });
    this.addEventListener('message', () => { seen.messages += 1; });
  }
};
"""
# the page opened a second websocket (it reconnected), and it is open
RECONNECTED = "() => window.__hvSockets.length > 1 && window.__hvSockets.at(-1).open"
# a server sent messages on the page's latest websocket
ANSWERED = "() => window.__hvSockets.at(-1).messages > 0"
# HAProxy's own warning (on the launcher's stderr) once its health checks took a replica out
DOWN = "Server replicas/{name} is DOWN"


@dataclass
class Launch:
    """A running ``deploy/serve.py``: the proxy's URL and each replica's pid and port."""

    process: subprocess.Popen
    url: str
    pids: dict[str, int]
    ports: dict[str, int]
    stderr: Path
    temp: Path  # the launcher's TMPDIR: what it leaves there is left behind
    shared: Path

    def said(self) -> str:
        """Everything the launcher (and HAProxy) wrote on stderr so far."""
        return self.stderr.read_text(errors="replace")


@pytest.fixture(scope="module", name="launch")
def launch_fixture(tmp_path_factory) -> Iterator[Launch]:
    """``deploy/serve.py --replicas 2`` on a free port, for the whole module; stopped at the
    end if a test has not stopped it."""
    folder = tmp_path_factory.mktemp("replicas")
    temp, shared, stderr = folder / "tmp", folder / "shared", folder / "serve.err"
    temp.mkdir()
    shared.mkdir()
    command = [
        sys.executable,
        str(ROOT / "deploy" / "serve.py"),
        "--replicas",
        "2",
        "--port",
        str(free_port()),
        "--shared-dir",
        str(shared),
    ]
    with stderr.open("wb") as errors:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            # (no OMP_NUM_THREADS: the launcher shares the cores out itself)
            env={**_without(os.environ, "OMP_NUM_THREADS"), "TMPDIR": str(temp)},
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
    try:
        lines = _read_until_url(process, stderr)
        pids, ports = {}, {}
        for line in lines[:-1]:
            found = REPLICA_LINE.match(line)
            assert found, f"unexpected line from serve.py: {line!r}"
            pids[found[1]], ports[found[1]] = int(found[2]), int(found[3])
        assert sorted(pids) == ["r1", "r2"], lines
        url = PROXY_LINE.match(lines[-1])[1]
        yield Launch(process, url, pids, ports, stderr, temp, shared)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                stop(process)  # its children get SIGTERM when it dies (PR_SET_PDEATHSIG)


def _read_until_url(process: subprocess.Popen, stderr: Path) -> list[str]:
    """The launcher's stdout lines up to and including the proxy's URL (read in a thread: a
    pipe read has no timeout)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + PATIENCE
    while not seen or not seen[-1].startswith("proxy "):
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            line = None
        if line is None:
            pytest.fail(f"serve.py gave no URL; stdout {seen}, stderr:\n{stderr.read_text()}")
        seen.append(line)
    return seen


# ---------------------------------------------------------------- helpers


def replica_of(page) -> str | None:
    """The replica the proxy's cookie keeps this session's browser on."""
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    return cookies.get(COOKIE)


def health(url: str, replica: str | None = None) -> tuple[str, str | None]:
    """``GET /_stcore/health`` through the proxy, with the cookie of ``replica`` if given: the
    answer and the replica the proxy's reply names in its Set-Cookie (None: it kept the one
    asked for)."""
    request = urllib.request.Request(f"{url}/_stcore/health")
    if replica is not None:
        request.add_header("Cookie", f"{COOKIE}={replica}")
    with urllib.request.urlopen(request, timeout=30) as reply:
        body = reply.read().decode()
        cookies = " ".join(reply.headers.get_all("Set-Cookie") or [])  # Streamlit sets its own
    found = re.search(rf"{COOKIE}=(\w+)", cookies)
    return body, found[1] if found else None


def wait_for_said(launch: Launch, text: str, timeout: float = 60.0) -> None:
    """Wait until the launcher's stderr contains ``text``."""
    deadline = time.monotonic() + timeout
    while text not in launch.said():
        assert time.monotonic() < deadline, f"{text!r} never said; stderr:\n{launch.said()}"
        time.sleep(0.05)


def close(pages: list[tuple]) -> None:
    """Close sessions, checking that none of their requests left the machine."""
    for page, requests in pages:
        assert_only_local(requests)
        page.context.close()


@dataclass
class Tripwire:
    """A listener on a dead replica's port that counts what arrives: HAProxy's health checks
    (HTTP/1.0, no Host header) and proxied requests (which carry the browser's Host). It
    answers nothing, so the replica stays down."""

    port: int
    checks: int = 0
    proxied: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.running:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                continue
            with connection:
                connection.settimeout(2)
                head = b""
                try:
                    while b"\r\n\r\n" not in head and len(head) < 65536:
                        chunk = connection.recv(4096)
                        if not chunk:
                            break
                        head += chunk
                except OSError:
                    pass
            text = head.decode(errors="replace")
            if re.search(r"^host:", text, re.IGNORECASE | re.MULTILINE):
                self.proxied.append(text.split("\r\n", 1)[0])
            elif text:
                self.checks += 1

    def close(self) -> None:
        self.running = False
        self.thread.join()
        self.sock.close()


# ---------------------------------------------------------------- the checks


def test_every_replica_is_told_the_shared_folder(launch):
    """Each replica runs with HOOKVIZ_SHARED_DIR set to the folder the launcher was given (the
    app keeps uploads there, so that any replica can show any student's picture)."""
    for pid in launch.pids.values():
        environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"HOOKVIZ_SHARED_DIR={launch.shared.resolve()}".encode() in environment


def test_each_replica_gets_its_share_of_the_cores_for_torch(launch):
    """Two replicas' torch each on half the cores (one thread each on 2 cores), so that they
    do not fight over the cores when both compute; a teacher's OMP_NUM_THREADS is kept."""
    share = str(max(1, (os.cpu_count() or 1) // 2))
    for pid in launch.pids.values():
        environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"OMP_NUM_THREADS={share}".encode() in environment
    assert serve.replica_threads(4, {"OMP_NUM_THREADS": "3"}) == "3"
    assert serve.replica_threads(10**6, {}) == "1"


def _without(environment, name: str) -> dict[str, str]:
    return {key: value for key, value in environment.items() if key != name}


def test_the_page_works_through_the_proxy(launch, browser):
    """Through the proxy the health check answers and the app's page finishes its first run,
    for two sessions at once, each on a replica of the launch. (Which ones is least-connections'
    choice at the moment of each page's first request: on a loaded machine the first page's
    connections can be closed by then, and both land on one. The spreading is checked with four
    sessions below.)"""
    assert health(launch.url)[0] == "ok"
    # both opened before either is waited for: the two cold starts overlap
    pages = [open_session(browser, launch.url, wait=False) for _ in range(2)]
    for page, _ in pages:
        wait_for_results(page)
        assert "Feature maps of" in main_text(page)
    assert {replica_of(page) for page, _ in pages} <= {"r1", "r2"}
    close(pages)


def test_each_session_keeps_its_replica(launch, browser):
    """Each session gets the proxy's cookie naming a replica, new sessions are spread over both
    replicas, and a session keeps its replica across reloads."""
    pages = [open_session(browser, launch.url, wait=False) for _ in range(4)]
    replicas = [replica_of(page) for page, _ in pages]
    assert set(replicas) == {"r1", "r2"}, replicas
    for _ in range(2):
        for (page, _), replica in zip(pages, replicas, strict=True):
            # the proxy picks the replica for the page's own request: its answer is enough
            page.reload(wait_until="commit")
            assert replica_of(page) == replica
    close(pages)


def test_a_dead_replica_sends_its_students_to_a_live_one_with_their_own_photos(launch, browser):
    """Twenty students through the proxy, each with its own upload and class (three in Chromium,
    seventeen over Streamlit's websocket protocol): each sees its own photo and no other. Then
    SIGKILL a replica mid-class: its students' pages are served by the live replica with the
    same photo and view (a Chromium page reloaded at once, one left to reconnect by itself, the
    websocket students opening their links again); once HAProxy's health check has taken the
    dead one out, every new session lands on the live one and no request is sent to the dead
    one's port again; the launcher keeps serving."""
    students = [open_session(browser, launch.url, init_script=SOCKET_SPY) for _ in range(3)]
    for index, (page, _) in enumerate(students):
        upload(page, f"student{index}.png", student_picture(index), "image/png")
    for index, (page, _) in enumerate(students):
        wait_for_text(page, f"{_size(index)} px")
        wait_idle(page)
    clients = _websocket_students(launch.url, range(3, STUDENTS))
    for index, client in clients.items():
        _assert_own_view(client.text(), client.query_params(), index)
    on = [replica_of(page) for page, _ in students]
    dead = max(set(on), key=on.count)
    live = next(name for name in launch.pids if name != dead)
    reloaded, left = [page for page, _ in students if replica_of(page) == dead][:2]
    photos = {page: index for index, (page, _) in enumerate(students)}
    stranded = {i: c for i, c in clients.items() if c.cookie(COOKIE) == dead}
    assert stranded, "no websocket student on the replica to kill"
    os.kill(launch.pids[dead], signal.SIGKILL)
    assert wait_gone([launch.pids[dead]], timeout=30)

    # at once, before any health check failed: the proxy's retry sends the reload elsewhere,
    # and the address brings the photo back from the shared folder
    reloaded.reload()
    wait_for_results(reloaded)
    assert replica_of(reloaded) == live
    _assert_own_view(main_text(reloaded), _query(reloaded.url), photos[reloaded])
    # The page left alone reconnects by itself, through the proxy, to the live replica. Idle, it
    # asks for no run (it expects its old session back); the student's next action runs there.
    left.wait_for_function(RECONNECTED, timeout=60_000)
    assert replica_of(left) == live
    left.keyboard.press("r")  # Streamlit's rerun key
    left.wait_for_function(ANSWERED, timeout=60_000)
    wait_for_text(left, f"{_size(photos[left])} px")
    wait_idle(left)
    _assert_own_view(main_text(left), _query(left.url), photos[left])
    # the websocket students of the dead replica open their own links again
    for index, client in stranded.items():
        with Session(launch.url) as again:
            again.open(client.query)
            again.wait_finished(SESSION_WAIT)
            assert again.cookie(COOKIE) == live
            _assert_own_view(again.text(), again.query_params(), index)

    wait_for_said(launch, DOWN.format(name=dead))
    wait_for_said(launch, f"replica {dead} (pid {launch.pids[dead]}) exited")
    tripwire = Tripwire(launch.ports[dead])
    try:
        pages = [open_session(browser, launch.url, wait=False) for _ in range(3)]
        assert [replica_of(page) for page, _ in pages] == [live] * 3
        close(pages)
        for _ in range(20):
            # a new browser, and one whose cookie still names the dead replica
            assert health(launch.url) == ("ok", live)
            assert health(launch.url, dead) == ("ok", live)
        # the tripwire is where HAProxy looks: its checks of the dead replica arrive there
        deadline = time.monotonic() + 30
        while tripwire.checks == 0:
            assert time.monotonic() < deadline, "no health check reached the tripwire"
            time.sleep(0.05)
    finally:
        tripwire.close()
    assert tripwire.proxied == [], "the proxy sent requests to the dead replica"
    assert launch.process.poll() is None, launch.said()
    close(students)
    for client in clients.values():
        client.close()


STUDENTS = 20
SESSION_WAIT = 180.0  # seconds a websocket student waits for its page (a class on 2 cores)


def student_picture(index: int) -> bytes:
    """A PNG that differs for every student: its size (``_size``) names ``index``."""
    return encoded((320 + 8 * index, 240), "PNG")


def _size(index: int) -> str:
    return f"{320 + 8 * index}×240"


def _class(index: int) -> int:
    return 100 + 37 * index


def _query(url: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))


def _assert_own_view(text: str, query: dict[str, str], index: int) -> None:
    """The page shows student ``index``'s photo, no other student's, and the address names
    that photo by its digest (and the class the student asked for, where it asked one)."""
    assert f"{_size(index)} px" in text, (index, text[:400])
    others = [_size(i) for i in range(STUDENTS) if i != index]
    assert not [size for size in others if f"{size} px" in text], (index, text[:400])
    assert query.get("image") == hashlib.sha256(student_picture(index)).hexdigest(), query
    if index >= 3:  # (the websocket students asked their own class)
        assert query.get("target") == str(_class(index)), query


def _websocket_students(url: str, indices: range) -> dict[int, Session]:
    """Students over the websocket protocol, all at once: each opens the page with its own
    class, uploads its own photo and waits for its page."""
    clients: dict[int, Session] = {}
    failures: list[BaseException] = []

    def student(index: int) -> None:
        try:
            client = Session(url)
            clients[index] = client
            client.open({"target": str(_class(index))})
            client.wait_finished(SESSION_WAIT)
            client.upload(f"student{index}.png", student_picture(index), "image/png")
            client.wait_finished(SESSION_WAIT)
        except BaseException as error:  # (reported in the test's thread)
            failures.append(error)

    threads = [threading.Thread(target=student, args=(index,)) for index in indices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SESSION_WAIT * 2)
    assert not failures, failures
    return clients


# ---------------------------------------------------------------- the end of the lesson


def test_ctrl_c_stops_everything(launch):
    """Ctrl-C (SIGINT) to the launcher stops every replica and HAProxy, exits with code 0,
    leaves no temporary folder of its own and keeps the shared folder it was given."""
    haproxy = [pid for pid in _children(launch.process.pid) if _name(pid) == "haproxy"]
    assert len(haproxy) == 1, "HAProxy is not the launcher's child"
    launch.process.send_signal(signal.SIGINT)
    assert launch.process.wait(timeout=60) == 0, launch.said()
    assert wait_gone([*launch.pids.values(), *haproxy], timeout=30)
    assert list(launch.temp.glob("hookviz-serve-*")) == []
    assert launch.shared.is_dir()


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
