"""Layer aliases: names that output the very same tensor (a container and its last child, an
``Identity`` and what it passes on), the distinct list with one name per tensor, and layer shapes
at any input size.

The library finds aliases from tensor identity and version counters while tracing; the tests
check them against what hooking actually returns (values, compared bit for bit), so a wrong
alias (two names whose maps differ) or a missed one (two distinct names for one tensor) shows.
"""

from __future__ import annotations

import pytest
import torch

import hookviz
from hookviz.core.hooks import record_calls
from hookviz.core.layers import layer_shapes

from .conftest import random_input


def _all_outputs(loaded: hookviz.LoadedModel, names: list[str], x: torch.Tensor) -> dict:
    """Every named layer's output in one forward, cloned when produced (before any in-place op
    downstream can change it): the values each name would show."""
    seen: dict[str, torch.Tensor] = {}
    with torch.no_grad(), hookviz.observe_outputs(loaded.model, names, _keep(seen)):
        loaded.model(x)
    return seen


def _keep(seen: dict[str, torch.Tensor]):
    def observe(name: str, output: torch.Tensor) -> None:
        seen[name] = output.clone()

    return observe


def _value_groups(outputs: dict[str, torch.Tensor], names: list[str]) -> list[list[str]]:
    """Layers grouped by bit-identical output values, in execution order: an independent idea of
    "the same tensor" (it never looks at tensor identity or version counters)."""
    groups: list[list[str]] = []
    for name in names:
        value = outputs[name]
        for group in groups:
            first = outputs[group[0]]
            if first.shape == value.shape and torch.equal(first, value):
                group.append(name)
                break
        else:
            groups.append([name])
    return groups


# ------------------------------------------------------------------------------ same_as


def test_known_aliases(resnet18, lite0, vgg11):
    # a Sequential returns its last child's output untouched: the two names are one tensor
    assert hookviz.layer_table(resnet18).get("layer4.1").same_as == "layer4"
    assert hookviz.layer_table(lite0).get("blocks.0.0").same_as == "blocks.0"
    assert hookviz.layer_table(vgg11).get("features.20").same_as == "features"
    # the name kept is the outermost one, which is itself no alias
    assert hookviz.layer_table(resnet18).get("layer4").same_as is None
    assert hookviz.layer_table(lite0).get("blocks.0").same_as is None


@pytest.mark.parametrize(
    ("fixture", "size"),
    [("resnet18", (64, 96)), ("vgg11", (64, 64)), ("lite0", (64, 96))],
)
@pytest.mark.slow
def test_every_alias_hooks_bit_identical_maps(request, fixture, size):
    loaded = request.getfixturevalue(fixture)
    table = hookviz.layer_table(loaded)
    x = random_input(*size, seed=5)
    pairs = [(layer.name, layer.same_as) for layer in table.hookable if layer.same_as]
    assert pairs  # each of these models has aliases; an empty list would test nothing
    kept: dict[str, torch.Tensor] = {}
    for alias, name in pairs:
        if name not in kept:
            kept[name] = hookviz.feature_maps(loaded, x, name).activations
        mine = hookviz.feature_maps(loaded, x, alias).activations
        # bit-identical, not close: the two hooks see the very same tensor
        assert torch.equal(mine, kept[name]), f"{alias} is not the same tensor as {name}"


def test_aliases_agree_with_values_seen_in_one_forward(lite0, resnet18):
    # The converse of the test above: layers whose hooked values are identical are aliases of
    # one name (nothing the trace calls distinct is in fact a copy of another layer).
    for loaded in (lite0, resnet18):
        table = hookviz.layer_table(loaded)
        names = [layer.name for layer in table.hookable]
        outputs = _all_outputs(loaded, names, random_input(64, 96, seed=2))
        for group in _value_groups(outputs, names):
            assert len({table.canonical(name) for name in group}) == 1, group


# -------------------------------------------------------------------- in-place ops


def test_in_place_relu_is_not_an_alias_of_its_input(vgg11):
    conv, relu = vgg11.model.features[0], vgg11.model.features[1]
    assert isinstance(relu, torch.nn.ReLU) and relu.inplace  # the premise of this test
    x = random_input(64, 64, seed=1)

    # Evidence that the trap is real: the ReLU returns the very tensor object the conv returned
    # (it rewrites it in place), so object identity alone would call them one tensor.
    objects: dict[str, torch.Tensor] = {}

    def hook_for(name):
        def hook(module, inputs, output):
            objects[name] = output

        return hook

    with torch.no_grad(), hookviz.forward_hooks({"conv": conv, "relu": relu}, hook_for):
        vgg11.model(x)
    assert objects["relu"] is objects["conv"]
    objects.clear()

    table = hookviz.layer_table(vgg11)
    assert table.get("features.0").same_as is None
    assert table.get("features.1").same_as is None
    distinct = {layer.name for layer in table.distinct}
    assert {"features.0", "features.1"} <= distinct

    before = hookviz.feature_maps(vgg11, x, "features.0").activations
    after = hookviz.feature_maps(vgg11, x, "features.1").activations
    assert (before < 0).any()  # the conv's negatives survive in its own snapshot
    assert not torch.equal(before, after)
    assert torch.equal(after, before.clamp(min=0))  # and the ReLU's map is exactly ReLU(conv)

    # record_calls itself: same object, new version, so not "same as previous"
    with torch.no_grad(), record_calls(vgg11.model) as calls:
        vgg11.model(x)
    by_name = {call.name: call for call in calls}
    assert not by_name["features.1"].same_as_previous
    assert by_name["features"].same_as_previous  # a container returning its last child's map


# --------------------------------------------------------------------------- distinct


def test_distinct_has_one_name_per_tensor(lite0):
    table = hookviz.layer_table(lite0)
    distinct = table.distinct
    names = [layer.name for layer in table.hookable]
    assert len(set(layer.name for layer in distinct)) == len(distinct)
    assert all(layer.type_name != "Identity" for layer in distinct)
    assert all(layer.same_as is None and layer.hookable for layer in distinct)
    assert table.default in {layer.name for layer in distinct}
    assert len(distinct) < len(table.hookable)  # EfficientNet is full of containers/Identity

    # Independent count: group every hookable layer by the values it hooks. Each group with a
    # non-Identity member must hold exactly one distinct name.
    outputs = _all_outputs(lite0, names, random_input(64, 96, seed=4))
    groups = _value_groups(outputs, names)
    types = {layer.name: layer.type_name for layer in table.layers}
    distinct_names = {layer.name for layer in distinct}
    real = [group for group in groups if any(types[name] != "Identity" for name in group)]
    for group in real:
        assert len(distinct_names & set(group)) == 1, group
    assert len(distinct) == len(real)
    # distinct keeps execution order
    order = {name: position for position, name in enumerate(names)}
    assert [order[layer.name] for layer in distinct] == sorted(order[n] for n in distinct_names)


def test_canonical_maps_aliases_to_their_distinct_name(lite0, resnet18, vgg11):
    for loaded in (lite0, resnet18, vgg11):
        table = hookviz.layer_table(loaded)
        distinct = {layer.name for layer in table.distinct}
        for name in distinct:
            assert table.canonical(name) == name  # a distinct name is its own canonical name
        for layer in table.hookable:
            if layer.same_as is not None:
                assert table.canonical(layer.name) == layer.same_as
                # an alias leads to a name the distinct list offers (one hop, no chains)
                assert table.canonical(layer.name) in distinct
                assert table.canonical(table.canonical(layer.name)) == layer.same_as
    table = hookviz.layer_table(resnet18)
    assert table.canonical("layer4.1") == "layer4"
    assert table.canonical("no.such.layer") == "no.such.layer"


# ------------------------------------------------------------------------- layer_shapes


def _first_call_shapes(loaded: hookviz.LoadedModel, x: torch.Tensor) -> dict:
    """(C, h, w) of each module's first 4-D output in a plain forward (modules that run twice
    report their first call, as the table does)."""
    shapes: dict[str, tuple[int, int, int]] = {}

    def hook_for(name):
        def hook(module, inputs, output):
            if isinstance(output, torch.Tensor) and output.dim() == 4 and name not in shapes:
                shapes[name] = tuple(output.shape[1:])

        return hook

    modules = {name: module for name, module in loaded.model.named_modules() if name}
    with torch.no_grad(), hookviz.forward_hooks(modules, hook_for):
        loaded.model(x)
    return shapes


@pytest.mark.parametrize("fixture", ["resnet18", "lite0"])
@pytest.mark.parametrize("size", [(224, 262), (300, 180)])
def test_layer_shapes_are_what_a_forward_of_that_size_produces(request, fixture, size):
    loaded = request.getfixturevalue(fixture)
    table = hookviz.layer_table(loaded)
    shapes = layer_shapes(loaded, *size)
    x = random_input(*size, seed=7)
    assert shapes == _first_call_shapes(loaded, x)
    assert set(shapes) == {layer.name for layer in table.layers}
    # and what feature_maps returns at that size, for a few layers along the network
    hookable = table.hookable
    for layer in {hookable[0], hookable[len(hookable) // 2], table.get(table.default)}:
        maps = hookviz.feature_maps(loaded, x, layer.name)
        assert tuple(maps.activations.shape) == shapes[layer.name]
    # a non-square input really was traced: the grid-following layers differ from the table's
    # square shapes at the native size
    changed = [layer for layer in table.layers if shapes[layer.name] != layer.shape]
    assert changed and all(layer.aligned for layer in changed)


def test_layer_shapes_are_cached_per_size(resnet18):
    first = layer_shapes(resnet18, 224, 262)
    assert layer_shapes(resnet18, 224, 262) is first
    other = layer_shapes(resnet18, 262, 224)
    assert other is not first
    # transposed input, transposed grids (a check that the key is not (short, long))
    assert other["layer4"] == (first["layer4"][0], first["layer4"][2], first["layer4"][1])
