"""``arena eval policy=openai`` through the real CLI (a subprocess, with a timeout) against a scripted
OpenAI-compatible HTTP server on loopback: what goes on the wire, plain progress lines without a terminal,
infrastructure errors a user sees (counts with reasons, exit 1 past ``max_infra_share``), a run that
resumes when only the server's port changed, and a server refusing turn 2 as a configuration error in one
line (exit 2, never retried)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from arena.store import Database, RunStore
from tests.fixtures.openai_server import FakeOpenAI, HttpFailure, openai_server_fixture, text, tool_calls

__all__ = ["openai_server_fixture"]

pytestmark = pytest.mark.slow

SUITE = ["suite.envs=[library]", "suite.levels=[1,1]", "tasks_per_env=3"]
CLI_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ARENA_HOME for the module's CLI runs (the suite is synthesized once and stored there)."""
    return tmp_path_factory.mktemp("home")


def arena_eval(home: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``arena eval`` in its own process (stdout is a pipe, not a terminal); killed past the timeout."""
    return subprocess.run(
        [sys.executable, "-m", "arena.cli.main", "eval", *overrides],
        env={**os.environ, "ARENA_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def last_line(out: str) -> dict[str, Any]:
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def first_user_message(request: dict[str, Any]) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


def call_then_answer(request: dict[str, Any]) -> dict[str, Any]:
    """Turn 1 calls a tool, turn 2 answers (wrongly: the episode is scored, not an infra error)."""
    if not any(m["role"] == "assistant" for m in request["messages"]):
        return tool_calls(("get_book", {"book_id": 1}))
    return text('{"title": "unknown"}')


class OneTaskThenDown:
    """Plays the first task it sees; every other task's request is answered 503 (the server is going
    down), so those episodes are infrastructure errors."""

    def __init__(self) -> None:
        self.served: str | None = None

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.served = self.served or first_user_message(request)
        if first_user_message(request) != self.served:
            raise HttpFailure(503, "the model server is shutting down")
        return call_then_answer(request)


def policy_at(server: FakeOpenAI) -> list[str]:
    url = f"policy.base_url={server.base_url}"
    return ["policy=openai", url, "policy.model=fake", "policy.max_retries=0"]


def test_infra_errors_fail_the_command_and_a_rerun_on_another_port_resumes(
    home: Path, openai_server: FakeOpenAI
) -> None:
    going_down = OneTaskThenDown()
    openai_server.script = going_down
    first = arena_eval(home, *policy_at(openai_server), *SUITE)
    assert first.returncode == 1, first.stdout + first.stderr
    line = last_line(first.stdout)
    assert line["episodes"] == 3 and line["scored"] == 1 and line["infra_errors"] == 2
    assert line["infra_reasons"] == {"policy endpoint failed: HTTP 503": 2}
    err = " ".join(first.stderr.split())
    assert "2 of 3 episodes are infrastructure errors" in err and "2x policy endpoint failed: HTTP 503" in err
    assert "more than max_infra_share=0.05" in err
    report = Path(line["report"]).read_text()
    assert "| policy endpoint failed: HTTP 503 | 2 |" in report.split("## Infrastructure errors")[1]
    # Without a terminal, progress comes as plain lines (rich would print nothing until the end).
    assert "starting 1 environment(s)" in first.stdout and f"{line['run_id']}: 3/3 episodes" in first.stdout
    # What went on the wire: tools with tool_choice, the default max_tokens, a strict turn 2.
    played = [r for r in openai_server.requests if first_user_message(r) == going_down.served]
    assert len(played) == 2
    assert played[0]["tool_choice"] == "auto" and played[0]["tools"] and played[0]["max_tokens"] == 1024
    assistant, tool = played[1]["messages"][2:4]
    assert assistant["role"] == "assistant" and assistant["content"] == "" and assistant["tool_calls"]
    assert tool["role"] == "tool" and tool["tool_call_id"] == assistant["tool_calls"][0]["id"]

    with FakeOpenAI() as moved:  # the server is back, on another port, at another concurrency
        moved.script = call_then_answer
        again = arena_eval(home, *policy_at(moved), "policy.concurrency=3", "rollout.concurrency=1", *SUITE)
    assert again.returncode == 0, again.stdout + again.stderr
    resumed = last_line(again.stdout)
    assert resumed["run_id"] == line["run_id"] and resumed["skipped_as_done"] == 1 and resumed["played"] == 2
    assert resumed["episodes"] == 3 and resumed["scored"] == 3 and resumed["infra_errors"] == 0
    assert len(moved.requests) == 4 and going_down.served not in map(first_user_message, moved.requests)
    assert "infrastructure errors" not in again.stderr
    assert "status finished" in Path(resumed["report"]).read_text()


def test_a_server_that_rejects_turn_two_is_a_configuration_error_in_one_line(
    home: Path, openai_server: FakeOpenAI
) -> None:
    """llama.cpp's server answered HTTP 500 "validation errors" to a turn-2 body it did not accept: that is
    the settings or the server, reported at once (exit 2), not an outage retried and replayed forever."""

    def strict(request: dict[str, Any]) -> dict[str, Any]:
        if len(request["messages"]) > 2:
            raise HttpFailure(500, "2 validation errors:\n  content\n    Input should be a valid string")
        return tool_calls(("get_book", {"book_id": 1}))

    openai_server.script = strict
    policy = [*policy_at(openai_server)[:-1], "policy.model=strict"]
    done = arena_eval(home, *policy, "rollout.concurrency=1", *SUITE, "run_id=strict")
    assert done.returncode == 2, done.stdout + done.stderr
    err = done.stderr.strip()
    assert err.count("\n") == 0, err
    assert "the policy endpoint rejected the request: HTTP 500" in err and "Input should be" in err
    assert len(openai_server.requests) == 2  # turn 1, then turn 2 refused and never retried
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ARENA_HOME", str(home))
        db = Database(None)
        try:
            assert RunStore(db).get("strict").status == "failed"
        finally:
            db.close()
