"""The ``tiny`` policy preset: a model that exists offline.

A byte-level BPE tokenizer trained with ``tokenizers`` on the arena's own text (tool schemas of the
environments, requests, tool results, answers) and a small ``LlamaForCausalLM`` from a config, both saved
with ``save_pretrained`` and a chat template, so ``AutoTokenizer`` / ``AutoModelForCausalLM`` (and vLLM,
verl) load the folder unchanged. Its weights start random: it learns the arena's tasks by SFT, then GRPO.

The chat template renders OpenAI-format messages (system, user, assistant with ``tool_calls``, tool) and
the tools compactly, one ``name(arg, optional_arg?)`` line each; an assistant turn is its content, then
one Hermes ``<tool_call>{...}</tool_call>`` per call, then ``<|end|>`` (the end-of-sequence token).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

END, PAD = "<|end|>", "<|pad|>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]
CALL_TOKENS = ["<tool_call>", "</tool_call>"]

CHAT_TEMPLATE = (
    "{%- set cut = tool_result_chars | default(TOOL_CHARS) -%}"
    "{%- macro tool_lines(tools) -%}"
    "{%- for tool in tools -%}{%- set f = tool.function if tool.function is defined else tool -%}"
    "{{ '\\n' }}{{ f.name }}("
    "{%- set params = f.parameters if f.parameters is defined else {} -%}"
    "{%- set props = params.properties if params.properties is defined else {} -%}"
    "{%- set required = params.required if params.required is defined else [] -%}"
    "{%- for name in required -%}{{ name }}{{ '' if loop.last else ', ' }}{%- endfor -%}"
    "{%- if props | length > required | length -%}{{ ', ' if required else '' }}...{%- endif -%})"
    "{%- endfor -%}"
    "{%- endmacro -%}"
    "{%- set rest = messages -%}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "<|system|>{{ messages[0].content }}"
    "{%- if tools %}{{ '\\n' }}Tools:{{ tool_lines(tools) }}{% endif %}<|end|>"
    "{%- set rest = messages[1:] -%}"
    "{%- elif tools -%}<|system|>Tools:{{ tool_lines(tools) }}<|end|>"
    "{%- endif -%}"
    "{%- for m in rest -%}"
    "{%- if m.role == 'assistant' -%}<|assistant|>{{ m.content or '' }}"
    "{%- for call in m.tool_calls or [] -%}"
    "{%- set f = call.function if call.function is defined else call -%}"
    '<tool_call>{"name": "{{ f.name }}", "arguments": '
    "{{ f.arguments if f.arguments is string else f.arguments | tojson }}}</tool_call>"
    "{%- endfor -%}<|end|>"
    "{%- else -%}{%- set text = m.content if m.content is string else m.content | tojson -%}"
    "<|{{ m.role }}|>{{ text[:cut] if m.role == 'tool' else text }}<|end|>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)


@dataclass(frozen=True)
class TinySize:
    """The tokenizer's vocabulary and the Llama config's shape."""

    vocab_size: int = 2048
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    max_position_embeddings: int = 2048
    tool_result_chars: int = 300  # the template shows the model this much of each tool result


def chat_template(tool_result_chars: int) -> str:
    """The tiny chat template, showing the first ``tool_result_chars`` characters of each tool result
    (unless the render variable of that name says otherwise)."""
    return CHAT_TEMPLATE.replace("TOOL_CHARS", str(tool_result_chars))


def train_tokenizer(
    corpus: Iterable[str], vocab_size: int, tool_result_chars: int
) -> PreTrainedTokenizerFast:
    """A byte-level BPE (digits split one by one) trained on ``corpus``, with the chat template set."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    specials = [PAD, END, *ROLE_TOKENS]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials + CALL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=END,
        pad_token=PAD,
        additional_special_tokens=ROLE_TOKENS,
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(CALL_TOKENS)  # plain added tokens: kept by decode(skip_special_tokens=True)
    fast.chat_template = chat_template(tool_result_chars)
    return fast


def tiny_model(tokenizer: PreTrainedTokenizerFast, size: TinySize, seed: int = 0) -> LlamaForCausalLM:
    """A randomly initialised ``LlamaForCausalLM`` of ``size`` for ``tokenizer``."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden_size,
        intermediate_size=size.intermediate_size,
        num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads,
        num_key_value_heads=size.num_attention_heads,
        max_position_embeddings=size.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = None
    return model


def tool_corpus(tools: Iterable[dict[str, Any]]) -> Iterator[str]:
    """Text of OpenAI function tools: names, descriptions, parameter names and their descriptions."""
    for tool in tools:
        function = tool.get("function", tool)
        yield f"{function['name']}: {function.get('description', '')}"
        yield json.dumps(function.get("parameters", {}))


def conversation_corpus(conversations: Iterable[list[dict[str, Any]]]) -> Iterator[str]:
    """Text of OpenAI-format conversations: every message's content and every call's arguments."""
    for messages in conversations:
        for message in messages:
            if isinstance(message.get("content"), str):
                yield message["content"]
            for call in message.get("tool_calls") or []:
                yield json.dumps(
                    {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}
                )


def build_tiny(
    out_dir: str | Path, corpus: Iterable[str], size: TinySize | None = None, seed: int = 0
) -> Path:
    """Train the tokenizer on ``corpus``, build the model, save both (Hugging Face format) in ``out_dir``."""
    size = size or TinySize()
    out = Path(out_dir)
    tokenizer = train_tokenizer(corpus, size.vocab_size, size.tool_result_chars)
    model = tiny_model(tokenizer, size, seed)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "tiny_size.json").write_text(json.dumps(asdict(size)))
    return out
