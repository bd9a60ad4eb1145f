"""An episode's conversation as the ``messages`` of a chat-completions request, in one of two tool formats.

``native``: tools go in the request's ``tools`` field and calls come back in ``tool_calls``. Every message
has string content (strict servers, llama.cpp's among them, refuse ``"content": null`` beside
``tool_calls``), and a tool message that answers no call of the assistant message before it (the arena's
format-error feedback) is sent as a user message, since strict servers refuse an orphan tool message.

``hermes``: for servers without native tool calls. The tools are listed in the system prompt in the
Hermes format, the model writes ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks in its
text, and tool results go back as ``<tool_response>`` blocks in user messages.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from arena.policies.base import tool_message_content

ToolFormat = Literal["native", "hermes"]

HERMES_TOOLS_PROMPT = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


def native_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation for a server with native tool calls (string content everywhere)."""
    wire: list[dict[str, Any]] = []
    answerable: set[str] = set()
    for message in messages:
        role = message["role"]
        if role == "assistant":
            calls = message.get("tool_calls") or []
            answerable = {call["id"] for call in calls}
            out: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
            if calls:
                out["tool_calls"] = calls
        elif role == "tool" and message.get("tool_call_id") in answerable:
            out = {"role": "tool", "tool_call_id": message["tool_call_id"]}
            out["content"] = tool_message_content(message)
        else:
            out = {"role": "user" if role == "tool" else role, "content": tool_message_content(message)}
        wire.append(out)
    return wire


def _hermes_call(call: dict[str, Any]) -> str:
    function = call["function"]
    try:
        arguments: Any = json.loads(function["arguments"])
    except ValueError:
        arguments = function["arguments"]
    return "<tool_call>\n" + json.dumps({"name": function["name"], "arguments": arguments}) + "\n</tool_call>"


def hermes_messages(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation for a server without native tool calls: tools in the system prompt, calls and
    results as tagged text (consecutive results merged into one user message)."""
    listed = "\n".join(json.dumps(tool) for tool in tools)
    wire: list[dict[str, Any]] = []
    for message in messages:
        role, text = message["role"], tool_message_content(message)
        if role == "system":
            wire.append({"role": "system", "content": text + HERMES_TOOLS_PROMPT.format(tools=listed)})
        elif role == "assistant":
            parts = [text] if text else []
            parts += [_hermes_call(call) for call in message.get("tool_calls") or []]
            wire.append({"role": "assistant", "content": "\n".join(parts)})
        elif role == "tool":
            response = f"<tool_response>\n{text}\n</tool_response>"
            if wire and wire[-1].get("tool_responses"):
                wire[-1]["content"] += "\n" + response
            else:
                wire.append({"role": "user", "content": response, "tool_responses": True})
        else:
            wire.append({"role": role, "content": text})
    if not wire or wire[0]["role"] != "system":
        wire.insert(0, {"role": "system", "content": HERMES_TOOLS_PROMPT.format(tools=listed).lstrip()})
    return [{k: v for k, v in message.items() if k != "tool_responses"} for message in wire]
