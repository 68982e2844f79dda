"""Serve hookviz to a whole class: several copies ("replicas") of the app behind one HAProxy.

One Streamlit process runs every session's script in one Python process (one GIL), so a class
on one process waits on itself. This launcher starts N app processes on free loopback ports
and HAProxy in front of them on the port the students open. HAProxy keeps each browser on its
replica with a cookie (a replica keeps its sessions and uploads in its own memory), takes a
replica out within seconds if it dies and sends its students to a live one.

    python deploy/serve.py --replicas 4 --port 8501 --host 0.0.0.0

Standard library only: it launches processes and imports neither torch nor streamlit.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = Path(__file__).resolve().with_name("haproxy.cfg")
# the cookie HAProxy sets to keep a browser on its replica; its value is the replica's name
COOKIE = "hookviz_replica"
SHARED_DIR_ENV = "HOOKVIZ_SHARED_DIR"
EXIT_ERROR = 2  # a launch that could not start: bad port, no haproxy, a replica not healthy
GRACE = 10.0  # seconds a stopped process gets to finish before it is killed
POLL = 0.1  # seconds between looks at the children: short enough to feel immediate
PORT_TRIES = 3  # a free port can be taken by someone else before the replica binds it
TAIL_LINES = 20

HELP = """\
Serve hookviz to a class: N copies of the app behind HAProxy, one address for everyone.

Each student's browser stays on one copy (a cookie), so their uploads and settings stay with
them. If a copy crashes, its students are moved to a working one within a few seconds (their
page reconnects by itself; what they do next runs on the working copy). Stop everything with
Ctrl-C.

More copies let more students compute at the same time (one copy runs one Python thread at a
time); up to about one copy per CPU core is sensible. The cores are shared out among the
copies for torch's threads (OMP_NUM_THREADS, if set, is used as it is). Needs HAProxy (on
Debian or Ubuntu: apt-get install haproxy).
"""

EPILOG = """\
examples:
  python deploy/serve.py                                  two copies, http://127.0.0.1:8501
  python deploy/serve.py --replicas 4 --host 0.0.0.0      four copies, reachable from the room

It prints one line per copy ("replica r1 pid 1234 port 40123") and then the address to open.
"""


class LaunchError(Exception):
    """A launch that cannot go on; its message is one line for the teacher, ``detail`` what
    they need to see under it (a replica's last output)."""

    def __init__(self, message: str, detail: str = ""):
        super().__init__(message)
        self.detail = detail


@dataclass
class Replica:
    """One app process: its name (the value of the affinity cookie), port and output file."""

    name: str
    port: int
    process: subprocess.Popen
    log: Path
    # whether its end was already reported (a replica that died is reported once)
    reported: bool = False


# Set by SIGINT/SIGTERM; every wait below looks at it so that Ctrl-C works during start-up too.
_stop_requested = False


def _request_stop(signum, frame) -> None:
    global _stop_requested
    _stop_requested = True


class Stopped(Exception):
    """Ctrl-C or SIGTERM arrived while the launch was starting."""


# ---------------------------------------------------------------- arguments


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python deploy/serve.py",
        description=HELP,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--replicas",
        type=_positive,
        default=2,
        metavar="N",
        help="how many copies of the app to run (default 2)",
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=8501,
        metavar="P",
        help="the port students open (default 8501)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to listen on: 127.0.0.1 (default) for this machine only, "
        "0.0.0.0 for every network it is on",
    )
    parser.add_argument(
        "--shared-dir",
        type=Path,
        metavar="DIR",
        help="the folder all copies keep uploaded images in (default: a new temporary folder, "
        "removed at the end)",
    )
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long a copy may take to start (default 120)",
    )
    return parser.parse_args(argv)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be between 1 and 65535")
    return value


# ---------------------------------------------------------------- ports and health


def free_port() -> int:
    """A loopback port nobody listens on now (the replica binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_port_free(host: str, port: int) -> None:
    """Fail before starting anything if ``host:port`` is taken: finding out after the replicas
    have started wastes the teacher's minute."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        # as HAProxy binds: a port left in TIME_WAIT by a previous run is free
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            raise LaunchError(
                f"cannot listen on {host}:{port} ({error.strerror}): another program uses the "
                "port, pick another with --port"
            ) from error


def healthy(url: str) -> bool:
    """Whether Streamlit at ``url`` answers its health check with ``ok``."""
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
            return reply.status == 200 and reply.read().strip() == b"ok"
    except OSError:
        return False


def local_url(host: str, port: int) -> str:
    """The proxy's address from this machine (a listen-everywhere host is reached on
    loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def public_url(host: str, port: int) -> str:
    """The address to open: a listen-everywhere host is replaced by this machine's address on
    its network (what the students type)."""
    if host in ("0.0.0.0", "::", ""):
        host = _network_address()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def _network_address() -> str:
    """This machine's address on its main network (a UDP connect sends no packet), else its
    name."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.255.255.255", 1))
            return sock.getsockname()[0]
        except OSError:
            return socket.gethostname()


# ---------------------------------------------------------------- children


def find_haproxy() -> str | None:
    """The haproxy program: on the PATH, else where Debian puts it (/usr/sbin, which is not on
    an ordinary user's PATH there)."""
    found = shutil.which("haproxy")
    if found is None:
        found = shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    return found


def _die_with_parent():
    """A ``preexec_fn`` that makes the child get SIGTERM if this launcher is killed outright
    (SIGKILL runs no clean-up): no replica or HAProxy outlives it. Linux only; elsewhere None."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM)

    return preexec


# Every child started so far (replicas, then HAProxy), so that every way out stops them all.
_children: list[subprocess.Popen] = []


def _spawn(command: list[str], **options) -> subprocess.Popen:
    """Start a child in its own session: a Ctrl-C in the terminal reaches only this launcher,
    which then stops the children in order (HAProxy first, so nobody is sent to a replica that
    is stopping)."""
    process = subprocess.Popen(
        command, start_new_session=True, preexec_fn=_die_with_parent(), **options
    )
    _children.append(process)
    return process


def replica_threads(replicas: int, environment: dict[str, str] | None = None) -> str:
    """Torch's threads in each replica: the machine's cores shared out among the replicas (at
    least one each), or ``OMP_NUM_THREADS`` where the teacher set it. Each replica's torch
    would otherwise start one thread per core: two replicas computing at once on 2 cores then
    served 8.8 analyses a second between them, against 24.9 with one thread each and 20.7 from
    a single replica (``bench/replica_threads.py``)."""
    environment = os.environ if environment is None else environment
    chosen = environment.get("OMP_NUM_THREADS", "").strip()
    return chosen or str(max(1, (os.cpu_count() or 1) // replicas))


def start_replica(name: str, shared_dir: Path, workdir: Path, threads: str) -> Replica:
    """Start ``streamlit run app.py`` on a free loopback port, its torch on ``threads``
    threads; its output goes to a file in ``workdir`` (read back when it fails)."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app.py",
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
    ]
    # unbuffered: the end of its output is readable at once when it fails
    environment = {
        **os.environ,
        SHARED_DIR_ENV: str(shared_dir),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": threads,
    }
    log = workdir / f"{name}.log"
    with log.open("ab") as output:
        process = _spawn(
            command,
            cwd=ROOT,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    return Replica(name, port, process, log)


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a file, indented (for the teacher's terminal)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join("    " + line for line in kept)


def start_replicas(count: int, shared_dir: Path, workdir: Path, timeout: float) -> list[Replica]:
    """Start ``count`` replicas at once (their start-ups overlap) and wait until each is
    healthy; a replica whose port was taken meanwhile is started again on another one."""
    threads = replica_threads(count)
    replicas = [start_replica(f"r{i}", shared_dir, workdir, threads) for i in range(1, count + 1)]
    deadline = time.monotonic() + timeout
    tries = dict.fromkeys((r.name for r in replicas), 1)
    waiting = list(replicas)
    while waiting:
        if _stop_requested:
            raise Stopped
        for replica in list(waiting):
            if healthy(f"http://127.0.0.1:{replica.port}"):
                waiting.remove(replica)
            elif replica.process.poll() is not None:
                if _port_was_taken(replica) and tries[replica.name] < PORT_TRIES:
                    tries[replica.name] += 1
                    again = start_replica(replica.name, shared_dir, workdir, threads)
                    replicas[replicas.index(replica)] = again
                    waiting[waiting.index(replica)] = again
                    continue
                raise LaunchError(
                    f"replica {replica.name} exited with code {replica.process.returncode} "
                    "before it was ready; the end of its output:",
                    tail(replica.log) or "    (no output)",
                )
        if waiting and time.monotonic() > deadline:
            replica = waiting[0]
            raise LaunchError(
                f"replica {replica.name} (port {replica.port}) did not become healthy within "
                f"{timeout:g} s; the end of its output:",
                tail(replica.log) or "    (no output)",
            )
        time.sleep(POLL)
    return replicas


def _port_was_taken(replica: Replica) -> bool:
    return "already in use" in tail(replica.log)


def write_config(path: Path, host: str, port: int, replicas: list[Replica]) -> None:
    """Fill the template (deploy/haproxy.cfg) for these replicas."""
    servers = "\n".join(f"    server {r.name} 127.0.0.1:{r.port} cookie {r.name}" for r in replicas)
    text = string.Template(TEMPLATE.read_text()).substitute(
        bind=f"{host}:{port}", cookie=COOKIE, servers=servers
    )
    path.write_text(text)


def start_haproxy(haproxy: str, config: Path, host: str, port: int) -> subprocess.Popen:
    """Start HAProxy in the foreground (``-db``: this launcher is its parent and stops it) and
    wait until it answers; its warnings (a replica going down) go to this terminal."""
    process = _spawn([haproxy, "-db", "-f", str(config)], stdin=subprocess.DEVNULL)
    url = local_url(host, port)
    deadline = time.monotonic() + 30
    while not healthy(url):
        if _stop_requested:
            raise Stopped
        if process.poll() is not None:
            raise LaunchError(
                f"haproxy exited with code {process.returncode} at start (its message is above)"
            )
        if time.monotonic() > deadline:
            raise LaunchError(f"haproxy did not answer on {host}:{port} within 30 s")
        time.sleep(POLL)
    return process


# ---------------------------------------------------------------- serving and stopping


def serve(haproxy: subprocess.Popen, replicas: list[Replica]) -> int:
    """Watch the children until Ctrl-C or SIGTERM (exit code 0). A replica that dies is
    reported and the others go on (HAProxy moves its students); if HAProxy dies, or the last
    replica, there is nothing left to serve (exit code 1)."""
    while not _stop_requested:
        if haproxy.poll() is not None:
            _say(f"haproxy exited with code {haproxy.returncode}; stopping the replicas")
            return 1
        for replica in replicas:
            if replica.process.poll() is not None and not replica.reported:
                replica.reported = True
                alive = sum(r.process.poll() is None for r in replicas)
                _say(
                    f"replica {replica.name} (pid {replica.process.pid}) exited with code "
                    f"{replica.process.returncode}; {alive} replica(s) still serving"
                )
                # a crash leaves its traceback there; a kill (negative code) leaves nothing new
                if replica.process.returncode >= 0:
                    _say(tail(replica.log, 10))
        if all(r.process.poll() is not None for r in replicas):
            _say("no replica left; stopping")
            return 1
        time.sleep(POLL)
    return 0


def stop_all(processes: list[subprocess.Popen], grace: float = GRACE) -> None:
    """Ask every process to stop (SIGTERM), in order; kill those still running after
    ``grace`` seconds; reap them all."""
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _say(text: str) -> None:
    """A message for the teacher, on stderr: stdout holds only the replica lines and the URL."""
    print(text, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    haproxy = find_haproxy()
    if haproxy is None:
        _say("serve.py: haproxy is not installed; install it with: apt-get install haproxy")
        return EXIT_ERROR
    signal.signal(signal.SIGINT, _request_stop)
    signal.signal(signal.SIGTERM, _request_stop)

    workdir = Path(tempfile.mkdtemp(prefix="hookviz-serve-"))
    made_shared = args.shared_dir is None
    if made_shared:
        shared_dir = Path(tempfile.mkdtemp(prefix="hookviz-shared-"))
    else:
        shared_dir = args.shared_dir.resolve()
        shared_dir.mkdir(parents=True, exist_ok=True)
    try:
        check_port_free(args.host, args.port)
        replicas = start_replicas(args.replicas, shared_dir, workdir, args.start_timeout)
        config = workdir / "haproxy.cfg"
        write_config(config, args.host, args.port, replicas)
        proxy = start_haproxy(haproxy, config, args.host, args.port)
        for replica in replicas:
            print(f"replica {replica.name} pid {replica.process.pid} port {replica.port}")
        print(f"proxy {public_url(args.host, args.port)}", flush=True)
        _say(f"serving {len(replicas)} replicas through haproxy; stop with Ctrl-C")
        return serve(proxy, replicas)
    except LaunchError as error:
        _say(f"serve.py: {error}")
        if error.detail:
            _say(error.detail)
        return EXIT_ERROR
    except Stopped:
        return 0
    finally:
        # newest first, so HAProxy before the replicas: no request goes to one that is stopping
        stop_all(_children[::-1])
        shutil.rmtree(workdir, ignore_errors=True)
        if made_shared:
            shutil.rmtree(shared_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
