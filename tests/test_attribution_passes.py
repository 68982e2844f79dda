"""The forward passes a pixel attribution runs, counted on the model itself: with a class given,
a method that runs on copies of the input (SmoothGrad, integrated gradients) runs its own passes
and nothing else; the clean score and probability it reports come from one more pass when first
read, once, whoever reads them, and equal the ones the default target's clean pass gives."""

from __future__ import annotations

import pickle
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from torch import nn

import hookviz
from hookviz.errors import TargetError
from hookviz.targets import Class

from .conftest import random_input

COPIES = {"smoothgrad": {"samples": 3}, "integrated_gradients": {"steps": 4}}


class TwoClasses(nn.Module):
    """A real, tiny classifier: two logits from a convolution, a ReLU and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.relu(self.conv(x)).mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def model() -> hookviz.LoadedModel:
    return hookviz.wrap_model(TwoClasses(), num_classes=2, device="cpu")


@contextmanager
def forwards(loaded: hookviz.LoadedModel) -> Iterator[list[int]]:
    """The rows of each forward pass the model runs in the block (a real forward hook)."""
    rows: list[int] = []
    handle = loaded.model.register_forward_hook(lambda _m, args, _out: rows.append(len(args[0])))
    try:
        yield rows
    finally:
        handle.remove()


@pytest.mark.parametrize("method", sorted(COPIES))
def test_a_given_class_runs_the_methods_passes_alone(model, method) -> None:
    x = random_input(16, 16)
    rows_of_the_method = list(COPIES[method].values())  # one pass over all the copies
    with forwards(model) as rows:
        result = hookviz.attribute(model, x, method, target=1, **COPIES[method])
    assert rows == rows_of_the_method
    assert result.clean.pending
    with forwards(model) as rows:
        score, probability = result.score, result.probability
        assert result.score == score and result.probability == probability
    assert rows == [1]  # one clean pass, for both numbers, once
    assert 0 < probability < 1 and not result.clean.pending


@pytest.mark.parametrize("as_class", [False, True])
def test_the_score_read_later_is_the_one_the_clean_pass_gives(model, as_class) -> None:
    x = random_input(16, 16, seed=3)
    top = int(model.model(x).argmax())
    given = hookviz.attribute(model, x, "smoothgrad", target=Class(top) if as_class else top)
    with forwards(model) as rows:
        default = hookviz.attribute(model, x, "smoothgrad")  # the top-1, resolved on a pass
    assert rows == [1, 5] and not default.clean.pending
    assert given.score == default.score and given.probability == default.probability
    assert (given.class_index, given.class_name, given.target) == (
        default.class_index, default.class_name, default.target,
    )  # fmt: skip
    assert (given.raw == default.raw).all()


def test_a_class_out_of_range_is_refused_before_any_pass(model) -> None:
    with forwards(model) as rows, pytest.raises(TargetError, match="out of range"):
        hookviz.attribute(model, random_input(16, 16), "smoothgrad", target=2)
    assert rows == []


def test_the_tensor_changed_after_the_call_does_not_change_the_score(model) -> None:
    x = random_input(16, 16, seed=4)
    expected = hookviz.attribute(model, x, "smoothgrad", target=0)
    expected_score = expected.score
    result = hookviz.attribute(model, x, "smoothgrad", target=0)
    x.zero_()
    assert result.score == expected_score


def test_threads_reading_at_once_share_one_pass(model) -> None:
    result = hookviz.attribute(model, random_input(16, 16), "smoothgrad", target=0)
    readers = 6
    start = threading.Barrier(readers)
    found: list[tuple[float, float]] = []

    def read() -> None:
        start.wait()
        found.append((result.score, result.probability))

    with forwards(model) as rows:
        threads = [threading.Thread(target=read) for _ in range(readers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert rows == [1] and len(set(found)) == 1 and len(found) == readers


def test_a_pickle_carries_the_numbers_not_the_model(model) -> None:
    result = hookviz.attribute(model, random_input(16, 16, seed=5), "smoothgrad", target=1)
    with forwards(model) as rows:
        copy = pickle.loads(pickle.dumps(result))
    assert rows == [1]  # computed for the pickle
    assert (copy.score, copy.probability) == (result.score, result.probability)
    assert not copy.clean.pending and (copy.raw == result.raw).all()
    assert b"TwoClasses" not in pickle.dumps(result)
