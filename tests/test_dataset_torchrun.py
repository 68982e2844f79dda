"""Dataset runs across processes with torchrun: real processes on the CPU with the gloo
backend, on one machine and as two "nodes" on loopback. The outputs must be the very files a
single process writes (with the same number of threads, so the float sums run in the same
order), and a run started with two processes must resume with one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import hookviz

from .held_input import held, held_input
from .processes import stop, wait_for_chunks, wait_gone
from .test_dataset_run import _assert_same_run, _folder

# every test starts torchrun and its ranks (each loads the model): tens of seconds
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["cam", "--model", "efficientnet_lite0", "--chunk-size", "2", "--quiet"]


def _env() -> dict[str, str]:
    # torchrun gives each process one thread; the single-process runs get the same
    return {**os.environ, "HOOKVIZ_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _single(images: list[Path], out: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hookviz", *COMMAND, *map(str, images), "--out", str(out)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def _torchrun(*launcher: str, images: list[Path], out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            *launcher,
            "-m",
            "hookviz",
            *COMMAND,
            *map(str, images),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The inputs (a folder and a list naming the last picture, which a test may hold) and the
    single process's run of them."""
    root = tmp_path_factory.mktemp("torchrun")
    folder = _folder(root / "data", count=8)
    picture, listing = held_input(root, hookviz.sample_image().resize((180, 150)))
    images = [folder, listing]  # 11 inputs: 6 chunks, the last one short (the held picture)
    _single(images, root / "single")
    return images, root / "single", picture


def test_two_processes_on_one_machine_write_what_one_process_writes(reference, tmp_path):
    images, single, _ = reference
    process = _torchrun("--standalone", "--nproc-per-node=2", images=images, out=tmp_path / "o")
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output
    assert output.count("11 images") == 1  # one summary, from rank 0
    _assert_same_run(single, tmp_path / "o")


def test_two_nodes_on_loopback_write_what_one_process_writes(reference, tmp_path):
    images, single, _ = reference
    endpoint = f"127.0.0.1:{_free_port()}"
    launcher = (
        "--nnodes=2",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={endpoint}",
        "--rdzv-id=hookviz-test",
    )
    nodes = [_torchrun(*launcher, images=images, out=tmp_path / "o") for _ in range(2)]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    _assert_same_run(single, tmp_path / "o")


def test_a_run_of_two_processes_resumes_with_one(reference, tmp_path):
    images, single, picture = reference
    chunks = tmp_path / "o" / "cams"
    # the last chunk (rank 1's) waits on the held picture: the run is mid-way when killed
    with held(picture):
        process = _torchrun("--standalone", "--nproc-per-node=2", images=images, out=tmp_path / "o")
        try:
            assert wait_for_chunks(chunks, 2, process), "the run wrote no two chunks"
            workers = _children(process.pid)  # before the launcher dies and they are re-parented
            for pid in [process.pid, *workers]:
                os.kill(pid, signal.SIGKILL)  # everything at once, as a crash of the machine would
            process.wait()
            assert wait_gone(workers), "a killed rank still runs"
        finally:
            stop(process)
    finished = sorted(p.name for p in chunks.glob("*.npz"))
    assert 2 <= len(finished) < 6 and "00005.npz" not in finished
    _single(images, tmp_path / "o")
    _assert_same_run(single, tmp_path / "o")


def _children(pid: int) -> list[int]:
    """The worker processes torchrun started (killed with it, as a crash would)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def test_a_refusal_stops_every_rank(reference, tmp_path):
    """Another command on a folder that holds a run: rank 0 refuses, and the other rank stops
    too instead of waiting at a barrier."""
    images, single, _ = reference
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "hookviz",
            *COMMAND,
            "--method",
            "gradcam++",
            *map(str, images),
            "--out",
            str(single),
        ],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output, _ = process.communicate(timeout=240)
    assert process.returncode != 0
    assert "holds another run" in output
