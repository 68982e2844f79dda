"""Serve hookviz to a whole class: several copies ("replicas") of the app behind one HAProxy.

One Streamlit process runs every session's script in one Python process (one GIL), so a class
on one process waits on itself. This launcher starts N app processes on free loopback ports
and HAProxy in front of them on the port the students open. HAProxy keeps each browser on its
replica with a cookie (a replica keeps its sessions and uploads in its own memory), takes a
replica out within seconds if it dies and sends its students to a live one.

    python deploy/serve.py --replicas 4 --port 8501 --host 0.0.0.0 --self-signed

With ``--certificate`` or ``--self-signed`` HAProxy serves HTTPS (browsers give a page the camera
only over HTTPS or on localhost); the replicas stay plain HTTP on loopback.

Standard library only: it launches processes and imports neither torch nor streamlit.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import ipaddress
import os
import re
import shutil
import signal
import socket
import ssl
import string
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

if __package__:  # imported as deploy.serve (the tests)
    from .class_password import (
        USER,
        PasswordError,
        basic_authorization,
        read_password,
        sha512_crypt,
    )
else:  # run as python deploy/serve.py: its folder is on the path
    from class_password import (  # type: ignore[no-redef]
        USER,
        PasswordError,
        basic_authorization,
        read_password,
        sha512_crypt,
    )

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = Path(__file__).resolve().with_name("haproxy.cfg")
# the cookie HAProxy sets to keep a browser on its replica; its value is the replica's name
COOKIE = "hookviz_replica"
USERLIST = "class_users"  # HAProxy's name for the list holding the class user
SHARED_DIR_ENV = "HOOKVIZ_SHARED_DIR"
# the page's (hookviz/app/pages/dataset/run_folder.py): where runs are opened from, and whether
# other machines reach it
RUNS_DIR_ENV = "HOOKVIZ_RUNS_DIR"
SERVED_TO_NETWORK_ENV = "HOOKVIZ_SERVED_TO_NETWORK"
OFFERED_ENV = "HOOKVIZ_MODELS"  # (hookviz/app/view/offered_models.py's: --models)
OFFLINE_ENV = "HOOKVIZ_OFFLINE"  # (hookviz.models's: no download)
EXIT_ERROR = 2  # a launch that could not start: bad port, no haproxy, a replica not healthy
GRACE = 10.0  # seconds a stopped process gets to finish before it is killed
POLL = 0.1  # seconds between looks at the children: short enough to feel immediate
PORT_TRIES = 3  # a free port can be taken by someone else before the replica binds it
TAIL_LINES = 20
SELF_SIGNED = "hookviz-self-signed.pem"  # the file --self-signed makes in the state folder
# A year: Apple's devices refuse a server certificate valid for more than 825 days (HT210176).
SELF_SIGNED_DAYS = 365
# made again when less is left, so that it cannot expire during a lesson
RENEW_BEFORE = 7 * 24 * 3600

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

Browsers give a page the camera (the Live camera page, "Take a photo") only over HTTPS or on
localhost: for a class's laptops and phones, serve HTTPS with --self-signed (students accept
the browser's warning once) or --certificate FILE.

On an address other machines reach, anyone there can use the page: --password-file FILE asks
every visitor for the class password (user name "class", the password the file's first line).
"""

EPILOG = """\
examples:
  python deploy/serve.py                                  two copies, http://127.0.0.1:8501
  python deploy/serve.py --replicas 4 --host 0.0.0.0      four copies, reachable from the room
  python deploy/serve.py --host 0.0.0.0 --self-signed     two copies for the room over HTTPS,
                                                          camera included
  python deploy/serve.py --host 0.0.0.0 --certificate class.pem
                                                          HTTPS with your own certificate
  python deploy/serve.py --host 0.0.0.0 --self-signed --password-file class-password.txt
                                                          only those who know the password

It prints one line per copy ("replica r1 pid 1234 port 40123") and then the address to open.
--self-signed keeps its certificate in the state folder and uses it again next time, so a
student's browser that accepted it once does not ask again.
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
    tls = parser.add_mutually_exclusive_group()
    tls.add_argument(
        "--certificate",
        type=Path,
        metavar="FILE",
        help="serve HTTPS with this PEM file: the certificate (and its chain) and its private "
        "key in one file, unencrypted, as HAProxy's 'crt' takes it",
    )
    tls.add_argument(
        "--self-signed",
        action="store_true",
        help="serve HTTPS with a self-signed certificate for this machine's names and "
        "addresses, made with the openssl command in the state folder (used again next time); "
        "each browser warns once",
    )
    parser.add_argument(
        "--runs",
        type=Path,
        metavar="DIR",
        help="the one folder the Dataset run page opens runs from (named relative to it); "
        "served beyond this machine without it, that page is off",
    )
    parser.add_argument(
        "--models",
        metavar="LIST",
        help="the only models the page offers, comma-separated: bundled, cards, uploads (the "
        "Your model page), and names (resnet18, timm:convnext_tiny); default: all",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="download nothing: the bundled models, cards, cached weights and untrained ones",
    )
    parser.add_argument(
        "--password-file",
        type=Path,
        metavar="FILE",
        help="ask every visitor for the class password, the first line of FILE (user name: "
        "class); HAProxy keeps only its hash, and it is never printed",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="where --self-signed keeps its certificate (default: $XDG_STATE_HOME/hookviz, "
        "else ~/.local/state/hookviz)",
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


def healthy(url: str, authorization: str | None = None) -> bool:
    """Whether Streamlit at ``url`` answers its health check with ``ok``. An https ``url`` is
    this launcher's own proxy: whether it answers is checked, not whether the certificate is
    trusted (a self-signed one is not, and it may not name the loopback address); behind the
    class password, with ``authorization`` (the header's value)."""
    context = None
    if url.startswith("https:"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(f"{url}/_stcore/health")
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as reply:
            return reply.status == 200 and reply.read().strip() == b"ok"
    except OSError:
        return False


def local_url(host: str, port: int, scheme: str = "http") -> str:
    """The proxy's address from this machine (a listen-everywhere host is reached on
    loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def public_url(host: str, port: int, scheme: str = "http") -> str:
    """The address to open: a listen-everywhere host is replaced by this machine's address on
    its network (what the students type)."""
    if host in ("0.0.0.0", "::", ""):
        host = _network_address()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (a name other than localhost is
    taken as reachable from others)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def access_note(host: str, url: str, password_file: Path | None) -> str:
    """Who can use the page at ``url``, for the teacher: with a password, how students sign in;
    without one on an address other machines reach, a warning that it is everyone there."""
    if password_file is not None:
        return f'students sign in as "{USER}" with the password in {password_file}'
    if is_loopback(host):
        return ""
    return (
        f"no password: anyone who can reach {url} (every machine on this machine's networks, "
        "not only the class) can use the page; give the class one with --password-file FILE"
    )


def _network_address() -> str:
    """This machine's address on its main network (a UDP connect sends no packet), else its
    name."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.255.255.255", 1))
            return sock.getsockname()[0]
        except OSError:
            return socket.gethostname()


# ---------------------------------------------------------------- HTTPS

_KEY = re.compile(r"-----BEGIN (?:RSA |EC |DSA |ENCRYPTED )?PRIVATE KEY-----")


def check_certificate(path: Path) -> None:
    """Fail, in one line, unless ``path`` is a PEM file HAProxy can serve: a certificate and its
    unencrypted private key, which belong together. Checked here because HAProxy, given a bad
    one, stops with several lines of its own only after the replicas have started."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError as error:
        raise LaunchError(f"--certificate {path}: no such file") from error
    except IsADirectoryError as error:
        raise LaunchError(f"--certificate {path}: a folder, not a PEM file") from error
    except OSError as error:
        raise LaunchError(f"--certificate {path}: cannot read it ({error.strerror})") from error
    has_certificate = "-----BEGIN CERTIFICATE-----" in text
    has_key = _KEY.search(text) is not None
    both = "HAProxy takes both in one file: cat cert.pem key.pem > both.pem"
    if not has_certificate and not has_key:
        raise LaunchError(f"--certificate {path}: no PEM certificate or private key in it")
    if not has_key:
        raise LaunchError(f"--certificate {path}: a certificate but no private key; {both}")
    if not has_certificate:
        raise LaunchError(f"--certificate {path}: a private key but no certificate; {both}")
    if "ENCRYPTED" in text:
        raise LaunchError(
            f"--certificate {path}: the private key has a passphrase, which HAProxy cannot ask "
            "for; write it without one: openssl pkey -in KEY -out PLAIN_KEY"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # a password callback: a key encrypted some other way fails here instead of prompting
        context.load_cert_chain(path, password=lambda: b"")
    except ssl.SSLError as error:
        if "KEY_VALUES_MISMATCH" in str(error):
            raise LaunchError(
                f"--certificate {path}: its private key is not the certificate's"
            ) from error
        raise LaunchError(
            f"--certificate {path}: not a readable certificate and key ({error.reason or error})"
        ) from error


def state_dir(chosen: Path | None) -> Path:
    """Where --self-signed keeps its certificate: ``chosen``, else the user's state folder."""
    if chosen is not None:
        return chosen.resolve()
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "hookviz"


def machine_names(host: str) -> tuple[list[str], list[str]]:
    """The names and addresses students may type for this machine: ``host`` itself, its host
    name (and ``NAME.local``, which phones resolve by mDNS), localhost, and the addresses of its
    network interfaces. Returns (DNS names, IP addresses), sorted."""
    names = {"localhost"}
    addresses = {"127.0.0.1", "::1"}
    hostname = socket.gethostname()
    if hostname:
        names.add(hostname)
        if "." not in hostname:
            names.add(f"{hostname}.local")
    fqdn = socket.getfqdn()
    if "." in fqdn:
        names.add(fqdn)
    if host not in ("0.0.0.0", "::", ""):
        try:
            addresses.add(str(ipaddress.ip_address(host)))
        except ValueError:
            names.add(host)
    with contextlib.suppress(OSError):
        for *_, address in socket.getaddrinfo(hostname, None):
            addresses.add(address[0])
    with contextlib.suppress(ValueError):
        addresses.add(str(ipaddress.ip_address(_network_address())))
    addresses.update(_interface_addresses())
    # a link-local IPv6 address needs its interface named in the URL: nobody types it
    addresses = {a for a in addresses if not ipaddress.ip_address(a.split("%")[0]).is_link_local}
    return sorted(names), sorted(addresses, key=lambda a: (":" in a, a))


def _interface_addresses() -> set[str]:
    """The addresses of this machine's network interfaces (Linux: the IPv4 address of each by
    ``SIOCGIFADDR``, the IPv6 ones from /proc); elsewhere none, the other sources suffice."""
    found: set[str] = set()
    if not sys.platform.startswith("linux"):
        return found
    import fcntl  # (Unix only)

    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            with contextlib.suppress(OSError):
                request = struct.pack("256s", name.encode()[:15])
                reply = fcntl.ioctl(sock.fileno(), siocgifaddr, request)
                found.add(socket.inet_ntoa(reply[20:24]))
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            digits = line.split()[0]
            found.add(str(ipaddress.IPv6Address(bytes.fromhex(digits))))
    return found


def self_signed(folder: Path, host: str) -> tuple[Path, str]:
    """The self-signed certificate in ``folder`` for this machine, made with the openssl
    command unless the one made before still names every current name and address and has a
    week left. Returns its path and one line for the teacher (made or reused, and why)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise LaunchError(
            "--self-signed needs the openssl command (apt-get install openssl); or make a PEM "
            "file with a certificate and its key elsewhere and pass it with --certificate FILE"
        )
    names, addresses = machine_names(host)
    path = folder / SELF_SIGNED
    if path.exists():
        missing = _not_covered(openssl, path, names, addresses)
        if not missing:
            return path, f"using the self-signed certificate {path} (made before)"
        reason = f"the one there {missing}"
    else:
        reason = "none there yet"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        _make_self_signed(openssl, path, names, addresses)
    except OSError as error:
        raise LaunchError(f"cannot write the certificate in {folder} ({error})") from error
    return path, f"made a self-signed certificate {path} ({reason}); browsers warn once about it"


def _not_covered(openssl: str, path: Path, names: list[str], addresses: list[str]) -> str:
    """Why the certificate at ``path`` will not do ("does not name 10.0.0.7", "expires ...",
    "cannot be read"), or "" if it names everything wanted and has a week left."""
    result = subprocess.run(
        [openssl, "x509", "-in", str(path), "-noout", "-enddate", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        return "cannot be read"
    end = re.search(r"notAfter=(.+)", result.stdout)
    try:
        expires = ssl.cert_time_to_seconds(end[1].strip()) if end else 0
    except ValueError:
        expires = 0
    if expires - time.time() < RENEW_BEFORE:
        return "expires within a week"
    covered = set(re.findall(r"DNS:([^,\s]+)", result.stdout))
    for found in re.findall(r"IP Address:([0-9A-Fa-f:.]+)", result.stdout):
        with contextlib.suppress(ValueError):
            covered.add(str(ipaddress.ip_address(found)))
    missing = [n for n in [*names, *addresses] if n not in covered]
    return f"does not name {', '.join(missing)}" if missing else ""


def _make_self_signed(openssl: str, path: Path, names: list[str], addresses: list[str]) -> None:
    """Make a key (EC P-256) and a self-signed certificate for ``names`` and ``addresses`` and
    write both into ``path`` (readable by its owner only: it holds the key)."""
    alternatives = ", ".join([*(f"DNS:{n}" for n in names), *(f"IP:{a}" for a in addresses)])
    # An end-entity certificate for a web server, as browsers expect one: the names in
    # subjectAltName (Chrome ignores the CN), serverAuth (Apple's devices require it), and not
    # a CA (Firefox refuses a CA certificate used as a server's).
    config = f"""\
[req]
prompt = no
distinguished_name = subject
x509_extensions = server
[subject]
O = hookviz
CN = hookviz class server
[server]
subjectAltName = {alternatives}
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
"""
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        folder = Path(scratch)
        (folder / "openssl.cnf").write_text(config)
        command = [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-sha256",
            "-days",
            str(SELF_SIGNED_DAYS),
            "-config",
            str(folder / "openssl.cnf"),
            "-keyout",
            str(folder / "key.pem"),
            "-out",
            str(folder / "cert.pem"),
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no message"])[-1]
            raise LaunchError(f"openssl could not make the certificate: {last}")
        both = folder / "both.pem"
        descriptor = os.open(both, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as output:
            output.write((folder / "cert.pem").read_text())
            output.write((folder / "key.pem").read_text())
        os.replace(both, path)  # whole or not at all: a later launch never reads half a file


def fingerprint(path: Path) -> str:
    """The SHA-256 fingerprint of the (first) certificate in ``path``, as browsers show it."""
    text = path.read_text()
    start = text.index("-----BEGIN CERTIFICATE-----")
    end = text.index("-----END CERTIFICATE-----", start) + len("-----END CERTIFICATE-----")
    digest = hashlib.sha256(ssl.PEM_cert_to_DER_cert(text[start:end])).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def haproxy_quoted(path: Path) -> str:
    """``path`` as one word of an HAProxy configuration: in single quotes, where nothing is
    expanded (in double quotes ``$NAME`` would be), a single quote itself in double quotes."""
    return "'" + str(path).replace("'", "'\"'\"'") + "'"


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


def page_settings(
    host: str, runs: Path | None, offered: str | None = None, offline: bool = False
) -> dict[str, str]:
    """What the replicas' page must know of how it is served: the runs folder the Dataset run
    page opens runs from, and whether other machines reach it (the replicas listen on loopback,
    the proxy on ``host``; served beyond it with no runs folder, that page is off); the only
    models it offers (``offered``: --models) and whether it may download (``offline``)."""
    settings = {}
    if offered is not None:
        settings[OFFERED_ENV] = ",".join(p.strip() for p in offered.split(",") if p.strip())
    if offline:
        settings[OFFLINE_ENV] = "1"
    if runs is not None:
        if not runs.is_dir():
            raise LaunchError(f"--runs {runs}: no such folder")
        settings[RUNS_DIR_ENV] = str(runs.resolve())
    if not is_loopback(host):
        settings[SERVED_TO_NETWORK_ENV] = "1"
    return settings


def start_replica(
    name: str, shared_dir: Path, workdir: Path, threads: str, settings: dict[str, str]
) -> Replica:
    """Start ``streamlit run app.py`` on a free loopback port, its torch on ``threads``
    threads, with the environment ``settings`` (the page's: ``page_settings``); its output goes
    to a file in ``workdir`` (read back when it fails)."""
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
        **settings,
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


def start_replicas(
    count: int, shared_dir: Path, workdir: Path, timeout: float, settings: dict[str, str]
) -> list[Replica]:
    """Start ``count`` replicas at once (their start-ups overlap) and wait until each is
    healthy; a replica whose port was taken meanwhile is started again on another one."""
    threads = replica_threads(count)
    replicas = [
        start_replica(f"r{i}", shared_dir, workdir, threads, settings)
        for i in range(1, count + 1)
    ]
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
                    again = start_replica(replica.name, shared_dir, workdir, threads, settings)
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


def write_config(
    path: Path,
    host: str,
    port: int,
    replicas: list[Replica],
    certificate: Path | None = None,
    password_hash: str | None = None,
) -> None:
    """Fill the template (deploy/haproxy.cfg) for these replicas; with ``certificate``, HAProxy
    serves HTTPS on the public port with it; with ``password_hash`` (a crypt hash), it asks
    every request for the class user's password. Only this user may read the file."""
    servers = "\n".join(f"    server {r.name} 127.0.0.1:{r.port} cookie {r.name}" for r in replicas)
    tls = "" if certificate is None else f" ssl crt {haproxy_quoted(certificate.resolve())}"
    users = auth = ""
    if password_hash is not None:
        # single quotes: HAProxy reads the hash's "$" as they are
        users = f"userlist {USERLIST}\n    user {USER} password '{password_hash}'\n"
        auth = f"    http-request auth realm hookviz unless {{ http_auth({USERLIST}) }}"
    text = string.Template(TEMPLATE.read_text()).substitute(
        bind=f"{host}:{port}{tls}", cookie=COOKIE, servers=servers, userlist=users, auth=auth
    )
    path.touch(mode=0o600)
    path.write_text(text)


def start_haproxy(
    haproxy: str,
    config: Path,
    host: str,
    port: int,
    scheme: str = "http",
    authorization: str | None = None,
) -> subprocess.Popen:
    """Start HAProxy in the foreground (``-db``: this launcher is its parent and stops it) and
    wait until it answers (``authorization``: behind the class password); its warnings (a
    replica going down) go to this terminal."""
    process = _spawn([haproxy, "-db", "-f", str(config)], stdin=subprocess.DEVNULL)
    url = local_url(host, port, scheme)
    deadline = time.monotonic() + 30
    while not healthy(url, authorization):
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
        certificate = args.certificate
        if args.self_signed:
            certificate, told = self_signed(state_dir(args.state_dir), args.host)
            _say(told)
        if certificate is not None:
            check_certificate(certificate)
        scheme = "http" if certificate is None else "https"
        password = None if args.password_file is None else read_password(args.password_file)
        check_port_free(args.host, args.port)
        settings = page_settings(args.host, args.runs, args.models, args.offline)
        replicas = start_replicas(
            args.replicas, shared_dir, workdir, args.start_timeout, settings
        )
        config = workdir / "haproxy.cfg"
        hashed = None if password is None else sha512_crypt(password)
        write_config(config, args.host, args.port, replicas, certificate, hashed)
        authorization = None if password is None else basic_authorization(password)
        proxy = start_haproxy(haproxy, config, args.host, args.port, scheme, authorization)
        for replica in replicas:
            print(f"replica {replica.name} pid {replica.process.pid} port {replica.port}")
        url = public_url(args.host, args.port, scheme)
        print(f"proxy {url}", flush=True)
        if args.self_signed:
            _say(
                f"students: open {url} and accept the browser's warning once (Chrome: "
                "Advanced, Proceed; Safari: Show Details, visit this website; Firefox: "
                "Advanced, Accept the Risk); the certificate's SHA-256 fingerprint is "
                + fingerprint(certificate)
            )
        elif certificate is None and not is_loopback(args.host):
            _say(
                'no camera for other machines: browsers give the Live camera page and "Take a '
                'photo" the camera only over https (or on localhost); serve with --self-signed '
                "or --certificate FILE"
            )
        note = access_note(args.host, url, args.password_file)
        if note:
            _say(note)
        # last: what the teacher reads first is how to stop
        _say(f"serving {len(replicas)} replicas through haproxy; stop with Ctrl-C")
        return serve(proxy, replicas)
    except PasswordError as error:
        _say(f"serve.py: {error}")
        return EXIT_ERROR
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
