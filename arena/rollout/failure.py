"""Failure modes: why a scored episode did not solve its task (what the gap analysis counts)."""

from __future__ import annotations

from arena.rollout.records import EpisodeRecord, FailureMode, ToolCallRecord
from task_synth.model import Task

INVALID_ARGUMENT_CODES = frozenset({"VALIDATION_ERROR", "INVALID_ARGUMENTS"})


def _unrecovered(calls: list[ToolCallRecord]) -> list[ToolCallRecord]:
    """Failed calls that no later successful call made good: of the same tool, or of any tool after a
    name that no tool has (the corrected call names another tool)."""
    return [
        call
        for i, call in enumerate(calls)
        if call.error_code is not None
        and not any(
            later.error_code is None and (later.name == call.name or call.error_code == "UNKNOWN_TOOL")
            for later in calls[i + 1 :]
        )
    ]


def expects_calls(task: Task) -> bool:
    """Whether the task's reference makes tool calls (its solution, or any user turn's, as in BFCL)."""
    solutions = [task.solution, *task.turn_solutions]
    return any(solution is not None and solution.steps for solution in solutions)


def classify(record: EpisodeRecord, task: Task) -> FailureMode:
    """The failure mode of a finished episode: ``solved`` when it passed, ``infra_error`` when it was not
    scored, else the first cause found: no final answer (a format error when that is how it ended); an
    answer with no tool call (a format error when every attempt at one was malformed, else premature when
    the reference makes calls, on every suite alike); an unknown tool, invalid arguments or another
    tool error never recovered from, a wrong final state, or a wrong answer."""
    if record.verdict is None:
        return FailureMode.INFRA_ERROR
    if record.verdict.passed:
        return FailureMode.SOLVED
    calls = record.tool_calls
    if not record.finished:
        ended_badly = bool(record.turns) and record.turns[-1].format_error is not None
        return FailureMode.FORMAT_ERROR if ended_badly else FailureMode.NO_FINAL_ANSWER
    if not calls:
        if any(turn.format_error is not None for turn in record.turns):
            return FailureMode.FORMAT_ERROR  # it tried to call tools and never managed one
        if expects_calls(task):
            return FailureMode.PREMATURE_ANSWER
    unrecovered = _unrecovered(calls)
    if any(call.error_code == "UNKNOWN_TOOL" for call in unrecovered):
        return FailureMode.UNKNOWN_TOOL
    if any(call.error_code in INVALID_ARGUMENT_CODES for call in unrecovered):
        return FailureMode.INVALID_ARGUMENTS
    if unrecovered:
        return FailureMode.TOOL_ERROR_UNRECOVERED
    if record.verdict.criteria.get("state") is False:
        return FailureMode.STATE_MISMATCH
    return FailureMode.WRONG_ANSWER
