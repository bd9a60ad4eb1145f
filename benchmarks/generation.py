"""Batched generation on the pretrained policy: decode-step and prefill time with transformers' ``sdpa``
attention (the baseline) and the arena's ``sdpa_gqa`` (arena/policies/attention.py), on the same batch.

Usage: python benchmarks/generation.py [--rows 16] [--context 1200] [--new 32] [--model NAME_OR_DIR]

Each row is ``context`` token ids drawn with a fixed seed, left-padded by up to a quarter of ``context``
(rows differ in length, as episodes do, so a padding mask is always given). Both implementations generate
``new`` tokens greedily with ``arena.policies.generation.generate``; every forward call is timed: the first
``rows`` are the rows' prefills (each row alone, unpadded), the rest decode steps of all rows. The greedy
ids must be equal.

Then rows that end at different lengths (row ``i`` may generate ``new * (i + 1) // rows`` tokens, as an
evaluation's turns end: a short tool call beside a long answer): the decode time of the whole call with
finished rows dropped from the batch (the default) against kept in it until the last row ends
(``drop_finished=False``, the baseline), with ``sdpa_gqa``; the ids must be equal.

Where the CPU has native bfloat16 (``arena.policies.precision``): the same call on the copy the HF policy
generates on under bf16 (``cast_linear_copy``: linear weights cast to bfloat16 once, decode steps under
autocast, the cache and attention float32) against the float32 model (the baseline); with the share of
rows whose greedy ids equal float32's. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import AbstractContextManager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel  # noqa: E402

from arena.models.fetch import resolve  # noqa: E402
from arena.policies.attention import load_causal_lm  # noqa: E402
from arena.policies.generation import GenerationRequest, Sampling, generate  # noqa: E402
from arena.policies.precision import cast_linear_copy, native_bf16  # noqa: E402
from benchmarks.stats import Row, print_table  # noqa: E402


def run(
    model: PreTrainedModel,
    requests: list[GenerationRequest],
    sampling: Sampling,
    drop_finished: bool = True,
    precision: AbstractContextManager | None = None,
) -> tuple[list, list[float]]:
    """The generated ids and the wall time (ms) of every forward call of ``model`` during the call."""
    samples: list[float] = []
    start: list[float] = []
    hooks = [
        model.register_forward_pre_hook(lambda *_: start.append(time.perf_counter())),
        model.register_forward_hook(lambda *_: samples.append((time.perf_counter() - start.pop()) * 1000)),
    ]
    try:
        results = generate(model, requests, sampling, precision, drop_finished=drop_finished)
    finally:
        for hook in hooks:
            hook.remove()
    return [r.ids for r in results], samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--context", type=int, default=1200)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    path = resolve(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    generator = torch.Generator().manual_seed(0)
    vocab = tokenizer.vocab_size
    requests = []
    for _ in range(args.rows):
        length = args.context - int(torch.randint(0, args.context // 4 + 1, (1,), generator=generator))
        ids = torch.randint(100, vocab, (length,), generator=generator).tolist()
        requests.append(GenerationRequest(ids, None, args.new))
    eos = tokenizer.eos_token_id
    sampling = Sampling(0.0, 1.0, eos_token_id=-1, pad_token_id=eos)  # never stops early: every step timed
    baseline = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa")
    base_ids, base_calls = run(baseline, requests, sampling)
    del baseline
    model = load_causal_lm(path)
    gqa_ids, gqa_calls = run(model, requests, sampling)
    base_prefill, base_ms = sum(base_calls[: args.rows]), base_calls[args.rows :]
    gqa_prefill, gqa_ms = sum(gqa_calls[: args.rows]), gqa_calls[args.rows :]
    equal = base_ids == gqa_ids
    rows = [
        Row.from_samples(
            "decode step",
            gqa_ms,
            target="",
            baseline_name="sdpa",
            baseline=sorted(base_ms)[len(base_ms) // 2],
        ),
        Row("prefill (all rows)", gqa_prefill, baseline_name="sdpa", baseline=base_prefill),
    ]
    print_table(
        f"generation: {args.rows} rows x ~{args.context} tokens, {args.new} new tokens",
        rows,
    )
    decode_gqa, decode_base = rows[0].p50 or 0.0, rows[0].baseline or 0.0
    uneven = [
        GenerationRequest(r.tokens, None, max(1, args.new * (i + 1) // args.rows))
        for i, r in enumerate(requests)
    ]
    drop_ids, drop_calls = run(model, uneven, sampling)
    keep_ids, keep_calls = run(model, uneven, sampling, drop_finished=False)
    drop_ms, keep_ms = sum(drop_calls[args.rows :]), sum(keep_calls[args.rows :])
    print_table(
        f"rows ending at 1/{args.rows} .. all of {args.new} new tokens: decode of the whole call",
        [Row("decode, finished rows dropped", drop_ms, baseline_name="kept", baseline=keep_ms)],
    )
    precision: dict[str, float | None] = {"decode_step_ms_bf16": None, "bf16_ids_equal_share": None}
    if native_bf16("cpu"):
        bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
        bf16_ids, bf16_calls = run(cast_linear_copy(model), requests, sampling, precision=bf16)
        bf16_rows = [
            Row.from_samples(
                "decode step, bf16 linear weights",
                bf16_calls[args.rows :],
                baseline_name="float32",
                baseline=decode_gqa,
            ),
            Row(
                "prefill (all rows), bf16",
                sum(bf16_calls[: args.rows]),
                baseline_name="float32",
                baseline=gqa_prefill,
            ),
        ]
        print_table(f"the HF policy's bf16 copy (native bf16), {args.rows} rows", bf16_rows)
        same = sum(a == b for a, b in zip(bf16_ids, gqa_ids, strict=True)) / len(gqa_ids)
        precision = {"decode_step_ms_bf16": round(bf16_rows[0].p50 or 0.0, 1), "bf16_ids_equal_share": same}
    else:
        print("no native bfloat16 on this CPU: the bf16 / float32 comparison is skipped")
    print(
        json.dumps(
            {
                "rows": args.rows,
                "context": args.context,
                "new_tokens": args.new,
                "decode_step_ms_sdpa": round(decode_base, 1),
                "decode_step_ms_sdpa_gqa": round(decode_gqa, 1),
                "decode_p99_ms_sdpa_gqa": round(rows[0].p99 or 0.0, 1),
                "decode_speedup": round(decode_base / decode_gqa, 2) if decode_gqa else None,
                "prefill_ms_sdpa": round(base_prefill, 1),
                "prefill_ms_sdpa_gqa": round(gqa_prefill, 1),
                "greedy_ids_equal": equal,
                "uneven_decode_ms_dropped": round(drop_ms, 1),
                "uneven_decode_ms_kept": round(keep_ms, 1),
                "uneven_decode_speedup": round(keep_ms / drop_ms, 2) if drop_ms else None,
                "uneven_ids_equal": drop_ids == keep_ids,
            }
            | precision
        )
    )


if __name__ == "__main__":
    main()
