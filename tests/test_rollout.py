"""Attention rollout against an independent computation: the attention probabilities are
recomputed here from each block's own qkv projection (softmax(q k^T / sqrt(d))), rolled out in
numpy as in Abnar & Zuidema's paper, and compared with hookviz's hooked version."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hookviz

from .conftest import random_input


@pytest.fixture(scope="module")
def deit():
    name = "timm:deit_tiny_distilled_patch16_224"
    return hookviz.load_model(name, pretrained=False, device="cpu")


def _attentions_by_hand(model, x) -> list[np.ndarray]:
    """Each block's attention probabilities, from the input of its attention module."""
    inputs = []
    handles = [
        block.attn.register_forward_hook(lambda m, args, out: inputs.append(args[0].detach()))
        for block in model.blocks
    ]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    maps = []
    for block, tokens in zip(model.blocks, inputs, strict=True):
        attn = block.attn
        batch, count, _ = tokens.shape
        qkv = attn.qkv(tokens).reshape(batch, count, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k = qkv[0], qkv[1]
        scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        maps.append(scores.softmax(dim=-1)[0].double().numpy())
    return maps


def _roll_out_by_hand(maps, fusion: str, discard: float) -> np.ndarray:
    tokens = maps[0].shape[-1]
    result = np.eye(tokens)
    for heads in maps:
        fused = {"mean": heads.mean(0), "max": heads.max(0), "min": heads.min(0)}[fusion].copy()
        flat = fused.reshape(-1)
        order = np.argsort(flat, kind="stable")[: int(flat.size * discard)]
        flat[order[order != 0]] = 0.0
        step = (flat.reshape(tokens, tokens) + np.eye(tokens)) / 2
        step /= step.sum(axis=-1, keepdims=True)
        result = step @ result
    return result


@pytest.mark.parametrize(("fusion", "discard"), [("mean", 0.0), ("max", 0.9), ("min", 0.5)])
def test_rollout_matches_the_attention_recomputed_by_hand(deit, fusion, discard):
    x = random_input(224, 256, seed=3)  # non-square: a 14x16 patch grid
    ours = hookviz.attention_rollout(deit, x, head_fusion=fusion, discard_ratio=discard)
    flow = _roll_out_by_hand(_attentions_by_hand(deit.model, x), fusion, discard)
    expected = flow[0, deit.tokens.prefix_tokens :].reshape(14, 16)  # 2 prefix tokens dropped
    expected = expected / expected.max()
    assert ours.grid.shape == (14, 16) and ours.layers == len(deit.model.blocks)
    # ties among the weakest weights may be broken differently: compare the maps, not bits
    assert np.corrcoef(ours.grid.ravel(), expected.ravel())[0, 1] > 0.999
    if discard == 0.0:
        np.testing.assert_allclose(ours.grid, expected, atol=1e-5)


def test_fused_attention_is_restored_after_the_call(deit):
    modules = [block.attn for block in deit.model.blocks]
    before = [module.fused_attn for module in modules]
    hookviz.attention_rollout(deit, hookviz.sample_image())
    assert [module.fused_attn for module in modules] == before
    assert hookviz.count_hooks(deit.model) == 0


def test_rollout_heatmap_covers_the_photo(deit):
    image = hookviz.sample_image()
    result = hookviz.attention_rollout(deit, image)
    heat = result.heatmap
    assert heat.shape == (image.height, image.width)
    assert np.isfinite(heat).all() and heat.min() == 0.0 and heat.max() == pytest.approx(1.0)


def test_torchvision_vit_rollout_reads_multihead_attention_weights():
    loaded = hookviz.load_model("vit_b_16", pretrained=False, device="cpu")
    result = hookviz.attention_rollout(loaded, random_input(224, 224, seed=1))
    assert result.grid.shape == (14, 14) and result.layers == 12
    assert result.grid.max() == pytest.approx(1.0) and result.grid.min() >= 0.0
    layers = loaded.model.encoder.layers
    assert all(not layer.self_attention._forward_pre_hooks for layer in layers)


@pytest.mark.parametrize("name", ["efficientnet_lite0", "swin_t"])
def test_models_without_a_class_token_are_refused(name):
    loaded = hookviz.load_model(name, pretrained=False, device="cpu")
    with pytest.raises(hookviz.ModelError, match="class token"):
        hookviz.attention_rollout(loaded, hookviz.sample_image())


def test_bad_options_are_refused(deit):
    with pytest.raises(ValueError, match="head_fusion"):
        hookviz.attention_rollout(deit, hookviz.sample_image(), head_fusion="median")
    with pytest.raises(ValueError, match="discard_ratio"):
        hookviz.attention_rollout(deit, hookviz.sample_image(), discard_ratio=1.0)
