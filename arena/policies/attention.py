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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AttentionInterface, AutoModelForCausalLM, PreTrainedModel
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

GQA_SDPA = "sdpa_gqa"


@dataclass
class SharedPrefixes:
    """Keys and values that several rows of a decode batch attend to before their own cache, each held
    once: ``caches[i]`` (per layer ``(keys, values)``, each ``[kv_heads, length, dim]``) comes before the
    batch cache of the rows ``rows[i]`` (indices into the batch). Passed to the model's forward call as
    ``shared_prefixes=``; only ``sdpa_gqa`` reads it (``supports_shared_prefixes``)."""

    caches: list[tuple[tuple[torch.Tensor, torch.Tensor], ...]]
    rows: list[torch.Tensor]


def supports_shared_prefixes(model: torch.nn.Module) -> bool:
    """Whether ``model`` attends with ``sdpa_gqa``, the one implementation that reads ``shared_prefixes``
    (any other would ignore them and attend to the rows' own caches alone)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == GQA_SDPA


def sdpa_gqa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    shared_prefixes: SharedPrefixes | None = None,
    **_: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``(batch, heads, length, dim)`` in, ``(batch, length,
    heads, dim)`` out; the causal flag only where no mask is given and more than one query (as ``sdpa``).
    A decode step (one query a row) under a mask or after ``shared_prefixes`` takes ``decode_attention``."""
    decoding = query.shape[2] == 1 and not (module.training and dropout)
    if shared_prefixes is not None and not decoding:
        raise ValueError("shared_prefixes are for decode steps (one query a row)")
    if decoding and (attention_mask is not None or shared_prefixes is not None):
        return decode_attention(
            query, key, value, attention_mask, scaling, shared_prefixes, module.layer_idx
        ), None
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
    attention_mask: torch.Tensor | None,
    scaling: float | None,
    shared: SharedPrefixes | None = None,
    layer: int = 0,
) -> torch.Tensor:
    """One query per row against its keys, as batched matrix products over each key/value head's group of
    query heads (no copy of the keys), and against its shared prefix (``shared``, layer ``layer``), one
    product for all the rows of a prefix: the prefix is read once, not once per row, and the two parts
    join in one softmax. SDPA's CPU kernel is built for blocks of queries: for one layer of SmolLM2-135M
    (9 query, 3 key/value heads), 32 rows over 800 keys in fp32, 1.6 ms against 1.1 ms here; a whole
    decode step of 32 padded rows over 800 cached tokens 156 against 147 ms (2 cores). The outputs agree
    within 1e-6. ``attention_mask`` (over the rows' own keys): boolean (True attends) or additive.
    It runs in the cache's precision (float32) even under bf16 autocast: autocast would cast every cached
    key and value of the batch to bfloat16 at every step of every layer."""
    with torch.autocast(query.device.type, enabled=False):  # in the cache's precision (see above)
        return _decode_attention(query.to(key.dtype), key, value, attention_mask, scaling, shared, layer).to(
            query.dtype
        )


def _decode_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
    shared: SharedPrefixes | None,
    layer: int,
) -> torch.Tensor:
    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    per_kv = heads // kv_heads
    grouped = query.reshape(batch, kv_heads, per_kv, dim)
    scale = dim**-0.5 if scaling is None else scaling
    scores = (torch.matmul(grouped, key.transpose(-1, -2)) * scale).float()
    if attention_mask is not None:
        mask = attention_mask.reshape(attention_mask.shape[0], 1, 1, -1)  # (batch, 1, 1, keys): one query
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    parts = []  # (rows, prefix values, their scores over its keys: [kv_heads, rows * per_kv, length])
    for cache, rows in zip(shared.caches if shared else [], shared.rows if shared else [], strict=True):
        prefix_keys, prefix_values = cache[layer]
        rows_query = grouped.index_select(0, rows).transpose(0, 1).reshape(kv_heads, -1, dim)
        parts.append(
            (rows, prefix_values, (torch.matmul(rows_query, prefix_keys.transpose(-1, -2)) * scale).float())
        )
    top = scores.amax(-1, keepdim=True)  # (batch, kv_heads, per_kv, 1)
    for rows, _, prefix_scores in parts:
        prefix_top = prefix_scores.amax(-1).reshape(kv_heads, len(rows), per_kv, 1).transpose(0, 1)
        top[rows] = torch.maximum(top[rows], prefix_top)
    weights = torch.exp(scores - top)
    total = weights.sum(-1, keepdim=True)
    out = torch.matmul(weights.to(value.dtype), value).float()  # (batch, kv_heads, per_kv, dim)
    for rows, prefix_values, prefix_scores in parts:
        rows_top = top.index_select(0, rows).transpose(0, 1).reshape(kv_heads, -1, 1)
        prefix_weights = torch.exp(prefix_scores - rows_top)
        prefix_out = torch.matmul(prefix_weights.to(prefix_values.dtype), prefix_values).float()
        out.index_add_(0, rows, prefix_out.reshape(kv_heads, len(rows), per_kv, dim).transpose(0, 1))
        prefix_total = prefix_weights.sum(-1, keepdim=True)
        total.index_add_(0, rows, prefix_total.reshape(kv_heads, len(rows), per_kv, 1).transpose(0, 1))
    return (out / total).to(query.dtype).reshape(batch, 1, heads, dim)


AttentionInterface.register(GQA_SDPA, sdpa_gqa_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(GQA_SDPA, sdpa_mask)


def load_causal_lm(path: str | Path, device: str | torch.device = "cpu") -> PreTrainedModel:
    """The causal LM at ``path`` on ``device`` in float32 (the master weights: bf16 is an autocast, see
    ``arena.policies.precision``), whatever ``dtype`` its config names (verl's exports say bfloat16
    over float32 tensors), its attention ``sdpa_gqa``."""
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=GQA_SDPA, dtype=torch.float32)
    return model.to(device)
