"""A tiny Hugging Face policy built at test time (no downloads) and a library conversation for it to learn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arena.policies.tiny import TinySize, build_tiny, conversation_corpus, tool_corpus
from arena.rollout.episode import SYSTEM_PROMPT, EpisodeSession, tool_specs
from task_synth.model import FieldRule, Rubric, Task, TaskKind, Verifier

SIZE = TinySize(
    vocab_size=700,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    max_position_embeddings=2048,
)
REQUEST = 'How many copies of book 1 exist? Reply with a JSON object with the key "copies".'


async def book_conversation(
    session: EpisodeSession,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Task]:
    """The reference conversation of a one-call library task, with the real tool result, its tools and
    the task (its rubric holds the real copy count)."""
    tools = tool_specs(await session.list_tools())
    result = await session.call_tool("get_book", {"book_id": 1})
    book = result.structured_content or json.loads(result.content[0].text)
    copies = len(book["copies"]) if isinstance(book.get("copies"), list) else book["copies"]
    call = {
        "id": "call_2_0",
        "type": "function",
        "function": {"name": "get_book", "arguments": '{"book_id": 1}'},
    }
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": REQUEST},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_2_0", "content": json.dumps(book)},
        {"role": "assistant", "content": json.dumps({"copies": copies})},
    ]
    task = Task(
        env="library",
        env_version="test",
        kind=TaskKind.GRAPH,
        request=REQUEST,
        difficulty=1,
        verifier=Verifier(rubric=Rubric(fields={"copies": FieldRule(type="integer", value=copies)})),
    ).with_id()
    return messages, tools, task


def tiny_dir(out: Path, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Path:
    """A tiny model (random weights) and a tokenizer trained on the conversation and the tools."""
    corpus = [SYSTEM_PROMPT, *tool_corpus(tools), *conversation_corpus([messages])]
    return build_tiny(out, corpus, SIZE)
