"""``policy=openai`` on the wire: request fields, message serialization that strict servers accept (checked
against the ``openai`` package's own request types), both tool formats, and how HTTP errors are sorted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import TypeAdapter

from arena.eval.settings import EvalSettings
from arena.policies.base import PolicyRefused, PolicyRequestInvalid, PolicyTurn, PolicyUnavailable, ToolCall
from arena.policies.openai_compat import TEXT_CALL_ERROR, OpenAIPolicy, PolicyConfig
from arena.rollout.conversation import assistant_message, format_error_message, tool_message
from arena.rollout.records import ToolCallRecord
from tests.fixtures.openai_server import FakeOpenAI, HttpFailure, openai_server_fixture, text, tool_calls

__all__ = ["openai_server_fixture"]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_book",
            "description": "A book by id.",
            "parameters": {"type": "object", "properties": {"book_id": {"type": "integer"}}},
        },
    }
]
REQUEST_TYPE = TypeAdapter(CompletionCreateParamsNonStreaming)


def _materialized(value: Any) -> Any:
    """A validated TypedDict with its lazily validated iterables consumed (so their errors surface)."""
    if isinstance(value, dict):
        return {key: _materialized(item) for key, item in value.items()}
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    return [_materialized(item) for item in value]


def conversation() -> list[dict[str, Any]]:
    """A conversation as the episode loop builds it: a call (content None), its result, then a reply that
    could not be parsed and the format-error feedback the arena sends back for it."""
    call = ToolCall("call_1", "get_book", {"book_id": 1}, '{"book_id": 1}')
    result = ToolCallRecord("call_1", "get_book", {"book_id": 1}, result={"title": "Dune"})
    return [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Which book is 1?"},
        assistant_message(PolicyTurn(content=None, tool_calls=[call])),
        tool_message(result),
        assistant_message(PolicyTurn(content="<tool_call>{oops", format_error="bad call")),
        format_error_message("bad call"),
    ]


def policy(server: FakeOpenAI, **overrides: Any) -> OpenAIPolicy:
    return OpenAIPolicy(PolicyConfig(server.base_url, "fake-policy", max_retries=0, **overrides))


async def test_native_requests_carry_tool_choice_and_strict_messages(openai_server: FakeOpenAI) -> None:
    openai_server.script = lambda request: tool_calls(("get_book", {"book_id": 2}))
    async with policy(
        openai_server, extra_body={"top_k": 20, "chat_template_kwargs": {"think": False}}
    ) as agent:
        turn = await agent.reply(conversation(), TOOLS)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("get_book", {"book_id": 2})]
    body = openai_server.requests[0]
    assert body["tool_choice"] == "auto" and body["tools"] == TOOLS and body["max_tokens"] == 1024
    assert body["top_k"] == 20 and body["chat_template_kwargs"] == {"think": False}
    request = _materialized(REQUEST_TYPE.validate_python(body))  # raises on anything the API does not take
    messages = request["messages"]
    assert all(isinstance(m["content"], str) for m in messages), messages
    assert messages[2]["content"] == "" and messages[2]["tool_calls"][0]["id"] == "call_1"
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": '{"title": "Dune"}'}
    # A tool message answering no call (the format-error feedback) is a user message on the wire.
    assert messages[5]["role"] == "user" and "FORMAT_ERROR" in messages[5]["content"]


async def test_tool_choice_null_and_max_tokens_null_are_not_sent(openai_server: FakeOpenAI) -> None:
    openai_server.script = lambda request: text("{}")
    async with policy(openai_server, tool_choice=None, max_tokens=None) as agent:
        await agent.reply(conversation()[:2], TOOLS)
    assert "tool_choice" not in openai_server.requests[0] and "max_tokens" not in openai_server.requests[0]


async def test_a_call_written_as_text_is_a_format_error_with_native_tools(openai_server: FakeOpenAI) -> None:
    replies = iter(
        [
            text('<tool_call>{"name": "get_book", "arguments": {"book_id": 1}}</tool_call>'),
            text('{"name": "get_book", "arguments": {"book_id": 1}}'),
            text('{"title": "Dune"}'),
        ]
    )
    openai_server.script = lambda request: next(replies)
    async with policy(openai_server) as agent:
        turns = [await agent.reply(conversation()[:2], TOOLS) for _ in range(3)]
    assert [t.format_error for t in turns] == [TEXT_CALL_ERROR, TEXT_CALL_ERROR, None]
    assert all(not t.tool_calls for t in turns) and turns[2].content == '{"title": "Dune"}'


async def test_hermes_format_lists_tools_in_the_prompt_and_parses_calls_from_text(
    openai_server: FakeOpenAI,
) -> None:
    replies = iter(
        [
            text('Looking.\n<tool_call>\n{"name": "get_book", "arguments": {"book_id": 3}}\n</tool_call>'),
            text("<tool_call>{broken</tool_call>"),
        ]
    )
    openai_server.script = lambda request: next(replies)
    async with policy(openai_server, tool_format="hermes") as agent:
        turn = await agent.reply(conversation(), TOOLS)
        broken = await agent.reply(conversation()[:2], TOOLS)
    assert turn.content == "Looking." and [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("get_book", {"book_id": 3})
    ]
    assert broken.format_error is not None and not broken.tool_calls
    body = openai_server.requests[0]
    assert "tools" not in body and "tool_choice" not in body
    messages = _materialized(REQUEST_TYPE.validate_python(body))["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "<tools>" in messages[0]["content"] and '"name": "get_book"' in messages[0]["content"]
    assert json.loads(messages[2]["content"].split("<tool_call>\n")[1].split("\n</tool_call>")[0]) == {
        "name": "get_book",
        "arguments": {"book_id": 1},
    }
    assert messages[3]["content"] == '<tool_response>\n{"title": "Dune"}\n</tool_response>'


@pytest.mark.parametrize(
    ("status", "message", "error", "requests"),
    [
        (500, "7 validation errors: content Input should be a valid string", PolicyRequestInvalid, 1),
        (422, "unprocessable", PolicyRequestInvalid, 1),
        (401, "invalid api key", PolicyRequestInvalid, 1),
        (404, "model 'smol' not found", PolicyRequestInvalid, 1),
        (400, "Requested tokens (5000) exceed context window of 2048", PolicyRefused, 1),
        (503, "loading model", PolicyUnavailable, 3),
        (429, "slow down", PolicyUnavailable, 3),
    ],
)
async def test_http_errors_are_sorted_and_only_outages_are_retried(
    openai_server: FakeOpenAI, status: int, message: str, error: type[Exception], requests: int
) -> None:
    def fail(request: dict[str, Any]) -> dict[str, Any]:
        raise HttpFailure(status, message)

    openai_server.script = fail
    async with OpenAIPolicy(PolicyConfig(openai_server.base_url, "m", max_retries=2)) as agent:
        with pytest.raises((PolicyRefused, PolicyUnavailable)) as raised:
            await agent.reply(conversation()[:2], TOOLS)
    assert type(raised.value) is error and f"HTTP {status}" in str(raised.value)
    assert len(openai_server.requests) == requests


def _fails_on_required(request: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's server with ``chatml-function-calling``: ``tool_choice: required`` is an empty HTTP 500."""
    if request.get("tool_choice") == "required":
        raise HttpFailure(500, "")
    return text("Dune.")


async def test_a_setting_the_server_fails_on_every_try_is_a_configuration_error(
    openai_server: FakeOpenAI,
) -> None:
    openai_server.script = _fails_on_required
    config = PolicyConfig(openai_server.base_url, "m", max_retries=2, tool_choice="required")
    async with OpenAIPolicy(config) as agent:
        with pytest.raises(
            PolicyRequestInvalid, match=r"does not support policy\.tool_choice=required"
        ) as raised:
            await agent.reply(conversation()[:2], TOOLS)
    assert "HTTP 500" in str(raised.value)
    # Three tries, then the same request once with the server's default, answered.
    assert [r.get("tool_choice") for r in openai_server.requests] == ["required"] * 3 + ["auto"]
    assert openai_server.requests[-1]["messages"] == openai_server.requests[0]["messages"]


async def test_a_server_failing_with_and_without_the_setting_is_unavailable(
    openai_server: FakeOpenAI,
) -> None:
    def down(request: dict[str, Any]) -> dict[str, Any]:
        raise HttpFailure(500, "")

    openai_server.script = down
    config = PolicyConfig(openai_server.base_url, "m", max_retries=1, extra_body={"top_k": 20})
    async with OpenAIPolicy(config) as agent:
        with pytest.raises(PolicyUnavailable, match="HTTP 500"):
            await agent.reply(conversation()[:2], TOOLS)
    assert ["top_k" in r for r in openai_server.requests] == [True, True, False]


async def test_an_unreachable_endpoint_is_unavailable() -> None:
    async with OpenAIPolicy(PolicyConfig("http://127.0.0.1:9/v1", "m", max_retries=1)) as agent:
        with pytest.raises(PolicyUnavailable, match="unreachable"):
            await agent.reply(conversation()[:2], TOOLS)


def _settings(**policy: Any) -> EvalSettings:
    fields = {"kind": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "m"} | policy
    return EvalSettings.model_validate({"policy": fields, "suite": {"name": "core", "source": "synth"}})


def test_the_run_id_ignores_where_and_how_fast_the_policy_is_served() -> None:
    base = _settings().resolved_run_id()
    moved = _settings(base_url="http://10.0.0.2:9000/v1", concurrency=3, timeout_s=5, max_retries=0)
    assert moved.resolved_run_id() == base
    wider = _settings().model_copy(
        update={"rollout": _settings().rollout.model_copy(update={"concurrency": 2})}
    )
    assert wider.resolved_run_id() == base
    for changed in ({"temperature": 0.1}, {"max_tokens": 64}, {"tool_format": "hermes"}, {"model": "n"}):
        assert _settings(**changed).resolved_run_id() != base, changed
    assert _settings().model_copy(update={"run_id": "mine"}).resolved_run_id() == "mine"


def test_extra_body_is_set_whole_from_the_command_line() -> None:
    """A mapping override (``policy.extra_body={...}``) is accepted: Hydra refuses new keys under a ``{}``
    the YAML gives, which made the documented override fail."""
    from arena.cli.hydra_config import load
    from arena.cli.synth_config import load_settings

    fields = "{top_k:20,chat_template_kwargs:{enable_thinking:false}}"
    policy = ["policy=openai", "policy.model=m", f"policy.extra_body={fields}"]
    expected = {"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}}
    assert load("eval", policy, EvalSettings).policy.extra_body == expected
    assert load("eval", policy[:2], EvalSettings).policy.extra_body == {}
    llm = ["llm.base_url=http://127.0.0.1:8000/v1", "llm.model=m", f"llm.extra_body={fields}"]
    config = load_settings(llm).llm_config()
    assert config is not None and config.extra_body == expected and config.max_tokens == 1024
