"""``sdpa_gqa`` attention computes what transformers' ``sdpa`` computes (which repeats key/value heads),
with a padding mask, in generation and in training, on a grouped-query model like SmolLM2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from arena.policies.attention import GQA_SDPA, SharedPrefixes, decode_attention, load_causal_lm
from arena.policies.generation import GenerationRequest, Sampling, generate


@pytest.fixture(scope="module")
def gqa_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # two query heads per key/value head
        max_position_embeddings=512,
    )
    folder = tmp_path_factory.mktemp("gqa")
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def _padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(3, 300, (3, 40), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :7] = 0  # left padding of different widths
    mask[2, :19] = 0
    return ids, mask


def test_gqa_attention_matches_sdpa_forward_and_backward(gqa_model: Path) -> None:
    plain = AutoModelForCausalLM.from_pretrained(gqa_model, attn_implementation="sdpa")
    grouped = load_causal_lm(gqa_model)
    assert grouped.config._attn_implementation == GQA_SDPA
    ids, mask = _padded_batch()
    logits = []
    for model in (plain, grouped):
        out = model(input_ids=ids, attention_mask=mask)
        out.logits[mask.bool()].logsumexp(-1).sum().backward()
        logits.append(out.logits[mask.bool()])
    torch.testing.assert_close(logits[0], logits[1], atol=1e-5, rtol=1e-5)
    grads = [dict(m.named_parameters()) for m in (plain, grouped)]
    for name, parameter in grads[0].items():
        torch.testing.assert_close(parameter.grad, grads[1][name].grad, atol=1e-5, rtol=1e-4)


def test_gqa_attention_generates_the_same_greedy_tokens(gqa_model: Path) -> None:
    plain = AutoModelForCausalLM.from_pretrained(gqa_model, attn_implementation="sdpa")
    grouped = load_causal_lm(gqa_model)
    ids, _ = _padded_batch()
    requests = [GenerationRequest(ids[row, : 40 - 9 * row].tolist(), None, 12) for row in range(3)]
    sampling = Sampling(0.0, 1.0, eos_token_id=-1, pad_token_id=0)
    results = [generate(model, requests, sampling) for model in (plain, grouped)]
    assert [r.ids for r in results[0]] == [r.ids for r in results[1]]
    for a, b in zip(*results, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_loaded_in_float32_whatever_the_config_says(gqa_model: Path, tmp_path: Path) -> None:
    """A checkpoint whose config names bfloat16 over float32 tensors (verl's Hugging Face export) loads
    with its exact float32 weights: transformers' default would round them to bfloat16."""
    model = AutoModelForCausalLM.from_pretrained(gqa_model, dtype=torch.float32)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config | {"dtype": "bfloat16"}))
    loaded = load_causal_lm(tmp_path)
    weights = loaded.state_dict()
    assert all(tensor.dtype == torch.float32 for tensor in weights.values())
    assert all(torch.equal(weights[name], tensor) for name, tensor in model.state_dict().items())


@pytest.mark.parametrize("additive", [False, True])
def test_decode_attention_matches_sdpa_for_one_query_a_row(additive: bool) -> None:
    """Rows of different padding, three query heads per key/value head: the decode path's two matrix
    products give SDPA's output (keys repeated per head), with a boolean or an additive mask."""
    generator = torch.Generator().manual_seed(2)
    query = torch.randn(4, 6, 1, 16, generator=generator)
    key, value = (torch.randn(4, 2, 30, 16, generator=generator) for _ in "kv")
    allowed = torch.ones(4, 1, 1, 30, dtype=torch.bool)
    allowed[1, ..., :5] = allowed[3, ..., :29] = False
    mask = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf")) if additive else allowed
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, key.repeat_interleave(3, dim=1), value.repeat_interleave(3, dim=1), attn_mask=allowed
    )
    got = decode_attention(query, key, value, mask, None)
    assert got.shape == (4, 1, 6, 16)
    assert torch.allclose(got, expected.transpose(1, 2), atol=1e-5)


def test_decode_attention_reads_shared_prefixes_as_keys_before_each_rows_own() -> None:
    """Rows 0 and 2 after one prefix, row 3 after another, row 1 after none: the same output as each
    row's prefix keys and values put before its own (padded, masked) ones."""
    generator = torch.Generator().manual_seed(3)
    query = torch.randn(4, 6, 1, 16, generator=generator)
    key, value = (torch.randn(4, 2, 30, 16, generator=generator) for _ in "kv")
    allowed = torch.ones(4, 1, 1, 30, dtype=torch.bool)
    allowed[0, ..., :4] = allowed[2, ..., :11] = False
    prefixes = [tuple(torch.randn(2, n, 16, generator=generator) for _ in "kv") for n in (9, 5)]
    rows = [[0, 2], [3]]
    shared = SharedPrefixes([(p,) for p in prefixes], [torch.tensor(r) for r in rows])
    got = decode_attention(query, key, value, allowed, None, shared, layer=0)
    for row in range(4):
        owner = next((i for i, members in enumerate(rows) if row in members), None)
        keys, values, mask = key[row : row + 1], value[row : row + 1], allowed[row : row + 1]
        if owner is not None:
            prefix_keys, prefix_values = prefixes[owner]
            keys = torch.cat([prefix_keys[None], keys], dim=2)
            values = torch.cat([prefix_values[None], values], dim=2)
            mask = torch.cat([torch.ones(1, 1, 1, prefix_keys.shape[1], dtype=torch.bool), mask], dim=-1)
        alone = decode_attention(query[row : row + 1], keys, values, mask, None)
        assert torch.allclose(got[row : row + 1], alone, atol=1e-5)


def test_decode_attention_stays_in_float32_under_bf16_autocast() -> None:
    """Autocast would cast every cached key to bfloat16 at each step; the decode path keeps the cache's
    precision (a bfloat16 query is computed against float32 keys in float32)."""
    generator = torch.Generator().manual_seed(4)
    query = torch.randn(3, 6, 1, 16, generator=generator)
    key, value = (torch.randn(3, 2, 20, 16, generator=generator) for _ in "kv")
    allowed = torch.ones(3, 1, 1, 20, dtype=torch.bool)
    allowed[1, ..., :6] = False
    plain = decode_attention(query, key, value, allowed, None)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = decode_attention(query, key, value, allowed, None)
    assert autocast.dtype == torch.float32 and torch.equal(autocast, plain)
