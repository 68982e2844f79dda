"""The class password of ``deploy/serve.py --password-file``: real HAProxy asking every request,
the websocket upgrade included, for HTTP basic auth in front of a real replica; the hash it is
given checked against ``openssl passwd -6``; the password never in the generated configuration,
a command line or the launcher's output. The launcher is started as ``tests/test_serve_tls.py``
starts it (``tests/test_replicas.py`` skips the module where HAProxy is missing)."""

from __future__ import annotations

import base64
import shutil
import socket
import stat
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.streamlit_client import SUCCESS, Session
from deploy import class_password, serve
from deploy.serve import EXIT_ERROR

from .test_replicas import SESSION_WAIT, Launch
from .test_serve_tls import _address, _refused, _upgrade, launched

pytestmark = pytest.mark.slow

# spaces, quotes, a "$" and non-ASCII: all part of what a student types
PASSWORD = "owl $pell 'é' 42"


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _status(url: str, authorization: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url)
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, dict(reply.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


@pytest.fixture(scope="module", name="guarded")
def guarded_fixture(tmp_path_factory) -> Iterator[tuple[Launch, Path]]:
    folder = tmp_path_factory.mktemp("password")
    secret = folder / "class-password.txt"
    secret.write_text(PASSWORD + "\nignored second line\n", encoding="utf-8")
    with launched(folder, "--host", "127.0.0.1", "--password-file", str(secret)) as launch:
        yield launch, secret


# ---------------------------------------------------------------- the hash


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
@pytest.mark.parametrize(
    ("password", "salt"),
    [("hunter2", "saltsalt"), (PASSWORD, "AbC./09xyz"), ("x" * 150, "0123456789abcdef")],
)
def test_the_hash_is_openssls_sha512_crypt(password, salt):
    ours = class_password.sha512_crypt(password, salt)
    theirs = subprocess.run(
        ["openssl", "passwd", "-6", "-salt", salt, "-stdin"],
        input=password, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert ours == theirs


def test_each_hash_has_a_salt_of_its_own():
    first, second = class_password.sha512_crypt("same"), class_password.sha512_crypt("same")
    assert first != second and first.startswith("$6$") and len(first.split("$")[2]) == 16


# ---------------------------------------------------------------- HAProxy asks


def test_every_request_asks_for_the_class_password(guarded):
    launch, _ = guarded
    page = f"{launch.url}/"
    status, headers = _status(page)
    assert status == 401
    assert headers.get("www-authenticate", headers.get("WWW-Authenticate")) == (
        'Basic realm="hookviz"'
    )
    assert _status(page, _basic("class", PASSWORD + "x"))[0] == 401
    assert _status(page, _basic("teacher", PASSWORD))[0] == 401
    assert _status(page, _basic("class", PASSWORD))[0] == 200
    assert _status(f"{launch.url}/_stcore/health", _basic("class", PASSWORD))[0] == 200
    # the replica behind answers its own health check (the proxy's, with no password)
    assert serve.healthy(f"http://127.0.0.1:{launch.ports['r1']}")


def test_the_websocket_upgrade_needs_it_too(guarded):
    launch, _ = guarded
    _, host, port = _address(launch.url)
    with socket.create_connection((host, port), timeout=30) as sock:
        status, _, _ = _upgrade(sock, host, port, launch.url)
    assert status.startswith("HTTP/1.1 401"), status


def test_a_whole_session_runs_with_it(guarded):
    launch, _ = guarded
    with Session(launch.url, authorization=_basic("class", PASSWORD)) as session:
        session.open()
        assert session.wait_finished(SESSION_WAIT) == SUCCESS
        assert session.errors() == []
        assert "Look inside a CNN" in session.text()


def test_the_password_is_kept_only_as_its_hash(guarded):
    """The generated configuration holds the hash (owner-only), never the password; neither
    the launcher's output nor any command line of its processes shows it."""
    launch, _ = guarded
    (config,) = launch.temp.glob("hookviz-serve-*/haproxy.cfg")
    text = config.read_text()
    assert PASSWORD not in text
    hashed = next(line for line in text.splitlines() if "user class password" in line)
    assert "'$6$" in hashed
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert PASSWORD not in launch.said()
    for pid in [launch.process.pid, *launch.pids.values()]:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        assert PASSWORD.encode() not in command
    assert 'sign in as "class"' in launch.said()


# ---------------------------------------------------------------- the teacher is told


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "no such file"), ("", "its first line is empty"), ("\nsecret\n", "first line")],
)
def test_a_password_file_that_will_not_do_is_refused_before_anything_starts(
    tmp_path, content, problem
):
    secret = tmp_path / "pw.txt"
    if content is not None:
        secret.write_text(content)
    result = _refused("--password-file", str(secret))
    assert result.returncode == EXIT_ERROR
    assert result.stderr.startswith(f"serve.py: --password-file {secret}: "), result.stderr
    assert problem in result.stderr and "replica" not in result.stdout


def test_a_server_other_machines_reach_says_who_can_use_it():
    url = "http://192.0.2.7:8501"
    warning = serve.access_note("0.0.0.0", url, None)
    assert "no password" in warning and url in warning and "--password-file" in warning
    assert serve.access_note("127.0.0.1", url, None) == ""
    assert "sign in" in serve.access_note("0.0.0.0", url, Path("pw.txt"))
