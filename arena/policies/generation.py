"""Batched sampling with reused keys and values: each request brings the cache of the tokens before it.

An episode's first turn starts from the cached system prompt and tool list of its environment (computed
once per policy and weights, ``PrefixCache``); every later turn starts from the cache its previous turn left,
so only the tokens a turn adds (a tool result, the generation prompt) go through the model. Rows of a batch
have caches and new tokens of different lengths: each row is laid out as ``[pad | its cache | pad | its new
tokens]`` with the pads masked out and its own position ids, so one forward pass serves them all.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.generation.logits_process import TopPLogitsWarper

DECODE_THREADS = 1
"""Intra-op threads for the one-token decode steps. Each step is hundreds of small operations; while the
environments, Ray and the event loop share the cores, a second thread mostly waits at barriers (measured
on the 2-core CI machine during an evaluation: 0.29 s per step of 16 rows with one thread, 0.94 s with
two). The prefill of a batch keeps torch's thread count."""

LayerKV = tuple[torch.Tensor, torch.Tensor]
"""One layer's keys and values for one sequence: ``[heads, length, head_dim]`` each."""
KV = tuple[LayerKV, ...]


def kv_length(cache: KV | None) -> int:
    return 0 if not cache else int(cache[0][0].shape[1])


@dataclass
class GenerationRequest:
    """Continue a sequence: ``tokens`` not seen yet, after the ``cache`` of everything before them."""

    tokens: list[int]
    cache: KV | None
    max_new_tokens: int


@dataclass
class GenerationResult:
    """The generated ids, their sampling log-probs, whether EOS ended them, and the cache of every token
    fed to the model (the request's cache, its tokens, the generated ids but the last)."""

    ids: list[int]
    logprobs: list[float]
    stopped: bool
    cache: KV


@dataclass(frozen=True)
class Sampling:
    """Temperature 0 is greedy; the ids of the end-of-sequence and padding tokens."""

    temperature: float
    top_p: float
    eos_token_id: int
    pad_token_id: int


def _batch_cache(caches: Sequence[KV | None], width: int, like: torch.Tensor) -> DynamicCache | None:
    """Per-layer ``[batch, heads, width, head_dim]`` tensors with each row's cache right-aligned."""
    if width == 0:
        return None
    template = next(c for c in caches if c)
    layers = []
    for layer, (keys, values) in enumerate(template):
        shape = (len(caches), keys.shape[0], width, keys.shape[2])
        batch_keys = torch.zeros(shape, dtype=keys.dtype, device=like.device)
        batch_values = torch.zeros(shape, dtype=values.dtype, device=like.device)
        for row, cache in enumerate(caches):
            if cache:
                length = kv_length(cache)
                batch_keys[row, :, width - length :] = cache[layer][0]
                batch_values[row, :, width - length :] = cache[layer][1]
        layers.append((batch_keys, batch_values))
    return DynamicCache(ddp_cache_data=layers)


def _row_cache(cache: DynamicCache, row: int, keep: torch.Tensor) -> KV:
    """Row ``row`` of a batch cache at the positions ``keep`` (pads and unfed tokens dropped)."""
    return tuple(
        (layer.keys[row][:, keep].clone(), layer.values[row][:, keep].clone()) for layer in cache.layers
    )


@torch.inference_mode()
def generate(
    model: PreTrainedModel,
    requests: Sequence[GenerationRequest],
    sampling: Sampling,
    precision: AbstractContextManager | None = None,
) -> list[GenerationResult]:
    """Sample a continuation of every request, together, reusing each request's cache."""
    device = next(model.parameters()).device
    batch = len(requests)
    cached = [kv_length(r.cache) for r in requests]
    cache_width, width = max(cached), max(len(r.tokens) for r in requests)
    ids = torch.full((batch, width), sampling.pad_token_id, dtype=torch.long)
    mask = torch.zeros((batch, cache_width + width), dtype=torch.long)
    positions = torch.zeros((batch, width), dtype=torch.long)
    for row, request in enumerate(requests):
        length = len(request.tokens)
        ids[row, width - length :] = torch.tensor(request.tokens)
        mask[row, cache_width - cached[row] : cache_width] = 1
        mask[row, cache_width + width - length :] = 1
        positions[row, width - length :] = torch.arange(cached[row], cached[row] + length)
    ids, mask, positions = ids.to(device), mask.to(device), positions.to(device)
    past = _batch_cache([r.cache for r in requests], cache_width, ids)
    limits = torch.tensor([r.max_new_tokens for r in requests], device=device)
    warp = TopPLogitsWarper(sampling.top_p) if sampling.temperature > 0 and sampling.top_p < 1 else None
    generated: list[torch.Tensor] = []
    logprobs: list[torch.Tensor] = []
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    steps = 0
    model.eval()
    threads = torch.get_num_threads()
    try:
        while True:
            with precision or contextlib.nullcontext():
                out = model(
                    input_ids=ids,
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=past,
                    use_cache=True,
                    logits_to_keep=1,
                )
            past = out.past_key_values
            logits = out.logits[:, -1].float()
            if sampling.temperature > 0:
                scaled = logits / sampling.temperature
                probs = torch.softmax(warp(ids, scaled) if warp else scaled, dim=-1)
                token = torch.multinomial(probs, 1).squeeze(-1)
            else:
                scaled = logits
                token = scaled.argmax(-1)
            chosen = torch.log_softmax(scaled, dim=-1).gather(-1, token[:, None]).squeeze(-1)
            token = torch.where(done, sampling.pad_token_id, token)
            generated.append(token)
            logprobs.append(chosen)
            steps += 1
            done |= (token == sampling.eos_token_id) | (steps >= limits)
            if bool(done.all()):
                break
            ids = token[:, None]
            torch.set_num_threads(min(threads, DECODE_THREADS))
            positions = positions[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype, device=device)], dim=1)
    finally:
        torch.set_num_threads(threads)
    tokens = torch.stack(generated, dim=1).cpu()
    scores = torch.stack(logprobs, dim=1).float().cpu()
    results = []
    fed_prefix = mask[:, : cache_width + width].cpu().bool()
    for row, request in enumerate(requests):
        row_ids = tokens[row, : request.max_new_tokens].tolist()
        stopped = sampling.eos_token_id in row_ids
        end = row_ids.index(sampling.eos_token_id) + 1 if stopped else len(row_ids)
        keep = torch.cat([fed_prefix[row].nonzero().squeeze(-1), torch.arange(end - 1) + cache_width + width])
        results.append(
            GenerationResult(
                row_ids[:end], scores[row, :end].tolist(), stopped, _row_cache(past, row, keep.to(device))
            )
        )
    return results


class PrefixCache:
    """Keys and values of shared prompt prefixes (an environment's system prompt and tool list), computed
    once each; ``clear`` when the weights change. The ``capacity`` most recent prefixes are kept."""

    def __init__(self, capacity: int = 16) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[int, ...], KV] = OrderedDict()
        self.hits = self.misses = 0

    def get(
        self, model: PreTrainedModel, prefix: Sequence[int], precision: AbstractContextManager | None = None
    ) -> KV:
        key = tuple(prefix)
        if key in self._entries:
            self.hits += 1
            self._entries.move_to_end(key)
            return self._entries[key]
        self.misses += 1
        device = next(model.parameters()).device
        model.eval()
        with torch.inference_mode(), precision or contextlib.nullcontext():
            out = model(input_ids=torch.tensor([list(key)], device=device), use_cache=True, logits_to_keep=1)
        cache: KV = tuple((layer.keys[0], layer.values[0]) for layer in out.past_key_values.layers)
        self._entries[key] = cache
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return cache

    def clear(self) -> None:
        self._entries.clear()
