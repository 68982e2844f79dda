"""What the class password costs a request through ``deploy/serve.py``: HAProxy checks the
SHA-512 crypt hash of the password on every request (the page's scripts, its uploads, the
websocket's upgrade), about 5,000 rounds of SHA-512 each. Times N requests of the page's health
check (the smallest answer, so the proxy's own work shows) through the proxy, once without a
password and once with one, each launch with one replica.

    python bench/bench_proxy_auth.py --requests 400
"""

from __future__ import annotations

import argparse
import base64
import http.client
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # (run from a clone)

from scripts.appserver import free_port  # noqa: E402

PASSWORD = "a class password"


def timed(port: int, requests: int, authorization: str | None) -> list[float]:
    """Seconds of each request on one kept-alive connection, as a browser sends them."""
    headers = {"Authorization": authorization} if authorization else {}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    seconds = []
    for _ in range(requests):
        started = time.perf_counter()
        connection.request("GET", "/_stcore/health", headers=headers)
        answer = connection.getresponse()
        answer.read()
        seconds.append(time.perf_counter() - started)
        assert answer.status == 200, answer.status
    connection.close()
    return seconds


def launched(*options: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    command = [sys.executable, str(ROOT / "deploy" / "serve.py"), "--replicas", "1"]
    process = subprocess.Popen(
        [*command, "--port", str(port), *options],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    for line in process.stdout:
        if re.match(r"^proxy https?://", line):
            return process, port
    raise RuntimeError("serve.py did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        secret = Path(folder) / "password.txt"
        secret.write_text(PASSWORD + "\n")
        token = base64.b64encode(f"class:{PASSWORD}".encode()).decode()
        rows = []
        for name, options, authorization in (
            ("no password", (), None),
            ("--password-file", ("--password-file", str(secret)), f"Basic {token}"),
        ):
            process, port = launched(*options)
            try:
                timed(port, 20, authorization)  # warm-up
                seconds = timed(port, args.requests, authorization)
            finally:
                process.terminate()
                process.wait(timeout=60)
            rows.append((name, statistics.median(seconds) * 1000, sum(seconds)))
    print(f"{args.requests} requests of /_stcore/health through the proxy, one connection")
    print("| proxy | median ms per request | total s |")
    print("| --- | ---: | ---: |")
    for name, median, total in rows:
        print(f"| {name} | {median:.2f} | {total:.2f} |")


if __name__ == "__main__":
    main()
