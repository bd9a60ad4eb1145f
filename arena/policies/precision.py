"""Which float format a local model computes in: bfloat16 autocast where the processor has native
bfloat16 arithmetic (AMX or AVX-512 BF16 on a CPU; a CUDA device that supports it), float32 elsewhere.

Without native support bfloat16 is emulated and many times slower than float32 (measured on an AVX2-only
CPU: a 2048x576x1536 matrix product at 0.9 GFLOP/s in bfloat16 vs 24 in float32), so ``auto`` never
picks it there."""

from __future__ import annotations

import contextlib
import copy
from contextlib import AbstractContextManager

import torch

PRECISIONS = ("auto", "bf16", "fp32")


def native_bf16(device: str) -> bool:
    """Whether ``device`` ("cpu", "cuda", "cuda:0") has native bfloat16 arithmetic."""
    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    checks = (
        getattr(torch.cpu, "_is_amx_tile_supported", None),
        getattr(torch.cpu, "_is_avx512_bf16_supported", None),
    )
    return any(check is not None and check() for check in checks)


def resolve_precision(precision: str, device: str) -> str:
    """``auto`` -> ``bf16`` where native, else ``fp32``; ``bf16`` / ``fp32`` as asked."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    return precision


def autocast(precision: str, device: str) -> AbstractContextManager:
    """The autocast context for a resolved ``precision`` on ``device`` (a no-op for ``fp32``)."""
    if precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(device.split(":")[0], dtype=torch.bfloat16)


def cast_linear_copy(model: torch.nn.Module, dtype: torch.dtype = torch.bfloat16) -> torch.nn.Module:
    """A frozen copy of ``model`` whose linear layers hold their weights in ``dtype`` already, for
    inference under ``dtype`` autocast: autocast casts a float32 weight to ``dtype`` again at every call
    (on a CPU about 25 ms of a 180 ms prefill of SmolLM2-135M, and more than the whole float32 step in a
    decode step), a ``dtype`` weight not at all, and the products are the same bit for bit. Everything
    else (embeddings, norms) stays as it is, so an output head tied to the embeddings is untied in the
    copy. Build a new one when ``model``'s weights change."""
    copy_ = copy.deepcopy(model).eval()
    copy_.requires_grad_(False)
    for module in copy_.modules():
        if isinstance(module, torch.nn.Linear):
            module.weight = torch.nn.Parameter(module.weight.detach().to(dtype), requires_grad=False)
    return copy_
