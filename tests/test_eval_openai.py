"""``arena eval policy=openai`` through the real CLI against a scripted OpenAI-compatible server: what goes
on the wire, plain progress lines without a terminal, a run that resumes when only the server moved, and
infrastructure errors a user sees (a count with reasons, a non-zero exit, a configuration error in one
line)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from arena.cli.main import main
from arena.store import Database, RunStore
from tests.fixtures.openai_server import FakeOpenAI, HttpFailure, openai_server_fixture, text, tool_calls

__all__ = ["openai_server_fixture"]

pytestmark = pytest.mark.slow

SUITE = ["suite.envs=[library]", "suite.levels=[1,1]", "tasks_per_env=2"]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One ARENA_HOME for the module (the suite is synthesized once); the Ray the CLI started is shut down."""
    path = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ARENA_HOME", str(path))
        started_ray = not ray.is_initialized()
        yield path
        if started_ray:
            ray.shutdown()


def _last_json(out: str) -> dict[str, Any]:
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def call_then_answer(request: dict[str, Any]) -> dict[str, Any]:
    if sum(m["role"] == "assistant" for m in request["messages"]) == 0:
        return tool_calls(("get_book", {"book_id": 1}))
    return text('{"title": "unknown"}')


def test_eval_sends_tools_with_tool_choice_and_resumes_when_the_server_moves(
    home: Path, openai_server: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    openai_server.script = call_then_answer
    policy = ["policy=openai", f"policy.base_url={openai_server.base_url}", "policy.model=fake"]
    assert main(["eval", *policy, *SUITE]) == 0
    out = capsys.readouterr().out
    line = _last_json(out)
    assert line["episodes"] == 2 and line["infra_errors"] == 0 and line["infra_reasons"] == {}
    first, second = openai_server.requests[0], openai_server.requests[1]
    assert first["tool_choice"] == "auto" and first["tools"] and first["max_tokens"] == 1024
    assistant = second["messages"][2]
    assert assistant["role"] == "assistant" and assistant["content"] == "" and assistant["tool_calls"]
    assert second["messages"][3]["role"] == "tool"
    # Without a terminal, progress comes as plain lines (rich would print nothing until the end).
    assert f"{line['run_id']}: 2/2 episodes  success" in out and "starting 1 environment(s)" in out
    report = Path(line["report"]).read_text()
    assert "status finished" in report and "## Infrastructure errors" not in report

    with FakeOpenAI() as moved:
        moved.script = call_then_answer
        again = ["policy=openai", f"policy.base_url={moved.base_url}", "policy.model=fake"]
        assert main(["eval", *again, "policy.concurrency=3", "rollout.concurrency=1", *SUITE]) == 0
        resumed = _last_json(capsys.readouterr().out)
        assert resumed["run_id"] == line["run_id"] and resumed["skipped_as_done"] == 2
        assert resumed["played"] == 0 and moved.requests == []
        assert main(["eval", *again, *SUITE, "run_id=forced"]) == 0
        assert _last_json(capsys.readouterr().out)["played"] == 2 and len(moved.requests) == 4


def test_an_unreachable_policy_is_counted_with_its_reason_and_fails_the_command(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    down = ["policy=openai", "policy.base_url=http://127.0.0.1:9/v1", "policy.model=fake"]
    assert main(["eval", *down, "policy.max_retries=0", *SUITE]) == 1
    captured = capsys.readouterr()
    line = _last_json(captured.out)
    assert line["infra_errors"] == 2 and line["scored"] == 0
    assert line["infra_reasons"] == {"policy endpoint unreachable": 2}
    assert "2 of 2 episodes are infrastructure errors" in captured.err
    assert "2x policy endpoint unreachable" in captured.err and "max_infra_share=0.05" in captured.err
    report = Path(line["report"]).read_text()
    assert "| policy endpoint unreachable | 2 |" in report.split("## Infrastructure errors")[1]
    # Under the documented share, the same counts are printed but the command succeeds.
    assert main(["eval", *down, "policy.max_retries=0", *SUITE, "max_infra_share=1"]) == 0
    assert "2x policy endpoint unreachable" in capsys.readouterr().err


def test_a_server_that_rejects_turn_two_is_a_configuration_error_in_one_line(
    home: Path, openai_server: FakeOpenAI, capsys: pytest.CaptureFixture[str]
) -> None:
    """llama.cpp's server answered HTTP 500 "validation errors" to a turn-2 body it did not accept: that is
    the settings or the server, reported at once (exit 2), not an outage retried and replayed forever."""

    def strict(request: dict[str, Any]) -> dict[str, Any]:
        if len(request["messages"]) > 2:
            raise HttpFailure(500, "2 validation errors:\n  content\n    Input should be a valid string")
        return tool_calls(("get_book", {"book_id": 1}))

    openai_server.script = strict
    policy = ["policy=openai", f"policy.base_url={openai_server.base_url}", "policy.model=strict"]
    assert main(["eval", *policy, "rollout.concurrency=1", *SUITE, "run_id=strict"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert "the policy endpoint rejected the request: HTTP 500" in err and "Input should be" in err
    assert len(openai_server.requests) == 2  # never retried
    db = Database(None)
    try:
        assert RunStore(db).get("strict").status == "failed"
    finally:
        db.close()
