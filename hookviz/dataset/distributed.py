"""Several processes on one run (``torchrun``): the process group is used only for barriers;
each rank keeps its own frozen model and takes the chunks whose number it owns, so the outputs
are the same files a single process writes, and any number of processes can resume any run.

Under torchrun (``WORLD_SIZE`` > 1) the group is joined on first use, with the gloo backend on
the CPU (NCCL when every rank has a GPU), and left when the run ends. Without torchrun there is
one rank and every call here is free.
"""

from __future__ import annotations

import datetime
import os

import torch

# A rank waiting at a barrier for a slower one (a long chunk) must not give up too early.
TIMEOUT = datetime.timedelta(minutes=60)


def world() -> tuple[int, int]:
    """(rank, world size) of this process: (0, 1) outside torchrun."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return 0, 1
    _join()
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def barrier() -> None:
    """Wait for every rank (nothing outside torchrun)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        if torch.distributed.get_backend() == "gloo":
            torch.distributed.monitored_barrier(timeout=TIMEOUT)  # names a rank that hangs
        else:
            torch.distributed.barrier()


def from_rank0(value: object) -> object:
    """Rank 0's ``value`` on every rank (a refusal found by rank 0 must stop them all, not
    leave them waiting at a barrier)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return value
    box = [value]
    torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def leave() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def local_device() -> str | None:
    """This rank's GPU under torchrun (``cuda:LOCAL_RANK``), else None (the default device)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0')) % torch.cuda.device_count()}"
    return None


def _join() -> None:
    if torch.distributed.is_initialized():
        return
    gpus = torch.cuda.is_available() and torch.cuda.device_count() > 0
    torch.distributed.init_process_group("nccl" if gpus else "gloo", timeout=TIMEOUT)
