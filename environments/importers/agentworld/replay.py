"""Replaying released questions: run each verified tool chain in a fresh session and compare.

The environment is served by a child ``ServerProcess``; the released code runs only there. The
arena side drives the chain through the control plane, one fresh session per question. The server
runs in *observe* mode (every tool treated as mutating), so a tool that writes although the static
scan said it does not is seen -- through the state hash -- instead of being rejected.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from environments.serving.control import ControlClient, ControlError
from environments.serving.process import ServerProcess, ServerStartError

from .answers import ClockWindow, Match, match_answer, match_truncated
from .questions import ImportedQuestion, ToolCall
from .store import IMPORTED_DIR_ENV, OBSERVE_WRITES_ENV

# Errors that mean the chain did not really run (as opposed to a tool's own business error).
_BROKEN_CODES = frozenset({"UNKNOWN_TOOL", "INTERNAL"})


@dataclass(frozen=True)
class StepOutcome:
    """One executed step: the tool, whether it succeeded, its value, and whether it changed state."""

    tool: str
    ok: bool
    value: Any
    wrote: bool

    def to_json(self) -> dict[str, Any]:
        error = None if self.ok else self.value.get("code")
        return {"tool": self.tool, "ok": self.ok, "wrote": self.wrote, "error": error}


@dataclass(frozen=True)
class QuestionReplay:
    """The verdict for one question."""

    index: int
    replayed: bool
    reproduced: bool
    matched_step: int | None
    forgiven: tuple[str, ...]
    error: str | None
    steps: tuple[StepOutcome, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "replayed": self.replayed,
            "reproduced": self.reproduced,
            "matched_step": self.matched_step,
            "forgiven": list(self.forgiven),
            "error": self.error,
            "steps": [s.to_json() for s in self.steps],
        }


@dataclass(frozen=True)
class EnvironmentReplay:
    """All questions of one environment, and the tools seen writing."""

    questions: tuple[QuestionReplay, ...]
    writers: frozenset[str]
    seconds: float

    @property
    def replayed(self) -> int:
        return sum(q.replayed for q in self.questions)

    @property
    def reproduced(self) -> int:
        return sum(q.reproduced for q in self.questions)

    def to_json(self) -> dict[str, Any]:
        return {
            "replayed": self.replayed,
            "reproduced": self.reproduced,
            "writers": sorted(self.writers),
            "seconds": round(self.seconds, 3),
            "questions": [q.to_json() for q in self.questions],
        }


def _best_match(
    question: ImportedQuestion, steps: Sequence[StepOutcome], window: ClockWindow
) -> tuple[int, Match] | None:
    """The last successful step whose output matches the reference (the chain's answer is usually last)."""
    for index in range(len(steps) - 1, -1, -1):
        step = steps[index]
        if not step.ok:
            continue
        if question.reference_valid:
            found = match_answer(question.reference_answer, step.value, window)
        else:
            found = match_truncated(question.reference_text, step.value)
        if found is not None:
            return index, found
    return None


def judge(question: ImportedQuestion, steps: Sequence[StepOutcome], window: ClockWindow) -> QuestionReplay:
    """Replayed: every step ran (tool errors allowed; unknown tools, crashes not). Reproduced: one matches."""
    broken = next((s for s in steps if not s.ok and s.value.get("code") in _BROKEN_CODES), None)
    if broken is not None or len(steps) < len(question.verified_tool_chain):
        reason = f"{broken.tool}: {broken.value.get('message')}" if broken else "the chain stopped early"
        return QuestionReplay(question.index, False, False, None, (), reason, tuple(steps))
    best = _best_match(question, steps, window)
    if best is None:
        return QuestionReplay(
            question.index, True, False, None, (), "no step output matches the reference", tuple(steps)
        )
    index, found = best
    return QuestionReplay(question.index, True, True, index, found.forgiven, None, tuple(steps))


async def _run_step(control: ControlClient, session: str, call: ToolCall) -> StepOutcome:
    before = await control.state_hash(session)
    result = await control.call(session, call.tool, call.args)
    after = await control.state_hash(session)
    return StepOutcome(call.tool, bool(result["ok"]), result["value"], before != after)


async def _replay_question(control: ControlClient, question: ImportedQuestion) -> QuestionReplay:
    session = await control.create_session()
    started = datetime.now(UTC)
    steps: list[StepOutcome] = []
    try:
        for call in question.verified_tool_chain:
            steps.append(await _run_step(control, session, call))
    except ControlError as exc:
        return QuestionReplay(question.index, False, False, None, (), str(exc), tuple(steps))
    finally:
        await control.close_session(session)
    return judge(question, steps, ClockWindow.around(started, datetime.now(UTC)))


async def _replay_all(control: ControlClient, questions: Sequence[ImportedQuestion]) -> list[QuestionReplay]:
    try:
        return [await _replay_question(control, q) for q in questions]
    finally:
        await control.aclose()


def _failed(questions: Sequence[ImportedQuestion], reason: str) -> list[QuestionReplay]:
    return [QuestionReplay(q.index, False, False, None, (), reason, ()) for q in questions]


def replay_environment(name: str, questions: Sequence[ImportedQuestion], root: Path) -> EnvironmentReplay:
    """Serve ``name`` from ``root`` in a child process and replay every question's chain."""
    started = time.perf_counter()
    server = ServerProcess(name, extra_env={IMPORTED_DIR_ENV: str(root), OBSERVE_WRITES_ENV: "1"})
    try:
        server.start()
        results = asyncio.run(_replay_all(server.control(), questions))
    except (ServerStartError, ControlError) as exc:
        results = _failed(questions, f"{type(exc).__name__}: {exc}")
    finally:
        server.stop()
    writers = frozenset(s.tool for r in results for s in r.steps if s.wrote)
    return EnvironmentReplay(tuple(results), writers, time.perf_counter() - started)
