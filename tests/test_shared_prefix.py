"""The trainer's shared-prefix forward pass gives the hidden states and gradients of a plain padded pass."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from trainers.local.trainer import _padded, shared_prefix_hidden


def _model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    return LlamaForCausalLM(config)


def test_a_shared_prefix_runs_once_with_the_same_hidden_states_and_gradients() -> None:
    model = _model()
    prefix = [3, 7, 9, 11, 4, 5]
    sequences = [[*prefix, 8, 2, 6], [*prefix, 1], [*prefix, 9, 9, 9, 9, 3]]
    width = max(len(s) for s in sequences)
    shared = shared_prefix_hidden(model.get_decoder(), sequences, len(prefix), "cpu")
    ids = _padded(sequences, width, 0)
    attention = _padded([[1] * len(s) for s in sequences], width, 0)
    plain = model.get_decoder()(input_ids=ids, attention_mask=attention).last_hidden_state
    real = attention.bool()
    assert torch.allclose(shared[real], plain[real], atol=1e-5)
    grads = []
    for hidden in (shared, plain):
        model.zero_grad()
        hidden[real].pow(2).sum().backward(retain_graph=True)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-4), (grads[0] - grads[1]).abs().max()


def test_the_prefix_stops_before_the_shortest_prompt_ends() -> None:
    model = _model()
    same = [5, 6, 7, 8, 9, 10]
    hidden = shared_prefix_hidden(model.get_decoder(), [same, same], 3, "cpu")
    plain = model.get_decoder()(input_ids=torch.tensor([same])).last_hidden_state
    assert hidden.shape == (2, 6, 32)
    assert torch.allclose(hidden[1], plain[0], atol=1e-5)
