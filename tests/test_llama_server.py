"""``arena eval policy=openai`` against llama.cpp's real OpenAI-compatible server (llama-cpp-python),
serving a tiny random GGUF written here. A random model does not choose to call tools, so what is asserted
is what the wire and the arena must get right whatever the model says: a request with tools and
``tool_choice: auto`` is accepted; with a named function forced (``extra_body``, the server's grammar
keeps the arguments to the tool's schema) the calls reach the environment and its results go back in turn
2, which the server accepts (it once answered HTTP 500 to ``content: null`` beside ``tool_calls``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from arena.policies.base import PolicyRequestInvalid
from arena.policies.openai_compat import OpenAIPolicy, PolicyConfig
from arena.store import Database, RunStore
from tests.gguf_samples import write_tiny_gguf
from tests.llama_server import MODEL_ALIAS, llama_server, require_llama_server

pytestmark = pytest.mark.slow

CLI_TIMEOUT_S = 300
GET_BOOK = {
    "type": "function",
    "function": {
        "name": "get_book",
        "description": "A book by id.",
        "parameters": {
            "type": "object",
            "properties": {"book_id": {"type": "integer"}},
            "required": ["book_id"],
        },
    },
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's server on loopback with a tiny random llama-architecture GGUF; yields its base URL."""
    require_llama_server()
    folder = tmp_path_factory.mktemp("llama")
    model = write_tiny_gguf(folder / "tiny.gguf").path
    with llama_server(model, folder / "server.log") as base_url:
        yield base_url


async def test_a_request_with_tools_and_tool_choice_auto_is_accepted(server: str) -> None:
    config = PolicyConfig(base_url=server, model=MODEL_ALIAS, max_tokens=16, temperature=0, max_retries=0)
    async with OpenAIPolicy(config) as policy:
        messages = [{"role": "user", "content": "What is book 3?"}]
        turn = await policy.reply(messages, [GET_BOOK])
    assert turn.completion_tokens is not None and turn.prompt_tokens
    # Whatever the random model chose, a call it made names the offered tool with schema-shaped arguments.
    assert all(call.name == "get_book" and call.arguments is not None for call in turn.tool_calls)


async def test_tool_choice_required_is_a_configuration_error_that_names_it(server: str) -> None:
    """That server's ``chatml-function-calling`` answers ``tool_choice: required`` with an empty HTTP 500,
    as it would a crash; the policy asks once more with ``auto`` and, answered, blames the setting."""
    config = PolicyConfig(
        base_url=server,
        model=MODEL_ALIAS,
        max_tokens=16,
        temperature=0,
        max_retries=0,
        tool_choice="required",
    )
    async with OpenAIPolicy(config) as policy:
        with pytest.raises(PolicyRequestInvalid, match=r"does not support policy\.tool_choice=required"):
            await policy.reply([{"role": "user", "content": "What is book 3?"}], [GET_BOOK])


def test_eval_calls_reach_the_environment_and_turn_two_is_accepted(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forced = "{tool_choice:{type:function,function:{name:get_book}}}"
    args = [
        sys.executable,
        "-m",
        "arena.cli.main",
        "eval",
        "policy=openai",
        f"policy.base_url={server}",
        f"policy.model={MODEL_ALIAS}",
        "policy.max_tokens=64",
        "policy.temperature=0",
        "policy.tool_choice=null",
        f"policy.extra_body={forced}",
        "suite.envs=[library]",
        "suite.levels=[1,1]",
        "tasks_per_env=2",
        "rollout.max_turns=2",
        "rollout.concurrency=1",
        "run_id=llama",
    ]
    home = tmp_path / "home"
    env = {**os.environ, "ARENA_HOME": str(home)}
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    line = json.loads([row for row in done.stdout.splitlines() if row.startswith("{")][-1])
    assert line["episodes"] == 2 and line["scored"] == 2 and line["infra_errors"] == 0, line
    monkeypatch.setenv("ARENA_HOME", str(home))
    db = Database(None)
    try:
        episodes = RunStore(db).episode_records("llama")
    finally:
        db.close()
    assert len(episodes) == 2
    for episode in episodes:
        assert len(episode.turns) == 2, episode  # turn 2 carried turn 1's calls and results, and was answered
        for turn in episode.turns:
            assert [call.name for call in turn.tool_calls] == ["get_book"]
            call = turn.tool_calls[0]
            assert isinstance(call.arguments, dict) and isinstance(call.arguments.get("book_id"), int)
            # The environment answered: a book, or its own error for an id it does not have.
            assert call.result is not None or call.error_code is not None, call
            assert turn.prompt_tokens and turn.completion_tokens
        assert episode.turns[1].prompt_tokens > episode.turns[0].prompt_tokens


def test_synth_sends_programs_written_by_the_model_to_the_sandbox_and_counts_the_rejects(
    server: str, tmp_path: Path
) -> None:
    """``arena synth`` with its LLM path: the server's JSON-schema grammar (``response_format`` through
    ``llm.extra_body``) makes the random model reply with a {request, code} object, so its programs are
    run, fail and are sent back, and the drafts never fixed are counted as dropped; the suite's
    template tasks are still kept."""
    text = "{type:string,minLength:1,maxLength:60}"
    reply = f"{{type:object,properties:{{request:{text},code:{text}}},required:[request,code]}}"
    args = [
        sys.executable,
        "-m",
        "arena.cli.main",
        "synth",
        "env=library",
        "n=1",
        "difficulty=4",
        "seed=1",  # attempts 0 and 1 at level 4 are programmatic (the LLM writes them)
        f"llm.base_url={server}",
        f"llm.model={MODEL_ALIAS}",
        "llm.max_tokens=160",
        f"llm.extra_body={{response_format:{{type:json_object,schema:{reply}}}}}",
    ]
    env = {**os.environ, "ARENA_HOME": str(tmp_path / "home"), "COLUMNS": "400"}
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stored 1 tasks" in done.stdout, done.stdout
    assert "llm program: not fixed in 3 rounds (last: the program failed when run)" in done.stdout, (
        done.stdout
    )
