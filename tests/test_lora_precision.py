"""The local trainer's LoRA option (only the adapters train; checkpoints hold merged plain weights) and the
precision rule (bf16 autocast only where the processor has native bfloat16)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from arena.policies.precision import autocast, cast_linear_copy, native_bf16, resolve_precision
from arena.rollout.episode import SYSTEM_PROMPT
from tests.hf_samples import REQUEST, tiny_dir
from trainers.local import GRPOTrainer, SFTExample, TrainerConfig

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_book",
            "description": "Get a book by id.",
            "parameters": {"type": "object", "properties": {"book_id": {"type": "integer"}}},
        },
    }
]
CALL = {"id": "c0", "type": "function", "function": {"name": "get_book", "arguments": '{"book_id": 1}'}}
MESSAGES = [
    {"role": "system", "content": SYSTEM_PROMPT},
    {"role": "user", "content": REQUEST},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c0", "content": json.dumps({"id": 1, "copies": 3})},
    {"role": "assistant", "content": '{"copies": 3}'},
]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_dir(tmp_path_factory.mktemp("tiny"), MESSAGES, TOOLS)


def test_lora_trains_only_adapters_and_saves_merged_plain_weights(base: Path, tmp_path: Path) -> None:
    config = TrainerConfig(epochs=20, sft_lr=1e-2, sft_batch_size=1, lora_rank=4, lora_alpha=8)
    trainer = GRPOTrainer(base, config)
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in trainer.model.parameters())
    assert 0 < trainable < total / 4
    frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    metrics = trainer.sft([SFTExample(MESSAGES, TOOLS)])
    assert metrics["epoch_loss"][-1] < 0.9 * metrics["epoch_loss"][0], metrics["epoch_loss"]
    assert all(torch.equal(p, frozen[n]) for n, p in trainer.model.named_parameters() if not p.requires_grad)

    saved = trainer.save(tmp_path / "ckpt")
    assert not (saved / "adapter_config.json").exists()  # a plain Hugging Face folder
    plain = AutoModelForCausalLM.from_pretrained(saved)
    ids = torch.tensor([trainer.tokenizer.encode(REQUEST)])
    with torch.no_grad():
        assert torch.allclose(plain(input_ids=ids).logits, trainer.model(input_ids=ids).logits, atol=1e-4)

    resumed = GRPOTrainer.resume(saved)  # fresh adapters on the merged weights: the same function
    with torch.no_grad():
        assert torch.allclose(resumed.model(input_ids=ids).logits, plain(input_ids=ids).logits, atol=1e-4)


def test_auto_precision_is_bf16_only_where_native_and_bad_names_are_refused() -> None:
    assert resolve_precision("auto", "cpu") == ("bf16" if native_bf16("cpu") else "fp32")
    assert resolve_precision("fp32", "cpu") == "fp32" and resolve_precision("bf16", "cpu") == "bf16"
    with pytest.raises(ValueError, match="precision must be one of"):
        resolve_precision("fp16", "cpu")
    assert isinstance(autocast("fp32", "cpu"), contextlib.nullcontext)
    with autocast("bf16", "cpu"):
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.is_autocast_enabled("cpu")


def _prefill_outputs(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=ids, use_cache=True)
    layer = out.past_key_values.layers[-1]
    return out.logits, layer.keys, layer.values


@pytest.mark.parametrize("lora", [False, True])
def test_the_cast_linear_copy_prefills_bit_for_bit_as_autocast_on_the_float32_model(
    base: Path, lora: bool
) -> None:
    """Under bf16 autocast, linear layers with bfloat16 weights compute what the float32 weights cast at
    each call compute; the tied output head is untied in the copy, so the embeddings stay float32."""
    trainer = GRPOTrainer(base, TrainerConfig(lora_rank=4 if lora else 0))
    model = trainer.model
    ids = torch.randint(3, 100, (1, 37), generator=torch.Generator().manual_seed(0))
    copy_ = cast_linear_copy(model)
    pairs = zip(_prefill_outputs(model, ids), _prefill_outputs(copy_, ids), strict=True)
    assert all(x.equal(y) for x, y in pairs)
    head, embeddings = copy_.get_output_embeddings(), copy_.get_input_embeddings()
    assert head.weight.dtype == torch.bfloat16 and embeddings.weight.dtype == torch.float32
    assert not any(p.requires_grad for p in copy_.parameters())
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the original is left alone
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
