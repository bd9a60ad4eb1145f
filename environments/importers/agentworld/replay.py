"""Replaying released questions: run each verified tool chain in a fresh session and compare.

The environment is served by a child ``ServerProcess`` under resource limits; the released code
runs only there. The arena side drives the chain through the control plane, one fresh session per
question, binding values that earlier steps generated into later arguments (``binding``). The
server runs in *observe* mode (every tool treated as mutating), so a tool that writes although the
static scan said it does not is seen -- through the state hash -- instead of being rejected.

Tool randomness is seeded from the session (``determinism``). Questions that do not match at once
are replayed a second time by a server with another seed salt: output leaves that change with the
salt depend on randomness, and are forgiven when the reference has their shape. Every question
ends in one group: ``reproduced``, ``not_reproducible: random``, ``not_reproducible: clock`` or
``mismatch`` (see docs/importers.md).
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from environments.serving.control import ControlClient, ControlError
from environments.serving.process import ServerProcess, ServerStartError

from .answers import (
    MISSING,
    ClockWindow,
    Match,
    clock_related,
    differences,
    mask_time,
    match_answer,
    match_truncated,
)
from .binding import Binder, Binding
from .determinism import SEED_ENV
from .questions import ImportedQuestion
from .release import read_files
from .store import IMPORTED_DIR_ENV, OBSERVE_WRITES_ENV, env_dir

# Errors that mean the chain did not really run (as opposed to a tool's own business error).
_BROKEN_CODES = frozenset({"UNKNOWN_TOOL"})
# A released implementation that raised: a defect of the source, named, not a broken replay.
_DEFECT_CODES = frozenset({"INTERNAL"})
ALT_SALT = "agentworld-replay-alternative"
REPRODUCED = "reproduced"
RANDOM = "not_reproducible: random"
CLOCK = "not_reproducible: clock"
MISMATCH = "mismatch"
VERDICTS = (REPRODUCED, RANDOM, CLOCK, MISMATCH)

# Resource limits of a replay server (it runs third-party code): address space, CPU seconds over its
# whole life, size of a written file, open files, no core dumps.
REPLAY_LIMITS = {
    resource.RLIMIT_AS: 4 << 30,
    resource.RLIMIT_CPU: 600,
    resource.RLIMIT_FSIZE: 256 << 20,
    resource.RLIMIT_NOFILE: 1024,
    resource.RLIMIT_CORE: 0,
}


def apply_replay_limits() -> None:
    """``preexec`` of a replay server: lower each limit (never raise a stricter existing one)."""
    for limit, value in REPLAY_LIMITS.items():
        _soft, hard = resource.getrlimit(limit)
        new = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (new, new))


@dataclass(frozen=True)
class StepOutcome:
    """One executed step: the tool, whether it succeeded, its value, and whether it changed state."""

    tool: str
    ok: bool
    value: Any
    wrote: bool

    @property
    def code(self) -> str | None:
        return None if self.ok or not isinstance(self.value, dict) else self.value.get("code")

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "ok": self.ok, "wrote": self.wrote, "error": self.code}


@dataclass(frozen=True)
class ChainRun:
    """The executed steps of one question and the bindings made on the way."""

    steps: tuple[StepOutcome, ...]
    bindings: tuple[Binding, ...]
    window: ClockWindow
    error: str | None = None


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
    verdict: str = MISMATCH
    random: tuple[str, ...] = ()
    bindings: tuple[Binding, ...] = ()
    defects: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "verdict": self.verdict,
            "replayed": self.replayed,
            "reproduced": self.reproduced,
            "matched_step": self.matched_step,
            "forgiven": list(self.forgiven),
            "random": list(self.random),
            "bindings": [b.to_json() for b in self.bindings],
            "defects": list(self.defects),
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
            "verdicts": verdict_counts(self.questions),
            "writers": sorted(self.writers),
            "seconds": round(self.seconds, 3),
            "questions": [q.to_json() for q in self.questions],
        }


def verdict_counts(questions: Sequence[QuestionReplay]) -> dict[str, int]:
    counts = Counter(q.verdict for q in questions)
    return {v: counts.get(v, 0) for v in VERDICTS}


def _alternative(alt: Sequence[StepOutcome] | None, index: int) -> Any:
    if alt is None or index >= len(alt) or not alt[index].ok:
        return MISSING
    return alt[index].value


def _match(question: ImportedQuestion, value: Any, alt: Any, window: ClockWindow) -> Match | None:
    if question.reference_valid:
        return match_answer(question.reference_answer, value, window, alt)
    return match_truncated(question.reference_text, value, alt)


def _best_match(
    question: ImportedQuestion,
    steps: Sequence[StepOutcome],
    window: ClockWindow,
    alt: Sequence[StepOutcome] | None = None,
) -> tuple[int, Match] | None:
    """The last successful step whose output matches the reference (the chain's answer is usually last)."""
    for index in range(len(steps) - 1, -1, -1):
        if steps[index].ok:
            found = _match(question, steps[index].value, _alternative(alt, index), window)
            if found is not None:
                return index, found
    return None


def _closest(question: ImportedQuestion, steps: Sequence[StepOutcome]) -> int | None:
    """The successful step whose output is nearest the reference (fewest reference leaves missed)."""
    candidates = [i for i, s in enumerate(steps) if s.ok]
    if not candidates:
        return None
    if not question.reference_valid:
        return candidates[-1]
    return min(
        reversed(candidates), key=lambda i: len(differences(question.reference_answer, steps[i].value))
    )


def _within(path: str, others: set[str]) -> bool:
    return any(path.startswith(o) for o in others)


def _clock_leaf(path: str, ref: Any, out: Any) -> bool:
    key = path.rsplit(".", 1)[-1]
    return clock_related(ref, key) or clock_related(out, key)


def _untimed(value: Any) -> str:
    return mask_time(json.dumps(value, sort_keys=True))


def classify(
    question: ImportedQuestion, steps: Sequence[StepOutcome], alt: Sequence[StepOutcome] | None
) -> str:
    """The group of a question that did not match (see the module docstring)."""
    index = _closest(question, steps)
    if index is None:
        return MISMATCH
    value, other = steps[index].value, _alternative(alt, index)
    seed_dependent = other is not MISSING and _untimed(other) != _untimed(value)
    if not question.reference_valid:
        return RANDOM if seed_dependent else MISMATCH
    diffs = differences(question.reference_answer, value)
    varying = (
        {p for p, a, b in differences(other, value) if _untimed(a) != _untimed(b)}
        if seed_dependent
        else set()
    )
    if any(_within(p, varying) for p, _, _ in diffs):
        return RANDOM
    leaves = all(not isinstance(r, dict | list) and not isinstance(o, dict | list) for _, r, o in diffs)
    if diffs and leaves and all(_clock_leaf(p, r, o) for p, r, o in diffs):
        return CLOCK
    return MISMATCH


def judge(
    question: ImportedQuestion, run: ChainRun, alt: Sequence[StepOutcome] | None = None
) -> QuestionReplay:
    """Replayed: every step ran (tool errors allowed, a released implementation that raised is
    recorded as a source defect; unknown tools and dead servers are not). Reproduced: one matches."""
    steps, bindings = run.steps, run.bindings
    defects = tuple(
        f"step {i} {s.tool}: {s.value.get('message')}" for i, s in enumerate(steps) if s.code in _DEFECT_CODES
    )
    broken = next((s for s in steps if s.code in _BROKEN_CODES), None)
    if run.error is not None or broken is not None or len(steps) < len(question.verified_tool_chain):
        reason = run.error or (
            f"{broken.tool}: {broken.value.get('message')}" if broken else "the chain stopped early"
        )
        return QuestionReplay(
            question.index, False, False, None, (), reason, steps, MISMATCH, (), bindings, defects
        )
    best = _best_match(question, steps, run.window, alt)
    if best is None:
        verdict = classify(question, steps, alt)
        return QuestionReplay(
            question.index,
            True,
            False,
            None,
            (),
            "no step output matches the reference",
            steps,
            verdict,
            (),
            bindings,
            defects,
        )
    index, found = best
    return QuestionReplay(
        question.index,
        True,
        True,
        index,
        found.forgiven,
        None,
        steps,
        REPRODUCED,
        found.random,
        bindings,
        defects,
    )


async def _run_step(control: ControlClient, session: str, tool: str, args: dict[str, Any]) -> StepOutcome:
    before = await control.state_hash(session)
    result = await control.call(session, tool, args)
    after = await control.state_hash(session)
    return StepOutcome(tool, bool(result["ok"]), result["value"], before != after)


async def _run_chain(control: ControlClient, question: ImportedQuestion, known_text: str) -> ChainRun:
    session = await control.create_session()
    started = datetime.now(UTC)
    binder = Binder(known_text + "\n" + question.task)
    steps: list[StepOutcome] = []
    error = None
    try:
        for number, call in enumerate(question.verified_tool_chain):
            outcome = await _run_step(control, session, call.tool, binder.bind(number, call.args))
            binder.record(number, outcome.ok, outcome.value)
            steps.append(outcome)
    except ControlError as exc:
        error = str(exc)
    finally:
        await control.close_session(session)
    window = ClockWindow.around(started, datetime.now(UTC))
    return ChainRun(tuple(steps), tuple(binder.bindings), window, error)


async def _run_all(
    control: ControlClient, questions: Sequence[ImportedQuestion], known_text: str
) -> list[ChainRun]:
    try:
        return [await _run_chain(control, q, known_text) for q in questions]
    finally:
        await control.aclose()


def _serve_and_run(
    name: str, questions: Sequence[ImportedQuestion], root: Path, known_text: str, salt: str
) -> list[ChainRun]:
    env = {IMPORTED_DIR_ENV: str(root), OBSERVE_WRITES_ENV: "1", SEED_ENV: salt}
    server = ServerProcess(name, extra_env=env, preexec=apply_replay_limits)
    try:
        server.start()
        return asyncio.run(_run_all(server.control(), questions, known_text))
    except (ServerStartError, ControlError) as exc:
        now = ClockWindow.around(datetime.now(UTC), datetime.now(UTC))
        return [ChainRun((), (), now, f"{type(exc).__name__}: {exc}") for _ in questions]
    finally:
        server.stop()


def _seed_text(name: str, root: Path) -> str:
    files = read_files(env_dir(name, root) / "data")
    return "\n".join(data.decode("utf-8", errors="replace") for data in files.values())


def replay_environment(name: str, questions: Sequence[ImportedQuestion], root: Path) -> EnvironmentReplay:
    """Serve ``name`` from ``root`` in a child process and replay every question's chain; questions
    that do not match are run once more under another seed salt to tell randomness apart."""
    started = time.perf_counter()
    known = _seed_text(name, root)
    runs = _serve_and_run(name, questions, root, known, "")
    results = {q.index: judge(q, run) for q, run in zip(questions, runs, strict=True)}
    again = [q for q in questions if results[q.index].replayed and not results[q.index].reproduced]
    if again:
        alt_runs = _serve_and_run(name, again, root, known, ALT_SALT)
        first = {q.index: run for q, run in zip(questions, runs, strict=True)}
        for question, alt in zip(again, alt_runs, strict=True):
            if alt.error is None:
                results[question.index] = judge(question, first[question.index], alt.steps)
    ordered = tuple(results[q.index] for q in questions)
    writers = frozenset(s.tool for r in ordered for s in r.steps if s.wrote)
    return EnvironmentReplay(ordered, writers, time.perf_counter() - started)
