"""Analyses per second from several processes on one machine (replicas, or test workers), with
torch's default threads in each or the cores shared out among them.

Each of P processes loads the same model and runs, as fast as it can for a fixed time, what a
student's first view costs: a hooked forward pass of a photo at the default layer and the
Grad-CAM of its top-1 class. All start together. Run once with every process on torch's
default thread count (one per core) and once with the cores divided among them
(``OMP_NUM_THREADS``, as ``deploy/serve.py`` and the test suite set it).

    python bench/replica_threads.py [--processes 2] [--seconds 20] [--model resnet18]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

WORKER = """
import sys, time, torch, hookviz
model, seconds, start_at = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
loaded = hookviz.load_model(model, model == hookviz.DEFAULT_MODEL, device="cpu")
image = hookviz.sample_image()
hookviz.analyze(loaded, image)  # warm
while time.time() < start_at:
    time.sleep(0.005)
done, started = 0, time.perf_counter()
while time.perf_counter() - started < seconds:
    hookviz.analyze(loaded, image.rotate(done % 7))  # a new photo each time: no cached result
    done += 1
print(done / (time.perf_counter() - started), torch.get_num_threads())
"""


def run(processes: int, seconds: float, model: str, threads: int | None) -> dict:
    environment = dict(os.environ, HOOKVIZ_OFFLINE="1")
    if threads is None:
        environment.pop("OMP_NUM_THREADS", None)
    else:
        environment["OMP_NUM_THREADS"] = str(threads)
    start_at = time.time() + 25  # time for every process to import torch and load the model
    children = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, model, str(seconds), str(start_at)],
            env=environment,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    rates, used = [], set()
    for child in children:
        out, _ = child.communicate()
        rate, count = out.split()[-2:]
        rates.append(float(rate))
        used.add(int(count))
    return {"threads per process": sorted(used), "analyses/s": round(sum(rates), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--model", default="resnet18")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    shared = max(1, cores // args.processes)
    found = {
        "default threads": run(args.processes, args.seconds, args.model, None),
        "cores shared": run(args.processes, args.seconds, args.model, shared),
        "one process, default threads": run(1, args.seconds, args.model, None),
    }
    print(json.dumps({"cores": cores, "processes": args.processes, "model": args.model,
                      **found}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
