"""Many threads on one shared model get exactly what a serial run gets (the model lock keeps
each call's hooks from seeing another call's forward)."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

import hookviz

from .conftest import random_input

LAYERS = ["layer1", "layer2.1.conv2", "layer3", "layer4", "bn1"]


def _job(loaded, job):
    kind, layer, target, seed = job
    x = random_input(112, 144, seed=seed)
    if kind == "cam":
        result = hookviz.grad_cam(loaded, x, layer, target=target)
        return result.heatmap, result.class_index
    if kind == "maps":
        return hookviz.feature_maps(loaded, x, layer).activations.numpy(), None
    return np.array([p.probability for p in hookviz.predict(loaded, x)]), None


@pytest.mark.slow
def test_threads_get_serial_results(resnet18):
    jobs = [
        (kind, layer, (seed * 37) % 1000, seed)
        for seed, (kind, layer) in enumerate(
            (kind, layer) for kind in ("cam", "maps", "predict") for layer in LAYERS
        )
    ]
    shuffled = jobs * 3
    random.Random(0).shuffle(shuffled)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # so the comparison is bit-for-bit, not up to reduction order
    try:
        serial = {job: _job(resnet18, job) for job in jobs}
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(lambda job: _job(resnet18, job), shuffled))
    finally:
        torch.set_num_threads(threads)
    mismatches = [
        job
        for job, (value, index) in zip(shuffled, results, strict=True)
        if value.shape != serial[job][0].shape
        or not np.array_equal(value, serial[job][0])
        or index != serial[job][1]
    ]
    assert mismatches == []
    assert hookviz.count_hooks(resnet18.model) == 0
