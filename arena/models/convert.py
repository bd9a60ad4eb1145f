"""A GGUF file -> a Hugging Face folder (model, tokenizer, tool-rendering chat template), written to a
temporary folder and renamed into place: a failure never leaves half a model behind."""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from arena.models.chat_template import TOOL_RESULT_CHARS, chatml_tools_template

TEMPLATE_INFO = "arena_template.json"
TEMPLATE_VERSION = 2
"""Raised when the template changes; an older conversion is converted again on first use (version 2: the
tool-result cut became a render variable, its default 1,000 characters instead of 400)."""


class ModelError(RuntimeError):
    """A model file or folder that cannot be used (corrupt, truncated, no room, no tool rendering); its
    message is one line, whatever the library errors it quotes."""

    def __str__(self) -> str:
        return " ".join(super().__str__().split())


PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_item",
            "description": "Get an item by id.",
            "parameters": {"type": "object", "properties": {"item_id": {"type": "integer"}}},
        },
    }
]
PROBE_MESSAGES = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "What is item 7 called?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "get_item", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c0", "content": '{"id": 7, "name": "lamp"}'},
    {"role": "assistant", "content": '{"name": "lamp"}'},
]


def check_template(tokenizer: PreTrainedTokenizerBase) -> None:
    """Raise ``ModelError`` unless the chat template renders the tool list, a tool call and a tool
    result, and renders every prefix of a conversation as a prefix of the whole."""

    def render(messages: list[dict], prompt: bool) -> str:
        return tokenizer.apply_chat_template(
            messages, tools=PROBE_TOOLS, tokenize=False, add_generation_prompt=prompt
        )

    try:
        whole = render(PROBE_MESSAGES, False)
        prefixes = [render(PROBE_MESSAGES[:i], PROBE_MESSAGES[i]["role"] == "assistant") for i in range(1, 5)]
    except Exception as exc:  # a template error of any kind: the template cannot be used
        raise ModelError(f"the chat template cannot render a tool conversation: {exc}") from None
    missing = [part for part in ("get_item", '"arguments"', '"lamp"') if part not in whole]
    if missing:
        raise ModelError(f"the chat template does not render tools, tool calls or results (no {missing[0]})")
    if not all(whole.startswith(prefix) for prefix in prefixes):
        raise ModelError("the chat template does not render a conversation as a prefix of its sequel")


@contextmanager
def quiet_progress_bars() -> Iterator[None]:
    """Transformers' progress bars (some plain ``tqdm``, which its logging switch does not reach) kept out
    of the output: the fetch reports its own progress, one line a step. Errors still raise."""
    hf_logging.disable_progress_bar()
    try:
        with redirect_stderr(io.StringIO()):
            yield
    finally:
        hf_logging.enable_progress_bar()


def convert_gguf(
    gguf: Path,
    target: Path,
    *,
    eos_token: str,
    pad_token: str,
    tool_result_chars: int = TOOL_RESULT_CHARS,
) -> Path:
    """Dequantize ``gguf`` into a float32 Hugging Face folder at ``target`` with the arena's chat template
    (``arena.models.chat_template``) and the given end-of-turn and padding tokens."""
    gguf = Path(gguf)
    if not gguf.is_file():
        raise ModelError(f"no GGUF file at {gguf}")
    try:
        with quiet_progress_bars():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            )
    except Exception as exc:  # the gguf reader raises many kinds of error on a damaged file
        raise ModelError(f"{gguf.name} is not a readable GGUF model (corrupt or truncated?): {exc}") from None
    tokenizer.clean_up_tokenization_spaces = False  # a BPE tokenizer: cleaning would only warn on every load
    vocabulary = tokenizer.get_vocab()
    for token in (eos_token, pad_token):
        if token not in vocabulary:
            raise ModelError(f"{gguf.name}: its vocabulary has no {token!r} token")
    tokenizer.eos_token, tokenizer.pad_token = eos_token, pad_token
    tokenizer.chat_template = chatml_tools_template(tool_result_chars)
    check_template(tokenizer)
    for config in (model.config, model.generation_config):
        config.eos_token_id = tokenizer.eos_token_id
        config.pad_token_id = tokenizer.pad_token_id
    scratch: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        with quiet_progress_bars():
            model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        info = {
            "source": gguf.name,
            "template": TEMPLATE_VERSION,
            "tool_result_chars": tool_result_chars,
        }
        (scratch / TEMPLATE_INFO).write_text(json.dumps(info))
        if target.exists():
            shutil.rmtree(target)
        scratch.rename(target)
    except (OSError, SafetensorError) as exc:  # safetensors reports a full disk as its own error
        raise ModelError(f"could not write the converted model under {target.parent}: {exc}") from None
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return target
