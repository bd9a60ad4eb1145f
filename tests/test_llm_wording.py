"""``task_synth.llm.refine_request`` through the real ``openai`` SDK against a scripted HTTP endpoint."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest

from task_synth.llm import LLMConfig, refine_request
from task_synth.profile import EnvProfile, ToolProfile
from tests.fixtures.openai_server import FakeOpenAI, HttpFailure, openai_server_fixture, text

__all__ = ["openai_server_fixture"]  # the `openai_server` fixture

TEMPLATE = (
    "First, find the book titled 'Dune'. Then, for the book found, look up its loans for member 12. "
    'Reply with a JSON object with the keys "author" (the book\'s author), "loans" (the loan count).'
)
ANSWER = {"author": "Frank Herbert", "loans": 37}
LITERALS = {"dune", "12"}
PROFILE = EnvProfile(
    env="library",
    version="1",
    tools={
        name: ToolProfile(name=name, description="", kind="query", entity="book", params=[])
        for name in ("search_books", "list_loans")
    },
    tables={},
)
GOOD = (
    "Hi! Could you find the book 'Dune' and tell me how many loans member 12 has on it? "
    'Please answer as JSON with "author" and "loans".'
)


async def _refine(server: FakeOpenAI, rewrite: str) -> str | None:
    server.script = lambda request: text(rewrite)
    config = LLMConfig(server.base_url, "wording-model")
    return await refine_request(config, TEMPLATE, ANSWER, PROFILE, LITERALS)


async def test_an_acceptable_rewrite_is_used(openai_server: FakeOpenAI) -> None:
    assert await _refine(openai_server, f"  {GOOD}\n") == GOOD
    [request] = openai_server.requests
    assert request["model"] == "wording-model"
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][1]["content"] == TEMPLATE
    assert request["max_tokens"] == 1024  # a small model left unbounded writes to the end of its context


async def test_max_tokens_and_server_fields_are_sent_as_configured(openai_server: FakeOpenAI) -> None:
    openai_server.script = lambda request: text(GOOD)
    fields = {"response_format": {"type": "text"}, "top_k": 20}
    config = LLMConfig(openai_server.base_url, "wording-model", max_tokens=200, extra_body=fields)
    assert await refine_request(config, TEMPLATE, ANSWER, PROFILE, LITERALS) == GOOD
    [request] = openai_server.requests
    assert request["max_tokens"] == 200 and request["top_k"] == 20
    assert request["response_format"] == {"type": "text"}
    unbounded = LLMConfig(openai_server.base_url, "wording-model", max_tokens=None)
    await refine_request(unbounded, TEMPLATE, ANSWER, PROFILE, LITERALS)
    assert "max_tokens" not in openai_server.requests[1]


@pytest.mark.parametrize(
    ("rewrite", "why"),
    [
        (GOOD.replace("'Dune'", "that sci-fi classic"), "drops a literal"),
        (GOOD.replace("member 12", "the member"), "drops a numeric literal"),
        (GOOD.replace(' and "loans"', ""), "drops a JSON key"),
        (GOOD.replace("find the book", "call search_books for the book"), "names a tool"),
        (GOOD.replace("Hi!", "Hi! (It is by Frank Herbert.)"), "quotes a string answer"),
        (GOOD.replace("Hi!", "Hi! I think there are 37 loans."), "quotes a numeric answer"),
        (GOOD.replace("Hi!", "Hi! My guess is 37."), "quotes a numeric answer ending a sentence"),
        ("", "empty"),
    ],
)
async def test_unsafe_rewrites_keep_the_template(
    openai_server: FakeOpenAI, rewrite: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="task_synth.llm"):
        assert await _refine(openai_server, rewrite) is None, why
    assert "keeping the template" in caplog.text
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize("status", [500, 503])
async def test_a_failing_endpoint_keeps_the_template_with_a_warning(
    openai_server: FakeOpenAI, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    def fail(request: dict[str, object]) -> dict[str, object]:
        raise HttpFailure(status)

    openai_server.script = fail
    config = LLMConfig(openai_server.base_url, "wording-model")
    with caplog.at_level(logging.WARNING, logger="task_synth.llm"):
        assert await refine_request(config, TEMPLATE, ANSWER, PROFILE, LITERALS) is None
    assert "keeping the template wording" in caplog.text and str(status) in caplog.text
    assert len(openai_server.requests) >= 1


async def test_an_unreachable_endpoint_keeps_the_template_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = LLMConfig(f"http://127.0.0.1:{port}/v1", "wording-model")
    with caplog.at_level(logging.WARNING, logger="task_synth.llm"):
        assert await refine_request(config, TEMPLATE, ANSWER, PROFILE, LITERALS) is None
    assert "keeping the template wording" in caplog.text and "Connection error" in caplog.text


async def test_requests_wait_for_a_slot_and_the_wait_is_not_timed(openai_server: FakeOpenAI) -> None:
    """A server that answers one request at a time (llama.cpp's): with ``concurrency`` 1 the requests are
    sent one by one and each gets its whole ``timeout_s``, however long the queue; with more slots they
    overlap, and the same queue behind the server would have timed out."""
    openai_server.script = lambda request: text(GOOD)
    openai_server.delay_s = 0.4
    one_at_a_time = LLMConfig(openai_server.base_url, "wording-model", concurrency=1, timeout_s=1.0)
    started = time.monotonic()
    rewrites = await asyncio.gather(
        *(refine_request(one_at_a_time, TEMPLATE, ANSWER, PROFILE, LITERALS) for _ in range(5))
    )
    assert rewrites == [GOOD] * 5
    assert openai_server.most_in_flight == 1
    assert time.monotonic() - started >= 5 * 0.4  # longer than any one request's timeout
    openai_server.most_in_flight = 0
    three = LLMConfig(openai_server.base_url, "wording-model", concurrency=3)
    await asyncio.gather(*(refine_request(three, TEMPLATE, ANSWER, PROFILE, LITERALS) for _ in range(5)))
    assert openai_server.most_in_flight == 3


async def test_a_request_past_its_timeout_keeps_the_template(
    openai_server: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    openai_server.script = lambda request: text(GOOD)
    openai_server.delay_s = 2.0
    config = LLMConfig(openai_server.base_url, "wording-model", timeout_s=0.3)
    with caplog.at_level(logging.WARNING, logger="task_synth.llm"):
        assert await refine_request(config, TEMPLATE, ANSWER, PROFILE, LITERALS) is None
    assert "keeping the template wording" in caplog.text and "timed out" in caplog.text
