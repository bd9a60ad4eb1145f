"""Grouped-query attention without copying keys and values: torch's SDPA with ``enable_gqa``.

transformers' ``sdpa`` attention passes ``enable_gqa`` only where no attention mask is given
(integrations/sdpa_attention.py, ``use_gqa_in_sdpa``); with a padding mask, as in every batched
generation here, it first repeats each key/value head ``num_key_value_groups`` times. On a CPU that copy
and the masked kernel that follows dominate a decode step: for SmolLM2-135M (9 query heads, 3 key/value
heads) a decode step of 16 rows over about 1,050 tokens took 2,502 ms that way and 433 ms with
``enable_gqa``, the greedy ids equal (``benchmarks/generation.py``, torch 2.13, a loaded 2-core machine).
Registered as the attention implementation ``sdpa_gqa``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AttentionInterface, AutoModelForCausalLM, PreTrainedModel
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

GQA_SDPA = "sdpa_gqa"


def sdpa_gqa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **_: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``(batch, heads, length, dim)`` in, ``(batch, length,
    heads, dim)`` out; the causal flag only where no mask is given and more than one query (as ``sdpa``).
    A decode step (one query a row) under a mask takes ``decode_attention``."""
    if query.shape[2] == 1 and attention_mask is not None and not (module.training and dropout):
        return decode_attention(query, key, value, attention_mask, scaling), None
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    output = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=bool(query.shape[2] > 1 and attention_mask is None and causal),
        enable_gqa=query.shape[1] != key.shape[1],
    )
    return output.transpose(1, 2).contiguous(), None


def decode_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor,
    scaling: float | None,
) -> torch.Tensor:
    """One query per row against its keys, as two batched matrix products over each key/value head's
    group of query heads (no copy of the keys). SDPA's CPU kernel is built for blocks of queries: for one
    layer of SmolLM2-135M (9 query, 3 key/value heads), 32 rows over 800 keys in fp32, 1.6 ms against
    1.1 ms here; a whole decode step of 32 padded rows over 800 cached tokens 156 against 147 ms
    (2 cores). The outputs agree within 1e-6. ``attention_mask``: boolean (True attends) or additive."""
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)
    scores = torch.matmul(grouped, key.transpose(-1, -2)) * (dim**-0.5 if scaling is None else scaling)
    mask = attention_mask.reshape(attention_mask.shape[0], 1, 1, -1)  # (batch, 1, 1, keys): one query
    scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    return torch.matmul(weights, value).reshape(batch, 1, heads, dim)


AttentionInterface.register(GQA_SDPA, sdpa_gqa_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(GQA_SDPA, sdpa_mask)


def load_causal_lm(path: str | Path, device: str | torch.device = "cpu") -> PreTrainedModel:
    """The causal LM at ``path`` on ``device`` in float32 (the master weights: bf16 is an autocast, see
    ``arena.policies.precision``), whatever ``dtype`` its config names (verl's exports say bfloat16
    over float32 tensors), its attention ``sdpa_gqa``."""
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=GQA_SDPA, dtype=torch.float32)
    return model.to(device)
