"""HTTPS through ``deploy/serve.py``, so that a class's laptops and phones get the camera: real
HAProxy ending TLS in front of a real replica, certificates made here (a test CA and a server
certificate signed by it, with ``cryptography``) or by the launcher's ``--self-signed`` (the
openssl command), and Chromium's fake camera on the Live camera page. The launcher is started as
``tests/test_replicas.py`` starts it, with its helpers.

Served on this machine's network address where it has one (a class opens that, not loopback),
else on 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import http.client
import ipaddress
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from bench.streamlit_client import SUCCESS, Session
from deploy import serve
from deploy.serve import COOKIE, EXIT_ERROR, find_haproxy
from scripts.appserver import CHROMIUM_FLAGS, ROOT, chromium_path, free_port

from .processes import stop
from .test_browser_live_camera import FAKE_CAMERA, _start
from .test_replicas import (
    REPLICA_LINE,
    SESSION_WAIT,
    Launch,
    _read_until_url,
    _without,
    wait_for_said,
)

pytestmark = pytest.mark.slow

PROXY_LINE = re.compile(r"^proxy (https?)://(\S+):(\d+)$")
# the launcher's line when a class on the network gets no camera (no TLS)
NO_CAMERA = "no camera for other machines"
# the launcher's last line once it serves (after its notes for the teacher)
SERVING = "stop with Ctrl-C"
# RFC 6455: the key a websocket server answers an upgrade with is derived from the client's
WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _network_address() -> str | None:
    """This machine's IPv4 address on its network, if it has one (a UDP connect sends
    nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.255.255.255", 1))
        except OSError:
            return None
        address = sock.getsockname()[0]
    return None if ipaddress.ip_address(address).is_loopback else address


LAN = _network_address()
HOST = LAN or "127.0.0.1"
needs_lan = pytest.mark.skipif(LAN is None, reason="this machine has no network address")


# ---------------------------------------------------------------- certificates


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _key_pem(key, password: bytes | None = None) -> bytes:
    encryption = (
        serialization.NoEncryption()
        if password is None
        else serialization.BestAvailableEncryption(password)
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def _certificate(
    subject: str, key, issuer: str, signer, names: list[str], ca: bool, days: int = 30
):
    """A certificate for ``key`` valid from an hour ago for ``days``; a CA or a server's (with
    ``names``: IP addresses or DNS names) signed by ``signer``."""
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        usage = {"key_cert_sign": True, "crl_sign": True, "digital_signature": False}
    else:
        usage = {"key_cert_sign": False, "crl_sign": False, "digital_signature": True}
        alternatives = []
        for name in names:
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        builder = builder.add_extension(
            x509.SubjectAlternativeName(alternatives), critical=False
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    builder = builder.add_extension(
        x509.KeyUsage(
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            encipher_only=False,
            decipher_only=False,
            **usage,
        ),
        critical=True,
    )
    return builder.sign(signer, hashes.SHA256())


class Certificates:
    """A test CA (``ca``: its certificate alone, what a client trusts) and, signed by it, a
    server certificate for HOST, 127.0.0.1 and localhost (``server``: certificate and key in one
    PEM, as HAProxy takes it), plus the broken files a teacher could pass instead."""

    def __init__(self, folder: Path) -> None:
        ca_key, server_key, other_key = _key(), _key(), _key()
        ca = _certificate("hookviz test CA", ca_key, "hookviz test CA", ca_key, [], ca=True)
        names = sorted({HOST, "127.0.0.1", "localhost"})
        server = _certificate("hookviz test", server_key, "hookviz test CA", ca_key, names, False)
        self.ca = folder / "ca.pem"
        self.ca.write_bytes(_pem(ca))
        self.server = folder / "server.pem"
        self.server.write_bytes(_pem(server) + _key_pem(server_key))
        self.fingerprint = server.fingerprint(hashes.SHA256()).hex()
        # one that names every name and address of this machine, but has three days left
        everything = [name for names in serve.machine_names("0.0.0.0") for name in names]
        expiring = _certificate(
            "hookviz", server_key, "hookviz test CA", ca_key, everything, False, 3
        )
        self.expiring = folder / "expiring.pem"
        self.expiring.write_bytes(_pem(expiring) + _key_pem(server_key))
        self.broken = {
            "no such file": folder / "missing.pem",
            "a folder, not a PEM file": folder,
            "a certificate but no private key": folder / "certificate-only.pem",
            "a private key but no certificate": folder / "key-only.pem",
            "no PEM certificate or private key": folder / "text.pem",
            "its private key is not the certificate's": folder / "other-key.pem",
            "the private key has a passphrase": folder / "passphrase.pem",
        }
        self.broken["a certificate but no private key"].write_bytes(_pem(server))
        self.broken["a private key but no certificate"].write_bytes(_key_pem(server_key))
        self.broken["no PEM certificate or private key"].write_text("not a certificate\n")
        self.broken["its private key is not the certificate's"].write_bytes(
            _pem(server) + _key_pem(other_key)
        )
        self.broken["the private key has a passphrase"].write_bytes(
            _pem(server) + _key_pem(server_key, b"secret")
        )

    def context(self) -> ssl.SSLContext:
        """A client context that trusts the test CA only, and checks the host's name."""
        return ssl.create_default_context(cafile=self.ca)


@pytest.fixture(scope="module", name="certificates")
def certificates_fixture(tmp_path_factory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("certificates"))


# ---------------------------------------------------------------- launching


@contextlib.contextmanager
def launched(folder: Path, *options: str, env: dict[str, str] | None = None) -> Iterator[Launch]:
    """``deploy/serve.py --replicas 1`` on a free port with ``options``, until the block ends
    (then Ctrl-C, which must end it with code 0)."""
    temp, shared, stderr = folder / "tmp", folder / "shared", folder / "serve.err"
    temp.mkdir(parents=True)
    shared.mkdir()
    command = [sys.executable, str(ROOT / "deploy" / "serve.py"), "--replicas", "1"]
    command += ["--port", str(free_port()), "--shared-dir", str(shared), *options]
    environment = {**_without(os.environ, "OMP_NUM_THREADS"), "TMPDIR": str(temp), **(env or {})}
    with stderr.open("wb") as errors:
        process = subprocess.Popen(
            command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=errors, text=True
        )
    try:
        lines = _read_until_url(process, stderr)
        pids, ports = {}, {}
        for line in lines[:-1]:
            found = REPLICA_LINE.match(line)
            assert found, f"unexpected line from serve.py: {line!r}"
            pids[found[1]], ports[found[1]] = int(found[2]), int(found[3])
        url = lines[-1].removeprefix("proxy ")
        launch = Launch(process, url, pids, ports, stderr, temp, shared)
        wait_for_said(launch, SERVING)  # (stderr: it may come after the URL on stdout)
        yield launch
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0, stderr.read_text()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                stop(process)  # its children get SIGTERM when it dies (PR_SET_PDEATHSIG)


@pytest.fixture(scope="module", name="tls")
def tls_fixture(tmp_path_factory, certificates) -> Iterator[Launch]:
    """The launcher serving HTTPS on HOST with the test CA's server certificate."""
    folder = tmp_path_factory.mktemp("tls")
    with launched(folder, "--host", HOST, "--certificate", str(certificates.server)) as launch:
        yield launch


def _address(url: str) -> tuple[str, str, int]:
    found = PROXY_LINE.match(f"proxy {url}")
    assert found, url
    return found[1], found[2].strip("[]"), int(found[3])


def _get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, str, str]:
    """GET ``url``: the status, the body and the Set-Cookie headers."""
    with urllib.request.urlopen(url, timeout=30, context=context) as reply:
        cookies = " ".join(reply.headers.get_all("Set-Cookie") or [])
        return reply.status, reply.read().decode(errors="replace"), cookies


def _tls_socket(host: str, port: int, context: ssl.SSLContext) -> ssl.SSLSocket:
    """A TLS connection to ``host:port``, its certificate checked against ``context``."""
    return context.wrap_socket(
        socket.create_connection((host, port), timeout=30), server_hostname=host
    )


def _upgrade(sock: socket.socket, host: str, port: int, origin: str) -> tuple[str, dict, str]:
    """Send Streamlit's websocket upgrade request on ``sock``: the answer's status line, its
    headers (lower-case names) and the key it should have answered."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        "GET /_stcore/stream HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        "Upgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: streamlit\r\n"
        f"Origin: {origin}\r\n\r\n"
    )
    sock.sendall(request.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    status, *lines = head.decode(errors="replace").split("\r\n\r\n", 1)[0].split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    expected = base64.b64encode(hashlib.sha1((key + WEBSOCKET_GUID).encode()).digest()).decode()
    return status, headers, expected


# ---------------------------------------------------------------- HTTPS through the proxy


def test_the_page_answers_over_https_through_the_proxy(tls, certificates):
    """The printed address is https on HOST; through it, with the host's name checked against
    the test CA's certificate, the health check answers ok, the app's page is served with the
    proxy's cookie, and a whole session (websocket over TLS) runs the page to its end. The
    replica behind stays plain http on loopback."""
    scheme, host, port = _address(tls.url)
    assert (scheme, host) == ("https", HOST)
    context = certificates.context()
    assert _get(f"{tls.url}/_stcore/health", context)[1] == "ok"
    status, body, cookies = _get(f"{tls.url}/", context)
    assert status == 200 and '<div id="root">' in body, body[:300]
    assert f"{COOKIE}=r1" in cookies
    with _tls_socket(HOST, port, context) as sock:
        served = sock.getpeercert(binary_form=True)
        assert hashlib.sha256(served).hexdigest() == certificates.fingerprint
        assert sock.version() in ("TLSv1.2", "TLSv1.3")
    assert serve.healthy(f"http://127.0.0.1:{tls.ports['r1']}")
    assert NO_CAMERA not in tls.said()


def test_a_session_runs_over_tls(tls, certificates, monkeypatch):
    """A browser-less session, trusting the test CA (Python's and the websocket's TLS read
    SSL_CERT_FILE), runs the page through the proxy over https and wss."""
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates.ca))
    with Session(tls.url) as session:
        assert session.cookie(COOKIE) == "r1"
        session.open()
        assert session.wait_finished(SESSION_WAIT) == SUCCESS
        assert session.errors() == []
        assert "Look inside a CNN" in session.text(), session.text()[:400]


def test_the_websocket_upgrade_answers_101_over_tls(tls, certificates):
    """Streamlit's websocket upgrade, sent by hand on a TLS socket, is answered 101 by the
    replica through the proxy, with the key RFC 6455 derives and Streamlit's subprotocol."""
    _, host, port = _address(tls.url)
    with _tls_socket(host, port, certificates.context()) as sock:
        status, headers, expected = _upgrade(sock, host, port, tls.url)
    assert status.startswith("HTTP/1.1 101"), (status, headers)
    assert headers["upgrade"].lower() == "websocket"
    assert headers["sec-websocket-accept"] == expected
    assert headers["sec-websocket-protocol"] == "streamlit"


def test_plain_http_to_the_tls_port_gets_no_page(tls):
    """Plain http to the TLS port gets no HTTP answer (the handshake fails and the connection
    closes); a student must type https."""
    _, host, port = _address(tls.url)
    with pytest.raises((http.client.HTTPException, OSError)):
        urllib.request.urlopen(f"http://{host}:{port}/_stcore/health", timeout=30)
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(f"GET /_stcore/health HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(4096):
                answer += chunk
    assert not answer.startswith(b"HTTP/"), answer[:200]


# ---------------------------------------------------------------- refused before anything starts


@pytest.mark.parametrize(
    "problem",
    [
        "no such file",
        "a folder, not a PEM file",
        "a certificate but no private key",
        "a private key but no certificate",
        "no PEM certificate or private key",
        "its private key is not the certificate's",
        "the private key has a passphrase",
    ],
)
def test_a_bad_certificate_file_is_refused_before_anything_starts(certificates, problem):
    """A missing or unreadable file, one without a key or a certificate, a key that is not the
    certificate's or one with a passphrase: one line that names the file and the problem, exit
    code EXIT_ERROR, and no replica started (none printed)."""
    path = certificates.broken[problem]
    result = _refused("--certificate", str(path))
    [line] = result.stderr.splitlines()
    assert line.startswith(f"serve.py: --certificate {path}: {problem}"), line
    assert result.returncode == EXIT_ERROR
    assert result.stdout == ""


def test_a_file_nobody_may_read_is_refused(tmp_path, certificates):
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    path = tmp_path / "private.pem"
    path.write_bytes(certificates.server.read_bytes())
    path.chmod(0)
    result = _refused("--certificate", str(path))
    assert result.stderr.startswith(f"serve.py: --certificate {path}: cannot read it")
    assert result.returncode == EXIT_ERROR


def test_self_signed_without_openssl_says_how_to_make_one(tmp_path):
    """Without the openssl command, --self-signed stops at once with what to do instead."""
    programs = tmp_path / "bin"  # HAProxy, and no openssl
    programs.mkdir()
    (programs / "haproxy").symlink_to(find_haproxy())
    result = _refused("--self-signed", "--state-dir", str(tmp_path), env={"PATH": str(programs)})
    assert result.returncode == EXIT_ERROR, result.stderr
    [line] = result.stderr.splitlines()
    assert "--self-signed needs the openssl command" in line
    assert "--certificate FILE" in line
    assert list(tmp_path.glob("*.pem")) == []


def _refused(*options: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "deploy" / "serve.py"), "--port", str(free_port())]
    return subprocess.run(
        [*command, *options],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


# ---------------------------------------------------------------- --self-signed


def test_self_signed_is_made_once_and_used_again(tmp_path):
    """--self-signed makes a certificate in the state folder (the key readable by its owner
    only) that names HOST and this machine's name; a client that trusts it reaches the page;
    the students are told the address and the fingerprint. The next launch uses the same one,
    so a browser that accepted it is not asked again."""
    state = tmp_path / "state"
    path = state / serve.SELF_SIGNED
    options = ("--host", HOST, "--self-signed", "--state-dir", str(state))
    with launched(tmp_path / "first", *options) as launch:
        assert f"made a self-signed certificate {path} (none there yet)" in launch.said()
    made = path.read_bytes()
    assert path.stat().st_mode & 0o777 == 0o600
    with launched(tmp_path / "second", *options) as launch:
        said = launch.said()
        assert f"using the self-signed certificate {path} (made before)" in said, said
        context = ssl.create_default_context(cafile=path)
        assert _get(f"{launch.url}/_stcore/health", context)[1] == "ok"
        certificate = x509.load_pem_x509_certificate(made)
        digest = certificate.fingerprint(hashes.SHA256()).hex().upper()
        students = next(line for line in said.splitlines() if line.startswith("students:"))
        assert f"open {launch.url} and accept the browser's warning once" in students
        assert students.endswith(":".join(re.findall("..", digest)))
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        assert socket.gethostname() in names.value.get_values_for_type(x509.DNSName)
        addresses = names.value.get_values_for_type(x509.IPAddress)
        assert ipaddress.ip_address(HOST) in addresses
    assert path.read_bytes() == made


@pytest.mark.parametrize("before", ["server", "expiring"])
def test_self_signed_is_made_again_when_the_one_there_will_not_do(tmp_path, certificates, before):
    """A certificate in the state folder that does not name every address of this machine (the
    laptop moved to another network), or has less than a week left, is replaced, and the
    teacher is told why."""
    path = tmp_path / serve.SELF_SIGNED
    # the server's names only HOST, 127.0.0.1 and localhost
    old = getattr(certificates, before).read_bytes()
    path.write_bytes(old)
    made, told = serve.self_signed(tmp_path, "0.0.0.0")
    assert made == path
    if before == "server":
        assert "does not name" in told and socket.gethostname() in told, told
    else:
        assert "(the one there expires within a week)" in told, told
    assert path.read_bytes() != old
    serve.check_certificate(path)
    assert serve.self_signed(tmp_path, "0.0.0.0")[1].endswith("(made before)")


def test_the_guide_states_what_self_signed_does():
    """The Serve a class guide names the file --self-signed keeps, its lifetime and when it is
    made again, as serve.py has them."""
    guide = (ROOT / "docs" / "guide" / "serve.md").read_text()
    assert f"~/.local/state/hookviz/{serve.SELF_SIGNED}" in guide
    assert serve.SELF_SIGNED_DAYS == 365 and "It is valid for a year." in guide
    assert serve.RENEW_BEFORE == 7 * 24 * 3600 and "less than a week left" in guide
    assert serve.EXIT_ERROR == 2 and "with exit code 2" in guide


# ---------------------------------------------------------------- the camera in a browser


@pytest.fixture(scope="module", name="camera_browser")
def camera_browser_fixture():
    """Chromium with the fake camera, told to accept the test's certificate (as a student
    accepts the warning once)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # as everywhere, no host but this machine: HOST, an address, is let through as well
        flags = [
            f"{flag}, EXCLUDE {HOST}" if flag.startswith("--host-resolver-rules=") else flag
            for flag in CHROMIUM_FLAGS
        ]
        browser = playwright.chromium.launch(
            executable_path=chromium_path(),
            args=[*flags, *FAKE_CAMERA, "--ignore-certificate-errors"],
        )
        yield browser
        browser.close()


@needs_lan
def test_the_live_camera_plays_over_https_from_the_network(tls, camera_browser):
    """The Live camera page opened at https://<this machine's network address> is a secure
    context: the camera starts, the video plays and the server counts frames (over WebRTC with
    no ICE server, as on a class's network with no internet)."""
    page = camera_browser.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    try:
        page.goto(f"{tls.url}/camera")
        assert page.evaluate("window.isSecureContext")
        _start(page)
        video = page.frame_locator("iframe[title*='webrtc']").locator("video")
        video.evaluate(
            "v => new Promise(done => { const ok = () => v.readyState >= 2 && !v.paused "
            "&& v.currentTime > 0; if (ok()) done(); else v.addEventListener('timeupdate', "
            "() => ok() && done()); })"
        )
        hosts = {urllib.parse.urlsplit(url).hostname for url in requests if "://" in url}
        assert hosts <= {HOST, "127.0.0.1", "localhost", None}, hosts
    finally:
        page.close()


@needs_lan
def test_http_on_the_network_warns_and_gets_no_camera(tmp_path, camera_browser):
    """Served on the network without TLS, the launcher says in one line that other machines get
    no camera, and it is so: the page at http://<network address> is not a secure context and
    has no camera API."""
    with launched(tmp_path, "--host", HOST) as launch:
        assert _address(launch.url)[:2] == ("http", HOST)
        lines = [line for line in launch.said().splitlines() if NO_CAMERA in line]
        assert len(lines) == 1 and "--self-signed" in lines[0], launch.said()
        page = camera_browser.new_page()
        try:
            page.goto(f"{launch.url}/_stcore/health")
            assert page.evaluate("[window.isSecureContext, !navigator.mediaDevices]") == [
                False,
                True,
            ]
        finally:
            page.close()
