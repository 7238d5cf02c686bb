"""The attention math against hand-computed 3-token examples.

The tutorial's case: translating 杰瑞, the decoder attends to the source "Tom chase Jerry" with
weights (0.3, 0.2, 0.5). For each score function we choose a query and keys whose hand-computed
scores are ln(0.3, 0.2, 0.5) + c, so the softmax must give exactly those weights, and the
context must be 0.3 h_Tom + 0.2 h_chase + 0.5 h_Jerry.
"""

from __future__ import annotations

import math

import pytest
import torch

from models.attention import Attention, masked_softmax
from models.config import SCORE_FUNCTIONS

TUTORIAL = torch.tensor([0.3, 0.2, 0.5])  # Tom, chase, Jerry
LN = [math.log(p) for p in TUTORIAL.tolist()]  # -1.2040, -1.6094, -0.6931


def tutorial_case(score: str) -> tuple[Attention, torch.Tensor, torch.Tensor]:
    """An attention module, a query (1, 2) and encoder states (1, 3, 2) for the tutorial's weights."""
    attn = Attention(score, query_dim=2, memory_dim=2, attn_dim=2)
    with torch.no_grad():
        if score == "dot":  # q . h_j = ln p_j
            q, h = [1.0, 0.0], [[x, 1.0] for x in LN]
        elif score == "scaled_dot":  # q . h_j / sqrt(2) = ln p_j
            q, h = [math.sqrt(2), 0.0], [[x, 1.0] for x in LN]
        elif score == "general":  # q . (W h_j) with W = diag(2, 0) and q = (0.5, 0) = ln p_j
            attn.key_proj.weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 0.0]]))
            q, h = [0.5, 0.0], [[x, 7.0] for x in LN]
        elif score == "cosine":  # s * cos(q, h_j) with s = 2 and cos_j = (ln p_j + 1) / 2
            attn.log_scale.fill_(math.log(2.0))
            cos = [(x + 1.0) / 2 for x in LN]
            q, h = [1.0, 0.0], [[3 * c, 3 * math.sqrt(1 - c * c)] for c in cos]  # length 3: cosine ignores it
        else:  # additive: v . tanh(W q + U h_j) with W = 0, U = I, v = (1, 0): tanh(h_j0) = ln p_j + 1
            attn.query_proj.weight.zero_()
            attn.query_proj.bias.zero_()
            attn.key_proj.weight.copy_(torch.eye(2))
            attn.energy.weight.copy_(torch.tensor([[1.0, 0.0]]))
            q, h = [5.0, -5.0], [[math.atanh(x + 1.0), 0.5] for x in LN]
    return attn, torch.tensor([q]), torch.tensor([h])


@pytest.mark.parametrize("score", SCORE_FUNCTIONS)
def test_tutorial_example_tom_chase_jerry(score: str) -> None:
    attn, query, memory = tutorial_case(score)
    keys = attn.precompute_keys(memory)
    context, weights = attn(query, keys, memory, torch.zeros(1, 3, dtype=torch.bool))
    torch.testing.assert_close(weights[0], TUTORIAL, atol=1e-6, rtol=0)
    expected_context = 0.3 * memory[0, 0] + 0.2 * memory[0, 1] + 0.5 * memory[0, 2]
    torch.testing.assert_close(context[0], expected_context, atol=1e-6, rtol=0)


# q = (1, 2); keys k1 = (1, 0), k2 = (0, 1), k3 = (1, 1); scores computed by hand.
HAND_SCORES = {
    "dot": [1.0, 2.0, 3.0],
    "scaled_dot": [1 / math.sqrt(2), 2 / math.sqrt(2), 3 / math.sqrt(2)],
    "general": [2.0, 1.0, 3.0],  # W = [[0, 1], [1, 0]] swaps the key's coordinates
    "cosine": [1 / math.sqrt(5), 2 / math.sqrt(5), 3 / math.sqrt(10)],  # scale s = 1
    # W = U = I, b = 0, v = (1, 1): tanh(2) + tanh(2), tanh(1) + tanh(3), tanh(2) + tanh(3)
    "additive": [2 * math.tanh(2), math.tanh(1) + math.tanh(3), math.tanh(2) + math.tanh(3)],
}


@pytest.mark.parametrize("score", SCORE_FUNCTIONS)
def test_scores_match_hand_computation(score: str) -> None:
    attn = Attention(score, query_dim=2, memory_dim=2, attn_dim=2)
    with torch.no_grad():
        if score == "general":
            attn.key_proj.weight.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
        if score == "cosine":
            attn.log_scale.zero_()
        if score == "additive":
            attn.query_proj.weight.copy_(torch.eye(2))
            attn.query_proj.bias.zero_()
            attn.key_proj.weight.copy_(torch.eye(2))
            attn.energy.weight.copy_(torch.ones(1, 2))
    memory = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    query = torch.tensor([[1.0, 2.0]])
    scores = attn.score(query, attn.precompute_keys(memory))[0]
    torch.testing.assert_close(scores, torch.tensor(HAND_SCORES[score]), atol=1e-6, rtol=0)
    _, weights = attn(query, attn.precompute_keys(memory), memory, torch.zeros(1, 3, dtype=torch.bool))
    expected = torch.softmax(torch.tensor(HAND_SCORES[score]), dim=0)
    torch.testing.assert_close(weights[0], expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("score", SCORE_FUNCTIONS)
def test_padding_gets_zero_weight_and_does_not_change_the_result(score: str) -> None:
    torch.manual_seed(0)
    dim = 6
    attn = Attention(score, query_dim=dim, memory_dim=dim, attn_dim=5)
    query = torch.randn(2, dim)
    memory = torch.randn(2, 5, dim)
    mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
    padded = memory.clone()
    padded[1, 3:] = 1e3  # garbage at padded positions must not matter
    keys = attn.precompute_keys(padded)
    context, weights = attn(query, keys, padded, mask)
    assert torch.all(weights[1, 3:] == 0.0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2))
    # sentence 1 alone, unpadded
    alone_mem = memory[1:, :3]
    alone_ctx, alone_w = attn(
        query[1:], attn.precompute_keys(alone_mem), alone_mem, torch.zeros(1, 3, dtype=torch.bool)
    )
    torch.testing.assert_close(weights[1, :3], alone_w[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(context[1], alone_ctx[0], atol=1e-5, rtol=0)


def test_masked_softmax_exact_zeros() -> None:
    scores = torch.tensor([[1.0, 2.0, 3.0]])
    weights = masked_softmax(scores, torch.tensor([[False, True, False]]))
    assert weights[0, 1].item() == 0.0
    torch.testing.assert_close(weights[0, [0, 2]], torch.softmax(torch.tensor([1.0, 3.0]), 0))


def test_dot_scores_need_matching_sizes() -> None:
    with pytest.raises(ValueError, match="query_dim == memory_dim"):
        Attention("dot", query_dim=4, memory_dim=8)
    with pytest.raises(ValueError, match="unknown score"):
        Attention("banana", query_dim=4, memory_dim=4)
